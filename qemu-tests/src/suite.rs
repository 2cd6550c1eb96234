//! The QEMU suite: one boot per scenario, judged on the kernel's exit code and its decoded
//! report. Timing is asserted only in deterministic mode; parallel mode hunts races.

use std::time::Duration;

use crate::qemu::{self, Boot, Mode};

struct Case {
    name: &'static str,
    args: &'static str,
    mode: Mode,
    judge: fn(&Boot) -> Result<(), String>,
}

fn exit_is(b: &Boot, code: i32) -> Result<(), String> {
    if b.timed_out {
        return Err("timed out".into());
    }
    match b.code {
        Some(c) if c == code => Ok(()),
        c => Err(format!("exit code {c:?}, expected {code}")),
    }
}

fn has(b: &Boot, needle: &str) -> Result<(), String> {
    b.line(needle).map(|_| ()).ok_or_else(|| format!("no line containing {needle:?}"))
}

fn sysbench_ok(b: &Boot) -> Result<(), String> {
    exit_is(b, 0)?;
    let l = b.line("exactly-once check").ok_or("no exactly-once check line")?;
    if !l.ends_with("OK") {
        return Err(format!("exactly-once check failed: {l}"));
    }
    has(b, "scheduler invariants hold")
}

// Parallel-mode cases give the kernel's watchdog 10 s of guest time (watchdog=2500 ticks): 8
// vCPU threads share this host's 2 cores, and a descheduled vCPU must not pass for a hung one.
// The per-case time limit still catches a real hang.
/// Margins are ratios within one run. CPU time per thread at steady state, max/min ≤ 1.10:
/// measured 1.024 (16 spinners) and 1.032 (24); each thread gets ≈ 240–360 ms of CPU in the
/// window, and a slice of a few ms plus the odd migration is the expected error, so 1.10 is
/// about three times the measured spread. Runqueue lengths at half-way differ by at most 1
/// (the issue's bound; measured 0).
fn fair_shares(b: &Boot) -> Result<(), String> {
    sysbench_ok(b)?;
    // Judged at steady state (half-way to the first thread's end): the start-up transient,
    // where fork placement stacks threads until the balancer spreads them (spec §5), is
    // reported over the whole run but is not what fair shares mean.
    let ratio = b.number_after("steady max/min x1000 =").ok_or("no steady-state CPU time line")?;
    if ratio > 1100.0 {
        return Err(format!("CPU time per thread at steady state max/min = {:.3} > 1.10", ratio / 1000.0));
    }
    let spread = b.number_after("max-min =").ok_or("no runqueue line")?;
    if spread > 1.0 {
        return Err(format!("runqueue lengths at half-way differ by {spread}"));
    }
    Ok(())
}

