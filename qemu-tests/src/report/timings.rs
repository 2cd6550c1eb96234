//! `cargo xreport --timings`: the benchmarks' figures, taken on purpose and stamped with the
//! date, host and commit. They depend on the host and its load, so `cargo xtest` does not
//! check them; `cargo xreport` without `--timings` keeps the file's last ones.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use crate::qemu;

/// Criterion's settings for every benchmark here.
const CRITERION: [&str; 4] = ["--warm-up-time", "1", "--measurement-time", "2"];

/// The benchmarks run once: (package, bench targets). The peer bench runs apart, [`PEER_RUNS`]
/// times.
const BENCHES: [(&str, &[&str]); 2] =
    [("sched-testkit", &["fair", "balance", "placement"]), ("sched-sim", &["speed"])];

/// The queued-task counts of the fair-class bench, and the CPU counts of the others.
const QUEUED: [usize; 4] = [1, 16, 256, 1024];
const CPUS: [usize; 4] = [8, 64, 256, 1024];

/// The simulator bench's ticks per CPU in its 100 ms of simulated time (HZ 250).
const SIM_TICKS_PER_CPU: f64 = 25.0;

/// Runs the benchmarks and returns the section's body.
pub fn section() -> Result<String, String> {
    let home = qemu::root().join("target/xreport-criterion");
    let _ = std::fs::remove_dir_all(&home);
    for (package, benches) in BENCHES {
        eprintln!("xreport: cargo bench -p {package} (about a minute per bench target)");
        bench_run(package, benches, &CRITERION, &home)?;
    }
    let medians = medians(&home)?;
    let ns = |id: &str| medians.get(id).copied().ok_or_else(|| format!("no benchmark {id:?} ran"));
    Ok(stamp() + &fair(&ns)? + &peer()? + &balance(&ns)? + &simulator(&ns)?)
}

/// Runs of the peer bench, in one loop; its criterion settings.
const PEER_RUNS: usize = 5;
const PEER_CRITERION: [&str; 4] = ["--warm-up-time", "1", "--measurement-time", "3"];
/// The queued-task counts of the peer bench.
const PEER_QUEUED: [usize; 3] = [16, 256, 1024];

/// sched-core beside axsched (`benches/peer.rs`), [`PEER_RUNS`] runs in one loop: each row's
/// medians over the runs and the median and range of the runs' ratios.
fn peer() -> Result<String, String> {
    let mut runs = Vec::new();
    for r in 0..PEER_RUNS {
        let home = qemu::root().join(format!("target/xreport-peer/{r}"));
        let _ = std::fs::remove_dir_all(&home);
        eprintln!("xreport: cargo bench -p sched-testkit --bench peer, run {} of {PEER_RUNS}", r + 1);
        bench_run("sched-testkit", &["peer"], &PEER_CRITERION, &home)?;
        runs.push(medians(&home)?);
    }
    let mut out = format!(
        "\nsched-core beside ArceOS's axsched 0.3.1 `CFScheduler` (`cargo bench -p sched-testkit \
         --bench peer`, criterion `{}`, {PEER_RUNS} runs in one loop): each side's median over the \
         runs (ns), and the median [min–max] of the runs' ratios, axsched's time over sched-core's \
         (above 1: sched-core is faster). axsched's tick only counts; sched-core's updates the \
         clock, the running task's runtime and PELT, and checks preemption.\n\n\
         | operation | queued | axsched | sched-core | ratio |\n|---|---:|---:|---:|---:|\n",
        PEER_CRITERION.join(" ")
    );
    let rows = [
        (
            "enqueue+dequeue of the median task (axsched: remove_task + add_task)",
            "peer_enqueue_dequeue",
            "axsched",
        ),
        (
            "enqueue+dequeue of the median task (axsched: remove_task + put_prev_task)",
            "peer_enqueue_dequeue",
            "axsched-keep",
        ),
        (
            "switch (sched-core: put_prev + pick + set_next; axsched: put_prev_task + pick_next_task)",
            "peer_switch",
            "axsched",
        ),
        ("tick", "peer_tick", "axsched"),
    ];
    for (what, group, id) in rows {
        for n in PEER_QUEUED {
            let get = |run: &HashMap<String, f64>, who: &str| {
                let key = format!("{group}/{who}/{n}");
                run.get(&key).copied().ok_or_else(|| format!("no benchmark {key:?} ran"))
            };
            let (mut a, mut c, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
            for run in &runs {
                let (x, y) = (get(run, id)?, get(run, "sched-core")?);
                a.push(x);
                c.push(y);
                ratio.push(x / y);
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (ma, mc, mr) = (median(&mut a), median(&mut c), median(&mut ratio));
            out.push_str(&format!(
                "| {what} | {n} | {ma:.1} | {mc:.1} | {mr:.2}x [{:.2}–{:.2}] |\n",
                ratio[0],
                ratio[ratio.len() - 1]
            ));
        }
    }
    Ok(out)
}

/// `cargo bench -p package --bench b...` with criterion's `args`, its results under `home`.
fn bench_run(package: &str, benches: &[&str], args: &[&str], home: &Path) -> Result<(), String> {
    let mut cmd = crate::cargo();
    cmd.args(["bench", "--quiet", "-p", package]);
    for b in benches {
        cmd.args(["--bench", b]);
    }
    let out = cmd
        .arg("--")
        .args(args)
        .env("CRITERION_HOME", home)
        .current_dir(qemu::root())
        .output()
        .map_err(|e| format!("cargo bench: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo bench -p {package} {benches:?} failed: {}", last_line(&out.stderr)));
    }
    Ok(())
}

fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).lines().last().unwrap_or("").to_string()
}

