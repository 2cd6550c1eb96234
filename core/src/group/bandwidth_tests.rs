//! Bandwidth control scheduled: groups under `cpu.max`, run tick by tick, against what
//! cgroup v2 promises (kselftest's `test_cpucg_max` and LTP's `cfs_bandwidth01` shapes).

use super::shares::CpuWeight;
use super::tests::{boot, climb, max, on_level, run, runtime, spinners, M, MS};
use super::tree::GroupId;
use super::GroupError;
use crate::{Features, NoPlatform, Smp, TaskParams};
extern crate std;
use std::boxed::Box;

/// A group of the root of the default weight, under `cpu.max` `limit`.
fn limited<const C: usize>(m: &M<C>, now: u64, limit: &str) -> GroupId {
    let g = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    m.set_group_max(now, g, max(limit)).unwrap();
    g
}

/// kselftest's `test_cpucg_max` and the figure: a group capped at 10 % of one CPU
/// (`cpu.max` "10000 100000") gets 10 % ± 1 % of the CPU's time, alone, beside a spinner of
/// the root, and with a spinner per CPU on two CPUs (the cap is the group's, over CPUs);
/// `nr_throttled` counts the periods it was throttled in.
#[test]
fn a_group_capped_at_10_percent_of_a_cpu_gets_10_percent() {
    fn case<const C: usize>(spinners_in: usize, rival: bool) {
        let m = boot::<C>(Features::default());
        let mut now = 1;
        let g = limited(&m, now, "10000 100000");
        let capped = spinners(&m, now, g, spinners_in);
        if rival {
            m.create(0, now, TaskParams::default()).unwrap();
        }
        run(&m, &mut now, 1_000 * MS);
        let (r0, s0) = (runtime(&m, &capped), m.group_bandwidth(g).unwrap());
        run(&m, &mut now, 11_000 * MS);
        let (r, s) = (runtime(&m, &capped) - r0, m.group_bandwidth(g).unwrap());
        let share = r as f64 / (10_000 * MS) as f64;
        assert!(
            (share - 0.10).abs() <= 0.01,
            "{C} CPUs, {spinners_in} capped, rival {rival}: {share:.4} of a CPU"
        );
        let (periods, throttled) = (s.nr_periods - s0.nr_periods, s.nr_throttled - s0.nr_throttled);
        assert!((99..=101).contains(&periods), "{periods} periods in 10 s");
        assert!(throttled >= 95 && throttled <= periods, "throttled in {throttled} of {periods} periods");
        assert!(s.throttled_ns > s0.throttled_ns, "throttled time counted");
        m.check_invariants().unwrap();
    }
    case::<1>(1, false);
    case::<1>(1, true);
    case::<2>(2, false);
}

/// cgroup v2 lets a child's limit exceed its parent's; the parent's still holds: a child
/// capped at 50 % under a parent capped at 20 % gets 20 %. Clearing the parent's limit lets
/// the child have its own 50 %.
#[test]
fn a_parents_limit_holds_over_a_larger_childs() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let parent = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    let child = m.create_group(parent, CpuWeight::DEFAULT).unwrap();
    m.set_group_max(now, parent, max("20000 100000")).unwrap();
    m.set_group_max(now, child, max("50000 100000")).unwrap();
    let t = spinners(&m, now, child, 1);
    m.create(0, now, TaskParams::default()).unwrap();
    let share = |m: &M<1>, now: &mut u64| {
        let r0 = runtime(m, &t);
        let until = *now + 5_000 * MS;
        run(m, now, until);
        (runtime(m, &t) - r0) as f64 / (5_000 * MS) as f64
    };
    run(&m, &mut now, 500 * MS);
    let capped = share(&m, &mut now);
    assert!((capped - 0.20).abs() <= 0.01, "under the parent's 20 %: {capped:.4}");
    m.set_group_max(now, parent, super::bandwidth::CpuMax::UNLIMITED).unwrap();
    let until = now + 500 * MS;
    run(&m, &mut now, until);
    let own = share(&m, &mut now);
    assert!((own - 0.50).abs() <= 0.01, "its own 50 %: {own:.4}");
    assert_eq!(m.set_group_max(now, GroupId::ROOT, max("max")), Err(GroupError::Root));
    m.check_invariants().unwrap();
}

