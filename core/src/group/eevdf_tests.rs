//! EEVDF where it meets task groups, the machine's own tick and PREEMPT_SHORT: what Linux
//! 6.6 and 6.7 do with a group entity's weight, 6.6 with a kept lag's clamp, and what 6.12
//! does once a running task's protection is gone or a sleeper still owes.

use super::shares::CpuWeight;
use super::tests::{boot, on_level, run, spinners, M, MS};
use super::tree::GroupId;
use crate::{Features, TaskId, TaskParams};
extern crate std;
use std::boxed::Box;

/// Runs the machine a tick at a time from `*now` until `done` holds (checked before each
/// tick), failing with `what` if `most` ticks do not bring it.
fn run_until<const C: usize>(m: &M<C>, now: &mut u64, most: u32, what: &str, done: impl Fn(&M<C>) -> bool) {
    for _ in 0..most {
        if done(m) {
            return;
        }
        let t = *now + MS;
        run(m, now, t);
    }
    assert!(done(m), "{what}");
}

/// Asserts that an entity placed at `vr`, which left owing `debt` (negative), stands at least
/// half of it behind CPU 0's top-level average, the running task counted: judged while a
/// root task runs, so that the average is the root level's and `curr` that task's. (A tick's
/// accounting of the running task may move the average after the placement, by far less
/// than the debt; the running task's entity is read first: no runqueue lock is held across
/// it.)
fn placed_with_its_debt(m: &M<1>, vr: u64, debt: i64) {
    let curr = m.current(0).and_then(|t| m.entity(t).ok()).map(|e| (e.vruntime, e.weight()));
    let lag = m
        .with_cpu(0, |st| {
            let cfs = &st.rq.cfs;
            cfs.eavg.avg(cfs.min_vruntime, curr).wrapping_sub(vr) as i64
        })
        .unwrap();
    assert!(lag <= debt / 2, "left owing {debt}, placed {lag} behind the average");
}

/// Blocks `p`, running on CPU 0, after a tick of its run, until `kept` holds once it is
/// switched out (woken again and retried otherwise, up to 50 times). Returns whether it held.
fn block_part_way<const C: usize>(m: &M<C>, now: &mut u64, p: TaskId, kept: impl Fn(&M<C>) -> bool) -> bool {
    for _ in 0..50 {
        run_until(m, now, 400, "p runs", |m| m.current(0) == Some(p));
        let t = *now + MS;
        run(m, now, t);
        if m.current(0) != Some(p) {
            continue;
        }
        m.block(0, *now, p).unwrap();
        m.schedule(0, *now).unwrap();
        m.finish_switch(0, *now).unwrap();
        if kept(m) {
            return true;
        }
        m.wake(0, *now, p).unwrap();
    }
    false
}

/// A waking group entity is placed with the weight it will run with (its group's shares are
/// brought up to date first, as Linux's `enqueue_entity` calls `update_cfs_group` before
/// `place_entity`): its request is one slice at that weight. Placed with the weight it had
/// when it slept, it asked for 3.7 times that.
#[test]
fn a_waking_group_entitys_request_is_one_slice_at_its_new_weight() {
    let m: Box<M<2>> = boot::<2>(Features::default() | Features::EEVDF);
    let mut now = 1;
    let g = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    // The group's load on CPU 1 moves its entity's weight on CPU 0 as `p` sleeps and wakes.
    let far = spinners(&m, now, g, 1)[0];
    m.set_affinity(now, far, crate::CpuMask::single(1)).unwrap();
    let p = spinners(&m, now, g, 1)[0];
    m.set_affinity(now, p, crate::CpuMask::single(0)).unwrap();
    let s = m.create(0, now, TaskParams::default()).unwrap();
    m.set_affinity(now, s, crate::CpuMask::single(0)).unwrap();
    let slice = m.tunables().min_granularity_ns;
    let ge = || m.pool().group_cell(0, g.slot()).unwrap();
    let (mut worst, mut judged) = (0f64, 0);
    for _ in 0..20 {
        // `p` runs 1 ms, then sleeps 20 ms.
        assert!(block_part_way(&m, &mut now, p, |_| true), "p runs a tick");
        let slept_at = ge().weight();
        let t = now + 20 * MS;
        run(&m, &mut now, t);
        m.wake(0, now, p).unwrap();
        let e = ge();
        let (w, req) = (e.weight(), e.deadline().wrapping_sub(e.vruntime()));
        if w != slept_at {
            judged += 1;
        }
        worst = worst.max(req as f64 / crate::eevdf::to_virtual(slice, w) as f64);
        if m.need_resched(0) {
            m.schedule(0, now).unwrap();
            m.finish_switch(0, now).unwrap();
        }
    }
    assert!(judged > 0, "the entity's weight changed across a sleep at least once");
    assert!(worst < 1.01, "a waking group entity's request is {worst:.2} times one slice at its weight");
    m.check_invariants().unwrap();
}

