//! What one run measured: the spread instants, the sysbench figures, CPU time per group.

use sched_core::TaskId;

use super::workload::{Behavior, TaskSim};

/// Figures of one run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunReport {
    /// From the first worker's creation to the last worker's exit (ns).
    pub total_ns: u64,
    /// Per-event latencies (ns).
    #[serde(skip)]
    pub latencies: Vec<u64>,
    /// Mean per-event latency (ns) of the events done.
    pub avg_latency_ns: f64,
    /// Max per-event latency (ns).
    pub max_latency_ns: u64,
    /// The spread time: from the first worker's creation to the first instant at which
    /// min(workers, CPUs) CPUs each run a worker (ns), if that happened.
    pub spread_ns: Option<u64>,
    /// The one-per-CPU time: the same, with each of those CPUs running its worker alone on
    /// its runqueue (with more workers than CPUs, the spread time).
    pub one_per_cpu_ns: Option<u64>,
    /// Migrations before full spread.
    pub migrations_to_spread: u64,
    /// Failed balance attempts before full spread.
    pub failed_to_spread: u64,
    /// Migrations in the whole run.
    pub migrations: u64,
    /// Failed balance attempts in the whole run.
    pub failed_balances: u64,
    /// Active balances requested.
    pub active_balances: u64,
    /// Every event done exactly once.
    pub events_exactly_once: bool,
    /// Simulated CPU-ticks processed.
    pub ticks: u64,
    /// Each timer wakeup's wait until its task ran: the periodic tasks' wake-to-run, with
    /// the task's tag (see [`Machine::tag`](super::Machine::tag)), ns.
    #[serde(skip)]
    pub wake_latencies: Vec<(u8, u64)>,
    /// CPU time the live spinners have had (ns).
    #[serde(skip_serializing_if = "is_zero")]
    pub spinner_cpu_ns: u64,
    /// CPU time the live periodic tasks have had, per tag 0 and 1 (ns).
    #[serde(skip_serializing_if = "both_zero")]
    pub periodic_cpu_ns: [u64; 2],
    /// A workload program's figures per task (rt-app's; empty for the other workloads).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<sched_workload::figures::TaskFigures>,
    /// A workload program's run length: from its start to its last thread's end, or its
    /// `duration` (ns).
    #[serde(skip_serializing_if = "is_zero")]
    pub length_ns: u64,
    /// A workload program's threads still blocked on a mutex, condition variable or barrier
    /// when the run ended.
    #[serde(skip_serializing_if = "is_zero_usize")]
    pub blocked_threads: usize,
    /// The run reached the simulator's bound ([`crate::experiments::PROGRAM_CAP_NS`]) before
    /// every thread finished: its figures stop there.
    #[serde(skip)]
    pub cut: bool,
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}

fn both_zero(n: &[u64; 2]) -> bool {
    *n == [0, 0]
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl<const C: usize, const G: usize> super::Machine<C, G> {
    /// The spread instant and the one-per-CPU instant, as the kernel's report defines them
    /// (docs/seed-experiment.md): min(workers, CPUs) CPUs each running a worker, and each of
    /// them alone on its runqueue (the same instant with more workers than CPUs).
    pub(super) fn check_spread(&mut self) {
        // The workers the run will have: a sysbench main thread says how many it creates;
        // otherwise all were created together.
        let target = if self.worker_target > 0 { self.worker_target } else { self.workers } as usize;
        let n = self.cpus.len();
        let want = target.min(n);
        if self.workers == 0 || self.one_per_cpu_at.is_some() || (self.workers as usize) < want {
            return;
        }
        // CPUs running a worker, and of them those running it alone (every one of them with
        // more workers than CPUs, where none can be alone).
        let (mut running, mut alone) = (0, 0);
        for c in 0..n {
            if self.cpus[c].running.and_then(|t| self.tasks.get(&t)).is_some_and(|t| t.is_worker) {
                running += 1;
                alone += usize::from(
                    target > n
                        || self.smp.stats(c).nr_running.load(std::sync::atomic::Ordering::Relaxed) == 1,
                );
            }
        }
        if self.spread_at.is_none() && running >= want {
            let p = self.smp.platform();
            self.spread_at = Some((self.now, p.migrations.get(), p.failed_balances.get()));
        }
        if alone >= want {
            self.one_per_cpu_at = Some(self.now);
        }
    }

    /// The figures of the run so far: a sysbench-like run's (its pool's events, its workers'
    /// spread), the spinners' and periodic tasks' CPU time.
    pub fn report(&self) -> RunReport {
        let p = self.smp.platform();
        let lat: Vec<u64> = self.pool.latency.clone();
        let total = match (self.first_worker_at, self.last_worker_exit) {
            (Some(a), Some(b)) => b - a,
            _ => 0,
        };
        // (Over the events done: a run cut short leaves the rest at 0.)
        let done: Vec<u64> =
            lat.iter().zip(&self.pool.done).filter(|(_, &d)| d > 0).map(|(&l, _)| l).collect();
        RunReport {
            total_ns: total,
            avg_latency_ns: done.iter().sum::<u64>() as f64 / done.len().max(1) as f64,
            max_latency_ns: lat.iter().copied().max().unwrap_or(0),
            latencies: lat,
            spread_ns: self.spread_at.map(|(t, _, _)| t - self.first_worker_at.unwrap_or(0)),
            one_per_cpu_ns: self.one_per_cpu_at.map(|t| t - self.first_worker_at.unwrap_or(0)),
            migrations_to_spread: self.spread_at.map_or(p.migrations.get(), |s| s.1),
            failed_to_spread: self.spread_at.map_or(p.failed_balances.get(), |s| s.2),
            migrations: p.migrations.get(),
            failed_balances: p.failed_balances.get(),
            active_balances: p.active_balances.get(),
            events_exactly_once: !self.pool.done.is_empty() && self.pool.done.iter().all(|&d| d == 1),
            ticks: self.ticks,
            wake_latencies: self.wake_latencies.clone(),
            spinner_cpu_ns: self.cpu_time_of(|t| matches!(t.behavior, Behavior::Spinner)),
            periodic_cpu_ns: [0, 1].map(|tag| {
                self.cpu_time_of(|t| matches!(t.behavior, Behavior::Periodic { .. }) && t.tag == tag)
            }),
            tasks: Vec::new(),
            length_ns: 0,
            blocked_threads: 0,
            cut: false,
        }
    }

    /// Labels task `t`'s group for the figures (wake-to-run times and CPU time are reported
    /// per tag).
    pub fn tag(&mut self, t: TaskId, tag: u8) {
        if let Some(ts) = self.tasks.get_mut(&t) {
            ts.tag = tag;
        }
    }

    /// CPU time (ns) the live tasks `which` selects have had, the running ones' up to now.
    fn cpu_time_of(&self, which: impl Fn(&TaskSim) -> bool) -> u64 {
        let running: u64 = self
            .cpus
            .iter()
            .filter_map(|c| {
                let t = self.tasks.get(&c.running?)?;
                which(t).then(|| self.now.saturating_sub(c.since))
            })
            .sum();
        let settled: u64 =
            self.tasks.slots.iter().flatten().map(|e| &e.task).filter(|t| which(t)).map(|t| t.ran_ns).sum();
        settled + running
    }
}
