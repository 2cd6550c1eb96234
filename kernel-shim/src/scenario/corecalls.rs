//! The `corecalls` scenario: core calls from threads while ticks take the same locks.

use super::{check_invariants, finish, ncpus, ThreadKind, EXIT_FAILED};
use crate::arch;
use crate::kprintln;
use crate::sched;

pub(super) fn corecalls_main(rounds: u32) {
    let n = ncpus();
    kprintln!("corecalls: {} threads, {} calls each, hz={}", n, rounds, sched::hz());
    let mut slots = 0u64;
    for cpu in 0..n {
        let slot = arch::sys_spawn(ThreadKind::CoreCalls.number(), rounds as usize, 0, 1 << cpu);
        if slot < 0 {
            defmt::error!("corecalls: FAIL cannot create the thread for CPU {}", cpu);
            arch::exit(EXIT_FAILED);
        }
        slots |= 1 << slot;
    }
    // Reaching this point is the test: a call that never returned would have hung its CPU
    // (the watchdog's exit, or the suite's time limit).
    sched::wait_threads(slots);
    let ok = check_invariants("corecalls");
    let calls = n as u64 * rounds as u64 * 2;
    kprintln!("corecalls: all {} calls returned -> {}", calls, if ok { "OK" } else { "FAIL" });
    finish(ok)
}

/// Queries that take the core's locks (this CPU's balance lock, the task table), from thread
/// context, as report and wait loops do.
pub(super) fn corecalls(rounds: usize) {
    let cpu = arch::cpu_id();
    for _ in 0..rounds {
        let _ = sched::with_core(|k| k.balance_report(cpu));
        let _ = sched::with_core(|k| k.nr_tasks());
    }
}
