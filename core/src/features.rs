//! Run-time behaviour switches, in the spirit of Linux's `sched_features`, and the
//! tunables of the fair class.
//!
//! One binary runs with any combination: a platform parses them from its command line
//! (`Features::parse_list("NO_UTIL_PULL_SKIPS_LONE_TASK")`) and the core reads them on
//! every decision, so an A/B experiment toggles them between runs of the same image.

use bitflags::bitflags;

use crate::error::SchedError;

bitflags! {
    /// Behaviour switches. [`Features::default`] is Linux v5.7's default set plus this
    /// project's switch for the seed patch, which is on.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Features: u32 {
        /// A new task starts one virtual slice after `min_vruntime`, so forking cannot be
        /// used to get an immediate fresh share.
        const START_DEBIT = 1 << 0;
        /// A waking sleeper is credited only half a latency period (else a full one).
        const GENTLE_FAIR_SLEEPERS = 1 << 1;
        /// A waking task may preempt the running one if it is far enough behind in vruntime.
        const WAKEUP_PREEMPTION = 1 << 2;
        /// After a wakeup preemption on a busy queue, prefer to give the CPU back to the
        /// preempted task ("last" buddy).
        const LAST_BUDDY = 1 << 3;
        /// Mark every wakee as the "next" buddy, not only those that preempt (off in Linux).
        const NEXT_BUDDY = 1 << 4;
        /// A task that is a buddy on the destination is treated as cache hot by the balancer.
        const CACHE_HOT_BUDDY = 1 << 5;
        /// Track per-task estimated utilisation (`util_est`) and use it in `cpu_util`.
        const UTIL_EST = 1 << 6;
        /// A task's `util_est.ewma` jumps up at once when its utilisation grows.
        const UTIL_EST_FASTUP = 1 << 7;
        /// The seed patch (Linux c32b4308): when the balancer looks for the busiest
        /// runqueue to pull *utilisation* from (migrate_util), skip runqueues with at most
        /// one running fair task, since a lone running task cannot be detached.
        const UTIL_PULL_SKIPS_LONE_TASK = 1 << 8;
        /// EEVDF (Linux 6.6+) instead of CFS's pick: the eligible task (lag ≥ 0 against the
        /// load-weighted average vruntime) with the earliest virtual deadline runs; lag is
        /// kept across sleep, migration and reweight; slices are per task. Off by default.
        /// Needs the `eevdf` cargo feature.
        #[cfg(feature = "eevdf")]
        const EEVDF = 1 << 9;
        /// Under EEVDF, a sleeper keeps the negative lag it left with however long it sleeps
        /// (Linux 6.6). Off by default: the debt is paid off as the runqueue's average passes
        /// the sleeper's vruntime, and it wakes owing at most what is still unpaid (the effect
        /// on lag of Linux 6.12's DELAY_DEQUEUE, which keeps such a sleeper queued until its
        /// lag is zero).
        #[cfg(feature = "eevdf")]
        const SLEEPER_KEEPS_LAG = 1 << 10;
    }
}

impl Default for Features {
    fn default() -> Self {
        Features::DEFAULT
    }
}

impl Features {
    /// Linux v5.7's default set plus the seed's rule (usable in `const` contexts).
    pub const DEFAULT: Features = Features::START_DEBIT
        .union(Features::GENTLE_FAIR_SLEEPERS)
        .union(Features::WAKEUP_PREEMPTION)
        .union(Features::LAST_BUDDY)
        .union(Features::CACHE_HOT_BUDDY)
        .union(Features::UTIL_EST)
        .union(Features::UTIL_EST_FASTUP)
        .union(Features::UTIL_PULL_SKIPS_LONE_TASK);
}

/// A feature name that [`Features::apply`] does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct UnknownFeature;

/// Why [`Features::parse_list`] refuses a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FeatureListError {
    /// A name that is no switch.
    Unknown,
    /// A switch named twice (as `X` or `NO_X`): the list would set it both ways, or say the
    /// same thing twice, where a list that is read sets each switch once.
    Twice,
}

impl core::fmt::Display for FeatureListError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            FeatureListError::Unknown => "an unknown feature switch",
            FeatureListError::Twice => "a feature switch named twice (as X or NO_X)",
        })
    }
}

impl core::error::Error for FeatureListError {}

impl Features {
    /// Applies one switch written the way Linux's `sched_features` file takes it:
    /// `NAME` turns it on, `NO_NAME` turns it off.
    ///
    /// ```
    /// use sched_core::Features;
    /// let mut f = Features::default();
    /// f.apply("NO_UTIL_PULL_SKIPS_LONE_TASK").unwrap();
    /// assert!(!f.contains(Features::UTIL_PULL_SKIPS_LONE_TASK));
    /// assert!(f.apply("NO_SUCH_THING").is_err());
    /// ```
    pub fn apply(&mut self, word: &str) -> Result<(), UnknownFeature> {
        let (flag, on) = Features::switch(word)?;
        self.set(flag, on);
        Ok(())
    }

