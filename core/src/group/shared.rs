//! What every CPU shares of a group, read without a lock: its parent, shares and load
//! average, and its bandwidth pool behind a leaf lock.

use portable_atomic::{AtomicBool, AtomicI64, AtomicU16, AtomicU32, AtomicU64, Ordering::Relaxed};

use super::bandwidth::{CpuMax, Pool};

/// A level of the hierarchy: 0 is the root (the CPU's own runqueue), 1..=G a group's slot.
pub(crate) type Level = u16;

/// What every CPU shares of one group, read without a lock: its parent, its shares and the
/// sum of its runqueues' load contributions (`tg->parent`, `tg->shares`, `tg->load_avg`).
/// The parent is written only while the group has no runqueue in use (created, or being
/// deleted); a group being deleted takes no task (`dying`, read and written under the group
/// table's lock).
#[derive(Debug)]
pub struct GroupShared {
    parent: AtomicU16,
    shares: AtomicU64,
    load_avg: AtomicI64,
    pub(crate) dying: AtomicBool,
    /// Its bandwidth pool (`cfs_b`, under its own lock: a leaf, taken under a runqueue lock
    /// or alone, never held while taking another).
    pub(crate) bw: spin::Mutex<Pool>,
    /// When its period ends next (ns; 0: the period timer is stopped). Armed ([`Self::arm`])
    /// by a new limit, the first runtime taken and a throttle, and stopped by a period's end
    /// under `bw`'s lock (any tick may move it on, alone).
    pub(crate) next_end: AtomicU64,
    /// The period timer's last expiry (ns), kept while it is stopped: its phase, which a
    /// restart keeps, as `hrtimer_forward_now` does (0 for a new group: periods from the
    /// clock's start).
    phase: AtomicU64,
    /// How many of its runqueues are throttled now. A throttle counts itself under `bw`'s
    /// lock, where a period's end reads it, so that no throttle is missed by a period's end
    /// that stops the timer or only refills.
    pub(crate) nr_throttled: AtomicU32,
}

impl GroupShared {
    /// No shares, no load: a slot whose group is not created.
    pub const fn new() -> GroupShared {
        GroupShared {
            parent: AtomicU16::new(0),
            shares: AtomicU64::new(0),
            load_avg: AtomicI64::new(0),
            dying: AtomicBool::new(false),
            bw: spin::Mutex::new(Pool::new(CpuMax::UNLIMITED)),
            next_end: AtomicU64::new(0),
            phase: AtomicU64::new(0),
            nr_throttled: AtomicU32::new(0),
        }
    }

    /// Starts the period timer at `now`, if it is stopped (`start_cfs_bandwidth`): its next
    /// end is the first one after `now` in its phase, whole periods of `period` ns on from
    /// its last expiry (that expiry itself if it is still ahead).
    pub(crate) fn arm(&self, now: u64, period: u64) {
        if self.next_end.load(Relaxed) != 0 {
            return;
        }
        self.move_to(forward(self.phase.load(Relaxed), now, period).1);
    }

    /// The period timer runs on to end at `next` (ns, not 0), which is also the phase a
    /// restart keeps.
    pub(crate) fn move_to(&self, next: u64) {
        self.next_end.store(next, Relaxed);
        self.phase.store(next, Relaxed);
    }

    /// Its parent's level (0: the root).
    #[inline]
    pub(crate) fn parent(&self) -> Level {
        self.parent.load(Relaxed)
    }

    /// The group's shares (high resolution).
    pub fn shares(&self) -> u64 {
        self.shares.load(Relaxed)
    }

    pub(crate) fn set_shares(&self, shares: u64) {
        self.shares.store(shares, Relaxed);
    }

    /// Σ of its runqueues' contributions (never negative when read).
    pub fn load_avg(&self) -> u64 {
        self.load_avg.load(Relaxed).max(0) as u64
    }

    /// Folds one runqueue's change into the sum.
    pub(crate) fn add_load(&self, delta: i64) {
        self.load_avg.fetch_add(delta, Relaxed);
    }

    /// A new group under `parent` in the slot (its pool was reset when the slot's last group
    /// was deleted: `reset_pool`).
    pub(crate) fn reset(&self, parent: Level, shares: u64) {
        self.load_avg.store(0, Relaxed);
        self.shares.store(shares, Relaxed);
        self.parent.store(parent, Relaxed);
        self.dying.store(false, Relaxed);
        self.next_end.store(0, Relaxed);
        self.phase.store(0, Relaxed);
        self.nr_throttled.store(0, Relaxed);
    }

    /// Its pool back to a new group's (no limit, no figures), when its group is deleted.
    pub(crate) fn reset_pool(&self) {
        *self.bw.lock() = Pool::new(CpuMax::UNLIMITED);
        self.next_end.store(0, Relaxed);
        self.phase.store(0, Relaxed);
        self.nr_throttled.store(0, Relaxed);
    }
}

impl Default for GroupShared {
    fn default() -> Self {
        Self::new()
    }
}

/// A timer that expires at `end` forwarded by whole periods of `period` ns past `now`
/// (`hrtimer_forward`): how many periods it moved (0 if `end` is still ahead), and its next
/// expiry (saturating).
pub(crate) fn forward(end: u64, now: u64, period: u64) -> (u64, u64) {
    if end > now {
        return (0, end);
    }
    let period = period.max(1);
    let overrun = now.saturating_sub(end) / period + 1;
    (overrun, end.saturating_add(overrun.saturating_mul(period)))
}
