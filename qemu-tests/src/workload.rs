//! Workload files on the QEMU kernel: the file lowered on the host (a refusal is one line and
//! its exit code, before anything boots), the program handed to QEMU's loader, and the
//! kernel's `program:` lines read back into rt-app's figures, defined as the simulator's.

use std::path::{Path, PathBuf};

use sched_workload::figures::{per_task, TaskFigures};
use sched_workload::interp::Activation;
use sched_workload::ProgramDef;

use crate::qemu::{self, Arch, Boot};

/// The kernel's limits, read from its source (the 64-bit ports' come first).
const KERNEL_ARCH: &str = include_str!("../../kernel-shim/src/arch/mod.rs");

/// A workload file ready to boot: its program and the file QEMU loads.
pub struct Loaded {
    /// The lowered program.
    pub def: ProgramDef,
    /// Its bytes, written to a file for QEMU's loader (removed when this is dropped).
    pub file: ProgramFile,
    /// The threads a run has at most, forks included ([`sched_workload::Program::thread_bound`]).
    pub threads: u64,
}

/// Lowers `path` for `arch`, or says why not: (exit code, one line).
pub fn load(path: &Path, arch: Arch) -> Result<Loaded, (u8, String)> {
    let bytes = sched_workload::rtapp::read(path)
        .map_err(|e| (sched_sim::cli::INPUT_EXIT, format!("cannot read {}: {e}", path.display())))?;
    let def = sched_workload::rtapp::lower_bytes(&bytes)
        .map_err(|e| (e.exit_code(), format!("{}: {e}", path.display())))?;
    load_def(def, &path.display().to_string(), arch)
}

/// The threads a scenario of the kernel (of the virt boards) may start: its thread pool less
/// its main thread.
pub(crate) fn kernel_thread_room() -> u64 {
    crate::source::const_u64(KERNEL_ARCH, "MAX_THREADS", 0).saturating_sub(1)
}

/// A lowered program `def` (named `name` in refusals) ready to boot on `arch`, or why not.
pub fn load_def(def: ProgramDef, name: &str, arch: Arch) -> Result<Loaded, (u8, String)> {
    if arch.program_window().is_none() {
        // (A machine the option cannot go with: a usage error, as any option refused.)
        return Err((
            sched_sim::cli::USAGE_EXIT,
            format!("{name}: {} takes no workload program", arch.name()),
        ));
    }
    let bytes = def.to_bytes();
    let prog = sched_workload::Program::parse(&bytes).map_err(|e| (2, format!("{name}: {e}")))?;
    let threads = prog.thread_bound();
    let room = kernel_thread_room();
    if threads > room {
        return Err((
            13,
            format!("{name}: {threads} threads, the {} kernel runs at most {room}", arch.name()),
        ));
    }
    let bytes_file =
        std::env::temp_dir().join(format!("fairsched-program-{}-{}.bin", std::process::id(), qemu::unique()));
    std::fs::write(&bytes_file, bytes)
        .map_err(|e| (sched_sim::cli::OUTPUT_EXIT, format!("cannot write {}: {e}", bytes_file.display())))?;
    Ok(Loaded { def, file: ProgramFile(bytes_file), threads })
}

/// A program's bytes in a temporary file for QEMU's loader; dropping it removes the file, so
/// no exit path of a command leaves one behind.
pub struct ProgramFile(PathBuf);

impl ProgramFile {
    /// Where the bytes are, for [`crate::qemu::Machine::program`].
    pub fn path(&self) -> PathBuf {
        self.0.clone()
    }
}

impl Drop for ProgramFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What a `scenario=program` boot measured.
#[derive(Debug, Clone, Default)]
pub struct KernelRun {
    /// rt-app's figures per task.
    pub tasks: Vec<TaskFigures>,
    /// The run's length (ns).
    pub run_ns: u64,
    /// Threads still blocked at the end.
    pub blocked: usize,
}