/// The kept lag is clamped at twice the slice or the machine's tick (`TICK_NSEC`), whichever
/// is longer: at HZ=1000, a task of a 0.1 ms slice that blocks far ahead keeps 1 ms of debt,
/// not the 4 ms of the default HZ's tick.
#[test]
fn the_lag_clamp_uses_the_machines_tick() {
    let m = boot::<1>(Features::default() | Features::EEVDF);
    assert_eq!(m.hz(), 1000);
    let mut now = 1;
    let a = m.create(0, now, TaskParams::default()).unwrap();
    let b = m.create(0, now, TaskParams::default()).unwrap();
    m.set_slice(now, a, 20 * MS).unwrap();
    let t = now + 51 * MS;
    run(&m, &mut now, t);
    run_until(&m, &mut now, 2000, "a gets far ahead", |m| {
        let (ea, eb) = (m.entity(a).unwrap(), m.entity(b).unwrap());
        m.current(0) == Some(a) && ea.vruntime.wrapping_sub(eb.vruntime) as i64 > 4 * MS as i64
    });
    m.set_slice(now, a, 100_000).unwrap();
    m.block(0, now, a).unwrap();
    m.schedule(0, now).unwrap();
    m.finish_switch(0, now).unwrap();
    assert_eq!(m.entity(a).unwrap().vlag, -(MS as i64), "max(2 × 0.1 ms, a 1 ms tick) at nice 0");
    m.check_invariants().unwrap();
}

/// Runs 100 ms, then until `a` runs past the average (ahead of `b`, so ineligible) but still
/// more than 2 ms inside the request it was picked for.
fn run_until_a_runs_ahead(m: &M<1>, now: &mut u64, a: TaskId, b: TaskId) {
    let t = *now + 100 * MS;
    run(m, now, t);
    run_until(m, now, 400, "a runs ahead of b within a request", |m| {
        let (ea, eb) = (m.entity(a).unwrap(), m.entity(b).unwrap());
        let ahead = ea.vruntime.wrapping_sub(eb.vruntime) as i64 > 0;
        m.current(0) == Some(a) && ahead && (ea.deadline.wrapping_sub(ea.vruntime) as i64) > 2 * MS as i64
    });
}

/// PREEMPT_SHORT's tick half (Linux 6.12's `did_preempt_short`): once a shorter wakee has
/// ended the running task's protection (its picked request is no longer the one it runs),
/// the task gives the CPU up at the first charge that finds it ineligible, not at the end of
/// its request. (The wakeup half, which ends the protection, is the state set here.)
#[test]
fn a_task_whose_protection_ended_leaves_once_ineligible() {
    for cancelled in [false, true] {
        let m = boot::<1>(Features::default() | Features::EEVDF);
        let mut now = 1;
        let a = m.create(0, now, TaskParams::default()).unwrap();
        let b = m.create(0, now, TaskParams::default()).unwrap();
        for t in [a, b] {
            m.set_slice(now, t, 20 * MS).unwrap();
        }
        run_until_a_runs_ahead(&m, &mut now, a, b);
        if cancelled {
            let deadline = m.entity(a).unwrap().deadline;
            m.rq(0).rq.cfs.picked_deadline = deadline.wrapping_add(1);
        }
        now += MS / 4;
        m.tick(0, now).unwrap();
        assert_eq!(m.need_resched(0), cancelled, "protection ended: {cancelled}");
        m.check_invariants().unwrap();
    }
}

