//! The load-balancing scenarios of docs/linux-v5.7.md §6 (S1–S7, S13) on the 2×4 topology, with PELT
//! values injected as the scenarios give them, asserting the balancer's exact decisions.

use sched_core::balance::{imbalance::MigrationType, stats::GroupType, BalanceRecord, Outcome};
use sched_core::topology::Level;
use sched_core::IdleType;
use sched_core::{CpuMask, Features, Smp, TaskId, TaskParams};
use sched_testkit::{self as testkit, run_cpu, spawn_on, Recorder};

type M = Smp<Recorder, 8, 64, 64>;

const NOW: u64 = 1_000_000_000;
const MC: usize = 0;
const DIE: usize = 1;

fn machine(features: Features) -> Box<M> {
    testkit::machine(features, |t| t.init_clusters(2, 4))
}

/// Creates `n` tasks on `cpu` (pinned there while created, so fork placement keeps them
/// there, then allowed everywhere) and makes one of them current. Returns them, running
/// first.
fn tasks_on(m: &M, cpu: usize, n: usize) -> Vec<TaskId> {
    let mut ids: Vec<TaskId> = (0..n).map(|_| spawn_on(m, cpu, NOW)).collect();
    let run = run_cpu(m, cpu, NOW).unwrap();
    ids.sort_by_key(|&t| t != run);
    ids
}

fn last_record(m: &M) -> BalanceRecord {
    m.platform().last_balance()
}

fn nr(m: &M, cpu: usize) -> u32 {
    m.with_cpu(cpu, |c| c.rq.nr_running()).unwrap()
}

/// S1's machine: A = CPU0 {T0, util 1000}, CPU1 {T1 running, T2; util 900, est 450 each},
/// CPU2 {T3, 800}, CPU3 {T4, 800}; B = CPU4–6 one task each (800), CPU7 idle.
fn s1_setup(features: Features) -> (Box<M>, [TaskId; 3]) {
    let m = machine(features);
    let t0 = tasks_on(&m, 0, 1)[0];
    let c1 = tasks_on(&m, 1, 2);
    for cpu in 2..7 {
        tasks_on(&m, cpu, 1);
    }
    m.inject_rq_pelt(0, 1000, 1000, 1024).unwrap();
    m.inject_rq_pelt(1, 900, 2048, 2048).unwrap();
    for cpu in 2..7 {
        m.inject_rq_pelt(cpu, 800, 800, 1024).unwrap();
    }
    m.inject_rq_pelt(7, 0, 0, 0).unwrap();
    for &t in &c1 {
        m.inject_task_pelt(t, 450, 450, 1024).unwrap();
    }
    (m, [t0, c1[0], c1[1]])
}

#[test]
fn s1_with_the_rule_pulls_the_waiting_task_from_the_two_task_cpu() {
    for idle in [IdleType::Idle, IdleType::NewlyIdle] {
        let (m, [_t0, t1, t2]) = s1_setup(Features::default());
        let (moved, _) = m.balance_domain(7, DIE, idle, NOW).unwrap();
        let r = last_record(&m);
        assert_eq!(r.level, Level::Die);
        assert_eq!(r.local, Some(GroupType::HasSpare));
        assert_eq!(r.busiest, Some(GroupType::Overloaded));
        assert_eq!(r.migration, Some(MigrationType::Util));
        assert_eq!(r.imbalance, 4096 - 2400);
        assert_eq!(r.busiest_cpu, Some(1));
        assert_eq!((moved, r.outcome), (1, Outcome::Moved));
        assert_eq!(r.nr_balance_failed, 0);
        assert_eq!(m.task_cpu(t2).unwrap(), 7, "the waiting task moved");
        assert_eq!(m.task_cpu(t1).unwrap(), 1, "the running task stayed");
        assert_eq!((nr(&m, 1), nr(&m, 7)), (1, 1));
        assert_eq!(m.balance_state(7).unwrap().domains[DIE].balance_interval_ms, 8);
        m.check_invariants().unwrap();
    }
}

