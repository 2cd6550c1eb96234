//! The defmt global logger: frames go raw to the PL011. A frame is written whole under a
//! spin lock taken with IRQs masked on this CPU, so frames from different CPUs never
//! interleave and an interrupt handler that logs cannot deadlock against its own CPU.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::{cpu_id, uart_write, MAX_CPUS};

/// Holder CPU + 1, 0 when free.
static HOLDER: AtomicUsize = AtomicUsize::new(0);
/// Nesting depth of the holder (a panic while a frame is open re-enters on the same CPU).
static DEPTH: AtomicUsize = AtomicUsize::new(0);
/// DAIF of each CPU before it acquired the logger.
static SAVED_DAIF: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

struct EncoderCell(UnsafeCell<defmt::Encoder>);

// SAFETY: the encoder is only touched by the CPU that holds `HOLDER`, with its IRQs masked.
unsafe impl Sync for EncoderCell {}

static ENCODER: EncoderCell = EncoderCell(UnsafeCell::new(defmt::Encoder::new()));

fn encoder() -> &'static mut defmt::Encoder {
    // SAFETY: called only between acquire and release, on the CPU holding the logger with
    // IRQs masked, so this is the only live reference.
    unsafe { &mut *ENCODER.0.get() }
}

#[defmt::global_logger]
struct Logger;

// SAFETY: acquire/release bracket every frame with the lock above; `write` and `flush` are
// only called in between, as the trait requires.
unsafe impl defmt::Logger for Logger {
    fn acquire() {
        let daif: u64;
        // SAFETY: reads DAIF and masks IRQs/FIQs (a compiler barrier: not `nomem`).
        unsafe { core::arch::asm!("mrs {0}, daif", "msr daifset, #3", out(reg) daif, options(nostack)) };
        let me = cpu_id().min(MAX_CPUS - 1);
        if HOLDER.load(Ordering::Relaxed) == me + 1 {
            // Re-entered (a panic inside a frame): close the open frame, start a new one.
            DEPTH.fetch_add(1, Ordering::Relaxed);
            encoder().end_frame(uart_write);
            encoder().start_frame(uart_write);
            return;
        }
        while HOLDER.compare_exchange(0, me + 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            super::relax();
        }
        DEPTH.store(1, Ordering::Relaxed);
        SAVED_DAIF[me].store(daif, Ordering::Relaxed);
        encoder().start_frame(uart_write);
    }

    unsafe fn flush() {}

    unsafe fn release() {
        encoder().end_frame(uart_write);
        if DEPTH.fetch_sub(1, Ordering::Relaxed) > 1 {
            encoder().start_frame(uart_write);
            return;
        }
        let me = cpu_id().min(MAX_CPUS - 1);
        let daif = SAVED_DAIF[me].load(Ordering::Relaxed);
        HOLDER.store(0, Ordering::Release);
        // SAFETY: restores the DAIF value saved in acquire (a compiler barrier as well).
        unsafe { core::arch::asm!("msr daif, {0}", in(reg) daif, options(nostack)) };
    }

    unsafe fn write(bytes: &[u8]) {
        encoder().write(bytes, uart_write);
    }
}

defmt::timestamp!("{=u64:us} c{=usize}", super::now_ns() / 1000, cpu_id());
