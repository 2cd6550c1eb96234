//! Placement and idle-balancing scenarios of docs/linux-v5.7.md §6: S8 (misfit on big.LITTLE), S9 (asym
//! packing), S15 (fork bursts on 2×4), and a wake-all-on-one-CPU burst spread by the nohz
//! kick and periodic balancing, counted in ticks of a deterministic driver.

use std::sync::atomic::Ordering::Relaxed;

use sched_core::balance::{imbalance::MigrationType, stats::GroupType, BalanceRecord, Outcome};
use sched_core::IdleType;
use sched_core::{CpuMask, Features, Smp, TaskId, TaskParams, TopologyDesc};
use sched_testkit::{idle_all, run_cpu, spawn_on, Recorder, MS};

type M = Smp<Recorder, 8, 64, 64>;
const NOW: u64 = 1_000 * MS;

fn last_record(m: &M) -> BalanceRecord {
    m.platform().last_balance()
}

#[test]
fn s8_misfit_task_moves_to_a_big_cpu() {
    let m: Box<M> = Box::new(Smp::new(Recorder::new(8), Features::default(), 250));
    m.init_with(|t| t.init_big_little(4, 4, 446)).unwrap();
    idle_all(&m, NOW - 100 * MS);
    let t = spawn_on(&m, 1, NOW);
    assert_eq!(run_cpu(&m, 1, NOW), Some(t));
    m.inject_task_pelt(t, 600, 600, 1024).unwrap();
    m.inject_rq_pelt(1, 446, 600, 1024).unwrap();
    assert_eq!(m.stats(1).misfit_task_load.load(Relaxed) as u64, 1024, "600 does not fit 446");
    m.balance_domain(4, 1, IdleType::Idle, NOW).unwrap();
    let r = last_record(&m);
    assert_eq!((r.local, r.busiest), (Some(GroupType::HasSpare), Some(GroupType::MisfitTask)));
    assert_eq!((r.migration, r.imbalance, r.busiest_cpu), (Some(MigrationType::Misfit), 1, Some(1)));
    assert_eq!(r.outcome, Outcome::ActiveBalance, "voluntary: no failures needed");
    assert_eq!(m.balance_state(4).unwrap().domains[1].balance_interval_ms, 8, "interval reset");
    assert_eq!(m.platform().stoppers(), [1]);
    assert_eq!(run_cpu(&m, 1, NOW), None, "the stopper switches the task out");
    assert_eq!(m.task_cpu(t).unwrap(), 4);
    m.check_invariants().unwrap();
}

#[test]
fn s8_misfit_tick_kicks_nohz_and_wakeup_picks_a_big_cpu() {
    let m: Box<M> = Box::new(Smp::new(Recorder::new(8), Features::default(), 250));
    m.init_with(|t| t.init_big_little(4, 4, 446)).unwrap();
    idle_all(&m, NOW - 100 * MS);
    for cpu in [0, 2, 3, 4, 5, 6, 7] {
        m.nohz_enter_idle(cpu).unwrap();
    }
    let t = spawn_on(&m, 1, NOW);
    run_cpu(&m, 1, NOW);
    m.inject_task_pelt(t, 600, 600, 1024).unwrap();
    m.tick(1, NOW + 4 * MS).unwrap();
    assert_eq!(m.platform().kicks(), [0], "the first tickless idle CPU is kicked");
    // The task sleeps; its wakeup goes to an idle CPU it fits: a big one.
    m.block(1, NOW + 5 * MS, t).unwrap();
    run_cpu(&m, 1, NOW + 5 * MS);
    let cpu = m.wake(1, NOW + 6 * MS, t).unwrap();
    assert!(cpu >= 4, "select_idle_capacity chose CPU{cpu}");
}

#[test]
fn s9_asym_packing_moves_the_task_to_the_preferred_cpu() {
    let m: Box<M> = Box::new(Smp::new(Recorder::new(8), Features::default(), 250));
    let smt = [CpuMask::range(0, 2), CpuMask::range(2, 4)];
    let clusters = [CpuMask::range(0, 4)];
    let prio = [0, -1, -2, -3];
    let desc = TopologyDesc {
        nr_cpus: 4,
        smt: &smt,
        clusters: &clusters,
        nodes: &[],
        capacity: &[],
        asym_packing: Some(&prio),
    };
    m.init(&desc).unwrap();
    idle_all(&m, NOW - 100 * MS);
    let t = spawn_on(&m, 2, NOW);
    run_cpu(&m, 2, NOW);
    let mc = m.topology().nr_levels(0) - 1;
    m.balance_domain(0, mc, IdleType::Idle, NOW).unwrap();
    let r = last_record(&m);
    assert_eq!(r.busiest, Some(GroupType::AsymPacking));
    assert_eq!((r.migration, r.imbalance, r.busiest_cpu), (Some(MigrationType::Task), 1, Some(2)));
    assert_eq!(r.outcome, Outcome::ActiveBalance);
    assert_eq!(run_cpu(&m, 2, NOW), None);
    assert_eq!(m.task_cpu(t).unwrap(), 0);
}