/// A running task moved into a group with no runtime left is throttled with its group at
/// once, and its CPU reschedules at the next charge instead of running it on: it gets no
/// more than the group's quota.
#[test]
fn a_running_task_moved_into_an_exhausted_group_stops() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let g = limited(&m, now, "2000 100000");
    // Another task of the group takes its quota first and leaves, the group throttled on
    // this CPU with nothing queued.
    let first = spinners(&m, now, g, 1)[0];
    let other = m.create(0, now, TaskParams::default()).unwrap();
    run(&m, &mut now, 50 * MS);
    assert_eq!(m.current(0), Some(other), "the group is throttled after its 2 ms");
    m.exit(now, first).unwrap();
    // Move the running root task into the group: it is alone in a throttled level.
    m.move_task(now, other, g).unwrap();
    let r0 = runtime(&m, &[other]);
    run(&m, &mut now, 1_050 * MS);
    let got = runtime(&m, &[other]) - r0;
    assert!(got <= 25 * MS, "the group ran {got} ns in 10 periods of 2 ms (with one tick of overrun each)");
    m.check_invariants().unwrap();
}

/// A limited group deleted while its level is throttled stops its period timer (nothing of it
/// keeps a CPU ticking), and its slot's next group starts with a fresh pool.
#[test]
fn a_throttled_group_deleted_leaves_no_timer_behind() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let g = limited(&m, now, "1000 100000");
    let t = spinners(&m, now, g, 1)[0];
    run(&m, &mut now, 30 * MS);
    assert!(m.bandwidth_timer().is_some(), "the group's period timer runs while it is throttled");
    m.move_task(now, t, GroupId::ROOT).unwrap();
    m.delete_group(g).unwrap();
    assert_eq!(m.bandwidth_timer(), None);
    let again = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    assert_eq!(m.group_bandwidth(again), Ok(Default::default()));
    assert_eq!(m.group_table().max(again), Ok(super::bandwidth::CpuMax::UNLIMITED));
    run(&m, &mut now, 300 * MS);
    m.check_invariants().unwrap();
}

/// A level throttled with nothing queued (its task moved out of the group meanwhile) is let
/// go at the period's end with its deficit and 1 ns, as Linux lets every level go: it holds
/// no slice it cannot run, so the group's other CPU gets the rest of the quota.
#[test]
fn an_empty_throttled_level_takes_no_slice_from_a_busy_one() {
    let m = boot::<2>(Features::default());
    let mut now = 1;
    let g = limited(&m, now, "10000 100000");
    let [a, b] = [0, 1].map(|cpu| {
        let t = spinners(&m, now, g, 1)[0];
        m.set_affinity(now, t, crate::CpuMask::single(cpu)).unwrap();
        t
    });
    // Both levels take a 5 ms slice each and are throttled by the tick after (1 ms ticks).
    run(&m, &mut now, 20 * MS);
    let end = m.bandwidth_timer().expect("the period timer runs while they are throttled");
    assert!(m.current(0).is_none() && m.current(1).is_none(), "both levels throttled");
    // CPU 0's level stays throttled with nothing queued.
    m.move_task(now, a, GroupId::ROOT).unwrap();
    run(&m, &mut now, end - MS);
    let r0 = runtime(&m, &[b]);
    run(&m, &mut now, end + 99 * MS);
    // b's in the next period: the quota less the deficits both levels ran up before they
    // were throttled (each at most a tick), plus at most a tick of overrun: 8..=11 ms. (A
    // slice handed to CPU 0's empty level and kept there left b at most 5 ms.)
    let got = runtime(&m, &[b]) - r0;
    assert!((8 * MS..=11 * MS).contains(&got), "b ran {got} ns of the group's 10 ms in the period");
    m.check_invariants().unwrap();
}

/// A group's period timer armed in the last periods before the clock's end: its next end
/// saturates instead of overflowing, on the charge that arms it and at each period's end.
#[test]
fn a_limited_group_near_the_clocks_end_does_not_overflow() {
    let m = boot::<2>(Features::default());
    climb(&m);
    let mut now = u64::MAX - 2_500 * MS;
    let g = limited(&m, now, "50000 1000000");
    let capped = spinners(&m, now, g, 2);
    run(&m, &mut now, u64::MAX - MS);
    let got = runtime(&m, &capped);
    // Two spinners under 50 ms a second: at most three periods' quota, at least two's.
    assert!((100 * MS..=150 * MS + 2 * MS).contains(&got), "{got} ns");
    m.check_invariants().unwrap();
}

