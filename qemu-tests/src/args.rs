//! The runner's command lines, one clap parser per command (`cargo xrun`'s is in
//! `xrun.rs`). Each answers `--help` with its usage and every option's default, and refuses
//! an unknown or malformed option in one line (see [`sched_sim::cli::parse`]).

use clap::Parser;

use crate::qemu::{Arch, Mode};
use crate::suite::Selection;

/// `cargo xtest`.
#[derive(Parser, Debug)]
#[command(
    name = "cargo xtest",
    about = "All tests: host tests of every crate, the worked ports, the lint gates, the \
             sched-core package, the bare-metal builds, the size budgets, then the QEMU suite \
             on every machine; one summary line `N passed, N failed`",
    after_help = "With --repeat or --long only QEMU boots run: the suite's cases (or the long \
                  scenarios) repeated, to hunt flakes."
)]
pub struct TestArgs {
    /// Only boot the QEMU suite's cases, each N times (default: the ordinary run, each once).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Only boot the long scenarios (too slow for every CI run), --repeat times each.
    #[arg(long)]
    pub long: bool,
    /// Only the Linux guest's three cases (a sysbench, an rt-app and a cgroup boot of Debian's
    /// kernel on the aarch64 machine), which the ordinary run includes.
    #[arg(long)]
    pub linux: bool,
    /// With --repeat or --long: only boots in this QEMU mode, deterministic or parallel
    /// (default: both).
    #[arg(long, value_parser = mode)]
    pub mode: Option<Mode>,
    /// With --repeat or --long: only this machine, aarch64, riscv64, cortex-m4 or cortex-m33
    /// (default: every machine).
    #[arg(long, value_parser = arch)]
    pub arch: Option<Arch>,
    /// Passed on to the host tests' `cargo test` (default: none), e.g. `-- --release`.
    #[arg(last = true, value_name = "CARGO_TEST_ARGS")]
    pub cargo_args: Vec<String>,
}

/// Which cases, how many times each, in which mode (all if `None`), on which machine (all if
/// `None`).
pub type Repeat = (Selection, usize, Option<Mode>, Option<Arch>);

impl TestArgs {
    /// The boots-only run asked for, if one is; `Err` names a combination that means nothing
    /// (an option the chosen run would not read).
    pub fn repeat(&self) -> Result<Option<Repeat>, String> {
        if self.linux && (self.repeat.is_some() || self.long || self.mode.is_some() || self.arch.is_some()) {
            return Err(
                "--linux runs the Linux guest's cases alone: no --repeat, --long, --mode or --arch".into()
            );
        }
        if !self.cargo_args.is_empty() && (self.linux || self.repeat.is_some() || self.long) {
            return Err(
                "arguments after -- go to the host tests, which --linux, --repeat and --long skip".into()
            );
        }
        if self.long && self.arch.is_some_and(|a| !a.virt()) {
            return Err("--long: the long scenarios run on aarch64 and riscv64 only".into());
        }
        if self.repeat.is_none() && !self.long {
            if self.mode.is_some() || self.arch.is_some() {
                return Err("--mode and --arch choose boots: add --repeat N or --long".to_string());
            }
            return Ok(None);
        }
        let which = if self.long { Selection::Long } else { Selection::Suite };
        Ok(Some((which, self.repeat.unwrap_or(1) as usize, self.mode, self.arch)))
    }
}

/// `cargo xboot`.
#[derive(Parser, Debug)]
#[command(
    name = "cargo xboot",
    about = "One boot of the kernel under QEMU, its defmt log decoded and printed; exits with \
             the kernel's exit code (or 69: not prepared, 124: time limit, 125: QEMU failed, \
             65: no workload figures)"
)]
pub struct BootArgs {
    /// The machine: aarch64, riscv64, cortex-m4 or cortex-m33.
    #[arg(long, default_value = "aarch64", value_parser = arch)]
    pub arch: Arch,
    /// QEMU's mode: deterministic (icount, byte-identical but for a rare race on a loaded host) or parallel (multi-threaded TCG).
    #[arg(long, default_value = "deterministic", value_parser = mode)]
    pub mode: Mode,
    /// vCPUs (default: the machine's own: 8 on the virt boards, 1 on cortex-m4, 2 on
    /// cortex-m33).
    #[arg(long, value_name = "N")]
    pub smp: Option<usize>,
    /// NUMA nodes QEMU describes to the kernel (0: none).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub numa: usize,
    /// CPUs per cluster QEMU describes (0: one cluster per node).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub clusters: usize,
    /// An rt-app workload file: lowered here (refused in one line with its own exit code),
    /// loaded into the machine and run by `scenario=program` (the default boot line then);
    /// its figures per task follow the log.
    #[arg(long, value_name = "FILE")]
    pub workload: Option<std::path::PathBuf>,
    /// The kernel's boot line, words `key=value` (default: scenario=boot), e.g.
    /// `scenario=pingpong pairs=4 rounds=1000`.
    #[arg(value_name = "BOOT_WORD")]
    pub line: Vec<String>,
}

/// `cargo xsize`.
#[derive(Parser, Debug)]
#[command(
    name = "cargo xsize",
    about = "Sizes beside their budgets: RAM of the machines per target, code of two thumbv7em \
             images and of the Cortex-M kernel, and the deepest exception stack of a QEMU run"
)]
pub struct SizeArgs {}

