//! Stress: many random scenarios — topologies, task mixes (spinners, periodic sleepers, short
//! bursts), affinities, nice levels — with the core's invariant checker after
//! every simulated event: no task lost, duplicated or misplaced; every pinned task where its
//! affinity allows. Half the scenarios run EEVDF with mixed slices, whose sums and sleepers'
//! lags the checker covers too.

use proptest::prelude::*;
use sched_core::{CpuMask, Features};
use sched_sim::experiments::on_big_stack;
use sched_sim::machine::{Behavior, Config, Machine, TopologyKind};

#[derive(Debug, Clone)]
struct Spec {
    topo: u8,
    nohz: bool,
    /// EEVDF instead of CFS (half the scenarios).
    eevdf: bool,
    tasks: Vec<(u8, u8, u16, u16, u8, i8)>,
    renice: Vec<(u8, i8)>,
    seed: u64,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0u8..4,
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec((0u8..3, 0u8..8, 1u16..400, 0u16..400, 0u8..4, -5i8..6), 1..24),
        prop::collection::vec((0u8..24, -10i8..10), 0..6),
        any::<u64>(),
    )
        .prop_map(|(topo, nohz, eevdf, tasks, renice, seed)| Spec {
            topo,
            nohz,
            eevdf,
            tasks,
            renice,
            seed,
        })
}

fn run(s: Spec) {
    let topology = match s.topo {
        0 => TopologyKind::Flat,
        1 => TopologyKind::Clusters(4),
        2 => TopologyKind::BigLittle(446),
        _ => TopologyKind::Numa(2),
    };
    let features = if s.eevdf { Features::default() | Features::EEVDF } else { Features::default() };
    let cfg = Config {
        topology,
        nohz: s.nohz,
        seed: s.seed,
        features,
        check_every_event: true,
        ..Config::octo(s.seed)
    };
    let mut m = Machine::<8>::new(cfg).unwrap();
    m.run_until(5_000_000);
    let mut ids = vec![];
    for (i, &(kind, cpu, run_us, sleep_us, pin, nice)) in s.tasks.iter().enumerate() {
        let behavior = match kind {
            0 => Behavior::Periodic {
                run_ns: run_us as u64 * 1000,
                sleep_ns: sleep_us as u64 * 1000,
                repeat: 20,
            },
            1 => Behavior::Spinner,
            _ => Behavior::Periodic { run_ns: 50_000, sleep_ns: 10_000, repeat: 200 },
        };
        let cpu = cpu as usize % 8;
        let affinity = match pin {
            0 => CpuMask::single(cpu),
            1 => CpuMask::range(cpu & !1, (cpu & !1) + 2),
            _ => CpuMask::ALL,
        };
        let t = m.spawn(cpu, behavior, &format!("t{i}"), affinity).unwrap();
        m.set_nice(t, nice as i32);
        if s.eevdf {
            // Mixed EEVDF slices: the default, 0.1 ms, 1 ms and 10 ms.
            let slice = [0, 100_000, 1_000_000, 10_000_000][(run_us as usize + i) % 4];
            m.smp.set_slice(m.now(), t, slice).expect("a valid slice for a live task");
        }
        ids.push((t, affinity));
    }
    for step in 0..40u64 {
        let until = m.now() + 2_000_000;
        m.run_until(until);
        if let Some(&(i, n)) = s.renice.get(step as usize) {
            if let Some(&(t, _)) = ids.get(i as usize % ids.len().max(1)) {
                m.set_nice(t, n as i32);
            }
        }
        // Every balance decision agrees with its event, and the tasks its records say moved
        // are exactly the migrations the balancer performed.
        let p = m.smp.platform();
        assert_eq!(p.inconsistent_records.get(), 0, "a balance record contradicts itself");
        assert_eq!(p.balance_moved.get(), p.balance_migrations.get(), "records vs migrations");
        for &(t, mask) in &ids {
            if let Ok(cpu) = m.smp.task_cpu(t) {
                let e = m.smp.entity(t).unwrap();
                assert!(mask.contains(cpu) || e.on_cpu, "{t:?} on CPU{cpu} outside {mask:?}");
            }
        }
    }
}

proptest! {
    // 120 scenarios in `cargo xtest`; `STRESS_CASES=2000 cargo test --release -p sched-sim
    // --test stress` for a long run.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("STRESS_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(120)
    ))]

    #[test]
    fn random_scenarios_keep_every_invariant(s in spec()) {
        on_big_stack(move || run(s));
    }
}

/// A tick that lands on an idle CPU while a reschedule IPI is on its way there (a task was
/// just queued on it) keeps ticking: the core does not count that CPU tickless, so a stopped
/// tick there would be passed over by every kick. IPIs slower than a tick make the window
/// wide; the per-event checks hold the machine to it.
#[test]
fn a_tick_in_a_wakeups_ipi_window_keeps_ticking() {
    let cfg = Config {
        topology: TopologyKind::Clusters(4),
        nohz: true,
        ipi_latency_ns: 6_000_000,
        check_every_event: true,
        ..Config::octo(7)
    };
    on_big_stack(move || {
        let mut m = Machine::<8>::new(cfg).unwrap();
        m.run_until(5_000_000);
        for i in 0..12 {
            let b = Behavior::Periodic { run_ns: 700_000, sleep_ns: 1_300_000, repeat: 200 };
            m.spawn(i % 8, b, &format!("p{i}"), CpuMask::ALL).unwrap();
        }
        m.run_until(600_000_000);
        m.smp.check_invariants().unwrap();
    });
}
