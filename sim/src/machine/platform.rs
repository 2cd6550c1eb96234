//! The simulated CPUs and the platform the core calls: per-CPU model state, and the
//! reschedule requests and events the core makes during a call.

use std::cell::{Cell, RefCell};

use sched_core::balance::Outcome;
use sched_core::{Event, EventKind, Platform, TaskId};

/// One simulated CPU: one cache line (64-byte aligned, so that no record spans two).
#[derive(Debug, Clone, Default)]
#[repr(align(64))]
pub(super) struct CpuSim {
    pub(super) running: Option<TaskId>,
    /// When the running task started making progress (after switch costs).
    pub(super) since: u64,
    /// Bumped whenever the pending `Done` event is replaced, to ignore stale ones. (32 bits
    /// keep the record in one line. A stale event would match only after a multiple of 2^32
    /// re-arms of its CPU while it waits; each re-arm takes an event on that CPU, and no
    /// step's wait spans anywhere near that many.)
    pub(super) gen: u32,
    /// The pending `Done` event (time, task). Re-arming with the same one changes nothing,
    /// so a task that keeps running does not leave one stale event per tick in the queue.
    pub(super) armed: Option<(u64, TaskId)>,
    pub(super) ticking: bool,
    pub(super) ipi_pending: bool,
    pub(super) phase: u64,
}

// A field more would make every record two lines.
const _: () = assert!(core::mem::size_of::<CpuSim>() == 64);

/// Requests the core made of the platform during one call.
#[derive(Debug, Default)]
pub struct SimPlatform {
    pub(super) resched: RefCell<Vec<usize>>,
    /// (time, CPU) of each failed balance attempt, kept only while tracing.
    pub(super) failures: RefCell<Option<Vec<(u64, usize)>>>,
    /// Counted migrations (all reasons).
    pub migrations: Cell<u64>,
    /// Balance attempts that found an imbalance and a queue but moved nothing.
    pub failed_balances: Cell<u64>,
    /// Active balances requested.
    pub active_balances: Cell<u64>,
    /// Σ tasks moved over balance records.
    pub balance_moved: Cell<u64>,
    /// Migrations the balancer's detach/attach reported (reason Balance).
    pub balance_migrations: Cell<u64>,
    /// Balance records whose outcome disagrees with what they say moved.
    pub inconsistent_records: Cell<u64>,
}

impl Platform for SimPlatform {
    type Payload = ();
    fn resched_cpu(&self, cpu: usize) {
        self.resched.borrow_mut().push(cpu);
    }
    fn event(&self, e: &Event) {
        match e.kind {
            EventKind::Migrate { reason, .. } => {
                self.migrations.set(self.migrations.get() + 1);
                if reason == sched_core::MigrateReason::Balance {
                    self.balance_migrations.set(self.balance_migrations.get() + 1);
                }
            }
            EventKind::Balance(r) => {
                self.balance_moved.set(self.balance_moved.get() + r.moved as u64);
                // A pass's last record is consistent when "moved" is its outcome exactly when the
                // pass moved tasks, and an attempt that found a queue names it.
                let consistent = (!r.outcome.ends_pass()
                    || (r.outcome == Outcome::Moved) == (r.pass_moved > 0))
                    && (!matches!(
                        r.outcome,
                        Outcome::Moved | Outcome::NothingDetachable | Outcome::ActiveBalance
                    ) || r.busiest_cpu.is_some());
                if !consistent {
                    self.inconsistent_records.set(self.inconsistent_records.get() + 1);
                }
                if r.outcome.failed() {
                    self.failed_balances.set(self.failed_balances.get() + 1);
                    if let Some(f) = self.failures.borrow_mut().as_mut() {
                        f.push((e.time, e.cpu));
                    }
                }
                if r.outcome == Outcome::ActiveBalance {
                    self.active_balances.set(self.active_balances.get() + 1)
                }
            }
            _ => {}
        }
    }
}
