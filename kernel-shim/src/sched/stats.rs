//! The kernel's instrumentation: what the suite's judges and the reports read. The counters
//! are one [`Stats`] value, fed from two places of the porting recipe (`porting.rs`): the
//! core's events (`Platform::event`, [`Stats::event`]) and each switch at interrupt exit
//! ([`Stats::switched`]); the exception entry adds the handler's own counts. None of it is
//! needed to run the core: a porter's copy of the recipe leaves these calls out.

use portable_atomic::{AtomicU64, Ordering::Relaxed};
use sched_core::{Event, EventKind, MigrateReason, Outcome, TaskId, TaskState};

use super::cpu::{CPUS, NONE};
use super::thread::THREADS;
use super::{SCHEDULER, TRACE};
use crate::arch::MAX_CPUS;

/// Counters of one CPU, for reports (read through [`cpu_figures`]).
pub(super) struct CpuCounters {
    /// Timer ticks handled.
    pub(super) ticks: AtomicU64,
    /// Reschedule IPIs received.
    pub(super) resched_ipis: AtomicU64,
    /// Reschedule IPIs sent to this CPU.
    pub(super) resched_sent: AtomicU64,
    /// Ping IPIs received.
    pub(super) pings: AtomicU64,
    /// Context switches (to a different thread or idle).
    switches: AtomicU64,
    /// Tasks that migrated to this CPU.
    migrations_in: AtomicU64,
    /// Load-balance passes made by this CPU (a pass may have several rounds).
    balance_runs: AtomicU64,
    /// Tasks those passes moved.
    balance_moved: AtomicU64,
    /// Passes by outcome, in [`Outcome::ALL`]'s order (the last two count rounds that
    /// handed over: redirected, retried).
    balance_outcomes: [AtomicU64; Outcome::ALL.len()],
    /// When the CPU came online (ns), 0 while offline.
    pub(super) online_ns: AtomicU64,
    /// Time spent in the exception handler (IRQs, syscalls, switches), total (ns).
    handler_ns: AtomicU64,
    /// Longest single handler run (ns).
    handler_max_ns: AtomicU64,
    /// When the thread running here was switched in (ns).
    pub(super) switch_in: AtomicU64,
    /// When this idle CPU was first handed a thread since it last ran one (0: not waiting).
    handed_at: AtomicU64,
}

impl CpuCounters {
    const fn new() -> CpuCounters {
        CpuCounters {
            ticks: AtomicU64::new(0),
            resched_ipis: AtomicU64::new(0),
            resched_sent: AtomicU64::new(0),
            pings: AtomicU64::new(0),
            switches: AtomicU64::new(0),
            migrations_in: AtomicU64::new(0),
            balance_runs: AtomicU64::new(0),
            balance_moved: AtomicU64::new(0),
            balance_outcomes: [const { AtomicU64::new(0) }; Outcome::ALL.len()],
            online_ns: AtomicU64::new(0),
            handler_ns: AtomicU64::new(0),
            handler_max_ns: AtomicU64::new(0),
            switch_in: AtomicU64::new(0),
            handed_at: AtomicU64::new(0),
        }
    }
}

/// A lag's tally: how many were timed, their sum and the longest (ns).
struct Lags {
    count: AtomicU64,
    sum: AtomicU64,
    max: AtomicU64,
}

impl Lags {
    const fn new() -> Lags {
        Lags { count: AtomicU64::new(0), sum: AtomicU64::new(0), max: AtomicU64::new(0) }
    }

    fn add(&self, lag: u64) {
        self.count.fetch_add(1, Relaxed);
        self.sum.fetch_add(lag, Relaxed);
        self.max.fetch_max(lag, Relaxed);
    }

    fn read(&self) -> (u64, u64, u64) {
        (self.count.load(Relaxed), self.sum.load(Relaxed), self.max.load(Relaxed))
    }
}

