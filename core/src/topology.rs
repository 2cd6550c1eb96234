//! Scheduling domains and groups: from a machine description to each CPU's balancing tree.
//!
//! A [`TopologyDesc`] lists the CPUs, their SMT sibling sets, clusters (the MC level: package,
//! cluster or last-level cache), NUMA nodes, each CPU's `capacity_orig` and, optionally,
//! asym-packing priorities. [`Topology::init`] turns it into the domains Linux v5.7 builds on
//! arm64 with the default table SMT → MC → DIE, plus one NUMA level over every CPU when there
//! is more than one node.
//!
//! * **Levels.** For a CPU, SMT spans its thread siblings, MC its cluster (its node when no
//!   clusters are given), DIE its node (every CPU with one node) and NUMA every CPU. As in
//!   Linux, a CPU's levels stop at the first one that spans every CPU.
//! * **Groups.** An SMT domain has one group per CPU; a higher domain has one group per span of
//!   the level below it (taken before degeneration). A group is shared: every CPU whose domain
//!   at that level contains it sees the same [`Group`], with the same `id`.
//! * **Flags and tunables** follow `sd_init` (see [`Domain`]). `ASYM_CPUCAPACITY` goes on the
//!   lowest level at which every CPU's span holds a CPU of the highest capacity, and only when
//!   capacities differ; the level below it loses `PREFER_SIBLING`.
//! * **Degeneration**, per CPU, after the groups are built (as `cpu_attach_domain` does):
//!   1. walking up from the base, a parent is removed when it is degenerate on its own (span of
//!      one CPU, or one group and no `WAKE_AFFINE`), or when it spans exactly what its child
//!      spans and, ignoring the flags that need two groups (and `PREFER_SIBLING`, and
//!      `SERIALIZE` with one node) when it has one group, has no flag the child lacks. A
//!      removed parent's `PREFER_SIBLING` is set on the child; the walk then compares the
//!      child with its new parent;
//!   2. then the base domain is removed if it is degenerate on its own (in practice: one CPU).
//!
//!   Surviving domains keep the groups they were built with, so a domain's local group is
//!   always its surviving child's span.
//!
//! Linux also builds a NODE level (the node itself) between DIE and NUMA. It always has DIE's
//! span and flags, so it always degenerates; it is not modelled. It shows only in one place:
//! when NUMA is the asymmetric-capacity level, the `PREFER_SIBLING` it strips goes to NODE,
//! which then disappears, so DIE keeps its own. This module does the same. Every remote node
//! is taken to be within reclaim distance, so NUMA keeps `BALANCE_EXEC`, `BALANCE_FORK` and
//! `WAKE_AFFINE`, and with equal distances its groups (the nodes) never overlap.
//!
//! Storage is fixed: tables sized by the `CPUS` parameter, no heap. `Topology<1024>` is about
//! 1.6 MB, so keep it in a `static` or on the heap rather than on a stack.
//!
//! ```
//! use sched_core::topology::{Level, SdFlags, Topology};
//! let mut t: Topology<8> = Topology::empty();
//! t.init_clusters(2, 4).unwrap();
//! let die = t.domain(5, 1).unwrap();
//! assert_eq!(die.level, Level::Die);
//! assert_eq!(t.groups(5, 1).map(|g| g.span.first()).collect::<Vec<_>>(), [Some(4), Some(0)]);
//! assert!(t.domain(5, 0).unwrap().flags.contains(SdFlags::PREFER_SIBLING));
//! assert_eq!(t.llc_size(5), 4);
//! ```

use crate::cpumask::{CpuMask, MAX_CPUS};
use bitflags::bitflags;

/// The most domain levels a CPU can have: SMT, MC, DIE and NUMA.
pub const MAX_LEVELS: usize = 4;

/// `capacity_orig` of the biggest CPU at its highest frequency; the default for every CPU.
const CAPACITY_SCALE: u64 = 1024;

/// The `id` of a group table entry that no surviving domain uses.
const NO_ID: usize = usize::MAX;

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

/// What `sd_init` gives every level before the level's own adjustments.
const SD_INIT_FLAGS: SdFlags = SdFlags::LOAD_BALANCE
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

/// A machine, as [`Topology::init`] reads it. CPUs are numbered `0..nr_cpus`.
///
/// Each non-empty set list must partition the CPUs: every CPU in exactly one set.
#[derive(Debug, Clone, Copy, Default)]
pub struct TopologyDesc<'a> {
    /// Number of CPUs.
    pub nr_cpus: usize,
    /// Thread-sibling sets; empty = no SMT. Each must lie inside one cluster (or node).
    pub smt: &'a [CpuMask],
    /// The MC level's sets (cluster, package or LLC); empty = one per node. Each must lie
    /// inside one node.
    pub clusters: &'a [CpuMask],
    /// NUMA nodes; empty = one node. More than one adds the NUMA level.
    pub nodes: &'a [CpuMask],
    /// `capacity_orig` per CPU, in 1..=1024; empty = 1024 for every CPU.
    pub capacity: &'a [u64],
    /// Per-CPU asym-packing priority (higher is preferred); `Some` puts `ASYM_PACKING` on the
    /// MC level. `None` = Linux's default of −cpu, without the flag.
    pub asym_packing: Option<&'a [i32]>,
}

/// Why a description was refused. `init` checks, in this order: the CPU count, the slice
/// lengths, the capacities, the SMT sets, the clusters, the nodes, then nesting. Errors about
/// the `nodes` list name [`Level::Die`], the level each node becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyError {
    /// `nr_cpus` is 0.
    NoCpus,
    /// More CPUs than the table (or a [`CpuMask`]) holds.
    TooManyCpus {
        /// CPUs asked for (`usize::MAX` when a preset's count overflows).
        cpus: usize,
        /// The most this table accepts.
        max: usize,
    },
    /// A set names a CPU `>= nr_cpus`.
    CpuOutOfRange {
        /// The lowest such CPU.
        cpu: usize,
    },
    /// A set list holds an empty set.
    EmptySet {
        /// The level of the list.
        level: Level,
    },
    /// Two sets of one list share a CPU.
    Overlap {
        /// The level of the list.
        level: Level,
    },
    /// A non-empty set list leaves a CPU out.
    NotCovered {
        /// The lowest such CPU.
        cpu: usize,
        /// The level of the list.
        level: Level,
    },
    /// A set is not inside one set of the level above: an SMT set across clusters
    /// ([`Level::Smt`]) or a cluster across nodes ([`Level::Mc`]).
    NotNested {
        /// The level of the offending set.
        level: Level,
    },
    /// A CPU's capacity is 0.
    ZeroCapacity {
        /// The CPU.
        cpu: usize,
    },
    /// A CPU's capacity is above 1024, the capacity scale.
    CapacityTooLarge {
        /// The CPU.
        cpu: usize,
    },
    /// `capacity` is neither empty nor `nr_cpus` long, or `asym_packing` is not `nr_cpus` long.
    BadLength,
}

impl core::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TopologyError::NoCpus => f.write_str("topology has no CPU"),
            TopologyError::TooManyCpus { cpus, max } => {
                write!(f, "{cpus} CPUs requested, at most {max} supported")
            }
            TopologyError::CpuOutOfRange { cpu } => write!(f, "a set names cpu {cpu}, out of range"),
            TopologyError::EmptySet { level } => write!(f, "empty set at level {}", level.name()),
            TopologyError::Overlap { level } => write!(f, "overlapping sets at level {}", level.name()),
            TopologyError::NotCovered { cpu, level } => {
                write!(f, "cpu {cpu} is in no set at level {}", level.name())
            }
            TopologyError::NotNested { level } => {
                write!(f, "a set at level {} straddles the level above", level.name())
            }
            TopologyError::ZeroCapacity { cpu } => write!(f, "cpu {cpu} has capacity 0"),
            TopologyError::CapacityTooLarge { cpu } => write!(f, "cpu {cpu} has capacity above 1024"),
            TopologyError::BadLength => f.write_str("a per-CPU slice has the wrong length"),
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
    /// Number of groups (see [`Topology::groups`]).
    pub nr_groups: usize,
}

