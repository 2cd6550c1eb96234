//! The `groups` scenario: task groups as cgroup v2 has them, in the shapes of kselftest's
//! `test_cpu.c`. Three groups of `cpu.weight` 50, 100 and 150 with a spinner per CPU each
//! share the machine 1:2:3; a group capped by `cpu.max` "10000 100000" with a spinner per CPU
//! gets 10 % of one CPU. Each group's CPU time over the window is reported beside its target
//! (the simulator's `cargo xsim groups` rows, on the emulated machine).

use portable_atomic::{AtomicBool, Ordering::SeqCst};
use sched_core::group::tree::GroupId;

use super::{check_invariants, count_primes, ncpus, ThreadKind, EXIT_FAILED};
use crate::arch;
use crate::kprintln;
use crate::sched;

/// The case is over: its spinners return.
static GR_STOP: AtomicBool = AtomicBool::new(false);

pub(super) fn groups_main(duration_ms: u32) {
    let n = ncpus();
    kprintln!("groups: {} CPUs, {} ms per case after a warm-up of a quarter of it", n, duration_ms);
    let mut ok = weights(n, duration_ms);
    ok &= capped(n, duration_ms);
    ok &= check_invariants("groups");
    if ok {
        kprintln!("groups: OK");
        arch::exit(0);
    }
    defmt::error!("groups: FAIL");
    arch::exit(EXIT_FAILED);
}

/// `count` spinners moved into `g`; their slots as a set (bit per slot), `None` if one
/// could not be created or moved.
fn spinners(g: GroupId, count: usize) -> Option<u64> {
    let mut set = 0u64;
    for _ in 0..count {
        let slot = arch::sys_spawn(ThreadKind::GroupSpinner.number(), 0, 0, u64::MAX);
        if slot < 0 {
            defmt::error!("groups: FAIL cannot create a spinner");
            return None;
        }
        set |= 1 << slot;
        if let Err(e) = sched::move_thread(slot as usize, g) {
            defmt::error!("groups: FAIL cannot move a spinner: {}", defmt::Debug2Format(&e));
            return None;
        }
    }
    Some(set)
}

/// Runs a warm-up then the window (`at_start` called as it opens); each set's CPU time in
/// the window and the window (ns).
fn window<const N: usize>(sets: [u64; N], duration_ms: u32, at_start: impl FnOnce()) -> ([u64; N], u64) {
    let cpu_of = |set: u64| -> u64 {
        (0..arch::MAX_THREADS).filter(|s| set >> s & 1 != 0).map(sched::thread_cpu_ns_now).sum()
    };
    arch::sys_sleep(duration_ms as u64 * 250_000);
    at_start();
    let t0 = arch::now_ns();
    let before = sets.map(cpu_of);
    arch::sys_sleep(duration_ms as u64 * 1_000_000);
    let took = arch::now_ns() - t0;
    let after = sets.map(cpu_of);
    GR_STOP.store(true, SeqCst);
    sched::wait_threads(sets.iter().fold(0, |a, s| a | s));
    GR_STOP.store(false, SeqCst);
    let mut got = [0; N];
    for i in 0..N {
        got[i] = after[i] - before[i];
    }
    (got, took)
}

/// Weights 50, 100 and 150, a spinner per CPU each: shares of the CPU time they had.
fn weights(n: usize, duration_ms: u32) -> bool {
    let mut sets = [0u64; 3];
    for (i, w) in [50u32, 100, 150].into_iter().enumerate() {
        let Ok(g) = sched::create_group(GroupId::ROOT, w) else {
            defmt::error!("groups: FAIL cannot create a group");
            return false;
        };
        let Some(s) = spinners(g, n) else { return false };
        sets[i] = s;
    }
    let (got, _) = window(sets, duration_ms, || {});
    let total: u64 = got.iter().sum::<u64>().max(1);
    for (i, w) in [50u64, 100, 150].into_iter().enumerate() {
        // Hundredths of a percent.
        let share = got[i] * 10_000 / total;
        let target = w * 10_000 / 300;
        kprintln!(
            "groups: weights: cpu.weight {}: share {}.{=u64:02} % (target {}.{=u64:02} %)",
            w,
            share / 100,
            share % 100,
            target / 100,
            target % 100
        );
    }
    got.iter().all(|&g| g > 0)
}

/// `cpu.max` "10000 100000" on a group with a spinner per CPU: its CPUs' worth.
fn capped(n: usize, duration_ms: u32) -> bool {
    let Ok(g) = sched::create_group(GroupId::ROOT, 100) else {
        defmt::error!("groups: FAIL cannot create a group");
        return false;
    };
    if sched::set_group_max(g, "10000 100000").is_err() {
        defmt::error!("groups: FAIL cpu.max refused");
        return false;
    }
    let Some(set) = spinners(g, n) else { return false };
    let mut s0 = Default::default();
    let ([got], took) = window([set], duration_ms, || s0 = sched::group_bandwidth(g));
    let s0: sched_core::group::bandwidth::BandwidthStats = s0;
    let s = sched::group_bandwidth(g);
    // Thousandths of a CPU.
    let worth = got * 1000 / took.max(1);
    kprintln!(
        "groups: cpu.max 10000 100000: {}.{=u64:03} CPU (target 0.100 CPU), nr_periods {}, nr_throttled {}, throttled {} ms",
        worth / 1000,
        worth % 1000,
        s.nr_periods - s0.nr_periods,
        s.nr_throttled - s0.nr_throttled,
        (s.throttled_ns - s0.throttled_ns) / 1_000_000
    );
    got > 0
}

/// A spinner of the groups scenario: busy until its case ends.
pub(super) fn group_spinner() {
    while !GR_STOP.load(portable_atomic::Ordering::Relaxed) {
        core::hint::black_box(count_primes(200));
    }
}
