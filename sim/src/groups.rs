//! Task groups on the simulated machine (`cargo xsim groups`): the shapes of kselftest's
//! `test_cpu.c` and the issue's, each group's CPU time beside what cgroup v2 promises it.
//!
//! Two measures, each defined once here and in docs/groups.md: a group's **share** is its
//! tasks' CPU time over all the case's tasks' CPU time; its **CPUs' worth** is its tasks' CPU
//! time over the measured wall time (1.0 = one CPU busy the whole time). The churn case
//! counts tasks instead (LTP's test asks only that nothing hangs or is lost).

use sched_core::group::tree::GroupId;
use sched_core::{CpuMask, TaskId};

use crate::machine::{Behavior, Config, Machine};

/// Group slots of the simulated machines here.
const GROUPS: usize = 8;
/// Warm-up before the measured window (ns): the balancer spreads, PELT settles.
const WARMUP_NS: u64 = 1_000_000_000;

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Measure {
    /// The group's CPU time over all the case's tasks' CPU time.
    Share,
    /// The group's CPU time over the wall time.
    CpusWorth,
    /// A number of tasks.
    Tasks,
}

/// One group of one case: its target and what it got.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GroupRow {
    /// The case (the shape of the test it follows).
    pub case: &'static str,
    /// The group, by its weight or limit.
    pub group: String,
    /// What it is measured by.
    pub measure: Measure,
    /// What cgroup v2 promises it.
    pub target: f64,
    /// What it got.
    pub got: f64,
    /// `cpu.stat`'s periods and throttled periods in the window, for a group with a limit.
    pub periods: Option<(u64, u64)>,
}

impl GroupRow {
    /// `got` against `target`, relative.
    pub fn error(&self) -> f64 {
        self.got / self.target - 1.0
    }
}

/// Every case on a machine of `cfg.cpus` CPUs (the 100-against-1 case on one CPU), each
/// measured for `seconds` after a second's warm-up.
pub fn run_groups(cfg: &Config, seconds: u64) -> Vec<GroupRow> {
    let cfg = cfg.clone();
    crate::experiments::on_big_stack(move || match cfg.cpus {
        0..=8 => cases::<8>(&cfg, seconds),
        _ => cases::<64>(&cfg, seconds),
    })
}

fn cases<const C: usize>(cfg: &Config, seconds: u64) -> Vec<GroupRow> {
    let n = cfg.cpus;
    let window = seconds * 1_000_000_000;
    let mut rows = Vec::new();
    // kselftest's over-provisioned weights: a spinner per CPU in each group.
    rows.extend(weights::<C>(cfg, window, "weights 50/100/150, a spinner per CPU each", n, Measure::Share));
    // Under-provisioned: a spinner each, fewer than the CPUs, so each gets a CPU.
    if n >= 3 {
        rows.extend(weights::<C>(cfg, window, "weights 50/100/150, one spinner each", 1, Measure::CpusWorth));
    }
    rows.extend(nested::<C>(cfg, window));
    rows.extend(many_against_one(cfg, window));
    rows.extend(capped::<C>(cfg, window));
    rows.extend(churn::<C>(cfg, window));
    rows
}

/// A machine with groups, its tasks spinners.
fn machine<const C: usize>(cfg: &Config) -> Machine<C, GROUPS> {
    Machine::<C, GROUPS>::new(cfg.clone()).expect("a topology the CLI checked")
}

fn spinners<const C: usize>(m: &mut Machine<C, GROUPS>, g: GroupId, count: usize, name: &str) -> Vec<TaskId> {
    let cpus = m.config().cpus;
    (0..count)
        .map(|i| {
            let t =
                m.spawn(i % cpus, Behavior::Spinner, name, CpuMask::ALL).expect("tasks the machine holds");
            m.move_task(t, g).expect("a live task and group");
            t
        })
        .collect()
}

/// Runs the warm-up and the window; the CPU time of each set of tasks in the window.
fn measure<const C: usize>(m: &mut Machine<C, GROUPS>, sets: &[Vec<TaskId>], window: u64) -> Vec<u64> {
    measure_with(m, sets, window, |_| {})
}

/// [`measure`], calling `at_start` when the window opens.
fn measure_with<const C: usize>(
    m: &mut Machine<C, GROUPS>,
    sets: &[Vec<TaskId>],
    window: u64,
    at_start: impl FnOnce(&Machine<C, GROUPS>),
) -> Vec<u64> {
    for cpu in 0..m.config().cpus {
        m.start(cpu).expect("a simulated CPU");
    }
    m.run_until(WARMUP_NS);
    at_start(m);
    let before: Vec<u64> = sets.iter().map(|s| s.iter().map(|&t| m.cpu_time(t)).sum()).collect();
    m.run_until(WARMUP_NS + window);
    sets.iter().zip(before).map(|(s, b)| s.iter().map(|&t| m.cpu_time(t)).sum::<u64>() - b).collect()
}

