//! Experiments: the seed's sysbench run with the rule on and off, spread time versus CPU
//! count, and a generic A/B of any feature switch — each over K iterations derived from
//! one base seed, summarised in the seed-style table.

use sched_core::{CpuMask, Features};
use sched_workload::{Program, ProgramDef};

use crate::machine::{Behavior, Config, Machine, RunReport, TopologyKind, MAX_ACTIVATIONS};
use crate::rng::Rng;
use crate::stats::{mann_whitney, quantile, summary};
use crate::trace::TraceLog;
use sched_workload::figures::{Summary, TaskFigures};
use sched_workload::sysbench::Sysbench;

mod spread;

pub use spread::{spread, SpreadPoint};

/// A workload run on a fresh machine.
#[derive(Debug, Clone, serde::Serialize)]
pub enum Workload {
    /// sysbench cpu: `threads` workers created by a main thread take `events` events of
    /// `cost_ns` (± `jitter`) each from a shared counter. Run as its workload file
    /// ([`sched_workload::sysbench::Sysbench::json`]), with the machine's creation and set-up
    /// work ([`Config::create_ns`], [`Config::setup_ns`]).
    Sysbench {
        /// Worker threads.
        threads: u32,
        /// Events in total.
        events: u64,
        /// Work per event.
        cost_ns: u64,
        /// Relative jitter of the work.
        jitter: f64,
    },
    /// `tasks` spinners created all on CPU0 (pinned while created, then allowed
    /// everywhere), running for `run_ns`: spreading by balancing alone.
    WakeAllOnOne {
        /// Spinners.
        tasks: u32,
        /// How long to run.
        run_ns: u64,
    },
    /// Latency-sensitive tasks among CPU hogs: `spinners` spinners with the default slice and
    /// `periodic` tasks that each run `run_ns`, then sleep `sleep_ns`, over and over, for
    /// `duration_ns`. The first half of the periodic tasks asks for an EEVDF slice of
    /// `slice_ns` (tagged 1), the rest keep the default (tagged 0), so one run compares the
    /// two; CFS ignores slices. The figures: the periodic tasks' wake-to-run times and everyone's CPU share.
    Latency {
        /// Spinners.
        spinners: u32,
        /// Periodic tasks.
        periodic: u32,
        /// Work per period.
        run_ns: u64,
        /// Sleep per period.
        sleep_ns: u64,
        /// The periodic tasks' EEVDF slice (0: the machine's default).
        slice_ns: u64,
        /// How long to run.
        duration_ns: u64,
    },
    /// A workload program (an rt-app file lowered and checked by sched-workload): its
    /// `duration`, or until every thread has finished.
    Program {
        /// The file's name, for tables and traces.
        name: String,
        /// The program.
        #[serde(skip)]
        program: Program<'static>,
    },
}

/// How long a run to its end (sysbench's events, a program without a `duration`) may take
/// before it is cut (s of simulated time). A cut run says so ([`AbTable::cut_line`]).
pub const PROGRAM_CAP_S: u64 = 600;
/// [`PROGRAM_CAP_S`] in ns.
pub const PROGRAM_CAP_NS: u64 = PROGRAM_CAP_S * 1_000_000_000;

impl Workload {
    /// The seed's workload: `sysbench --test=cpu --num-threads=8 --max-requests=1000`, with an
    /// event cost that makes 1000 events on 8 CPUs take about the seed's 158 ms.
    pub fn seed() -> Workload {
        Workload::Sysbench { threads: 8, events: 1000, cost_ns: 1_240_000, jitter: 0.02 }
    }

    /// The sysbench file's shape of a [`Workload::Sysbench`] on a machine configured by `cfg`
    /// (its creation and set-up work); `None` for another workload.
    pub fn sysbench(&self, cfg: &Config) -> Option<Sysbench> {
        let Workload::Sysbench { threads, events, cost_ns, jitter } = *self else { return None };
        let us = |ns: u64| u32::try_from(ns / 1000).unwrap_or(u32::MAX);
        Some(Sysbench {
            threads,
            events: u32::try_from(events).unwrap_or(u32::MAX),
            event_us: us(cost_ns),
            jitter_pct: (jitter * 100.0).round() as u32,
            create_us: us(cfg.create_ns),
            setup_us: us(cfg.setup_ns),
        })
    }

