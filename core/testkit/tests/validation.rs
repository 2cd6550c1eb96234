//! Bad configuration is refused with a typed error and changes nothing: a tick rate the
//! jiffy arithmetic cannot represent, setting up a machine that has live tasks, tunables out
//! of range, and CPU numbers beyond 32 bits.

use sched_core::smp::MAX_HZ;
use sched_core::{Features, InitError, SchedError, Smp, TaskParams, Tunables};
use sched_testkit::{machine, run_cpu, Recorder, MS};

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
    let cpu = m.task_cpu(t).unwrap();
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
    // (As far as one step from 0 goes: from there every reading to the end is sane.)
    for cpu in 0..4 {
        m.tick(cpu, i64::MAX as u64).unwrap();
    }
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
        assert_eq!(m.finish_switch(cpu, 2_000), e.map(|()| None));
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

/// A task that slept on CPU 1 wakes onto CPU 0 and waits there in the same PELT period
/// before it is picked, so its load_sum grows while its load_avg (recomputed only at a
/// period boundary) stays as attached; it blocks at once (0 ns run). CPU 0 then crosses a
/// boundary, which folds that growth into the runqueue's load_avg but leaves the parked
/// task's untouched. Renicing it now (v5.7's `reweight_entity` for a task that is not
/// queued: take out `load_avg` and `weight × load_sum` as they stand, recompute
/// `load_avg` from `load_sum` with the new weight, put both back) takes out more sum than
/// average. The runqueue's signals are then legitimately apart by up to the task's own
/// input at its old weight since its last recompute (`weight · period_contrib`, here ~600
/// of load_avg) until the runqueue's next boundary; the invariant checker used to reject
/// that ("rq load_avg inconsistent with load_sum", from a hostile-API run on 2 CPUs).
#[test]
fn renicing_a_parked_task_with_a_stale_load_avg_keeps_invariants() {
    use sched_core::{CpuMask, Policy};
    const PERIOD: u64 = 1 << 20; // one PELT period, in ns
    let m: Box<Smp<Recorder, 2, 16, 8>> = machine(Features::default(), |t| t.init_flat(2));
    let pinned = |nice, policy, cpu| TaskParams { nice, policy, affinity: CpuMask::single(cpu) };
    // CPU 0: a nice-0 task runs for 140 ms and sleeps (its blocked load stays in CPU 0's
    // sums), then a SCHED_IDLE task (weight 3) runs there.
    let u = m.create(0, 1_000_000, pinned(0, Policy::Normal, 0)).unwrap();
    assert_eq!(run_cpu(&*m, 0, 1_000_000), Some(u));
    let bg = m.create(0, 1_000_000, pinned(0, Policy::Idle, 0)).unwrap();
    m.block(0, 140_000_000, u).unwrap();
    assert_eq!(run_cpu(&*m, 0, 140_000_000), Some(bg));
    // A heavy task runs briefly on CPU 1 and sleeps there for ~150 ms, so its blocked
    // load_avg decays to a small part of its weight (a small load_avg is what makes the
    // lag of its load_sum stand out).
    let t = m.create(1, 1_000_000, pinned(-15, Policy::Normal, 1)).unwrap();
    assert_eq!(run_cpu(&*m, 1, 1_000_000), Some(t));
    m.block(1, 2_000_000, t).unwrap();
    assert_eq!(run_cpu(&*m, 1, 2_000_000), None);
    // It wakes on CPU 0 just after a period boundary: removed from CPU 1 (decayed to CPU 1's
    // last update), attached to CPU 0 with that load_avg.
    let wake_at = 150 * PERIOD + 10_000;
    m.tick(1, wake_at).unwrap();
    m.set_affinity(wake_at, t, CpuMask::single(0)).unwrap();
    assert_eq!(m.wake(0, wake_at, t), Ok(0));
    // Picked ~1 ms later, still in the same period: its load_sum grew by ~976 units of
    // waiting, its load_avg was not recomputed. It blocks at once and parks on CPU 0.
    let pick_at = wake_at + 1_000_000;
    assert!(pick_at < 151 * PERIOD);
    assert_eq!(run_cpu(&*m, 0, pick_at), Some(t));
    m.block(0, pick_at, t).unwrap();
    assert_eq!(run_cpu(&*m, 0, pick_at), Some(bg));
    let parked = m.entity(t).unwrap();
    assert!(parked.pelt_attached && !parked.on_rq);
    // Its load_avg lags its load_sum by most of a period's input at weight 29154 (~600).
    let from_sum = |a: &sched_core::pelt::SchedAvg, w: u64| w * a.load_sum / a.divider();
    assert!(from_sum(&parked.avg, parked.weight()) > parked.avg.load_avg + 500, "{:?}", parked.avg);
    // CPU 0 crosses the next boundary: its load_avg now includes the task's growth.
    let later = 151 * PERIOD + 200_000;
    m.tick(0, later).unwrap();
    m.check_invariants().unwrap();
    // Renice the parked task: nice -15 (29154) to -5 (3121).
    m.set_nice(later, t, -5).unwrap();
    m.check_invariants().unwrap();
    let e = m.entity(t).unwrap();
    assert_eq!(e.weight(), 3121);
    assert_eq!(e.avg.load_avg, from_sum(&e.avg, 3121), "load_avg recomputed from load_sum");
    assert_eq!(m.task_cpu(t), Ok(0));
    // As in v5.7, the runqueue's load_avg and load_sum now differ by about that lag; they
    // agree again at CPU 0's next period boundary.
    let rq = m.with_cpu(0, |st| *st.rq.avg()).unwrap();
    assert!(rq.load_avg > from_sum(&rq, 1) + 500, "{rq:?}");
    m.tick(0, 152 * PERIOD + 200_000).unwrap();
    let rq = m.with_cpu(0, |st| *st.rq.avg()).unwrap();
    assert_eq!(rq.load_avg, from_sum(&rq, 1));
    m.check_invariants().unwrap();
}

