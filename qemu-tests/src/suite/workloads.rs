//! The workload files (`workloads/*.json`) in the suite: each run once by the kernel
//! (deterministic mode, `scenario=program`) and once by the simulator, both judged by the
//! same rt-app figures with margins.

use std::path::Path;

use sched_sim::experiments::{run_once, Workload};
use sched_sim::machine::{Config, TopologyKind};
use sched_workload::figures::TaskFigures;
use sched_workload::Program;

use super::SUITE_LIMIT;
use crate::qemu::{self, Machine, Mode};
use crate::workload::{figures, load};

/// One workload file's case.
pub(crate) struct WorkloadCase {
    /// The file, from the workspace root.
    pub(crate) file: &'static str,
    /// What it shows.
    pub(crate) name: &'static str,
    /// Boot words besides `scenario=program` (the machine's shape).
    pub(crate) boot: &'static str,
    /// The simulator's topology for the same shape.
    pub(crate) topology: &'static str,
    /// What its figures must show, on either platform.
    pub(crate) judge: fn(&[TaskFigures]) -> Result<(), String>,
}

/// The figures of the task named `name`.
fn task<'a>(f: &'a [TaskFigures], name: &str) -> Result<&'a TaskFigures, String> {
    f.iter().find(|t| t.name == name).ok_or_else(|| format!("no figures for task {name}"))
}

/// `what` is within `lo..=hi`.
fn within(what: &str, v: f64, lo: f64, hi: f64) -> Result<(), String> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(format!("{what} = {v:.3}, outside {lo}..={hi}"))
    }
}