    /// The workload of a lowered rt-app file, named `name`. Its encoded program lives as long
    /// as the process: every run of an experiment reads it.
    pub fn program(name: &str, def: &ProgramDef) -> Workload {
        let bytes: &'static [u8] = Box::leak(def.to_bytes().into_boxed_slice());
        let program = Program::parse(bytes).expect("a lowered program parses");
        Workload::Program { name: name.to_string(), program }
    }
}

/// The program of a sysbench shape, lowered from its workload file once per process (every
/// run of an experiment reads it).
fn sysbench_program(shape: Sysbench) -> Program<'static> {
    static PROGRAMS: std::sync::Mutex<Vec<(Sysbench, &'static [u8])>> = std::sync::Mutex::new(Vec::new());
    let mut programs = PROGRAMS.lock().unwrap_or_else(|e| e.into_inner());
    let bytes = match programs.iter().find(|(s, _)| *s == shape) {
        Some((_, bytes)) => *bytes,
        None => {
            let def = sched_workload::rtapp::lower(&shape.json()).expect("every sysbench shape lowers");
            let bytes: &'static [u8] = Box::leak(def.to_bytes().into_boxed_slice());
            programs.push((shape, bytes));
            bytes
        }
    };
    Program::parse(bytes).expect("a lowered program parses")
}

/// Calls `$f::<C>(cfg, &w)` on a big stack, `C` the machine size that holds `$cfg.cpus` CPUs.
macro_rules! on_machine_for {
    ($cfg:expr, $w:expr, $f:ident) => {{
        let (cfg, w) = ($cfg.clone(), $w.clone());
        on_big_stack(move || match cfg.cpus {
            0..=8 => $f::<8>(cfg, &w),
            9..=64 => $f::<64>(cfg, &w),
            65..=256 => $f::<256>(cfg, &w),
            _ => $f::<1024>(cfg, &w),
        })
    }};
}

/// Runs one iteration of `w` on a machine built from `cfg`.
pub fn run_once(cfg: &Config, w: &Workload) -> RunReport {
    on_machine_for!(cfg, w, run_on)
}

/// One traced run: its trace as Chrome JSON and SVG (the files `cargo xsim` and `cargo xrun`
/// write), the trace itself (for pictures), and the window the workload ran in (ns).
pub struct Traced {
    /// Chrome JSON (Perfetto).
    pub json: String,
    /// The single-run timeline.
    pub svg: String,
    /// The trace.
    pub log: TraceLog,
    /// When the workload started and when the run ended.
    pub window: (u64, u64),
}

/// Runs one traced iteration of `w` on a machine built from `cfg` (any CPU count); `None` if
/// the topology is refused.
pub fn traced_run(cfg: &Config, w: &Workload) -> Option<Traced> {
    fn on<const C: usize>(cfg: Config, w: &Workload) -> Option<Traced> {
        let mut m = Machine::<C>::new(Config { trace: true, ..cfg }).ok()?;
        let (json, svg) = drive(&mut m, w).1?;
        Some(Traced { json, svg, log: m.trace_log()?, window: (DRIVE_START, m.now()) })
    }
    on_machine_for!(cfg, w, on)
}

/// Runs `f` on a thread with room for a machine of up to 1024 CPUs on its stack.
pub fn on_big_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(f)
        .expect("spawn simulator thread")
        .join()
        .expect("simulator thread")
}

