//! The kernel's stacks, the same on every machine: one boot (then idle) stack and one
//! exception stack per CPU, one stack per thread, all static. A canary in the lowest 64 bytes of
//! each catches an overflow; each CPU's exception stack (every call into the core runs on it)
//! and every thread stack are painted at boot so their high-water marks can be measured.
//! Other CPUs than a stack's owner read its paint and canary only through [`peek`], a load
//! instruction.
//!
//! The ports' boot code finds the boot stacks by the symbol `__boot_stacks`.

use core::cell::UnsafeCell;

use super::{Frame, FRAME_SIZE, MAX_CPUS, MAX_THREADS};

/// Stack size of every kernel thread.
#[cfg(not(target_arch = "arm"))]
pub const STACK_SIZE: usize = 16 * 1024;
/// Boot (and then idle) stack of each CPU: CPU 0 initialises the scheduler on it, and
/// `Smp::init_with` builds each CPU's runqueue on the stack. A power of two (the riscv64 boot
/// code shifts by it).
#[cfg(not(target_arch = "arm"))]
pub const BOOT_STACK_SIZE: usize = 128 * 1024;
/// Exception stack of each CPU: every call into the core runs on it. The suite measures its
/// high-water mark (docs/measurements.md, sizes), fails above 4 KB; this is twice that budget.
#[cfg(not(target_arch = "arm"))]
pub const EXC_STACK_SIZE: usize = 8 * 1024;
/// A microcontroller thread's stack: every report prints its deepest thread's use
/// (`thread stack high-water`), and the suite fails a case whose deepest thread uses more
/// than seven eighths.
#[cfg(target_arch = "arm")]
pub const STACK_SIZE: usize = 2 * 1024;
/// A microcontroller's boot and idle stack (the process stack of the idle loop).
#[cfg(target_arch = "arm")]
pub const BOOT_STACK_SIZE: usize = 4 * 1024;
/// A microcontroller's exception stack (the main stack every handler runs on): the 4 KB
/// budget of a public call.
#[cfg(target_arch = "arm")]
pub const EXC_STACK_SIZE: usize = 4 * 1024;

const _: () = assert!(BOOT_STACK_SIZE.is_power_of_two());
// A frame keeps the stack aligned as the ABI wants it (16 bytes on 64-bit, 8 on 32-bit).
const _: () =
    assert!(FRAME_SIZE.is_multiple_of(2 * size_of::<usize>()) && core::mem::size_of::<Frame>() == FRAME_SIZE);

/// A statically allocated, 16-byte aligned stack area (zeroed, so it lands in `.bss`).
#[repr(C, align(16))]
pub struct Area<const N: usize>(UnsafeCell<[u8; N]>);

// SAFETY: the kernel forms no reference to an area, only to a frame inside one: the CPU that
// takes an exception holds its saved frame as `&mut Frame` until the handler returns, and a
// spawn writes a thread's first frame before any CPU runs it. Otherwise a stack is used
// through raw addresses by the CPU or thread that owns it; others only [`peek`] at its words
// (the high-water marks, the canaries), which is no Rust memory access.
unsafe impl<const N: usize> Sync for Area<N> {}

impl<const N: usize> Area<N> {
    const fn new() -> Self {
        Area(UnsafeCell::new([0; N]))
    }

    fn base(&self) -> usize {
        self.0.get() as usize
    }
}

/// The boot stacks (named for the ports' boot code, which sets each CPU's stack pointer to
/// `__boot_stacks + (cpu + 1) * BOOT_STACK_SIZE`).
#[unsafe(no_mangle)]
static __boot_stacks: Area<{ BOOT_STACK_SIZE * MAX_CPUS }> = Area::new();
static EXC_STACKS: Area<{ EXC_STACK_SIZE * MAX_CPUS }> = Area::new();
static THREAD_STACKS: Area<{ STACK_SIZE * MAX_THREADS }> = Area::new();

/// Written over the lowest [`CANARY_BYTES`] of every stack; a stack that grew past its end
/// overwrote some of them.
const CANARY: u64 = 0x57ac_c0de_5afe_f00d;

/// The canary's band: eight words, not one, because a frame may leave a word unwritten (its
/// alignment padding), and an overflow whose padding fell on a single canary word would pass
/// unseen.
pub const CANARY_BYTES: usize = 64;

/// Fills each CPU's exception stack at boot; the deepest word no longer holding it marks how
/// far the stack has ever grown.
const PAINT: u64 = 0x5eed_5eed_5eed_5eed;

fn exc_bottom(cpu: usize) -> usize {
    EXC_STACKS.base() + cpu.min(MAX_CPUS - 1) * EXC_STACK_SIZE
}

fn boot_bottom(cpu: usize) -> usize {
    __boot_stacks.base() + cpu.min(MAX_CPUS - 1) * BOOT_STACK_SIZE
}

/// The lowest address of thread `slot`'s stack, where its canary's band begins.
pub fn thread_bottom(slot: usize) -> usize {
    THREAD_STACKS.base() + slot.min(MAX_THREADS - 1) * STACK_SIZE
}

/// The initial stack pointer of `cpu`'s boot stack.
#[cfg_attr(not(target_arch = "arm"), allow(dead_code))]
pub(super) fn boot_stack_top(cpu: usize) -> usize {
    boot_bottom(cpu) + BOOT_STACK_SIZE
}

/// The initial stack pointer of `cpu`'s exception stack.
pub(super) fn exc_stack_top(cpu: usize) -> usize {
    exc_bottom(cpu) + EXC_STACK_SIZE
}