/// PREEMPT_SHORT's wakeup half beside a running task no longer eligible (Linux 6.12's
/// `do_preempt_short`): a woken task with a shorter slice ends that task's protection even
/// when its own deadline is later and the pick is a third task, so the running task gives the
/// CPU up at its next charge, not at the end of its request.
#[test]
fn a_shorter_wakee_ends_an_ineligible_tasks_protection() {
    let m = boot::<1>(Features::default() | Features::EEVDF);
    let mut now = 1;
    let a = m.create(0, now, TaskParams::default()).unwrap();
    let b = m.create(0, now, TaskParams::default()).unwrap();
    for t in [a, b] {
        m.set_slice(now, t, 20 * MS).unwrap();
    }
    // A light task with a shorter slice: at nice 19 its request ends far past the others'.
    let c = m.create(0, now, TaskParams { nice: 19, ..TaskParams::default() }).unwrap();
    m.set_slice(now, c, 10 * MS).unwrap();
    run_until(&m, &mut now, 2000, "c runs", |m| m.current(0) == Some(c));
    m.block(0, now, c).unwrap();
    m.schedule(0, now).unwrap();
    m.finish_switch(0, now).unwrap();
    run_until_a_runs_ahead(&m, &mut now, a, b);
    let deadline = m.entity(a).unwrap().deadline;
    assert_eq!(m.rq(0).rq.cfs.picked_deadline, deadline, "a runs the request it was picked for");
    m.wake(0, now, c).unwrap();
    assert!(!m.need_resched(0), "the pick is b, not the wakee");
    let picked = m.rq(0).rq.cfs.picked_deadline;
    assert_ne!(picked, deadline, "the shorter wakee ended a's protection");
    now += MS / 4;
    m.tick(0, now).unwrap();
    assert!(m.need_resched(0), "a, ineligible, gives the CPU up at its next charge");
    m.check_invariants().unwrap();
}

/// A queued group entity reweighted (its group's shares moved as a task joined it here)
/// keeps its lag as the same service, as Linux 6.7's `reweight_eevdf` does: its vruntime
/// moves to V − lag·old/new and its deadline to V + (d − V)·old/new, and the average V of
/// its runqueue stays where it was.
#[test]
fn a_queued_group_entitys_lag_and_request_are_rescaled_with_its_weight() {
    let m: Box<M<2>> = boot::<2>(Features::default() | Features::EEVDF);
    let mut now = 1;
    let on = |cpu| TaskParams { affinity: crate::CpuMask::single(cpu), ..TaskParams::default() };
    let g = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    // The group's load spread over both CPUs, so its entity here weighs its part of it.
    for cpu in [1, 0] {
        let t = m.create(0, now, on(cpu)).unwrap();
        m.move_task(now, t, g).unwrap();
    }
    let r = m.create(0, now, on(0)).unwrap();
    let t = now + 200 * MS;
    run(&m, &mut now, t);
    run_until(&m, &mut now, 100, "the root's task runs, the group entity queued", |m| {
        m.current(0) == Some(r)
    });
    let ge = m.pool().group_cell(0, g.slot()).unwrap();
    // The top level here holds the running `r` and the group entity: its average.
    let state = |m: &M<2>| {
        let re = m.entity(r).unwrap();
        let (w, v, d, rw) = (ge.weight(), ge.vruntime(), ge.deadline(), re.weight());
        let base = v.min(re.vruntime);
        let mut avg = crate::eevdf::AvgVruntime::new();
        avg.add(v, base, w);
        avg.add(re.vruntime, base, rw);
        let v_avg = avg.avg(base, None);
        (w, v_avg, v_avg.wrapping_sub(v) as i64, d.wrapping_sub(v_avg) as i64)
    };
    let (w0, avg0, lag0, to_d0) = state(&m);
    // A second task of the group joins it here: its entity is reweighted in place.
    let joined = m.create(0, now, on(0)).unwrap();
    m.move_task(now, joined, g).unwrap();
    let (w1, avg1, lag1, to_d1) = state(&m);
    assert!(ge.on_rq() && w1 > w0, "reweighted while queued: {w0} to {w1}");
    let near = |a: i64, b: i64| (a - b).abs() <= 2;
    assert!(near(avg1 as i64, avg0 as i64), "the average stays: {avg0} to {avg1}");
    let want = crate::eevdf::reweighted(lag0, w0, w1);
    assert!(near(lag1, want), "lag {lag0} at {w0}: {lag1} at {w1}, want {want}");
    let want = crate::eevdf::reweighted(to_d0, w0, w1);
    assert!(near(to_d1, want), "deadline {to_d0} past V at {w0}: {to_d1} at {w1}, want {want}");
    m.check_invariants().unwrap();
}