/// The speed bench's machine (`benches/speed.rs`, `examples/spinners.rs`): `cpus` CPUs in
/// clusters of up to 8, tickless idle off so that every CPU ticks, after 10 ms idle
/// `per_cpu` spinners pinned to each CPU and started. Build it on a big stack
/// ([`on_big_stack`]) for large `C`.
///
/// # Panics
///
/// If the machine cannot be built: `cpus` must be in `1..=C`, and at most 8 or a multiple of 8.
///
/// ```
/// let mut m = sched_sim::experiments::spinning::<8>(8, 4);
/// let t = m.now() + 100_000_000;
/// m.run_until(t);
/// ```
pub fn spinning<const C: usize>(cpus: usize, per_cpu: usize) -> Box<Machine<C>> {
    let cfg = Config { cpus, topology: TopologyKind::Clusters(8.min(cpus)), nohz: false, ..Config::octo(1) };
    let mut m = Box::new(Machine::<C>::new(cfg).expect("cpus in 1..=C, at most 8 or a multiple of 8"));
    m.run_until(DRIVE_START);
    for cpu in 0..cpus {
        for i in 0..per_cpu {
            m.spawn(cpu, Behavior::Spinner, &format!("s{i}"), CpuMask::single(cpu))
                .expect("room for the spinners");
        }
        m.start(cpu).expect("a CPU of the machine");
    }
    m
}

fn run_on<const C: usize>(cfg: Config, w: &Workload) -> RunReport {
    let mut m = Machine::<C>::new(cfg).expect("valid topology");
    drive(&mut m, w).0
}

/// When [`drive`] starts the workload: every CPU is idle and ticking by then (ns).
pub const DRIVE_START: u64 = 10_000_000;

/// Runs `w` on `m` to completion; returns the report and (if tracing) the machine's trace
/// as Chrome JSON and SVG.
pub fn drive<const C: usize>(m: &mut Machine<C>, w: &Workload) -> (RunReport, Option<(String, String)>) {
    let start = DRIVE_START;
    m.run_until(start);
    // The workload's own start: a tickless machine may have gone quiet before `start`.
    let t0 = m.now();
    // A run to its end: whether threads were still live at the bound.
    let mut live_at_bound = false;
    match *w {
        Workload::Sysbench { .. } => {
            let shape = w.sysbench(m.config()).expect("a sysbench workload");
            m.start_program(sysbench_program(shape)).expect("a sysbench run fits PROGRAM_THREADS");
            m.start(0).expect("a simulated CPU");
            live_at_bound = m.run_until(start + PROGRAM_CAP_NS);
        }
        Workload::WakeAllOnOne { tasks, run_ns } => {
            for i in 0..tasks {
                let t = m
                    .spawn(0, Behavior::Spinner, &format!("spin{i}"), CpuMask::single(0))
                    .expect("a burst that fits CPU 0");
                m.smp.set_affinity(m.now(), t, CpuMask::ALL).expect("live task");
            }
            m.start(0).expect("a simulated CPU");
            m.run_until(start + run_ns);
        }
        Workload::Latency { spinners, periodic, run_ns, sleep_ns, slice_ns, duration_ns } => {
            for i in 0..spinners {
                m.spawn(0, Behavior::Spinner, &format!("spin{i}"), CpuMask::ALL)
                    .expect("tasks the machine holds");
            }
            for i in 0..periodic {
                let b = Behavior::Periodic { run_ns, sleep_ns, repeat: u32::MAX };
                let t =
                    m.spawn(0, b, &format!("periodic{i}"), CpuMask::ALL).expect("tasks the machine holds");
                // The first half (rounded up) asks for the short slice, as a workload file
                // lists a task's threads together (workloads/latency.json).
                if i < periodic.div_ceil(2) {
                    // A slice out of range is refused and leaves the default.
                    let _ = m.smp.set_slice(m.now(), t, slice_ns);
                    m.tag(t, 1);
                }
            }
            m.start(0).expect("a simulated CPU");
            m.run_until(t0 + duration_ns);
        }
        Workload::Program { ref program, .. } => {
            m.start_program(*program).expect("a program the caller checked against PROGRAM_THREADS");
            m.start(0).expect("a simulated CPU");
            let d = program.duration_us().saturating_mul(1000);
            let live = m.run_until(t0 + if d > 0 { d } else { PROGRAM_CAP_NS });
            live_at_bound = d == 0 && live;
        }
    }
    let mut r = m.report();
    // (A deadlock ends the run before the bound, and says so itself.)
    r.cut = live_at_bound && m.program_deadlock().is_none() || m.program_cut().is_some();
    if let Workload::Latency { duration_ns, .. } = *w {
        r.total_ns = duration_ns;
    }
    if let Workload::Program { .. } = w {
        r.length_ns = m.program_deadlock().or(m.program_cut()).unwrap_or(m.now()) - t0;
        (r.tasks, r.blocked_threads) = m.program_figures();
    }
    let tr = m.trace().map(|t| {
        let end = m.now();
        let other = serde_json::json!({ "config": m.config(), "workload": w, "report": &r });
        let title = format!("fairsched sim: {} CPUs, {:?}", m.config().cpus, w);
        (t.chrome_json(other), t.svg(&title, start, end.min(start + 300_000_000)))
    });
    (r, tr)
}