/// A machine set up again starts with no tickless CPU: the CPUs and LLCs of the old topology
/// leave no trace in the tickless bookkeeping (nor a busy count that wraps below zero).
#[test]
fn a_machine_set_up_again_has_no_tickless_cpu() {
    let m: Box<Smp<Recorder, 2, 16, 16>> = machine(Features::default(), |t| t.init_clusters(2, 1));
    assert_eq!(run_cpu(&m, 0, 1_000), None, "nothing to run");
    m.nohz_enter_idle(0).unwrap();
    assert!(m.nohz().is_tickless(0));
    m.init_with(|t| t.init_flat(2)).unwrap();
    assert_eq!(m.nohz().nr_tickless(), 0, "set up anew");
    assert!(!m.nohz().is_tickless(0));
    assert_eq!(run_cpu(&m, 1, 2_000), None);
    m.nohz_enter_idle(1).unwrap();
    assert_eq!(m.nohz().nr_tickless(), 1, "only CPU 1, which entered since");
    assert!(!m.nohz().is_tickless(0) && m.nohz().is_tickless(1));
    m.check_invariants().unwrap();
}

/// Before `init` there is no CPU and no task: every call that names a CPU, an affinity or a
/// task answers `NotInitialised` — as the porter's `Scheduler` does — and not a complaint
/// about its input (a CPU "out of range" of no CPUs, an id "unknown" among no tasks), and
/// changes nothing. `SingleCpu` before its `init` answers the same.
#[test]
fn every_call_before_init_answers_not_initialised() {
    use sched_core::{CpuMask, NoPlatform, SingleCpu, WakeFlags};
    // An id from a machine that has one, to name a task on a machine that has none.
    let other: Box<M> = machine(Features::default(), |t| t.init_flat(4));
    let t = other.create(0, 1_000, TaskParams::default()).unwrap();
    let m: Box<M> = Box::new(Smp::new(Recorder::new(4), Features::default(), 250));
    let no = Err(SchedError::NotInitialised);
    for cpu in [0, 4] {
        assert_eq!(m.create(cpu, 1_000, TaskParams::default()), no.map(|()| t));
        // Even with a nice value out of range: the machine's state is the first answer.
        assert_eq!(m.create(cpu, 1_000, TaskParams { nice: 99, ..TaskParams::default() }), no.map(|()| t));
        assert_eq!(m.block(cpu, 1_000, t), no);
        assert_eq!(m.wake(cpu, 1_000, t), no.map(|()| 0));
        assert_eq!(m.wake_with(cpu, 1_000, t, WakeFlags::SYNC), no.map(|()| 0));
        assert_eq!(m.tick(cpu, 1_000), no.map(|()| false));
        assert_eq!(m.schedule(cpu, 1_000), no.map(|()| None));
        assert_eq!(m.finish_switch(cpu, 1_000), no.map(|()| None));
        assert_eq!(m.yield_now(cpu, 1_000), no);
        assert_eq!(m.nohz_enter_idle(cpu), no);
    }
    assert_eq!(m.exit(1_000, t), no);
    assert_eq!(m.set_nice(1_000, t, 3), no);
    assert_eq!(m.set_nice(1_000, t, 99), no);
    assert_eq!(m.set_slice(1_000, t, 3_000_000), no);
    assert_eq!(m.set_affinity(1_000, t, CpuMask::single(0)), no);
    assert_eq!(m.set_affinity(1_000, t, CpuMask::default()), no);
    assert_eq!(m.state(t), no.map(|()| sched_core::TaskState::Runnable));
    assert_eq!(m.task_cpu(t), no.map(|()| 0));
    assert_eq!((m.nr_cpus(), m.nr_tasks(), m.platform().events().len()), (0, 0, 0), "nothing changed");
    // Once set up, the same calls check their input.
    m.init_with(|t| t.init_flat(4)).unwrap();
    assert_eq!(m.tick(4, 1_000), Err(SchedError::CpuOutOfRange(4)));
    assert_eq!(m.state(t), Err(SchedError::UnknownTask(t)));

    let s: Box<SingleCpu<NoPlatform, 8, 8>> = Box::new(SingleCpu::empty(NoPlatform));
    assert_eq!(s.create(1_000, TaskParams::default()), no.map(|()| t));
    assert_eq!(s.wake(1_000, t), no.map(|()| false));
    assert_eq!(s.block(1_000, t), no);
    assert_eq!(s.exit(1_000, t), no);
    assert_eq!(s.set_nice(1_000, t, 3), no);
    assert_eq!(s.set_affinity(t, CpuMask::single(0)), no);
    assert_eq!(s.state(t), no.map(|()| sched_core::TaskState::Runnable));
}