/// A dequeued group entity reweighted (its group's `cpu.weight` set while the group sleeps
/// here) keeps its lag as the same service: the lag in the new weight's virtual time, scaled
/// by old / new, as Linux 6.6's `reweight_entity` does off the queue. Its vruntime moves by
/// as much (it still marks where the average stood when it left, which a debt is paid off
/// from), and what is left of its request takes as long at the new weight.
#[test]
fn a_dequeued_group_entitys_lag_is_rescaled_with_its_weight() {
    let m: Box<M<2>> = boot::<2>(Features::default() | Features::EEVDF);
    let mut now = 1;
    let on0 = TaskParams { affinity: crate::CpuMask::single(0), ..TaskParams::default() };
    let g = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    let p = m.create(0, now, on0).unwrap();
    m.move_task(now, p, g).unwrap();
    let _r = m.create(0, now, on0).unwrap();
    let t = now + 200 * MS;
    run(&m, &mut now, t);
    let ge = m.pool().group_cell(0, g.slot()).unwrap();
    // `p` blocks part-way through a run: its group entity leaves with a lag.
    assert!(block_part_way(&m, &mut now, p, |_| ge.vlag() != 0), "the group entity left with a lag");
    let (w0, v0) = (ge.weight(), ge.vlag());
    let (vr0, d0) = (ge.vruntime(), ge.deadline());
    assert!(!ge.on_rq());
    m.set_group_weight(now, g, CpuWeight::new(400).unwrap()).unwrap();
    let (w1, v1) = (ge.weight(), ge.vlag());
    assert!(w1 > w0, "reweighted while dequeued: {w0} to {w1}");
    assert_eq!(v1, crate::eevdf::reweighted(v0, w0, w1), "lag {v0} at {w0}");
    // Where the average stood, vruntime + lag, stays put.
    let vr1 = ge.vruntime();
    assert_eq!(vr1.wrapping_add(v1 as u64), vr0.wrapping_add(v0 as u64), "the mark moved");
    let left = crate::eevdf::reweighted(d0.wrapping_sub(vr0) as i64, w0, w1);
    assert_eq!(ge.deadline().wrapping_sub(vr1) as i64, left, "request left {} at {w0}", d0.wrapping_sub(vr0));
    m.check_invariants().unwrap();
}

/// A sleeper moved to another group takes the request it slept in along, rebased with its
/// vruntime onto the new group's runqueue (for a wakeup that still owes service).
#[test]
fn a_sleeper_moved_between_groups_takes_its_request_along() {
    // (Four CPUs for a 2.25 ms slice, longer than the 1 ms tick; every task on CPU 0.)
    let m: Box<M<4>> = boot::<4>(Features::default() | Features::EEVDF);
    let mut now = 1;
    let (a, b) = (
        m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap(),
        m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap(),
    );
    let pin = |tasks: &[crate::TaskId], now| {
        for &t in tasks {
            m.set_affinity(now, t, crate::CpuMask::single(0)).unwrap();
        }
    };
    let tasks = spinners(&m, now, a, 2);
    pin(&tasks, now);
    let p = tasks[0];
    // Group `b` starts later: its runqueue's vruntimes stand apart from `a`'s.
    let t = now + 100 * MS;
    run(&m, &mut now, t);
    pin(&spinners(&m, now, b, 2), now);
    let t = now + 20 * MS;
    run(&m, &mut now, t);
    let request = |m: &M<4>| {
        let e = m.entity(p).unwrap();
        e.deadline.wrapping_sub(e.vruntime)
    };
    let slice = crate::eevdf::to_virtual(m.tunables().min_granularity_ns, 1024);
    assert!(block_part_way(&m, &mut now, p, |m| request(m) < slice), "p slept mid-request");
    let left = request(&m);
    m.move_task(now, p, b).unwrap();
    assert_eq!(request(&m), left, "the request moved with its vruntime");
    m.wake(0, now, p).unwrap();
    m.check_invariants().unwrap();
}

