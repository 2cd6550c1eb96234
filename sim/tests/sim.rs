//! The simulator: determinism (same seed → byte-identical results and trace), correctness of
//! the sysbench-like workload (every event exactly once), and a Perfetto-valid trace.

use sched_core::{CpuMask, Features};
use sched_sim::experiments::{drive, on_big_stack, run_once, Workload};
use sched_sim::machine::{Behavior, Config, Machine, TopologyKind};
use sched_sim::trace_check::{check_chrome_trace, verdict};

fn traced(seed: u64) -> (String, String, String) {
    on_big_stack(move || {
        let cfg = Config { trace: true, ..Config::octo(seed) };
        let mut m = Machine::<8>::new(cfg).unwrap();
        let (r, tr) = drive(&mut m, &Workload::seed());
        let (json, svg) = tr.unwrap();
        (serde_json::to_string(&r).unwrap(), json, svg)
    })
}

#[test]
fn same_seed_same_bytes() {
    let a = traced(42);
    let b = traced(42);
    assert_eq!(a, b, "results, trace and SVG are byte-identical for one seed");
    let c = traced(43);
    assert_ne!(a.1, c.1, "another seed gives another run");
    // Every switch names its tasks, an exiting one's last switch too (its record is gone by
    // then), and the workers do exit in the trace.
    assert!(a.1.contains("prev_state=X"), "no exit traced");
    assert!(!a.1.contains("comm=task"), "a task traced without its name");
}

#[test]
fn sysbench_does_every_event_exactly_once() {
    for rule in [true, false] {
        let mut f = Features::default();
        f.set(Features::UTIL_PULL_SKIPS_LONE_TASK, rule);
        let r = run_once(&Config { features: f, ..Config::octo(7) }, &Workload::seed());
        assert!(r.events_exactly_once);
        // Each event's latency is its own work at least (1.24 ms less the 2 % jitter).
        assert_eq!(r.latencies.len(), 1000);
        assert!(r.latencies.iter().all(|&l| l >= 1_240_000 * 98 / 100), "{:?}", r.latencies.iter().min());
        // 1000 events of 1.24 ms on 8 CPUs cannot finish faster than 155 ms.
        assert!(r.total_ns >= 1000 * 1_240_000 * 98 / 100 / 8, "{}", r.total_ns);
        assert!(r.spread_ns.is_some() && r.one_per_cpu_ns.is_some(), "8 workers end up one per CPU");
    }
}

#[test]
fn trace_passes_the_perfetto_checker() {
    let (_, json, svg) = traced(5);
    assert!(svg.contains("CPU7"));
    let check = check_chrome_trace(&json, 8);
    let summary = check.as_ref().unwrap_or_else(|_| panic!("checker: {}", verdict(&check)));
    assert_eq!(summary.cpus_with_switches.len(), 8, "{}", verdict(&check));
    assert!(summary.events.get("sched_waking").is_some_and(|&n| n > 0), "{}", verdict(&check));
}

#[test]
fn periodic_tasks_and_pinning_on_bigger_machines() {
    on_big_stack(|| {
        let cfg = Config { cpus: 64, topology: TopologyKind::Clusters(8), ..Config::octo(3) };
        let mut m = Machine::<64>::new(cfg).unwrap();
        m.run_until(5_000_000);
        let pinned = m
            .spawn(
                0,
                Behavior::Periodic { run_ns: 300_000, sleep_ns: 700_000, repeat: 50 },
                "pinned",
                CpuMask::single(5),
            )
            .unwrap();
        for i in 0..100 {
            m.spawn(
                i % 64,
                Behavior::Periodic { run_ns: 500_000, sleep_ns: 500_000, repeat: 40 },
                "p",
                CpuMask::ALL,
            )
            .unwrap();
        }
        m.start(0).unwrap();
        let mut left = true;
        while left && m.now() < 10_000_000_000 {
            let t = m.now() + 1_000_000;
            left = m.run_until(t);
            if let Ok(cpu) = m.smp.task_cpu(pinned) {
                assert_eq!(cpu, 5, "a pinned task never leaves its CPU");
            }
            m.smp.check_invariants().unwrap();
        }
        assert!(!left, "all periodic tasks finished by {} ms", m.now() / 1_000_000);
    });
}

/// The latency workload under both policies (paired seeds, 5 each, HZ=1000). Under EEVDF the
/// periodic tasks with 0.5 ms slices wait less than those with the default 3 ms, and a sleeper
/// whose debt outlives its sleep (SLEEPER_KEEPS_LAG, Linux 6.6) waits longer. CFS's sleeper
/// credit lets every wakeup preempt at once, and every periodic task gets its whole demand
/// (5 % for the 4 of a group on 8 CPUs); under EEVDF a default-slice task, waiting for the
/// running task's request, gets less.
#[test]
fn latency_workload_eevdf_against_cfs() {
    use sched_sim::experiments::{share, wake_us};
    use sched_sim::stats::median;
    let w = Workload::Latency {
        spinners: 16,
        periodic: 8,
        run_ns: 500_000,
        sleep_ns: 4_500_000,
        slice_ns: 500_000,
        duration_ns: 1_000_000_000,
    };
    let side = |features: Features| {
        (1..=5u64)
            .map(|seed| {
                let cfg = Config { hz: 1000, features, ..Config::octo(seed) };
                let r = run_once(&cfg, &w);
                let cpus = cfg.cpus as f64;
                [
                    wake_us(&r, 1, 0.99),
                    wake_us(&r, 0, 0.99),
                    share(r.periodic_cpu_ns[1], &r, cpus),
                    share(r.periodic_cpu_ns[0], &r, cpus),
                ]
            })
            .collect::<Vec<_>>()
    };
    let med = |v: &[[f64; 4]], i: usize| median(&v.iter().map(|r| r[i]).collect::<Vec<_>>());
    let cfs = side(Features::default());
    let eevdf = side(Features::default() | Features::EEVDF);
    let eevdf66 = side(Features::default() | Features::EEVDF | Features::SLEEPER_KEEPS_LAG);
    assert!(med(&cfs, 0) < 20.0 && med(&cfs, 1) < 20.0, "CFS wakeups preempt at once");
    for i in [2, 3] {
        assert!((med(&cfs, i) - 5.0).abs() < 0.1, "CFS: the whole demand, {}", med(&cfs, i));
    }
    assert!(med(&eevdf, 3) < 4.6, "EEVDF, default slice: {} % of the machine", med(&eevdf, 3));
    let (short, default) = (med(&eevdf, 0), med(&eevdf, 1));
    assert!(short * 2.0 < default, "EEVDF p99: short slices {short} µs, default {default} µs");
    let keeps = med(&eevdf66, 0);
    assert!(keeps > 2.0 * short, "with the debt kept across sleep: p99 {keeps} µs against {short} µs");
}

