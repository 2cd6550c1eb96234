//! The semantics on an ideal machine: a CPU for every thread, no scheduling delay.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;
use crate::rtapp::lower;

/// Runs `json` until `until` ns with every thread on a CPU of its own; returns the
/// activations, each thread's exit time, and the forks made.
struct Ideal {
    ready: BinaryHeap<Reverse<(u64, u64, ThreadId)>>,
    seq: u64,
    now: u64,
    acts: Vec<Activation>,
    /// Pool events taken: (thread, pool, event, when).
    taken: Vec<(ThreadId, u16, u32, u64)>,
}

impl Host for Ideal {
    fn wake(&mut self, t: ThreadId) {
        self.seq += 1;
        self.ready.push(Reverse((self.now, self.seq, t)));
    }
    fn activation(&mut self, a: &Activation) {
        self.acts.push(*a);
    }
    fn taken(&mut self, t: ThreadId, pool: u16, event: u32) {
        self.taken.push((t, pool, event, self.now));
    }
}

fn run(json: &str, until: u64) -> (Vec<Activation>, Vec<(ThreadId, u64)>, World<64>) {
    let (acts, exits, w, _) = run_taking(json, until);
    (acts, exits, w)
}

/// [`run`], with the pool events taken.
#[allow(clippy::type_complexity)]
fn run_taking(
    json: &str,
    until: u64,
) -> (Vec<Activation>, Vec<(ThreadId, u64)>, World<64>, Vec<(ThreadId, u16, u32, u64)>) {
    let bytes = lower(json).unwrap().to_bytes();
    let prog = Program::parse(&bytes).unwrap();
    let mut w: World<64> = World::new(0);
    w.spawn_all(&prog).unwrap();
    let mut h = Ideal { ready: BinaryHeap::new(), seq: 0, now: 0, acts: Vec::new(), taken: Vec::new() };
    for t in 0..w.len() as ThreadId {
        h.seq += 1;
        h.ready.push(Reverse((w.start_of(t), h.seq, t)));
    }
    let mut exits = Vec::new();
    while let Some(Reverse((at, _, t))) = h.ready.pop() {
        if at > until {
            break;
        }
        h.now = at;
        w.running(t, at);
        let step = w.step(&prog, t, at, &mut h);
        let next = match step {
            Step::Work { ns, .. } => Some(at + ns),
            Step::WorkUntil { at } | Step::SleepUntil { at } => Some(at),
            Step::Yield => Some(at),
            Step::Fork { task } => {
                let child = w.fork(&prog, t, task, at).unwrap();
                h.seq += 1;
                h.ready.push(Reverse((at, h.seq, child)));
                Some(at)
            }
            Step::Block => None,
            Step::Exit => {
                exits.push((t, at));
                None
            }
        };
        if let Some(n) = next {
            h.seq += 1;
            h.ready.push(Reverse((n, h.seq, t)));
        }
    }
    (h.acts, exits, w, h.taken)
}

const G: &str = r#""global": {"duration": 1, "calibration": 100}"#;

/// A periodic task: each activation runs its work and sleeps out the period, its slack the
/// rest of the period; the loop count ends it.
#[test]
fn a_periodic_task_keeps_its_period() {
    let (acts, exits, _) = run(
        &format!(
            r#"{{{G}, "tasks": {{"p": {{"loop": 3, "phases": {{"a": {{"run": 2000, "timer": {{"ref": "unique", "period": 10000}}}}}}}}}}}}"#
        ),
        u64::MAX,
    );
    assert_eq!(acts.len(), 3);
    for (i, a) in acts.iter().enumerate() {
        let i = i as u64;
        assert_eq!((a.start, a.end), (i * 10_000_000, (i + 1) * 10_000_000), "{a:?}");
        assert_eq!((a.run_ns, a.slack_ns), (2_000_000, Some(8_000_000)));
        assert_eq!(a.wake_latency_ns, Some(0), "the timer's deadline to running again");
    }
    assert_eq!(exits, [(0, 30_000_000)]);
}

