//! rt-app's figures per task, defined once for every platform that runs a workload (the
//! simulator, the kernel's report, Linux's trace): from each phase iteration's
//! [`Activation`] and each task's CPU time.
//!
//! - **run time**: the wall time an iteration spent in its `run` and `runtime` events,
//!   preemption included (rt-app's `run` column);
//! - **wake-to-run latency**: from an iteration's last sleep or timer deadline, or its last
//!   wake-up by another thread (a mutex handed over, a signal, a barrier's release), to the
//!   thread running again (rt-app's `wu_lat` is another figure: the sum of an iteration's
//!   timer wake-ups alone, reset to 0 by a missed timer; schbench's and hackbench's figure is
//!   the wake-up's);
//! - **slack**: at an iteration's last timer, the next activation minus the time the timer
//!   was reached (rt-app's `slack`); a negative slack is a **timer miss**, counted;
//! - **CPU share**: the task's threads' CPU time over the run, as a share of the machine
//!   (all its CPUs for the run's length), in %.

use crate::interp::Activation;

/// A distribution's summary (µs): mean, median, 99th percentile, largest.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Summary {
    /// How many values.
    pub count: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Summary {
    /// The summary of `values` (any order); all zeros for none.
    pub fn of(values: &[f64]) -> Summary {
        if values.is_empty() {
            return Summary::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Summary {
            count: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: rank(0.5),
            p99: rank(0.99),
            max: v[v.len() - 1],
        }
    }
}

/// One task's figures over a run.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct TaskFigures {
    /// The task's name in the file.
    pub name: String,
    /// Phase iterations completed (activations).
    pub activations: usize,
    /// Run time per activation (µs).
    pub run_us: Summary,
    /// Wake-to-run latency per activation that slept or was woken (µs).
    pub wake_us: Summary,
    /// Slack per activation with a timer (µs).
    pub slack_us: Summary,
    /// Activations whose timer was missed (negative slack).
    pub misses: usize,
    /// CPU time of the task's threads as a share of the machine over the run (%).
    pub cpu_share_pct: f64,
    /// The CPUs its activations of its last phase ended on (a bit per CPU, CPUs past 63 not
    /// shown): where a task whose load grows phase by phase ended up.
    pub last_phase_cpus: u64,
}

/// Per task (in the program's order, named by `names`): its figures from the run's
/// activations, its threads' CPU time `cpu_ns[task]`, the run's length `run_ns` and the
/// machine's `cpus`.
pub fn per_task(
    names: &[String],
    acts: &[Activation],
    cpu_ns: &[u64],
    run_ns: u64,
    cpus: usize,
) -> Vec<TaskFigures> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mine: Vec<&Activation> = acts.iter().filter(|a| a.task as usize == i).collect();
            let us = |ns: f64| ns / 1e3;
            let run: Vec<f64> = mine.iter().map(|a| us(a.run_ns as f64)).collect();
            let wake: Vec<f64> =
                mine.iter().filter_map(|a| a.wake_latency_ns).map(|l| us(l as f64)).collect();
            let slack: Vec<f64> = mine.iter().filter_map(|a| a.slack_ns).map(|s| us(s as f64)).collect();
            let machine = run_ns as f64 * cpus.max(1) as f64;
            let last = mine.iter().map(|a| a.phase).max();
            let last_phase_cpus =
                mine.iter().filter(|a| Some(a.phase) == last && a.cpu < 64).fold(0u64, |m, a| m | 1 << a.cpu);
            TaskFigures {
                last_phase_cpus,
                name: name.clone(),
                activations: mine.len(),
                run_us: Summary::of(&run),
                wake_us: Summary::of(&wake),
                slack_us: Summary::of(&slack),
                misses: mine.iter().filter(|a| a.slack_ns.is_some_and(|s| s < 0)).count(),
                cpu_share_pct: if machine > 0.0 {
                    100.0 * cpu_ns.get(i).copied().unwrap_or(0) as f64 / machine
                } else {
                    0.0
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_use_nearest_rank() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.count, s.mean, s.p50, s.p99, s.max), (5, 3.0, 3.0, 5.0, 5.0));
        assert_eq!(Summary::of(&[]), Summary::default());
    }

    #[test]
    fn misses_and_shares_per_task() {
        let act = |task: u16, slack: i64| Activation {
            thread: 0,
            task,
            phase: 0,
            start: 0,
            end: 10,
            run_ns: 2_000,
            slack_ns: Some(slack),
            wake_latency_ns: Some(1_000),
            cpu: task * 2,
        };
        let names = vec!["a".to_string(), "b".to_string()];
        let f = per_task(&names, &[act(0, 5_000), act(0, -1_000), act(1, 3_000)], &[50, 25], 100, 2);
        assert_eq!((f[0].activations, f[0].misses, f[1].misses), (2, 1, 0));
        assert_eq!((f[0].cpu_share_pct, f[1].cpu_share_pct), (25.0, 12.5));
        assert_eq!((f[0].run_us.mean, f[0].wake_us.p50, f[0].slack_us.max), (2.0, 1.0, 5.0));
        assert_eq!((f[0].last_phase_cpus, f[1].last_phase_cpus), (0b1, 0b100));
    }
}