/// The figures of a `scenario=program` boot of `def` on `cpus` CPUs; `None` if the boot did
/// not report its end.
pub fn figures(b: &Boot, def: &ProgramDef, cpus: usize) -> Option<KernelRun> {
    let field = |l: &str, k: &str| -> Option<String> {
        let rest = &l[l.find(&format!(" {k}="))? + k.len() + 2..];
        Some(rest.split_whitespace().next()?.to_string())
    };
    let num = |l: &str, k: &str| field(l, k).and_then(|v| v.parse::<u64>().ok());
    let mut acts = Vec::new();
    let mut cpu_ns = vec![0u64; def.tasks.len()];
    let mut end = None;
    for l in &b.lines {
        if l.contains("program: act ") {
            let slack = field(l, "slack").and_then(|v| v.parse::<i64>().ok())?;
            let wake = num(l, "wake")?;
            acts.push(Activation {
                thread: num(l, "thread")? as u16,
                task: num(l, "task")? as u16,
                phase: num(l, "phase")? as u16,
                start: num(l, "start")?,
                end: num(l, "end")?,
                run_ns: num(l, "run")?,
                slack_ns: (slack != i64::MIN).then_some(slack),
                wake_latency_ns: (wake != u64::MAX).then_some(wake),
                cpu: num(l, "cpu")? as u16,
            });
        } else if l.contains("program: time ") {
            let task = num(l, "task")? as usize;
            if let Some(c) = cpu_ns.get_mut(task) {
                *c += num(l, "ns")?;
            }
        } else if l.contains("program: end ") {
            end = Some((num(l, "ns")?, num(l, "blocked")? as usize));
        }
    }
    let (run_ns, blocked) = end?;
    // The threads go on while the kernel reports: what ended after the run's end is past the
    // window (rt-app logs no row once it stops, the simulator stops at the end).
    acts.retain(|a| a.end <= run_ns);
    let names: Vec<String> = def.tasks.iter().map(|t| t.name.clone()).collect();
    Some(KernelRun { tasks: per_task(&names, &acts, &cpu_ns, run_ns, cpus), run_ns, blocked })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runner loads a program where each port's kernel reads it.
    #[test]
    fn the_program_windows_are_the_kernels() {
        for (arch, file) in [
            (Arch::Aarch64, include_str!("../../kernel-shim/src/arch/aarch64/mod.rs")),
            (Arch::Riscv64, include_str!("../../kernel-shim/src/arch/riscv64/mod.rs")),
        ] {
            let stated = crate::source::rust_const_nth(file, "PROGRAM_WINDOW", 0).expect("a PROGRAM_WINDOW");
            let at = arch.program_window().expect("a window");
            assert_eq!(stated.replace('_', ""), format!("Some({at:#x})"), "{}", arch.name());
        }
        assert_eq!(Arch::CortexM4.program_window(), None);
    }

    /// The kernel's lines read back into the activations and CPU time they carry, within the
    /// run's window.
    #[test]
    fn kernel_lines_read_back() {
        let def = sched_workload::rtapp::lower(
            r#"{"global": {"duration": 1, "calibration": 100}, "tasks": {"a": {"loop": -1, "run": 10}}}"#,
        )
        .unwrap();
        let lines = [
            "0.1 c0 program: act thread=0 task=0 phase=0 start=0 end=2000 run=1500 slack=-9223372036854775808 wake=18446744073709551615 cpu=3",
            "0.1 c0 program: act thread=0 task=0 phase=0 start=2000 end=4000 run=2500 slack=300 wake=40 cpu=5",
            "0.2 c0 program: time thread=0 task=0 ns=500000000",
            // Logged while the kernel reports, past the run's end: not counted.
            "0.2 c1 program: act thread=0 task=0 phase=0 start=999999000 end=1000001000 run=2000 slack=5 wake=7 cpu=1",
            "0.2 c0 program: cpu 0 ticks 500 switches 4",
            "0.2 c0 program: end ns=1000000000 blocked=0",
        ];
        let b = Boot::of_lines(&lines);
        let r = figures(&b, &def, 2).unwrap();
        let a = &r.tasks[0];
        assert_eq!((a.activations, a.run_us.mean, a.wake_us.count, a.slack_us.count), (2, 2.0, 1, 1));
        assert_eq!((a.cpu_share_pct, r.run_ns, a.last_phase_cpus), (25.0, 1_000_000_000, 0b10_1000));
        let unfinished = Boot { lines: b.lines[..4].to_vec(), ..b.clone() };
        assert!(figures(&unfinished, &def, 2).is_none(), "no end line: no figures");
    }
}