impl Domain {
    const EMPTY: Domain = Domain {
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
    fn sd_init(level: Level, span: CpuMask, nr_groups: usize, asym_packing: bool, asym_cap: bool) -> Domain {
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
    fn degenerate(&self) -> bool {
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
    fn parent_degenerate(&self, parent: &Domain, multi_node: bool) -> bool {
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

/// A scheduling group: one unit the load balancer compares within a domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// Dense index in `0..nr_groups_total()`, the same for every CPU whose domain at this
    /// level contains the group; key the shared group-capacity state (`sgc`) by it.
    pub id: usize,
    /// CPUs of the group.
    pub span: CpuMask,
    /// Number of CPUs in `span`.
    pub weight: usize,
    /// The group's CPU with the highest asym priority (the lowest CPU on ties). Linux fills it
    /// only under `ASYM_PACKING`; here it is always filled (the lowest CPU, by default).
    pub asym_prefer_cpu: usize,
    /// Initial capacity: the sum of `capacity_orig` over `span`.
    pub capacity: u64,
    /// Smallest `capacity_orig` in `span`.
    pub min_capacity: u64,
    /// Largest `capacity_orig` in `span`.
    pub max_capacity: u64,
}

impl Group {
    const EMPTY: Group = Group {
        id: NO_ID,
        span: CpuMask::EMPTY,
        weight: 0,
        asym_prefer_cpu: 0,
        capacity: 0,
        min_capacity: 0,
        max_capacity: 0,
    };
}

/// The groups of one domain: the local group first, then the others in the order their
/// CPUs come when walking the span from the owning CPU with wrap-around.
#[derive(Debug, Clone)]
pub struct Groups<'a> {
    /// The group table of the domain's level, indexed by each group's first CPU.
    table: &'a [Group],
    /// First CPU of each CPU's group; `None` at SMT, where every CPU is its own group.
    leaders: Option<&'a [u16]>,
    span: CpuMask,
    start: usize,
    next: usize,
    wrapped: bool,
    covered: CpuMask,
}

impl Groups<'static> {
    const NONE: Self = Groups {
        table: &[],
        leaders: None,
        span: CpuMask::EMPTY,
        start: 0,
        next: 0,
        wrapped: true,
        covered: CpuMask::EMPTY,
    };
}

impl<'a> Iterator for Groups<'a> {
    type Item = &'a Group;

    fn next(&mut self) -> Option<&'a Group> {
        loop {
            let cpu = match self.span.next_from(self.next) {
                Some(c) if !self.wrapped || c < self.start => c,
                _ if !self.wrapped => {
                    self.wrapped = true;
                    self.next = 0;
                    continue;
                }
                _ => return None,
            };
            self.next = cpu + 1;
            if self.covered.contains(cpu) {
                continue;
            }
            let leader = match self.leaders {
                None => cpu,
                Some(l) => usize::from(*l.get(cpu)?),
            };
            let group = self.table.get(leader)?;
            self.covered = self.covered.or(&group.span);
            return Some(group);
        }
    }
}

/// A list of CPU sets, either given or generated (presets and defaults need no storage).
#[derive(Debug, Clone, Copy)]
enum Sets<'a> {
    /// Sets given by the caller.
    List(&'a [CpuMask]),
    /// `count` runs of `size` consecutive CPUs, from CPU 0.
    Blocks { count: usize, size: usize },
    /// CPUs `0..cut` and `cut..end`, leaving out an empty part.
    Cut { cut: usize, end: usize },
}

impl Sets<'_> {
    const NONE: Sets<'static> = Sets::List(&[]);

    fn len(&self) -> usize {
        match *self {
            Sets::List(l) => l.len(),
            Sets::Blocks { count, .. } => count,
            Sets::Cut { cut, end } => usize::from(cut.min(end) > 0) + usize::from(end > cut),
        }
    }

    fn get(&self, i: usize) -> CpuMask {
        match *self {
            Sets::List(l) => l.get(i).copied().unwrap_or(CpuMask::EMPTY),
            Sets::Blocks { count, size } if i < count => {
                let start = i.saturating_mul(size);
                CpuMask::range(start, start.saturating_add(size))
            }
            Sets::Blocks { .. } => CpuMask::EMPTY,
            Sets::Cut { cut, end } => {
                let parts = [CpuMask::range(0, cut.min(end)), CpuMask::range(cut, end)];
                parts.into_iter().filter(|m| !m.is_empty()).nth(i).unwrap_or(CpuMask::EMPTY)
            }
        }
    }

    /// The set holding `cpu` (empty if none).
    fn find(&self, cpu: usize) -> CpuMask {
        let found = match *self {
            Sets::List(l) => l.iter().copied().find(|m| m.contains(cpu)),
            Sets::Blocks { size, .. } if size > 0 => Some(self.get(cpu / size)),
            Sets::Blocks { .. } => None,
            Sets::Cut { cut, end } => {
                Some(if cpu < cut { CpuMask::range(0, cut.min(end)) } else { CpuMask::range(cut, end) })
            }
        };
        found.filter(|m| m.contains(cpu)).unwrap_or(CpuMask::EMPTY)
    }

    /// Checks that the list is a partition of `all` (when non-empty).
    fn check_partition(&self, all: &CpuMask, level: Level) -> Result<(), TopologyError> {
        let mut covered = CpuMask::EMPTY;
        for i in 0..self.len() {
            let set = self.get(i);
            if let Some(cpu) = set.and_not(all).first() {
                return Err(TopologyError::CpuOutOfRange { cpu });
            }
            if set.is_empty() {
                return Err(TopologyError::EmptySet { level });
            }
            if set.intersects(&covered) {
                return Err(TopologyError::Overlap { level });
            }
            covered = covered.or(&set);
        }
        match all.and_not(&covered).first() {
            Some(cpu) if self.len() > 0 => Err(TopologyError::NotCovered { cpu, level }),
            _ => Ok(()),
        }
    }
}

/// Per-CPU capacities, given or generated.
#[derive(Debug, Clone, Copy)]
enum Caps<'a> {
    /// Given; empty = all [`CAPACITY_SCALE`].
    List(&'a [u64]),
    /// CPUs below `little` have `little_cap`, the others [`CAPACITY_SCALE`].
    Split { little: usize, little_cap: u64 },
}

impl Caps<'_> {
    fn get(&self, cpu: usize) -> u64 {
        match *self {
            Caps::List([]) => CAPACITY_SCALE,
            Caps::List(l) => l.get(cpu).copied().unwrap_or(0),
            Caps::Split { little, little_cap } => {
                if cpu < little {
                    little_cap
                } else {
                    CAPACITY_SCALE
                }
            }
        }
    }
}

/// A description in the form the builder reads.
#[derive(Debug, Clone, Copy)]
struct Plan<'a> {
    nr_cpus: usize,
    smt: Sets<'a>,
    clusters: Sets<'a>,
    nodes: Sets<'a>,
    caps: Caps<'a>,
    prio: Option<&'a [i32]>,
}

impl<'a> Plan<'a> {
    fn from_desc(d: &TopologyDesc<'a>) -> Self {
        Plan {
            nr_cpus: d.nr_cpus,
            smt: Sets::List(d.smt),
            clusters: Sets::List(d.clusters),
            nodes: Sets::List(d.nodes),
            caps: Caps::List(d.capacity),
            prio: d.asym_packing,
        }
    }

    /// A preset's plan: no SMT, capacity scale everywhere, default priorities.
    fn preset(nr_cpus: usize, clusters: Sets<'a>, nodes: Sets<'a>) -> Self {
        Plan { nr_cpus, smt: Sets::NONE, clusters, nodes, caps: Caps::List(&[]), prio: None }
    }

