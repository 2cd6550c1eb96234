//! `cargo xsize`: the memory sched-core's machines take, as each target lays them out.
//!
//! The figures are `size_of` of a few configurations, exported as one table by
//! `core/size-probe` (`SCHED_SIZES`); this builds that library for each target and reads the
//! table's bytes from the compiled object (no linking, no running: deterministic for the
//! pinned toolchain); the code size of two bare-metal images; and the deepest exception stack
//! of a QEMU run. Each figure is printed beside its budget from the small-machines work.
//! `cargo xtest` enforces every budget (the stack's through the QEMU suite, which holds every
//! case to it).

use std::path::Path;
use std::process::ExitCode;

use object::read::archive::ArchiveFile;
use object::{Endian, Object, ObjectSection, ObjectSymbol};

// The stack a public call of the core may need at 8 CPUs: the suite's budget.
use crate::suite::EXC_STACK_BUDGET;

/// The probe's entries, as `core/size-probe` lists them, with their budget on thumbv7em (bytes).
const ENTRIES: [(&str, Option<u64>); 8] = [
    ("Smp, 2 CPUs, 16 tasks, 16 per CPU", Some(8 * 1024)),
    ("Smp, 4 CPUs, 32 tasks, 32 per CPU", Some(24 * 1024)),
    ("Smp, 8 CPUs, 256 tasks, 64 per CPU", Some(128 * 1024)),
    ("SingleCpu, 8 tasks", Some(3 * 1024)),
    ("per task (what one more task slot adds)", Some(160)),
    ("EntityCell (a task's entity, stored)", None),
    ("TaskEntry (a task-table entry)", None),
    ("CpuMask", None),
];

/// The probe's task-group entries (built with the core's `groups` feature), with their budget
/// on thumbv7em (bytes).
const GROUP_ENTRIES: [(&str, Option<u64>); 3] = [
    ("Smp, 2 CPUs, 24 per CPU, 8 groups", Some(16 * 1024)),
    ("a group per CPU (runqueue, entity)", Some(512)),
    ("a group per machine (shared state)", Some(192)),
];

/// The targets the table is printed for: the 32-bit MCU the budgets are set for, and a
/// 64-bit one for comparison.
const TARGETS: [&str; 2] = ["thumbv7em-none-eabihf", "aarch64-unknown-none"];

/// One measured figure with its budget (bytes).
struct Row {
    name: &'static str,
    value: u64,
    budget: Option<u64>,
}

impl Row {
    fn over(&self) -> bool {
        self.budget.is_some_and(|b| self.value > b)
    }
}

/// What `cargo xsize` measures without booting QEMU.
struct Measured {
    /// The `size_of` rows, for thumbv7em.
    rows: Vec<Row>,
    /// The same figures for aarch64, for comparison.
    wide: Vec<u64>,
    /// The thumbv7em images' sections.
    images: Vec<Row>,
    /// The Cortex-M kernels' flash and RAM.
    mcu: Vec<Row>,
}

/// The `size_of` rows for thumbv7em, with the same figures for aarch64 beside them, and the
/// image rows.
fn measure() -> Result<Measured, String> {
    let mut mcu = sizes(TARGETS[0], false).map_err(|e| format!("{}: {e}", TARGETS[0]))?;
    let mut wide = sizes(TARGETS[1], false).map_err(|e| format!("{}: {e}", TARGETS[1]))?;
    mcu.extend(sizes(TARGETS[0], true).map_err(|e| format!("{} with groups: {e}", TARGETS[0]))?);
    wide.extend(sizes(TARGETS[1], true).map_err(|e| format!("{} with groups: {e}", TARGETS[1]))?);
    let rows = ENTRIES
        .iter()
        .chain(&GROUP_ENTRIES)
        .zip(&mcu)
        .map(|(&(name, budget), &value)| Row { name, value, budget })
        .collect();
    let images = code_sizes().map_err(|e| format!("code size: {e}"))?;
    let mut mcu =
        mcu_kernel(crate::qemu::Arch::CortexM4).map_err(|e| format!("the Cortex-M4 kernel: {e}"))?;
    mcu.extend(mcu_kernel(crate::qemu::Arch::CortexM33).map_err(|e| format!("the Cortex-M33 kernel: {e}"))?);
    Ok(Measured { rows, wide, images, mcu })
}

