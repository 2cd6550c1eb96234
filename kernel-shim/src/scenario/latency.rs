//! The `latency` scenario: spinners beside periodic threads that run a short burst and sleep,
//! every other one with a short EEVDF slice, first under CFS and then, in the same boot, under
//! EEVDF (switched at run time), or under one of them (`policy=`). Per phase and group it
//! reports the wake-to-run times (mean, p50, p99, max) and CPU shares: the experiment of
//! `cargo xsim ab --workload latency`, on the emulated machine.

use portable_atomic::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use sched_core::Features;

use super::{check_invariants, count_primes, finish, ncpus, Latency, Policies, ThreadKind};
use crate::arch;
use crate::kprintln;
use crate::sched;

/// Most wake-to-run samples kept per phase.
const LT_SAMPLES: usize = 8192;
/// Each sample: the group in the top bit (1: short slice), the wake-to-run time in µs below.
static LT_SAMPLE: [AtomicU32; LT_SAMPLES] = [const { AtomicU32::new(0) }; LT_SAMPLES];
static LT_COUNT: AtomicU32 = AtomicU32::new(0);
/// The phase is over: every thread of it returns.
static LT_STOP: AtomicBool = AtomicBool::new(false);
/// A periodic thread could not get its slice.
static LT_SLICE_REFUSED: AtomicBool = AtomicBool::new(false);
static LT_RUN_NS: AtomicU64 = AtomicU64::new(0);
static LT_SLEEP_NS: AtomicU64 = AtomicU64::new(0);
static LT_SLICE_NS: AtomicU64 = AtomicU64::new(0);
const GROUP_BIT: u32 = 1 << 31;

pub(super) fn latency_main(l: Latency) {
    LT_RUN_NS.store(l.run_us as u64 * 1000, Relaxed);
    LT_SLEEP_NS.store(l.sleep_us as u64 * 1000, Relaxed);
    LT_SLICE_NS.store(l.slice_us as u64 * 1000, Relaxed);
    kprintln!(
        "latency: {} spinners + {} periodic threads ({} us on, {} us asleep; every other with a {} us slice), {} ms per phase",
        l.spinners,
        l.periodic,
        l.run_us,
        l.sleep_us,
        l.slice_us,
        l.duration_ms
    );
    let base = sched::features() - Features::EEVDF;
    let phases: &[(&str, Features)] = match l.policies {
        Policies::Both => &[("cfs", base), ("eevdf", base.union(Features::EEVDF))],
        Policies::Cfs => &[("cfs", base)],
        Policies::Eevdf => &[("eevdf", base.union(Features::EEVDF))],
    };
    let mut ok = true;
    for &(name, features) in phases {
        sched::set_features(features);
        ok &= phase(name, &l);
    }
    ok &= check_invariants("latency");
    if ok {
        kprintln!("latency: OK");
    } else {
        defmt::error!("latency: FAIL");
    }
    finish(ok)
}