/// One reading 2^63 ns or more ahead of the last (a broken clock's `u64::MAX`) is ignored as
/// one that went backwards: the CPU's later, sane readings still charge the running task and
/// preempt it, where taking it would have left every later reading in the past.
#[test]
fn one_wild_clock_reading_does_not_freeze_a_cpu() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(1));
    let a = m.create(0, MS, TaskParams::default()).unwrap();
    let b = m.create(0, MS, TaskParams::default()).unwrap();
    run_cpu(&m, 0, MS);
    let mut now = MS;
    let step = |m: &M, now: &mut u64| {
        *now += MS;
        m.tick(0, *now).unwrap();
        if m.need_resched(0) {
            run_cpu(m, 0, *now);
        }
    };
    for _ in 0..20 {
        step(&m, &mut now);
    }
    m.tick(0, u64::MAX).unwrap();
    let ran = |t| m.entity(t).unwrap().sum_exec_runtime;
    let before = (ran(a), ran(b));
    for _ in 0..200 {
        step(&m, &mut now);
    }
    let (da, db) = (ran(a) - before.0, ran(b) - before.1);
    assert_eq!(da + db, 200 * MS, "every later millisecond charged");
    assert!(da.abs_diff(db) <= 20 * MS, "both kept running: {da} and {db} ns");
    m.check_invariants().unwrap();

    // On two CPUs, a tick at such a reading is no tick: it sets no balancing deadline, and the
    // balance state stays where the sane readings reach it.
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(2));
    for _ in 0..3 {
        m.create(0, MS, TaskParams::default()).unwrap();
    }
    let mut now = MS;
    let both = |m: &M, now: &mut u64, ms: u64| {
        for _ in 0..ms {
            *now += MS;
            for cpu in 0..2 {
                m.tick(cpu, *now).unwrap();
                if m.need_resched(cpu) || m.current(cpu).is_none() {
                    run_cpu(m, cpu, *now);
                }
            }
        }
    };
    both(&m, &mut now, 100);
    m.tick(0, u64::MAX).unwrap();
    both(&m, &mut now, 1_100);
    for d in m.balance_state(0).unwrap().domains.iter().take(m.topology().nr_levels(0)) {
        // (HZ 250: 1.2 s is 300 jiffies; the decay's deadline is a second past a sane reading.)
        assert!(d.last_balance <= 300, "last balance at jiffy {}", d.last_balance);
        assert!(d.next_decay_max_lb_cost <= now + 1_000_000_000, "{}", d.next_decay_max_lb_cost);
    }
    m.check_invariants().unwrap();

    // A switch at such a reading (a task blocks, the CPU goes idle and balances as it does) is
    // taken at the last sane one: the CPU's balance timer and idle mark stay within reach.
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(2));
    let on1 = TaskParams { affinity: sched_core::CpuMask::single(1), ..TaskParams::default() };
    let t = m.create(1, MS, on1).unwrap();
    let mut now = MS;
    both(&m, &mut now, 100);
    assert_eq!(m.current(1), Some(t));
    m.block(1, now, t).unwrap();
    m.schedule(1, u64::MAX).unwrap();
    m.finish_switch(1, u64::MAX).unwrap();
    let j = now / 4_000_000;
    let nb = m.next_balance_of(1).unwrap();
    assert!(nb <= j + 250, "next balance at jiffy {nb}, now jiffy {j}");
    let idle_stamp = m.with_cpu(1, |st| st.idle_stamp).unwrap();
    assert!(idle_stamp <= now, "idle since {idle_stamp}, now {now}");
    m.wake(1, now + MS, t).unwrap();
    both(&m, &mut now, 100);
    m.check_invariants().unwrap();
}

