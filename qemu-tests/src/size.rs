//! `cargo xsize`: the memory sched-core's machines take, as each target lays them out.
//!
//! The figures are `size_of` of a few configurations, exported as one table by
//! `core/size-probe` (`SCHED_SIZES`); this builds that library for each target and reads the
//! table's bytes from the compiled object (no linking, no running: deterministic for the
//! pinned toolchain); the code size of two bare-metal images; and the deepest exception stack
//! of a QEMU run. Each figure is printed beside its budget from the small-machines work;
//! budgets are reported, not yet enforced (the suite enforces its own stack budget).

use std::path::Path;
use std::process::ExitCode;

use object::read::archive::ArchiveFile;
use object::{Endian, Object, ObjectSection, ObjectSymbol};

/// The probe's entries, as `core/size-probe` lists them, with their budget on thumbv7em (bytes).
const ENTRIES: [(&str, Option<u64>); 8] = [
    ("Smp, 2 CPUs, 16 tasks, 16 per CPU", Some(8 * 1024)),
    ("Smp, 4 CPUs, 32 tasks, 32 per CPU", Some(24 * 1024)),
    ("Smp, 8 CPUs, 256 tasks, 64 per CPU", Some(128 * 1024)),
    ("SingleCpu, 8 tasks", Some(3 * 1024)),
    ("per task (what one more task slot adds)", Some(160)),
    ("Entity (a task's scheduling state)", None),
    ("TaskEntry (a task-table entry)", None),
    ("CpuMask", None),
];

/// The stack a public call of the core may need at 8 CPUs (the small-machines budget).
const CALL_STACK_BUDGET: u64 = crate::suite::EXC_STACK_BUDGET;

/// The targets the table is printed for: the 32-bit MCU the budgets are set for, and a
/// 64-bit one for comparison.
const TARGETS: [&str; 2] = ["thumbv7em-none-eabihf", "aarch64-unknown-none"];