/// A wake-on-one burst on more CPUs than a runqueue holds is cut to what CPU0 holds (it
/// used to fail creating the 65th task), and the table says how many tasks each burst had.
#[test]
fn spread_bursts_fit_cpu0s_runqueue() {
    let base = Config { topology: TopologyKind::Clusters(4), ..Config::octo(7) };
    let pts = sched_sim::experiments::spread(&base, &[80], 1, || {});
    let tasks: Vec<(&str, usize)> = pts.iter().map(|p| (p.burst.as_str(), p.tasks)).collect();
    assert_eq!(tasks, [("fork", 80), ("wake-on-one", sched_sim::machine::SIM_Q)]);
    let wake = &pts[1];
    assert!(wake.median_ms.is_finite(), "64 spinners spread over 80 CPUs: {wake:?}");
}

/// A machine above `LARGE_ABOVE_CPUS` prefetches and asks for huge pages: for one seed it
/// gives the same bytes whether or not its CPUs publish the next-pick hint (prefetching is a
/// hint, nothing else), and the core's invariants hold at the end.
#[test]
fn a_large_machine_is_deterministic_and_consistent() {
    const CPUS: usize = sched_sim::machine::LARGE_ABOVE_CPUS + 8;
    let run = |hints: bool| {
        on_big_stack(move || {
            let cfg =
                Config { cpus: CPUS, topology: TopologyKind::Clusters(8), trace: true, ..Config::octo(7) };
            let mut m = Machine::<CPUS>::new(cfg).unwrap();
            if !hints {
                m.smp.set_prefetch_hints(false);
            }
            let (r, tr) = drive(&mut m, &Workload::seed());
            m.smp.check_invariants().unwrap();
            (serde_json::to_string(&r).unwrap(), tr.unwrap().0)
        })
    };
    assert_eq!(run(true), run(false));
}

/// A configured rate of 0 is the core's default: the simulated CPUs tick at 250 HZ, as the
/// core counts its jiffies, and the run is the one at an explicit 250.
#[test]
fn hz_zero_ticks_at_the_cores_default() {
    let run = |hz: u32| {
        on_big_stack(move || {
            let mut m = Machine::<8>::new(Config { hz, nohz: false, ..Config::octo(1) }).unwrap();
            m.spawn(0, Behavior::Spinner, "s", CpuMask::single(0)).unwrap();
            m.start(0).unwrap();
            m.run_until(100_000_000);
            serde_json::to_string(&m.report()).unwrap()
        })
    };
    let default = run(0);
    assert_eq!(default, run(250));
    assert_ne!(default, run(1000), "the rate is seen");
}

/// What the core refuses a task, `Machine::spawn` answers with the core's error and leaves
/// the machine as it was: it runs on with the tasks it has.
#[test]
fn a_refused_spawn_is_an_error_and_changes_nothing() {
    use sched_core::SchedError;
    on_big_stack(|| {
        let mut m = Machine::<8>::new(Config { nohz: false, ..Config::octo(1) }).unwrap();
        let spin = || Behavior::Spinner;
        assert_eq!(m.spawn(8, spin(), "s", CpuMask::ALL), Err(SchedError::CpuOutOfRange(8)));
        assert!(m.spawn(0, spin(), "s", CpuMask::single(12)).is_err(), "no CPU 12 on 8");
        assert!(m.spawn(0, spin(), "s", CpuMask::EMPTY).is_err());
        assert_eq!(m.smp.nr_tasks(), 0, "the refusals left no task");
        let pinned: Vec<_> = (0..64).map(|_| m.spawn(0, spin(), "s", CpuMask::single(0)).unwrap()).collect();
        assert!(m.spawn(0, spin(), "s", CpuMask::single(0)).is_err(), "CPU 0's runqueue is full");
        assert_eq!(m.smp.nr_tasks(), 64, "the refusal left no task");
        assert_eq!(m.smp.with_cpu(0, |st| st.rq.nr_running()), Ok(64));
        assert_eq!(m.start(8), Err(SchedError::CpuOutOfRange(8)));
        m.start(0).unwrap();
        m.run_until(50_000_000);
        m.smp.check_invariants().unwrap();
        assert!(pinned.iter().all(|&t| m.smp.task_cpu(t) == Ok(0)));
    });
}