#[test]
fn s1_without_the_rule_fails_three_times_then_active_balances() {
    let (m, [t0, _t1, _t2]) = s1_setup(Features::default() - Features::UTIL_PULL_SKIPS_LONE_TASK);
    for pass in 1..=3 {
        let (moved, _) = m.balance_domain(7, DIE, IdleType::Idle, NOW).unwrap();
        let r = last_record(&m);
        assert_eq!(r.migration, Some(MigrationType::Util));
        assert_eq!(r.busiest_cpu, Some(0), "pre-patch: the highest util CPU, a lone task");
        assert_eq!((moved, r.outcome), (0, Outcome::NothingDetachable));
        assert_eq!(r.nr_balance_failed, pass);
        assert_eq!(m.balance_state(7).unwrap().domains[DIE].balance_interval_ms, 8, "reset each time");
    }
    assert!(m.platform().stoppers().is_empty());
    // 4th pass: failures exceed cache_nice_tries + 2 → the stopper pushes the running T0.
    m.balance_domain(7, DIE, IdleType::Idle, NOW).unwrap();
    let r = last_record(&m);
    assert_eq!(r.outcome, Outcome::ActiveBalance);
    assert_eq!(r.nr_balance_failed, 2, "kicked: failures set to cache_nice_tries + 1");
    assert_eq!(m.platform().stoppers(), [0]);
    // A port reschedules only while need_resched is set: the stopper must set it.
    assert!(m.need_resched(0), "the stopper preempts CPU0's running task");
    assert_eq!(m.balance_state(7).unwrap().domains[DIE].balance_interval_ms, 16, "doubled");
    // CPU0 runs its stopper: the running task is switched out, then pushed.
    assert_eq!(m.schedule(0, NOW).unwrap(), None);
    m.finish_switch(0, NOW).unwrap();
    assert_eq!(m.task_cpu(t0).unwrap(), 7);
    assert_eq!(m.balance_state(7).unwrap().domains[DIE].nr_balance_failed, 0);
    assert_eq!((nr(&m, 0), nr(&m, 1), nr(&m, 7)), (0, 2, 1), "CPU1 still has two tasks");
    m.check_invariants().unwrap();
}

#[test]
fn s1_without_the_rule_newly_idle_never_counts_or_pushes() {
    let (m, _) = s1_setup(Features::default() - Features::UTIL_PULL_SKIPS_LONE_TASK);
    for _ in 0..6 {
        m.balance_domain(7, DIE, IdleType::NewlyIdle, NOW).unwrap();
        let r = last_record(&m);
        assert_eq!((r.busiest_cpu, r.outcome, r.nr_balance_failed), (Some(0), Outcome::NothingDetachable, 0));
    }
    assert!(m.platform().stoppers().is_empty());
}

#[test]
fn s2_migrate_util_falls_back_to_migrate_task() {
    let m = machine(Features::default());
    let c2 = tasks_on(&m, 2, 2);
    m.inject_rq_pelt(2, 1024, 2048, 2048).unwrap();
    m.inject_rq_pelt(3, 1024, 0, 0).unwrap(); // blocked util on an empty CPU
    for &t in &c2 {
        m.inject_task_pelt(t, 512, 512, 1024).unwrap();
    }
    m.balance_domain(3, MC, IdleType::Idle, NOW).unwrap();
    let r = last_record(&m);
    assert_eq!((r.local, r.busiest), (Some(GroupType::HasSpare), Some(GroupType::Overloaded)));
    assert_eq!((r.migration, r.imbalance), (Some(MigrationType::Task), 1));
    assert_eq!((r.busiest_cpu, r.outcome, r.moved), (Some(2), Outcome::Moved, 1));
    assert_eq!((nr(&m, 2), nr(&m, 3)), (1, 1));
    m.check_invariants().unwrap();
}

