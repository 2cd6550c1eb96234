//! CFS bandwidth control (docs/groups.md): cgroup v2's `cpu.max`, a quota of CPU time per
//! period for a group. The group holds a pool refilled with its quota at every period; each
//! CPU's group runqueue takes runtime from it a slice at a time and is throttled when it has
//! none left and the pool is empty, until a refill hands it enough to go on.
//!
//! These are the decisions on plain numbers; the runqueues that carry them out hold a
//! [`RqRuntime`] each and the group its [`Pool`].

use core::fmt;

use super::GroupError;

/// A period when none is given (ns): 100 ms.
pub const DEFAULT_PERIOD_NS: u64 = 100_000_000;
/// The shortest period and the smallest quota (ns): 1 ms.
pub const MIN_PERIOD_NS: u64 = 1_000_000;
/// The longest period (ns): 1 s.
pub const MAX_PERIOD_NS: u64 = 1_000_000_000;
/// The largest quota (ns): 2^44 − 1 µs, what Linux's bandwidth ratio can hold.
pub const MAX_QUOTA_NS: u64 = ((1 << 44) - 1) * 1000;
/// Runtime a CPU takes from the pool at a time (`sched_cfs_bandwidth_slice_us`): 5 ms.
pub const SLICE_NS: u64 = 5_000_000;
/// Runtime a CPU keeps when its group runqueue empties; the rest goes back to the pool: 1 ms.
pub const MIN_RQ_RUNTIME_NS: u64 = 1_000_000;

/// A group's `cpu.max`: a quota of CPU time per period, or none (`max`).
///
/// ```
/// use sched_core::group::bandwidth::CpuMax;
/// let m = CpuMax::parse("10000 100000", None).unwrap();
/// assert_eq!((m.quota_ns(), m.period_ns()), (Some(10_000_000), 100_000_000));
/// assert_eq!(m.to_string(), "10000 100000");
/// // A quota alone keeps the period it had.
/// assert_eq!(CpuMax::parse("max", Some(m)).unwrap().to_string(), "max 100000");
/// assert!(CpuMax::parse("500", None).is_err(), "below 1 ms");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CpuMax {
    quota_ns: Option<u64>,
    period_ns: u64,
}

impl CpuMax {
    /// No limit, the default period: a new group's.
    pub const UNLIMITED: CpuMax = CpuMax { quota_ns: None, period_ns: DEFAULT_PERIOD_NS };

    /// A quota (`None`: no limit) per period, checked as Linux checks them: a period of
    /// 1 ms..=1 s, a quota of at least 1 ms and at most [`MAX_QUOTA_NS`].
    pub const fn new(quota_ns: Option<u64>, period_ns: u64) -> Result<CpuMax, GroupError> {
        if period_ns < MIN_PERIOD_NS || period_ns > MAX_PERIOD_NS {
            return Err(GroupError::PeriodOutOfRange(period_ns));
        }
        if let Some(q) = quota_ns {
            if q < MIN_PERIOD_NS || q > MAX_QUOTA_NS {
                return Err(GroupError::QuotaOutOfRange(q));
            }
        }
        Ok(CpuMax { quota_ns, period_ns })
    }

    /// Reads `cpu.max`'s text: a quota in µs or `max`, then optionally a period in µs (none:
    /// `current`'s period, or the default).
    pub fn parse(text: &str, current: Option<CpuMax>) -> Result<CpuMax, GroupError> {
        let mut words = text.split_ascii_whitespace();
        let quota = match words.next() {
            Some("max") => None,
            Some(w) => Some(micros(w)?),
            None => return Err(GroupError::Malformed),
        };
        let period = match words.next() {
            Some(w) => micros(w)?,
            None => current.map_or(DEFAULT_PERIOD_NS, |c| c.period_ns),
        };
        if words.next().is_some() {
            return Err(GroupError::Malformed);
        }
        CpuMax::new(quota, period)
    }

    /// The quota per period (ns), if limited.
    pub const fn quota_ns(&self) -> Option<u64> {
        self.quota_ns
    }

    /// The period (ns).
    pub const fn period_ns(&self) -> u64 {
        self.period_ns
    }
}