/// The first reading counts from 0: a CPU whose first tick comes at a broken reading (no
/// sane one before it) ignores it as any later CPU would, and its next ticks still charge and
/// preempt its tasks.
#[test]
fn a_wild_first_clock_reading_is_ignored_too() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(1));
    let a = m.create(0, 0, TaskParams::default()).unwrap();
    let b = m.create(0, 0, TaskParams::default()).unwrap();
    run_cpu(&m, 0, 0);
    m.tick(0, u64::MAX).unwrap();
    let ran = |t| m.entity(t).unwrap().sum_exec_runtime;
    let mut now = 0;
    for _ in 0..200 {
        now += MS;
        m.tick(0, now).unwrap();
        if m.need_resched(0) {
            run_cpu(&m, 0, now);
        }
    }
    let (ra, rb) = (ran(a), ran(b));
    assert_eq!(ra + rb, 200 * MS, "every millisecond charged");
    assert!(ra.abs_diff(rb) <= 20 * MS, "both kept running: {ra} and {rb} ns");
    m.check_invariants().unwrap();
}

/// A wakeup at a broken reading does what one at the last sane reading does: the woken CPU
/// learns no idle time from it (`avg_idle`), and the waker's flip count keeps its decay
/// stamp, where `jiffies(u64::MAX)` would have stopped the halving for 2^31 jiffies.
#[test]
fn a_wakeup_at_a_wild_clock_reading_leaves_no_mark() {
    let run = |at: Option<u64>| {
        let m: Box<M> = machine(Features::default(), |t| t.init_flat(2));
        let pin = |c| TaskParams { affinity: sched_core::CpuMask::single(c), ..TaskParams::default() };
        let waker = m.create(0, MS, pin(0)).unwrap();
        let sleeper = m.create(1, MS, pin(1)).unwrap();
        // (Past a second, so the sane wakeup's flips are due for their halving.)
        let mut now = MS;
        for _ in 0..1_200 {
            now += MS;
            for cpu in 0..2 {
                m.tick(cpu, now).unwrap();
                if m.need_resched(cpu) || m.current(cpu).is_none() {
                    run_cpu(&m, cpu, now);
                }
            }
        }
        m.block(1, now, sleeper).unwrap();
        run_cpu(&m, 1, now);
        assert_eq!(m.current(1), None, "CPU 1 idles");
        m.wake(0, at.unwrap_or(now), sleeper).unwrap();
        let flips = m.entity(waker).unwrap();
        (m.with_cpu(1, |st| st.avg_idle).unwrap(), flips.wakee_flips, flips.wakee_flip_decay_ts)
    };
    let sane = run(None);
    assert_eq!(run(Some(u64::MAX)), sane, "(avg_idle, flips, decay stamp) as at the last reading");
}

