//! `cargo xreport --linux`: Linux beside the kernel and the simulator, each experiment's
//! Linux table and realism table from `cargo xrun --linux`. Taken on purpose and stamped:
//! the figures are deterministic for one Debian kernel, but the archive serves a newer 6.1
//! build from time to time, so `cargo xtest` does not check them; `cargo xreport` without
//! `--linux` keeps the file's last ones.

/// The experiments: (what, `cargo xrun` arguments).
pub const RUNS: &[(&str, &[&str])] = &[
    ("The seed's experiment: 8 vCPUs, 2x4 clusters, 8 threads (15 runs)", &["--linux"]),
    (
        "The seed's experiment, idle CPUs ticking (Linux: nohz=off skew_tick=1; 15 runs)",
        &["--linux", "--ticking"],
    ),
    ("8 vCPUs, flat, 12 threads (15 runs)", &["--linux", "--topology", "flat", "--threads", "12"]),
    ("16 vCPUs, flat, 8 threads (15 runs)", &["--linux", "--vcpus", "16", "--topology", "flat"]),
    (
        "workloads/periodic.json (5 runs)",
        &["--linux", "--workload", "workloads/periodic.json", "--iterations", "5"],
    ),
    (
        "workloads/schbench.json (5 runs)",
        &["--linux", "--workload", "workloads/schbench.json", "--iterations", "5"],
    ),
    (
        "workloads/hackbench.json (5 runs)",
        &["--linux", "--workload", "workloads/hackbench.json", "--iterations", "5"],
    ),
    ("workloads/ramp.json (5 runs)", &["--linux", "--workload", "workloads/ramp.json", "--iterations", "5"]),
    (
        "workloads/latency.json, CFS (A) and EEVDF (B) (5 runs)",
        &["--linux", "--workload", "workloads/latency.json", "--iterations", "5", "--a", "", "--b", "EEVDF"],
    ),
];

/// The lines of `text` from the first starting with `first` to the next blank line.
fn block(text: &str, first: &str) -> Result<String, String> {
    let mut out = String::new();
    for l in text.lines().skip_while(|l| !l.starts_with(first)) {
        if l.trim().is_empty() {
            break;
        }
        out.push_str(l);
        out.push('\n');
    }
    if out.is_empty() {
        Err(format!("`cargo xrun --linux` printed no block starting {first:?}"))
    } else {
        Ok(out)
    }
}

/// Runs every experiment and returns the section's body: the stamp, then per experiment
/// Linux's table and the realism table.
pub fn section() -> Result<String, String> {
    let mut body = String::new();
    let mut release = String::from("unknown");
    for &(what, args) in RUNS {
        eprintln!("xreport: cargo xrun {}", args.join(" "));
        let text = super::xrun_with(args)?;
        let linux = block(&text, "Linux ")?;
        if let Some(r) = linux.split_whitespace().nth(1) {
            release = r.to_string();
        }
        body += &format!("### {what}\n\n```text\n{linux}\n{}```\n\n", block(&text, "Realism:")?);
    }
    let date = today();
    let commit = super::git(&["describe", "--always", "--dirty", "--abbrev=12"]).unwrap_or_default();
    Ok(format!(
        "Taken on {date} with Debian's Linux {release} at commit `{commit}`, QEMU in \
         deterministic mode, `cargo xrun` otherwise at its defaults (aarch64 `virt`, HZ 250 for \
         the kernel and the simulator, Linux at its own HZ 250).\n\n{body}"
    ))
}

/// The task groups beside Linux: `cargo xrun --groups --linux` (4 s per case, as the suite's
/// Linux case), stamped as [`section`] is.
pub fn groups() -> Result<String, String> {
    let args = ["--groups", "--linux", "--seconds", "4"];
    eprintln!("xreport: cargo xrun {}", args.join(" "));
    let text = super::xrun_with(&args)?;
    let table = block(&text, "Task groups:")?;
    let commit = super::git(&["describe", "--always", "--dirty", "--abbrev=12"]).unwrap_or_default();
    Ok(format!(
        "Taken on {} at commit `{commit}`.

```text
{table}```
",
        today()
    ))
}

/// Today's date (UTC), as the stamps give it.
fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Linux's median spread time (ms) in the first experiment of the section `text` (the file's),
/// as printed.
pub fn spread_median(text: &str) -> Option<&str> {
    let row = text.lines().find(|l| l.starts_with("spread time (ms)"))?;
    row["spread time (ms)".len()..].split_whitespace().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_end_at_a_blank_line_and_the_spread_is_read() {
        let text = "x\nLinux 6.1.0-57-arm64 (Debian)\nspread time (ms)    89.402 [46.3–94.2]\n\nRealism: r\na 1.00\n\ntrace";
        let l = block(text, "Linux ").unwrap();
        assert_eq!(l.lines().count(), 2);
        assert_eq!(block(text, "Realism:").unwrap(), "Realism: r\na 1.00\n");
        assert_eq!(spread_median(&l), Some("89.402"));
        assert!(block(text, "Nothing").is_err());
    }
}
