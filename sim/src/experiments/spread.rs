//! Spread time against CPU count: how long a burst of tasks takes to reach every CPU, from
//! 8 to 1024 simulated CPUs.

use super::{instant_ms, run_once, Workload};
use crate::machine::Config;
use crate::rng::Rng;
use crate::stats::{median, range};

/// Time to full spread of `tasks` spinners woken on CPU0, and of a fork burst, per CPU count.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpreadPoint {
    /// CPUs.
    pub cpus: usize,
    /// Burst kind.
    pub burst: String,
    /// Tasks in the burst: one per CPU, but a wake-on-one burst holds no more than CPU0's
    /// runqueue ([`crate::machine::SIM_Q`]).
    pub tasks: usize,
    /// Median spread time (ms) over iterations (infinite if half or more never spread in a run
    /// with no end to count it as).
    pub median_ms: f64,
    /// Max spread time (ms); infinite if some such iteration never spread.
    pub max_ms: f64,
    /// Median migrations until spread.
    pub migrations: f64,
}

/// Spread time vs CPU count for a fork burst (sysbench's thread creation, 40 events per thread)
/// and a wake-all-on-one-CPU burst. The fork burst has one thread per CPU; the wake-on-one
/// burst as many, up to what one runqueue holds (then spread means each task alone on a CPU).
pub fn spread(
    base: &Config,
    cpu_counts: &[usize],
    iterations: usize,
    mut progress: impl FnMut(),
) -> Vec<SpreadPoint> {
    let mut out = Vec::new();
    for &n in cpu_counts {
        for burst in ["fork", "wake-on-one"] {
            // One thread per CPU; a wake-on-one burst holds no more than CPU0's runqueue.
            let (tasks, w) = match burst {
                "fork" => (
                    n,
                    Workload::Sysbench {
                        threads: n as u32,
                        events: n as u64 * 40,
                        cost_ns: 1_240_000,
                        jitter: 0.02,
                    },
                ),
                _ => {
                    let tasks = n.min(crate::machine::SIM_Q);
                    (tasks, Workload::WakeAllOnOne { tasks: tasks as u32, run_ns: 2_000_000_000 })
                }
            };
            let mut seeds = Rng::new(base.seed);
            let mut times = Vec::new();
            let mut migs = Vec::new();
            for _ in 0..iterations {
                let cfg = Config { cpus: n, seed: seeds.next_u64(), trace: false, ..base.clone() };
                let r = run_once(&cfg, &w);
                // A run that never spread took forever: it orders after every finite time, so
                // the median and the worst case say "never" without a special case.
                times.push(match instant_ms(r.spread_ns, &r) {
                    ms if ms.is_nan() => f64::INFINITY,
                    ms => ms,
                });
                migs.push(r.migrations_to_spread as f64);
                progress();
            }
            out.push(SpreadPoint {
                cpus: n,
                burst: burst.to_string(),
                tasks,
                median_ms: median(&times),
                max_ms: range(&times).1,
                migrations: median(&migs),
            });
        }
    }
    out
}