    /// The switch `word` names (`NAME` or `NO_NAME`) and whether it turns it on.
    ///
    /// ```
    /// use sched_core::Features;
    /// assert_eq!(Features::switch("NO_UTIL_EST"), Ok((Features::UTIL_EST, false)));
    /// ```
    pub fn switch(word: &str) -> Result<(Features, bool), UnknownFeature> {
        let (on, name) = match word.strip_prefix("NO_") {
            Some(rest) => (false, rest),
            None => (true, word),
        };
        Ok((Features::from_name(name).ok_or(UnknownFeature)?, on))
    }

    /// Applies a comma- or space-separated list of switches on top of `self`; an empty list
    /// changes nothing. A name it does not know, or a switch it names twice, refuses the
    /// list and changes nothing.
    ///
    /// ```
    /// use sched_core::{FeatureListError, Features};
    /// let f = Features::default().parse_list("NO_UTIL_EST,EEVDF").unwrap();
    /// assert!(f.contains(Features::EEVDF) && !f.contains(Features::UTIL_EST));
    /// assert_eq!(Features::default().parse_list("EEVDF,NO_EEVDF"), Err(FeatureListError::Twice));
    /// assert_eq!(Features::default().parse_list("EEVDF NO_SUCH"), Err(FeatureListError::Unknown));
    /// ```
    pub fn parse_list(mut self, list: &str) -> Result<Features, FeatureListError> {
        let mut named = Features::empty();
        for word in list.split([',', ' ']).filter(|w| !w.is_empty()) {
            let (flag, on) = Features::switch(word).map_err(|UnknownFeature| FeatureListError::Unknown)?;
            if named.intersects(flag) {
                return Err(FeatureListError::Twice);
            }
            named |= flag;
            self.set(flag, on);
        }
        Ok(self)
    }
}

/// How a new task's `runnable_avg` is initialised (docs/linux-v5.7.md §0: a stable backport changed it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunnableInit {
    /// v5.7.0 (and the tree the seed patch landed in): the CPU's capacity, 1024.
    #[default]
    CpuCapacity,
    /// v5.7.14: equal to the initial `util_avg`.
    InitialUtil,
}

/// How the latency tunables scale with the number of CPUs (Linux `sched_tunable_scaling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TunableScaling {
    /// Factor 1.
    None,
    /// Factor `1 + ilog2(min(cpus, 8))` (Linux's default).
    #[default]
    Log,
    /// Factor `min(cpus, 8)`.
    Linear,
}

/// Normalised (one-CPU) base values of the latency tunables, in ns.
const BASE_LATENCY: u64 = 6_000_000;
const BASE_MIN_GRANULARITY: u64 = 750_000;
const BASE_WAKEUP_GRANULARITY: u64 = 1_000_000;

/// Tunables of the fair class. [`Tunables::for_cpus`] gives Linux's defaults scaled for a
/// CPU count.
///
/// ```
/// use sched_core::Tunables;
/// let t = Tunables::for_cpus(8);
/// assert_eq!(t.latency_ns, 24_000_000);
/// assert_eq!(t.min_granularity_ns, 3_000_000);
/// assert_eq!(t.wakeup_granularity_ns, 4_000_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunables {
    /// Targeted preemption latency: the period in which every runnable task runs once.
    pub latency_ns: u64,
    /// Minimum slice when there are more than `nr_latency` tasks.
    pub min_granularity_ns: u64,
    /// How far (in nice-0 virtual time) a wakee must be behind to preempt.
    pub wakeup_granularity_ns: u64,
    /// Above this many tasks the period stretches to `nr × min_granularity`.
    pub nr_latency: u64,
    /// A task that ran less than this ago is cache hot for the balancer.
    pub migration_cost_ns: u64,
    /// Most tasks one balance pass may detach.
    pub nr_migrate: u32,
    /// After fork, let the child run before the parent (CFS only: under EEVDF a new task is
    /// placed at the average by lag, as in Linux 6.6 and later, which ignore this).
    pub child_runs_first: bool,
    /// How a new task's runnable average starts.
    pub runnable_init: RunnableInit,
    /// The scaling mode these values were derived with.
    pub scaling: TunableScaling,
}

impl Tunables {
    /// Linux's defaults for `cpus` online CPUs.
    pub fn for_cpus(cpus: usize) -> Tunables {
        Tunables::scaled(cpus, TunableScaling::Log)
    }

    /// The defaults scaled for `cpus` with the given mode.
    pub fn scaled(cpus: usize, scaling: TunableScaling) -> Tunables {
        let factor = Self::factor(cpus, scaling);
        Tunables {
            latency_ns: BASE_LATENCY * factor,
            min_granularity_ns: BASE_MIN_GRANULARITY * factor,
            wakeup_granularity_ns: BASE_WAKEUP_GRANULARITY * factor,
            nr_latency: 8,
            migration_cost_ns: 500_000,
            nr_migrate: 32,
            child_runs_first: false,
            runnable_init: RunnableInit::default(),
            scaling,
        }
    }