/// Every benchmark's median estimate (ns), by criterion's full id (`group/parameter`).
fn medians(home: &Path) -> Result<HashMap<String, f64>, String> {
    let mut out = HashMap::new();
    let mut dirs = vec![home.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.ends_with("new/benchmark.json") {
                let read = |p: &Path| -> Result<serde_json::Value, String> {
                    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
                    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
                };
                let id = read(&path)?["full_id"].as_str().map(str::to_string);
                let median =
                    read(&path.with_file_name("estimates.json"))?["median"]["point_estimate"].as_f64();
                if let (Some(id), Some(median)) = (id, median) {
                    out.insert(id, median);
                }
            }
        }
    }
    Ok(out)
}

/// The line saying when, where and from what the figures were taken.
fn stamp() -> String {
    format!(
        "Taken {}: criterion `{}`, the median estimate of one run. On a shared host these move by \
         up to a third between runs; a comparison takes both builds in turn in one loop.\n\n",
        when_where(),
        CRITERION.join(" ")
    )
}

/// When, on which host and at which commit, as the timing sections say it: the UTC date and
/// time, the host's name, CPU model and cores, and `git describe`.
pub(super) fn when_where() -> String {
    let run = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .current_dir(qemu::root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".into())
    };
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")?.split(':').nth(1).map(str::trim).map(str::to_string)
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{} on `{}` ({model}, {cores} cores) at commit `{}`",
        run("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        run("uname", &["-n"]),
        run("git", &["describe", "--always", "--dirty", "--abbrev=12"])
    )
}

type Lookup<'a> = dyn Fn(&str) -> Result<f64, String> + 'a;

/// The fair class's hot paths on one runqueue, ns, under CFS and EEVDF.
fn fair(ns: &Lookup) -> Result<String, String> {
    let mut out = String::from(
        "The fair class's hot paths on one runqueue (`cargo bench -p sched-testkit --bench fair`), ns:\n\n\
         | operation | policy |",
    );
    for n in QUEUED {
        out.push_str(&format!(" {n} queued |"));
    }
    out.push_str("\n|---|---|");
    out.push_str(&"---:|".repeat(QUEUED.len()));
    out.push('\n');
    let rows: [(&str, &str, &str); 7] = [
        ("enqueue+dequeue of the median task", "CFS", "enqueue_dequeue"),
        ("enqueue+dequeue of the median task", "EEVDF", "eevdf_enqueue_dequeue"),
        ("pick next", "CFS", "pick_next"),
        ("pick next", "EEVDF", "eevdf_pick_next"),
        ("switch (put_prev + pick + set_next)", "CFS", "switch"),
        ("switch (put_prev + pick + set_next)", "EEVDF", "eevdf_switch"),
        ("tick (update_curr + PELT, every period crossed)", "CFS", "tick"),
    ];
    for (what, policy, group) in rows {
        out.push_str(&format!("| {what} | {policy} |"));
        for n in QUEUED {
            out.push_str(&format!(" {:.1} |", ns(&format!("{group}/{n}"))?));
        }
        out.push('\n');
    }
    Ok(out)
}

/// A balance pass, fork and wakeup placement by CPU count, and one nohz idle balance pass.
fn balance(ns: &Lookup) -> Result<String, String> {
    let mut out = String::from(
        "\nBalance and placement on clusters of 8 CPUs, every other CPU busy (`--bench balance`, \
         `--bench placement`), µs:\n\n| operation |",
    );
    for n in CPUS {
        out.push_str(&format!(" {n} CPUs |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(CPUS.len()));
    out.push('\n');
    let rows = [
        ("one top-level balance pass", "balance_pass"),
        ("fork placement (find_idlest_group/cpu from the top domain)", "fork_placement"),
        ("wakeup placement (wake_affine + select_idle_sibling in the LLC)", "wakeup_placement"),
    ];
    for (what, group) in rows {
        out.push_str(&format!("| {what} |"));
        for n in CPUS {
            out.push_str(&format!(" {:.3} |", ns(&format!("{group}/{n}"))? / 1000.0));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "\nOne nohz idle balance pass on behalf of 63 tickless idle CPUs of a 64-CPU machine: \
         {:.1} µs.\n",
        ns("nohz_idle_balance/64 cpus")? / 1000.0
    ));
    Ok(out)
}

/// The simulator's speed: 100 ms of simulated time on C CPUs, each running 4 spinners.
fn simulator(ns: &Lookup) -> Result<String, String> {
    let mut out = String::from(
        "\nThe simulator, 100 ms simulated on C CPUs with 4 spinners each, HZ 250 \
         (`cargo bench -p sched-sim --bench speed`):\n\n| CPUs |",
    );
    for n in CPUS {
        out.push_str(&format!(" {n} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(CPUS.len()));
    out.push_str("\n| time per 100 ms simulated (µs) |");
    let times: Vec<f64> = CPUS.iter().map(|n| ns(&format!("sim_100ms/{n}"))).collect::<Result<_, _>>()?;
    for t in &times {
        out.push_str(&format!(" {:.1} |", t / 1000.0));
    }
    out.push_str("\n| CPU-ticks per second (millions) |");
    for (n, t) in CPUS.iter().zip(&times) {
        out.push_str(&format!(" {:.2} |", *n as f64 * SIM_TICKS_PER_CPU / t * 1000.0));
    }
    out.push('\n');
    Ok(out)
}
