//! Scheduling groups and the iterator over one domain's groups.

use crate::cpumask::{CpuMask, MAX_CPUS};

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
    pub(super) const EMPTY: Group = Group {
        id: 0,
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
    pub(super) table: &'a [Group],
    /// First CPU of each CPU's group; `None` at SMT, where every CPU is its own group.
    pub(super) leaders: Option<&'a [u16]>,
    pub(super) span: CpuMask,
    pub(super) start: usize,
    pub(super) next: usize,
    pub(super) wrapped: bool,
    /// The CPUs of the groups returned so far.
    pub(super) covered: CpuMask,
}

impl Groups<'static> {
    pub(super) const NONE: Self = Groups {
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
            if self.covered.contains(cpu) {
                // A returned group covers it: go on from the next CPU of the span that none
                // covers, found a word at a time (a group of a large machine's top level
                // spans a cluster).
                self.next = self.span.next_from_and_not(&self.covered, cpu).unwrap_or(MAX_CPUS);
                continue;
            }
            self.next = cpu + 1;
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
