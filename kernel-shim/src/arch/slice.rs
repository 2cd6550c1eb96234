//! Slice interrupts (aarch64 and riscv64 `virt`): a busy CPU takes a timer interrupt every
//! slice before its tick's deadline, which the port handles by itself — the host and the
//! scheduler never see it — and ends by handing the emulator's turn on (`relax`).
//!
//! Why: QEMU 7.2's deterministic mode (`-icount`, one host thread) runs one vCPU at a time,
//! each until the next timer deadline of the whole machine, then the next in line. A CPU
//! handed work by another (a new thread, a wakeup, a reschedule IPI) starts it only when its
//! turn comes, and with few deadlines (a tick every 4 ms, tickless idle CPUs) that is
//! milliseconds later, where hardware takes microseconds; busy CPUs also take turns unevenly.
//! Slices put a deadline at least every `slice_us` on every busy CPU, so turns come that
//! often. On hardware or QEMU's parallel mode a slice costs one short interrupt.

use portable_atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use super::{counter, counter_freq, cpu_id, program_timer, MAX_CPUS};

/// The slice unless the boot line's `slice_us=` sets another: 50 µs. Measured start lag
/// (runnable → running) of the sysbench-like run on 8 vCPUs in deterministic mode is in
/// docs/kernel.md ("Slices").
pub const DEFAULT_SLICE_US: u64 = 50;

/// The longest slice the boot line may ask for (0 turns slices off).
pub const MAX_SLICE_US: u64 = 10_000;

static SLICE_US: AtomicU64 = AtomicU64::new(DEFAULT_SLICE_US);

/// Each CPU's tick deadline as the host asked for it (`u64::MAX`: stopped).
static DEADLINE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(u64::MAX) }; MAX_CPUS];

/// Whether each CPU runs a thread (an idle CPU takes no slices: it has no turn to hand on).
static RUNNING: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Sets the slice (µs; 0: none, the timer fires at the tick's deadline only). Boot CPU,
/// before any timer is armed.
pub fn set_slice_us(us: u64) {
    SLICE_US.store(us.min(MAX_SLICE_US), Relaxed);
}

/// Arms this CPU's tick to fire when the counter reaches `at` (at once if it has); it is a
/// one-shot timer, so the tick's `_period` needs no set-up. Slice interrupts come before it
/// while the CPU runs a thread.
pub fn timer_arm_at(at: u64, _period: u64) {
    let cpu = cpu_id().min(MAX_CPUS - 1);
    DEADLINE[cpu].store(at, Relaxed);
    program_timer(next_fire(cpu));
}

/// Stops this CPU's tick (a tickless idle CPU): the deadline moves to the end of time.
pub fn timer_stop() {
    DEADLINE[cpu_id().min(MAX_CPUS - 1)].store(u64::MAX, Relaxed);
    program_timer(u64::MAX);
}

/// The host switched this CPU to a thread (`true`) or to idle: slices only while it runs
/// one (an idle CPU has no turn to hand on). The timer armed for a slice may still fire
/// once after idle begins.
pub fn set_running(running: bool) {
    let cpu = cpu_id().min(MAX_CPUS - 1);
    if RUNNING[cpu].swap(running, Relaxed) != running && running {
        program_timer(next_fire(cpu));
    }
}

/// Called by the port for a timer interrupt: `true` if it is a slice's (the tick's deadline
/// is still ahead), in which case the next slice or the tick is armed and the host must not
/// see it; the port ends the exception with `relax`.
pub(super) fn take_slice() -> bool {
    let cpu = cpu_id().min(MAX_CPUS - 1);
    if counter() < DEADLINE[cpu].load(Relaxed) {
        program_timer(next_fire(cpu));
        true
    } else {
        false
    }
}

/// When `cpu`'s timer must fire next (`u64::MAX`: never): its tick's deadline, or the end of
/// the slice if that comes first.
fn next_fire(cpu: usize) -> u64 {
    let deadline = DEADLINE[cpu].load(Relaxed);
    let us = SLICE_US.load(Relaxed);
    if deadline == u64::MAX || us == 0 || !RUNNING[cpu].load(Relaxed) {
        return deadline;
    }
    let slice = (counter_freq() * us / 1_000_000).max(1);
    deadline.min(counter().saturating_add(slice))
}