#[test]
fn s2_variant_blocked_util_leaves_too_little_room() {
    let m = machine(Features::default());
    let c2 = tasks_on(&m, 2, 2);
    m.inject_rq_pelt(2, 1024, 2048, 2048).unwrap();
    m.inject_rq_pelt(3, 900, 0, 0).unwrap();
    for &t in &c2 {
        m.inject_task_pelt(t, 400, 400, 1024).unwrap();
    }
    m.balance_domain(3, MC, IdleType::Idle, NOW).unwrap();
    let r = last_record(&m);
    assert_eq!((r.migration, r.imbalance), (Some(MigrationType::Util), 124));
    assert_eq!((r.busiest_cpu, r.outcome), (Some(2), Outcome::NothingDetachable));
    assert_eq!(nr(&m, 2), 2);
}

/// S2's variant on a busiest CPU that has not picked its queued tasks yet: it runs its idle
/// task, which v5.7's check of the busiest CPU's current task finds pinned there. Once the
/// failures call for it, the pass ends pinned, with no stopper, and its interval backs off.
#[test]
fn s2_variant_an_idle_busiest_cpu_gets_no_stopper() {
    let m = machine(Features::default());
    // Queued on CPU 2, which is not rescheduled: nothing runs there.
    let c2: Vec<TaskId> = (0..2).map(|_| spawn_on(&m, 2, NOW)).collect();
    assert_eq!(m.current(2), None);
    m.inject_rq_pelt(2, 1024, 2048, 2048).unwrap();
    m.inject_rq_pelt(3, 900, 0, 0).unwrap();
    for &t in &c2 {
        m.inject_task_pelt(t, 400, 400, 1024).unwrap();
    }
    let mut outcomes = Vec::new();
    for _ in 0..6 {
        m.balance_domain(3, MC, IdleType::Idle, NOW).unwrap();
        let r = last_record(&m);
        assert_eq!(r.busiest_cpu, Some(2));
        outcomes.push(r.outcome);
    }
    assert!(m.platform().stoppers().is_empty(), "no stopper for an idle CPU: {outcomes:?}");
    assert_eq!(outcomes.last(), Some(&Outcome::AllPinned), "{outcomes:?}");
    // Pinned passes back off: the last three each doubled the interval from MC's 4 ms.
    assert_eq!(outcomes[3..], [Outcome::AllPinned; 3], "{outcomes:?}");
    assert_eq!(m.balance_state(3).unwrap().domains[MC].balance_interval_ms, 32);
    assert_eq!(nr(&m, 2), 2);
    m.check_invariants().unwrap();
}

#[test]
fn s3_prefer_sibling_moves_one_task_by_active_balance() {
    let m = machine(Features::default());
    for cpu in [0, 1, 2, 4] {
        tasks_on(&m, cpu, 1);
        m.inject_rq_pelt(cpu, 400, 400, 1024).unwrap();
    }
    for pass in 1..=4 {
        m.balance_domain(5, DIE, IdleType::Idle, NOW).unwrap();
        let r = last_record(&m);
        assert_eq!((r.local, r.busiest), (Some(GroupType::HasSpare), Some(GroupType::HasSpare)));
        assert_eq!((r.migration, r.imbalance, r.busiest_cpu), (Some(MigrationType::Task), 1, Some(0)));
        let want = if pass <= 3 { Outcome::NothingDetachable } else { Outcome::ActiveBalance };
        assert_eq!(r.outcome, want, "pass {pass}");
    }
    assert_eq!(m.schedule(0, NOW).unwrap(), None);
    m.finish_switch(0, NOW).unwrap();
    assert_eq!((nr(&m, 0), nr(&m, 5)), (0, 1), "2/2 after the push");
    m.check_invariants().unwrap();

    // With a second task on CPU2 (A = 4 tasks) CPU2 is chosen and one task moves at once.
    let m = machine(Features::default());
    for cpu in [0, 1, 4] {
        tasks_on(&m, cpu, 1);
        m.inject_rq_pelt(cpu, 400, 400, 1024).unwrap();
    }
    tasks_on(&m, 2, 2);
    m.inject_rq_pelt(2, 800, 2048, 2048).unwrap();
    m.balance_domain(5, DIE, IdleType::Idle, NOW).unwrap();
    let r = last_record(&m);
    assert_eq!((r.busiest_cpu, r.outcome, r.moved), (Some(2), Outcome::Moved, 1));
}