/// Runs `cargo xsize`.
pub fn main() -> ExitCode {
    let mut columns = Vec::new();
    for target in TARGETS {
        match sizes(target) {
            Ok(v) => columns.push(v),
            Err(e) => {
                eprintln!("xsize: {target}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("{:<38} {:>22} {:>22} {:>8}", "size_of (bytes)", TARGETS[0], TARGETS[1], "budget");
    let mut over = 0;
    for (i, (name, budget)) in ENTRIES.iter().enumerate() {
        let b = budget.map_or("-".to_string(), |b| b.to_string());
        let mark = match budget {
            Some(b) if columns[0][i] > *b => {
                over += 1;
                "  over"
            }
            _ => "",
        };
        println!("{name:<38} {:>22} {:>22} {b:>8}{mark}", columns[0][i], columns[1][i]);
    }
    match code_sizes() {
        Ok(rows) => {
            println!();
            println!("{:<38} {:>22} {:>8}", "image on thumbv7em (opt-level s, LTO)", "bytes", "budget");
            for (name, bytes, budget) in rows {
                let mark = if bytes > budget {
                    over += 1;
                    "  over"
                } else {
                    ""
                };
                println!("{name:<38} {bytes:>22} {budget:>8}{mark}");
            }
        }
        Err(e) => {
            eprintln!("xsize: code size: {e}");
            return ExitCode::FAILURE;
        }
    }
    match deepest_stack() {
        Ok(n) => {
            let mark = if n > CALL_STACK_BUDGET {
                over += 1;
                "  over"
            } else {
                ""
            };
            println!();
            println!("{:<38} {:>22} {:>8}", "stack in QEMU (aarch64 kernel)", "bytes", "budget");
            println!("{:<38} {n:>22} {:>8}{mark}", "deepest exception stack, sysbench", CALL_STACK_BUDGET);
        }
        Err(e) => eprintln!("xsize: stack: {e}"),
    }
    println!("({over} of the budgets not met yet)");
    ExitCode::SUCCESS
}

/// Boots the sysbench-like run (8 CPUs, 2x4, deterministic) and reads the deepest CPU's
/// exception-stack high-water mark from its report.
fn deepest_stack() -> Result<u64, String> {
    let (qemu_bin, elf) = crate::qemu::prepare()?;
    let args = "scenario=sysbench threads=8 events=1000 clusters=4 seed=1";
    let b = crate::qemu::boot(
        &qemu_bin,
        &elf,
        args,
        crate::qemu::Mode::Deterministic,
        std::time::Duration::from_secs(60),
    );
    b.number_after(crate::suite::STACK_REPORT)
        .map(|n| n as u64)
        .ok_or_else(|| "no high-water line".to_string())
}

/// The probe's two bare-metal images (`core/size-probe/src/bin`), built for thumbv7em with
/// the `size` profile: (what, bytes, budget) for their `.text` and for the 2-CPU image's
/// `.data` (a `static` machine that is not all zeros is copied from flash at boot).
fn code_sizes() -> Result<Vec<(&'static str, u64, u64)>, String> {
    let target = TARGETS[0];
    build_probe(target, &["--bins", "--profile", "size"])?;
    let dir = crate::qemu::root().join("target").join(target).join("size");
    let section = |bin: &str, name: &str| -> Result<u64, String> {
        let data = std::fs::read(dir.join(bin)).map_err(|e| format!("{bin}: {e}"))?;
        let obj = object::File::parse(&*data).map_err(|e| e.to_string())?;
        Ok(obj.section_by_name(name).map_or(0, |s| s.size()))
    };
    Ok(vec![
        (".text, Smp of 2 CPUs with the balancer", section("text_smp2", ".text")?, 40 * 1024),
        (".text, SingleCpu", section("text_single", ".text")?, 20 * 1024),
        (".data, a static Smp of 2 CPUs", section("text_smp2", ".data")?, 0),
    ])
}

/// Builds `core/size-probe` for `target` (installing the target if missing) with `how`.
fn build_probe(target: &str, how: &[&str]) -> Result<(), String> {
    if !crate::ensure_target(target) {
        return Err(format!("cannot install the {target} target"));
    }
    let ok = crate::cargo()
        .args(["build", "--quiet", "-p", "sched-size-probe", "--target", target])
        .args(how)
        .status()
        .map_err(|e| e.to_string())?
        .success();
    if ok {
        Ok(())
    } else {
        Err(format!("the size probe does not build for {target} ({})", how.join(" ")))
    }
}

/// Builds the probe for `target` and reads its table.
fn sizes(target: &str) -> Result<Vec<u64>, String> {
    build_probe(target, &["--release"])?;
    let rlib =
        crate::qemu::root().join("target").join(target).join("release").join("libsched_size_probe.rlib");
    read_table(&rlib, ENTRIES.len())
}

/// Finds `SCHED_SIZES` in the archive's object files and decodes its `n` 32-bit entries.
fn read_table(rlib: &Path, n: usize) -> Result<Vec<u64>, String> {
    let data = std::fs::read(rlib).map_err(|e| format!("{}: {e}", rlib.display()))?;
    let archive = ArchiveFile::parse(&*data).map_err(|e| e.to_string())?;
    for member in archive.members() {
        let member = member.map_err(|e| e.to_string())?;
        let Ok(bytes) = member.data(&*data) else { continue };
        let Ok(obj) = object::File::parse(bytes) else { continue };
        let Some(sym) = obj.symbols().find(|s| s.name() == Ok("SCHED_SIZES")) else { continue };
        let section = sym.section_index().ok_or("SCHED_SIZES has no section")?;
        let section = obj.section_by_index(section).map_err(|e| e.to_string())?;
        let content = section.data().map_err(|e| e.to_string())?;
        let start = (sym.address() - section.address()) as usize;
        let bytes = content.get(start..start + 4 * n).ok_or("SCHED_SIZES is shorter than expected")?;
        let endian = obj.endianness();
        return Ok(bytes
            .chunks_exact(4)
            .map(|c| endian.read_u32_bytes([c[0], c[1], c[2], c[3]]) as u64)
            .collect());
    }
    Err(format!("no SCHED_SIZES in {}", rlib.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_what_the_probe_measures() {
        let names: Vec<&str> = ENTRIES.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, sched_size_probe::NAMES);
        assert_eq!(sched_size_probe::SCHED_SIZES.len(), ENTRIES.len());
        // On the host the probe's own figures are what this reads for a target.
        let entity = sched_size_probe::SCHED_SIZES[5] as usize;
        assert_eq!(entity, std::mem::size_of::<sched_core::Entity>());
    }
}
