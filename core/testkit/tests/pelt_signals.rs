//! PELT through the scheduler API: new-task initialisation, ramp-up, blocked decay,
//! util_est sampling, and the lazily removed load of an exited task.

use sched_core::{Features, RunnableInit, TaskParams, Tunables};
use sched_testkit::{Driver, MS};

#[test]
fn new_tasks_get_half_the_spare_capacity() {
    let d = Driver::new(8, MS);
    let utils: Vec<u64> = (0..4)
        .map(|_| {
            let id = d.s.create(d.now, TaskParams::default()).unwrap();
            d.s.entity(id).unwrap().avg.util_avg
        })
        .collect();
    // 512 on an empty CPU, then half of what is left each time (docs/linux-v5.7.md §2's observation).
    assert_eq!(utils, [512, 256, 128, 64]);
    assert_eq!(d.s.rq().avg().util_avg, 960);
}

#[test]
fn runnable_init_setting() {
    for (init, expect) in [(RunnableInit::CpuCapacity, 1024), (RunnableInit::InitialUtil, 512)] {
        let t = Tunables { runnable_init: init, ..Tunables::for_cpus(8) };
        let d = Driver::with(t, Features::default(), MS);
        let id = d.s.create(0, TaskParams::default()).unwrap();
        assert_eq!(d.s.entity(id).unwrap().avg.runnable_avg, expect);
        assert_eq!(d.s.entity(id).unwrap().avg.load_avg, 1024, "born heavy");
    }
}

#[test]
fn spinner_ramps_up_and_blocked_load_decays() {
    let mut d = Driver::new(8, MS);
    let t = d.spawn(0);
    d.run(1_000 * MS);
    let e = d.s.entity(t).unwrap();
    assert!(e.avg.util_avg >= 1010, "{}", e.avg.util_avg);
    assert!(d.s.rq().cpu_util() >= 1010);
    assert!(d.s.rq().cpu_load() >= 1010);
    // Block it: the CPU idles, but the task's util stays in the runqueue's sums and
    // halves every 32 ms.
    d.s.block(d.now, t).unwrap();
    d.resched_if_needed();
    assert_eq!(d.s.current(), None);
    let before = d.s.rq().avg().util_avg;
    d.run(32 * MS + 2 * MS);
    let after = d.s.rq().avg().util_avg;
    // 34 ms are 32.4 PELT periods of 1024 × 1024 ns, so the blocked util decays by a factor
    // between y^33 = 0.4893 and y^32 = 1/2 (y^32.4 = 0.4955 before fixed-point rounding).
    let ratio = after as f64 / before as f64;
    let y = 0.5f64.powf(1.0 / 32.0);
    assert!(y.powi(33) < ratio && ratio <= 0.5, "{before} -> {after}: {ratio}");
    assert_eq!((before, after), (1024, 507), "fixed-point PELT is exact");
    d.s.check_invariants().unwrap();
}

#[test]
fn util_est_samples_on_sleep_and_jumps_up() {
    let mut d = Driver::new(8, MS);
    let t = d.spawn(0);
    d.run(200 * MS);
    let util = d.s.entity(t).unwrap().avg.util_avg;
    assert!(d.s.rq().avg().util_est.enqueued > 0);
    d.s.block(d.now, t).unwrap();
    let e = d.s.entity(t).unwrap();
    // FASTUP: the ewma jumps to the sampled util at once.
    assert_eq!(e.avg.util_est.enqueued, util as u32 | 1);
    assert_eq!(e.avg.util_est.ewma, util as u32 | 1);
    assert_eq!(d.s.rq().avg().util_est.enqueued, 0, "a sleeping task leaves the rq estimate");
    d.resched_if_needed();
    d.run(300 * MS);
    d.s.wake(d.now, t).unwrap();
    // Woken after a long sleep: util_avg decayed, but the estimate remembers.
    let e = d.s.entity(t).unwrap();
    assert!(e.avg.util_avg < util / 4);
    assert_eq!(e.util_est(), util | 1);
    assert!(d.s.rq().cpu_util() >= util, "cpu_util uses the estimate");
}

#[test]
fn exited_task_load_is_removed_lazily() {
    let mut d = Driver::new(8, MS);
    let keep = d.spawn(0);
    let gone = d.spawn(0);
    d.run(300 * MS);
    // Two equal tasks: each runs once per 24 ms period.
    d.run_until_current(gone, MS, 24 * MS);
    d.s.block(d.now, gone).unwrap();
    d.resched_if_needed();
    let with = d.s.rq().avg().util_avg;
    let gone_util = d.s.entity(gone).unwrap().avg.util_avg;
    d.s.exit(d.now, gone).unwrap();
    // Nothing is subtracted until the runqueue's next update.
    assert_eq!(d.s.rq().avg().util_avg, with);
    d.run(2 * MS);
    let after = d.s.rq().avg().util_avg;
    // The removed util is subtracted once, undecayed; the 2 ms after it in which `keep`
    // runs alone let the runqueue's util climb back by (1024 − 575)·(1 − y²) ≈ 19.
    assert!((after + gone_util).abs_diff(with) <= 40, "{with} - {gone_util} -> {after}");
    assert_eq!((with, gone_util, after), (1023, 448, 594));
    assert!(d.s.entity(keep).is_ok());
    d.s.check_invariants().unwrap();
}