/// The kernel's counters.
pub(super) struct Stats {
    /// Per CPU.
    pub(super) cpu: [CpuCounters; MAX_CPUS],
    /// All migrations so far.
    migrations: AtomicU64,
    /// Migrations by reason, in [`MigrateReason::ALL`]'s order.
    migrations_by_reason: [AtomicU64; MigrateReason::ALL.len()],
    /// Wakeups of blocked threads so far.
    wakeups: AtomicU64,
    /// Of those, the ones the core placed on a CPU that had nothing else queued or running.
    wakeups_onto_idle: AtomicU64,
    /// Start lags: a thread made runnable (created or woken) until a CPU switched to it.
    start_lags: Lags,
    /// Wake-up lags: an idle CPU handed a thread until it switched to one.
    wake_lags: Lags,
    /// Switch-ins of a thread on a CPU outside its affinity.
    affinity_violations: AtomicU64,
    /// The first such switch-in: `thread << 8 | cpu`, plus 1; 0 if none.
    first_violation: AtomicU64,
}

/// The counters.
pub(super) static STATS: Stats = Stats {
    cpu: [const { CpuCounters::new() }; MAX_CPUS],
    migrations: AtomicU64::new(0),
    migrations_by_reason: [const { AtomicU64::new(0) }; MigrateReason::ALL.len()],
    wakeups: AtomicU64::new(0),
    wakeups_onto_idle: AtomicU64::new(0),
    start_lags: Lags::new(),
    wake_lags: Lags::new(),
    affinity_violations: AtomicU64::new(0),
    first_violation: AtomicU64::new(0),
};

impl Stats {
    /// An event of the core (`Platform::event`, which may run on another CPU than the one
    /// it names): the start and wake-up lags begin, migrations and balance passes count.
    pub(super) fn event(&self, event: &Event) {
        let c = event.cpu.min(MAX_CPUS - 1);
        if TRACE.load(Relaxed) {
            trace_event(event);
        }
        match event.kind {
            // Payloads may be read from a callback (PORTING.md): the thread's start lag starts.
            EventKind::NewTask { task } => {
                ready(SCHEDULER.payload(task).ok(), event.time);
                self.handed(c, event.time);
            }
            EventKind::Waking { task, nr_running } => {
                ready(SCHEDULER.payload(task).ok(), event.time);
                self.handed(c, event.time);
                self.wakeups.fetch_add(1, Relaxed);
                // 1: the wakee is alone there.
                if nr_running == 1 {
                    self.wakeups_onto_idle.fetch_add(1, Relaxed);
                }
            }
            EventKind::Migrate { reason, .. } => {
                self.cpu[c].migrations_in.fetch_add(1, Relaxed);
                self.migrations.fetch_add(1, Relaxed);
                self.migrations_by_reason[reason.index()].fetch_add(1, Relaxed);
            }
            EventKind::Balance(r) => {
                let b = &self.cpu[r.cpu.min(MAX_CPUS - 1)];
                if r.outcome.ends_pass() {
                    b.balance_runs.fetch_add(1, Relaxed);
                }
                b.balance_moved.fetch_add(r.moved as u64, Relaxed);
                b.balance_outcomes[r.outcome.index()].fetch_add(1, Relaxed);
            }
            _ => {}
        }
    }

    /// CPU `cpu` was handed a thread at `time`: if it is idle, its wake-up lag starts (the
    /// first hand-over counts; later ones wait no longer than it).
    fn handed(&self, cpu: usize, time: u64) {
        if CPUS[cpu].current.load(Relaxed) == NONE {
            let _ = self.cpu[cpu].handed_at.compare_exchange(0, time.max(1), Relaxed, Relaxed);
        }
    }

