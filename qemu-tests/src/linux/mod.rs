//! Real Linux beside the kernel: Debian's arm64 kernel booted on the same QEMU machine (the
//! same board, vCPUs, clusters, NUMA nodes and mode) with an initramfs holding busybox,
//! sysbench and rt-app, running the same workload with ftrace's sched events on. The trace is
//! read back from the console and measured with the same definitions as the kernel's report
//! (`ftrace.rs`, `measure.rs`).
//!
//! Only aarch64 `virt` runs it: Debian's arm64 kernel is the one real Linux these boards share
//! with the project's kernel that needs no build here.

mod fetch;
mod ftrace;
mod initramfs;
pub mod measure;
pub mod rtapp;

use std::time::Duration;

use crate::qemu::{self, Arch, Machine, Mode};

pub use fetch::Parts;

/// What the guest runs, `runs` times in one boot.
pub enum Job<'a> {
    /// `sysbench cpu --threads --events --time=0 --percentile=0` (no latency histogram to
    /// fault in: its pages would be counted as the workers' work).
    Sysbench { threads: u32, events: u32 },
    /// `rt-app FILE` with the JSON given (already in the subset Debian's rt-app 1.0 reads).
    RtApp { name: &'a str, json: &'a [u8] },
}

/// One run of the job inside the boot: its output, its rt-app logs and its ftrace lines.
#[derive(Debug, Default, Clone)]
pub struct Run {
    /// The program's own output (sysbench's report; rt-app's last lines).
    pub output: Vec<String>,
    /// rt-app's per-thread logs: (file name, lines).
    pub logs: Vec<(String, Vec<String>)>,
    /// The trace, one event a line.
    pub trace: Vec<String>,
    /// The program's exit status.
    pub status: Option<i32>,
}

/// What one boot of the guest printed.
#[derive(Debug, Default, Clone)]
pub struct Console {
    /// `uname -r`.
    pub release: String,
    /// The sched domains Linux built: (`cpuN/domainK`, name, flags), CPU 0's first.
    pub domains: Vec<(String, String, String)>,
    /// The runs in order.
    pub runs: Vec<Run>,
    /// Whether init finished every run.
    pub done: bool,
    /// The last lines of the console (for a failure's report).
    pub tail: Vec<String>,
}

impl Console {
    /// CPU 0's domains as one line: `DIE (SD_BALANCE_NEWIDLE ...)`, levels joined by ` > `.
    pub fn domain_line(&self) -> String {
        let levels: Vec<String> = self
            .domains
            .iter()
            .filter(|(at, _, _)| at.starts_with("cpu0/"))
            .map(|(_, name, flags)| format!("{name} ({})", flags.trim()))
            .collect();
        if levels.is_empty() {
            "no sched domain (one CPU)".into()
        } else {
            levels.join(" > ")
        }
    }
}

/// The guest: Debian's parts and the QEMU to run them.
pub struct Guest {
    parts: Parts,
}

/// Why Linux cannot run a machine, in one line; `None` if it can.
pub fn refuses(arch: Arch) -> Option<String> {
    (arch != Arch::Aarch64).then(|| {
        format!(
            "--linux: Linux runs beside the kernel on aarch64 virt only (Debian's arm64 kernel); not on {}",
            arch.name()
        )
    })
}

impl Guest {
    /// The guest's parts, fetched once under `target/linux/`. `Err` is one line.
    pub fn prepare() -> Result<Guest, String> {
        Ok(Guest { parts: fetch::parts()? })
    }

    /// The kernel's release (`6.1.0-NN-arm64`).
    pub fn version(&self) -> &str {
        &self.parts.version
    }