fn s15_machine(parent_util: u64) -> (Box<M>, TaskId) {
    let m: Box<M> = Box::new(Smp::new(Recorder::new(8), Features::default(), 250));
    m.init_with(|t| t.init_clusters(2, 4)).unwrap();
    idle_all(&m, NOW - 100 * MS);
    let parent = spawn_on(&m, 0, NOW);
    run_cpu(&m, 0, NOW);
    m.inject_task_pelt(parent, parent_util, parent_util as u32, 1024).unwrap();
    m.inject_rq_pelt(0, parent_util, parent_util, 1024).unwrap();
    (m, parent)
}

#[test]
fn s15_fork_burst_alternates_clusters() {
    let (m, _) = s15_machine(500);
    let cpus: Vec<usize> = (0..8)
        .map(|_| {
            let c = m.create(0, NOW, TaskParams::default()).unwrap();
            m.task_cpu(c).unwrap()
        })
        .collect();
    // B (most recently idled first), A(CPU1), B, A(CPU2), B, A(CPU3), B, then CPU0.
    assert_eq!(cpus, [7, 1, 6, 2, 5, 3, 4, 0]);
    m.check_invariants().unwrap();
}

#[test]
fn s15_fork_burst_with_a_fully_busy_parent_cpu() {
    let (m, _) = s15_machine(900);
    let last = (0..8).map(|_| m.task_cpu(m.create(0, NOW, TaskParams::default()).unwrap()).unwrap()).last();
    assert_eq!(last, Some(1), "the 8th child goes to the first idlest CPU of A");
}

#[test]
fn s15_children_that_block_stack_on_the_most_recently_idled_cpu() {
    let (m, _) = s15_machine(500);
    let mut now = NOW;
    let mut cpus = vec![];
    for _ in 0..8 {
        now += MS;
        let c = m.create(0, now, TaskParams::default()).unwrap();
        let cpu = m.task_cpu(c).unwrap();
        cpus.push(cpu);
        // The child runs briefly and blocks: its CPU idles again, most recently of all.
        assert_eq!(run_cpu(&m, cpu, now), Some(c));
        m.block(cpu, now, c).unwrap();
        assert_eq!(run_cpu(&m, cpu, now), None);
    }
    assert!(cpus.iter().all(|&c| c == cpus[0] && c >= 4), "all on one CPU of B: {cpus:?}");
}

/// Drives 8 CPUs in lockstep ticks of 4 ms (HZ=250); each CPU reschedules when asked.
/// Returns the number of ticks until every CPU runs exactly one task.
fn spread_ticks(tickless: bool, rule: bool) -> u32 {
    let mut f = Features::default();
    f.set(Features::UTIL_PULL_SKIPS_LONE_TASK, rule);
    let m: Box<M> = Box::new(Smp::new(Recorder::new(8), f, 250));
    m.init_with(|t| t.init_clusters(2, 4)).unwrap();
    idle_all(&m, NOW - 100 * MS);
    // Eight spinners woken all on CPU0 (created there pinned, then allowed everywhere).
    let tasks: Vec<TaskId> = (0..8).map(|_| spawn_on(&m, 0, NOW)).collect();
    run_cpu(&m, 0, NOW);
    if tickless {
        for cpu in 1..8 {
            m.nohz_enter_idle(cpu).unwrap();
        }
    }
    let mut now = NOW;
    for tick in 1..=500u32 {
        now += 4 * MS;
        for cpu in 0..8 {
            let idle = m.current(cpu).is_none();
            // A tickless idle CPU gets no tick; it only runs when woken (resched/kick).
            if !(tickless && idle) {
                m.tick(cpu, now).unwrap();
            }
            if m.platform().take_resched(cpu) || m.need_resched(cpu) {
                let next = run_cpu(&m, cpu, now);
                if m.need_resched(cpu) {
                    run_cpu(&m, cpu, now);
                }
                if tickless && next.is_none() && m.current(cpu).is_none() {
                    m.nohz_enter_idle(cpu).unwrap();
                } else if next.is_some() {
                    m.nohz_exit_idle(cpu).unwrap();
                }
            }
        }
        let per_cpu: Vec<u32> = (0..8).map(|c| m.stats(c).nr_running.load(Relaxed)).collect();
        if per_cpu.iter().all(|&n| n == 1) && (0..8).all(|c| m.current(c).is_some()) {
            m.check_invariants().unwrap();
            assert!(tasks.iter().all(|&t| m.state(t).is_ok()));
            return tick;
        }
    }
    panic!("not spread after 500 ticks");
}

