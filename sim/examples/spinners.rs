//! The speed bench's smallest machine as a plain program, for instruction-level profilers
//! (callgrind, `perf`): 8 CPUs with 4 pinned spinners each, run for `RUNS` × 100 ms of
//! simulated time (HZ 250: 25 ticks per CPU each).
//!
//! `cargo run --release -p sched-sim --example spinners -- 200`
//!
//! Two runs' difference is the steady state alone, without the set-up: `cargo xreport
//! --timings` takes callgrind's counts at 200 and 400 runs.

use std::process::ExitCode;

use sched_sim::experiments::spinning;

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    let runs: u64 = match arg.as_deref().map(str::parse) {
        None => 100,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("spinners: RUNS is a positive count of 100 ms runs, not {:?}", arg.unwrap_or_default());
            return ExitCode::from(sched_sim::cli::USAGE_EXIT);
        }
    };
    let mut m = spinning::<8>(8, 4);
    let start = m.now();
    for _ in 0..runs {
        let t = m.now() + 100_000_000;
        m.run_until(t);
    }
    println!("spinners: 8 CPUs x 4 spinners, {} ms simulated", (m.now() - start) / 1_000_000);
    ExitCode::SUCCESS
}
