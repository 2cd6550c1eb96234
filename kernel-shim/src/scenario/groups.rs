//! The `groups` scenario: task groups as cgroup v2 has them, in the shapes of kselftest's
//! `test_cpu.c`, the simulator's `cargo xsim groups` cases on the emulated machine. Three
//! groups of `cpu.weight` 50, 100 and 150 with a spinner per CPU each share the machine 1:2:3;
//! with one spinner each (fewer than the CPUs) each gets a CPU; a nested hierarchy (A of 1000
//! holding A1 of 250 and A2 of 750, beside B of 1000, a spinner per CPU per leaf) splits A's
//! half 1:3; 40 spinners against one, in two groups of equal weight on CPU 0, share it
//! equally; a group capped by `cpu.max` "10000 100000" with a spinner per CPU gets 10 % of one
//! CPU. Each group's CPU time over the window is reported beside its target, and each case's
//! groups are deleted after it.

use portable_atomic::{AtomicBool, Ordering::SeqCst};
use sched_core::group::tree::GroupId;
use sched_core::{GroupError, SchedError};

use super::{check_invariants, count_primes, ncpus, ThreadKind, EXIT_FAILED};
use crate::arch;
use crate::kprintln;
use crate::sched;

/// The case is over: its spinners return.
static GR_STOP: AtomicBool = AtomicBool::new(false);

pub(super) fn groups_main(duration_ms: u32) {
    let n = ncpus();
    kprintln!("groups: {} CPUs, {} ms per case after a warm-up of a quarter of it", n, duration_ms);
    let mut ok = weights(n, duration_ms, n, "weights");
    if n >= 3 {
        ok &= weights(n, duration_ms, 1, "under");
    }
    ok &= nested(n, duration_ms);
    ok &= many(duration_ms);
    ok &= capped(n, duration_ms);
    ok &= check_invariants("groups");
    if ok {
        kprintln!("groups: OK");
        arch::exit(0);
    }
    defmt::error!("groups: FAIL");
    arch::exit(EXIT_FAILED);
}

/// `count` spinners allowed on `affinity` moved into `g`; their slots as a set (bit per
/// slot), `None` if one could not be created or moved.
fn spinners(g: GroupId, count: usize, affinity: u64) -> Option<u64> {
    let mut set = 0u64;
    for _ in 0..count {
        let slot = arch::sys_spawn(ThreadKind::GroupSpinner.number(), 0, 0, affinity);
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

/// Creates a group of `weight` under `parent`; `None` (reported) if refused.
fn group(parent: GroupId, weight: u32) -> Option<GroupId> {
    match sched::create_group(parent, weight) {
        Ok(g) => Some(g),
        Err(e) => {
            defmt::error!("groups: FAIL cannot create a group: {}", defmt::Debug2Format(&e));
            None
        }
    }
}

/// Deletes a case's groups, children first; false (reported) if one is refused. A thread
/// that has returned leaves its group when its CPU has switched away from it, so a group
/// still counting one is asked again, for up to 100 ms.
fn delete(groups: &[GroupId]) -> bool {
    groups.iter().all(|&g| {
        let mut tries = 0;
        loop {
            match sched::delete_group(g) {
                Ok(()) => return true,
                Err(SchedError::Group(GroupError::NotEmpty)) if tries < 100 => {
                    tries += 1;
                    arch::sys_sleep(1_000_000);
                }
                Err(e) => {
                    defmt::error!("groups: FAIL cannot delete a group: {}", defmt::Debug2Format(&e));
                    return false;
                }
            }
        }
    })
}

/// Prints a group's share of the case (`got` of `total`) beside its target (both in
/// hundredths of a percent).
fn report_share(case: &str, group: &str, got: u64, total: u64, target: u64) {
    let share = got * 10_000 / total.max(1);
    kprintln!(
        "groups: {=str}: {=str}: share {}.{=u64:02} % (target {}.{=u64:02} %)",
        case,
        group,
        share / 100,
        share % 100,
        target / 100,
        target % 100
    );
}

/// Weights 50, 100 and 150 with `per` spinners each: with a spinner per CPU (`weights`),
/// shares of their CPU time; with one each (`under`, fewer than the CPUs), each one's CPUs'
/// worth.
fn weights(n: usize, duration_ms: u32, per: usize, case: &str) -> bool {
    let mut sets = [0u64; 3];
    let mut groups = [GroupId::ROOT; 3];
    for (i, w) in [50u32, 100, 150].into_iter().enumerate() {
        let Some(g) = group(GroupId::ROOT, w) else { return false };
        let Some(s) = spinners(g, per, u64::MAX) else { return false };
        (groups[i], sets[i]) = (g, s);
    }
    let (got, took) = window(sets, duration_ms, || {});
    let total: u64 = got.iter().sum();
    for (i, w) in [50u64, 100, 150].into_iter().enumerate() {
        if per == n {
            let (share, target) = (got[i] * 10_000 / total.max(1), w * 10_000 / 300);
            kprintln!(
                "groups: {=str}: cpu.weight {}: share {}.{=u64:02} % (target {}.{=u64:02} %)",
                case,
                w,
                share / 100,
                share % 100,
                target / 100,
                target % 100
            );
        } else {
            // Thousandths of a CPU.
            let worth = got[i] * 1000 / took.max(1);
            kprintln!(
                "groups: {=str}: cpu.weight {}: {}.{=u64:03} CPU (target 1.000 CPU)",
                case,
                w,
                worth / 1000,
                worth % 1000
            );
        }
    }
    got.iter().all(|&g| g > 0) && delete(&groups)
}

/// A (1000) holding A1 (250) and A2 (750), beside B (1000); a spinner per CPU in each leaf.
fn nested(n: usize, duration_ms: u32) -> bool {
    let (Some(a), Some(b)) = (group(GroupId::ROOT, 1000), group(GroupId::ROOT, 1000)) else { return false };
    let (Some(a1), Some(a2)) = (group(a, 250), group(a, 750)) else { return false };
    let mut sets = [0u64; 3];
    for (i, g) in [b, a1, a2].into_iter().enumerate() {
        let Some(s) = spinners(g, n, u64::MAX) else { return false };
        sets[i] = s;
    }
    let (got, _) = window(sets, duration_ms, || {});
    let total: u64 = got.iter().sum();
    for (i, (name, target)) in [("B", 5000), ("A/A1", 1250), ("A/A2", 3750)].into_iter().enumerate() {
        report_share("nested", name, got[i], total, target);
    }
    got.iter().all(|&g| g > 0) && delete(&[a1, a2, a, b])
}

/// 40 spinners against one, in two groups of equal weight, all on CPU 0.
fn many(duration_ms: u32) -> bool {
    let (Some(m), Some(o)) = (group(GroupId::ROOT, 100), group(GroupId::ROOT, 100)) else { return false };
    let (Some(sm), Some(so)) = (spinners(m, 40, 1), spinners(o, 1, 1)) else { return false };
    let (got, _) = window([sm, so], duration_ms, || {});
    let total: u64 = got.iter().sum();
    report_share("many", "40 threads", got[0], total, 5000);
    report_share("many", "1 thread", got[1], total, 5000);
    got.iter().all(|&g| g > 0) && delete(&[m, o])
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
    let Some(set) = spinners(g, n, u64::MAX) else { return false };
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
    got > 0 && delete(&[g])
}

/// A spinner of the groups scenario: busy until its case ends.
pub(super) fn group_spinner() {
    while !GR_STOP.load(portable_atomic::Ordering::Relaxed) {
        core::hint::black_box(count_primes(200));
    }
}
