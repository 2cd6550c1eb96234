//! Scenario S17 of docs/linux-v5.7.md §6: vruntime placement and preemption thresholds on a
//! machine of 8 CPUs (latency 24 ms, min granularity 3 ms, wakeup granularity 4 ms).

use sched_testkit::{Driver, MS};

/// Fixed-point rounding of calc_delta loses a few ns; allow 0.001 %.
fn close(a: u64, b: u64) -> bool {
    a.abs_diff(b) <= b / 100_000 + 1
}

#[test]
fn s17_tunables_for_8_cpus() {
    let d = Driver::new(8, MS);
    let t = *d.s.rq().tunables();
    assert_eq!((t.latency_ns, t.min_granularity_ns, t.wakeup_granularity_ns), (24 * MS, 3 * MS, 4 * MS));
}

#[test]
fn s17_woken_sleeper_gets_half_latency_credit() {
    let mut d = Driver::new(8, MS);
    let a = d.spawn(0);
    let b = d.spawn(0);
    d.run(2 * MS);
    // Whichever runs, make `b` sleep, then let `a` run alone for a long time.
    if d.s.current() != Some(b) {
        d.s.yield_now(d.now);
        d.s.schedule(d.now);
        // Two equal tasks: each runs once per 24 ms period.
        d.run_until_current(b, MS, 24 * MS);
    }
    d.s.block(d.now, b).unwrap();
    d.resched_if_needed();
    assert_eq!(d.s.current(), Some(a));
    d.run(500 * MS);
    let old = d.s.entity(b).unwrap().vruntime;
    d.s.wake(d.now, b).unwrap();
    let min = d.s.rq().min_vruntime();
    let placed = d.s.entity(b).unwrap().vruntime;
    assert!(old.wrapping_add(400 * MS) < min, "b's old vruntime is far behind");
    assert_eq!(placed, min.wrapping_sub(12 * MS), "min_vruntime − latency/2");
    d.s.check_invariants().unwrap();
}

#[test]
fn s17_new_task_starts_one_vslice_after_min_vruntime() {
    let mut d = Driver::new(8, MS);
    let a = d.spawn(0);
    assert_eq!(d.s.current(), Some(a));
    d.run(5 * MS);
    let b = d.spawn(0);
    let min = d.s.rq().min_vruntime();
    let vb = d.s.entity(b).unwrap().vruntime;
    // vslice = 24 ms × 1024 / 2048 = 12 ms; the parent (a) is at min_vruntime.
    assert_eq!(d.s.entity(a).unwrap().vruntime, min);
    assert!(close(vb.wrapping_sub(min), 12 * MS), "{}", vb.wrapping_sub(min));
}

#[test]
fn s17_wakeup_preemption_needs_more_than_4ms_lead() {
    // In the steady state each task is picked 12 ms behind the other. `b` runs 11.75 ms of
    // its slice and sleeps just behind `a`; `a` then runs alone for `alone`, so when `b`
    // wakes `a` leads by `alone` plus a quarter millisecond.
    for (alone, expect) in
        [(3 * MS, false), (3 * MS + MS / 2, false), (4 * MS + MS / 2, true), (11 * MS, true)]
    {
        let mut d = Driver::new(8, MS / 4);
        let a = d.spawn(0);
        let b = d.spawn(0);
        d.run(50 * MS);
        let vr = |d: &Driver, t| d.s.entity(t).unwrap().vruntime;
        // Two equal tasks: each runs once per 24 ms period.
        d.run_until_current(a, MS / 4, 24 * MS);
        d.run_until_current(b, MS / 4, 24 * MS);
        d.run(47 * MS / 4);
        assert_eq!(d.s.current(), Some(b));
        d.s.block(d.now, b).unwrap();
        d.resched_if_needed();
        assert_eq!(d.s.current(), Some(a));
        let base = vr(&d, a).wrapping_sub(vr(&d, b)) as i64;
        assert_eq!(base, (MS / 4) as i64);
        d.run(alone);
        let preempt = d.s.wake(d.now, b).unwrap();
        let lead = d.s.entity(a).unwrap().vruntime.wrapping_sub(d.s.entity(b).unwrap().vruntime);
        assert_eq!(lead as i64, base + alone as i64, "no sleeper credit applies to a short sleep");
        assert_eq!(preempt, expect, "lead {lead} ns");
        assert_eq!(preempt, lead > 4 * MS);
    }
}