#[test]
fn s4_fully_busy_busiest() {
    let m = machine(Features::default());
    for cpu in 0..4 {
        tasks_on(&m, cpu, 1);
        m.inject_rq_pelt(cpu, 1000, 1000, 1024).unwrap();
    }
    for cpu in [4, 5] {
        tasks_on(&m, cpu, 1);
        m.inject_rq_pelt(cpu, 1000, 1000, 1024).unwrap();
    }
    for pass in 1..=4 {
        m.balance_domain(6, DIE, IdleType::Idle, NOW).unwrap();
        let r = last_record(&m);
        assert_eq!((r.local, r.busiest), (Some(GroupType::HasSpare), Some(GroupType::FullyBusy)));
        assert_eq!((r.migration, r.imbalance), (Some(MigrationType::Task), 1));
        let want = if pass <= 3 { Outcome::NothingDetachable } else { Outcome::ActiveBalance };
        assert_eq!(r.outcome, want);
    }
    let pushed_from = m.platform().stoppers()[0];
    assert_eq!(m.schedule(pushed_from, NOW).unwrap(), None);
    m.finish_switch(pushed_from, NOW).unwrap();
    let a: u32 = (0..4).map(|c| nr(&m, c)).sum();
    let b: u32 = (4..8).map(|c| nr(&m, c)).sum();
    assert_eq!((a, b), (3, 3));
}

fn busy_machine(a: &[usize], b: &[usize]) -> Box<M> {
    let m = machine(Features::default());
    for (base, counts) in [(0, a), (4, b)] {
        for (i, &n) in counts.iter().enumerate() {
            let cpu = base + i;
            let ids = tasks_on(&m, cpu, n);
            m.inject_rq_pelt(cpu, 1024, 1024 * n as u64, 1024 * n as u64).unwrap();
            for t in ids {
                m.inject_task_pelt(t, 1024 / n as u64, 1024 / n as u32, 1024).unwrap();
            }
        }
    }
    m
}

#[test]
fn s6_migrate_load_moves_exactly_one_task() {
    let m = busy_machine(&[4, 1, 1, 1], &[2, 1, 1, 1]);
    m.balance_domain(4, DIE, IdleType::NotIdle, NOW).unwrap();
    let r = last_record(&m);
    assert_eq!((r.local, r.busiest), (Some(GroupType::Overloaded), Some(GroupType::Overloaded)));
    assert_eq!((r.migration, r.imbalance), (Some(MigrationType::Load), 1024));
    assert_eq!((r.busiest_cpu, r.outcome, r.moved), (Some(0), Outcome::Moved, 1));
    assert_eq!((nr(&m, 0), nr(&m, 4)), (3, 3));
    m.check_invariants().unwrap();
    // Negative: A at 6 tasks (avg 1536): 153600 ≤ 160000 → balanced.
    let m = busy_machine(&[3, 1, 1, 1], &[2, 1, 1, 1]);
    m.balance_domain(4, DIE, IdleType::NotIdle, NOW).unwrap();
    assert_eq!(last_record(&m).outcome, Outcome::Balanced);
}

#[test]
fn s7_local_fully_busy_pulls_load() {
    let m = busy_machine(&[3, 1, 1, 1], &[1, 1, 1, 1]);
    for cpu in 4..8 {
        m.inject_rq_pelt(cpu, 1000, 1000, 1024).unwrap();
    }
    m.balance_domain(4, DIE, IdleType::NotIdle, NOW).unwrap();
    let r = last_record(&m);
    assert_eq!((r.local, r.busiest), (Some(GroupType::FullyBusy), Some(GroupType::Overloaded)));
    assert_eq!((r.migration, r.imbalance), (Some(MigrationType::Load), 1024));
    assert_eq!((r.outcome, r.moved), (Outcome::Moved, 1));
}