impl Default for CpuMax {
    fn default() -> Self {
        Self::UNLIMITED
    }
}

/// As `cpu.max` shows it: the quota in µs or `max`, and the period in µs.
impl fmt::Display for CpuMax {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.quota_ns {
            Some(q) => write!(f, "{} {}", q / 1000, self.period_ns / 1000),
            None => write!(f, "max {}", self.period_ns / 1000),
        }
    }
}

/// µs as written in `cpu.max` (digits only: Linux's `%llu` takes no sign), in ns.
fn micros(w: &str) -> Result<u64, GroupError> {
    if !w.bytes().all(|b| b.is_ascii_digit()) {
        return Err(GroupError::Malformed);
    }
    let us: u64 = w.parse().map_err(|_| GroupError::Malformed)?;
    us.checked_mul(1000).ok_or(GroupError::Malformed)
}

/// `cpu.stat`'s bandwidth figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BandwidthStats {
    /// Periods that elapsed while the group's bandwidth was active (`nr_periods`).
    pub nr_periods: u64,
    /// Of those, the periods that ended with a runqueue of the group throttled
    /// (`nr_throttled`: periods, not throttle events).
    pub nr_throttled: u64,
    /// Time its runqueues spent throttled, summed over CPUs (ns; `throttled_usec` × 1000).
    pub throttled_ns: u64,
}

/// What a period's end decides for the group ([`Pool::period_end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeriodEnd {
    /// No limit, or a whole period passed with no runqueue of the group running or
    /// throttled: the period timer stops until a runqueue asks for runtime again.
    Stop,
    /// The pool is refilled; nothing is throttled.
    Refilled,
    /// The pool is refilled and runqueues are throttled: hand them runtime
    /// ([`Pool::give`], in the order they were throttled).
    Distribute,
}

/// A group's pool of runtime (`cfs_bandwidth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    limit: CpuMax,
    /// Runtime left in this period (ns).
    runtime: u64,
    /// The last period passed with no runtime taken.
    idle: bool,
    /// The period timer runs.
    active: bool,
    stats: BandwidthStats,
}

impl Pool {
    /// A pool for `limit`, full.
    pub const fn new(limit: CpuMax) -> Pool {
        Pool {
            limit,
            runtime: match limit.quota_ns {
                Some(q) => q,
                None => 0,
            },
            idle: false,
            active: false,
            stats: BandwidthStats { nr_periods: 0, nr_throttled: 0, throttled_ns: 0 },
        }
    }

    /// The limit.
    pub const fn limit(&self) -> CpuMax {
        self.limit
    }

    /// Runtime left in this period (ns).
    pub const fn runtime(&self) -> u64 {
        self.runtime
    }

    /// Whether the period timer runs: the platform (or the tick) calls [`Pool::period_end`]
    /// every period while it does.
    pub const fn active(&self) -> bool {
        self.active
    }

    /// `cpu.stat`'s figures.
    pub const fn stats(&self) -> BandwidthStats {
        self.stats
    }

    /// Takes up to `want` ns for a runqueue: all of it without a limit; else what the pool
    /// has, starting the period timer if it stopped. Returns the grant.
    pub fn take(&mut self, want: u64) -> u64 {
        if self.limit.quota_ns.is_none() {
            return want;
        }
        self.active = true;
        let grant = want.min(self.runtime);
        if grant > 0 {
            self.runtime -= grant;
            self.idle = false;
        }
        grant
    }

    /// The period timer fired `overrun` periods after the last time; `throttled`: whether a
    /// runqueue of the group is throttled. Refills the pool with the quota (no carry-over) and
    /// counts the periods.
    pub fn period_end(&mut self, overrun: u64, throttled: bool) -> PeriodEnd {
        let Some(quota) = self.limit.quota_ns else {
            self.active = false;
            return PeriodEnd::Stop;
        };
        self.stats.nr_periods = self.stats.nr_periods.saturating_add(overrun);
        if self.idle && !throttled {
            self.active = false;
            return PeriodEnd::Stop;
        }
        self.runtime = quota;
        if !throttled {
            // Stops after a whole period unused.
            self.idle = true;
            return PeriodEnd::Refilled;
        }
        self.stats.nr_throttled = self.stats.nr_throttled.saturating_add(overrun);
        self.idle = false;
        PeriodEnd::Distribute
    }

