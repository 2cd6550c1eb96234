//! The machine description, its errors, and its validation into a [`Plan`] for the builder.

use super::domain::Level;
use crate::cpumask::CpuMask;
use crate::limits::{ASYM_CAPACITY, CAPACITY_SCALE, NUMA, SMT};

/// A machine, as [`Topology::init`](super::Topology::init) reads it. CPUs are numbered `0..nr_cpus`.
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
/// lengths, the capacities, the SMT sets, the clusters, the nodes, nesting, then the features
/// the machine needs. Errors about
/// the `nodes` list name [`Level::Die`], the level each node becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
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
    BadLength {
        /// The slice: `"capacity"` or `"asym_packing"`.
        slice: &'static str,
        /// Its length.
        len: usize,
        /// The CPUs it must cover.
        cpus: usize,
    },
    /// The machine needs a feature this build of sched-core left out: `"asym-capacity"` for
    /// capacities that differ or asym-packing priorities, `"smt"` for SMT sets of more than
    /// one CPU, `"numa"` for more than one node.
    NotBuiltIn {
        /// The crate feature to enable.
        feature: &'static str,
    },
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
            TopologyError::BadLength { slice, len, cpus } => {
                write!(f, "{slice} has {len} entries for {cpus} CPUs")
            }
            TopologyError::NotBuiltIn { feature } => {
                write!(f, "this machine needs sched-core's `{feature}` feature")
            }
        }
    }
}

impl core::error::Error for TopologyError {}

/// A list of CPU sets, either given or generated (presets and defaults need no storage).
#[derive(Debug, Clone, Copy)]
pub(super) enum Sets<'a> {
    /// Sets given by the caller.
    List(&'a [CpuMask]),
    /// `count` runs of `size` consecutive CPUs, from CPU 0.
    Blocks { count: usize, size: usize },
    /// CPUs `0..cut` and `cut..end`, leaving out an empty part.
    Cut { cut: usize, end: usize },
}

impl Sets<'_> {
    pub(super) const NONE: Sets<'static> = Sets::List(&[]);

    pub(super) fn len(&self) -> usize {
        match *self {
            Sets::List(l) => l.len(),
            Sets::Blocks { count, .. } => count,
            Sets::Cut { cut, end } => usize::from(cut.min(end) > 0) + usize::from(end > cut),
        }
    }

    pub(super) fn get(&self, i: usize) -> CpuMask {
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
pub(super) enum Caps<'a> {
    /// Given; empty = all [`CAPACITY_SCALE`].
    List(&'a [u64]),
    /// CPUs below `little` have `little_cap`, the others [`CAPACITY_SCALE`].
    Split { little: usize, little_cap: u64 },
}

impl Caps<'_> {
    pub(super) fn get(&self, cpu: usize) -> u64 {
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
pub(super) struct Plan<'a> {
    pub(super) nr_cpus: usize,
    smt: Sets<'a>,
    clusters: Sets<'a>,
    nodes: Sets<'a>,
    pub(super) caps: Caps<'a>,
    pub(super) prio: Option<&'a [i32]>,
}

impl<'a> Plan<'a> {
    pub(super) fn from_desc(d: &TopologyDesc<'a>) -> Self {
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
    pub(super) fn preset(nr_cpus: usize, clusters: Sets<'a>, nodes: Sets<'a>) -> Self {
        Plan { nr_cpus, smt: Sets::NONE, clusters, nodes, caps: Caps::List(&[]), prio: None }
    }

    /// The spans of `level`, defaults filled in.
    pub(super) fn level_sets(&self, level: Level) -> Sets<'a> {
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

    pub(super) fn multi_node(&self) -> bool {
        self.nodes.len() > 1
    }

    pub(super) fn validate(&self, max: usize) -> Result<(), TopologyError> {
        let n = self.nr_cpus;
        if n == 0 {
            return Err(TopologyError::NoCpus);
        }
        if n > max {
            return Err(TopologyError::TooManyCpus { cpus: n, max });
        }
        if let Caps::List(l) = self.caps {
            if !l.is_empty() && l.len() != n {
                return Err(TopologyError::BadLength { slice: "capacity", len: l.len(), cpus: n });
            }
        }
        if let Some(p) = self.prio.filter(|p| p.len() != n) {
            return Err(TopologyError::BadLength { slice: "asym_packing", len: p.len(), cpus: n });
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
        nested(self.clusters, self.nodes, Level::Mc)?;
        let top = (0..n).map(|cpu| self.caps.get(cpu)).max().unwrap_or(CAPACITY_SCALE);
        let unequal = (0..n).any(|cpu| self.caps.get(cpu) != top);
        if !ASYM_CAPACITY && (unequal || self.prio.is_some()) {
            return Err(TopologyError::NotBuiltIn { feature: "asym-capacity" });
        }
        if !SMT && (0..self.smt.len()).any(|i| self.smt.get(i).weight() > 1) {
            return Err(TopologyError::NotBuiltIn { feature: "smt" });
        }
        if !NUMA && self.multi_node() {
            return Err(TopologyError::NotBuiltIn { feature: "numa" });
        }
        Ok(())
    }
}