/// A kicked idle CPU serving the tickless CPUs at a broken reading sets its balancing
/// deadlines from its last sane one: they stay within reach of the later readings.
#[test]
fn a_nohz_pass_at_a_wild_clock_reading_keeps_its_deadlines_in_reach() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(4));
    for _ in 0..3 {
        let t =
            m.create(0, MS, TaskParams { affinity: sched_core::CpuMask::single(0), ..TaskParams::default() });
        t.unwrap();
    }
    run_cpu(&m, 0, MS);
    for cpu in 1..4 {
        run_cpu(&m, cpu, MS);
        m.nohz_enter_idle(cpu).unwrap();
    }
    let mut now = MS;
    while m.platform().kicks().is_empty() {
        now += 4 * MS;
        assert!(now < 2_000 * MS, "no kick in 2 s");
        m.tick(0, now).unwrap();
        if m.need_resched(0) {
            run_cpu(&m, 0, now);
        }
    }
    let kicked = m.platform().kicks()[0];
    assert_eq!(m.nohz_idle_balance(kicked, u64::MAX), Ok(true), "the kick is served");
    // The kicked CPU and every tickless CPU it served.
    let j = now / 4_000_000;
    for cpu in 1..4 {
        for d in m.balance_state(cpu).unwrap().domains.iter().take(m.topology().nr_levels(cpu)) {
            assert!(
                d.last_balance <= j,
                "CPU {cpu}: last balance at jiffy {}, now jiffy {j}",
                d.last_balance
            );
            assert!(
                d.next_decay_max_lb_cost <= now + 1_000_000_000,
                "CPU {cpu}: {}",
                d.next_decay_max_lb_cost
            );
        }
        let nb = m.next_balance_of(cpu).unwrap();
        assert!(nb <= j + 250, "CPU {cpu}: next balance at jiffy {nb}, now jiffy {j}");
    }
    m.check_invariants().unwrap();
}

/// A switch at a reading behind the CPU's clock (another CPU's older reading, moved forward
/// by a call made meanwhile) marks the CPU idle from the clock's time: an idle mark never
/// goes back.
#[test]
fn a_switch_at_a_reading_behind_the_clock_marks_idle_from_the_clock() {
    let m: Box<M> = machine(Features::default(), |t| t.init_flat(2));
    let on1 = TaskParams { affinity: sched_core::CpuMask::single(1), ..TaskParams::default() };
    let t = m.create(1, MS, on1).unwrap();
    run_cpu(&m, 1, MS);
    assert_eq!(m.current(1), Some(t));
    m.tick(1, 20 * MS).unwrap();
    m.block(1, 25 * MS, t).unwrap();
    m.schedule(1, 22 * MS).unwrap();
    m.finish_switch(1, 22 * MS).unwrap();
    assert_eq!(m.current(1), None);
    assert_eq!(m.with_cpu(1, |st| st.idle_stamp).unwrap(), 25 * MS, "idle since the clock's 25 ms");
    m.check_invariants().unwrap();
}

/// Tunables set before the machine is set up have no CPU to hold them (init would replace
/// them with its defaults): refused, not accepted and lost.
#[test]
fn tunables_before_init_are_refused() {
    let m: Box<M> = Box::new(Smp::new(Recorder::new(4), Features::default(), 250));
    assert_eq!(m.set_tunables(Tunables::for_cpus(4)), Err(SchedError::NotInitialised));
    m.init_with(|t| t.init_flat(4)).unwrap();
    let t = Tunables { nr_migrate: 8, ..m.tunables() };
    m.set_tunables(t).unwrap();
    assert_eq!(m.tunables(), t);
}
