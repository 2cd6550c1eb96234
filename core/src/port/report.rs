//! What a port reads back from the core: plain copies of a CPU's figures, taken without a
//! lock of the machine, for judges, reports and a port's idle decisions.

use portable_atomic::Ordering::Relaxed;

use crate::smp::RqStats;

/// A CPU's published figures at one moment (Linux's names in brackets). Loads and
/// utilisations are in capacity units (1024 = one full CPU of the biggest kind). Each field
/// is read on its own, so while the CPU changes they may come from neighbouring moments.
///
/// The figures are those the CPU published at its last update: a switch, a wakeup or exit
/// there, its tick, or a balancer refreshing its blocked load. A CPU that goes idle keeps
/// its last tasks' decaying load and utilisation (`nr_running` 0, `load` not) until the
/// next refresh: the newly-idle balance as it goes idle, its own tick while it ticks, or, in
/// tickless idle, a busy CPU's kick of the nohz balancer (PORTING.md: "What `stats` of an
/// idle CPU say").
///
/// ```
/// use sched_core::port::Scheduler;
/// use sched_core::{Features, NoPlatform, TaskParams};
/// static S: Scheduler<NoPlatform, 1, 4, 4> = Scheduler::new(NoPlatform, Features::DEFAULT, 250);
/// S.init_with(|t| t.init_flat(1)).unwrap();
/// S.cpu_up(0, 1).unwrap();
/// S.create(0, 1, TaskParams::default(), ()).unwrap();
/// let st = S.stats(0).unwrap();
/// assert_eq!((st.nr_running, st.idle, st.capacity_orig), (1, false, 1024));
/// assert!(S.stats(1).is_err()); // no such CPU
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuStats {
    /// Tasks on the runqueue, running and queued (`rq->nr_running`).
    pub nr_running: u32,
    /// Of which `SCHED_IDLE` (`cfs.idle_h_nr_running`).
    pub idle_nr_running: u32,
    /// Weighted load (`cpu_load`).
    pub load: u32,
    /// Runnable average (`cpu_runnable`).
    pub runnable: u32,
    /// Utilisation with util_est, capped at the CPU's capacity (`cpu_util`).
    pub util: u32,
    /// The runqueue's utilisation average alone (`cfs.avg.util_avg`).
    pub util_avg: u32,
    /// The estimated utilisation of the queued tasks (`cfs.avg.util_est.enqueued`).
    pub util_est: u32,
    /// Capacity left for fair tasks (`capacity_of`).
    pub capacity: u32,
    /// The CPU's full capacity (`capacity_orig_of`).
    pub capacity_orig: u32,
    /// Load of a running task too big for this CPU, else 0 (`rq->misfit_task_load`).
    pub misfit_task_load: u32,
    /// No task running and none queued.
    pub idle: bool,
    /// When the CPU last went idle (ns), 0 while busy.
    pub idle_stamp: u64,
}

impl CpuStats {
    pub(super) fn of(s: &RqStats) -> CpuStats {
        CpuStats {
            nr_running: s.nr_running.load(Relaxed),
            idle_nr_running: s.idle_h_nr_running.load(Relaxed),
            load: s.load.load(Relaxed),
            runnable: s.runnable.load(Relaxed),
            util: s.util.load(Relaxed),
            util_avg: s.util_avg.load(Relaxed),
            util_est: s.util_est.load(Relaxed),
            capacity: s.capacity.load(Relaxed),
            capacity_orig: s.capacity_orig.load(Relaxed),
            misfit_task_load: s.misfit_task_load.load(Relaxed),
            idle: s.idle.load(Relaxed),
            idle_stamp: s.idle_stamp.load(Relaxed),
        }
    }
}

/// Where a CPU's load balancing stands, for reports: when its periodic balance is due and
/// whether it sleeps tickless with a kick waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BalanceReport {
    /// The jiffy (tick count at the scheduler's HZ) its next periodic balance is due.
    pub next_balance: u64,
    /// The core counts it in tickless idle (always false without the `nohz` feature).
    pub tickless: bool,
    /// A nohz balance kick waits for it to pass through the scheduler.
    pub kick_pending: bool,
}