    /// The spans of `level`, defaults filled in.
    fn level_sets(&self, level: Level) -> Sets<'a> {
        let n = self.nr_cpus;
        let given = |s: Sets<'a>| if s.len() > 0 { Some(s) } else { None };
        let all = Sets::Blocks { count: 1, size: n };
        match level {
            Level::Smt => given(self.smt).unwrap_or(Sets::Blocks { count: n, size: 1 }),
            Level::Mc => given(self.clusters).or(given(self.nodes)).unwrap_or(all),
            Level::Die => given(self.nodes).unwrap_or(all),
            Level::Numa => all,
        }
    }

    fn multi_node(&self) -> bool {
        self.nodes.len() > 1
    }

    fn validate(&self, max: usize) -> Result<(), TopologyError> {
        let n = self.nr_cpus;
        if n == 0 {
            return Err(TopologyError::NoCpus);
        }
        if n > max {
            return Err(TopologyError::TooManyCpus { cpus: n, max });
        }
        if let Caps::List(l) = self.caps {
            if !l.is_empty() && l.len() != n {
                return Err(TopologyError::BadLength);
            }
        }
        if self.prio.is_some_and(|p| p.len() != n) {
            return Err(TopologyError::BadLength);
        }
        for cpu in 0..n {
            match self.caps.get(cpu) {
                0 => return Err(TopologyError::ZeroCapacity { cpu }),
                c if c > CAPACITY_SCALE => return Err(TopologyError::CapacityTooLarge { cpu }),
                _ => {}
            }
        }
        let all = CpuMask::first_n(n);
        self.smt.check_partition(&all, Level::Smt)?;
        self.clusters.check_partition(&all, Level::Mc)?;
        self.nodes.check_partition(&all, Level::Die)?;
        // Sets are partitions now, so the set holding a set's first CPU is the only candidate.
        let nested = |inner: Sets<'_>, outer: Sets<'_>, level: Level| {
            if outer.len() == 0 {
                return Ok(());
            }
            for i in 0..inner.len() {
                let set = inner.get(i);
                let outer_set = set.first().map_or(CpuMask::EMPTY, |c| outer.find(c));
                if !set.is_subset_of(&outer_set) {
                    return Err(TopologyError::NotNested { level });
                }
            }
            Ok(())
        };
        nested(self.smt, self.level_sets(Level::Mc), Level::Smt)?;
        nested(self.clusters, self.nodes, Level::Mc)
    }
}

/// Every CPU's scheduling domains and the groups they share, for up to `CPUS` CPUs
/// (at most [`MAX_CPUS`]).
pub struct Topology<const CPUS: usize> {
    nr_cpus: usize,
    nr_groups_total: usize,
    capacity: [u64; CPUS],
    priority: [i32; CPUS],
    /// Surviving domains per CPU.
    nr_levels: [u8; CPUS],
    /// Per level, the first CPU of each CPU's span there (before degeneration). The spans of
    /// level `l` are the groups of level `l + 1`, so they live in that group table.
    leader: [[u16; CPUS]; MAX_LEVELS],
    /// Per level, the groups of that level's domains, indexed by the group's first CPU.
    groups: [[Group; CPUS]; MAX_LEVELS],
    /// Per CPU, its surviving domains bottom-up.
    domains: [[Domain; MAX_LEVELS]; CPUS],
}

impl<const CPUS: usize> Topology<CPUS> {
    /// A topology with no CPU; usable in a `static`. Call an `init*` method next.
    pub const fn empty() -> Self {
        Topology {
            nr_cpus: 0,
            nr_groups_total: 0,
            capacity: [0; CPUS],
            priority: [0; CPUS],
            nr_levels: [0; CPUS],
            leader: [[0; CPUS]; MAX_LEVELS],
            groups: [[Group::EMPTY; CPUS]; MAX_LEVELS],
            domains: [[Domain::EMPTY; MAX_LEVELS]; CPUS],
        }
    }

    /// The most CPUs this table accepts.
    pub const fn max_cpus() -> usize {
        if CPUS < MAX_CPUS {
            CPUS
        } else {
            MAX_CPUS
        }
    }

    /// Builds the domains of `desc`. Everything is validated first; on error `self` is left
    /// exactly as it was.
    pub fn init(&mut self, desc: &TopologyDesc<'_>) -> Result<(), TopologyError> {
        self.apply(&Plan::from_desc(desc))
    }

    /// One cluster of `nr_cpus` equal CPUs: a single MC level with one group per CPU.
    pub fn init_flat(&mut self, nr_cpus: usize) -> Result<(), TopologyError> {
        self.apply(&Plan::preset(nr_cpus, Sets::Blocks { count: 1, size: nr_cpus }, Sets::NONE))
    }

    /// `nr_clusters` clusters of `per_cluster` equal CPUs, numbered cluster by cluster: MC per
    /// cluster, DIE over all (when there are several clusters).
    pub fn init_clusters(&mut self, nr_clusters: usize, per_cluster: usize) -> Result<(), TopologyError> {
        let n = Self::product(nr_clusters, per_cluster)?;
        self.apply(&Plan::preset(n, Sets::Blocks { count: nr_clusters, size: per_cluster }, Sets::NONE))
    }

    /// A LITTLE cluster (CPUs `0..little`, capacity `little_capacity`) and a big cluster
    /// (the next `big` CPUs, capacity 1024). With both present and different capacities,
    /// DIE gets `ASYM_CPUCAPACITY` and MC loses `PREFER_SIBLING`.
    pub fn init_big_little(
        &mut self,
        little: usize,
        big: usize,
        little_capacity: u64,
    ) -> Result<(), TopologyError> {
        let n = little.checked_add(big).ok_or(Self::too_many())?;
        let mut plan = Plan::preset(n, Sets::Cut { cut: little, end: n }, Sets::NONE);
        plan.caps = Caps::Split { little, little_cap: little_capacity };
        self.apply(&plan)
    }

    /// `nr_nodes` nodes of `clusters_per_node` clusters of `cpus_per_cluster` equal CPUs,
    /// numbered node by node: MC per cluster, DIE per node, NUMA over all.
    pub fn init_numa(
        &mut self,
        nr_nodes: usize,
        clusters_per_node: usize,
        cpus_per_cluster: usize,
    ) -> Result<(), TopologyError> {
        let per_node = Self::product(clusters_per_node, cpus_per_cluster)?;
        let n = Self::product(nr_nodes, per_node)?;
        let clusters = Self::product(nr_nodes, clusters_per_node)?;
        let plan = Plan::preset(
            n,
            Sets::Blocks { count: clusters, size: cpus_per_cluster },
            Sets::Blocks { count: nr_nodes, size: per_node },
        );
        self.apply(&plan)
    }

    /// Number of CPUs (0 before a successful `init`).
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    /// The CPU's `capacity_orig`; 0 for a CPU out of range.
    pub fn capacity_orig(&self, cpu: usize) -> u64 {
        self.per_cpu(&self.capacity, cpu).unwrap_or(0)
    }

    /// The largest `capacity_orig` (the root domain's `max_cpu_capacity`); 0 when empty.
    pub fn max_capacity_orig(&self) -> u64 {
        self.capacity.iter().take(self.nr_cpus).copied().max().unwrap_or(0)
    }

    /// The CPU's asym-packing priority (higher is preferred): the given one, or −cpu by
    /// default; `i32::MIN` for a CPU out of range.
    pub fn asym_priority(&self, cpu: usize) -> i32 {
        self.per_cpu(&self.priority, cpu).unwrap_or(i32::MIN)
    }

    /// Number of domains of the CPU after degeneration (0 for a CPU out of range, or when the
    /// machine has one CPU).
    pub fn nr_levels(&self, cpu: usize) -> usize {
        self.domain_slice(cpu).len()
    }

    /// The CPU's domain `idx` levels above its base domain (`idx` 0), after degeneration.
    pub fn domain(&self, cpu: usize, idx: usize) -> Option<&Domain> {
        self.domain_slice(cpu).get(idx)
    }