    /// Boots Linux on machine `m` (its board, vCPUs, clusters and nodes) in `mode`, runs `job`
    /// `runs` times and returns what the console showed. `Err` is one line.
    pub fn boot(
        &self,
        m: &Machine,
        mode: Mode,
        job: &Job,
        runs: u32,
        limit: Duration,
    ) -> Result<Console, String> {
        if let Some(why) = refuses(m.arch) {
            return Err(why);
        }
        let mut extra = Vec::new();
        let mut words = format!("console=ttyAMA0 quiet fairsched.runs={runs}");
        match job {
            Job::Sysbench { threads, events } => {
                words +=
                    &format!(" fairsched.job=sysbench fairsched.threads={threads} fairsched.events={events}");
            }
            Job::RtApp { name, json } => {
                words += &format!(" fairsched.job=rtapp fairsched.file={name}");
                extra.push((format!("workloads/{name}"), json.to_vec()));
            }
        }
        let image = initramfs::build(&self.parts.tree, &extra)?;
        let dir = qemu::root().join("target").join("linux");
        let initrd = dir.join(format!("initramfs-{}-{}.cpio.gz", std::process::id(), qemu::unique()));
        let log = dir.join(format!("console-{}-{}.txt", std::process::id(), qemu::unique()));
        std::fs::write(&initrd, image).map_err(|e| format!("{}: {e}", initrd.display()))?;
        let mut cmd = qemu::machine_command(m, mode);
        if mode == Mode::Deterministic {
            // With a fixed RTC on the VM clock and a fixed seed, two boots print the same bytes.
            cmd.args(["-rtc", "base=2024-01-01T00:00:00,clock=vm", "-seed", "1"]);
        }
        cmd.arg("-serial").arg(format!("file:{}", log.display()));
        cmd.arg("-kernel").arg(&self.parts.kernel).arg("-initrd").arg(&initrd).arg("-append").arg(&words);
        let (_, timed_out, _) = qemu::run_limited(&mut cmd, limit);
        let text = std::fs::read(&log).unwrap_or_default();
        // The last boot's console stays for a reader: the runs' output and traces.
        let _ = std::fs::rename(&log, dir.join("last-console.txt"));
        let _ = std::fs::remove_file(&initrd);
        let console = parse(&String::from_utf8_lossy(&text));
        if !console.done {
            let why = if timed_out {
                format!("did not finish in {} s", limit.as_secs())
            } else {
                "stopped early".into()
            };
            let last = console.tail.last().cloned().unwrap_or_default();
            return Err(format!(
                "the Linux guest {why} ({} of {runs} runs; last console line: {last:?})",
                console.runs.len()
            ));
        }
        Ok(console)
    }
}

/// Reads the console: the markers of `init.sh` and what lies between them.
fn parse(text: &str) -> Console {
    let mut c = Console::default();
    #[derive(PartialEq)]
    enum At {
        Outside,
        Output,
        Log,
        Trace,
    }
    let mut at = At::Outside;
    for raw in text.lines() {
        let line = raw.trim_end_matches('\r');
        c.tail.push(line.to_string());
        if c.tail.len() > 12 {
            c.tail.remove(0);
        }
        if let Some(rest) = line.strip_prefix("@@fairsched ") {
            let (word, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            match word {
                "linux" => c.release = rest.split_whitespace().next().unwrap_or_default().to_string(),
                "domain" => {
                    let mut f = rest.splitn(3, ' ');
                    let (Some(at), Some(name)) = (f.next(), f.next()) else { continue };
                    c.domains.push((at.into(), name.into(), f.next().unwrap_or_default().into()));
                }
                "run" => {
                    c.runs.push(Run::default());
                    at = At::Output;
                }
                "status" => {
                    if let Some(r) = c.runs.last_mut() {
                        r.status = rest.trim().parse().ok();
                    }
                }
                "log" => {
                    if let Some(r) = c.runs.last_mut() {
                        r.logs.push((rest.trim().to_string(), Vec::new()));
                        at = At::Log;
                    }
                }
                "output" => at = At::Output,
                "trace" => at = At::Trace,
                "end" => at = At::Outside,
                "done" => c.done = true,
                _ => {}
            }
            continue;
        }
        let Some(r) = c.runs.last_mut() else { continue };
        match at {
            At::Outside => {}
            At::Output => r.output.push(line.to_string()),
            At::Log => {
                if let Some((_, lines)) = r.logs.last_mut() {
                    lines.push(line.to_string());
                }
            }
            At::Trace if !line.starts_with('#') && !line.trim().is_empty() => r.trace.push(line.to_string()),
            At::Trace => {}
        }
    }
    c
}
