//! Bad configuration is refused with a typed error and changes nothing: a tick rate the
//! jiffy arithmetic cannot represent, setting up a machine that has live tasks, tunables out
//! of range, and CPU numbers beyond 32 bits.

use sched_core::smp::MAX_HZ;
use sched_core::{Features, InitError, SchedError, Smp, TaskParams, Tunables};
use sched_testkit::{machine, run_cpu, Recorder};

type M = Smp<Recorder, 4, 16, 16>;

#[test]
fn init_refuses_a_tick_rate_above_max_hz() {
    // 10⁹ + 1 HZ made the first tick divide by zero (10⁹ / HZ = 0 ns per jiffy).
    for hz in [MAX_HZ + 1, 1_000_000_001, u32::MAX] {
        let m: Box<M> = Box::new(Smp::new(Recorder::new(4), Features::default(), hz));
        assert_eq!(m.init_with(|t| t.init_flat(4)), Err(InitError::Hz(hz)));
        assert_eq!(m.nr_cpus(), 0, "nothing was set up");
    }
    // The highest accepted rate runs.
    let m: Box<M> = Box::new(Smp::new(Recorder::new(4), Features::default(), MAX_HZ));
    m.init_with(|t| t.init_flat(4)).unwrap();
    let t = m.create(0, 1_000, TaskParams::default()).unwrap();
    let cpu = m.task_cpu(t).unwrap() as usize;
    run_cpu(&m, cpu, 1_000);
    for step in 1..2_000u64 {
        m.tick(cpu, 1_000 + step * 1_000).unwrap();
    }
    m.check_invariants().unwrap();
}

#[test]
fn init_refuses_a_machine_with_live_tasks() {
    let m: Box<M> = machine(Features::default(), |t| t.init_clusters(2, 2));
    let t = m.create(3, 1_000, TaskParams::default()).unwrap();
    let before = (m.nr_cpus(), m.task_cpu(t), m.state(t), m.topology().nr_levels(3));
    // A smaller machine would leave the task on a CPU that no longer exists.
    assert_eq!(m.init_with(|t| t.init_flat(2)), Err(InitError::TasksAlive(1)));
    assert_eq!((m.nr_cpus(), m.task_cpu(t), m.state(t), m.topology().nr_levels(3)), before);
    m.check_invariants().unwrap();
    // Once the task is gone the machine may be set up again.
    m.exit(2_000, t).unwrap();
    m.init_with(|t| t.init_flat(2)).unwrap();
    assert_eq!(m.nr_cpus(), 2);
}

#[test]
fn tunables_out_of_range_are_refused_and_change_nothing() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(4));
    let good = m.tunables();
    let bad = [
        (Tunables { latency_ns: u64::MAX, ..good }, "latency_ns"),
        (Tunables { latency_ns: 0, ..good }, "latency_ns"),
        (Tunables { min_granularity_ns: u64::MAX, ..good }, "min_granularity_ns"),
        (Tunables { wakeup_granularity_ns: u64::MAX, ..good }, "wakeup_granularity_ns"),
        (Tunables { nr_latency: 0, ..good }, "nr_latency"),
        (Tunables { migration_cost_ns: u64::MAX, ..good }, "migration_cost_ns"),
        (Tunables { nr_migrate: u32::MAX, ..good }, "nr_migrate"),
    ];
    for (t, name) in bad {
        assert_eq!(m.set_tunables(t), Err(SchedError::InvalidTunable(name)));
        assert_eq!(m.tunables(), good, "refused {name}: nothing changed");
    }
    // Extreme but accepted values run without overflow.
    let edge = Tunables {
        latency_ns: 1_000_000_000,
        min_granularity_ns: 1_000_000_000,
        wakeup_granularity_ns: 1_000_000_000,
        nr_latency: 10_000,
        migration_cost_ns: 1_000_000_000,
        nr_migrate: 1024,
        ..good
    };
    m.set_tunables(edge).unwrap();
    let ids: Vec<_> = (0..6).map(|_| m.create(0, 1_000, TaskParams::default()).unwrap()).collect();
    for step in 1..200u64 {
        for cpu in 0..4 {
            let now = step * 4_000_000 + cpu as u64;
            m.tick(cpu, now).unwrap();
            if m.need_resched(cpu) || m.current(cpu).is_none() {
                run_cpu(&m, cpu, now);
            }
        }
    }
    assert!(ids.iter().all(|&t| m.state(t).is_ok()));
    m.check_invariants().unwrap();
}

