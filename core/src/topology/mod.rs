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

mod build;
mod desc;
mod domain;
mod group;
#[cfg(test)]
mod tests;

pub use desc::{TopologyDesc, TopologyError};
pub use domain::{Domain, Level, SdFlags};
pub use group::{Group, Groups};

use crate::cpumask::{CpuMask, MAX_CPUS};

use crate::limits::CAPACITY_SCALE;
pub use crate::limits::{ASYM_CAPACITY, MAX_LEVELS, NUMA, SMT};

/// The `id` of a group the planner built that no surviving domain uses. (Entries no group
/// fills are `Group::EMPTY`: all zeros, weight 0, so an empty topology needs no `.data`.)
const NO_ID: usize = usize::MAX;

/// Every CPU's scheduling domains and the groups they share, for up to `CPUS` CPUs
/// (at most [`MAX_CPUS`]). Two tables compare equal when every entry is the same.
#[derive(PartialEq, Eq)]
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
        self.domains(cpu).position(|d| d.flags.asym_cpucapacity())
    }

    /// Number of distinct groups over all surviving domains; group ids are `0..` this.
    pub fn nr_groups_total(&self) -> usize {
        self.nr_groups_total
    }

    /// Every group of a surviving domain, once, in id order (to set up per-group state).
    pub fn all_groups(&self) -> impl Iterator<Item = &Group> + '_ {
        self.groups.iter().flatten().filter(|g| g.id != NO_ID && g.weight > 0)
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
}