/// A period that ends in a tick is refilled before that tick charges anything, as Linux's
/// period timer refills at the boundary: at HZ=250 a group under `cpu.max` with 5 or 10 ms
/// periods gets its quota (it got two thirds of it when the tick charged first), beside a
/// spinner of the root and alone.
#[test]
fn a_short_period_at_hz_250_gives_its_whole_quota() {
    for (limit, rival, want) in
        [("5000 10000", true, 0.5), ("3000 10000", true, 0.3), ("2000 5000", false, 0.4)]
    {
        let m: Box<M<1>> = Box::new(Smp::new(NoPlatform, Features::default(), 250));
        m.init_with(|t| t.init_flat(1)).unwrap();
        let mut now = 1;
        let g = limited(&m, now, limit);
        let capped = spinners(&m, now, g, 1);
        if rival {
            m.create(0, now, TaskParams::default()).unwrap();
        }
        let tick = |now: &mut u64, until: u64| {
            while *now < until {
                *now += 4 * MS;
                m.tick(0, *now).unwrap();
                if m.need_resched(0) {
                    m.schedule(0, *now).unwrap();
                    m.finish_switch(0, *now).unwrap();
                }
            }
        };
        tick(&mut now, 1_000 * MS);
        let r0 = runtime(&m, &capped);
        tick(&mut now, 11_000 * MS);
        let share = (runtime(&m, &capped) - r0) as f64 / (10_000 * MS) as f64;
        assert!((share - want).abs() < 0.02, "cpu.max {limit}, rival {rival}: {share}, not {want}");
        m.check_invariants().unwrap();
    }
}

/// A task left running in a throttled level (moved into it) is charged saturating: clock
/// steps near the largest a reading may take do not overflow its level's runtime. (The level
/// first overran its quota many times over, so no period's refill lets it go: the huge
/// charges land on the throttled level itself.)
#[test]
fn a_throttled_levels_runtime_saturates_on_huge_clock_steps() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let g = limited(&m, now, "1000 100000");
    let a = spinners(&m, now, g, 1)[0];
    let r = m.create(0, now, TaskParams::default()).unwrap();
    let switch = |now: u64| {
        m.schedule(0, now).unwrap();
        m.finish_switch(0, now).unwrap();
    };
    switch(now);
    if m.current(0) != Some(a) {
        now += MS;
        m.tick(0, now).unwrap();
        switch(now);
    }
    assert_eq!(m.current(0), Some(a));
    // One late tick: `a` ran 50 ms on a 1 ms quota, within the period.
    now += 50 * MS;
    m.tick(0, now).unwrap();
    switch(now);
    assert_eq!(m.current(0), Some(r), "the group is throttled, 49 ms in debt");
    m.move_task(now, r, g).unwrap();
    let step = i64::MAX as u64 / 4 * 3;
    for _ in 0..2 {
        now += step;
        m.tick(0, now).unwrap();
    }
    m.check_invariants().unwrap();
}

/// A task queued in a throttled group on an idle CPU, moved to a group that runs, makes the
/// CPU reschedule: nothing else would tell the idle CPU it has work (it idled with the task
/// queued for seconds in the simulator's churn).
#[test]
fn a_task_moved_out_of_a_throttled_group_wakes_its_idle_cpu() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let g = limited(&m, now, "1000 100000");
    let t = spinners(&m, now, g, 1)[0];
    run(&m, &mut now, 30 * MS);
    assert_eq!(m.current(0), None, "the group ran out: the CPU idles with its task queued");
    assert!(!m.need_resched(0));
    m.move_task(now, t, GroupId::ROOT).unwrap();
    assert!(m.need_resched(0), "the idle CPU has work again");
    m.schedule(0, now).unwrap();
    m.finish_switch(0, now).unwrap();
    assert_eq!(m.current(0), Some(t));
    m.check_invariants().unwrap();
}