    /// Re-derive the scaled values for a new CPU count (CPU online/offline), keeping the
    /// other settings.
    pub fn rescale(&mut self, cpus: usize) {
        let factor = Self::factor(cpus, self.scaling);
        self.latency_ns = BASE_LATENCY * factor;
        self.min_granularity_ns = BASE_MIN_GRANULARITY * factor;
        self.wakeup_granularity_ns = BASE_WAKEUP_GRANULARITY * factor;
    }

    /// Checks every value against the range the core accepts (Linux's sysctl bounds where it
    /// has them): latency and minimum granularity 0.1 ms to 1 s, wakeup granularity and
    /// migration cost at most 1 s, `nr_latency` 1 to 10 000, `nr_migrate` at most 1024. Out of
    /// range is [`SchedError::InvalidTunable`] naming the field.
    ///
    /// ```
    /// use sched_core::{SchedError, Tunables};
    /// assert_eq!(Tunables::for_cpus(8).check(), Ok(()));
    /// let t = Tunables { latency_ns: u64::MAX, ..Tunables::for_cpus(8) };
    /// assert_eq!(t.check(), Err(SchedError::InvalidTunable("latency_ns")));
    /// ```
    pub fn check(&self) -> Result<(), SchedError> {
        const MS_TENTH: u64 = 100_000;
        const SECOND: u64 = 1_000_000_000;
        let bad = if !(MS_TENTH..=SECOND).contains(&self.latency_ns) {
            "latency_ns"
        } else if !(MS_TENTH..=SECOND).contains(&self.min_granularity_ns) {
            "min_granularity_ns"
        } else if self.wakeup_granularity_ns > SECOND {
            "wakeup_granularity_ns"
        } else if !(1..=10_000).contains(&self.nr_latency) {
            "nr_latency"
        } else if self.migration_cost_ns > SECOND {
            "migration_cost_ns"
        } else if self.nr_migrate > 1024 {
            "nr_migrate"
        } else {
            return Ok(());
        };
        Err(SchedError::InvalidTunable(bad))
    }

    fn factor(cpus: usize, scaling: TunableScaling) -> u64 {
        let cpus = cpus.clamp(1, 8) as u64;
        match scaling {
            TunableScaling::None => 1,
            TunableScaling::Log => 1 + cpus.ilog2() as u64,
            TunableScaling::Linear => cpus,
        }
    }
}

impl Tunables {
    /// All zeros: the tunables of a runqueue `init` has not built yet (not usable).
    pub(crate) const UNSET: Tunables = Tunables {
        latency_ns: 0,
        min_granularity_ns: 0,
        wakeup_granularity_ns: 0,
        nr_latency: 0,
        migration_cost_ns: 0,
        nr_migrate: 0,
        child_runs_first: false,
        runnable_init: RunnableInit::CpuCapacity,
        scaling: TunableScaling::None,
    };

    /// Linux's defaults for one CPU (usable in `const` contexts).
    pub const DEFAULT: Tunables = Tunables {
        latency_ns: BASE_LATENCY,
        min_granularity_ns: BASE_MIN_GRANULARITY,
        wakeup_granularity_ns: BASE_WAKEUP_GRANULARITY,
        nr_latency: 8,
        migration_cost_ns: 500_000,
        nr_migrate: 32,
        child_runs_first: false,
        runnable_init: RunnableInit::CpuCapacity,
        scaling: TunableScaling::Log,
    };
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_factors() {
        assert_eq!(Tunables::for_cpus(1).latency_ns, 6_000_000);
        assert_eq!(Tunables::for_cpus(2).latency_ns, 12_000_000);
        assert_eq!(Tunables::for_cpus(4).latency_ns, 18_000_000);
        assert_eq!(Tunables::for_cpus(64).latency_ns, 24_000_000);
        let mut t = Tunables::for_cpus(8);
        t.rescale(2);
        assert_eq!(t.wakeup_granularity_ns, 2_000_000);
    }

    #[test]
    fn defaults_include_seed_rule() {
        let f = Features::default();
        assert!(f.contains(Features::UTIL_PULL_SKIPS_LONE_TASK));
        assert!(!f.contains(Features::NEXT_BUDDY));
    }

    #[test]
    fn parse_list_is_atomic() {
        let f = Features::default();
        assert!(f.parse_list("NO_LAST_BUDDY,BOGUS").is_err());
        let g = f.parse_list("NO_LAST_BUDDY NEXT_BUDDY").unwrap();
        assert!(!g.contains(Features::LAST_BUDDY) && g.contains(Features::NEXT_BUDDY));
    }
}