/// One row of the table: a figure's values per iteration, for A and B.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The figure.
    pub name: String,
    /// Values with A.
    pub a: Vec<f64>,
    /// Values with B.
    pub b: Vec<f64>,
    /// Two-sided Mann–Whitney p-value of A vs B.
    pub p_value: f64,
}

/// An A/B comparison over K iterations.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AbTable {
    /// Label of A.
    pub a_label: String,
    /// Label of B.
    pub b_label: String,
    /// Iterations per side.
    pub iterations: usize,
    /// The rows.
    pub rows: Vec<Row>,
    /// Every event done exactly once in every run.
    pub all_events_exactly_once: bool,
    /// Runs that reached [`PROGRAM_CAP_NS`] before every thread finished (their figures stop
    /// there).
    #[serde(skip_serializing_if = "is_zero")]
    pub runs_cut: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl AbTable {
    /// The one line that says runs were cut at a bound ([`PROGRAM_CAP_S`] of simulated time,
    /// or a program's [`MAX_ACTIVATIONS`]), if any were.
    pub fn cut_line(&self) -> Option<String> {
        (self.runs_cut > 0).then(|| {
            format!(
                "{} of {} runs reached a bound ({PROGRAM_CAP_S} s of simulated time, or {MAX_ACTIVATIONS} activations) before they ended: their figures stop there",
                self.runs_cut,
                2 * self.iterations
            )
        })
    }
}

/// Runs `w` K times with features A and K times with B, iteration i of both sides using the
/// same derived seed (a paired design). `progress` is called after each run.
pub fn ab(
    base: &Config,
    w: &Workload,
    a: (Features, &str),
    b: (Features, &str),
    iterations: usize,
    mut progress: impl FnMut(),
) -> AbTable {
    let mut seeds = Rng::new(base.seed);
    let mut ra = Vec::new();
    let mut rb = Vec::new();
    for _ in 0..iterations {
        let seed = seeds.next_u64();
        for (f, out) in [(a.0, &mut ra), (b.0, &mut rb)] {
            let cfg = Config { features: f, seed, trace: false, ..base.clone() };
            out.push(run_once(&cfg, w));
            progress();
        }
    }
    let cpus = base.cpus as f64;
    let mut rows: Vec<Row> = figures(w)
        .iter()
        .map(|(name, f)| {
            let va: Vec<f64> = ra.iter().map(|r| f(r, cpus)).collect();
            let vb: Vec<f64> = rb.iter().map(|r| f(r, cpus)).collect();
            let (_, p) = mann_whitney(&va, &vb);
            Row { name: name.to_string(), a: va, b: vb, p_value: p }
        })
        .collect();
    if let Workload::Program { .. } = w {
        rows.extend(program_rows(&ra, &rb));
    }
    AbTable {
        a_label: a.1.to_string(),
        b_label: b.1.to_string(),
        iterations,
        rows,
        all_events_exactly_once: ra
            .iter()
            .chain(&rb)
            .all(|r| r.events_exactly_once || r.latencies.is_empty()),
        runs_cut: runs_cut(&ra, &rb),
    }
}

/// How many of both sides' runs were cut at the bound.
fn runs_cut(ra: &[RunReport], rb: &[RunReport]) -> usize {
    ra.iter().chain(rb).filter(|r| r.cut).count()
}