fn weights<const C: usize>(
    cfg: &Config,
    window: u64,
    case: &'static str,
    per_group: usize,
    measure_by: Measure,
) -> Vec<GroupRow> {
    let mut m = machine::<C>(cfg);
    let ws = [50u32, 100, 150];
    let sets: Vec<Vec<TaskId>> = ws
        .iter()
        .map(|&w| {
            let g = m.create_group(GroupId::ROOT, w).expect("room for three groups");
            spinners(&mut m, g, per_group, &format!("w{w}"))
        })
        .collect();
    let got = measure(&mut m, &sets, window);
    let total: u64 = got.iter().sum();
    ws.iter()
        .zip(&got)
        .map(|(&w, &ns)| GroupRow {
            case,
            group: format!("cpu.weight {w}"),
            measure: measure_by,
            // (A share, or else each group's CPUs' worth.)
            target: if measure_by == Measure::Share { w as f64 / 300.0 } else { 1.0 },
            got: if measure_by == Measure::Share {
                ns as f64 / total as f64
            } else {
                ns as f64 / window as f64
            },
            periods: None,
        })
        .collect()
}

/// A child hierarchy splits its parent's share by its own weights: A (1000) holding A1 (250)
/// and A2 (750), beside B (1000); a spinner per CPU in each leaf.
fn nested<const C: usize>(cfg: &Config, window: u64) -> Vec<GroupRow> {
    let mut m = machine::<C>(cfg);
    let n = cfg.cpus;
    let a = m.create_group(GroupId::ROOT, 1000).expect("room");
    let b = m.create_group(GroupId::ROOT, 1000).expect("room");
    let a1 = m.create_group(a, 250).expect("room");
    let a2 = m.create_group(a, 750).expect("room");
    let sets = [spinners(&mut m, b, n, "B"), spinners(&mut m, a1, n, "A1"), spinners(&mut m, a2, n, "A2")];
    let got = measure(&mut m, &sets, window);
    let total: u64 = got.iter().sum();
    [("B (1000)", 0.5), ("A (1000) / A1 (250)", 0.125), ("A (1000) / A2 (750)", 0.375)]
        .iter()
        .zip(&got)
        .map(|(&(name, target), &ns)| GroupRow {
            case: "nested: A {A1, A2} beside B, a spinner per CPU per leaf",
            group: name.to_string(),
            measure: Measure::Share,
            target,
            got: ns as f64 / total as f64,
            periods: None,
        })
        .collect()
}

/// A group of 100 spinners beside a group of one, equal weights, on one CPU.
fn many_against_one(cfg: &Config, window: u64) -> Vec<GroupRow> {
    let one_cpu = Config { cpus: 1, topology: crate::machine::TopologyKind::Flat, ..cfg.clone() };
    let mut m = machine::<8>(&one_cpu);
    let many = m.create_group(GroupId::ROOT, 100).expect("room");
    let one = m.create_group(GroupId::ROOT, 100).expect("room");
    // (The machine's runqueue holds SIM_Q tasks, of which GROUPS slots are the groups'.)
    let count = (crate::machine::SIM_Q - GROUPS - 1).min(100);
    let sets = [spinners(&mut m, many, count, "many"), spinners(&mut m, one, 1, "one")];
    let got = measure(&mut m, &sets, window);
    let total: u64 = got.iter().sum();
    [format!("{count} threads"), "1 thread".to_string()]
        .into_iter()
        .zip(&got)
        .map(|(name, &ns)| GroupRow {
            case: "many threads against one, equal weights, one CPU",
            group: name,
            measure: Measure::Share,
            target: 0.5,
            got: ns as f64 / total as f64,
            periods: None,
        })
        .collect()
}

/// `cpu.max` "10000 100000" on a group with a spinner per CPU: 10 % of one CPU in all.
fn capped<const C: usize>(cfg: &Config, window: u64) -> Vec<GroupRow> {
    let mut m = machine::<C>(cfg);
    let g = m.create_group(GroupId::ROOT, 100).expect("room");
    m.set_group_max(g, "10000 100000").expect("a valid cpu.max");
    let sets = [spinners(&mut m, g, cfg.cpus, "capped")];
    let mut s0 = None;
    let got = measure_with(&mut m, &sets, window, |m| s0 = m.group_bandwidth(g).ok());
    let (s0, s) = (s0.unwrap_or_default(), m.group_bandwidth(g).unwrap_or_default());
    vec![GroupRow {
        case: "cpu.max 10000 100000, a spinner per CPU",
        group: "capped".to_string(),
        measure: Measure::CpusWorth,
        target: 0.10,
        got: got[0] as f64 / window as f64,
        periods: Some((s.nr_periods - s0.nr_periods, s.nr_throttled - s0.nr_throttled)),
    }]
}