    /// Hands a throttled runqueue whose runtime is `remaining` (≤ 0) its deficit and a slice
    /// if it has tasks `queued`, its deficit and 1 ns if not, or what the pool has. Returns
    /// the grant; the runqueue goes on if it brings `remaining` above 0.
    ///
    /// Linux hands every runqueue just the deficit and 1 ns, and each runqueue let go takes
    /// its slice the moment it runs again, so the slices go in the order the runqueues were
    /// let go, the longest throttled first. Handing the slice here keeps that order where
    /// CPUs account at the same instant (the simulator, QEMU's deterministic mode), which
    /// would otherwise give the slices to the same CPUs every period and starve the others.
    /// A runqueue with nothing queued would never run its slice, nor give it back before a
    /// task came and went: it gets Linux's grant.
    pub fn give(&mut self, remaining: i64, queued: bool) -> u64 {
        let slice = if queued { SLICE_NS as i64 } else { 1 };
        let want = slice.saturating_sub(remaining.min(0)) as u64;
        if self.limit.quota_ns.is_none() {
            return want;
        }
        let grant = want.min(self.runtime);
        self.runtime -= grant;
        grant
    }

    /// A runqueue of the group emptied with `remaining` ns: all but [`MIN_RQ_RUNTIME_NS`] goes
    /// back to the pool. Returns what it keeps.
    pub fn give_back(&mut self, remaining: i64) -> i64 {
        let slack = remaining.saturating_sub(MIN_RQ_RUNTIME_NS as i64);
        if slack <= 0 {
            return remaining;
        }
        if self.limit.quota_ns.is_some() {
            self.runtime = self.runtime.saturating_add(slack as u64);
        }
        remaining - slack
    }

    /// A runqueue of the group was throttled for `ns` (counted when it is let go).
    pub fn throttled_for(&mut self, ns: u64) {
        self.stats.throttled_ns = self.stats.throttled_ns.saturating_add(ns);
    }

    /// Replaces the limit: the pool is refilled for it, and whether its last period went
    /// unused is kept (v5.7's `tg_set_cfs_bandwidth` leaves `idle`). Each runqueue of the
    /// group starts over too ([`RqRuntime::reset`]).
    pub fn set_limit(&mut self, limit: CpuMax) {
        *self = Pool { stats: self.stats, idle: self.idle, ..Pool::new(limit) };
    }
}

/// One CPU's runtime of a group with a limit (`runtime_remaining` of a group runqueue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RqRuntime {
    /// Runtime left (ns); at or below 0 the runqueue must take more or be throttled.
    pub remaining: i64,
    /// The runqueue is throttled: its entity is off its parent's runqueue.
    pub throttled: bool,
    /// When it was throttled (the runqueue clock, ns).
    pub throttled_at: u64,
}

impl RqRuntime {
    /// Charges `delta` ns of running (`__account_cfs_rq_runtime`); when the runtime runs out
    /// it takes a slice's worth from `pool`. Returns whether it still has runtime: `false`
    /// asks for a reschedule, and the runqueue is throttled when its current entity is put
    /// back ([`RqRuntime::must_throttle`]).
    pub fn charge(&mut self, delta: u64, pool: &mut Pool) -> bool {
        // (Saturating: the fields are public, and any `delta` is taken.)
        self.remaining = self.remaining.saturating_sub(i64::try_from(delta).unwrap_or(i64::MAX));
        if self.remaining > 0 || self.throttled {
            return self.remaining > 0;
        }
        let want = (SLICE_NS as i64).saturating_sub(self.remaining) as u64;
        self.remaining = self.remaining.saturating_add(i64::try_from(pool.take(want)).unwrap_or(i64::MAX));
        self.remaining > 0
    }

    /// Whether the runqueue, not yet throttled, has no runtime left (`check_cfs_rq_runtime`).
    pub fn must_throttle(&self) -> bool {
        !self.throttled && self.remaining <= 0
    }

    /// Starts over after the group's limit changed at `now`: no runtime, and let go if it was
    /// throttled (the time counted in `pool`'s statistics), as Linux does when `cpu.max` is
    /// written.
    pub fn reset(&mut self, now: u64, pool: &mut Pool) {
        if self.throttled {
            self.unthrottle(now, 0, pool);
        }
        self.remaining = 0;
    }

