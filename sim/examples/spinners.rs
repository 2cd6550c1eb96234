//! The speed bench's smallest machine as a plain program, for instruction-level profilers
//! (callgrind, `perf`): 8 CPUs with 4 pinned spinners each, run for `RUNS` × 100 ms of
//! simulated time (100 runs if not given). It prints the ms simulated and the ticks the CPUs
//! took.
//!
//! `cargo run --release -p sched-sim --example spinners -- 200`
//!
//! Two runs' difference is the steady state alone, without the set-up: `cargo xreport
//! --timings` takes callgrind's counts at 200 and 400 runs.

use std::process::ExitCode;

use sched_sim::experiments::spinning;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let runs: u64 = match args.as_slice() {
        [] => 100,
        [a] => match a.to_str().map(str::parse) {
            Some(Ok(n)) if n > 0 => n,
            _ => return usage(&format!("RUNS is a positive count of 100 ms runs, not {a:?}")),
        },
        _ => return usage("one argument at most: RUNS"),
    };
    let mut m = spinning::<8>(8, 4);
    let (start, ticks) = (m.now(), m.report().ticks);
    for _ in 0..runs {
        let t = m.now() + 100_000_000;
        m.run_until(t);
    }
    println!(
        "spinners: 8 CPUs x 4 spinners, {} ms simulated, {} ticks",
        (m.now() - start) / 1_000_000,
        m.report().ticks - ticks
    );
    ExitCode::SUCCESS
}

/// Refuses the command line in one line, with the usage exit code.
fn usage(why: &str) -> ExitCode {
    eprintln!("spinners: {why}");
    ExitCode::from(sched_sim::cli::USAGE_EXIT)
}