/// Work longer than the period misses the timer: relative mode restarts the schedule from
/// the miss, absolute mode keeps it (and misses again until it catches up).
#[test]
fn a_missed_timer_restarts_or_catches_up() {
    let periodic = |mode: &str| {
        format!(
            r#"{{{G}, "tasks": {{"p": {{"loop": 3, "phases": {{"a": {{"run": 15000, "timer": {{"ref": "unique", "period": 10000, "mode": "{mode}"}}}}}}}}}}}}"#
        )
    };
    let (acts, _, _) = run(&periodic("relative"), u64::MAX);
    let slack: Vec<_> = acts.iter().map(|a| a.slack_ns.unwrap() / 1_000_000).collect();
    assert_eq!(slack, [-5, -5, -5], "each period restarts at the miss");
    let (acts, _, _) = run(&periodic("absolute"), u64::MAX);
    let slack: Vec<_> = acts.iter().map(|a| a.slack_ns.unwrap() / 1_000_000).collect();
    assert_eq!(slack, [-5, -10, -15], "the schedule is kept: the lag grows");
}

/// A ping-pong pair under one mutex alternates: each `sync` wakes the other and waits.
#[test]
fn sync_pairs_alternate() {
    let side = r#"{"loop": 5, "phases": {"a": {"lock": "m", "sync": {"ref": "c", "mutex": "m"}, "unlock": "m", "run": 100}}}"#;
    let (acts, exits, w) =
        run(&format!(r#"{{{G}, "tasks": {{"ping": {side}, "pong": {side}}}}}"#), 10_000_000_000);
    // The first sync finds nobody waiting (lost, as in rt-app), so ping waits; pong's sync
    // wakes it, and from then on each wakes the other.
    // Each then waits 100 µs for the other's run before its own: activation k (counting
    // both sides) is side k % 2's, from the (k − 1)th 100 µs to the (k + 1)th. Ping's fifth
    // ends the run at 900 µs; pong, in its fifth sync, waits for a partner that left.
    let got: Vec<_> = acts.iter().map(|a| (a.thread, a.start / 1000, a.end / 1000)).collect();
    let want: Vec<_> =
        (0..9u64).map(|k| ((k % 2) as ThreadId, k.saturating_sub(1) * 100, (k + 1) * 100)).collect();
    assert_eq!(got, want, "each side's run follows the other's");
    assert_eq!((exits, w.blocked()), (vec![(0, 900_000)], 1));
}

/// A barrier holds every party until the last arrives, then releases them together.
#[test]
fn a_barrier_releases_everyone_at_the_last_arrival() {
    let (acts, _, _) = run(
        &format!(
            r#"{{{G}, "tasks": {{
                "fast": {{"instance": 2, "loop": 2, "phases": {{"a": {{"run": 1000, "barrier": "b"}}}}}},
                "slow": {{"loop": 2, "phases": {{"a": {{"run": 5000, "barrier": "b"}}}}}}}}}}"#
        ),
        u64::MAX,
    );
    let ends: Vec<u64> = acts.iter().map(|a| a.end / 1_000_000).collect();
    assert_eq!(ends, [5, 5, 5, 10, 10, 10], "{acts:?}");
}