#[test]
fn wake_all_on_one_cpu_spreads_within_bounded_ticks() {
    // Tick 1: every idle CPU is due for its first balance (tickless: CPU0's tick kicks
    // CPU1, which balances for CPUs 2-7 and then itself). Filling an idle CPU's spare
    // capacity (migrate_util) pulls several small new tasks at once: the first idle CPU
    // takes six queued tasks from CPU0, the next ones pull from it in turn, and six CPUs
    // end with one task each. The task left queued on CPU0 ran until CPU0's tick 1
    // preempted it: cache hot, so the last idle CPU (CPU7, resp. CPU1) finds nothing
    // detachable. Ticking, CPU7's next balance is due 2 jiffies later and pulls it at tick
    // 3; tickless, CPU0's tick 2 kicks CPU1 again, which pulls it then. The seed's rule
    // (which skips lone tasks) makes no difference here.
    for (tickless, rule, want) in [(false, true, 3), (true, true, 2), (false, false, 3), (true, false, 2)] {
        let ticks = spread_ticks(tickless, rule);
        eprintln!("tickless={tickless} rule={rule}: spread after {ticks} ticks");
        assert_eq!(ticks, want, "tickless={tickless} rule={rule}");
    }
}

#[test]
fn exec_balancing_moves_the_task_to_the_idlest_cpu() {
    let m: Box<M> = Box::new(Smp::new(Recorder::new(8), Features::default(), 250));
    m.init_with(|t| t.init_clusters(2, 4)).unwrap();
    idle_all(&m, NOW - 100 * MS);
    let a = spawn_on(&m, 0, NOW);
    let b = spawn_on(&m, 0, NOW);
    let first = run_cpu(&m, 0, NOW).unwrap();
    let _ = (a, b);
    // Exec from a CPU shared with another task: BALANCE_EXEC finds an idle CPU of B.
    let dest = m.exec(0, NOW, first).unwrap();
    assert!(dest >= 4, "exec placed on CPU{dest}");
    assert!(m.need_resched(0));
    assert_ne!(run_cpu(&m, 0, NOW), Some(first), "switched out to move");
    assert_eq!(m.task_cpu(first).unwrap(), dest);
    m.check_invariants().unwrap();
}

/// A lone tickless CPU must keep being kicked. When the idle balancer finds no other
/// tickless CPU to serve, it still has to publish its own next balance time: publishing
/// "nothing due for a minute" silenced every later kick, and a CPU stayed idle while a
/// neighbour ran two spinners for the whole run (seen in QEMU, deterministic mode).
#[test]
fn lone_tickless_cpu_is_kicked_again_when_work_appears() {
    let m: Box<M> = Box::new(Smp::new(Recorder::new(8), Features::default(), 250));
    m.init_with(|t| t.init_clusters(2, 4)).unwrap();
    idle_all(&m, NOW - 100 * MS);
    // Seven CPUs run one spinner each; CPU3 is idle and tickless.
    for cpu in (0..8).filter(|&c| c != 3) {
        spawn_on(&m, cpu, NOW);
        run_cpu(&m, cpu, NOW);
    }
    m.nohz_enter_idle(3).unwrap();
    let mut now = NOW;
    let tick_all = |m: &M, now: u64| {
        for cpu in 0..8 {
            if cpu != 3 || m.current(3).is_some() {
                m.tick(cpu, now).unwrap();
            }
            let woken = m.platform().take_resched(cpu) || m.need_resched(cpu);
            if woken && run_cpu(m, cpu, now).is_some() {
                m.nohz_exit_idle(cpu).unwrap();
            }
        }
    };
    // Busy CPUs' ticks kick CPU3 to refresh blocked load; it is the only tickless CPU.
    for _ in 0..20 {
        now += 4 * MS;
        tick_all(&m, now);
    }
    assert!(!m.platform().kicks().is_empty(), "CPU3 was kicked for blocked load");
    assert_eq!(m.current(3), None, "nothing to pull yet");
    // Now CPU6 gets a second spinner. The next round of ticks kicks CPU3 once more, and
    // its pass pulls the queued new spinner at once (it never ran, so it is not cache
    // hot): one tick.
    let kicks = m.platform().kicks().len();
    spawn_on(&m, 6, now);
    let mut ticks = 0;
    while m.current(3).is_none() {
        ticks += 1;
        assert!(ticks <= 1, "CPU3 still idle after {ticks} ticks; kicks {:?}", m.platform().kicks());
        now += 4 * MS;
        tick_all(&m, now);
    }
    eprintln!("CPU3 runs after {ticks} ticks; kicks {:?}", m.platform().kicks());
    assert_eq!(ticks, 1);
    assert_eq!(m.platform().kicks().len(), kicks + 1);
    assert!((0..8).all(|c| m.stats(c).nr_running.load(Relaxed) == 1));
    m.check_invariants().unwrap();
}
