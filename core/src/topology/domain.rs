//! Domain levels, their flags, and one CPU's domain at one level (`sd_init`, degeneration).

use crate::cpumask::CpuMask;
use crate::limits::{ASYM_CAPACITY, MAX_LEVELS, NUMA, SMT};
use bitflags::bitflags;

bitflags! {
    /// Scheduling-domain flags, with their v5.7 values.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SdFlags: u32 {
        /// Balance load between this domain's groups.
        const LOAD_BALANCE = 0x1;
        /// Balance when a CPU is about to go idle.
        const BALANCE_NEWIDLE = 0x2;
        /// Pick the CPU at exec.
        const BALANCE_EXEC = 0x4;
        /// Pick the CPU at fork.
        const BALANCE_FORK = 0x8;
        /// Pick the CPU at wakeup by the slow path (never set by v5.7's topology).
        const BALANCE_WAKE = 0x10;
        /// A wakeup may move the task next to the waker.
        const WAKE_AFFINE = 0x20;
        /// The domain holds CPUs of different capacities.
        const ASYM_CPUCAPACITY = 0x40;
        /// The CPUs share their capacity (SMT siblings).
        const SHARE_CPUCAPACITY = 0x80;
        /// The CPUs share a power domain.
        const SHARE_POWERDOMAIN = 0x100;
        /// The CPUs share package resources such as the last-level cache.
        const SHARE_PKG_RESOURCES = 0x200;
        /// Only one CPU at a time balances domains with this flag.
        const SERIALIZE = 0x400;
        /// Pack work onto the CPUs with the highest asym priority.
        const ASYM_PACKING = 0x800;
        /// The parent should spread tasks over its groups (read on the child).
        const PREFER_SIBLING = 0x1000;
        /// The domain's groups may overlap (set on NUMA levels).
        const OVERLAP = 0x2000;
        /// A NUMA level.
        const NUMA = 0x4000;
    }
}

impl SdFlags {
    /// Whether `ASYM_CPUCAPACITY` is set; `false` at compile time in a build without the
    /// `asym-capacity` feature, whose topologies never set it, so what it guards is left out.
    pub fn asym_cpucapacity(self) -> bool {
        ASYM_CAPACITY && self.contains(SdFlags::ASYM_CPUCAPACITY)
    }

    /// Whether `ASYM_PACKING` is set; `false` at compile time without `asym-capacity`.
    pub fn asym_packing(self) -> bool {
        ASYM_CAPACITY && self.contains(SdFlags::ASYM_PACKING)
    }

    /// Whether `SHARE_CPUCAPACITY` is set (SMT siblings); `false` at compile time without the
    /// `smt` feature.
    pub fn share_cpucapacity(self) -> bool {
        SMT && self.contains(SdFlags::SHARE_CPUCAPACITY)
    }

    /// Whether `NUMA` is set; `false` at compile time without the `numa` feature.
    pub fn numa(self) -> bool {
        NUMA && self.contains(SdFlags::NUMA)
    }
}

/// What `sd_init` gives every level before the level's own adjustments.
pub(super) const SD_INIT_FLAGS: SdFlags = SdFlags::LOAD_BALANCE
    .union(SdFlags::BALANCE_NEWIDLE)
    .union(SdFlags::BALANCE_EXEC)
    .union(SdFlags::BALANCE_FORK)
    .union(SdFlags::WAKE_AFFINE)
    .union(SdFlags::PREFER_SIBLING);

/// Flags that mean nothing in a domain with a single group.
const NEEDS_GROUPS: SdFlags = SdFlags::LOAD_BALANCE
    .union(SdFlags::BALANCE_NEWIDLE)
    .union(SdFlags::BALANCE_FORK)
    .union(SdFlags::BALANCE_EXEC)
    .union(SdFlags::SHARE_CPUCAPACITY)
    .union(SdFlags::ASYM_CPUCAPACITY)
    .union(SdFlags::SHARE_PKG_RESOURCES)
    .union(SdFlags::SHARE_POWERDOMAIN);

/// A topology level, bottom-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Level {
    /// Hardware threads of one core.
    Smt,
    /// The cores of one cluster, package or last-level cache (`cpu_coregroup_mask`).
    Mc,
    /// Every CPU of one NUMA node.
    Die,
    /// Every CPU of the machine, when there is more than one node.
    Numa,
}

impl Level {
    /// Every level, bottom-up.
    pub const ALL: [Level; MAX_LEVELS] = [Level::Smt, Level::Mc, Level::Die, Level::Numa];

    /// Position in [`Level::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The kernel's name for the level.
    pub const fn name(self) -> &'static str {
        match self {
            Level::Smt => "SMT",
            Level::Mc => "MC",
            Level::Die => "DIE",
            Level::Numa => "NUMA",
        }
    }
}