    /// The CPU's domains, bottom-up.
    pub fn domains(&self, cpu: usize) -> core::slice::Iter<'_, Domain> {
        self.domain_slice(cpu).iter()
    }

    /// The groups of the CPU's domain `idx`: the local group first, then the others in
    /// wrapped CPU order from `cpu`. Empty when there is no such domain.
    pub fn groups(&self, cpu: usize, idx: usize) -> Groups<'_> {
        let Some(d) = self.domain(cpu, idx) else {
            return Groups::NONE;
        };
        let l = d.level.index();
        let Some(table) = self.groups.get(l) else {
            return Groups::NONE;
        };
        let leaders = match l.checked_sub(1) {
            Some(below) => match self.leader.get(below) {
                Some(row) => Some(&row[..]),
                None => return Groups::NONE,
            },
            None => None,
        };
        Groups {
            table: &table[..],
            leaders,
            span: d.span,
            start: cpu,
            next: cpu,
            wrapped: false,
            covered: CpuMask::EMPTY,
        }
    }

    /// The group of the CPU's domain `idx` that holds the CPU.
    pub fn local_group(&self, cpu: usize, idx: usize) -> Option<&Group> {
        self.groups(cpu, idx).next()
    }

    /// The CPU's last-level-cache span: the span of the highest domain of the unbroken run
    /// of `SHARE_PKG_RESOURCES` domains from the base, or the CPU alone (empty when out of
    /// range).
    pub fn llc_span(&self, cpu: usize) -> CpuMask {
        if cpu >= self.nr_cpus {
            return CpuMask::EMPTY;
        }
        self.domains(cpu)
            .take_while(|d| d.flags.contains(SdFlags::SHARE_PKG_RESOURCES))
            .last()
            .map_or(CpuMask::single(cpu), |d| d.span)
    }

    /// Number of CPUs in [`Topology::llc_span`] (`sd_llc_size`).
    pub fn llc_size(&self, cpu: usize) -> usize {
        self.llc_span(cpu).weight()
    }

    /// First CPU of [`Topology::llc_span`] (`sd_llc_id`): two CPUs share a cache when their
    /// ids match, and per-LLC shared state can be keyed by it. `None` when out of range.
    pub fn llc_id(&self, cpu: usize) -> Option<usize> {
        self.llc_span(cpu).first()
    }

    /// Index of the CPU's lowest domain with `ASYM_CPUCAPACITY`, if any.
    pub fn asym_cpucapacity_level(&self, cpu: usize) -> Option<usize> {
        self.domains(cpu).position(|d| d.flags.contains(SdFlags::ASYM_CPUCAPACITY))
    }

    /// Number of distinct groups over all surviving domains; group ids are `0..` this.
    pub fn nr_groups_total(&self) -> usize {
        self.nr_groups_total
    }

    /// Every group of a surviving domain, once, in id order (to set up per-group state).
    pub fn all_groups(&self) -> impl Iterator<Item = &Group> + '_ {
        self.groups.iter().flatten().filter(|g| g.id != NO_ID)
    }

    fn too_many() -> TopologyError {
        TopologyError::TooManyCpus { cpus: usize::MAX, max: Self::max_cpus() }
    }

    fn product(a: usize, b: usize) -> Result<usize, TopologyError> {
        a.checked_mul(b).ok_or(Self::too_many())
    }

    fn per_cpu<T: Copy>(&self, table: &[T; CPUS], cpu: usize) -> Option<T> {
        if cpu < self.nr_cpus {
            table.get(cpu).copied()
        } else {
            None
        }
    }

    fn domain_slice(&self, cpu: usize) -> &[Domain] {
        match (self.domains.get(cpu), self.nr_levels.get(cpu)) {
            (Some(d), Some(&n)) if cpu < self.nr_cpus => d.get(..usize::from(n)).unwrap_or(&[]),
            _ => &[],
        }
    }

    fn apply(&mut self, plan: &Plan<'_>) -> Result<(), TopologyError> {
        plan.validate(Self::max_cpus())?;
        self.build(plan);
        Ok(())
    }

    /// The span of `cpu` at level `l` before degeneration. `l < MAX_LEVELS`, `cpu < nr_cpus`.
    fn level_span(&self, l: usize, cpu: usize) -> CpuMask {
        if l + 1 < MAX_LEVELS {
            let leader = usize::from(self.leader[l][cpu]);
            self.groups[l + 1][leader].span
        } else {
            CpuMask::first_n(self.nr_cpus)
        }
    }

    /// The largest capacity in `cpu`'s span at level `l`.
    fn level_max_capacity(&self, l: usize, cpu: usize) -> u64 {
        if l + 1 < MAX_LEVELS {
            let leader = usize::from(self.leader[l][cpu]);
            self.groups[l + 1][leader].max_capacity
        } else {
            self.max_capacity_orig()
        }
    }

    /// Number of groups of a level-`l` domain over `span`: one per span of level `l - 1`.
    fn count_groups(&self, l: usize, span: &CpuMask) -> usize {
        match l.checked_sub(1) {
            None => span.weight(),
            Some(below) => span.iter().filter(|&c| usize::from(self.leader[below][c]) == c).count(),
        }
    }

    fn make_group(&self, span: CpuMask) -> Group {
        let mut g = Group { span, weight: span.weight(), min_capacity: u64::MAX, ..Group::EMPTY };
        let mut best: Option<(i32, usize)> = None;
        for cpu in span.iter() {
            let cap = self.capacity[cpu];
            g.capacity += cap;
            g.min_capacity = g.min_capacity.min(cap);
            g.max_capacity = g.max_capacity.max(cap);
            // Strictly higher wins, so ties keep the lower CPU.
            let prio = self.priority[cpu];
            if best.is_none_or(|(p, _)| prio > p) {
                best = Some((prio, cpu));
            }
        }
        g.asym_prefer_cpu = best.map_or(0, |(_, c)| c);
        g
    }

    /// Replaces the whole table; `plan` has been validated, so indices below `nr_cpus` and
    /// CPU numbers below 1024 (which fit `u16`) hold throughout.
    fn build(&mut self, plan: &Plan<'_>) {
        let n = plan.nr_cpus;
        self.nr_cpus = n;
        for cpu in 0..CPUS {
            let live = cpu < n;
            self.capacity[cpu] = if live { plan.caps.get(cpu) } else { 0 };
            self.priority[cpu] = match plan.prio {
                Some(p) if live => p.get(cpu).copied().unwrap_or(0),
                _ if live => -(cpu as i32),
                _ => 0,
            };
            self.nr_levels[cpu] = 0;
            self.domains[cpu] = [Domain::EMPTY; MAX_LEVELS];
            for l in 0..MAX_LEVELS {
                self.leader[l][cpu] = 0;
                self.groups[l][cpu] = Group::EMPTY;
            }
        }

        // Spans of every level; level l's spans are the groups of level l + 1.
        for level in Level::ALL {
            let l = level.index();
            let sets = plan.level_sets(level);
            for i in 0..sets.len() {
                let span = sets.get(i);
                let Some(first) = span.first() else { continue };
                for cpu in span.iter() {
                    self.leader[l][cpu] = first as u16;
                }
                if l + 1 < MAX_LEVELS {
                    self.groups[l + 1][first] = self.make_group(span);
                }
            }
        }
        for cpu in 0..n {
            self.groups[0][cpu] = self.make_group(CpuMask::single(cpu));
        }

        // Lowest level where every CPU sees a CPU of the top capacity, if capacities differ.
        let max_cap = self.max_capacity_orig();
        let asym = self.capacity[..n].iter().any(|&c| c != max_cap);
        let asym_level = if asym {
            (0..MAX_LEVELS).find(|&l| (0..n).all(|cpu| self.level_max_capacity(l, cpu) == max_cap))
        } else {
            None
        };

        // Pass 1: every CPU's domains as built, up to the first that spans every CPU.
        let all = CpuMask::first_n(n);
        for cpu in 0..n {
            let top = (0..MAX_LEVELS).find(|&l| self.level_span(l, cpu) == all).unwrap_or(MAX_LEVELS - 1);
            for level in Level::ALL.into_iter().take(top + 1) {
                let l = level.index();
                let span = self.level_span(l, cpu);
                // CPUs of one span share its domain shape; reuse the first CPU's count.
                let nr_groups = match span.first() {
                    Some(f) if f < cpu && self.domains[f][l].span == span => self.domains[f][l].nr_groups,
                    _ => self.count_groups(l, &span),
                };
                self.domains[cpu][l] =
                    Domain::sd_init(level, span, nr_groups, plan.prio.is_some(), asym_level == Some(l));
            }
            // The asymmetric level's child stops spreading. At NUMA that child is the
            // unmodelled NODE level, which degenerates without passing anything down.
            if let Some(a) = asym_level {
                if a >= 1 && a <= top && a != Level::Numa.index() {
                    self.domains[cpu][a - 1].flags.remove(SdFlags::PREFER_SIBLING);
                }
            }
            self.nr_levels[cpu] = (top + 1) as u8;
        }

        // Pass 2: degeneration, per CPU.
        let multi_node = plan.multi_node();
        for cpu in 0..n {
            let mut chain = self.domains[cpu];
            let mut len = usize::from(self.nr_levels[cpu]).min(MAX_LEVELS);
            let mut i = 0;
            while i + 1 < len {
                if chain[i].parent_degenerate(&chain[i + 1], multi_node) {
                    // The grandparent used to read PREFER_SIBLING on the parent; the child,
                    // covering the same CPUs, now stands in for it.
                    if chain[i + 1].flags.contains(SdFlags::PREFER_SIBLING) {
                        chain[i].flags.insert(SdFlags::PREFER_SIBLING);
                    }
                    chain.copy_within(i + 2..len, i + 1);
                    len -= 1;
                } else {
                    i += 1;
                }
            }
            if len > 0 && chain[0].degenerate() {
                chain.copy_within(1..len, 0);
                len -= 1;
            }
            for (k, slot) in chain.iter_mut().enumerate() {
                if k >= len {
                    *slot = Domain::EMPTY;
                }
            }
            self.domains[cpu] = chain;
            self.nr_levels[cpu] = len as u8;
        }

        // Ids for the groups some surviving domain uses. All CPUs of a span keep or drop
        // their domain there alike, so the group's first CPU decides.
        let mut next_id = 0;
        for l in 0..MAX_LEVELS {
            for g in 0..n {
                let is_group = l == 0 || usize::from(self.leader[l - 1][g]) == g;
                let levels = usize::from(self.nr_levels[g]);
                if is_group && self.domains[g][..levels].iter().any(|d| d.level.index() == l) {
                    self.groups[l][g].id = next_id;
                    next_id += 1;
                }
            }
        }
        self.nr_groups_total = next_id;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::boxed::Box;
    use std::collections::HashMap;
    use std::vec::Vec;

    fn boxed<const N: usize>() -> Box<Topology<N>> {
        Box::new(Topology::empty())
    }

    /// Runs `f` on a thread with room for a 1024-CPU table built on the stack first.
    fn with_big_stack(f: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new().stack_size(64 << 20).spawn(f).unwrap().join().unwrap();
    }

    fn group_spans<const N: usize>(t: &Topology<N>, cpu: usize, idx: usize) -> Vec<CpuMask> {
        t.groups(cpu, idx).map(|g| g.span).collect()
    }

    fn r(a: usize, b: usize) -> CpuMask {
        CpuMask::range(a, b)
    }

    fn m(cpus: &[usize]) -> CpuMask {
        cpus.iter().fold(CpuMask::EMPTY, |acc, &c| acc.with(c))
    }

    fn singles(cpus: impl Iterator<Item = usize>) -> Vec<CpuMask> {
        cpus.map(CpuMask::single).collect()
    }

    #[test]
    fn flat_eight_is_one_mc_level() {
        let mut t = boxed::<8>();
        t.init_flat(8).unwrap();
        for cpu in 0..8 {
            assert_eq!(t.nr_levels(cpu), 1);
            let d = t.domain(cpu, 0).unwrap();
            assert_eq!(d.level, Level::Mc);
            assert_eq!((d.span, d.span_weight, d.nr_groups), (r(0, 8), 8, 8));
            assert_eq!((d.imbalance_pct, d.cache_nice_tries, d.busy_factor), (117, 1, 32));
            assert_eq!((d.min_interval_ms, d.max_interval_ms, d.balance_interval_ms), (8, 16, 8));
            assert!(d.flags.contains(SD_INIT_FLAGS | SdFlags::SHARE_PKG_RESOURCES));
            assert!(!d.flags.contains(SdFlags::BALANCE_WAKE));
            assert_eq!(t.llc_size(cpu), 8);
            assert_eq!(t.asym_cpucapacity_level(cpu), None);
        }
        assert_eq!(group_spans(&t, 3, 0), singles([3, 4, 5, 6, 7, 0, 1, 2].into_iter()));
        assert!(t.groups(3, 0).all(|g| g.weight == 1 && g.capacity == 1024));
        assert_eq!(t.nr_groups_total(), 8);
        assert_eq!(t.domain(0, 1), None);
    }

    #[test]
    fn two_clusters_of_four() {
        let mut t = boxed::<8>();
        t.init_clusters(2, 4).unwrap();
        for cpu in 0..8 {
            assert_eq!(t.nr_levels(cpu), 2);
            let mc = t.domain(cpu, 0).unwrap();
            let cluster = if cpu < 4 { r(0, 4) } else { r(4, 8) };
            assert_eq!((mc.level, mc.span, mc.span_weight, mc.nr_groups), (Level::Mc, cluster, 4, 4));
            assert_eq!((mc.imbalance_pct, mc.cache_nice_tries), (117, 1));
            assert_eq!((mc.min_interval_ms, mc.max_interval_ms), (4, 8));
            // MC has no child (prefer_sibling 0 at MC) but carries the flag for DIE.
            assert!(mc.flags.contains(SdFlags::PREFER_SIBLING));
            let die = t.domain(cpu, 1).unwrap();
            assert_eq!((die.level, die.span, die.span_weight, die.nr_groups), (Level::Die, r(0, 8), 8, 2));
            assert_eq!((die.imbalance_pct, die.cache_nice_tries), (125, 1));
            assert_eq!((die.min_interval_ms, die.max_interval_ms), (8, 16));
            assert!(!die.flags.intersects(SdFlags::SHARE_PKG_RESOURCES | SdFlags::NUMA));
            assert_eq!(t.llc_size(cpu), 4);
            assert_eq!(t.llc_span(cpu), cluster);
            assert_eq!(t.llc_id(cpu), cluster.first());
        }
        assert_eq!(group_spans(&t, 5, 1), [r(4, 8), r(0, 4)]);
        assert_eq!(group_spans(&t, 2, 1), [r(0, 4), r(4, 8)]);
        assert_eq!(group_spans(&t, 6, 0), singles([6, 7, 4, 5].into_iter()));
        let die_groups: Vec<_> = t.groups(5, 1).collect();
        assert_eq!((die_groups[0].weight, die_groups[0].capacity), (4, 4096));
        // {0-3} seen from CPU 5 is CPU 0's local group.
        assert_eq!(die_groups[1].id, t.local_group(0, 1).unwrap().id);
        assert_ne!(die_groups[0].id, die_groups[1].id);
        assert_eq!(t.nr_groups_total(), 8 + 2);
        let all: Vec<_> = t.all_groups().map(|g| (g.id, g.span)).collect();
        let expected: Vec<_> = (0..8).map(CpuMask::single).chain([r(0, 4), r(4, 8)]).enumerate().collect();
        assert_eq!(all, expected);
    }

    #[test]
    fn big_little_marks_die_asymmetric() {
        let mut t = boxed::<8>();
        t.init_big_little(4, 4, 446).unwrap();
        assert_eq!((t.capacity_orig(0), t.capacity_orig(7), t.max_capacity_orig()), (446, 1024, 1024));
        for cpu in 0..8 {
            let mc = t.domain(cpu, 0).unwrap();
            let die = t.domain(cpu, 1).unwrap();
            assert_eq!((mc.level, die.level), (Level::Mc, Level::Die));
            assert!(!mc.flags.contains(SdFlags::PREFER_SIBLING));
            assert!(!mc.flags.contains(SdFlags::ASYM_CPUCAPACITY));
            assert!(die.flags.contains(SdFlags::ASYM_CPUCAPACITY | SdFlags::PREFER_SIBLING));
            assert_eq!(t.asym_cpucapacity_level(cpu), Some(1));
        }
        let g: Vec<_> = t.groups(1, 1).collect();
        assert_eq!(
            (g[0].span, g[0].capacity, g[0].min_capacity, g[0].max_capacity),
            (r(0, 4), 1784, 446, 446)
        );
        assert_eq!(
            (g[1].span, g[1].capacity, g[1].min_capacity, g[1].max_capacity),
            (r(4, 8), 4096, 1024, 1024)
        );
    }

    #[test]
    fn mixed_cluster_is_asymmetric_at_mc() {
        // One DynamIQ-style cluster holding both kinds: MC sees everything, SMT is gone.
        let caps = [446, 446, 1024, 1024];
        let desc = TopologyDesc { nr_cpus: 4, capacity: &caps, ..TopologyDesc::default() };
        let mut t = boxed::<4>();
        t.init(&desc).unwrap();
        assert_eq!(t.nr_levels(0), 1);
        let mc = t.domain(0, 0).unwrap();
        assert!(mc.flags.contains(SdFlags::ASYM_CPUCAPACITY | SdFlags::PREFER_SIBLING));
        assert_eq!(t.asym_cpucapacity_level(3), Some(0));
    }

    #[test]
    fn numa_one_cluster_per_node() {
        let mut t = boxed::<8>();
        t.init_numa(2, 1, 4).unwrap();
        for cpu in 0..8 {
            // DIE spans the node, like MC, and degenerates into it.
            assert_eq!(t.nr_levels(cpu), 2);
            let mc = t.domain(cpu, 0).unwrap();
            let node = if cpu < 4 { r(0, 4) } else { r(4, 8) };
            assert_eq!((mc.level, mc.span, mc.imbalance_pct), (Level::Mc, node, 117));
            assert!(mc.flags.contains(SdFlags::PREFER_SIBLING));
            let numa = t.domain(cpu, 1).unwrap();
            assert_eq!((numa.level, numa.span, numa.nr_groups), (Level::Numa, r(0, 8), 2));
            assert!(numa.flags.contains(SdFlags::NUMA | SdFlags::SERIALIZE | SdFlags::OVERLAP));
            assert!(numa
                .flags
                .contains(SdFlags::WAKE_AFFINE | SdFlags::BALANCE_FORK | SdFlags::BALANCE_EXEC));
            assert!(!numa.flags.contains(SdFlags::PREFER_SIBLING));
            assert_eq!((numa.imbalance_pct, numa.cache_nice_tries), (125, 2));
            assert_eq!((numa.min_interval_ms, numa.max_interval_ms), (8, 16));
        }
        assert_eq!(group_spans(&t, 5, 1), [r(4, 8), r(0, 4)]);
        assert_eq!(t.nr_groups_total(), 8 + 2);
    }

    #[test]
    fn numa_two_clusters_per_node() {
        let mut t = boxed::<16>();
        t.init_numa(2, 2, 4).unwrap();
        let levels: Vec<_> = t.domains(9).map(|d| (d.level, d.span, d.nr_groups)).collect();
        assert_eq!(levels, [(Level::Mc, r(8, 12), 4), (Level::Die, r(8, 16), 2), (Level::Numa, r(0, 16), 2)]);
        assert!(t.domain(9, 0).unwrap().flags.contains(SdFlags::PREFER_SIBLING));
        assert!(t.domain(9, 1).unwrap().flags.contains(SdFlags::PREFER_SIBLING));
        assert_eq!(group_spans(&t, 9, 1), [r(8, 12), r(12, 16)]);
        assert_eq!(group_spans(&t, 13, 1), [r(12, 16), r(8, 12)]);
        assert_eq!(group_spans(&t, 9, 2), [r(8, 16), r(0, 8)]);
        assert_eq!(t.llc_size(9), 4);
        assert_eq!(t.nr_groups_total(), 16 + 4 + 2);
    }

    #[test]
    fn numa_asymmetry_leaves_die_spreading() {
        // A LITTLE node and a big node: only NUMA sees a big CPU from everywhere.
        let caps = [446, 446, 1024, 1024];
        let nodes = [r(0, 2), r(2, 4)];
        let desc = TopologyDesc { nr_cpus: 4, nodes: &nodes, capacity: &caps, ..TopologyDesc::default() };
        let mut t = boxed::<4>();
        t.init(&desc).unwrap();
        let levels: Vec<_> = t.domains(0).map(|d| d.level).collect();
        assert_eq!(levels, [Level::Mc, Level::Numa]);
        assert!(t.domain(0, 0).unwrap().flags.contains(SdFlags::PREFER_SIBLING));
        assert!(t.domain(0, 1).unwrap().flags.contains(SdFlags::ASYM_CPUCAPACITY));
        assert_eq!(t.asym_cpucapacity_level(0), Some(1));

        // With two clusters per node DIE survives, and keeps PREFER_SIBLING: the flag NUMA
        // strips goes to the NODE level between them, which degenerates.
        let caps = [446, 446, 446, 446, 1024, 1024, 1024, 1024];
        let clusters = [r(0, 2), r(2, 4), r(4, 6), r(6, 8)];
        let nodes = [r(0, 4), r(4, 8)];
        let desc = TopologyDesc { nr_cpus: 8, clusters: &clusters, nodes: &nodes, capacity: &caps, ..desc };
        let mut t = boxed::<8>();
        t.init(&desc).unwrap();
        let levels: Vec<_> =
            t.domains(0).map(|d| (d.level, d.flags.contains(SdFlags::PREFER_SIBLING))).collect();
        assert_eq!(levels, [(Level::Mc, true), (Level::Die, true), (Level::Numa, false)]);
        assert_eq!(t.asym_cpucapacity_level(5), Some(2));
    }

    #[test]
    fn smt_cores_in_clusters() {
        let smt = [r(0, 2), r(2, 4), r(4, 6), r(6, 8)];
        let clusters = [r(0, 4), r(4, 8)];
        let desc = TopologyDesc { nr_cpus: 8, smt: &smt, clusters: &clusters, ..TopologyDesc::default() };
        let mut t = boxed::<8>();
        t.init(&desc).unwrap();
        let s = t.domain(3, 0).unwrap();
        assert_eq!(
            (s.level, s.span, s.nr_groups, s.imbalance_pct, s.cache_nice_tries),
            (Level::Smt, r(2, 4), 2, 110, 0)
        );
        assert!(s.flags.contains(SdFlags::SHARE_CPUCAPACITY | SdFlags::SHARE_PKG_RESOURCES));
        assert_eq!((s.min_interval_ms, s.max_interval_ms), (2, 4));
        assert_eq!(group_spans(&t, 3, 0), singles([3, 2].into_iter()));
        assert_eq!(group_spans(&t, 3, 1), [r(2, 4), r(0, 2)]);
        assert_eq!(group_spans(&t, 3, 2), [r(0, 4), r(4, 8)]);
        assert_eq!(t.llc_span(3), r(0, 4));
        assert_eq!(t.nr_groups_total(), 8 + 4 + 2);
    }

    #[test]
    fn scattered_sets_follow_wrap_order() {
        // Threads 0/4, 1/5, ... share a core; cores {0,4},{1,5} form a cluster.
        let smt = [m(&[0, 4]), m(&[1, 5]), m(&[2, 6]), m(&[3, 7])];
        let clusters = [m(&[0, 1, 4, 5]), m(&[2, 3, 6, 7])];
        let desc = TopologyDesc { nr_cpus: 8, smt: &smt, clusters: &clusters, ..TopologyDesc::default() };
        let mut t = boxed::<8>();
        t.init(&desc).unwrap();
        assert_eq!(group_spans(&t, 5, 1), [m(&[1, 5]), m(&[0, 4])]);
        assert_eq!(group_spans(&t, 5, 2), [m(&[0, 1, 4, 5]), m(&[2, 3, 6, 7])]);
        assert_eq!(group_spans(&t, 6, 2), [m(&[2, 3, 6, 7]), m(&[0, 1, 4, 5])]);
        assert_eq!(group_spans(&t, 4, 0), singles([4, 0].into_iter()));
    }

    #[test]
    fn mc_equal_to_smt_degenerates_unless_packing() {
        // Each cluster is a single two-thread core.
        let sets = [r(0, 2), r(2, 4)];
        let mut desc = TopologyDesc { nr_cpus: 4, smt: &sets, clusters: &sets, ..TopologyDesc::default() };
        let mut t = boxed::<4>();
        t.init(&desc).unwrap();
        let levels: Vec<_> = t.domains(1).map(|d| d.level).collect();
        assert_eq!(levels, [Level::Smt, Level::Die]);
        assert!(t.domain(1, 0).unwrap().flags.contains(SdFlags::PREFER_SIBLING));
        assert_eq!(group_spans(&t, 1, 1), [r(0, 2), r(2, 4)]);
        assert_eq!(t.llc_size(1), 2);

        // ASYM_PACKING does not need groups, so MC stays, with a single group.
        let prio = [0, 0, 0, 0];
        desc.asym_packing = Some(&prio);
        t.init(&desc).unwrap();
        let levels: Vec<_> = t.domains(1).map(|d| (d.level, d.nr_groups)).collect();
        assert_eq!(levels, [(Level::Smt, 2), (Level::Mc, 1), (Level::Die, 2)]);
        assert_eq!(t.llc_size(1), 2);
    }

    #[test]
    fn asym_packing_preferred_cpus() {
        let smt = [r(0, 2), r(2, 4)];
        let mut desc = TopologyDesc { nr_cpus: 4, smt: &smt, ..TopologyDesc::default() };
        let mut t = boxed::<4>();
        t.init(&desc).unwrap();
        assert_eq!(t.asym_priority(3), -3);
        assert!(!t.domain(0, 1).unwrap().flags.contains(SdFlags::ASYM_PACKING));

        let default_prio = [0, -1, -2, -3];
        desc.asym_packing = Some(&default_prio);
        t.init(&desc).unwrap();
        let mc = t.domain(0, 1).unwrap();
        assert_eq!(mc.level, Level::Mc);
        assert!(mc.flags.contains(SdFlags::ASYM_PACKING));
        let prefer: Vec<_> = t.groups(0, 1).map(|g| (g.span, g.asym_prefer_cpu)).collect();
        assert_eq!(prefer, [(r(0, 2), 0), (r(2, 4), 2)]);

        let custom = [1, 5, 3, 3];
        desc.asym_packing = Some(&custom);
        t.init(&desc).unwrap();
        assert_eq!(t.asym_priority(1), 5);
        let prefer: Vec<_> = t.groups(3, 1).map(|g| g.asym_prefer_cpu).collect();
        assert_eq!(prefer, [2, 1]);
        assert_eq!(t.groups(0, 0).map(|g| g.asym_prefer_cpu).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn one_cpu_has_no_domain() {
        let mut t = boxed::<4>();
        t.init_flat(1).unwrap();
        assert_eq!((t.nr_cpus(), t.nr_levels(0), t.nr_groups_total()), (1, 0, 0));
        assert_eq!(t.llc_span(0), CpuMask::single(0));
        assert_eq!(t.groups(0, 0).count(), 0);
    }

    #[test]
    fn out_of_range_queries_are_empty() {
        let mut t = boxed::<8>();
        assert_eq!((t.nr_cpus(), t.nr_levels(0), t.llc_size(0)), (0, 0, 0));
        t.init_clusters(2, 2).unwrap();
        assert_eq!(t.domain(4, 0), None);
        assert_eq!(t.domain(usize::MAX, 0), None);
        assert_eq!(t.domain(0, 9), None);
        assert_eq!(t.groups(7, 0).count(), 0);
        assert_eq!(t.groups(0, 5).count(), 0);
        assert_eq!((t.capacity_orig(4), t.asym_priority(4), t.llc_size(4)), (0, i32::MIN, 0));
        assert_eq!(t.llc_span(usize::MAX), CpuMask::EMPTY);
        assert_eq!(t.llc_id(4), None);
        assert_eq!(t.asym_cpucapacity_level(99), None);
        assert_eq!(t.domains(99).count(), 0);
    }

    #[test]
    fn reinit_replaces_everything() {
        let mut t = boxed::<8>();
        t.init_numa(2, 2, 2).unwrap();
        t.init_flat(4).unwrap();
        assert_eq!(t.nr_cpus(), 4);
        assert_eq!(t.nr_levels(5), 0);
        assert_eq!(t.nr_groups_total(), 4);
        assert_eq!(group_spans(&t, 2, 0), singles([2, 3, 0, 1].into_iter()));
        assert_eq!(t.domain(0, 0).unwrap().span, r(0, 4));
    }

    #[test]
    fn large_flat_and_clustered_machines() {
        with_big_stack(|| {
            let mut t = boxed::<1024>();
            t.init_flat(1024).unwrap();
            let d = t.domain(1000, 0).unwrap();
            assert_eq!((d.level, d.span_weight, d.nr_groups), (Level::Mc, 1024, 1024));
            assert_eq!(t.groups(1000, 0).count(), 1024);
            assert_eq!(t.groups(1000, 0).nth(24).unwrap().span, CpuMask::single(0));
            assert_eq!(t.nr_groups_total(), 1024);
            assert_eq!((d.min_interval_ms, d.max_interval_ms), (1024, 2048));

            t.init_clusters(128, 8).unwrap();
            assert_eq!(t.nr_groups_total(), 1024 + 128);
            let mc = t.domain(1000, 0).unwrap();
            assert_eq!((mc.span, mc.nr_groups), (r(1000, 1008), 8));
            let die = t.domain(1000, 1).unwrap();
            assert_eq!((die.span_weight, die.nr_groups), (1024, 128));
            let spans = group_spans(&t, 1000, 1);
            assert_eq!((spans[0], spans[1], spans[127]), (r(1000, 1008), r(1008, 1016), r(992, 1000)));
            // The same group from different CPUs has one id.
            let id_from_0 = t.groups(0, 1).find(|g| g.span == r(8, 16)).unwrap().id;
            assert_eq!(t.local_group(9, 1).unwrap().id, id_from_0);
            assert_eq!(t.local_group(15, 1).unwrap().id, id_from_0);
            let mut seen = std::collections::BTreeSet::new();
            for cpu in 0..1024 {
                for idx in 0..t.nr_levels(cpu) {
                    seen.extend(t.groups(cpu, idx).map(|g| g.id));
                }
            }
            assert_eq!(seen.len(), 1024 + 128);
            assert_eq!(seen.last(), Some(&(1024 + 128 - 1)));
        });
    }

    #[test]
    fn too_many_for_the_table() {
        let mut t = boxed::<8>();
        assert_eq!(t.init_flat(9), Err(TopologyError::TooManyCpus { cpus: 9, max: 8 }));
        assert_eq!(
            t.init_clusters(usize::MAX, 2),
            Err(TopologyError::TooManyCpus { cpus: usize::MAX, max: 8 })
        );
        assert_eq!(
            t.init_big_little(usize::MAX, 1, 446),
            Err(TopologyError::TooManyCpus { cpus: usize::MAX, max: 8 })
        );
        assert_eq!(
            t.init_numa(usize::MAX / 2, 3, 1),
            Err(TopologyError::TooManyCpus { cpus: usize::MAX, max: 8 })
        );
        assert_eq!(Topology::<2048>::max_cpus(), MAX_CPUS);
        with_big_stack(|| {
            let mut big = Box::new(Topology::<2048>::empty());
            assert_eq!(big.init_flat(1025), Err(TopologyError::TooManyCpus { cpus: 1025, max: 1024 }));
        });
    }

    #[test]
    fn every_error_leaves_the_table_unchanged() {
        let mut t = boxed::<8>();
        t.init_clusters(2, 4).unwrap();
        let before = (t.nr_cpus(), t.nr_groups_total(), *t.domain(5, 1).unwrap(), group_spans(&t, 5, 1));
        let d = TopologyDesc { nr_cpus: 8, ..TopologyDesc::default() };
        let caps8 = [1024; 8];
        let prio3 = [0; 3];
        let halves = [r(0, 4), r(4, 8)];
        let quarters = [r(0, 2), r(2, 4), r(4, 6), r(6, 8)];
        let cases: [(TopologyDesc<'_>, TopologyError); 13] = [
            (TopologyDesc { nr_cpus: 0, ..d }, TopologyError::NoCpus),
            (TopologyDesc { nr_cpus: 9, ..d }, TopologyError::TooManyCpus { cpus: 9, max: 8 }),
            (TopologyDesc { capacity: &caps8[..7], ..d }, TopologyError::BadLength),
            (TopologyDesc { asym_packing: Some(&prio3), ..d }, TopologyError::BadLength),
            (
                TopologyDesc { capacity: &[1024, 1024, 0, 1024, 1024, 1024, 1024, 1024], ..d },
                TopologyError::ZeroCapacity { cpu: 2 },
            ),
            (
                TopologyDesc { capacity: &[1024, 1024, 1024, 1024, 1025, 1024, 1024, 1024], ..d },
                TopologyError::CapacityTooLarge { cpu: 4 },
            ),
            (TopologyDesc { clusters: &[r(0, 4), r(4, 9)], ..d }, TopologyError::CpuOutOfRange { cpu: 8 }),
            (
                TopologyDesc { smt: &[r(0, 8), CpuMask::EMPTY], ..d },
                TopologyError::EmptySet { level: Level::Smt },
            ),
            (
                TopologyDesc { clusters: &[r(0, 5), r(4, 8)], ..d },
                TopologyError::Overlap { level: Level::Mc },
            ),
            (
                TopologyDesc { nodes: &[r(0, 4), r(5, 8)], ..d },
                TopologyError::NotCovered { cpu: 4, level: Level::Die },
            ),
            (
                TopologyDesc { smt: &[r(0, 3), r(3, 8)], clusters: &halves, ..d },
                TopologyError::NotNested { level: Level::Smt },
            ),
            (
                TopologyDesc { clusters: &[r(0, 2), r(2, 6), r(6, 8)], nodes: &halves, ..d },
                TopologyError::NotNested { level: Level::Mc },
            ),
            // Without clusters, SMT sets must lie inside one node.
            (
                TopologyDesc { smt: &[r(0, 3), r(3, 8)], nodes: &halves, ..d },
                TopologyError::NotNested { level: Level::Smt },
            ),
        ];
        for (desc, err) in cases {
            assert_eq!(t.init(&desc), Err(err), "{desc:?}");
            let now = (t.nr_cpus(), t.nr_groups_total(), *t.domain(5, 1).unwrap(), group_spans(&t, 5, 1));
            assert_eq!(now, before);
        }
        // Valid variants of the same pieces are accepted.
        let ok = TopologyDesc { smt: &quarters, clusters: &halves, nodes: &halves, capacity: &caps8, ..d };
        assert_eq!(t.init(&ok), Ok(()));
        assert_eq!(t.init_flat(0), Err(TopologyError::NoCpus));
        assert_eq!(t.init_big_little(2, 2, 0), Err(TopologyError::ZeroCapacity { cpu: 0 }));
        assert_eq!(t.init_big_little(2, 2, 2000), Err(TopologyError::CapacityTooLarge { cpu: 0 }));
        assert_eq!(t.nr_cpus(), 8);
    }

    #[test]
    fn errors_display() {
        let e = TopologyError::NotCovered { cpu: 3, level: Level::Mc };
        assert_eq!(std::format!("{e}"), "cpu 3 is in no set at level MC");
    }

    /// A random machine of up to 64 CPUs: CPUs scattered over clusters, clusters over nodes,
    /// cores of up to two threads inside clusters.
    #[derive(Debug, Clone)]
    struct Machine {
        n: usize,
        smt: Vec<CpuMask>,
        clusters: Vec<CpuMask>,
        nodes: Vec<CpuMask>,
        caps: Vec<u64>,
        prio: Option<Vec<i32>>,
    }

    fn machine() -> impl Strategy<Value = Machine> {
        (1usize..=64).prop_flat_map(|n| {
            (
                proptest::collection::vec((0usize..8, 0usize..3), n),
                proptest::collection::vec(0usize..3, 8),
                proptest::collection::vec(prop_oneof![Just(446u64), Just(1024u64)], n),
                proptest::collection::vec(-4i32..4, n),
                (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
            )
                .prop_map(
                    move |(place, node_of, caps, prio, (smt, clusters, nodes, use_caps, packing))| {
                        let mut cl = [CpuMask::EMPTY; 8];
                        let mut core = [[CpuMask::EMPTY; 3]; 8];
                        for (cpu, &(c, k)) in place.iter().enumerate() {
                            cl[c].set(cpu);
                            core[c][k].set(cpu);
                        }
                        let mut nd = [CpuMask::EMPTY; 3];
                        for (c, &node) in node_of.iter().enumerate() {
                            nd[node] = nd[node].or(&cl[c]);
                        }
                        let keep =
                            |v: &[CpuMask]| v.iter().copied().filter(|s| !s.is_empty()).collect::<Vec<_>>();
                        Machine {
                            n,
                            smt: if smt { keep(core.as_flattened()) } else { Vec::new() },
                            clusters: if clusters { keep(&cl) } else { Vec::new() },
                            nodes: if nodes { keep(&nd) } else { Vec::new() },
                            caps: if use_caps { caps } else { Vec::new() },
                            prio: packing.then_some(prio),
                        }
                    },
                )
        })
    }

    fn check_machine(t: &Topology<64>, mc: &Machine) -> Result<(), TestCaseError> {
        let n = mc.n;
        let all = CpuMask::first_n(n);
        let mut ids: HashMap<(Level, CpuMask), usize> = HashMap::new();
        let mut spans_of: HashMap<usize, (Level, CpuMask)> = HashMap::new();
        for cpu in 0..n {
            let mut below: Option<&Domain> = None;
            for (idx, d) in t.domains(cpu).enumerate() {
                prop_assert!(d.span.contains(cpu));
                prop_assert!(d.span.is_subset_of(&all));
                prop_assert_eq!(d.span_weight, d.span.weight());
                prop_assert!(d.span_weight > 1);
                if let Some(child) = below {
                    prop_assert!(child.span.is_subset_of(&d.span));
                    prop_assert!(child.level < d.level);
                }
                let groups: Vec<&Group> = t.groups(cpu, idx).collect();
                prop_assert_eq!(groups.len(), d.nr_groups);
                prop_assert!(groups[0].span.contains(cpu), "local group first");
                if let Some(child) = below {
                    prop_assert_eq!(groups[0].span, child.span);
                }
                let mut covered = CpuMask::EMPTY;
                let mut last_key = None;
                for g in &groups {
                    prop_assert!(!g.span.intersects(&covered), "groups overlap");
                    covered = covered.or(&g.span);
                    prop_assert_eq!(g.weight, g.span.weight());
                    let caps: Vec<u64> = g.span.iter().map(|c| t.capacity_orig(c)).collect();
                    prop_assert_eq!(g.capacity, caps.iter().sum::<u64>());
                    prop_assert_eq!(g.min_capacity, *caps.iter().min().unwrap());
                    prop_assert_eq!(g.max_capacity, *caps.iter().max().unwrap());
                    prop_assert!(g.span.contains(g.asym_prefer_cpu));
                    let best = g.span.iter().map(|c| t.asym_priority(c)).max().unwrap();
                    let first_best = g.span.iter().find(|&c| t.asym_priority(c) == best).unwrap();
                    prop_assert_eq!(g.asym_prefer_cpu, first_best);
                    // Wrapped order: each group's nearest CPU after `cpu` comes later.
                    let key = g.span.iter().map(|c| (c + MAX_CPUS - cpu) % MAX_CPUS).min().unwrap();
                    prop_assert!(last_key < Some(key), "wrap order");
                    last_key = Some(key);
                    prop_assert!(g.id < t.nr_groups_total());
                    let id = *ids.entry((d.level, g.span)).or_insert(g.id);
                    prop_assert_eq!(id, g.id, "one id per group");
                    let owner = *spans_of.entry(g.id).or_insert((d.level, g.span));
                    prop_assert_eq!(owner, (d.level, g.span), "one group per id");
                }
                prop_assert_eq!(covered, d.span, "groups cover the span");
                below = Some(d);
            }
            if n > 1 {
                prop_assert_eq!(below.map(|d| d.span), Some(all), "top spans every CPU");
            }
            let llc = t.llc_span(cpu);
            prop_assert!(llc.contains(cpu));
            prop_assert_eq!(t.llc_size(cpu), llc.weight());
            if let Some(cl) = mc.clusters.iter().find(|s| s.contains(cpu)) {
                prop_assert!(llc.is_subset_of(cl));
            }
        }
        prop_assert_eq!(ids.len(), t.nr_groups_total());
        let listed: Vec<usize> = t.all_groups().map(|g| g.id).collect();
        prop_assert_eq!(listed, (0..t.nr_groups_total()).collect::<Vec<_>>());
        Ok(())
    }

    proptest! {
        #[test]
        fn random_partitions_build_consistent_domains(mc in machine()) {
            let desc = TopologyDesc {
                nr_cpus: mc.n,
                smt: &mc.smt,
                clusters: &mc.clusters,
                nodes: &mc.nodes,
                capacity: &mc.caps,
                asym_packing: mc.prio.as_deref(),
            };
            let mut t = boxed::<64>();
            prop_assert_eq!(t.init(&desc), Ok(()));
            check_machine(&t, &mc)?;
        }
    }
}