/// A barrier's release wakes its waiters in the order they arrived: they run in that order.
#[test]
fn a_barrier_wakes_in_arrival_order() {
    let task = |us: u32| format!(r#"{{"loop": 1, "phases": {{"a": {{"run": {us}, "barrier": "b"}}}}}}"#);
    let (acts, _, _) = run(
        &format!(
            r#"{{{G}, "tasks": {{"a": {}, "b": {}, "c": {}, "last": {}}}}}"#,
            task(3000),
            task(2000),
            task(1000),
            task(4000)
        ),
        u64::MAX,
    );
    let order: Vec<u16> = acts.iter().map(|a| a.thread).collect();
    assert_eq!(order, [3, 2, 1, 0], "the releaser, then the earliest arrival first");
}

/// sysbench's shape: a main thread forks its workers, meets them at a barrier whose parties
/// count the forks, and joins them; the workers share one pool, each event taken once, and
/// end when it is empty.
#[test]
fn forked_workers_share_a_pool_and_are_joined() {
    let s = crate::sysbench::Sysbench {
        threads: 3,
        events: 10,
        event_us: 100,
        jitter_pct: 0,
        ..crate::sysbench::Sysbench::SEED
    };
    let (_, exits, w, taken) = run_taking(&s.json(), u64::MAX);
    let mut events: Vec<u32> = taken.iter().map(|t| t.2).collect();
    events.sort();
    assert_eq!(events, (0..10).collect::<Vec<_>>(), "every event once");
    // Created at 30, 60, 90 µs; the last set-up ends at 110 µs, when the barrier opens.
    assert!(taken.iter().all(|t| t.3 >= 110_000), "{taken:?}");
    assert_eq!(taken.iter().filter(|t| t.3 == 110_000).count(), 3, "all three start together");
    // Three rounds of three events, then one: the last ends at 510 µs; the others find the
    // pool empty at 410 µs; the main thread's join ends with the last of them.
    let mut ends: Vec<u64> = exits.iter().map(|e| e.1 / 1000).collect();
    ends.sort();
    assert_eq!(ends, [410, 410, 510, 510], "{exits:?}");
    assert_eq!(exits.iter().find(|e| e.0 == 0).map(|e| e.1), Some(510_000), "main joins the last");
    assert_eq!(w.blocked(), 0);
}

/// A mutex goes to its waiters in the order they came.
#[test]
fn a_mutex_serves_its_waiters_in_order() {
    let (acts, _, _) = run(
        &format!(
            r#"{{{G}, "tasks": {{"t": {{"instance": 3, "loop": 1, "phases": {{"a": {{"lock": "m", "runtime": 1000, "unlock": "m"}}}}}}}}}}"#
        ),
        u64::MAX,
    );
    let ends: Vec<(u16, u64)> = acts.iter().map(|a| (a.thread, a.end / 1_000_000)).collect();
    assert_eq!(ends, [(0, 1), (1, 2), (2, 3)]);
}

/// A fork starts a thread of the template task, which runs its own loops.
#[test]
fn a_fork_starts_a_thread() {
    let (acts, exits, w) = run(
        &format!(
            r#"{{{G}, "tasks": {{
                "child": {{"instance": 0, "loop": 1, "run": 1000}},
                "parent": {{"loop": 2, "phases": {{"a": {{"fork": "child", "sleep": 5000}}}}}}}}}}"#
        ),
        u64::MAX,
    );
    assert_eq!(w.len(), 3, "the parent and two children");
    assert_eq!(acts.iter().filter(|a| a.task == 0).count(), 2);
    assert_eq!(exits.len(), 3);
}

/// Iterations whose events take no time cost the loop's overhead, so time advances.
#[test]
fn an_iteration_of_no_time_costs_its_overhead() {
    let (acts, exits, _) = run(
        &format!(r#"{{{G}, "tasks": {{"t": {{"loop": 4, "phases": {{"a": {{"signal": "c"}}}}}}}}}}"#),
        u64::MAX,
    );
    assert_eq!(acts.len(), 4);
    // The overhead is charged between iterations: the last one ends the thread at once.
    assert_eq!(exits, [(0, 3 * EMPTY_ITERATION_NS)], "{acts:?}");
    assert!(acts.windows(2).all(|w| w[1].start == w[0].end + EMPTY_ITERATION_NS), "{acts:?}");
}

/// Iterations that hand the CPU over or start a thread take no time of their own, nor does a
/// `run` shorter than the loop's overhead: each is still charged up to the overhead, so a
/// thread that loops forever on them moves through time instead of standing at one instant.
#[test]
fn an_iteration_that_yields_forks_or_barely_runs_still_takes_the_overhead() {
    let child = r#", "c": {"instance": 0, "loop": 1, "run": 10}"#;
    for (events, more) in [(r#""yield": 0"#, ""), (r#""fork": "c""#, child), (r#""run": 0"#, "")] {
        let json = format!(r#"{{{G}, "tasks": {{"t": {{"loop": 4, {events}}}{more}}}}}"#);
        let (acts, exits, _) = run(&json, u64::MAX);
        let t: Vec<_> = acts.iter().filter(|a| a.thread == 0).collect();
        assert_eq!(t.len(), 4, "{events}: {acts:?}");
        assert!(t.windows(2).all(|w| w[1].start >= w[0].start + EMPTY_ITERATION_NS), "{events}: {t:?}");
        assert!(exits.iter().any(|&(th, at)| th == 0 && at >= 3 * EMPTY_ITERATION_NS), "{events}: {exits:?}");
    }
}

/// A workload where every thread waits for another is stuck (a `wait` nobody signals); one
/// where some thread still sleeps or works is not, nor one whose threads have all ended.
#[test]
fn a_world_where_every_thread_waits_is_stuck() {
    let lone_wait = format!(
        r#"{{{G}, "tasks": {{"t": {{"loop": 1, "lock": "m", "wait": {{"ref": "c", "mutex": "m"}}, "unlock": "m"}}}}}}"#
    );
    let (_, exits, w) = run(&lone_wait, u64::MAX);
    assert!(exits.is_empty() && w.stuck());
    let sleeper_signals = format!(
        r#"{{{G}, "tasks": {{"t": {{"loop": 1, "lock": "m", "wait": {{"ref": "c", "mutex": "m"}}, "unlock": "m"}},
                          "s": {{"loop": 1, "sleep": 100, "lock": "m", "signal": "c", "unlock": "m"}}}}}}"#
    );
    let (_, exits, w) = run(&sleeper_signals, 50_000);
    assert!(exits.is_empty() && !w.stuck(), "the sleeper will signal");
    let (_, exits, w) = run(&sleeper_signals, u64::MAX);
    assert_eq!((exits.len(), w.stuck()), (2, false));
}

