//! The kernel's limits and defaults as its docs list them, generated from its source text
//! (the kernel is a bare-metal crate, not a dependency of this host crate): each constant with
//! its value in every build that defines it (`cargo xreport` writes the block; `cargo xtest`
//! checks it). The runner reads some of them for itself too (the groups scenario's rounds).

use std::fmt::Write;

const ARCH: &str = include_str!("../../kernel-shim/src/arch/mod.rs");
const STACKS: &str = include_str!("../../kernel-shim/src/arch/stacks.rs");
const SCHED: &str = include_str!("../../kernel-shim/src/sched/mod.rs");
const WATCHDOG: &str = include_str!("../../kernel-shim/src/sched/watchdog.rs");
const SCENARIO: &str = include_str!("../../kernel-shim/src/scenario.rs");
const GROUPS: &str = include_str!("../../kernel-shim/src/scenario/groups.rs");
const CORE_LIMITS: &str = include_str!("../../core/src/limits.rs");

/// (what it is, source, constant), in the order the docs list them.
const CONSTANTS: &[(&str, &str, &str)] = &[
    ("CPUs the kernel drives (the scheduler's `CPUS`)", ARCH, "MAX_CPUS"),
    ("core's task table (`TASKS`)", SCHED, "TASKS"),
    ("runnable tasks per CPU (`Q`)", SCHED, "QLEN"),
    ("kernel threads in the static pool", ARCH, "MAX_THREADS"),
    ("stack of each kernel thread (bytes)", STACKS, "STACK_SIZE"),
    ("exception stack of each CPU (bytes)", STACKS, "EXC_STACK_SIZE"),
    ("boot and idle stack of each CPU (bytes)", STACKS, "BOOT_STACK_SIZE"),
    ("saved frame of an interrupted thread (bytes)", ARCH, "FRAME_SIZE"),
    ("most sysbench threads (`threads=`)", SCENARIO, "MAX_SPINNERS"),
    ("most sysbench events (`events=`)", SCENARIO, "MAX_EVENTS"),
    ("most ping-pong pairs (`pairs=`)", SCENARIO, "MAX_PAIRS"),
    ("default events of the nice scenario", SCENARIO, "NICE_EVENTS"),
    ("default events of the affinity scenario", SCENARIO, "AFF_EVENTS"),
    ("the nice scenario's margin on the weight ratio (%)", SCENARIO, "NICE_MARGIN_PCT"),
    ("rounds of the groups scenario's nested case, each with new spinners", GROUPS, "NESTED_ROUNDS"),
    ("tick rates `hz=` takes", SCHED, "HZ_CHOICES"),
    ("default tick rate (the core's `DEFAULT_HZ`)", CORE_LIMITS, "DEFAULT_HZ"),
    ("default watchdog (ticks; `watchdog=0` turns it off)", WATCHDOG, "DEFAULT_WATCHDOG_TICKS"),
    ("longest watchdog (`watchdog=`, ticks)", WATCHDOG, "MAX_WATCHDOG_TICKS"),
    ("exit code: the watchdog found a hung CPU", WATCHDOG, "EXIT_WATCHDOG"),
    ("exit code: a bad boot line", SCENARIO, "EXIT_BAD_ARGS"),
    ("exit code: a missing or damaged workload program", SCENARIO, "EXIT_BAD_PROGRAM"),
];

/// The markdown block: one row per constant, its value in each build that defines it.
pub fn block() -> String {
    let mut out = String::from("| what | constant | value |\n|---|---|---|\n");
    for &(what, src, name) in CONSTANTS {
        let values: Vec<String> = definitions(src, name)
            .into_iter()
            .map(|(build, v)| format!("{} ({build})", v.replace('_', " ")))
            .collect();
        let _ = writeln!(out, "| {what} | `{name}` | {} |", values.join("; "));
    }
    out
}

/// Rounds of the groups scenario's nested case, as the kernel's source defines them: each
/// is a window of its own, which the runner's hang limit for that scenario counts.
pub(crate) fn nested_rounds() -> u64 {
    let defs = definitions(GROUPS, "NESTED_ROUNDS");
    defs[0].1.parse().expect("NESTED_ROUNDS is an integer literal")
}