/// LTP's `cfs_bandwidth01` shape: a three-level hierarchy with 10 ms periods under churn.
/// The top group is capped at 2.5 CPUs, one middle group at half a CPU and one leaf at a
/// fifth; 16 tasks (half spinners, half running 3 ms and sleeping 2 ms) start in the four
/// leaves. For the window, every 5 ms a task is moved (to a leaf or a middle group, running or
/// not), every 100 ms the leaf's cap is switched off or on, every 200 ms a middle group's
/// weight changes, every 250 ms a spare group is created or deleted; the core's invariants
/// are checked after every event. Then a calm second: every task must run in it, and the
/// groups must count every task once.
fn churn<const C: usize>(cfg: &Config, window: u64) -> Vec<GroupRow> {
    const MS: u64 = 1_000_000;
    const TASKS: usize = 16;
    let mut m = machine::<C>(&Config { check_every_event: true, ..cfg.clone() });
    let top = m.create_group(GroupId::ROOT, 100).expect("room");
    let mid = [m.create_group(top, 200).expect("room"), m.create_group(top, 100).expect("room")];
    let leaves = [
        m.create_group(mid[0], 50).expect("room"),
        m.create_group(mid[0], 300).expect("room"),
        m.create_group(mid[1], 50).expect("room"),
        m.create_group(mid[1], 300).expect("room"),
    ];
    for (g, max) in [(top, "25000 10000"), (mid[0], "5000 10000"), (leaves[3], "2000 10000")] {
        m.set_group_max(g, max).expect("a valid cpu.max");
    }
    let cpus = m.config().cpus;
    let tasks: Vec<TaskId> = (0..TASKS)
        .map(|i| {
            let b = if i % 2 == 0 {
                Behavior::Spinner
            } else {
                Behavior::Periodic { run_ns: 3 * MS, sleep_ns: 2 * MS, repeat: u32::MAX }
            };
            let t = m.spawn(i % cpus, b, "churn", CpuMask::ALL).expect("tasks the machine holds");
            m.move_task(t, leaves[i % 4]).expect("a live task and group");
            t
        })
        .collect();
    for cpu in 0..cpus {
        m.start(cpu).expect("a simulated CPU");
    }
    let mut spare = None;
    for step in 0..window / MS {
        m.run_until(m.now() + MS);
        if step % 5 == 0 {
            let to =
                if step % 15 == 0 { mid[(step / 15 % 2) as usize] } else { leaves[(step / 5 % 4) as usize] };
            m.move_task(tasks[(step * 3) as usize % TASKS], to).expect("a live task and group");
        }
        if step % 100 == 0 {
            let max = if step / 100 % 2 == 0 { "max" } else { "2000 10000" };
            m.set_group_max(leaves[3], max).expect("a valid cpu.max");
        }
        if step % 200 == 0 {
            m.set_group_weight(mid[0], 50 + (step / 200 % 10) as u32 * 40).expect("a valid weight");
        }
        if step % 250 == 0 {
            spare = match spare {
                None => Some(m.create_group(mid[1], 10).expect("room")),
                Some(g) => {
                    m.delete_group(g).expect("an empty group");
                    None
                }
            };
        }
    }
    let before: Vec<u64> = tasks.iter().map(|&t| m.cpu_time(t)).collect();
    m.run_until(m.now() + 1_000 * MS);
    let ran = tasks.iter().zip(&before).filter(|&(&t, &b)| m.cpu_time(t) > b).count();
    let counted: u32 = leaves.iter().chain(&mid).chain([&top]).map(|&g| m.group_tasks(g).unwrap_or(0)).sum();
    let case = "churn: 3 levels, 10 ms periods, 16 tasks moved";
    let row = |group: &str, got: usize| GroupRow {
        case,
        group: group.to_string(),
        measure: Measure::Tasks,
        target: TASKS as f64,
        got: got as f64,
        periods: None,
    };
    vec![row("ran in the calm second", ran), row("counted by the groups", counted as usize)]
}

/// The rows as a table.
pub fn render(rows: &[GroupRow]) -> String {
    let mut out = format!("{:<58} {:<22} {:>9} {:>9} {:>8}\n", "case", "group", "target", "got", "error");
    for r in rows {
        let unit = |v: f64| match r.measure {
            Measure::Share => format!("{:.2} %", v * 100.0),
            Measure::CpusWorth => format!("{v:.3} CPU"),
            Measure::Tasks => format!("{v:.0} tasks"),
        };
        out += &format!(
            "{:<58} {:<22} {:>9} {:>9} {:>+7.1}%",
            r.case,
            r.group,
            unit(r.target),
            unit(r.got),
            r.error() * 100.0
        );
        if let Some((p, t)) = r.periods {
            out += &format!("  (nr_periods {p}, nr_throttled {t})");
        }
        out += "\n";
    }
    out
}