/// Every workload file with its judge. Margins: what an idle-enough 8-CPU machine must give
/// (the kernel's measured figures sit well inside; see `cargo xboot --workload FILE`).
pub(crate) const WORKLOAD_CASES: &[WorkloadCase] = &[
    WorkloadCase {
        file: "workloads/periodic.json",
        name: "rt-app's periodic set: every activation on time, shares as the utilisations",
        boot: "",
        topology: "flat",
        judge: |f| {
            let (light, heavy) = (task(f, "light")?, task(f, "heavy")?);
            // 6 threads × 200 periods of 10 ms, and 2 × 125 of 16 ms after a 3 ms delay.
            within("light activations", light.activations as f64, 1150.0, 1200.0)?;
            within("heavy activations", heavy.activations as f64, 240.0, 250.0)?;
            within("light timer misses", light.misses as f64, 0.0, 0.0)?;
            within("heavy timer misses", heavy.misses as f64, 0.0, 0.0)?;
            within("light CPU share (%)", light.cpu_share_pct, 13.5, 16.5)?;
            within("heavy CPU share (%)", heavy.cpu_share_pct, 8.5, 11.5)
        },
    },
    WorkloadCase {
        file: "workloads/schbench.json",
        name: "schbench's shape: workers woken by a message thread run soon after",
        boot: "",
        topology: "flat",
        judge: |f| {
            let (msg, worker) = (task(f, "message")?, task(f, "worker")?);
            within("worker activations", worker.activations as f64, 4000.0, 6100.0)?;
            within("worker wake-to-run p50 (µs)", worker.wake_us.p50, 0.0, 1000.0)?;
            within(
                "message timer misses (%)",
                100.0 * msg.misses as f64 / msg.activations.max(1) as f64,
                0.0,
                5.0,
            )
        },
    },
    WorkloadCase {
        file: "workloads/hackbench.json",
        name: "hackbench's shape: each pair wakes the other in turn",
        boot: "",
        topology: "flat",
        judge: |f| {
            // A round trip is ping's 50 µs run and pong's, one after the other: at most
            // 2 s / 100 µs = 20 000 activations a side. A run is its 50 µs of work at least,
            // and at most 5× that: the 4 pairs' runs share one instruction clock in
            // deterministic mode (4×), and a tick may cut into one.
            for k in 0..4 {
                let (ping, pong) = (task(f, &format!("ping{k}"))?, task(f, &format!("pong{k}"))?);
                within(&format!("ping{k} activations"), ping.activations as f64, 3000.0, 20_000.0)?;
                let gap = ping.activations.abs_diff(pong.activations) as f64;
                within(&format!("pair {k}: activations apart"), gap, 0.0, 2.0)?;
                within(&format!("ping{k} run time mean (µs)"), ping.run_us.mean, 50.0, 250.0)?;
            }
            Ok(())
        },
    },
    WorkloadCase {
        file: "workloads/sysbench.json",
        name: "the seed's sysbench: 8 workers forked one by one share 1000 events, every CPU busy",
        boot: "",
        topology: "flat",
        judge: |f| {
            let w = task(f, "worker")?;
            // 8 set-up phases and the pool's 1000 events.
            within("worker activations", w.activations as f64, 1008.0, 1008.0)?;
            within("worker CPU share (%)", w.cpu_share_pct, 85.0, 100.0)
        },
    },
    WorkloadCase {
        file: "workloads/latency.json",
        name: "the latency workload: periodic tasks among spinners, half with a short slice",
        boot: "",
        topology: "flat",
        judge: |f| {
            let (spin, short, default) = (task(f, "spinner")?, task(f, "short")?, task(f, "default")?);
            // At most 400 periods of 5 ms each for 4 threads in 2 s; every CPU busy.
            for t in [short, default] {
                within(&format!("{} activations", t.name), t.activations as f64, 400.0, 1600.0)?;
                within(&format!("{} wake-to-run p50 (µs)", t.name), t.wake_us.p50, 0.0, 5000.0)?;
            }
            within("spinners' CPU share (%)", spin.cpu_share_pct, 60.0, 95.0)?;
            let all = spin.cpu_share_pct + short.cpu_share_pct + default.cpu_share_pct;
            within("the machine's CPU share (%)", all, 95.0, 100.5)
        },
    },
    WorkloadCase {
        file: "workloads/ramp.json",
        name: "a utilisation ramp on big.LITTLE: every period kept, the misfit moved up",
        boot: "clusters=4 capacity=446*4,1024*4",
        topology: "biglittle:446",
        judge: |f| {
            let (ramp, little) = (task(f, "ramp")?, task(f, "little")?);
            within("ramp activations", ramp.activations as f64, 500.0, 500.0)?;
            within("little activations", little.activations as f64, 1600.0, 1600.0)?;
            within("ramp timer misses (%)", 100.0 * ramp.misses as f64 / 500.0, 0.0, 5.0)?;
            // At 90 % of a big CPU the ramp's threads are misfits on the LITTLE ones (CPUs
            // 0-3, capacity 446): their last phase must end on big CPUs only.
            if ramp.last_phase_cpus == 0 || ramp.last_phase_cpus & 0x0f != 0 {
                return Err(format!(
                    "the ramp's last phase ended on CPUs {:#010b}, not only on big ones",
                    ramp.last_phase_cpus
                ));
            }
            Ok(())
        },
    },
];

/// Runs every workload case on the kernel of `m` (deterministic) and in the simulator, then
/// the program fuzz. Returns (passed, failed), one result per platform per file and one for
/// the fuzz.
pub(crate) fn run(m: &Machine) -> (u64, u64) {
    let (mut passed, mut failed) = program_fuzz(m);
    let root = qemu::root();
    // Each file's kernel boot (deterministic) and simulator run, files side by side.
    crate::pool::in_order(
        Mode::Deterministic,
        WORKLOAD_CASES.len(),
        |i| {
            let c = &WORKLOAD_CASES[i];
            [on_kernel(m, &root.join(c.file), c), in_simulator(&root.join(c.file), c, m.cpus)]
        },
        |i, verdicts| {
            let c = &WORKLOAD_CASES[i];
            for (platform, verdict) in ["kernel", "simulator"].into_iter().zip(verdicts) {
                eprint!(
                    "xtest: qemu {} workload [{}/{}] {} ({}: {platform}) ... ",
                    m.arch.name(),
                    i + 1,
                    WORKLOAD_CASES.len(),
                    c.name,
                    c.file
                );
                match verdict {
                    Ok(()) => {
                        passed += 1;
                        eprintln!("ok");
                    }
                    Err(why) => {
                        failed += 1;
                        eprintln!("FAILED: {why}");
                    }
                }
            }
        },
    );
    (passed, failed)
}