#[test]
fn out_of_range_cpus_are_reported_whole() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(4));
    // 2³² + 1 used to be reported as CPU 1.
    let cpu = (1usize << 32) + 1;
    assert_eq!(m.create(cpu, 0, TaskParams::default()), Err(SchedError::CpuOutOfRange(cpu)));
    assert_eq!(m.balance_state(usize::MAX), Err(SchedError::CpuOutOfRange(usize::MAX)));
    assert_eq!(SchedError::CpuOutOfRange(cpu).to_string(), "cpu 4294967297 is out of range");
}

#[test]
fn a_clock_near_its_end_does_not_overflow() {
    let m: Box<M> = machine(Features::default(), |t| t.init_clusters(2, 2));
    let start = u64::MAX - 50_000_000;
    let mut ids = vec![];
    for i in 0..6 {
        ids.push(m.create(i % 4, start, TaskParams::default()).unwrap());
    }
    let mut now = start;
    while let Some(next) = now.checked_add(1_000_000) {
        now = next;
        for cpu in 0..4 {
            m.tick(cpu, now).unwrap();
            if m.need_resched(cpu) || m.current(cpu).is_none() {
                run_cpu(&m, cpu, now);
            }
        }
        if let Some(t) = m.current(1) {
            m.block(1, now, t).unwrap();
            run_cpu(&m, 1, now);
            m.wake(0, now, t).unwrap();
        }
    }
    m.tick(0, u64::MAX).unwrap();
    run_cpu(&m, 0, u64::MAX);
    assert!(ids.iter().all(|&t| m.state(t).is_ok()));
    m.check_invariants().unwrap();
}

#[test]
fn every_call_on_a_cpu_out_of_range_is_refused() {
    use sched_core::placement::{SelectFor, Waker};
    use sched_core::{IdleType, WakeFlags};
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(4));
    let t = m.create(0, 1_000, TaskParams::default()).unwrap();
    let before = (m.task_cpu(t), m.state(t), m.platform().events().len());
    for cpu in [4, 64, usize::MAX] {
        let e = Err(SchedError::CpuOutOfRange(cpu));
        // These used to be ignored without a word.
        assert_eq!(m.tick(cpu, 2_000), e.map(|()| false));
        assert_eq!(m.schedule(cpu, 2_000), e.map(|()| None));
        assert_eq!(m.finish_switch(cpu, 2_000), e);
        assert_eq!(m.yield_now(cpu, 2_000), e);
        assert_eq!(m.nohz_enter_idle(cpu), e);
        assert_eq!(m.nohz_exit_idle(cpu), e);
        assert_eq!(m.nohz_idle_balance(cpu, 2_000), e.map(|()| false));
        assert_eq!(m.balance_domain(cpu, 0, IdleType::Idle, 2_000), e.map(|()| (0, false)));
        let mut ent = m.entity(t).unwrap();
        let sel = m.select_task_rq(cpu, &mut ent, SelectFor::Fork, WakeFlags::FORK, Waker::default());
        assert_eq!(sel, e.map(|()| (0, false)));
        let sel =
            m.select_task_rq(0, &mut ent, SelectFor::Wake(cpu as u32), WakeFlags::empty(), Waker::default());
        assert_eq!(sel, Err(SchedError::CpuOutOfRange(cpu as u32 as usize)));
    }
    assert_eq!((m.task_cpu(t), m.state(t), m.platform().events().len()), before, "nothing changed");
    m.check_invariants().unwrap();
}