#[test]
fn s17_tick_preempts_after_12ms_slice_with_two_tasks() {
    let mut d = Driver::new(8, MS);
    let a = d.spawn(0);
    let b = d.spawn(0);
    d.run(200 * MS);
    let sw = d.switches();
    // The first pick at 0, then every slice is exactly 12 ms (1 ms ticks; the fixed-point
    // slice is a few ns under 12 ms, so the 12 ms tick is the first to exceed it) up to the
    // last switch at 192 ms: 17 switches in 200 ms, alternating between the two tasks.
    let want: Vec<_> = (0..17u64).map(|k| (12 * MS * k, Some(if k % 2 == 0 { a } else { b }))).collect();
    assert_eq!(sw, want);
    assert_eq!(sw.last().unwrap().0, 192 * MS);
}

#[test]
fn s17_min_granularity_holds_back_vruntime_preemption() {
    // check_preempt_tick preempts a task that leads the leftmost by more than its ideal
    // slice, but only once it has run min_granularity (3 ms) since it was picked. Build a
    // task that is picked while already leading by more than its slice: `h` (nice 0) and
    // `l` (nice 19, weight 15) share the CPU; `l` yields as soon as it is picked, so it is
    // the leftmost skip buddy and `h` is picked instead (its lead is within l's wakeup
    // granularity, 4 ms × 1024 / 15 = 273 ms of virtual time). Every later tick preemption
    // of `h` picks `h` again for the same reason, starting a new slice with a larger lead.
    let mut d = Driver::new(8, MS / 4);
    let h = d.spawn(0);
    let l = d.spawn(19);
    assert_eq!(d.s.current(), Some(h));
    // h's slice: 24 ms × 1024 / (1024 + 15) = 23.65 ms, so the 23.75 ms tick preempts it.
    d.run_until_current(l, MS / 4, 24 * MS);
    assert_eq!(d.now, 95 * MS / 4);
    let ideal = {
        let e = d.s.entity(h).unwrap();
        d.s.rq().sched_slice(e.load().weight, e.on_rq)
    };
    assert_eq!(ideal, 23_653_512);
    d.s.yield_now(d.now);
    d.resched_if_needed();
    assert_eq!(d.s.current(), Some(h));
    let lead = |d: &Driver| {
        let vr = |t| d.s.entity(t).unwrap().vruntime;
        vr(h).wrapping_sub(vr(l)) as i64
    };
    for round in 0..10 {
        let picked = d.now;
        let e = d.s.entity(h).unwrap();
        assert_eq!(e.sum_exec_runtime, e.prev_sum_exec_runtime, "round {round}: a new slice");
        assert!(lead(&d) > ideal as i64, "round {round}: picked {} ahead", lead(&d));
        // Leading by more than the slice from the start, it is held only by the gate: no
        // tick before 3 ms of running preempts it, the 3 ms tick does.
        loop {
            d.now += d.tick;
            let preempt = d.s.tick(d.now);
            assert!(lead(&d) > ideal as i64);
            assert_eq!(preempt, d.now - picked >= 3 * MS, "round {round}: {} ns in", d.now - picked);
            if preempt {
                break;
            }
        }
        assert_eq!(d.now - picked, 3 * MS);
        d.resched_if_needed();
        assert_eq!(d.s.current(), Some(h), "round {round}: l is still the skipped leftmost");
    }
    // The only switches: h at 0, l at 23.75 ms and back to h at its yield; picking h again
    // after each preemption is no switch.
    let sw = d.switches();
    assert_eq!(sw, [(0, Some(h)), (95 * MS / 4, Some(l)), (95 * MS / 4, Some(h))]);
}