/// One phase: the threads run for the phase's length, then stop; its report. False if a
/// check failed.
fn phase(name: &str, l: &Latency) -> bool {
    LT_STOP.store(false, SeqCst);
    LT_COUNT.store(0, SeqCst);
    let (mut spinners, mut periodic) = (0u64, [0u64; 2]);
    for i in 0..l.spinners + l.periodic {
        let (kind, arg) = if i < l.spinners {
            (ThreadKind::LatencySpinner, 0)
        } else {
            (ThreadKind::Periodic, (i - l.spinners) as usize)
        };
        let slot = arch::sys_spawn(kind.number(), arg, 0, u64::MAX);
        if slot < 0 {
            defmt::error!("latency: FAIL cannot create thread {}", i);
            return false;
        }
        match kind {
            ThreadKind::LatencySpinner => spinners |= 1 << slot,
            _ => periodic[if arg.is_multiple_of(2) { 1 } else { 0 }] |= 1 << slot,
        }
    }
    let t0 = arch::now_ns();
    let cpu_of = |set: u64| -> u64 {
        (0..arch::MAX_THREADS).filter(|s| set >> s & 1 != 0).map(sched::thread_cpu_ns_now).sum()
    };
    let before = [cpu_of(spinners), cpu_of(periodic[0]), cpu_of(periodic[1])];
    arch::sys_sleep(l.duration_ms as u64 * 1_000_000);
    let window = arch::now_ns() - t0;
    let after = [cpu_of(spinners), cpu_of(periodic[0]), cpu_of(periodic[1])];
    LT_STOP.store(true, SeqCst);
    sched::wait_threads(spinners | periodic[0] | periodic[1]);
    let share = |i: usize| (after[i] - before[i]) * 10_000 / (window * ncpus() as u64).max(1);
    let all = LT_COUNT.load(SeqCst) as usize;
    let n = all.min(LT_SAMPLES);
    if all > n {
        kprintln!("latency: {=str}: {} wakeups, the first {} kept", name, all, n);
    }
    let mut ok = !LT_SLICE_REFUSED.load(SeqCst);
    for (group, label) in [(1, "short slice"), (0, "default slice")] {
        let count = (0..n).filter(|&i| LT_SAMPLE[i].load(Relaxed) & GROUP_BIT != 0).count();
        let count = if group == 1 { count } else { n - count };
        let q = |q: u32| quantile_us(n, group, count, q);
        let s = share(if group == 1 { 2 } else { 1 });
        let sum: u64 = (0..n)
            .map(|i| LT_SAMPLE[i].load(Relaxed))
            .filter(|v| (v & GROUP_BIT != 0) == (group == 1))
            .map(|v| (v & !GROUP_BIT) as u64)
            .sum();
        kprintln!(
            "latency: {=str}: {=str}: {} wakeups, wake-to-run mean {} us p50 {} us p99 {} us max {} us, CPU share {}.{=u64:02} %",
            name,
            label,
            count,
            sum / count.max(1) as u64,
            q(50),
            q(99),
            q(100),
            s / 100,
            s % 100
        );
        ok &= count > 0;
    }
    let s = share(0);
    kprintln!("latency: {=str}: spinners: CPU share {}.{=u64:02} %", name, s / 100, s % 100);
    ok
}

/// The `pct`-th percentile (nearest rank) of the first `n` samples' wake-to-run times in
/// group `group` (`count` of them), µs: the smallest time with at least `pct` % of the group at
/// or below it. No buffer: a binary search over the time, counting.
fn quantile_us(n: usize, group: u32, count: usize, pct: u32) -> u32 {
    if count == 0 {
        return 0;
    }
    let rank = (count * pct as usize).div_ceil(100).max(1);
    let of = |i: usize| {
        let v = LT_SAMPLE[i].load(Relaxed);
        (v & GROUP_BIT != 0) == (group == 1)
    };
    let (mut lo, mut hi) = (0u32, GROUP_BIT - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let at_or_below = (0..n).filter(|&i| of(i) && LT_SAMPLE[i].load(Relaxed) & !GROUP_BIT <= mid).count();
        if at_or_below >= rank {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// A spinner: busy until the phase ends.
pub(super) fn lt_spinner() {
    while !LT_STOP.load(Relaxed) {
        core::hint::black_box(count_primes(200));
    }
}

/// A periodic thread (`i`: its number; even ones ask for the short slice): a burst of CPU
/// time, a sleep, and after each sleep its wake-to-run time, until the phase ends.
pub(super) fn periodic(i: usize) {
    let Some(me) = sched::current_thread() else { return };
    let short = i.is_multiple_of(2);
    if short && sched::set_slice(me, LT_SLICE_NS.load(Relaxed)).is_err() {
        LT_SLICE_REFUSED.store(true, SeqCst);
    }
    let (run, sleep) = (LT_RUN_NS.load(Relaxed), LT_SLEEP_NS.load(Relaxed));
    while !LT_STOP.load(Relaxed) {
        let until = sched::thread_cpu_ns_now(me) + run;
        while sched::thread_cpu_ns_now(me) < until {
            core::hint::black_box(count_primes(30));
        }
        sched::forget_start_lag(me);
        arch::sys_sleep(sleep);
        // None: woken before its CPU had switched away from it, so it never waited.
        let Some(lag) = sched::last_start_lag(me) else { continue };
        let us = (lag / 1000).min(GROUP_BIT as u64 - 1) as u32;
        let k = LT_COUNT.fetch_add(1, Relaxed) as usize;
        if let Some(s) = LT_SAMPLE.get(k) {
            s.store(us | if short { GROUP_BIT } else { 0 }, Relaxed);
        }
    }
}
