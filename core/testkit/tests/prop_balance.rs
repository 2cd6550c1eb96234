//! Property test of the balancer: random topologies and task sets (affinities, nice levels,
//! sleepers), real PELT from simulated ticks, then random balance passes at random levels
//! and idle types, with the stoppers they request run. After every pass all invariants
//! hold and no migration ever went to a CPU outside the task's affinity.

use std::collections::HashMap;

use proptest::prelude::*;
use sched_core::IdleType;
use sched_core::{CpuMask, Features, Smp, TaskId, TaskParams};
use sched_testkit::Recorder;

type M = Smp<Recorder, 16, 96, 48>;

#[derive(Debug, Clone)]
enum Topo {
    Clusters(usize, usize),
    BigLittle(usize, usize),
    Numa(usize, usize, usize),
}

fn topo() -> impl Strategy<Value = Topo> {
    prop_oneof![
        (1usize..4, 1usize..5).prop_map(|(c, k)| Topo::Clusters(c, k)),
        (1usize..5, 1usize..5).prop_map(|(l, b)| Topo::BigLittle(l, b)),
        (2usize..3, 1usize..3, 1usize..3).prop_map(|(n, c, k)| Topo::Numa(n, c, k)),
    ]
}

#[derive(Debug, Clone)]
struct TaskSpec {
    cpu: usize,
    nice: i32,
    pin: u8,
    sleeps: bool,
}

fn task() -> impl Strategy<Value = TaskSpec> {
    (0usize..16, -5i32..6, 0u8..6, any::<bool>()).prop_map(|(cpu, nice, pin, sleeps)| TaskSpec {
        cpu,
        nice,
        pin,
        sleeps,
    })
}

fn run(
    t: Topo,
    tasks: Vec<TaskSpec>,
    passes: Vec<(usize, usize, u8)>,
    rule: bool,
) -> Result<(), TestCaseError> {
    let mut f = Features::default();
    f.set(Features::UTIL_PULL_SKIPS_LONE_TASK, rule);
    let m: Box<M> = Box::new(Smp::new(Recorder::new(16), f, 250));
    m.init_with(|tp| match t {
        Topo::Clusters(c, k) => tp.init_clusters(c, k),
        Topo::BigLittle(l, b) => tp.init_big_little(l, b, 446),
        Topo::Numa(n, c, k) => tp.init_numa(n, c, k),
    })
    .unwrap();
    let n = m.nr_cpus();
    let mut affinity: HashMap<TaskId, CpuMask> = HashMap::new();
    let mut now = 1_000_000_000u64;
    for s in &tasks {
        let cpu = s.cpu % n;
        let mask = match s.pin {
            0 => CpuMask::single(cpu),
            1 => CpuMask::range(cpu, cpu + 2).and(&CpuMask::first_n(n)),
            _ => CpuMask::ALL,
        };
        if let Ok(id) =
            m.create(cpu, now, TaskParams { nice: s.nice, affinity: mask, ..TaskParams::default() })
        {
            affinity.insert(id, mask.and(&CpuMask::first_n(n)));
        }
    }
    // Run every CPU for a while so PELT builds up; sleepers block once.
    let sleepers: Vec<TaskId> =
        tasks.iter().zip(affinity.keys()).filter(|(s, _)| s.sleeps).map(|(_, &id)| id).collect();
    for step in 0..60 {
        now += 4_000_000;
        for cpu in 0..n {
            m.tick(cpu, now).unwrap();
            if m.need_resched(cpu) || m.current(cpu).is_none() {
                m.schedule(cpu, now).unwrap();
                m.finish_switch(cpu, now).unwrap();
            }
            if step == 30 {
                if let Some(c) = m.current(cpu) {
                    if sleepers.contains(&c) {
                        let _ = m.block(cpu, now, c);
                        m.schedule(cpu, now).unwrap();
                        m.finish_switch(cpu, now).unwrap();
                    }
                }
            }
        }
    }
    m.check_invariants().map_err(|v| TestCaseError::fail(format!("after warm-up: {v:?}")))?;

    for (cpu, lvl, idle) in passes {
        let cpu = cpu % n;
        let levels = m.topology().nr_levels(cpu);
        if levels == 0 {
            continue;
        }
        let idle = [IdleType::Idle, IdleType::NotIdle, IdleType::NewlyIdle][idle as usize % 3];
        now += 1_000_000;
        m.balance_domain(cpu, lvl % levels, idle, now).unwrap();
        // Run any stopper that was requested.
        let kicked = m.platform().take_resched_log();
        for k in kicked {
            m.schedule(k, now).unwrap();
            m.finish_switch(k, now).unwrap();
            if m.need_resched(k) {
                m.schedule(k, now).unwrap();
                m.finish_switch(k, now).unwrap();
            }
        }
        m.check_invariants().map_err(|v| TestCaseError::fail(format!("{v:?}")))?;
        for &(task, dst) in m.platform().migrations().iter() {
            prop_assert!(affinity[&task].contains(dst), "{task:?} moved to CPU{dst} outside its affinity");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn balance_passes_keep_invariants_and_affinity(
        t in topo(),
        tasks in prop::collection::vec(task(), 1..40),
        passes in prop::collection::vec((0usize..16, 0usize..4, 0u8..3), 1..40),
        rule in any::<bool>(),
    ) {
        run(t, tasks, passes, rule)?;
    }
}