/// `cargo xreport`.
#[derive(Parser, Debug)]
#[command(
    name = "cargo xreport",
    about = "Writes docs/measurements.md: every figure the docs cite (sizes, the seed's experiment \
             on QEMU and in the simulator, the suite's margins, EEVDF beside CFS, the kernel's lags; \
             with --timings the benchmarks and instruction counts), each with the command that made it"
)]
pub struct ReportArgs {
    /// Also run the benchmarks and count a simulated tick's instructions (callgrind; valgrind
    /// is installed as root when missing) and replace the timing sections, stamped with the
    /// date, host and commit; without it the file's last timings are kept.
    #[arg(long)]
    pub timings: bool,
    /// Also boot Debian's Linux beside the kernel (`cargo xrun --linux` for the seed's
    /// experiment and the workload files the section lists, and the task groups under cgroup
    /// v2) and replace the Linux sections, stamped with the date, Linux's release and the
    /// commit; without it the file's last ones are kept.
    #[arg(long)]
    pub linux: bool,
    /// With --timings or --linux: retake only their sections whose heading contains this text
    /// (e.g. `--linux --only "Task groups"`); the others are kept as the file has them.
    #[arg(long, value_name = "TEXT")]
    pub only: Option<String>,
}

fn arch(s: &str) -> Result<Arch, String> {
    Arch::parse(s).map_err(|_| "aarch64, riscv64, cortex-m4 or cortex-m33".to_string())
}

fn mode(s: &str) -> Result<Mode, String> {
    match s {
        "deterministic" => Ok(Mode::Deterministic),
        "parallel" => Ok(Mode::Parallel),
        _ => Err("deterministic or parallel".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sched_sim::cli::{outcome, USAGE_EXIT};

    fn parse<T: Parser>(name: &str, args: &[String]) -> Result<T, u8> {
        outcome(name, args).map_err(|(code, _)| code)
    }

    fn a(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn repeat(s: &str) -> Result<Option<Repeat>, String> {
        parse::<TestArgs>("cargo xtest", &a(s)).map_err(|c| format!("exit {c}"))?.repeat()
    }

    #[test]
    fn repeat_options_are_parsed_and_bad_ones_refused() {
        assert_eq!(repeat(""), Ok(None), "an ordinary run");
        assert_eq!(repeat("-- --release"), Ok(None), "cargo test's own flags go after --");
        assert_eq!(
            repeat("--repeat 125 --mode parallel"),
            Ok(Some((Selection::Suite, 125, Some(Mode::Parallel), None)))
        );
        assert_eq!(repeat("--long"), Ok(Some((Selection::Long, 1, None, None))));
        assert_eq!(
            repeat("--repeat 3 --arch riscv64"),
            Ok(Some((Selection::Suite, 3, None, Some(Arch::Riscv64))))
        );
        let refused = Err(format!("exit {USAGE_EXIT}"));
        for bad in ["--repeat 3 --arch x86", "--repeat 0", "--repeat", "--repeat 2 --mode fast", "--release"]
        {
            assert_eq!(repeat(bad), refused, "{bad}");
        }
        assert!(repeat("--mode parallel").unwrap_err().contains("--repeat"));
        assert_eq!(repeat("--linux"), Ok(None), "the Linux cases alone");
        // Options the chosen run would not read.
        assert!(repeat("--linux --repeat 3").unwrap_err().contains("--linux"));
        assert!(repeat("--linux --mode parallel --repeat 2").unwrap_err().contains("--linux"));
        assert!(repeat("--repeat 2 -- --release").unwrap_err().contains("after --"));
        assert!(repeat("--long --arch cortex-m4").unwrap_err().contains("aarch64 and riscv64"));
        assert_eq!(
            repeat("--long --arch riscv64"),
            Ok(Some((Selection::Long, 1, None, Some(Arch::Riscv64))))
        );
    }

    #[test]
    fn every_command_answers_help_without_running() {
        let (code, usage) = outcome::<TestArgs>("cargo xtest", &a("--help")).unwrap_err();
        assert_eq!(code, 0);
        for option in ["--repeat <N>", "--long", "--mode <MODE>", "--arch <ARCH>", "default: both"] {
            assert!(usage.contains(option), "{option} in {usage}");
        }
        assert_eq!(parse::<BootArgs>("cargo xboot", &a("--help")).unwrap_err(), 0);
        assert_eq!(parse::<SizeArgs>("cargo xsize", &a("--help")).unwrap_err(), 0);
        assert_eq!(parse::<SizeArgs>("cargo xsize", &a("--all")).unwrap_err(), USAGE_EXIT);
        assert_eq!(parse::<ReportArgs>("cargo xreport", &a("--help")).unwrap_err(), 0);
    }

    #[test]
    fn a_boot_line_is_words_and_the_machine_has_defaults() {
        let b = parse::<BootArgs>("cargo xboot", &a("--arch riscv64 scenario=pingpong pairs=4")).unwrap();
        assert_eq!((b.arch, b.mode, b.smp, b.line.len()), (Arch::Riscv64, Mode::Deterministic, None, 2));
        let w = parse::<BootArgs>("cargo xboot", &a("--workload workloads/periodic.json")).unwrap();
        assert_eq!(w.workload.as_deref(), Some(std::path::Path::new("workloads/periodic.json")));
        assert_eq!(parse::<BootArgs>("cargo xboot", &a("--smp eight")).unwrap_err(), USAGE_EXIT);
    }
}
