//! The QEMU suite as docs/qemu-suite.md lists it, generated from the suite's own tables: every
//! case with its machines, mode and boot line, the numbers its judges hold the kernel to, and
//! the exit codes they expect (`cargo xreport` writes it; `cargo xtest` checks it).

use std::fmt::Write;

use crate::qemu::Arch;
use crate::suite::{self, Case};

/// The markdown block: the cases table, the long cases, the judges' numbers.
pub fn block() -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| machines | case | mode | boot line |");
    let _ = writeln!(out, "|---|---|---|---|");
    // A case shared by several machines is one row naming them all.
    let mut rows: Vec<(Vec<String>, &Case)> = Vec::new();
    for arch in Arch::ALL {
        for c in suite::cases(arch) {
            match rows.iter_mut().find(|(_, r)| std::ptr::eq(*r, c)) {
                Some((machines, _)) => machines.push(machine(arch)),
                None => rows.push((vec![machine(arch)], c)),
            }
        }
        if arch == Arch::Aarch64 {
            for (cpus, numa, clusters, c) in suite::VCPU_CASES {
                let mut m = format!("aarch64 `virt`, {cpus} vCPUs");
                if *numa > 0 {
                    let _ = write!(m, ", {numa} NUMA nodes");
                }
                if *clusters > 0 {
                    let _ = write!(m, ", clusters of {clusters}");
                }
                rows.push((vec![m], c));
            }
        }
    }
    for (machines, c) in &rows {
        let _ =
            writeln!(out, "| {} | {} | {} | `{}` |", machines.join(" and "), c.name, c.mode.name(), c.args);
    }
    let (total, virt) =
        (rows.len(), rows.iter().filter(|(m, _)| m.iter().any(|m| m.contains("virt"))).count());
    let _ = writeln!(
        out,
        "\n{total} cases ({virt} on the `virt` boards, {} on the microcontrollers), each on every machine its row names, \
         each boot within {} s; then each machine's boot-line fuzz: {} known-hard lines ({} accepted, the rest \
         refused) and {} seeded random malformed ones, each refused with exit {} and one error line.",
        total - virt,
        suite::SUITE_LIMIT.as_secs(),
        crate::fuzz::fixed_lines().len(),
        crate::fuzz::fixed_lines().iter().filter(|(_, v)| *v == crate::fuzz::Verdict::Accepted).count(),
        suite::FUZZ_LINES,
        suite::EXIT_BAD_ARGS,
    );
    let _ = writeln!(out, "\nThe long cases (`cargo xtest --long`, aarch64 and riscv64):\n");
    let _ = writeln!(out, "| case | mode | boot line |");
    let _ = writeln!(out, "|---|---|---|");
    for c in suite::LONG_CASES {
        let _ = writeln!(out, "| {} | {} | `{}` |", c.name, c.mode.name(), c.args);
    }
    let _ = writeln!(out, "\nThe numbers the judges hold the kernel to:\n");
    for (what, value) in suite::judged_numbers() {
        let _ = writeln!(out, "- {what}: {value}");
    }
    out
}

fn machine(arch: Arch) -> String {
    match arch {
        Arch::Aarch64 | Arch::Riscv64 => format!("{} `virt`, {} vCPUs", arch.name(), arch.cpus()),
        Arch::CortexM4 => "Cortex-M4 (`mps2-an386`)".to_string(),
        Arch::CortexM33 => "2x Cortex-M33 (`mps2-an521`)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_case_has_a_row_naming_its_machine_mode_and_boot_line() {
        let b = super::block();
        for arch in crate::qemu::Arch::ALL {
            for c in crate::suite::cases(arch) {
                let m = super::machine(arch);
                let row = format!("| {} | {} | `{}` |", c.name, c.mode.name(), c.args);
                assert!(b.lines().any(|l| l.contains(&m) && l.ends_with(&row)), "{m}: {}", c.name);
            }
        }
        let two = crate::suite::VCPU_CASES.iter().filter(|(cpus, ..)| *cpus == 2).count();
        assert_eq!(b.lines().filter(|l| l.starts_with("| aarch64 `virt`, 2 vCPUs")).count(), two);
    }
}
