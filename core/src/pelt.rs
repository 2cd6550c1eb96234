//! PELT: per-entity load tracking, in exact fixed point (docs/linux-v5.7.md §2).
//!
//! Time is counted in 1024 ns units; every 1024 units (≈ 1 ms) is a *period*, and a
//! contribution made `n` periods ago weighs `y^n` with `y^32 = 1/2`. Each tracked object (a
//! task or a runqueue) keeps three geometric sums — load, runnable and util — and their
//! averages, which are recomputed only when a period boundary is crossed. This module holds
//! the arithmetic and the attach / detach / removed bookkeeping; *when* to call it (enqueue,
//! dequeue, tick, pick) is decided by the runqueue.
//!
#![cfg_attr(feature = "internals", doc = "```")]
#![cfg_attr(not(feature = "internals"), doc = "```ignore")]
//! use sched_core::pelt::{decay_load, SchedAvg};
//! assert_eq!(decay_load(1024, 32), 511); // not 512: the table's entry 0 is 2^32 - 1
//! let mut a = SchedAvg::default();
//! // A nice-0 task that runs for 32 periods from zero reaches util 512.
//! let now = 32 * 1024 * 1024;
//! assert!(a.update_sum(now, 1, 1, true));
//! a.update_avg(1024);
//! assert_eq!(a.util_avg, 512);
//! ```

use crate::weights::saturate_u32;

/// Half-life of the decay, in periods.
pub const LOAD_AVG_PERIOD: u64 = 32;
/// The converged maximum of a sum that gains 1024 every period.
pub const LOAD_AVG_MAX: u64 = 47742;
/// Fixed-point shift of capacities and utilisation.
pub const SCHED_CAPACITY_SHIFT: u32 = 10;
/// Capacity of the biggest CPU, and the utilisation of an always-running task.
pub const SCHED_CAPACITY_SCALE: u64 = 1 << SCHED_CAPACITY_SHIFT;
/// Bit 0 of `util_est.enqueued`: the task's util_avg has not changed since it was enqueued.
pub const UTIL_AVG_UNCHANGED: u32 = 1;
/// `util_est.ewma` moves by 1/4 of the difference each time (shift 2).
pub const UTIL_EST_WEIGHT_SHIFT: u32 = 2;
/// Changes of util_est smaller than 1% of capacity are ignored.
pub const UTIL_EST_MARGIN: i64 = (SCHED_CAPACITY_SCALE / 100) as i64;

/// `floor((2^32 - 1) · y^n)` for n = 0..31.
pub const RUNNABLE_AVG_YN_INV: [u32; 32] = [
    0xffffffff, 0xfa83b2da, 0xf5257d14, 0xefe4b99a, 0xeac0c6e6, 0xe5b906e6, 0xe0ccdeeb, 0xdbfbb796,
    0xd744fcc9, 0xd2a81d91, 0xce248c14, 0xc9b9bd85, 0xc5672a10, 0xc12c4cc9, 0xbd08a39e, 0xb8fbaf46,
    0xb504f333, 0xb123f581, 0xad583ee9, 0xa9a15ab4, 0xa5fed6a9, 0xa2704302, 0x9ef5325f, 0x9b8d39b9,
    0x9837f050, 0x94f4efa8, 0x91c3d373, 0x8ea4398a, 0x8b95c1e3, 0x88980e80, 0x85aac367, 0x82cd8698,
];

/// `val · y^n`, exactly as the kernel rounds it; 0 beyond 63 half-lives.
pub const fn decay_load(val: u64, n: u64) -> u64 {
    Decay::over(n).apply(val)
}

/// `y^n` for one `n`, in the form [`decay_load`] applies it: halve `n / 32` times, then
/// multiply by the table's `y^(n % 32)`. An update decays three sums and two segment terms
/// over the same `n`, so it finds the factor once.
#[derive(Clone, Copy)]
struct Decay {
    /// Whole half-lives: the value is shifted right this far first.
    halvings: u32,
    /// `RUNNABLE_AVG_YN_INV[n % 32]`, or 0 beyond 63 half-lives (everything decays away).
    factor: u32,
}