    /// CPU `cpu` switched at `now` from thread `prev` to `next` (`NONE`: idle), the pick
    /// having left `prev` in `prev_state`: CPU time, start and wake-up lags, where threads
    /// ran, affinity kept, switches, and the trace line.
    pub(super) fn switched(
        &self,
        cpu: usize,
        now: u64,
        prev: usize,
        next: usize,
        prev_state: Option<TaskState>,
    ) {
        let c = &self.cpu[cpu];
        let since = c.switch_in.swap(now, Relaxed);
        if prev != NONE {
            THREADS[prev].cpu_ns.fetch_add(now.saturating_sub(since), Relaxed);
        } else {
            // An idle CPU picked: a thread, which ends its wake-up lag, or nothing, when
            // another CPU took the thread first, which drops it uncounted.
            let at = c.handed_at.swap(0, Relaxed);
            if at != 0 && next != NONE {
                self.wake_lags.add(now.saturating_sub(at));
            }
        }
        if next != NONE && next != prev {
            self.started(next, now);
            THREADS[next].ran_on.fetch_or(1 << cpu, Relaxed);
            if THREADS[next].affinity.load(Relaxed) >> cpu & 1 == 0 {
                self.affinity_violations.fetch_add(1, Relaxed);
                let first = ((next as u64) << 8 | cpu as u64) + 1;
                let _ = self.first_violation.compare_exchange(0, first, Relaxed, Relaxed);
            }
        }
        if next == prev {
            return;
        }
        c.switches.fetch_add(1, Relaxed);
        if TRACE.load(Relaxed) {
            // pid = slot + 1 (0 is idle); state: R runnable, S blocked, X exited.
            let state = match prev_state {
                Some(TaskState::Blocked) => b'S',
                Some(TaskState::Exiting) => b'X',
                _ => b'R',
            };
            let pid = |t: usize| if t == NONE { 0 } else { t as u32 + 1 };
            defmt::info!(
                "trace: switch cpu={=usize} t={=u64} prev={=u32} state={=u8} next={=u32}",
                cpu,
                now,
                pid(prev),
                state,
                pid(next)
            );
        }
    }

    /// `cpu`'s exception handler ran for `spent` ns.
    pub(super) fn handler_ran(&self, cpu: usize, spent: u64) {
        self.cpu[cpu].handler_ns.fetch_add(spent, Relaxed);
        self.cpu[cpu].handler_max_ns.fetch_max(spent, Relaxed);
    }

    /// Thread `slot` is switched in at `now`: ends its start lag, if one was running.
    fn started(&self, slot: usize, now: u64) {
        let at = THREADS[slot].ready_at.swap(0, Relaxed);
        if at != 0 {
            let lag = now.saturating_sub(at);
            THREADS[slot].last_lag.store(lag, Relaxed);
            self.start_lags.add(lag);
        }
    }
}

/// Thread `slot` (a task's payload) became runnable at `time`: the clock of its start lag.
fn ready(slot: Option<u32>, time: u64) {
    if let Some(t) = THREADS.get(slot.map_or(usize::MAX, |s| s as usize)) {
        t.ready_at.store(time.max(1), Relaxed);
    }
}

/// Thread `slot`'s last start lag (ns): read by the thread itself after a sleep, its
/// wake-to-run time; `None` if it has not been switched in since [`forget_start_lag`].
pub fn last_start_lag(slot: usize) -> Option<u64> {
    THREADS.get(slot).map(|t| t.last_lag.load(Relaxed)).filter(|&l| l != u64::MAX)
}

/// Forgets thread `slot`'s last start lag (before it sleeps, so that after the sleep
/// [`last_start_lag`] is that wakeup's or nothing).
pub fn forget_start_lag(slot: usize) {
    if let Some(t) = THREADS.get(slot) {
        t.last_lag.store(u64::MAX, Relaxed);
    }
}

/// One CPU's counters, as plain numbers (each read on its own, not one snapshot).
#[derive(Clone, Copy, Default)]
pub struct CpuFigures {
    /// Timer ticks handled.
    pub ticks: u64,
    /// Reschedule IPIs received.
    pub resched_ipis: u64,
    /// Reschedule IPIs sent to this CPU.
    pub resched_sent: u64,
    /// Ping IPIs received.
    pub pings: u64,
    /// Context switches (to a different thread or idle).
    pub switches: u64,
    /// Tasks that migrated to this CPU.
    pub migrations_in: u64,
    /// Load-balance passes made by this CPU.
    pub balance_runs: u64,
    /// Tasks those passes moved.
    pub balance_moved: u64,
    /// Passes by outcome, in [`Outcome::ALL`]'s order.
    pub balance_outcomes: [u64; Outcome::ALL.len()],
    /// When the CPU came online (ns), 0 while offline.
    pub online_ns: u64,
    /// Time in the exception handler, total and longest single run (ns).
    pub handler_ns: u64,
    /// See `handler_ns`.
    pub handler_max_ns: u64,
}