#[test]
fn s13_interval_backs_off_to_max() {
    let m = machine(Features::default());
    for cpu in 0..8 {
        tasks_on(&m, cpu, 1);
        m.inject_rq_pelt(cpu, 1000, 1000, 1024).unwrap();
    }
    // CPU4 is the designated DIE balancer of B (no idle CPU: the first one).
    let mut intervals = vec![];
    for _ in 0..4 {
        m.balance_domain(4, DIE, IdleType::NotIdle, NOW).unwrap();
        assert_eq!(last_record(&m).outcome, Outcome::Balanced);
        intervals.push(m.balance_state(4).unwrap().domains[DIE].balance_interval_ms);
    }
    assert_eq!(intervals, [16, 16, 16, 16], "8 → 16 (max_interval) and stays");
}

fn balance_records(m: &M) -> Vec<BalanceRecord> {
    m.platform().balance_records()
}

#[test]
fn s13_busy_factor_applies_on_the_periodic_path() {
    // get_sd_balance_interval: the domain's interval, × busy_factor (32) on a busy CPU, in
    // jiffies at HZ = 250 (rounded up), capped by max_load_balance_interval = HZ × 8 CPUs /
    // 10 = 200 jiffies.
    const JIFFY: u64 = 4_000_000;
    let interval = |ms: u64, busy: bool| (if busy { ms * 32 } else { ms } * 250).div_ceil(1000).min(200);
    // A busy machine (one task on every CPU) and an idle one (no task at all): CPU4's tick
    // at NOW (jiffy 250) finds its first balance due and runs rebalance_domains, NotIdle
    // resp. Idle. Both levels are balanced, so MC backs off 4 → 8 ms and DIE 8 → 16 ms; the
    // next balance is due when the MC interval (the shorter) expires: 8 × 32 = 256 ms = 64
    // jiffies on the busy CPU, 8 ms = 2 jiffies on the idle one.
    let busy = machine(Features::default());
    for cpu in 0..8 {
        tasks_on(&busy, cpu, 1);
        busy.inject_rq_pelt(cpu, 1000, 1000, 1024).unwrap();
    }
    let idle = machine(Features::default());
    let j = NOW / JIFFY;
    for (m, is_busy, after) in [(&busy, true, 64), (&idle, false, 2)] {
        m.tick(4, NOW).unwrap();
        let recs = balance_records(m);
        let kind = if is_busy { IdleType::NotIdle } else { IdleType::Idle };
        let got: Vec<_> = recs.iter().map(|r| (r.cpu, r.level, r.idle, r.outcome)).collect();
        assert_eq!(got, [(4, Level::Mc, kind, Outcome::Balanced), (4, Level::Die, kind, Outcome::Balanced)]);
        let b = m.balance_state(4).unwrap();
        assert_eq!((b.domains[MC].balance_interval_ms, b.domains[DIE].balance_interval_ms), (8, 16));
        assert_eq!((b.domains[MC].last_balance, b.domains[DIE].last_balance), (j, j));
        assert_eq!(interval(8, is_busy).min(interval(16, is_busy)), after);
        assert_eq!(m.next_balance_of(4).unwrap(), j + after, "busy: {is_busy}");
        // The periodic path honours it: no balance one jiffy early, MC balances when due.
        m.tick(4, (j + after - 1) * JIFFY).unwrap();
        assert_eq!(balance_records(m).len(), 2, "busy: {is_busy}");
        m.tick(4, (j + after) * JIFFY).unwrap();
        let recs = balance_records(m);
        assert_eq!(recs.len(), 3, "busy: {is_busy}");
        assert_eq!((recs[2].level, recs[2].idle), (Level::Mc, kind));
        // MC (last balanced now) and DIE (its interval twice MC's) are then due together.
        assert_eq!(m.next_balance_of(4).unwrap(), j + 2 * after);
    }
}