impl Decay {
    /// The factor for `n` periods.
    #[inline(always)]
    const fn over(n: u64) -> Decay {
        if n > LOAD_AVG_PERIOD * 63 {
            return Decay { halvings: 0, factor: 0 };
        }
        Decay { halvings: (n / LOAD_AVG_PERIOD) as u32, factor: RUNNABLE_AVG_YN_INV[(n % LOAD_AVG_PERIOD) as usize] }
    }

    /// `val · y^n`.
    #[inline(always)]
    const fn apply(self, val: u64) -> u64 {
        (((val >> self.halvings) as u128 * self.factor as u128) >> 32) as u64
    }
}

/// The contribution of the crossed boundaries (`decay`: `y^periods`): the rest of the old
/// period (`d1`, decayed), the full periods in between (closed form), and the new partial
/// period (`d3`).
#[inline(always)]
const fn accumulate_segments(decay: Decay, d1: u64, d3: u64) -> u64 {
    let c1 = decay.apply(d1);
    let c2 = LOAD_AVG_MAX - decay.apply(LOAD_AVG_MAX) - 1024;
    c1 + c2 + d3
}

/// For each `period_contrib` `p` (0..1024), `⌈2^64 / d⌉` of its divider
/// `d = LOAD_AVG_MAX - 1024 + p`: for every 32-bit `n`, `n / d` is the high 64 bits of
/// `n · ⌈2^64 / d⌉` (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019:
/// exact for N-bit numerators and divisors with a 2N-bit reciprocal). 8 KiB, on 64-bit
/// targets only; 32-bit ones divide.
#[cfg(target_pointer_width = "64")]
const DIVIDER_RECIPROCALS: [u64; 1024] = {
    let mut t = [0; 1024];
    let mut p = 0;
    while p < 1024 {
        // (No divider is a power of two, so ⌈2^64 / d⌉ = ⌊(2^64 - 1) / d⌋ + 1.)
        t[p] = u64::MAX / (LOAD_AVG_MAX - 1024 + p as u64) + 1;
        p += 1;
    }
    t
};

/// `a - b` clamped at 0, as the kernel's `sub_positive`.
fn sub_positive(a: &mut u64, b: u64) {
    *a = a.saturating_sub(b);
}

/// Estimated utilisation of a task, or the sum over a runqueue's runnable tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UtilEst {
    /// Task: util_avg at the last dequeue, with bit 0 = [`UTIL_AVG_UNCHANGED`].
    /// Runqueue: Σ of its runnable tasks' estimates.
    pub enqueued: u32,
    /// Task: exponentially weighted moving average of `enqueued`.
    pub ewma: u32,
}

impl UtilEst {
    /// No estimate (usable in `const` contexts).
    pub const ZERO: UtilEst = UtilEst { enqueued: 0, ewma: 0 };

    /// `max(ewma, enqueued) | UTIL_AVG_UNCHANGED`: what a task adds to its runqueue's sum.
    /// (Inline where code size allows: every enqueue and dequeue of a task calls it.)
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn task_estimate(&self) -> u32 {
        self.ewma.max(self.enqueued) | UTIL_AVG_UNCHANGED
    }

    /// `task_util_est` of a task whose util_avg is `util_avg` and whose estimate this is: the
    /// larger of the two.
    pub fn task_util_est(&self, util_avg: u64) -> u64 {
        util_avg.max(self.task_estimate() as u64)
    }
}

/// Whole 1024 ns units from PELT time `last` to `now`; `None` if the clock went backwards.
/// [`SchedAvg::update_sum`] changes nothing at `Some(0)`.
#[inline]
pub(crate) fn elapsed_units(last: u64, now: u64) -> Option<u64> {
    now.checked_sub(last).map(|d| d >> 10)
}