/// A throttled group's entity comes back with the lag it left with (Linux dequeues it without
/// a delay, so it works off no debt while away): placed at the average less its scaled lag,
/// it stands its lag behind the new average. Paying the debt off as a sleeper's, 95 ms of the
/// average moving on would have forgiven it all.
#[test]
fn a_throttled_group_entity_keeps_its_debt() {
    let m = boot::<1>(Features::default() | Features::EEVDF);
    let mut now = 1;
    let g = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    m.set_group_max(now, g, super::tests::max("5000 100000")).unwrap();
    let inside = spinners(&m, now, g, 1)[0];
    for _ in 0..2 {
        m.create(0, now, TaskParams::default()).unwrap();
    }
    let ge = || m.pool().group_cell(0, g.slot()).unwrap();
    let throttled = |m: &M<1>| on_level(m, 0, g, |lv| lv.runtime().throttled);
    let mut judged = 0;
    for _ in 0..10 {
        run_until(&m, &mut now, 200, "the group throttled", |m| throttled(m));
        let debt = ge().vlag();
        run_until(&m, &mut now, 200, "the group let go", |m| !throttled(m));
        // (Judged while a root task runs: the average then is the root's, `curr` its own.)
        if debt >= 0 || m.current(0) == Some(inside) {
            continue;
        }
        judged += 1;
        placed_with_its_debt(&m, ge().vruntime(), debt);
    }
    assert!(judged > 0, "the group's entity left owing at least once");
    m.check_invariants().unwrap();
}

/// A throttle that empties the level above takes that level's entity with it, and Linux
/// dequeues it without a delay too: woken again by a task of a sibling group while the
/// throttled group waits, it comes back with the lag it left with, debt included. Paying it
/// off as a sleeper's, the 20 ms the average moved on meanwhile would have forgiven it all.
#[test]
fn an_ancestor_a_throttle_took_keeps_its_debt_when_a_sibling_wakes() {
    let m = boot::<1>(Features::default() | Features::EEVDF);
    let mut now = 1;
    let parent = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    let limited = m.create_group(parent, CpuWeight::DEFAULT).unwrap();
    let sibling = m.create_group(parent, CpuWeight::DEFAULT).unwrap();
    m.set_group_max(now, limited, super::tests::max("5000 100000")).unwrap();
    spinners(&m, now, limited, 1);
    let sleeper = spinners(&m, now, sibling, 1)[0];
    for _ in 0..2 {
        m.create(0, now, TaskParams::default()).unwrap();
    }
    // Requests of three ticks: the limited group's 5 ms run out 2 ticks into one, with the
    // parent ahead of the average.
    let mut t = m.tunables();
    t.min_granularity_ns = 3 * MS;
    m.set_tunables(t).unwrap();
    let pe = || m.pool().group_cell(0, parent.slot()).unwrap();
    let throttled = |m: &M<1>| on_level(m, 0, limited, |lv| lv.runtime().throttled);
    let mut judged = 0;
    for _ in 0..10 {
        // Once the limited group runs again, the sibling's task sleeps, so that the parent
        // holds the limited group alone when its runtime runs out.
        run_until(&m, &mut now, 200, "the group let go", |m| !throttled(m));
        run_until(&m, &mut now, 400, "the sibling's task runs", |m| m.current(0) == Some(sleeper));
        m.block(0, now, sleeper).unwrap();
        m.schedule(0, now).unwrap();
        m.finish_switch(0, now).unwrap();
        if throttled(&m) {
            m.wake(0, now, sleeper).unwrap();
            continue;
        }
        run_until(&m, &mut now, 200, "the group throttled", |m| throttled(m));
        assert!(!pe().on_rq(), "the throttle took the parent's entity");
        let debt = pe().vlag();
        let t = now + 20 * MS;
        run(&m, &mut now, t);
        let still = throttled(&m);
        m.wake(0, now, sleeper).unwrap();
        if debt >= 0 || !still {
            continue;
        }
        judged += 1;
        placed_with_its_debt(&m, pe().vruntime(), debt);
    }
    assert!(judged > 0, "the parent's entity left owing at least once");
    m.check_invariants().unwrap();
}