#[test]
fn s13_all_pinned_doubles_up_to_512() {
    let m = machine(Features::default());
    // Two tasks on CPU0 pinned there, and CPU4 idle balancing DIE: every task is pinned.
    let mut ids = vec![];
    for _ in 0..3 {
        ids.push(
            m.create(0, NOW, TaskParams { affinity: CpuMask::single(0), ..TaskParams::default() }).unwrap(),
        );
    }
    m.schedule(0, NOW).unwrap();
    m.finish_switch(0, NOW).unwrap();
    m.inject_rq_pelt(0, 1024, 3072, 3072).unwrap();
    let mut seen = vec![];
    for _ in 0..8 {
        m.balance_domain(4, DIE, IdleType::Idle, NOW).unwrap();
        seen.push(m.balance_state(4).unwrap().domains[DIE].balance_interval_ms);
    }
    // Each pass: every task of CPU 0 pinned (a round that is retried without CPU 0), then
    // nothing left to pull from cluster A.
    let recs = balance_records(&m);
    let last_pass: Vec<_> = recs[recs.len() - 2..].iter().map(|r| (r.round, r.dst_cpu, r.outcome)).collect();
    use sched_core::balance::Round;
    assert_eq!(last_pass, [(Round::First, 4, Outcome::Retried), (Round::Redo, 4, Outcome::Balanced)]);
    assert_eq!(recs.iter().filter(|r| r.outcome.ends_pass()).count(), 8);
    assert_eq!(*seen.last().unwrap(), 512);
    assert!(seen.windows(2).all(|w| w[1] == (w[0] * 2).min(512)), "{seen:?}");
    assert!(ids.iter().all(|&t| m.task_cpu(t).unwrap() == 0));
}

/// A pass whose first round is redirected (LBF_DST_PINNED) and whose redirected round finds
/// every task pinned (LBF_ALL_PINNED): CPU 0 holds 12 tasks, all pinned to it except X, which
/// may run on CPUs 0 and 5; cluster B is idle. With `nr_migrate` 8 each round looks at 8 tasks, so
/// the first round (towards CPU 4) sees X and redirects to CPU 5, and the redirected round
/// sees only tasks pinned to CPU 0. The pass then starts over without CPU 0 — towards CPU 5,
/// the destination it had (Linux keeps `env.dst_cpu` for the redo), asking whether CPU 5
/// balances. Each round has its own record; only the last one ends the pass.
fn redirected_then_all_pinned(busy5: bool) -> (Box<M>, Vec<BalanceRecord>) {
    let m = machine(Features::default());
    m.set_tunables(sched_core::Tunables { nr_migrate: 8, ..m.tunables() }).unwrap();
    let pinned = TaskParams { affinity: CpuMask::single(0), ..TaskParams::default() };
    let ids: Vec<TaskId> = (0..12).map(|_| m.create(0, NOW, pinned).unwrap()).collect();
    let x = ids[5];
    m.set_affinity(NOW, x, CpuMask::single(0).or(&CpuMask::single(5))).unwrap();
    assert_ne!(run_cpu(&m, 0, NOW), Some(x), "a task pinned to CPU 0 runs, not X");
    if busy5 {
        spawn_on(&m, 5, NOW);
        run_cpu(&m, 5, NOW);
    }
    m.balance_domain(4, DIE, IdleType::Idle, NOW).unwrap();
    let recs = balance_records(&m);
    (m, recs)
}