/// The fields of [`SchedAvg`], declared once: each row is a field (its docs, type, and the
/// widest value a task's must hold) and how a task's entity cell stores it.
/// `sched_avg_fields!(gen)` hands the rows to the generator `gen`: `sched_avg_struct` below
/// makes [`SchedAvg`], `avg_cell` in the `relaxed` module the cell's copy of it.
macro_rules! sched_avg_fields {
    ($gen:ident) => {
        $gen! {
            /// PELT clock (ns) of the last update, advanced in whole 1024 ns units. 0 marks a
            /// task that is not attached to any runqueue ("migrated").
            last_update_time: u64 = u64::MAX; Word64;
            /// Σ load · contribution (weighted by the caller's load argument).
            load_sum: u64 = u64::MAX - 1; Word64;
            /// Σ runnable · contribution · 1024.
            runnable_sum: u64 = u64::MAX - 2; Word64;
            /// Σ running · contribution · 1024 (32 bits, as Linux keeps it).
            util_sum: u32 = u32::MAX; AtomicU32;
            /// Units already accumulated in the current, unfinished period (< 1024).
            period_contrib: u32 = u32::MAX - 1; AtomicU32;
            /// load_sum scaled to an average (× the weight for a task).
            load_avg: u64 = u64::MAX - 3; Word64;
            /// Average number of runnable tasks × 1024 (a runqueue's may exceed 1024).
            runnable_avg: u64 = u64::MAX - 4; Word64;
            /// Average running fraction × 1024.
            util_avg: u64 = u64::MAX - 5; Word64;
            /// Estimated utilisation (see [`UtilEst`]).
            util_est: UtilEst = UtilEst { enqueued: u32::MAX - 2, ewma: u32::MAX - 3 }; UtilEstCell;
        }
    };
}
pub(crate) use sched_avg_fields;

