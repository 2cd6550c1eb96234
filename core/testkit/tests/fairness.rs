//! Long-run fairness on one CPU: equal nice levels share equally; nice levels share in
//! the ratio of their weights.

use sched_core::Nice;
use sched_testkit::{Driver, MS};

#[test]
fn equal_spinners_get_equal_cpu_within_one_slice() {
    for n in [2usize, 3, 5, 8, 12] {
        let mut d = Driver::new(8, MS);
        let ids: Vec<_> = (0..n).map(|_| d.spawn(0)).collect();
        d.run(10_000 * MS);
        let rt: Vec<u64> = ids.iter().map(|&i| d.runtime(i)).collect();
        let total: u64 = rt.iter().sum();
        assert_eq!(total, 10_000 * MS, "the CPU never idles with spinners");
        let slice = d.s.rq().sched_period(n as u64) / n as u64;
        let spread = rt.iter().max().unwrap() - rt.iter().min().unwrap();
        // A run ends at the first tick past the slice, so allow one tick of rounding.
        assert!(spread <= slice + MS, "n={n}: spread {spread} > slice {slice}: {rt:?}");
        d.s.check_invariants().unwrap();
    }
}

#[test]
fn nice_0_vs_nice_5_share_in_weight_ratio() {
    let mut d = Driver::new(8, MS);
    let a = d.spawn(0);
    let b = d.spawn(5);
    d.run(20_000 * MS);
    let (ra, rb) = (d.runtime(a) as f64, d.runtime(b) as f64);
    let expect = Nice::ZERO.weight() as f64 / Nice::new(5).unwrap().weight() as f64;
    let got = ra / rb;
    assert!((got / expect - 1.0).abs() < 0.02, "ratio {got:.4} vs weights {expect:.4}");
}

#[test]
fn vruntimes_converge_for_mixed_nice() {
    let mut d = Driver::new(8, MS);
    let ids: Vec<_> = [-5, 0, 3, 10].iter().map(|&n| d.spawn(n)).collect();
    d.run(5_000 * MS);
    // Each task's share is its weight over the total, within 2 %.
    let total_w: u64 = ids.iter().map(|&i| d.s.entity(i).unwrap().load().down()).sum();
    for &i in &ids {
        let e = d.s.entity(i).unwrap();
        let share = d.runtime(i) as f64 / (5_000 * MS) as f64;
        let want = e.load().down() as f64 / total_w as f64;
        assert!((share / want - 1.0).abs() < 0.02, "{:?}: {share:.4} vs {want:.4}", e.nice);
    }
}

#[test]
fn batch_and_idle_policies() {
    use sched_core::{Policy, TaskParams};
    let mut d = Driver::new(8, MS);
    let normal = d.spawn(0);
    let idle = d.s.create(d.now, TaskParams { policy: Policy::Idle, ..TaskParams::default() }).unwrap();
    d.run(3_000 * MS);
    // SCHED_IDLE weighs 3 against 1024.
    let share = d.runtime(idle) as f64 / (d.runtime(normal) + d.runtime(idle)) as f64;
    assert!(share < 0.01, "idle share {share}");
    // A waking normal task always preempts a SCHED_IDLE current task.
    let mut d = Driver::new(8, MS);
    let idle = d.s.create(d.now, TaskParams { policy: Policy::Idle, ..TaskParams::default() }).unwrap();
    let n = d.spawn(0);
    d.s.block(d.now, n).ok();
    d.resched_if_needed();
    d.run(50 * MS);
    assert_eq!(d.s.current(), Some(idle));
    assert!(d.s.wake(d.now, n).unwrap());
    // A waking batch task never preempts.
    let mut d = Driver::new(8, MS);
    let a = d.spawn(0);
    let b = d.s.create(d.now, TaskParams { policy: Policy::Batch, ..TaskParams::default() }).unwrap();
    d.resched_if_needed();
    // Two equal tasks: each runs once per 24 ms period.
    d.run_until_current(b, MS, 24 * MS);
    d.s.block(d.now, b).unwrap();
    d.resched_if_needed();
    d.run(500 * MS);
    assert_eq!(d.s.current(), Some(a));
    assert!(!d.s.wake(d.now, b).unwrap(), "batch wakees do not preempt");
}