/// Every definition of `name` in `src`: the build its `#[cfg]` line selects, and the value.
pub(crate) fn definitions(src: &str, name: &str) -> Vec<(&'static str, String)> {
    let lines: Vec<&str> = src.lines().map(str::trim).collect();
    let decl = format!("const {name}:");
    let mut found = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if !l.strip_prefix("pub ").unwrap_or(l).starts_with(&decl) {
            continue;
        }
        let Some((_, value)) = l.split_once('=') else { continue };
        let cfg = i.checked_sub(1).map(|j| lines[j]).filter(|c| c.starts_with("#[cfg(")).unwrap_or("");
        found.push((build(cfg), value.trim().trim_end_matches(';').to_string()));
    }
    assert!(!found.is_empty(), "no `const {name}` in the kernel source");
    found
}

/// The build a `#[cfg(...)]` line selects, in the docs' words.
fn build(cfg: &str) -> &'static str {
    let (wide, no_wide) = (cfg.contains("feature = \"cpus-64\""), cfg.contains("not(feature = \"cpus-64\")"));
    let (arm, no_arm) = (cfg.contains("target_arch = \"arm\""), cfg.contains("not(target_arch = \"arm\")"));
    match () {
        _ if cfg.contains("not(board_an521)") => "Cortex-M4",
        _ if cfg.contains("board_an521") => "2x Cortex-M33",
        _ if wide && !no_wide => "virt, wide build",
        _ if no_arm && no_wide => "virt",
        _ if no_arm => "virt",
        _ if arm => "Cortex-M",
        _ => "every build",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The groups hang limit counts the nested rounds the kernel runs: the constant must
    /// stay a literal the runner can read.
    #[test]
    fn nested_rounds_are_read_from_the_kernel() {
        assert!(nested_rounds() >= 1);
    }

    #[test]
    fn each_definition_is_named_by_its_build() {
        let src =
            "#[cfg(all(not(target_arch = \"arm\"), not(feature = \"cpus-64\")))]\npub const N: usize = 8;\n\
                   #[cfg(all(not(target_arch = \"arm\"), feature = \"cpus-64\"))]\npub const N: usize = 64;\n\
                   #[cfg(all(target_arch = \"arm\", not(board_an521)))]\npub const N: usize = 1;\n\
                   #[cfg(all(target_arch = \"arm\", board_an521))]\npub const N: usize = 2;\n\
                   #[cfg(target_arch = \"arm\")]\nconst M: u32 = 16 * 1024;\nconst E: u32 = 3;\n";
        let named =
            |n| definitions(src, n).into_iter().map(|(b, v)| format!("{v} ({b})")).collect::<Vec<_>>();
        assert_eq!(named("N"), ["8 (virt)", "64 (virt, wide build)", "1 (Cortex-M4)", "2 (2x Cortex-M33)"]);
        assert_eq!(named("M"), ["16 * 1024 (Cortex-M)"]);
        assert_eq!(named("E"), ["3 (every build)"]);
    }

    /// The quoted words of `src` between the line starting with `from` and the next line
    /// starting with `to` (trimmed), each taken where `take` finds it in a line.
    fn words<'a>(
        src: &'a str,
        from: &str,
        to: &str,
        take: impl Fn(&'a str) -> Option<&'a str>,
    ) -> Vec<&'a str> {
        let mut lines = src.lines().map(str::trim).skip_while(|l| !l.starts_with(from)).skip(1);
        let mut out: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with(to)).filter_map(take).collect();
        out.sort_unstable();
        out
    }

    /// The kernel names its scenarios in three places: the boot-line parser's match, the
    /// table of the keys each reads (which the unknown-scenario message lists), and
    /// `Scenario::name`. A scenario missing from the table would take every key unchecked.
    #[test]
    fn every_scenario_the_parser_knows_has_its_keys_and_its_name() {
        let keys = include_str!("../../kernel-shim/src/scenario/keys.rs");
        let bootline = include_str!("../../kernel-shim/src/scenario/bootline.rs");
        fn quoted(l: &str) -> Option<&str> {
            l.split('"').nth(1)
        }
        let table = words(keys, "pub(super) const SCENARIOS", "];", quoted);
        let parser = words(bootline, "let scenario = match scenario {", "other =>", |l| {
            l.starts_with('"').then(|| quoted(l)).flatten()
        });
        let named = words(bootline, "pub(super) fn name(&self)", "}", |l| {
            l.contains("=> \"").then(|| quoted(l)).flatten()
        });
        // (Read as the source has them: a misread that found nothing must not pass.)
        assert!(table.contains(&"boot") && table.contains(&"sysbench"), "{table:?}");
        assert_eq!(parser, table);
        assert_eq!(named, table);
    }

    #[test]
    fn every_listed_constant_is_in_the_kernel_source() {
        let b = block();
        assert_eq!(b.lines().count(), CONSTANTS.len() + 2, "{b}");
    }
}