    /// Throttles it at `now`.
    pub fn throttle(&mut self, now: u64) {
        self.throttled = true;
        self.throttled_at = now;
    }

    /// Lets it go on at `now` with `grant` more runtime; the time it spent throttled is
    /// counted in `pool`'s statistics. One not throttled only gets the runtime.
    pub fn unthrottle(&mut self, now: u64, grant: u64, pool: &mut Pool) {
        self.remaining = self.remaining.saturating_add(i64::try_from(grant).unwrap_or(i64::MAX));
        if core::mem::take(&mut self.throttled) {
            pool.throttled_for(now.saturating_sub(self.throttled_at));
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    /// Any value the types take is taken: runtime saturates, never wraps or panics.
    #[test]
    fn extreme_values_saturate() {
        for limit in [CpuMax::UNLIMITED, CpuMax::parse("5000 100000", None).unwrap()] {
            let mut pool = Pool::new(limit);
            let grant = pool.give(i64::MIN, true);
            assert!(grant > 0 || limit.quota_ns().is_some());
            assert!(pool.give_back(i64::MIN) == i64::MIN && pool.give_back(i64::MAX) > 0);
            pool.throttled_for(u64::MAX);
            pool.throttled_for(u64::MAX);
            let mut rq = RqRuntime { remaining: i64::MIN + 1, ..RqRuntime::default() };
            assert!(!rq.charge(u64::MAX, &mut pool) && rq.remaining <= 0);
            let mut rq = RqRuntime { remaining: i64::MAX, ..RqRuntime::default() };
            assert!(rq.charge(1, &mut pool));
        }
    }

    /// cpu.max's text: each bound as Linux checks it; anything but one or two numbers (or
    /// `max`) refused, which is stricter than Linux (its `sscanf` ignores a third word and
    /// keeps the period for a second word that is no number, and reads `1000abc` as 1000).
    #[test]
    fn cpu_max_reads_as_linux_and_refuses_more() {
        let m = CpuMax::parse("1000", None).unwrap();
        assert_eq!((m.quota_ns(), m.period_ns()), (Some(1_000_000), DEFAULT_PERIOD_NS));
        assert_eq!(CpuMax::parse("max", None).unwrap(), CpuMax::UNLIMITED);
        assert_eq!(CpuMax::parse("3000 10000", None).unwrap().to_string(), "3000 10000");
        assert_eq!(CpuMax::parse("999 10000", None), Err(GroupError::QuotaOutOfRange(999_000)));
        assert_eq!(CpuMax::parse("1000 999", None), Err(GroupError::PeriodOutOfRange(999_000)));
        assert_eq!(CpuMax::parse("1000 1000001", None), Err(GroupError::PeriodOutOfRange(1_000_001_000)));
        for bad in ["", "ten", "1000 x", "1000 10000 5", "-5", "+1000", "1000 +10000", "1000abc"] {
            assert_eq!(CpuMax::parse(bad, None), Err(GroupError::Malformed), "{bad:?}");
        }
        // A quota above its period is allowed (several CPUs' worth).
        assert!(CpuMax::parse("200000 100000", None).is_ok());
    }

    /// A runqueue charged for running takes slices from the pool until it is empty, is
    /// throttled, and a refill lets it go on with its deficit met and a slice: over a period
    /// it runs its quota, no more.
    #[test]
    fn a_runqueue_runs_its_quota_per_period() {
        // 10 ms per 100 ms.
        let mut pool = Pool::new(CpuMax::new(Some(10_000_000), 100_000_000).unwrap());
        let mut rq = RqRuntime::default();
        let mut ran = 0u64;
        // 1 ms ticks until the runqueue must be throttled.
        while rq.charge(1_000_000, &mut pool) {
            ran += 1_000_000;
        }
        ran += 1_000_000;
        assert_eq!(ran, 10_000_000, "the quota, a slice at a time");
        assert!(rq.must_throttle());
        rq.throttle(10_000_000);
        assert_eq!(pool.period_end(1, true), PeriodEnd::Distribute);
        let grant = pool.give(rq.remaining, true);
        rq.unthrottle(100_000_000, grant, &mut pool);
        assert_eq!(rq.remaining, SLICE_NS as i64, "its deficit met and a slice");
        assert_eq!(pool.runtime(), 10_000_000 - grant);
        assert_eq!(
            pool.stats(),
            BandwidthStats { nr_periods: 1, nr_throttled: 1, throttled_ns: 90_000_000 },
            "one period, throttled for the rest of it"
        );
    }

    /// An unused pool stops its timer after one idle period, and a take restarts it.
    #[test]
    fn the_timer_stops_when_idle() {
        let mut pool = Pool::new(CpuMax::new(Some(5_000_000), 10_000_000).unwrap());
        assert_eq!(pool.take(1_000_000), 1_000_000);
        assert!(pool.active());
        assert_eq!(pool.period_end(1, false), PeriodEnd::Refilled);
        assert_eq!(pool.runtime(), 5_000_000, "refilled to the quota, no carry-over");
        assert_eq!(pool.period_end(1, false), PeriodEnd::Stop);
        assert!(!pool.active());
        pool.take(1);
        assert!(pool.active());
        assert_eq!(pool.stats().nr_periods, 2);
        // No limit: everything is granted and nothing counted.
        let mut free = Pool::new(CpuMax::UNLIMITED);
        assert_eq!(free.take(u64::MAX / 2), u64::MAX / 2);
        assert_eq!(free.give(-5, true), SLICE_NS + 5, "a deficit and a slice are always met");
        assert_eq!(free.give(-5, false), 6, "an empty runqueue's deficit and 1 ns");
        assert_eq!(free.period_end(1, false), PeriodEnd::Stop);
        // A new limit lets a throttled runqueue go, with no runtime.
        let mut rq = RqRuntime { remaining: -3, throttled: true, throttled_at: 10 };
        pool.set_limit(CpuMax::UNLIMITED);
        rq.reset(50, &mut pool);
        assert_eq!((rq.remaining, rq.throttled, pool.stats().throttled_ns), (0, false, 40));
    }

    /// An emptied runqueue keeps 1 ms and gives the rest back.
    #[test]
    fn slack_goes_back_to_the_pool() {
        let mut pool = Pool::new(CpuMax::new(Some(20_000_000), 100_000_000).unwrap());
        let mut rq = RqRuntime::default();
        assert!(rq.charge(0, &mut pool));
        assert_eq!(rq.remaining, SLICE_NS as i64);
        rq.remaining = pool.give_back(rq.remaining);
        assert_eq!(rq.remaining, MIN_RQ_RUNTIME_NS as i64);
        assert_eq!(pool.runtime(), 20_000_000 - SLICE_NS + (SLICE_NS - MIN_RQ_RUNTIME_NS));
    }

    /// Any value the types take is taken: the period counts saturate however late the timer
    /// runs, a grant larger than any runtime saturates, and a second let-go counts no
    /// throttled time again.
    #[test]
    fn extreme_counts_and_grants_saturate() {
        let mut pool = Pool::new(CpuMax::new(Some(10_000_000), 100_000_000).unwrap());
        let mut rq = RqRuntime::default();
        assert!(!rq.charge(20_000_000, &mut pool) || pool.runtime() == 0);
        rq.throttle(1_000);
        for _ in 0..2 {
            assert_eq!(pool.period_end(u64::MAX, true), PeriodEnd::Distribute);
        }
        assert_eq!((pool.stats().nr_periods, pool.stats().nr_throttled), (u64::MAX, u64::MAX));
        let owed = rq.remaining;
        assert!(owed <= 0);
        rq.unthrottle(5_000, u64::MAX, &mut pool);
        assert_eq!((rq.remaining, rq.throttled), (i64::MAX + owed, false), "no wrap to a debt");
        rq.unthrottle(5_000, u64::MAX, &mut pool);
        assert_eq!(rq.remaining, i64::MAX);
        assert_eq!(pool.stats().throttled_ns, 4_000);
        rq.unthrottle(9_000, u64::MAX, &mut pool);
        assert_eq!(pool.stats().throttled_ns, 4_000, "not throttled: no time counted");
    }
}