fn on_kernel(m: &Machine, file: &Path, c: &WorkloadCase) -> Result<(), String> {
    let loaded = load(file, m.arch).map_err(|(_, why)| why)?;
    let m = Machine { program: Some(loaded.file.path()), ..m.clone() };
    let b = qemu::boot(&m, format!("scenario=program {}", c.boot), Mode::Deterministic, SUITE_LIMIT);
    if b.code != Some(0) {
        return Err(format!("exit {:?}{}", b.code, if b.timed_out { " (timed out)" } else { "" }));
    }
    let r = figures(&b, &loaded.def, m.cpus).ok_or("no program figures in the log")?;
    (c.judge)(&r.tasks)
}

fn in_simulator(file: &Path, c: &WorkloadCase, cpus: usize) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let def = sched_workload::rtapp::lower(&text).map_err(|e| e.to_string())?;
    let topology = TopologyKind::parse(c.topology).ok_or("a topology the simulator knows")?;
    let cfg = Config { cpus, topology, ..Config::octo(1) };
    let r = run_once(&cfg, &Workload::program(c.file, &def));
    (c.judge)(&r.tasks)
}

/// Damaged programs reaching the kernel (`scenario=program`): each one the host refuses must
/// be refused by the kernel too, in one line and exit 6, never a panic or a hang. The
/// damage: a random word (behind a resealed checksum or not), a length past the window, no
/// program at all.
fn program_fuzz(m: &Machine) -> (u64, u64) {
    const CASES: usize = 12;
    let json = r#"{"global": {"calibration": 100}, "tasks": {"t": {"instance": 2, "loop": 3,
        "phases": {"p": {"runtime": 100, "lock": "m", "unlock": "m", "timer": {"ref": "unique", "period": 500}}}}}}"#;
    let Ok(def) = sched_workload::rtapp::lower(json) else { return (0, 1) };
    let base = def.encode();
    let mut programs: Vec<Option<Vec<u32>>> = vec![None];
    let mut x: u64 = 0x5eed_0bad;
    let mut next = |n: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let mut long = base.clone();
    long[2] = u32::MAX;
    programs.push(Some(long));
    while programs.len() < CASES {
        let mut w = base.clone();
        let i = next(w.len() as u64) as usize;
        w[i] = match next(3) {
            0 => next(1 << 32) as u32,
            1 => w[i].wrapping_add(1),
            _ => u32::MAX,
        };
        if next(2) == 0 {
            sched_workload::seal(&mut w);
        }
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        if Program::parse(&bytes).is_err() {
            programs.push(Some(w));
        }
    }
    eprint!(
        "xtest: qemu {} program fuzz: {} damaged programs (and none at all), each refused with exit {} ... ",
        m.arch.name(),
        programs.len() - 1,
        super::judges::EXIT_BAD_PROGRAM
    );
    let boot = |i: usize| -> Result<qemu::Boot, String> {
        let file = programs[i].as_ref().map(|w| {
            let f = std::env::temp_dir().join(format!(
                "fairsched-fuzz-{}-{}.bin",
                std::process::id(),
                qemu::unique()
            ));
            let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(&f, bytes).map(|_| f)
        });
        let file = file.transpose().map_err(|e| e.to_string())?;
        let m = Machine { program: file.clone(), ..m.clone() };
        let b = qemu::boot(&m, "scenario=program", Mode::Deterministic, std::time::Duration::from_secs(30));
        if let Some(f) = file {
            let _ = std::fs::remove_file(f);
        }
        Ok(b)
    };
    let mut bad = Vec::new();
    crate::pool::in_order(Mode::Deterministic, programs.len(), boot, |i, b| match b {
        Ok(b) => {
            let refused = b.lines.iter().any(|l| l.contains("workload program is refused"));
            if b.timed_out || b.code != Some(super::judges::EXIT_BAD_PROGRAM) || !refused {
                bad.push(format!(
                    "program {i}: exit {:?}, timed out {}, refusal line {refused}",
                    b.code, b.timed_out
                ));
            }
        }
        Err(e) => bad.push(format!("program {i}: {e}")),
    });
    if bad.is_empty() {
        eprintln!("ok");
        (1, 0)
    } else {
        eprintln!("FAILED: {}", bad.join("; "));
        (0, 1)
    }
}