/// One CPU's scheduling domain at one level (Linux's `struct sched_domain`, initial values).
///
/// From `sd_init`: intervals of `span_weight` ms (max twice that), `busy_factor` 32; flags
/// `LOAD_BALANCE | BALANCE_NEWIDLE | BALANCE_EXEC | BALANCE_FORK | WAKE_AFFINE |
/// PREFER_SIBLING` plus the level's own. Per level: SMT adds `SHARE_CPUCAPACITY |
/// SHARE_PKG_RESOURCES` (pct 110, cache_nice_tries 0); MC adds `SHARE_PKG_RESOURCES` (117, 1)
/// and `ASYM_PACKING` when priorities are given; DIE (125, 1); NUMA adds `NUMA | SERIALIZE |
/// OVERLAP` and drops `PREFER_SIBLING` (125, 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Domain {
    /// The topology level it was built at.
    pub level: Level,
    /// CPUs of the domain.
    pub span: CpuMask,
    /// Number of CPUs in `span`.
    pub span_weight: usize,
    /// Flags after degeneration.
    pub flags: SdFlags,
    /// Imbalance threshold, percent.
    pub imbalance_pct: u32,
    /// Interval multiplier while the CPU is busy.
    pub busy_factor: u32,
    /// Failed balance attempts tolerated before cache-hot tasks may move.
    pub cache_nice_tries: u32,
    /// Shortest balance interval, ms.
    pub min_interval_ms: u64,
    /// Longest balance interval, ms.
    pub max_interval_ms: u64,
    /// Initial balance interval, ms (`span_weight`).
    pub balance_interval_ms: u64,
    /// Number of groups (see [`Topology::groups`](super::Topology::groups)).
    pub nr_groups: usize,
}

impl Domain {
    pub(super) const EMPTY: Domain = Domain {
        level: Level::Smt,
        span: CpuMask::EMPTY,
        span_weight: 0,
        flags: SdFlags::empty(),
        imbalance_pct: 0,
        busy_factor: 0,
        cache_nice_tries: 0,
        min_interval_ms: 0,
        max_interval_ms: 0,
        balance_interval_ms: 0,
        nr_groups: 0,
    };

    /// The domain `sd_init` makes for `level` over `span`, before the asymmetric-capacity
    /// adjustment of its child and before degeneration.
    pub(super) fn sd_init(
        level: Level,
        span: CpuMask,
        nr_groups: usize,
        asym_packing: bool,
        asym_cap: bool,
    ) -> Domain {
        let weight = span.weight();
        let mut flags = SD_INIT_FLAGS;
        if asym_cap {
            flags |= SdFlags::ASYM_CPUCAPACITY;
        }
        let (pct, tries) = match level {
            Level::Smt => {
                flags |= SdFlags::SHARE_CPUCAPACITY | SdFlags::SHARE_PKG_RESOURCES;
                (110, 0)
            }
            Level::Mc => {
                flags |= SdFlags::SHARE_PKG_RESOURCES;
                if asym_packing {
                    flags |= SdFlags::ASYM_PACKING;
                }
                (117, 1)
            }
            Level::Die => (125, 1),
            Level::Numa => {
                flags.remove(SdFlags::PREFER_SIBLING);
                flags |= SdFlags::NUMA | SdFlags::SERIALIZE | SdFlags::OVERLAP;
                (125, 2)
            }
        };
        let ms = weight as u64;
        Domain {
            level,
            span,
            span_weight: weight,
            flags,
            imbalance_pct: pct,
            busy_factor: 32,
            cache_nice_tries: tries,
            min_interval_ms: ms,
            max_interval_ms: 2 * ms,
            balance_interval_ms: ms,
            nr_groups,
        }
    }

    /// Whether the domain is useless on its own (`sd_degenerate`).
    pub(super) fn degenerate(&self) -> bool {
        if self.span_weight == 1 {
            return true;
        }
        if self.flags.intersects(NEEDS_GROUPS) && self.nr_groups > 1 {
            return false;
        }
        // Affine wakeups work without groups.
        !self.flags.contains(SdFlags::WAKE_AFFINE)
    }

    /// Whether `parent` adds nothing over `self` (`sd_parent_degenerate`).
    pub(super) fn parent_degenerate(&self, parent: &Domain, multi_node: bool) -> bool {
        if parent.degenerate() {
            return true;
        }
        if self.span != parent.span {
            return false;
        }
        let mut pflags = parent.flags;
        if parent.nr_groups == 1 {
            pflags.remove(NEEDS_GROUPS | SdFlags::PREFER_SIBLING);
            if !multi_node {
                pflags.remove(SdFlags::SERIALIZE);
            }
        }
        (pflags - self.flags).is_empty()
    }
}