/// A timer several threads share starts when its first user starts (rt-app's): a delayed
/// thread alone on a shared timer keeps its period from its own start, as with a `unique` one;
/// a second user of the same timer advances the same schedule.
#[test]
fn a_shared_timer_starts_at_its_first_users_start() {
    let file = |r: &str| {
        format!(
            r#"{{{G}, "tasks": {{"a": {{"delay": 20000, "loop": 3, "phases": {{"p": {{"runtime": 1000, "timer": {{"ref": "{r}", "period": 10000}}}}}}}}}}}}"#
        )
    };
    for r in ["tick", "unique"] {
        let (acts, _, _) = run(&file(r), u64::MAX);
        let starts: Vec<_> = acts.iter().map(|a| a.start / 1_000_000).collect();
        assert_eq!(starts, [20, 30, 40], "{r}");
        assert!(acts.iter().all(|a| a.slack_ns == Some(9_000_000)), "{r}: {acts:?}");
    }
    // Two threads on one shared timer: each use advances it one period, from the first
    // user's start (the delayed one's first use finds it 10 ms ahead of that).
    let two = format!(
        r#"{{{G}, "tasks": {{"early": {{"loop": 2, "phases": {{"p": {{"runtime": 1000, "timer": {{"ref": "t", "period": 10000}}}}}}}}, "late": {{"delay": 5000, "loop": 1, "phases": {{"p": {{"runtime": 1000, "timer": {{"ref": "t", "period": 10000}}}}}}}}}}}}"#
    );
    let (acts, _, _) = run(&two, u64::MAX);
    let slack: Vec<_> = acts.iter().map(|a| (a.task, a.slack_ns.unwrap() / 1_000_000)).collect();
    assert_eq!(slack, [(0, 9), (1, 14), (0, 19)], "{acts:?}");
}

/// rt-app's loop counts at their edges: a task with `loop` 0 runs no phase (its thread ends
/// after its delay), a phase with `loop` 0 or negative runs until the workload ends (the
/// phases after it are never reached), and a phaseless task's `loop` 0 is its one phase's,
/// so it runs until the end as well.
#[test]
fn loop_counts_at_their_edges_run_as_rt_app_runs_them() {
    let g = r#""global": {"duration": 1}"#;
    let none = format!(
        r#"{{{g}, "tasks": {{"t": {{"loop": 0, "delay": 300, "phases": {{"p": {{"run": 100}}}}}}}}}}"#
    );
    let (acts, exits, _) = run(&none, 2_000_000_000);
    assert!(acts.is_empty(), "{acts:?}");
    assert_eq!(exits, vec![(0, 300_000)], "ends after its delay");
    for forever in ["0", "-1", "-7"] {
        let json = format!(
            r#"{{{g}, "tasks": {{"t": {{"loop": 3, "phases": {{"a": {{"run": 100}}, "b": {{"loop": {forever}, "run": 1000}}, "c": {{"run": 5}}}}}}}}}}"#
        );
        let (acts, exits, _) = run(&json, 1_000_000_000);
        assert!(exits.is_empty(), "loop {forever}: runs to the end");
        assert_eq!(acts[0].phase, 0);
        assert!(acts[1..].iter().all(|a| a.phase == 1), "loop {forever}: b forever, c never");
        assert!(acts.len() > 900, "loop {forever}: {} iterations of b in 1 s", acts.len() - 1);
    }
    let phaseless = format!(r#"{{{g}, "tasks": {{"t": {{"loop": 0, "run": 1000}}}}}}"#);
    let (acts, exits, _) = run(&phaseless, 1_000_000_000);
    assert!(exits.is_empty() && acts.len() > 900, "{} iterations", acts.len());
}