/// v5.7 stops a throttled level's PELT clock (`throttled_clock_task`), and with it the
/// clocks of the levels below: while its group waits for the next period, their signals
/// stand still — the tasks they hold add no load or runnable time, nothing decays — and go
/// on from there once the group is let go. A group made under it meanwhile starts stopped.
#[test]
fn a_throttled_levels_signals_stand_still_until_it_is_let_go() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let g = limited(&m, now, "10000 100000");
    let child = m.create_group(g, CpuWeight::DEFAULT).unwrap();
    spinners(&m, now, child, 2);
    // A spinner of the root keeps the CPU busy while the group waits.
    m.create(0, now, TaskParams::default()).unwrap();
    let level = |m: &M<1>, g: GroupId| {
        on_level(m, 0, g, |lv| {
            let a = lv.cfs.avg;
            (lv.clock().stopped(), lv.runtime().throttled, [a.load_avg, a.runnable_avg, a.util_avg])
        })
    };
    run(&m, &mut now, 500 * MS);
    // The first tick of a period at which the group is throttled.
    while !level(&m, g).1 {
        let next = now + MS;
        run(&m, &mut now, next);
    }
    let end = m.bandwidth_timer().expect("the period timer runs while it is throttled");
    let (before_g, before_child) = (level(&m, g), level(&m, child));
    // The group's entity above, off the root's runqueue while throttled, is not aged either
    // (v5.7's blocked-load updates skip a throttled hierarchy).
    let entity = |m: &M<1>| m.pool().group_cell(0, g.slot()).unwrap().avg();
    let before_entity = entity(&m);
    assert!(before_g.0 && before_child.0, "both clocks stopped: {before_g:?} {before_child:?}");
    assert!(before_child.2[0] > 0, "the child level carries its spinners' load");
    // A group made under the throttled one starts with its clock stopped.
    let late = m.create_group(child, CpuWeight::DEFAULT).unwrap();
    assert!(level(&m, late).0, "a new level under a throttled one");
    run(&m, &mut now, end - 2 * MS);
    assert_eq!(level(&m, g), before_g, "the group's level while throttled");
    assert_eq!(level(&m, child), before_child, "the child's level while its parent is throttled");
    assert_eq!(entity(&m), before_entity, "the group's entity while its level is throttled");
    // Let go: the clocks run again, and the spinners' running time accrues.
    run(&m, &mut now, end + 3 * MS);
    let (after_g, after_child) = (level(&m, g), level(&m, child));
    assert!(!after_g.1 && !after_g.0 && !after_child.0, "let go: {after_g:?} {after_child:?}");
    assert!(!level(&m, late).0, "the new level's clock runs too");
    run(&m, &mut now, end + 8 * MS);
    let after_child = level(&m, child);
    assert!(after_child.2[2] > before_child.2[2], "utilisation accrues again: {after_child:?}");
    m.check_invariants().unwrap();
}

/// At a period's end the refilled pool goes to the group's throttled runqueues the longest
/// throttled first (v5.7 walks them in the order they were throttled): with a pool of one
/// slice and a spinner on each of four CPUs, the CPU throttled first is the one let go, and
/// the others wait.
#[test]
fn the_longest_throttled_runqueue_is_let_go_first() {
    let m = boot::<4>(Features::default());
    let mut now = 1;
    let g = limited(&m, now, "5000 100000");
    for cpu in 0..4 {
        let t = spinners(&m, now, g, 1)[0];
        m.set_affinity(now, t, crate::CpuMask::single(cpu)).unwrap();
    }
    run(&m, &mut now, 250 * MS);
    let state = |m: &M<4>| {
        (0..4)
            .map(|cpu| on_level(m, cpu, g, |lv| lv.runtime()))
            .map(|r| (r.throttled, r.throttled_at))
            .collect::<std::vec::Vec<_>>()
    };
    let end = m.bandwidth_timer().expect("the period timer runs");
    run(&m, &mut now, end - MS);
    let before = state(&m);
    assert!(before.iter().all(|s| s.0), "all four throttled before the period's end: {before:?}");
    let first = (0..4).min_by_key(|&c| (before[c].1, c)).unwrap();
    assert_ne!(first, 0, "not merely the first CPU: {before:?}");
    run(&m, &mut now, end + MS);
    let after = state(&m);
    let let_go: std::vec::Vec<usize> = (0..4).filter(|&c| !after[c].0).collect();
    assert_eq!(let_go, [first], "before {before:?}, after {after:?}");
    m.check_invariants().unwrap();
}

