//! The defmt global logger: frames go raw to the machine's UART (the port's `uart_write`). A
//! frame is written whole under a spin lock taken with interrupts masked on this CPU, so frames from different CPUs never
//! interleave and an interrupt handler that logs cannot deadlock against its own CPU.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::{cpu_id, irq_restore, irq_save, uart_write, MAX_CPUS};

/// Holder CPU + 1, 0 when free.
static HOLDER: AtomicUsize = AtomicUsize::new(0);
/// Nesting depth of the holder (a panic while a frame is open re-enters on the same CPU).
static DEPTH: AtomicUsize = AtomicUsize::new(0);
/// Whether each CPU had interrupts enabled before it acquired the logger.
static SAVED_MASK: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

struct EncoderCell(UnsafeCell<defmt::Encoder>);

// SAFETY: the encoder is only touched by the CPU that holds `HOLDER`, with its interrupts
// masked.
unsafe impl Sync for EncoderCell {}

static ENCODER: EncoderCell = EncoderCell(UnsafeCell::new(defmt::Encoder::new()));

fn encoder() -> &'static mut defmt::Encoder {
    // SAFETY: called only between acquire and release, on the CPU holding the logger with
    // interrupts masked, so this is the only live reference.
    unsafe { &mut *ENCODER.0.get() }
}

#[defmt::global_logger]
struct Logger;

// SAFETY: acquire/release bracket every frame with the lock above; `write` and `flush` are
// only called in between, as the trait requires.
unsafe impl defmt::Logger for Logger {
    fn acquire() {
        let mask = irq_save();
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
        SAVED_MASK[me].store(mask, Ordering::Relaxed);
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
        let mask = SAVED_MASK[me].load(Ordering::Relaxed);
        HOLDER.store(0, Ordering::Release);
        irq_restore(mask);
    }

    unsafe fn write(bytes: &[u8]) {
        encoder().write(bytes, uart_write);
    }
}

defmt::timestamp!("{=u64:us} c{=usize}", super::now_ns() / 1000, cpu_id());