/// At a CPU's entry: canaries on its exception and boot stacks, paint on its exception stack.
pub(super) fn prepare_cpu(cpu: usize) {
    let exc = exc_bottom(cpu);
    write_canary(exc);
    write_canary(boot_bottom(cpu));
    for w in (exc + CANARY_BYTES..exc + EXC_STACK_SIZE).step_by(8) {
        // SAFETY: this CPU's own exception stack, which nothing uses before this CPU takes
        // its first exception (interrupts are masked until its idle loop).
        unsafe { (w as *mut u64).write_volatile(PAINT) };
    }
}

/// At boot: paint every thread stack, so [`thread_stack_high_water`] can tell how deep any
/// thread has gone (a slot's later threads only find the paint their predecessors left).
pub(super) fn paint_thread_stacks() {
    let base = thread_bottom(0);
    for w in (base..base + STACK_SIZE * MAX_THREADS).step_by(8) {
        // SAFETY: the static thread stack area, which no thread uses before the first spawn
        // (this runs on CPU 0 before it starts anything).
        unsafe { (w as *mut u64).write_volatile(PAINT) };
    }
}

/// The most bytes any thread's stack has used so far (from the boot's paint; the first frame
/// a spawn writes at the top counts as used).
pub fn thread_stack_high_water() -> usize {
    (0..MAX_THREADS).map(|slot| high_water(thread_bottom(slot), STACK_SIZE)).max().unwrap_or(0)
}

/// Bytes used of the stack `[bottom, bottom + size)`: everything above the lowest word that
/// no longer holds the paint (the canary's band at the bottom is not counted).
fn high_water(bottom: usize, size: usize) -> usize {
    let untouched =
        (bottom + CANARY_BYTES..bottom + size).step_by(8).take_while(|&w| peek(w) == PAINT).count();
    size - CANARY_BYTES - untouched * 8
}

/// The 8-byte word at `addr`, an aligned word of a static stack area, read with load
/// instructions of the machine's own: a stack's owner (a thread or handler on another CPU) may
/// be writing it, and a Rust read racing with those writes would be a data race, undefined
/// behaviour, even volatile. A load gives the old value or the new (on 32-bit, each half
/// either), and the callers ask only whether it still holds a pattern: either answer is a
/// valid measurement.
fn peek(addr: usize) -> u64 {
    #[cfg(target_arch = "aarch64")]
    {
        let v: u64;
        // SAFETY: `addr` is an 8-byte aligned word of a static stack area, always mapped; the
        // load writes nothing and touches no other memory.
        unsafe {
            core::arch::asm!("ldr {v}, [{a}]", a = in(reg) addr, v = out(reg) v, options(nostack, readonly, preserves_flags))
        };
        v
    }
    #[cfg(target_arch = "riscv64")]
    {
        let v: u64;
        // SAFETY: as on aarch64: an aligned word of a static stack area, one load.
        unsafe {
            core::arch::asm!("ld {v}, 0({a})", a = in(reg) addr, v = out(reg) v, options(nostack, readonly, preserves_flags))
        };
        v
    }
    #[cfg(target_arch = "arm")]
    {
        let (lo, hi): (u32, u32);
        // SAFETY: as on aarch64: an aligned word of a static stack area, two 32-bit loads.
        unsafe {
            core::arch::asm!(
                "ldr {lo}, [{a}]",
                "ldr {hi}, [{a}, #4]",
                a = in(reg) addr,
                lo = out(reg) lo,
                hi = out(reg) hi,
                options(nostack, readonly, preserves_flags)
            )
        };
        (hi as u64) << 32 | lo as u64
    }
}

/// Writes the first frame of thread `slot` at the top of its stack (the port's
/// `Frame::new_thread`: it starts at `entry(a0, a1)` in kernel mode with interrupts on) and
/// its canary. Returns the frame's address.
pub fn init_thread_frame(slot: usize, entry: super::ThreadEntry, a0: usize, a1: usize) -> usize {
    let bottom = thread_bottom(slot);
    let top = bottom + STACK_SIZE;
    let frame = (top - FRAME_SIZE) as *mut Frame;
    // SAFETY: the frame lies inside thread `slot`'s stack, which the caller owns: the slot is
    // allocated to it and no CPU runs on that stack.
    unsafe { frame.write(Frame::new_thread(entry, a0, a1, top)) };
    write_canary(bottom);
    frame as usize
}

/// The most bytes of `cpu`'s exception stack ever used (every call into the core runs on it),
/// from the paint the boot left on it.
pub fn exc_stack_high_water(cpu: usize) -> usize {
    high_water(exc_bottom(cpu), EXC_STACK_SIZE)
}

/// Writes the canary's band at the bottom of a stack that is not in use down there: a CPU's
/// own stacks at its entry, or a thread's before it starts.
fn write_canary(bottom: usize) {
    for w in (bottom..bottom + CANARY_BYTES).step_by(8) {
        // SAFETY: the lowest words of one of the static stack areas, always mapped, owned by
        // the caller and far below anything its stack uses yet.
        unsafe { (w as *mut u64).write_volatile(CANARY) };
    }
}

fn canary_intact(bottom: usize) -> bool {
    // (A stack reaches these words only by overflowing, which is what this detects; its owner
    // may be running, so they are peeked at.)
    (bottom..bottom + CANARY_BYTES).step_by(8).all(|w| peek(w) == CANARY)
}

/// Whether thread `slot`'s stack still has its canary.
pub fn thread_stack_intact(slot: usize) -> bool {
    canary_intact(thread_bottom(slot))
}

/// Whether `cpu`'s exception and boot (idle) stacks still have their canaries.
pub fn cpu_stacks_intact(cpu: usize) -> bool {
    canary_intact(exc_bottom(cpu)) && canary_intact(boot_bottom(cpu))
}
