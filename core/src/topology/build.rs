//! Building the table: [`Topology::init`], the presets, and the construction of every CPU's
//! domains and groups from a validated [`Plan`].

use super::desc::{Caps, Plan, Sets};
use super::{
    Domain, Group, Level, SdFlags, Topology, TopologyDesc, TopologyError, CAPACITY_SCALE, MAX_LEVELS, NO_ID,
};
use crate::cpumask::CpuMask;

impl<const CPUS: usize> Topology<CPUS> {
    /// Builds the domains of `desc`. Everything is validated first; on error `self` is left
    /// exactly as it was.
    pub fn init(&mut self, desc: &TopologyDesc<'_>) -> Result<(), TopologyError> {
        // A machine of one CPU described plainly is built directly (it has no domains), so a
        // one-CPU image does not link the planner; `CPUS == 1` is a constant.
        let plain = desc.smt.is_empty() && desc.clusters.is_empty() && desc.nodes.is_empty();
        if CPUS == 1 && desc.nr_cpus == 1 && plain && desc.asym_packing.is_none() && desc.capacity.len() <= 1
        {
            return self.init_single(desc.capacity.first().copied().unwrap_or(CAPACITY_SCALE));
        }
        self.apply(&Plan::from_desc(desc))
    }

    /// One CPU of capacity `cap`: what [`Topology::init`] plans for it, without the planner
    /// (no domain survives, so no group is used).
    fn init_single(&mut self, cap: u64) -> Result<(), TopologyError> {
        match cap {
            0 => return Err(TopologyError::ZeroCapacity { cpu: 0 }),
            c if c > CAPACITY_SCALE => return Err(TopologyError::CapacityTooLarge { cpu: 0 }),
            _ => {}
        }
        self.nr_cpus = 1;
        self.nr_groups_total = 0;
        for cpu in 0..CPUS {
            self.capacity[cpu] = if cpu == 0 { cap } else { 0 };
            self.priority[cpu] = 0;
            self.nr_levels[cpu] = 0;
            self.domains[cpu] = [Domain::EMPTY; MAX_LEVELS];
            for l in 0..MAX_LEVELS {
                self.leader[l][cpu] = 0;
                self.groups[l][cpu] = Group::EMPTY;
            }
        }
        Ok(())
    }

    /// One cluster of `nr_cpus` equal CPUs: a single MC level with one group per CPU.
    ///
    /// Built directly, without the planner, into the table the planner makes for it (a test
    /// compares the two), so a small SMP image that uses this preset does not link the
    /// planner.
    pub fn init_flat(&mut self, nr_cpus: usize) -> Result<(), TopologyError> {
        let n = nr_cpus;
        if n == 0 {
            return Err(TopologyError::NoCpus);
        }
        let max = Self::max_cpus();
        if n > max {
            return Err(TopologyError::TooManyCpus { cpus: n, max });
        }
        self.nr_cpus = n;
        let all = CpuMask::first_n(n);
        for cpu in 0..CPUS {
            let live = cpu < n;
            self.capacity[cpu] = if live { CAPACITY_SCALE } else { 0 };
            self.priority[cpu] = if live { -(cpu as i32) } else { 0 };
            self.nr_levels[cpu] = 0;
            self.domains[cpu] = [Domain::EMPTY; MAX_LEVELS];
            for l in 0..MAX_LEVELS {
                // SMT spans are the CPUs themselves (set below); MC, DIE and NUMA span every
                // CPU, led by CPU 0.
                self.leader[l][cpu] = 0;
                self.groups[l][cpu] = Group::EMPTY;
            }
        }
        for cpu in 0..n {
            self.leader[0][cpu] = cpu as u16;
            let own = self.make_group(CpuMask::single(cpu));
            self.groups[0][cpu] = own;
            self.groups[1][cpu] = own;
        }
        self.groups[2][0] = self.make_group(all);
        self.groups[3][0] = self.make_group(all);
        // With several CPUs only MC survives (SMT spans one CPU); its groups are the CPUs. One
        // CPU keeps no domain.
        if n > 1 {
            for cpu in 0..n {
                self.nr_levels[cpu] = 1;
                self.domains[cpu][0] = Domain::sd_init(Level::Mc, all, n, false, false);
                self.groups[1][cpu].id = cpu;
            }
        }
        self.nr_groups_total = if n > 1 { n } else { 0 };
        Ok(())
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

    fn too_many() -> TopologyError {
        TopologyError::TooManyCpus { cpus: usize::MAX, max: Self::max_cpus() }
    }

    fn product(a: usize, b: usize) -> Result<usize, TopologyError> {
        a.checked_mul(b).ok_or(Self::too_many())
    }

    pub(super) fn apply(&mut self, plan: &Plan<'_>) -> Result<(), TopologyError> {
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
        let mut g = Group { id: NO_ID, span, weight: span.weight(), min_capacity: u64::MAX, ..Group::EMPTY };
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
            // Each domain is compared with the last one kept below it; the survivors are
            // copied into a fresh chain (copies between distinct arrays: no memmove linked).
            let built = self.domains[cpu];
            let mut chain = [Domain::EMPTY; MAX_LEVELS];
            let mut len = 0;
            for d in built.iter().take(usize::from(self.nr_levels[cpu]).min(MAX_LEVELS)) {
                if len > 0 && chain[len - 1].parent_degenerate(d, multi_node) {
                    // The grandparent used to read PREFER_SIBLING on the parent; the child,
                    // covering the same CPUs, now stands in for it.
                    if d.flags.contains(SdFlags::PREFER_SIBLING) {
                        chain[len - 1].flags.insert(SdFlags::PREFER_SIBLING);
                    }
                    continue;
                }
                chain[len] = *d;
                len += 1;
            }
            let skip = usize::from(len > 0 && chain[0].degenerate());
            let mut kept = [Domain::EMPTY; MAX_LEVELS];
            for (k, d) in chain[skip..len].iter().enumerate() {
                kept[k] = *d;
            }
            self.domains[cpu] = kept;
            self.nr_levels[cpu] = (len - skip) as u8;
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
