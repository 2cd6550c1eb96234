//! PELT's arithmetic: the decay table, accumulation and averages, attach/detach, util_est.

use super::*;

const PERIOD_NS: u64 = 1024 * 1024;

#[test]
fn table_matches_generator() {
    let y = 0.5f64.powf(1.0 / 32.0);
    for (i, &v) in RUNNABLE_AVG_YN_INV.iter().enumerate() {
        let g = (((1u64 << 32) - 1) as f64 * y.powi(i as i32)) as u64;
        assert_eq!(g, v as u64, "entry {i}");
    }
}

#[test]
fn decay_values() {
    assert_eq!(decay_load(1024, 0), 1023);
    assert_eq!(decay_load(1024, 32), 511);
    assert_eq!(decay_load(u32::MAX as u64, 2016), 0);
    assert_eq!(decay_load(1 << 62, 2017), 0);
    // 47742 >> 2 = 11935, then × (2^32 - 1) >> 32 loses one.
    assert_eq!(decay_load(LOAD_AVG_MAX, 64), 11934);
}

#[test]
fn decay_is_the_kernels_decay_load() {
    // The kernel's shape: halve only from a whole half-life on, then multiply by the rest.
    let reference = |mut val: u64, mut n: u64| {
        if n > LOAD_AVG_PERIOD * 63 {
            return 0;
        }
        if n >= LOAD_AVG_PERIOD {
            val >>= n / LOAD_AVG_PERIOD;
            n %= LOAD_AVG_PERIOD;
        }
        ((val as u128 * RUNNABLE_AVG_YN_INV[n as usize] as u128) >> 32) as u64
    };
    for n in (0..2100).chain([u64::MAX / 2, u64::MAX]) {
        for val in [0, 1, 1023, LOAD_AVG_MAX, u32::MAX as u64, 1 << 40, u64::MAX] {
            assert_eq!(decay_load(val, n), reference(val, n), "{val} over {n}");
        }
    }
}

#[test]
fn load_avg_max_is_fixed_point() {
    // A sum saturated at LOAD_AVG_MAX stays there after one more full period.
    let next = decay_load(LOAD_AVG_MAX, 1) + 1024;
    assert!((LOAD_AVG_MAX as i64 - next as i64).abs() <= 1, "{next}");
}

fn run_periods(a: &mut SchedAvg, start: u64, periods: u64, running: bool) -> u64 {
    let mut now = start;
    for _ in 0..periods {
        now += PERIOD_NS;
        let on = running as u64;
        if a.update_sum(now, on, on, running) {
            a.update_avg(1024);
        }
    }
    now
}

#[test]
fn util_ramp_32_64_and_steady() {
    let mut a = SchedAvg::default();
    let now = run_periods(&mut a, 0, 32, true);
    assert_eq!(a.util_avg, 512);
    let now = run_periods(&mut a, now, 32, true);
    assert_eq!(a.util_avg, 768);
    run_periods(&mut a, now, 2000, true);
    assert!(a.util_avg >= 1023, "{}", a.util_avg);
    assert!(a.load_avg >= 1023);
    assert!(a.runnable_avg >= 1023);
}

#[test]
fn halves_while_blocked() {
    let mut a = SchedAvg::default();
    let now = run_periods(&mut a, 0, 1000, true);
    let before = a.util_avg;
    run_periods(&mut a, now, 32, false);
    let half = before / 2;
    assert!(a.util_avg.abs_diff(half) <= 2, "{} vs {}", a.util_avg, half);
}

#[test]
fn averages_only_recomputed_at_boundaries() {
    let mut a = SchedAvg::default();
    assert!(!a.update_sum(500 * 1024, 1, 1, true));
    assert_eq!(a.util_avg, 0);
    assert!(a.util_sum > 0);
    assert!(a.update_sum(1100 * 1024, 1, 1, true));
}