#[test]
fn redo_after_redirect_keeps_the_redirected_destination() {
    use sched_core::balance::Round;
    let (m, recs) = redirected_then_all_pinned(false);
    let rounds: Vec<_> = recs.iter().map(|r| (r.round, r.dst_cpu, r.busiest_cpu, r.outcome)).collect();
    assert_eq!(
        rounds,
        [
            (Round::First, 4, Some(0), Outcome::Redirected),
            (Round::Redirected, 5, Some(0), Outcome::Retried),
            (Round::Redo, 5, None, Outcome::Balanced),
        ],
        "{recs:#?}"
    );
    assert!(recs.iter().all(|r| r.cpu == 4 && r.moved == 0 && r.pass_moved == 0));
    assert_eq!(recs.iter().filter(|r| r.outcome.ends_pass()).count(), 1, "one pass");
    // The first round's decision is its own, not mixed with the redo's.
    assert_eq!(
        (recs[0].busiest, recs[0].migration),
        (Some(GroupType::Overloaded), Some(MigrationType::Util))
    );
    assert_eq!((recs[2].busiest, recs[2].migration), (None, None));
    assert_eq!(nr(&m, 0), 12, "nothing could move");
    m.check_invariants().unwrap();
}

#[test]
fn redo_asks_whether_the_redirected_destination_balances() {
    use sched_core::balance::Round;
    // CPU 5 runs a task: after the redo the first idle CPU of B among the candidates is 6,
    // so CPU 5 is not the one to balance and the pass ends there.
    let (_m, recs) = redirected_then_all_pinned(true);
    let last = recs.last().unwrap();
    assert_eq!(
        (recs.len(), last.round, last.dst_cpu, last.outcome),
        (3, Round::Redo, 5, Outcome::NotDesignated)
    );
}

/// A pass that moves more tasks than one detach batch (`DETACH_BATCH`): the batches follow
/// each other within the pass, which moves them all as one round, as Linux's does.
#[test]
fn one_pass_moves_more_tasks_than_a_detach_batch() {
    use sched_core::balance::migrate::DETACH_BATCH;
    use sched_core::balance::Round;
    let m: Box<Smp<Recorder, 8, 64, 64>> = testkit::machine(Features::default(), |t| t.init_flat(8));
    // 24 tasks on CPU 0 (not cache hot: created long ago), every other CPU idle.
    let ids = tasks_on(&m, 0, 24);
    m.inject_rq_pelt(0, 1024, 24 * 1024, 24 * 1024).unwrap();
    let later = NOW + 1_000_000_000;
    let (moved, _) = m.balance_domain(1, 0, IdleType::Idle, later).unwrap();
    let recs = balance_records(&m);
    let last = recs.last().unwrap();
    assert!(moved as usize > DETACH_BATCH, "moved {moved}: {last:?}");
    assert_eq!((recs.len(), last.round, last.outcome, last.moved), (1, Round::First, Outcome::Moved, moved));
    assert_eq!(nr(&m, 1) as u32, moved);
    assert_eq!(nr(&m, 0) as usize, ids.len() - moved as usize);
    m.check_invariants().unwrap();
}

/// A new tick rate on a machine already set up (no task alive): what the balancer kept in
/// ticks of the old rate is due at once, so a CPU balances at its next tick instead of when
/// the new rate's jiffies reach the old count (ten times later from 250 to 25 Hz).
#[test]
fn a_new_tick_rate_makes_the_balance_times_due() {
    let m = machine(Features::default());
    let later = 40 * NOW; // jiffy 10000 at 250 Hz
    m.tick(4, later).unwrap();
    let before = balance_records(&m).len();
    assert!(before > 0, "the idle CPU balanced");
    assert!(m.next_balance_of(4).unwrap() > 10_000);
    m.set_hz(25).unwrap();
    assert_eq!(m.next_balance_of(4).unwrap(), 0);
    assert!(m.balance_state(4).unwrap().domains.iter().all(|d| d.last_balance == 0));
    // The next tick at 25 Hz (jiffy 1001) balances again, and plans in the new rate's ticks.
    m.tick(4, later + 40_000_000).unwrap();
    assert!(balance_records(&m).len() > before, "no balance at the new rate's first tick");
    assert!(m.next_balance_of(4).unwrap() < 2_000);
}
