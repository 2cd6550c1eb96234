//! Moves that need room on another CPU, when runqueues are full: an affinity change is
//! refused with nothing changed rather than leaving a task where its affinity forbids, a
//! running task's move is planned into a slot reserved for it, and that plan survives a
//! platform calling `schedule` twice without `finish_switch`.

use sched_core::{CpuMask, Features, SchedError, Smp, TaskId, TaskParams, TaskState};
use sched_testkit::{machine, run_cpu, Recorder};

/// 2 CPUs, 8 runnable tasks each.
type M = Smp<Recorder, 2, 32, 8>;
const NOW: u64 = 1_000_000_000;

fn pinned(m: &M, cpu: usize) -> TaskId {
    let p = TaskParams { affinity: CpuMask::single(cpu), ..TaskParams::default() };
    m.create(cpu, NOW, p).unwrap()
}

/// Two tasks pinned to CPU 0, which runs one of them: (running, queued).
fn two_on_cpu0(m: &M) -> (TaskId, TaskId) {
    let (a, b) = (pinned(m, 0), pinned(m, 0));
    let running = run_cpu(m, 0, NOW).unwrap();
    (running, if running == a { b } else { a })
}

/// CPU 1 full of tasks pinned there; returns them.
fn fill_cpu1(m: &M) -> Vec<TaskId> {
    let ids: Vec<TaskId> = (0..8).map(|_| pinned(m, 1)).collect();
    assert_eq!(
        m.create(1, NOW, TaskParams { affinity: CpuMask::single(1), ..TaskParams::default() }),
        Err(SchedError::RunQueueFull)
    );
    ids
}

#[test]
fn d4_queued_task_onto_full_cpus_is_refused_and_nothing_changes() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(2));
    // t: the one that waits queued.
    let (_, t) = two_on_cpu0(&m);
    let ones = fill_cpu1(&m);
    let before = (m.entity(t).unwrap(), m.task_cpu(t), m.state(t));
    // Used to return Ok and leave t queued on CPU 0, outside its new affinity.
    assert_eq!(m.set_affinity(NOW, t, CpuMask::single(1)), Err(SchedError::RunQueueFull));
    assert_eq!((m.entity(t).unwrap(), m.task_cpu(t), m.state(t)), before, "nothing changed");
    m.check_invariants().unwrap();
    // With room, it moves at once.
    m.exit(NOW, ones[3]).unwrap();
    m.set_affinity(NOW, t, CpuMask::single(1)).unwrap();
    assert_eq!(m.task_cpu(t), Ok(1));
    assert_eq!(m.entity(t).unwrap().affinity, CpuMask::single(1));
    m.check_invariants().unwrap();
}

#[test]
fn d4_running_task_leaves_into_a_slot_reserved_for_it() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(2));
    let t = pinned(&m, 0);
    assert_eq!(run_cpu(&m, 0, NOW), Some(t));
    let ones = fill_cpu1(&m);
    assert_eq!(m.set_affinity(NOW, t, CpuMask::single(1)), Err(SchedError::RunQueueFull));
    assert_eq!(m.entity(t).unwrap().affinity, CpuMask::single(0), "refused: nothing changed");
    assert_eq!(m.current(0), Some(t));
    m.exit(NOW, ones[0]).unwrap();
    // Room for one: t's move is planned into it, so nothing else may take it meanwhile.
    m.set_affinity(NOW, t, CpuMask::single(1)).unwrap();
    assert!(m.need_resched(0), "t is preempted");
    assert_eq!(m.with_cpu(1, |c| c.rq.reserved()), Ok(1));
    let p = TaskParams { affinity: CpuMask::single(1), ..TaskParams::default() };
    assert_eq!(m.create(1, NOW, p), Err(SchedError::RunQueueFull), "the slot is t's");
    m.check_invariants().unwrap();
    assert_eq!(m.schedule(0, NOW + 1).unwrap(), None);
    m.finish_switch(0, NOW + 1).unwrap();
    assert_eq!(m.task_cpu(t), Ok(1));
    assert_eq!(m.with_cpu(1, |c| c.rq.reserved()), Ok(0));
    m.check_invariants().unwrap();
}

#[test]
fn d5_schedule_twice_without_finish_switch_keeps_the_push() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(2));
    let (t, other) = two_on_cpu0(&m);
    m.set_affinity(NOW, t, CpuMask::single(1)).unwrap();
    // The platform switches t out, then calls schedule again before finish_switch (allowed:
    // the second call means the first switch's context is saved).
    assert_eq!(m.schedule(0, NOW + 1).unwrap(), None, "the push switches t out first");
    let next = m.schedule(0, NOW + 2).unwrap();
    m.finish_switch(0, NOW + 2).unwrap();
    // It used to stay queued (or run) on CPU 0, outside its affinity.
    assert_eq!(m.task_cpu(t), Ok(1));
    assert_eq!(next, Some(other));
    m.check_invariants().unwrap();
}

#[test]
fn a_planned_push_is_given_back_when_the_task_blocks_first() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(2));
    let t = pinned(&m, 0);
    assert_eq!(run_cpu(&m, 0, NOW), Some(t));
    m.set_affinity(NOW, t, CpuMask::single(1)).unwrap();
    assert_eq!(m.with_cpu(1, |c| c.rq.reserved()), Ok(1));
    m.block(0, NOW, t).unwrap();
    run_cpu(&m, 0, NOW + 1);
    assert_eq!(m.state(t), Ok(TaskState::Blocked));
    assert_eq!(m.with_cpu(1, |c| c.rq.reserved()), Ok(0), "the reservation was given back");
    // It wakes where its affinity allows.
    assert_eq!(m.wake(0, NOW + 2, t), Ok(1));
    // And widening the affinity of a running task cancels its planned move.
    let u = pinned(&m, 0);
    run_cpu(&m, 0, NOW + 3);
    assert_eq!(m.current(0), Some(u));
    m.set_affinity(NOW + 3, u, CpuMask::single(1)).unwrap();
    m.set_affinity(NOW + 3, u, CpuMask::ALL).unwrap();
    assert_eq!(m.with_cpu(1, |c| c.rq.reserved()), Ok(0));
    run_cpu(&m, 0, NOW + 4);
    assert_eq!(m.task_cpu(u), Ok(0), "it may stay");
    m.check_invariants().unwrap();
}

#[test]
fn a_task_that_blocks_after_its_move_is_planned_does_not_idle_its_cpu() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(2));
    let (t, other) = two_on_cpu0(&m);
    m.set_affinity(NOW, t, CpuMask::single(1)).unwrap();
    m.block(0, NOW, t).unwrap();
    // It blocked before its CPU switched away: it just switches out, and the queued task
    // runs (the CPU used to take the move's path, pick nothing and idle with `other` queued).
    assert_eq!(m.schedule(0, NOW + 1).unwrap(), Some(other));
    m.finish_switch(0, NOW + 1).unwrap();
    assert_eq!(m.with_cpu(1, |c| c.rq.reserved()), Ok(0), "the planned slot was given back");
    assert_eq!(m.state(t), Ok(TaskState::Blocked));
    m.check_invariants().unwrap();
}
