//! System calls: how a kernel thread enters the scheduler. The numbers and the calls are the
//! same on every machine; only the trap instruction differs (the port's `trap`: `svc #0` on
//! aarch64 and Cortex-M, `ebreak` on riscv64), with the number in a register the port names.

use super::{trap, wfi};

/// Create a thread (kind, argument, nice, affinity); returns its slot.
pub const SYS_SPAWN: u64 = 1;
/// Give up the CPU once.
pub const SYS_YIELD: u64 = 2;
/// End the calling thread.
pub const SYS_EXIT: u64 = 3;
/// Block until unparked (returns at once if an unpark is pending).
pub const SYS_PARK: u64 = 4;
/// Unpark a thread (by slot).
pub const SYS_UNPARK: u64 = 5;
/// Set a thread's allowed CPUs (by slot).
pub const SYS_SET_AFFINITY: u64 = 6;
/// Block for at least the given number of nanoseconds (woken from a tick).
pub const SYS_SLEEP: u64 = 7;

/// Creates a thread of `kind` with argument `arg`, nice value and affinity (bit per CPU).
/// Returns the thread slot, or a negative error.
pub fn sys_spawn(kind: usize, arg: usize, nice: i32, affinity: u64) -> i64 {
    trap(SYS_SPAWN, kind as u64, arg as u64, nice as i64 as u64, affinity) as i64
}

/// Yields the CPU once.
pub fn sys_yield() {
    trap(SYS_YIELD, 0, 0, 0, 0);
}

/// Blocks the calling thread until [`sys_unpark`] names it; returns at once if that
/// already happened since its last park.
pub fn sys_park() {
    trap(SYS_PARK, 0, 0, 0, 0);
}

/// Makes thread `slot` runnable if it is parked, else lets its next park return at once.
/// Returns false if `slot` is not a live thread.
pub fn sys_unpark(slot: usize) -> bool {
    trap(SYS_UNPARK, slot as u64, 0, 0, 0) == 0
}

/// Sets the allowed CPUs (bit per CPU) of thread `slot` (the core's `set_affinity`).
/// Returns false if `slot` is not a live thread or the core refused the mask.
pub fn sys_set_affinity(slot: usize, affinity: u64) -> bool {
    trap(SYS_SET_AFFINITY, slot as u64, affinity, 0, 0) == 0
}

/// Blocks the calling thread for at least `ns` nanoseconds (it is woken by the first tick
/// of any CPU after the deadline, so up to one tick period later); `ns == 0` yields.
pub fn sys_sleep(ns: u64) {
    // A 32-bit port's trap carries 32 bits: a longer sleep is several (each at least as long
    // as asked, so the whole is too).
    let most = if usize::BITS < 64 { u32::MAX as u64 } else { u64::MAX };
    let mut left = ns;
    loop {
        let part = left.min(most);
        trap(SYS_SLEEP, part, 0, 0, 0);
        left -= part;
        if left == 0 {
            break;
        }
    }
}

/// Ends the calling thread.
pub fn sys_exit() -> ! {
    trap(SYS_EXIT, 0, 0, 0, 0);
    // The scheduler never resumes an exited thread.
    loop {
        wfi();
    }
}