/// `cpu`'s counters.
pub fn cpu_figures(cpu: usize) -> CpuFigures {
    let c = &STATS.cpu[cpu.min(MAX_CPUS - 1)];
    let get = |a: &AtomicU64| a.load(Relaxed);
    CpuFigures {
        ticks: get(&c.ticks),
        resched_ipis: get(&c.resched_ipis),
        resched_sent: get(&c.resched_sent),
        pings: get(&c.pings),
        switches: get(&c.switches),
        migrations_in: get(&c.migrations_in),
        balance_runs: get(&c.balance_runs),
        balance_moved: get(&c.balance_moved),
        balance_outcomes: core::array::from_fn(|i| get(&c.balance_outcomes[i])),
        online_ns: get(&c.online_ns),
        handler_ns: get(&c.handler_ns),
        handler_max_ns: get(&c.handler_max_ns),
    }
}

/// Machine-wide counters, as plain numbers.
#[derive(Clone, Copy, Default)]
pub struct Totals {
    /// All migrations so far.
    pub migrations: u64,
    /// Migrations by reason, in [`MigrateReason::ALL`]'s order.
    pub migrations_by_reason: [u64; MigrateReason::ALL.len()],
    /// Wakeups of blocked threads, and how many found their CPU otherwise empty.
    pub wakeups: u64,
    /// See `wakeups`.
    pub wakeups_onto_idle: u64,
    /// Switch-ins of a thread on a CPU outside its affinity.
    pub affinity_violations: u64,
    /// The first such switch-in: (thread slot, CPU).
    pub first_violation: Option<(u64, u64)>,
    /// Start lag: how long a thread made runnable (created or woken) waited until a CPU
    /// switched to it, ns: how many starts were timed, their sum and the longest.
    pub start_lag: (u64, u64, u64),
    /// Wake-up lag: how long an idle CPU handed a thread (a new one placed there, or a
    /// wakeup) took to switch to a thread, ns: count, sum, longest. The machine's part of
    /// the start lag, whatever the scheduler then picks.
    pub wake_lag: (u64, u64, u64),
}

/// The machine-wide counters.
pub fn totals() -> Totals {
    let s = &STATS;
    Totals {
        migrations: s.migrations.load(Relaxed),
        migrations_by_reason: core::array::from_fn(|i| s.migrations_by_reason[i].load(Relaxed)),
        wakeups: s.wakeups.load(Relaxed),
        wakeups_onto_idle: s.wakeups_onto_idle.load(Relaxed),
        affinity_violations: s.affinity_violations.load(Relaxed),
        first_violation: match s.first_violation.load(Relaxed) {
            0 => None,
            f => Some(((f - 1) >> 8, (f - 1) & 0xff)),
        },
        start_lag: s.start_lags.read(),
        wake_lag: s.wake_lags.read(),
    }
}

/// The pid of a task in trace lines: its thread slot (the task's payload) + 1. (The payload
/// is stored before the task is queued, so every event can name its thread; the task table's
/// lock is never held while a callback runs.)
fn trace_pid(id: TaskId) -> u32 {
    SCHEDULER.payload(id).map_or(0, |slot| slot + 1)
}

/// Logs a wakeup, new task, migration or failed balance attempt for `trace=on`. (Events
/// reach the platform at the end of a call, maybe another CPU's, so the logging CPU is not
/// named.)
fn trace_event(event: &Event) {
    match event.kind {
        EventKind::Waking { task, .. } => defmt::info!(
            "trace: waking cpu={=usize} t={=u64} pid={=u32}",
            event.cpu,
            event.time,
            trace_pid(task)
        ),
        EventKind::NewTask { task } => {
            defmt::info!(
                "trace: new cpu={=usize} t={=u64} pid={=u32}",
                event.cpu,
                event.time,
                trace_pid(task)
            )
        }
        EventKind::Migrate { task, from, reason } => defmt::info!(
            "trace: migrate cpu={=usize} t={=u64} pid={=u32} from={=usize} reason={=str}",
            event.cpu,
            event.time,
            trace_pid(task),
            from,
            match reason {
                MigrateReason::Wakeup => "wakeup",
                MigrateReason::Placement => "placement",
                MigrateReason::Balance => "balance",
                MigrateReason::ActiveBalance => "active",
                MigrateReason::Affinity => "affinity",
            }
        ),
        EventKind::Balance(r) if r.outcome.failed() => {
            defmt::info!("trace: balance-failed cpu={=usize} t={=u64}", event.cpu, event.time)
        }
        _ => {}
    }
}