/// Runs `cargo xsize`.
pub fn main() -> ExitCode {
    match table() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xsize: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xsize`'s tables: every figure beside its budget, and how many budgets are exceeded.
pub fn table() -> Result<String, String> {
    use std::fmt::Write;
    let Measured { rows, wide, images, mcu } = measure()?;
    let mut out = String::new();
    let mark = |r: &Row| if r.over() { "  over" } else { "" };
    let _ = writeln!(out, "{:<38} {:>22} {:>22} {:>8}", "size_of (bytes)", TARGETS[0], TARGETS[1], "budget");
    for (r, w) in rows.iter().zip(&wide) {
        let b = r.budget.map_or("-".to_string(), |b| b.to_string());
        let _ = writeln!(out, "{:<38} {:>22} {w:>22} {b:>8}{}", r.name, r.value, mark(r));
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<38} {:>22} {:>8}", "image on thumbv7em (opt-level s, LTO)", "bytes", "budget");
    for r in &images {
        let _ = writeln!(out, "{:<38} {:>22} {:>8}{}", r.name, r.value, r.budget.unwrap_or(0), mark(r));
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<38} {:>22} {:>8}", "the Cortex-M kernels (profile mcu)", "bytes", "budget");
    for r in &mcu {
        let b = r.budget.map_or("-".to_string(), |b| b.to_string());
        let _ = writeln!(out, "{:<38} {:>22} {b:>8}{}", r.name, r.value, mark(r));
    }
    let mut over = rows.iter().chain(&images).chain(&mcu).filter(|r| r.over()).count();
    let n = deepest_stack().map_err(|e| format!("stack: {e}"))?;
    let r = Row { name: "deepest exception stack, sysbench", value: n, budget: Some(EXC_STACK_BUDGET) };
    over += r.over() as usize;
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<38} {:>22} {:>8}", "stack in QEMU (aarch64 kernel)", "bytes", "budget");
    let _ = writeln!(out, "{:<38} {n:>22} {EXC_STACK_BUDGET:>8}{}", r.name, mark(&r));
    let _ = writeln!(out, "({over} of the budgets exceeded)");
    Ok(out)
}

/// `cargo xtest`'s size step: every budgeted figure but the stack (the QEMU suite holds every
/// case to it) must be within its budget. Returns (passed, failed).
pub fn check() -> (u64, u64) {
    let Measured { rows, images, mcu, .. } = match measure() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("xtest: size budgets: {e}");
            return (0, 1);
        }
    };
    let (mut passed, mut failed) = (0, 0);
    for (r, budget) in rows.iter().chain(&images).chain(&mcu).filter_map(|r| Some((r, r.budget?))) {
        if r.over() {
            failed += 1;
            eprintln!("xtest: size: {} {} B exceeds its budget {budget} ... FAILED", r.name, r.value);
        } else {
            passed += 1;
            eprintln!("xtest: size: {} {} B (budget {budget}) ... ok", r.name, r.value);
        }
    }
    (passed, failed)
}

/// Boots the sysbench-like run (8 CPUs, 2x4, deterministic) and reads the deepest CPU's
/// exception-stack high-water mark from its report.
fn deepest_stack() -> Result<u64, String> {
    let m = crate::qemu::prepare(crate::qemu::Arch::Aarch64)?;
    let args = "scenario=sysbench threads=8 events=1000 clusters=4 seed=1";
    let b = crate::qemu::boot(&m, args, crate::qemu::Mode::Deterministic, std::time::Duration::from_secs(60));
    b.number_after(crate::suite::STACK_REPORT)
        .map(|n| n as u64)
        .ok_or_else(|| "no high-water line".to_string())
}

/// The probe's two bare-metal images (`core/size-probe/src/bin`), built for thumbv7em with
/// the `size` profile: (what, bytes, budget) for their `.text` and for the 2-CPU image's
/// `.data` (a `static` machine that is not all zeros is copied from flash at boot).
fn code_sizes() -> Result<Vec<Row>, String> {
    let target = TARGETS[0];
    build_probe(target, &["--bins", "--profile", "size"])?;
    let dir = crate::qemu::root().join("target").join(target).join("size");
    // (A missing `.text` is an image gone wrong, not a size of 0 within budget; no `.data` is
    // none to copy.)
    let section = |bin: &str, name: &str| -> Result<u64, String> {
        let data = std::fs::read(dir.join(bin)).map_err(|e| format!("{bin}: {e}"))?;
        let obj = object::File::parse(&*data).map_err(|e| e.to_string())?;
        match obj.section_by_name(name) {
            Some(s) => Ok(s.size()),
            None if name == ".data" => Ok(0),
            None => Err(format!("{bin} has no {name} section")),
        }
    };
    let row = |name, value, budget| Row { name, value, budget: Some(budget) };
    Ok(vec![
        row(".text, Smp of 2 CPUs with the balancer", section("text_smp2", ".text")?, 40 * 1024),
        row(".text, SingleCpu", section("text_single", ".text")?, 20 * 1024),
        row(".data, a static Smp of 2 CPUs", section("text_smp2", ".data")?, 0),
    ])
}

/// The microcontroller kernel's budgets (issue 15): the one-core build with 8 threads.
const MCU_FLASH_BUDGET: u64 = 96 * 1024;
const MCU_RAM_BUDGET: u64 = 64 * 1024;

/// A Cortex-M kernel (8 threads), built as the suite boots it, counted as an MCU developer
/// counts it: flash = what the image programs (vector table, code, read-only data, the
/// initial values of `.data`); RAM = `.data` + `.bss` (every stack is a static in `.bss`: 8
/// threads × 2 KiB, and per CPU a 4 KiB boot/idle and a 4 KiB exception stack). The budgets
/// are the one-core build's; the dual-core build (with the load balancer) is shown beside it.
fn mcu_kernel(arch: crate::qemu::Arch) -> Result<Vec<Row>, String> {
    let one_core = arch == crate::qemu::Arch::CortexM4;
    let elf = crate::qemu::build_kernel(arch)?;
    let data = std::fs::read(&elf).map_err(|e| format!("{}: {e}", elf.display()))?;
    let obj = object::File::parse(&*data).map_err(|e| e.to_string())?;
    let size = |name: &str| obj.section_by_name(name).map_or(0, |s| s.size());
    // (The vectors and the code must be there; the data sections may be empty, and absent.)
    let needed = |name: &str| {
        obj.section_by_name(name)
            .map(|s| s.size())
            .ok_or_else(|| format!("{} has no {name} section", elf.display()))
    };
    let (vectors, text, rodata) = (needed(".vector_table")?, needed(".text")?, size(".rodata"));
    let (data_, bss) = (size(".data"), size(".bss") + size(".uninit"));
    let row = |name, value, budget| Row { name, value, budget };
    let extra_cpus = arch.cpus() as u64 - 1;
    let stacks = mcu_stacks() + extra_cpus * (mcu_const("BOOT_STACK_SIZE") + mcu_const("EXC_STACK_SIZE"));
    let (flash, ram) = (vectors + text + rodata + data_, data_ + bss);
    Ok(if one_core {
        vec![
            row("M4: flash (vectors, .text, .rodata, .data)", flash, Some(MCU_FLASH_BUDGET)),
            row("M4:   of which .text", text, None),
            row("M4: RAM (.data + .bss, stacks included)", ram, Some(MCU_RAM_BUDGET)),
            row("M4:   of which stacks", stacks, None),
        ]
    } else {
        vec![
            row("2x M33: flash", flash, None),
            row("2x M33: RAM (stacks included)", ram, None),
            row("2x M33:   of which stacks", stacks, None),
        ]
    })
}

/// The one-core kernel's stacks (its constants: 8 threads × 2 KiB, 4 KiB boot, 4 KiB
/// exception), read from the kernel's source so the row follows the code.
fn mcu_stacks() -> u64 {
    mcu_const("MAX_THREADS") * mcu_const("STACK_SIZE")
        + mcu_const("BOOT_STACK_SIZE")
        + mcu_const("EXC_STACK_SIZE")
}

/// A Cortex-M constant of the kernel's: the microcontrollers' definition, the last one (the
/// 64-bit machines' come first).
fn mcu_const(name: &str) -> u64 {
    const STACKS: &str = include_str!("../../kernel-shim/src/arch/stacks.rs");
    const ARCH: &str = include_str!("../../kernel-shim/src/arch/mod.rs");
    let src = if name == "MAX_THREADS" { ARCH } else { STACKS };
    crate::source::const_u64(src, name, 1)
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

/// Builds the probe for `target` and reads its table: the machines' (`SCHED_SIZES`), or with
/// `groups` the task groups' (`GROUP_SIZES`, the core built with that feature).
fn sizes(target: &str, groups: bool) -> Result<Vec<u64>, String> {
    let (how, table, n): (&[&str], _, _) = if groups {
        (&["--release", "--features", "groups"], "GROUP_SIZES", GROUP_ENTRIES.len())
    } else {
        (&["--release"], "SCHED_SIZES", ENTRIES.len())
    };
    build_probe(target, how)?;
    let rlib =
        crate::qemu::root().join("target").join(target).join("release").join("libsched_size_probe.rlib");
    read_table(&rlib, table, n)
}

/// Finds the table `name` in the archive's object files and decodes its `n` 32-bit entries.
fn read_table(rlib: &Path, name: &str, n: usize) -> Result<Vec<u64>, String> {
    let data = std::fs::read(rlib).map_err(|e| format!("{}: {e}", rlib.display()))?;
    let archive = ArchiveFile::parse(&*data).map_err(|e| e.to_string())?;
    for member in archive.members() {
        let member = member.map_err(|e| e.to_string())?;
        let Ok(bytes) = member.data(&*data) else { continue };
        let Ok(obj) = object::File::parse(bytes) else { continue };
        let Some(sym) = obj.symbols().find(|s| s.name() == Ok(name)) else { continue };
        let section = sym.section_index().ok_or(format!("{name} has no section"))?;
        let section = obj.section_by_index(section).map_err(|e| e.to_string())?;
        let content = section.data().map_err(|e| e.to_string())?;
        let start = (sym.address() - section.address()) as usize;
        let bytes = content.get(start..start + 4 * n).ok_or(format!("{name} is shorter than expected"))?;
        let endian = obj.endianness();
        return Ok(bytes
            .chunks_exact(4)
            .map(|c| endian.read_u32_bytes([c[0], c[1], c[2], c[3]]) as u64)
            .collect());
    }
    Err(format!("no {name} in {}", rlib.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_what_the_probe_measures() {
        let names: Vec<&str> = ENTRIES.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, sched_size_probe::NAMES);
        let names: Vec<&str> = GROUP_ENTRIES.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, sched_size_probe::GROUP_NAMES);
        assert_eq!(sched_size_probe::SCHED_SIZES.len(), ENTRIES.len());
        // On the host the probe's own figures are what this reads for a target.
        let entity = sched_size_probe::SCHED_SIZES[5] as usize;
        assert_eq!(entity, std::mem::size_of::<sched_core::EntityCell>());
    }

    #[test]
    fn the_mcu_stacks_are_read_from_the_kernel() {
        // 8 threads × 2 KiB + 4 KiB boot + 4 KiB exception.
        assert_eq!(mcu_stacks(), 8 * 2048 + 4096 + 4096);
    }
}