const CASES: &[Case] = &[
    Case {
        name: "boot: 8 CPUs online, ticking, SGIs both ways",
        args: "scenario=boot",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "boot: OK (8 CPUs")
        },
    },
    Case {
        name: "boot (parallel)",
        args: "scenario=boot watchdog=2500",
        mode: Mode::Parallel,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "boot: OK (8 CPUs")
        },
    },
    Case {
        name: "spread: 8 spinners end up one per CPU, spread time recorded",
        args: "scenario=sysbench threads=8 events=1000 seed=1",
        mode: Mode::Deterministic,
        judge: |b| {
            sysbench_ok(b)?;
            has(b, "spread time")
        },
    },
    Case {
        name: "sysbench-like on the 2x4 octo core, rule off",
        args:
            "scenario=sysbench threads=8 events=1000 clusters=4 seed=1 features=NO_UTIL_PULL_SKIPS_LONE_TASK",
        mode: Mode::Deterministic,
        // Pre-patch, the last CPU may get no spinner before the events run out: the report
        // says either "spread time ..." or "spread never reached".
        judge: |b| {
            sysbench_ok(b)?;
            has(b, "sysbench: spread")
        },
    },
    Case {
        name: "sysbench-like (parallel)",
        args: "scenario=sysbench threads=8 events=1000 watchdog=2500",
        mode: Mode::Parallel,
        judge: sysbench_ok,
    },
    Case {
        name: "oversubscription: 24 spinners, every event once",
        args: "scenario=sysbench threads=24 events=3000 watchdog=2500",
        mode: Mode::Parallel,
        judge: sysbench_ok,
    },
    // 12000 events last 1.45 s of guest time: several busy balance intervals (8 ms x 32), so
    // the half-way sample is taken at steady state (a 3000-event run ends before it).
    Case {
        name: "oversubscription: 16 spinners get fair shares, runqueues within 1 at steady state",
        args: "scenario=sysbench threads=16 events=12000",
        mode: Mode::Deterministic,
        judge: fair_shares,
    },
    Case {
        name: "oversubscription: 24 spinners get fair shares, runqueues within 1 at steady state",
        args: "scenario=sysbench threads=24 events=12000",
        mode: Mode::Deterministic,
        judge: fair_shares,
    },
    Case {
        name: "tickless idle with nohz kicks",
        args: "scenario=sysbench threads=8 events=1000 nohz=on",
        mode: Mode::Deterministic,
        judge: |b| {
            sysbench_ok(b)?;
            // Every CPU ended up running one spinner although idle CPUs only balance when kicked.
            has(b, "spread time")
        },
    },
    Case {
        name: "sleep/wake ping-pong: no lost wakeups, wakees placed on idle CPUs",
        args: "scenario=pingpong pairs=4 rounds=1000",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "pingpong: OK")?;
            // 8 threads, at most 4 runnable, on 8 CPUs: the wakeup fast path (wake_affine,
            // select_idle_sibling) must find every wakee an idle CPU, its previous one,
            // without moving it (measured: 7997 of 7997, 0 moved). Of the 8000 unparks a few
            // find the partner not parked yet and leave a token instead of waking it.
            let line = b.line("wakee placement:").ok_or("no wakee placement line")?;
            let nums: Vec<u64> =
                line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            let [.., wakeups, idle, moved] = nums[..] else { return Err(format!("bad line: {line}")) };
            if wakeups < 7900 {
                return Err(format!("only {wakeups} wakeups of 8000 unparks"));
            }
            if idle != wakeups || moved != 0 {
                return Err(format!("{wakeups} wakeups: {idle} onto an idle CPU, {moved} moved"));
            }
            Ok(())
        },
    },
    Case {
        name: "sleep/wake ping-pong (parallel)",
        args: "scenario=pingpong pairs=12 rounds=2000 watchdog=2500",
        mode: Mode::Parallel,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "pingpong: OK")
        },
    },
    Case {
        name: "spread from one CPU: 8 spinners woken on CPU 0 end one per CPU",
        args: "scenario=wakeone threads=8 events=1000 nohz=on",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "spread time")?;
            has(b, "wakeone: OK")
        },
    },
    Case {
        name: "affinity: pinned threads never leave their CPUs, the rest spread",
        args: "scenario=affinity",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "affinity: OK")
        },
    },
    Case {
        name: "affinity (parallel)",
        args: "scenario=affinity watchdog=2500",
        mode: Mode::Parallel,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "affinity: OK")
        },
    },
    Case {
        // Tickless: idle CPUs are balanced only through nohz kicks, and a CPU that is the
        // only tickless one must keep being kicked (it once idled for a whole run).
        name: "affinity, tickless idle (parallel)",
        args: "scenario=affinity nohz=on watchdog=2500",
        mode: Mode::Parallel,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "affinity: OK")
        },
    },
    Case {
        name: "nice: two nice levels share one CPU in the weight ratio",
        args: "scenario=nice",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "nice: OK")
        },
    },
    Case {
        name: "churn: 10000 spawn/exit/park/wake/yield operations, nothing lost",
        args: "scenario=churn ops=10000 seed=1 watchdog=2500",
        mode: Mode::Parallel,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "churn: OK")
        },
    },
    Case {
        name: "churn (deterministic)",
        args: "scenario=churn ops=10000 seed=2",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "churn: OK")
        },
    },
    Case {
        name: "a hung CPU is caught by the watchdog",
        args: "scenario=hang cpu=3",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 5)?;
            has(b, "watchdog: CPU 3 hung")
        },
    },
    Case {
        name: "switch tracing logs every context switch on every CPU",
        args: "scenario=sysbench threads=8 events=500 trace=on",
        mode: Mode::Deterministic,
        judge: |b| {
            sysbench_ok(b)?;
            let cpus: std::collections::BTreeSet<&str> = b
                .lines
                .iter()
                .filter_map(|l| l.split("trace: switch cpu=").nth(1)?.split_whitespace().next())
                .collect();
            if cpus.len() == 8 {
                Ok(())
            } else {
                Err(format!("switches traced on {} CPUs, want 8", cpus.len()))
            }
        },
    },
    Case {
        name: "panic on CPU 5 is reported and fails the run",
        args: "scenario=panic cpu=5",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 101)?;
            has(b, "PANIC on CPU 5")
        },
    },
    Case {
        name: "a bad boot parameter is one clear error and a distinct exit code",
        args: "scenario=sysbench threads=0",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 3)?;
            has(b, r#"error: bad argument "threads=0""#)
        },
    },
];

/// Runs the suite. Returns (passed, failed).
pub fn run() -> (u64, u64) {
    let (qemu_bin, elf) = match qemu::prepare() {
        Ok(p) => p,
        Err(line) => {
            eprintln!("xtest: {line}");
            return (0, 1);
        }
    };
    let (mut passed, mut failed) = (0, 0);
    for (i, c) in CASES.iter().enumerate() {
        eprint!("xtest: qemu [{}/{}] {} ({}) ... ", i + 1, CASES.len(), c.name, c.mode.name());
        let b = qemu::boot(&qemu_bin, &elf, c.args, c.mode, Duration::from_secs(60));
        match (c.judge)(&b) {
            Ok(()) => {
                passed += 1;
                eprintln!("ok ({:.1} s)", b.wall.as_secs_f64());
            }
            Err(why) => {
                failed += 1;
                eprintln!("FAILED: {why}");
                eprintln!("  command line: {}", c.args);
                for l in b.lines.iter().filter(|l| l.contains("PANIC") || l.contains("error")).take(5) {
                    eprintln!("  {l}");
                }
                eprintln!("  last log lines:");
                for l in b.lines.iter().rev().take(12).collect::<Vec<_>>().into_iter().rev() {
                    eprintln!("    {l}");
                }
            }
        }
    }
    (passed, failed)
}