/// A table row's figure: its name and how to read it from a run's report (and the CPU count).
type Figure = (&'static str, fn(&RunReport, f64) -> f64);

/// The `q`-quantile of a run's wake-to-run times of the tasks tagged `tag` (µs).
pub fn wake_us(r: &RunReport, tag: u8, q: f64) -> f64 {
    let v: Vec<f64> = r.wake_latencies.iter().filter(|l| l.0 == tag).map(|l| l.1 as f64 / 1e3).collect();
    quantile(&v, q)
}

/// CPU time `ns` as a share of a machine of `cpus` CPUs over the run (%).
pub fn share(ns: u64, r: &RunReport, cpus: f64) -> f64 {
    100.0 * ns as f64 / (cpus * r.total_ns.max(1) as f64)
}

/// The A/B table of a program's runs (from any platform: the QEMU runner builds its reports
/// from the kernel's log): rt-app's figures per task, the threads left blocked, migrations.
pub fn program_table(
    a_label: &str,
    b_label: &str,
    iterations: usize,
    ra: &[RunReport],
    rb: &[RunReport],
) -> AbTable {
    AbTable {
        a_label: a_label.to_string(),
        b_label: b_label.to_string(),
        iterations,
        rows: program_rows(ra, rb),
        all_events_exactly_once: true,
        runs_cut: runs_cut(ra, rb),
    }
}

/// `v`, a figure of distribution `s`, or NaN if `s` has no values.
fn measured(s: &Summary, v: f64) -> f64 {
    if s.count == 0 {
        f64::NAN
    } else {
        v
    }
}

/// A program's rows: rt-app's figures of each task (sched_workload::figures), per run.
fn program_rows(ra: &[RunReport], rb: &[RunReport]) -> Vec<Row> {
    type TaskFigure = (&'static str, fn(&TaskFigures) -> f64);
    // (A figure a task never has, such as slack without a timer, is NaN and its row left out;
    // one some runs lack is summed over the runs that have it: NaN here is "no such figure",
    // not "not reached", which the tables rank last.)
    const FIGURES: [TaskFigure; 8] = [
        ("activations", |f| f.activations as f64),
        ("run time mean (µs)", |f| f.run_us.mean),
        ("wake-to-run p50 (µs)", |f| measured(&f.wake_us, f.wake_us.p50)),
        ("wake-to-run p99 (µs)", |f| measured(&f.wake_us, f.wake_us.p99)),
        ("wake-to-run max (µs)", |f| measured(&f.wake_us, f.wake_us.max)),
        ("slack p50 (µs)", |f| measured(&f.slack_us, f.slack_us.p50)),
        ("timer misses", |f| measured(&f.slack_us, f.misses as f64)),
        ("CPU share (%)", |f| f.cpu_share_pct),
    ];
    let names: Vec<String> =
        ra.first().map(|r| r.tasks.iter().map(|t| t.name.clone()).collect()).unwrap_or_default();
    let mut rows = Vec::new();
    for (i, task) in names.iter().enumerate() {
        for (name, f) in FIGURES {
            let of = |runs: &[RunReport]| -> Vec<f64> {
                runs.iter().map(|r| r.tasks.get(i).map_or(f64::NAN, f)).collect()
            };
            let (mut va, mut vb) = (of(ra), of(rb));
            if va.iter().chain(&vb).all(|v| v.is_nan()) {
                continue;
            }
            va.retain(|v| !v.is_nan());
            vb.retain(|v| !v.is_nan());
            let (_, p) = mann_whitney(&va, &vb);
            rows.push(Row { name: format!("{task}: {name}"), a: va, b: vb, p_value: p });
        }
    }
    type RunFigure = (&'static str, fn(&RunReport) -> f64);
    // The whole run's: its length (for a file without a `duration`, the time until its last
    // thread finished: a batch's makespan), its migrations, the threads left blocked.
    const RUN: [RunFigure; 3] = [
        ("run length (ms)", |r| r.length_ns as f64 / 1e6),
        ("migrations (run)", |r| r.migrations as f64),
        ("threads blocked at the end", |r| r.blocked_threads as f64),
    ];
    for (name, f) in RUN {
        let (va, vb): (Vec<f64>, Vec<f64>) = (ra.iter().map(f).collect(), rb.iter().map(f).collect());
        let (_, p) = mann_whitney(&va, &vb);
        rows.push(Row { name: name.to_string(), a: va, b: vb, p_value: p });
    }
    rows
}

/// The figures an A/B table shows for workload `w` (for a program, those before its tasks':
/// the sysbench figures if it has a pool of events, none otherwise).
fn figures(w: &Workload) -> Vec<Figure> {
    match w {
        Workload::Program { program, .. } if program.pools().next().is_none() => Vec::new(),
        Workload::Latency { .. } => vec![
            ("short slice: wake-to-run p50 (µs)", |r, _| wake_us(r, 1, 0.5)),
            ("short slice: p99 (µs)", |r, _| wake_us(r, 1, 0.99)),
            ("short slice: max (µs)", |r, _| wake_us(r, 1, 1.0)),
            ("short slice: CPU share (%)", |r, c| share(r.periodic_cpu_ns[1], r, c)),
            ("default slice: wake-to-run p50 (µs)", |r, _| wake_us(r, 0, 0.5)),
            ("default slice: p99 (µs)", |r, _| wake_us(r, 0, 0.99)),
            ("default slice: max (µs)", |r, _| wake_us(r, 0, 1.0)),
            ("default slice: CPU share (%)", |r, c| share(r.periodic_cpu_ns[0], r, c)),
            ("spinners' CPU share (%)", |r, c| share(r.spinner_cpu_ns, r, c)),
            ("periods run", |r, _| r.wake_latencies.len() as f64),
            ("migrations (run)", |r, _| r.migrations as f64),
        ],
        _ => vec![
            ("total time (ms)", |r, _| r.total_ns as f64 / 1e6),
            ("per-request avg (ms)", |r, _| r.avg_latency_ns / 1e6),
            ("per-request max (ms)", |r, _| r.max_latency_ns as f64 / 1e6),
            ("spread time (ms)", |r, _| instant_ms(r.spread_ns, r)),
            ("one-per-CPU time (ms)", |r, _| instant_ms(r.one_per_cpu_ns, r)),
            ("migrations to spread", |r, _| r.migrations_to_spread as f64),
            ("failed balances to spread", |r, _| r.failed_to_spread as f64),
            ("failed balances (run)", |r, _| r.failed_balances as f64),
        ],
    }
}

/// A spread instant of run `r` (ms). One never reached counts as the whole run
/// (docs/seed-experiment.md's one definition; its migrations are all the run's, as
/// [`RunReport`] counts them); a run that did not take all its events has no such length,
/// and the instant is not a number ("never" in the table).
fn instant_ms(at: Option<u64>, r: &RunReport) -> f64 {
    match at {
        Some(ns) => ns as f64 / 1e6,
        None if r.events_exactly_once && r.total_ns > 0 => r.total_ns as f64 / 1e6,
        None => f64::NAN,
    }
}

impl AbTable {
    /// The seed-style table: per figure the median and [min–max] over iterations on each
    /// side, and the p-value.
    pub fn render(&self) -> String {
        // The name column fits the longest name (27 at least, the seed tables' width).
        let w = self.rows.iter().map(|r| r.name.chars().count()).max().unwrap_or(0).max(27);
        let mut s = format!("{:<w$} {:>26} {:>26} {:>9}\n", "", self.a_label, self.b_label, "p (M-W U)");
        for r in &self.rows {
            s.push_str(&format!(
                "{:<w$} {:>26} {:>26} {:>9.4}\n",
                r.name,
                summary(&r.a),
                summary(&r.b),
                r.p_value
            ));
        }
        s.push_str(&format!("({} iterations per side; median [min–max])\n", self.iterations));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_never_reached_counts_as_the_whole_run() {
        let reached = RunReport { spread_ns: Some(2_000_000), total_ns: 9_000_000, ..Default::default() };
        assert_eq!(instant_ms(reached.spread_ns, &reached), 2.0);
        let never = RunReport {
            spread_ns: None,
            total_ns: 9_000_000,
            events_exactly_once: true,
            ..Default::default()
        };
        assert_eq!(instant_ms(never.spread_ns, &never), 9.0, "censored at the run's end");
        let unfinished = RunReport { spread_ns: None, total_ns: 9_000_000, ..Default::default() };
        assert!(instant_ms(unfinished.spread_ns, &unfinished).is_nan(), "no length: never");
        assert_eq!(summary(&[instant_ms(None, &unfinished)]), "never");
    }
}
