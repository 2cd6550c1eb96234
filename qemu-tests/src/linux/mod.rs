//! Real Linux beside the kernel: Debian's arm64 kernel booted on the same QEMU machine (the
//! same board, vCPUs, clusters, NUMA nodes and mode) with an initramfs holding busybox,
//! sysbench and rt-app, running the same workload with ftrace's sched events on. The trace is
//! read back from the console and measured with the same definitions as the kernel's report
//! (`ftrace.rs`, `measure.rs`).
//!
//! Only aarch64 `virt` runs it: Debian's arm64 kernel is the one real Linux these boards share
//! with the project's kernel that needs no build here.

pub mod cgroups;
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
    RtApp { json: &'a [u8] },
    /// A shell script of the runner's (busybox sh), its standard output the run's output.
    Script { script: &'a [u8] },
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
    /// Why the trace is not whole, if it is not: it did not decode, or ftrace's ring buffer
    /// dropped events (its header's entries-in-buffer below entries-written).
    pub trace_problem: Option<String>,
    /// The program's exit status.
    pub status: Option<i32>,
}

/// What one boot of the guest printed.
#[derive(Debug, Default, Clone)]
pub struct Console {
    /// `uname -r`.
    pub release: String,
    /// The CPUs Linux brought up.
    pub cpus: usize,
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

/// The guest: Debian's parts and how its idle CPUs tick.
pub struct Guest {
    parts: Parts,
    ticking: bool,
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
        Ok(Guest { parts: fetch::parts()?, ticking: false })
    }

    /// The guest with its idle CPUs ticking (`nohz=off`, as the kernel's `nohz=off`), the
    /// ticks of the CPUs spread over the period (`skew_tick=1`).
    pub fn ticking(self, ticking: bool) -> Guest {
        Guest { ticking, ..self }
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
        if self.ticking {
            words += " nohz=off skew_tick=1";
        }
        match job {
            Job::Sysbench { threads, events } => {
                words +=
                    &format!(" fairsched.job=sysbench fairsched.threads={threads} fairsched.events={events}");
            }
            // (Under one fixed name: a file's own name may hold what a command line splits.)
            Job::RtApp { json } => {
                words += " fairsched.job=rtapp";
                extra.push(("workload.json".to_string(), json.to_vec()));
            }
            Job::Script { script } => {
                words += " fairsched.job=script";
                extra.push(("job.sh".to_string(), script.to_vec()));
            }
        }
        let image = initramfs::build(&self.parts.tree, &extra)?;
        let dir = qemu::root().join("target").join("linux");
        let tmp = std::env::temp_dir();
        let initrd =
            tmp.join(format!("fairsched-initramfs-{}-{}.cpio.gz", std::process::id(), qemu::unique()));
        let log = tmp.join(format!("fairsched-console-{}-{}.txt", std::process::id(), qemu::unique()));
        std::fs::write(&initrd, image).map_err(|e| format!("{}: {e}", initrd.display()))?;
        let mut cmd = qemu::machine_command(m, mode);
        if mode == Mode::Deterministic {
            // With a fixed RTC on the VM clock and a fixed seed, two boots print the same bytes
            // (but for QEMU's race on a loaded host: `Mode::Deterministic`).
            cmd.args(["-rtc", "base=2024-01-01T00:00:00,clock=vm", "-seed", "1"]);
        }
        cmd.arg("-serial").arg(format!("file:{}", log.display()));
        cmd.arg("-kernel").arg(&self.parts.kernel).arg("-initrd").arg(&initrd).arg("-append").arg(&words);
        let ran = qemu::run_limited(&mut cmd, mode, limit);
        let timed_out = ran.timed_out;
        let text = std::fs::read(&log).unwrap_or_default();
        // The last boot's console stays for a reader: the runs' output and traces.
        if std::fs::copy(&log, dir.join("last-console.txt")).is_ok() {
            let _ = std::fs::remove_file(&log);
        }
        let _ = std::fs::remove_file(&initrd);
        let console = parse(&String::from_utf8_lossy(&text));
        if !console.done || console.runs.len() != runs as usize {
            let why = match (timed_out, &ran.not_started) {
                (true, _) => format!("did not finish in {} s", limit.as_secs()),
                (false, Some(why)) => format!("did not start ({why})"),
                (false, None) => format!("stopped early (QEMU exit {:?})", ran.code),
            };
            let last = console.tail.last().cloned().unwrap_or_default();
            return Err(format!(
                "the Linux guest {why} ({} of {runs} runs; last console line: {last:?})",
                console.runs.len()
            ));
        }
        if console.cpus != m.cpus {
            return Err(format!("Linux brought up {} of the machine's {} CPUs", console.cpus, m.cpus));
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
    // A run's trace as printed: gzip in base64.
    let mut packed = String::new();
    for raw in text.lines() {
        let line = raw.trim_end_matches('\r');
        c.tail.push(line.to_string());
        if c.tail.len() > 12 {
            c.tail.remove(0);
        }
        if let Some(rest) = line.strip_prefix("@@fairsched ") {
            let (word, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            match word {
                "linux" => {
                    let f: Vec<&str> = rest.split_whitespace().collect();
                    c.release = f.first().copied().unwrap_or_default().to_string();
                    c.cpus = f.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
                }
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
                "trace" => {
                    at = At::Trace;
                    packed.clear();
                }
                "end" => {
                    if at == At::Trace {
                        if let Some(r) = c.runs.last_mut() {
                            match unpack(&packed) {
                                Ok(lines) => r.trace = lines,
                                Err(why) => r.trace_problem = Some(why),
                            }
                        }
                    }
                    at = At::Outside;
                }
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
            At::Trace => packed.push_str(line.trim()),
        }
    }
    c
}

/// The trace lines of a gzip-compressed, base64-encoded `trace` file (comments and blank lines
/// left out), or why they cannot be had whole: they do not decode, or the header says the
/// ring buffer dropped events (`entries-in-buffer/entries-written: X/Y`, X below Y).
fn unpack(base64: &str) -> Result<Vec<String>, String> {
    let mut gz = Vec::with_capacity(base64.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in base64.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            c if c.is_ascii_whitespace() => continue,
            _ => return Err(format!("the trace is not base64 (a {:?})", c as char)),
        };
        acc = acc << 6 | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            gz.push((acc >> bits) as u8);
        }
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text)
        .map_err(|e| format!("the trace does not decode: {e}"))?;
    let counts = text.lines().find_map(|l| l.split("entries-in-buffer/entries-written:").nth(1));
    if let Some((kept, written)) = counts.and_then(|c| c.split_whitespace().next()?.split_once('/')) {
        if kept != written {
            return Err(format!("ftrace's ring buffer dropped events ({kept} of {written} kept)"));
        }
    }
    Ok(text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` as init prints a trace: gzip, then base64 in lines of 76.
    fn packed(text: &str) -> String {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, text.as_bytes()).unwrap();
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut b64 = String::new();
        for chunk in gz.finish().unwrap().chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
            for i in 0..4 {
                b64.push(if i <= chunk.len() { A[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
            }
        }
        let lines: Vec<&str> = b64.as_bytes().chunks(76).map(|c| std::str::from_utf8(c).unwrap()).collect();
        lines.join("\n")
    }

    /// A console as init prints it: the markers, the output, a log and a packed trace.
    #[test]
    fn the_console_is_read_back() {
        let trace = "# tracer: nop\n# entries-in-buffer/entries-written: 1/1   #P:2\n  x-7 [002] d..4. 3.000005: sched_waking: comm=y pid=12 prio=120 target_cpu=001\n";
        let wrapped = packed(trace);
        let console = format!(
            "boot noise\n@@fairsched linux 6.1.0-57-arm64 cpus 2\n@@fairsched domain cpu0/domain0 DIE SD_BALANCE_NEWIDLE \n\
             @@fairsched run 0\nhello\n@@fairsched status 0\n@@fairsched log rt-app-a-0.log\n# hdr\n 0 1\n\
             @@fairsched output\nbye\n@@fairsched trace 0\n{}\n@@fairsched end 0\n@@fairsched done\n",
            wrapped
        );
        let c = parse(&console);
        assert!(c.done);
        assert_eq!(c.release, "6.1.0-57-arm64");
        assert_eq!(c.domain_line(), "DIE (SD_BALANCE_NEWIDLE)");
        let r = &c.runs[0];
        assert_eq!((r.output.clone(), r.status), (vec!["hello".to_string(), "bye".to_string()], Some(0)));
        assert_eq!(
            r.logs,
            vec![("rt-app-a-0.log".to_string(), vec!["# hdr".to_string(), " 0 1".to_string()])]
        );
        assert_eq!(r.trace.len(), 1, "{:?}", r.trace);
        assert!(r.trace[0].contains("sched_waking"));
        assert_eq!((c.cpus, r.trace_problem.clone()), (2, None));
        let dropped = console.replace(&wrapped, "not*base64");
        assert!(parse(&dropped).runs[0].trace_problem.is_some(), "a damaged trace is said");
        let b64 = packed("# entries-in-buffer/entries-written: 5/9   #P:2\n");
        assert_eq!(unpack(&b64).unwrap_err(), "ftrace's ring buffer dropped events (5 of 9 kept)");
    }
}
