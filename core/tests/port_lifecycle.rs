//! What a port sees at the edges of a task's life, through `port::Scheduler` alone: a wakeup
//! refused because every runqueue it may use is full (the task stays blocked; the port
//! retries), and the figures of a CPU left idle (the blocked load of the tasks that ran there
//! stays until PELT decays it, which each tick of the idle CPU does).

use sched_core::port::Scheduler;
use sched_core::{Features, NoPlatform, SchedError, TaskParams, TaskState};

const MS: u64 = 1_000_000;

#[test]
fn a_wake_into_full_runqueues_is_refused_and_the_port_retries() {
    // One CPU whose runqueue holds two tasks.
    let s: Box<Scheduler<NoPlatform, 1, 8, 2>> = Box::new(Scheduler::new(NoPlatform, Features::DEFAULT, 250));
    s.init_with(|t| t.init_flat(1)).unwrap();
    s.cpu_up(0, MS).unwrap();
    let sleeper = s.create(0, MS, TaskParams::default(), ()).unwrap();
    assert_eq!(s.reschedule(0, MS, |_| {}).unwrap().next, Some((sleeper, ())));
    s.block(0, 2 * MS, sleeper).unwrap();
    assert_eq!(s.reschedule(0, 2 * MS, |_| {}).unwrap().next, None);
    let a = s.create(0, 3 * MS, TaskParams::default(), ()).unwrap();
    let _b = s.create(0, 3 * MS, TaskParams::default(), ()).unwrap();
    assert_eq!(s.create(0, 3 * MS, TaskParams::default(), ()), Err(SchedError::RunQueueFull));

    // Refused: the task is still blocked where it slept, and nothing else changed.
    assert_eq!(s.wake(0, 4 * MS, sleeper), Err(SchedError::RunQueueFull));
    assert_eq!(s.state(sleeper), Ok(TaskState::Blocked));
    assert_eq!(s.task_cpu(sleeper), Ok(0));
    assert_eq!(s.stats(0).unwrap().nr_running, 2);
    s.check_invariants().unwrap();

    // Room again (a queued task exits, gone at once): the port's retry succeeds.
    assert_eq!(s.exit(0, 5 * MS, a), Ok(true));
    assert_eq!(s.wake(0, 6 * MS, sleeper), Ok(0));
    assert_eq!(s.state(sleeper), Ok(TaskState::Runnable));
    s.check_invariants().unwrap();
}

#[test]
fn an_idle_cpu_keeps_its_blocked_load_until_its_ticks_decay_it() {
    let s: Box<Scheduler<NoPlatform, 2, 8, 8>> = Box::new(Scheduler::new(NoPlatform, Features::DEFAULT, 250));
    s.init_with(|t| t.init_flat(2)).unwrap();
    s.cpu_up(0, MS).unwrap();
    s.cpu_up(1, MS).unwrap();
    let tasks: Vec<_> = (0..2).map(|_| s.create(0, MS, TaskParams::default(), ()).unwrap()).collect();
    let mut now = MS;
    // 300 ms of two spinners, one per CPU, ticking at 250 HZ.
    for _ in 0..75 {
        now += 4 * MS;
        for cpu in 0..2 {
            if s.tick(cpu, now).unwrap() || s.need_resched(cpu).unwrap() {
                s.reschedule(cpu, now, |_| {}).unwrap();
            }
        }
    }
    for &t in &tasks {
        let cpu = s.task_cpu(t).unwrap();
        assert_eq!(s.exit(cpu, now, t), Ok(false), "running: it leaves with its CPU's next switch");
        let run = s.reschedule(cpu, now, |_| {}).unwrap();
        assert_eq!(run.next, None);
    }
    assert_eq!(s.nr_tasks(), 0);
    for cpu in 0..2 {
        let st = s.stats(cpu).unwrap();
        assert_eq!(st.nr_running, 0);
        assert!(st.idle);
        // The load the exited task left is still counted: PELT has not decayed it yet.
        assert!(st.util > 500, "cpu {cpu}: util {}", st.util);
    }
    // A second of idle ticks: the periodic balance of each idle CPU decays its blocked
    // averages (32 ms half-life: 2^-31 of it remains), and publishes them.
    for _ in 0..250 {
        now += 4 * MS;
        for cpu in 0..2 {
            assert!(!s.tick(cpu, now).unwrap());
        }
    }
    for cpu in 0..2 {
        let st = s.stats(cpu).unwrap();
        let (load, util, runnable) = (st.load, st.util, st.runnable);
        assert_eq!(
            (load, util, runnable),
            (0, 0, 0),
            "cpu {cpu}: load {load} util {util} runnable {runnable}"
        );
    }
    s.check_invariants().unwrap();
}

#[test]
fn before_init_every_call_says_so_and_a_cpu_never_up_says_that() {
    use sched_core::TaskId;
    let s: Box<Scheduler<NoPlatform, 2, 8, 8>> = Box::new(Scheduler::new(NoPlatform, Features::DEFAULT, 250));
    let nobody = TaskId::new(0, 0);
    let no = Err(SchedError::NotInitialised);
    assert_eq!(s.cpu_up(0, MS), no);
    assert_eq!(s.tick(0, MS), no.map(|_| false));
    assert_eq!(s.need_resched(0), no.map(|_| false));
    assert_eq!(s.current(0), no.map(|_| None));
    assert_eq!(s.create(0, MS, TaskParams::default(), ()), no.map(|_| nobody));
    assert_eq!(s.wake(0, MS, nobody), no.map(|_| 0));
    assert_eq!(s.payload(nobody), no);
    assert_eq!(s.state(nobody), no.map(|_| TaskState::Blocked));
    assert_eq!(s.task_cpu(nobody), no.map(|_| 0));
    assert_eq!(s.idle_enter(0), no.map(|_| false));
    assert_eq!(s.check_invariants().map_err(|v| v.what), Err("not initialised"));
    assert_eq!(s.nr_tasks(), 0);

    s.init_with(|t| t.init_flat(2)).unwrap();
    s.check_invariants().unwrap();
    s.cpu_up(0, MS).unwrap();
    // CPU 1 never came up: every call naming it says so, and changes nothing.
    let down = Err(SchedError::CpuNotUp(1));
    assert_eq!(s.need_resched(1), down.map(|_| false));
    assert_eq!(s.current(1), down.map(|_| None));
    assert_eq!(s.tick(1, MS), down.map(|_| false));
    assert_eq!(s.reschedule(1, MS, |_| {}).map(|r| r.next), down.map(|_| None));
    assert_eq!(s.idle_enter(1), down.map(|_| false));
    assert_eq!(s.idle_exit(1), down);
    assert_eq!(s.current(0), Ok(None));
    assert_eq!(s.need_resched(0), Ok(false));
    s.check_invariants().unwrap();
}