#[test]
fn backwards_clock_resets_only_timestamp() {
    let mut a = SchedAvg { last_update_time: 10_000_000, ..Default::default() };
    assert!(!a.update_sum(5_000_000, 1, 1, true));
    assert_eq!(a.last_update_time, 5_000_000);
    assert_eq!(a.util_sum, 0);
}

#[test]
fn attach_detach_round_trip() {
    let mut rq = SchedAvg::default();
    let now = run_periods(&mut rq, 0, 10, false);
    let mut rq_before = rq;
    rq_before.update_sum(now, 0, 0, false);
    let mut se = SchedAvg { util_avg: 300, runnable_avg: 400, load_avg: 512, ..Default::default() };
    rq.attach(&mut se, 1024);
    assert_eq!(se.last_update_time, rq.last_update_time);
    assert_eq!(rq.util_avg, rq_before.util_avg + 300);
    assert_eq!(rq.load_avg, rq_before.load_avg + 512);
    rq.detach(&se, 1024);
    assert_eq!(rq.util_avg, rq_before.util_avg);
    assert_eq!(rq.load_avg, rq_before.load_avg);
    assert_eq!(rq.util_sum, rq_before.util_sum);
    assert_eq!(rq.runnable_sum, rq_before.runnable_sum);
    assert!(rq.load_sum.abs_diff(rq_before.load_sum) <= 1024);
}

#[test]
fn removed_is_lazy_and_clamped() {
    let mut rq = SchedAvg { util_avg: 100, util_sum: 100 * 46718, load_avg: 50, ..Default::default() };
    let mut removed = Removed::default();
    removed.add(&SchedAvg { util_avg: 300, load_avg: 20, ..Default::default() });
    // Recording a departure only accumulates it; the owner applies it later.
    assert_eq!(removed, Removed { nr: 1, load_avg: 20, util_avg: 300, runnable_avg: 0 });
    assert!(rq.apply_removed(&mut removed));
    assert_eq!(rq.util_avg, 0);
    assert_eq!(rq.util_sum, 0);
    assert_eq!(rq.load_avg, 30);
    assert_eq!(removed, Removed::default());
    assert!(!rq.apply_removed(&mut removed));
}

#[test]
fn wide_mul_div_is_the_u128_quotient() {
    let exact = |a: u64, b: u64, d: u64| (a as u128 * b as u128 / d as u128) as u64;
    let edges =
        [0, 1, 2, 3, 1023, 1024, 47742, u32::MAX as u64, 1 << 32, 1 << 63, u64::MAX - 1, u64::MAX];
    for &a in &edges {
        for &b in &edges {
            for &d in &edges[1..] {
                assert_eq!(mul_div_wide(a, b, d), exact(a, b, d), "{a} * {b} / {d}");
                assert_eq!(mul_div(a, b, d), exact(a, b, d), "{a} * {b} / {d}");
            }
        }
    }
    // A pseudo-random sweep (SplitMix64) over full-width operands.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for _ in 0..20_000 {
        let (a, b, d) = (next(), next() >> (next() % 64), (next() >> (next() % 64)).max(1));
        assert_eq!(mul_div_wide(a, b, d), exact(a, b, d), "{a} * {b} / {d}");
    }
}

/// The multiplication by a divider's reciprocal gives the quotient at every period
/// position: around each multiple of the divider (where a rounding error would show)
/// across the 32-bit range, and at its ends. Wider numerators divide.
#[test]
fn divider_reciprocal_is_the_quotient() {
    for p in 0..1024u32 {
        let avg = SchedAvg { period_contrib: p, ..SchedAvg::ZERO };
        let d = avg.divider();
        let top = u32::MAX as u64 / d;
        for q in (0..=top).step_by(61).chain([top, top + 1]) {
            for n in [q * d, (q * d).saturating_sub(1), q * d + 1, q * d + d - 1] {
                assert_eq!(avg.per_divider(n), n / d, "{n} / {d}");
            }
        }
        for n in [u32::MAX as u64 - 1, u32::MAX as u64, 1 << 32, u64::MAX] {
            assert_eq!(avg.per_divider(n), n / d, "{n} / {d}");
        }
    }
}