/// Makes [`SchedAvg`] from the rows of `sched_avg_fields!`.
macro_rules! sched_avg_struct {
    ($($(#[doc = $doc:literal])* $field:ident: $ty:ty = $widest:expr; $store:ty;)*) => {
        /// The PELT signals of one task or runqueue.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct SchedAvg {
            $($(#[doc = $doc])* pub $field: $ty,)*
        }

        impl SchedAvg {
            /// Every field at the widest value a task's must hold (the round-trip tests').
            #[cfg(test)]
            pub(crate) const WIDEST: SchedAvg = SchedAvg { $($field: $widest,)* };
        }
    };
}

sched_avg_fields!(sched_avg_struct);

impl SchedAvg {
    /// All signals zero (usable in `const` contexts).
    pub const ZERO: SchedAvg = SchedAvg {
        last_update_time: 0,
        load_sum: 0,
        runnable_sum: 0,
        util_sum: 0,
        period_contrib: 0,
        load_avg: 0,
        runnable_avg: 0,
        util_avg: 0,
        util_est: UtilEst::ZERO,
    };

    /// `LOAD_AVG_MAX - 1024 + period_contrib`: the maximum the sums can hold right now.
    pub fn divider(&self) -> u64 {
        LOAD_AVG_MAX - 1024 + self.period_contrib as u64
    }

    /// Accumulates `delta_units` (1024 ns units) with the given inputs; returns the number
    /// of period boundaries crossed.
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn accumulate(&mut self, delta_units: u64, load: u64, runnable: u64, running: bool) -> u64 {
        let mut contrib = delta_units;
        let d = delta_units + self.period_contrib as u64;
        let periods = d / 1024;
        let rest = d % 1024;
        if periods > 0 {
            let decay = Decay::over(periods);
            self.load_sum = decay.apply(self.load_sum);
            self.runnable_sum = decay.apply(self.runnable_sum);
            self.util_sum = decay.apply(self.util_sum as u64) as u32;
            if load != 0 {
                contrib = accumulate_segments(decay, 1024 - self.period_contrib as u64, rest);
            }
        }
        self.period_contrib = rest as u32;
        if load != 0 {
            self.load_sum += load * contrib;
        }
        if runnable != 0 {
            self.runnable_sum += (runnable * contrib) << SCHED_CAPACITY_SHIFT;
        }
        if running {
            self.util_sum = saturate_u32(self.util_sum as u64 + (contrib << SCHED_CAPACITY_SHIFT));
        }
        periods
    }

    /// Brings the sums up to PELT time `now` (ns). Returns true when a period boundary was
    /// crossed, i.e. when the averages must be recomputed with [`SchedAvg::update_avg`].
    /// A clock that went backwards resets `last_update_time` and changes nothing else.
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn update_sum(&mut self, now: u64, load: u64, runnable: u64, running: bool) -> bool {
        let Some(units) = elapsed_units(self.last_update_time, now) else {
            self.last_update_time = now;
            return false;
        };
        if units == 0 {
            return false;
        }
        self.last_update_time += units << 10;
        // Without load nothing is runnable or running (a blocked entity).
        let (runnable, running) = if load == 0 { (0, false) } else { (runnable, running) };
        self.accumulate(units, load, runnable, running) > 0
    }

    /// Recomputes the averages from the sums; `load_factor` is the task's down-scaled weight
    /// (or 1 for a runqueue, whose load argument is already weighted).
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn update_avg(&mut self, load_factor: u64) {
        self.load_avg = match load_factor.checked_mul(self.load_sum) {
            Some(p) => self.per_divider(p),
            None => mul_div_wide(load_factor, self.load_sum, self.divider()),
        };
        self.runnable_avg = self.per_divider(self.runnable_sum);
        self.util_avg = self.per_divider(self.util_sum as u64);
    }

    /// `n / self.divider()`. On 64-bit targets a numerator of 32 bits (a task's sums, and a
    /// runqueue's of a few tasks) is divided by a multiplication with the divider's
    /// [`DIVIDER_RECIPROCALS`] entry instead: the same quotient, without the division
    /// instruction's tens of cycles, three times per update.
    #[inline(always)]
    fn per_divider(&self, n: u64) -> u64 {
        #[cfg(target_pointer_width = "64")]
        if let (Ok(n32), Some(&c)) = (u32::try_from(n), DIVIDER_RECIPROCALS.get(self.period_contrib as usize)) {
            return ((u128::from(c) * u128::from(n32)) >> 64) as u64;
        }
        n / self.divider()
    }

    /// Updates a task's signals: `on_rq` drives load and runnable, `running` drives util.
    /// Returns true when the averages changed; then the util_est "unchanged" flag is
    /// cleared, so the next dequeue samples the new value.
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn update_task(&mut self, now: u64, weight: u64, on_rq: bool, running: bool) -> bool {
        if self.update_sum(now, on_rq as u64, on_rq as u64, running) {
            self.update_avg(weight);
            self.util_est.enqueued &= !UTIL_AVG_UNCHANGED;
            true
        } else {
            false
        }
    }

    /// Decays a blocked task's signals up to `now` (used to sync before a migration). Unlike
    /// [`SchedAvg::update_task`] it leaves util_est's "unchanged" flag as it is, as v5.7's
    /// `__update_load_avg_blocked_se` does: a sync is no new sample of the task's utilisation.
    pub fn update_blocked_task(&mut self, now: u64, weight: u64) -> bool {
        if self.update_sum(now, 0, 0, false) {
            self.update_avg(weight);
            true
        } else {
            false
        }
    }

    /// Updates a runqueue's signals: load = its summed weight (down-scaled), runnable = its
    /// number of runnable tasks, running = whether a fair task is current.
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn update_rq(&mut self, now: u64, load: u64, h_nr_running: u64, running: bool) -> bool {
        if self.update_sum(now, load, h_nr_running, running) {
            self.update_avg(1);
            true
        } else {
            false
        }
    }

    /// Attaches a task's signals to this runqueue's: aligns the task to the runqueue's
    /// clock and period, rebuilds its sums from its averages, and adds both.
    pub fn attach(&mut self, se: &mut SchedAvg, se_weight: u64) {
        let divider = self.divider();
        se.last_update_time = self.last_update_time;
        se.period_contrib = self.period_contrib;
        se.util_sum = saturate_u32(se.util_avg * divider);
        se.runnable_sum = se.runnable_avg * divider;
        se.load_sum = (se.load_avg * divider).checked_div(se_weight).unwrap_or(divider);
        self.load_avg += se.load_avg;
        self.load_sum += se_weight * se.load_sum;
        self.util_avg += se.util_avg;
        self.util_sum = saturate_u32(self.util_sum as u64 + se.util_sum as u64);
        self.runnable_avg += se.runnable_avg;
        self.runnable_sum += se.runnable_sum;
    }

    /// Removes a task's signals from this runqueue's at once (clamped at 0).
    pub fn detach(&mut self, se: &SchedAvg, se_weight: u64) {
        sub_positive(&mut self.load_avg, se.load_avg);
        sub_positive(&mut self.load_sum, se_weight * se.load_sum);
        sub_positive(&mut self.util_avg, se.util_avg);
        self.util_sum = self.util_sum.saturating_sub(se.util_sum);
        sub_positive(&mut self.runnable_avg, se.runnable_avg);
        sub_positive(&mut self.runnable_sum, se.runnable_sum);
    }

    /// Applies what accumulated in `removed` (tasks that left while blocked): subtracts the
    /// averages and `avg · divider` from the sums. Returns true if anything was removed.
    pub fn apply_removed(&mut self, removed: &mut Removed) -> bool {
        if removed.nr == 0 {
            return false;
        }
        let r = core::mem::take(removed);
        let divider = self.divider();
        sub_positive(&mut self.load_avg, r.load_avg);
        sub_positive(&mut self.load_sum, r.load_avg * divider);
        sub_positive(&mut self.util_avg, r.util_avg);
        self.util_sum = saturate_u32((self.util_sum as u64).saturating_sub(r.util_avg * divider));
        sub_positive(&mut self.runnable_avg, r.runnable_avg);
        sub_positive(&mut self.runnable_sum, r.runnable_avg * divider);
        true
    }
}

/// Signals of tasks that left a runqueue while blocked (woke elsewhere or exited), to be
/// subtracted lazily at the runqueue's next update — the owner of the runqueue's lock may be
/// another CPU than the one that noticed the departure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Removed {
    /// Number of departures recorded.
    pub nr: u32,
    /// Σ load_avg.
    pub load_avg: u64,
    /// Σ util_avg.
    pub util_avg: u64,
    /// Σ runnable_avg.
    pub runnable_avg: u64,
}

impl Removed {
    /// Records a departing task's averages.
    pub fn add(&mut self, se: &SchedAvg) {
        self.nr += 1;
        self.load_avg += se.load_avg;
        self.util_avg += se.util_avg;
        self.runnable_avg += se.runnable_avg;
    }
}

/// A new task's signals at creation (`init_entity_runnable_average`): everything zero but
/// load_avg, which starts at the full weight so the task is born "heavy".
pub fn init_task_avg(weight_down: u64) -> SchedAvg {
    SchedAvg { load_avg: weight_down, ..SchedAvg::default() }
}

/// The initial util_avg of a new task placed on a runqueue (`post_init_entity_util_avg`):
/// half the CPU's spare capacity, or an extrapolation from the runqueue's util per load if
/// that is smaller. `se_weight_hi` is the task's *high-resolution* weight, as the kernel
/// uses it (docs/linux-v5.7.md §2 observes that this makes the cap win almost always).
pub fn initial_util(cpu_scale: u64, rq: &SchedAvg, se_weight_hi: u64) -> u64 {
    let cap = (cpu_scale as i64 - rq.util_avg as i64) / 2;
    if cap <= 0 {
        return 0;
    }
    let cap = cap as u64;
    if rq.util_avg != 0 {
        let extrapolated = match rq.load_avg.checked_add(1) {
            Some(d) => mul_div(rq.util_avg, se_weight_hi, d),
            // Dividing by 2^64.
            None => ((u128::from(rq.util_avg) * u128::from(se_weight_hi)) >> 64) as u64,
        };
        extrapolated.min(cap)
    } else {
        cap
    }
}

/// What a runqueue's `util_est.enqueued` becomes when a task with estimate `task` joins.
#[cfg_attr(target_pointer_width = "64", inline)]
pub fn util_est_add(rq: &mut UtilEst, task: &UtilEst) {
    rq.enqueued += task.task_estimate();
}

/// What it becomes when the task leaves (saturating).
#[cfg_attr(target_pointer_width = "64", inline)]
pub fn util_est_sub(rq: &mut UtilEst, task: &UtilEst) {
    rq.enqueued -= rq.enqueued.min(task.task_estimate());
}

/// Samples a task's util_avg into its estimate when it goes to sleep (`util_est_dequeue`
/// for a sleeping task): skip if util_avg is unchanged since the last sample; jump up at
/// once with `fastup`; ignore changes under 1% of capacity; ignore samples above the CPU's
/// original capacity (they are capped, not measured); else move the ewma by a quarter.
pub fn util_est_sample(ue: &mut UtilEst, task_util: u64, capacity_orig: u64, fastup: bool) {
    if ue.enqueued & UTIL_AVG_UNCHANGED != 0 {
        return;
    }
    let mut new = *ue;
    new.enqueued = (task_util as u32) | UTIL_AVG_UNCHANGED;
    if fastup && new.ewma < new.enqueued {
        new.ewma = new.enqueued;
        *ue = new;
        return;
    }
    let diff = new.enqueued as i64 - new.ewma as i64;
    if diff.abs() < UTIL_EST_MARGIN {
        return;
    }
    if task_util > capacity_orig {
        return;
    }
    new.ewma = ((((new.ewma as i64) << UTIL_EST_WEIGHT_SHIFT) + diff) >> UTIL_EST_WEIGHT_SHIFT) as u32;
    *ue = new;
}

/// `a * b / d` (`d` taken as at least 1), the quotient's low 64 bits: in 64-bit arithmetic
/// whenever the product fits (it does for every realistic weight and sum), else by
/// [`mul_div_wide`].
fn mul_div(a: u64, b: u64, d: u64) -> u64 {
    let d = d.max(1);
    match a.checked_mul(b) {
        Some(p) => p / d,
        None => mul_div_wide(a, b, d),
    }
}

/// The low 64 bits of `a * b / d` for `d > 0`, by binary long division of the 128-bit
/// product. A `u128` division would be the same number, but on 32-bit targets the compiler
/// expands each one inline into several hundred bytes; this rare path needs none.
#[inline(never)]
fn mul_div_wide(a: u64, b: u64, d: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    let (hi, lo) = ((p >> 64) as u64, p as u64);
    let (mut rem, mut quot) = (0u64, 0u64);
    for i in (0..128).rev() {
        let bit = if i >= 64 { (hi >> (i - 64)) & 1 } else { (lo >> i) & 1 };
        // The remainder stays below `d`, so doubling it overflows 64 bits only when the
        // doubled value (2^64 + rem) certainly exceeds `d`; the wrapping subtraction is then
        // exact.
        let carry = rem >> 63;
        rem = (rem << 1) | bit;
        quot <<= 1;
        if carry != 0 || rem >= d {
            rem = rem.wrapping_sub(d);
            quot |= 1;
        }
    }
    quot
}

#[cfg(test)]
mod tests;