/// A group made in a slot whose last group was under a throttled one starts with a running
/// clock: the throttle stopped the dead slot's clock too (it walks the levels by their
/// parents), and the let-go, no longer finding the slot below, would not start it again.
#[test]
fn a_reused_slot_starts_with_a_running_clock() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let a = limited(&m, now, "5000 100000");
    let b = m.create_group(a, CpuWeight::DEFAULT).unwrap();
    m.delete_group(b).unwrap();
    spinners(&m, now, a, 1);
    m.create(0, now, TaskParams::default()).unwrap();
    let state = |m: &M<1>, g: GroupId| on_level(m, 0, g, |lv| (lv.runtime().throttled, lv.clock().stopped()));
    while !state(&m, a).0 {
        let next = now + MS;
        run(&m, &mut now, next);
    }
    let c = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    assert_eq!(c.slot(), b.slot(), "the slot is reused");
    assert!(!state(&m, c).1, "a new group under the root, while another is throttled");
    let end = m.bandwidth_timer().expect("the period timer runs");
    run(&m, &mut now, end + MS);
    assert_eq!(state(&m, a), (false, false), "let go");
    assert!(!state(&m, c).1, "still running after the let-go");
    m.check_invariants().unwrap();
}

/// At a period's end, a throttled level whose ancestor is throttled too cannot run a slice:
/// it gets Linux's grant, its deficit and 1 ns, and the rest of its group's pool stays for
/// the levels that can run (v5.7's `distribute_cfs_runtime` hands every level only that).
/// Periods that end at one tick are run parents first: a child's level is then served under
/// a parent already let go, and gets its slice, whatever the groups' slots.
#[test]
fn a_level_under_a_throttled_parent_takes_no_slice_at_the_periods_end() {
    // (`child_period` ms for the child's periods, 100 ms for the parent's; both quotas 5 ms.)
    let case = |child_period: u64| {
        let m = boot::<1>(Features::default());
        let mut now = 1;
        let spare = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
        let parent = limited(&m, now, "5000 100000");
        m.delete_group(spare).unwrap();
        let child = m.create_group(parent, CpuWeight::DEFAULT).unwrap();
        assert!(child.slot() < parent.slot(), "the child's slot comes first");
        m.set_group_max(now, child, max(&std::format!("5000 {}", child_period * 1000))).unwrap();
        spinners(&m, now, child, 1);
        m.create(0, now, TaskParams::default()).unwrap();
        let state = |m: &M<1>, g: GroupId| on_level(m, 0, g, |lv| lv.runtime());
        while !(state(&m, child).throttled && state(&m, parent).throttled) {
            let next = now + MS;
            assert!(
                next < 1_000 * MS,
                "both throttled at once: {:?} {:?}",
                state(&m, child),
                state(&m, parent)
            );
            run(&m, &mut now, next);
        }
        let end = m.bandwidth_timer().expect("the period timers run");
        assert_eq!(end, child_period * MS, "the child's period ends first or with the parent's");
        run(&m, &mut now, end - MS);
        assert!(state(&m, child).throttled && state(&m, parent).throttled);
        run(&m, &mut now, end);
        (state(&m, child), state(&m, parent))
    };
    let (child, parent) = case(50);
    assert_eq!((child.remaining, child.throttled), (1, false), "the deficit and 1 ns, no slice");
    assert!(parent.throttled, "the parent's period has not ended");
    let (child, parent) = case(100);
    assert!(!parent.throttled, "the parent is let go at the same tick");
    assert!(child.remaining > 1_000_000, "served after its parent, a slice: {child:?}");
}

/// The period timer starts with the quota and keeps its phase across a stop, as v5.7's
/// hrtimer does (`start_cfs_bandwidth` forwards the old expiry by whole periods): written at
/// 1 ns, the periods end at 100, 200, … ms; unused, the timer stops after two of them
/// (`nr_periods` 2, as Linux counts them); a task that takes runtime at 250 ms waits for
/// the end at 300 ms, not for a whole period from its take.
#[test]
fn the_period_timer_starts_with_the_quota_and_keeps_its_phase() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let g = limited(&m, now, "10000 100000");
    assert_eq!(m.bandwidth_timer(), Some(100 * MS), "armed by the write, at the next whole period");
    run(&m, &mut now, 250 * MS);
    assert_eq!(m.bandwidth_timer(), None, "stopped after a whole period unused");
    assert_eq!(m.group_bandwidth(g).unwrap().nr_periods, 2);
    spinners(&m, now, g, 1);
    let next = now + MS;
    run(&m, &mut now, next);
    assert_eq!(m.bandwidth_timer(), Some(300 * MS), "restarted in its phase");
    // A broken clock reading written with a limit arms no timer past every later tick.
    m.set_group_max(u64::MAX, g, max("10000 100000")).unwrap();
    assert_eq!(m.bandwidth_timer(), Some(300 * MS), "kept in its phase");
    m.check_invariants().unwrap();
}