#[test]
fn initial_util_halves_spare() {
    let empty = SchedAvg::default();
    assert_eq!(initial_util(1024, &empty, 1024 << 10), 512);
    let busy = SchedAvg { util_avg: 512, load_avg: 1024, ..Default::default() };
    assert_eq!(initial_util(1024, &busy, 1024 << 10), 256);
    let full = SchedAvg { util_avg: 1024, load_avg: 1024, ..Default::default() };
    assert_eq!(initial_util(1024, &full, 1024 << 10), 0);
    // With the user-resolution weight the extrapolation can win.
    let light = SchedAvg { util_avg: 100, load_avg: 2047, ..Default::default() };
    assert_eq!(initial_util(1024, &light, 1024), 50);
}

#[test]
fn util_est_fastup_and_margin() {
    let mut ue = UtilEst { enqueued: 0, ewma: 100 };
    util_est_sample(&mut ue, 300, 1024, true);
    assert_eq!(ue.ewma, 301, "fastup jumps to the new sample");
    assert_eq!(ue.enqueued, 301);
    // Flag set: a second sample without a util change is skipped.
    util_est_sample(&mut ue, 10, 1024, true);
    assert_eq!(ue.ewma, 301);
    // Within the 10-unit margin: no ewma change.
    ue.enqueued &= !UTIL_AVG_UNCHANGED;
    util_est_sample(&mut ue, 295, 1024, true);
    assert_eq!(ue.ewma, 301);
    // Going down: a quarter of the way.
    ue.enqueued &= !UTIL_AVG_UNCHANGED;
    util_est_sample(&mut ue, 101, 1024, true);
    assert_eq!(ue.ewma, 251);
    // Without fastup, going up is also a quarter.
    let mut slow = UtilEst { enqueued: 0, ewma: 100 };
    util_est_sample(&mut slow, 500, 1024, false);
    assert_eq!(slow.ewma, 200);
    // Samples above capacity_orig are ignored.
    let mut capped = UtilEst { enqueued: 0, ewma: 500 };
    util_est_sample(&mut capped, 300, 200, false);
    assert_eq!(capped.ewma, 500);
}

#[test]
fn util_est_sums_saturate() {
    let mut rq = UtilEst::default();
    let t = UtilEst { enqueued: 200, ewma: 300 };
    util_est_add(&mut rq, &t);
    assert_eq!(rq.enqueued, 301);
    util_est_sub(&mut rq, &t);
    util_est_sub(&mut rq, &t);
    assert_eq!(rq.enqueued, 0);
}

/// A blocked task's sync before a migration decays its signals but is no new sample: it
/// leaves util_est's "unchanged" flag set (v5.7's `__update_load_avg_blocked_se`), where an
/// update of the queued or running task clears it, so that the next dequeue samples.
#[test]
fn a_blocked_sync_leaves_util_ests_flag() {
    let mut a = SchedAvg::default();
    let now = run_periods(&mut a, 0, 64, true);
    a.util_est.enqueued = a.util_avg as u32 | UTIL_AVG_UNCHANGED;
    let util = a.util_avg;
    assert!(a.update_blocked_task(now + 8 * PERIOD_NS, 1024));
    assert!(a.util_avg < util, "decayed while blocked: {} of {util}", a.util_avg);
    assert_ne!(a.util_est.enqueued & UTIL_AVG_UNCHANGED, 0, "a sync keeps the flag");
    assert!(a.update_task(now + 9 * PERIOD_NS, 1024, true, true));
    assert_eq!(a.util_est.enqueued & UTIL_AVG_UNCHANGED, 0, "an update of the queued task clears it");
}
