//! The scheduler's view of the machine, from what the device tree says and the boot line:
//!
//! - NUMA nodes: each CPU's `numa-node-id` (QEMU's `-numa node,cpus=...`);
//! - clusters: the boot line's `clusters=K` (K CPUs at a time inside each node) if given,
//!   otherwise the device tree's `/cpus/cpu-map` (QEMU's `-smp N,clusters=C,cores=K` on
//!   aarch64; a socket per NUMA node on riscv64), each cluster cut to the node it lies in, as
//!   Linux narrows a core group to its node;
//! - capacities: the boot line's `capacity=` if given, otherwise each CPU's
//!   `capacity-dmips-mhz` scaled so the largest is 1024 (QEMU sets none: every CPU 1024).
//!
//! Node distances are not read: the core has one NUMA level.

use sched_core::{CpuMask, TopologyDesc};

// (Through `super`, the crate's root in the kernel: the runner compiles this file on the
// host for its tests, beside the kernel's device-tree reader.)
use super::arch::MAX_CPUS;
use super::devicetree::{DeviceTree, Node};

/// What the machine description says of one CPU (kernel CPU index order).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuInfo {
    /// `numa-node-id`.
    pub node: Option<usize>,
    /// The innermost `cpu-map` cluster holding the CPU, numbered in the map's order.
    pub cluster: Option<usize>,
    /// `capacity-dmips-mhz`.
    pub dmips: Option<usize>,
    /// The CPU node's `phandle`, which `cpu-map` entries point at.
    pub phandle: Option<usize>,
}

/// Per-CPU capacities from the boot line (`capacity=446*4,1024*4`), in CPU order.
#[derive(Debug, Clone, Copy)]
pub struct Capacities {
    vals: [u16; MAX_CPUS],
    len: usize,
}

/// The largest capacity, the biggest CPU's (`SCHED_CAPACITY_SCALE`).
pub const CAPACITY_SCALE: u32 = 1024;

impl Capacities {
    /// None given.
    pub const NONE: Capacities = Capacities { vals: [0; MAX_CPUS], len: 0 };

    /// Parses a comma-separated list of capacities in `1..=1024`, each optionally `*count`.
    /// `None` if malformed, out of range or longer than `MAX_CPUS`.
    pub fn parse(s: &str) -> Option<Capacities> {
        let mut c = Capacities::NONE;
        for item in s.split(',') {
            let (v, count) = match item.split_once('*') {
                Some((v, n)) => (v, n.parse::<usize>().ok().filter(|&n| n > 0)?),
                None => (item, 1),
            };
            let v = v.parse::<u16>().ok().filter(|v| (1..=CAPACITY_SCALE as u16).contains(v))?;
            for _ in 0..count {
                *c.vals.get_mut(c.len)? = v;
                c.len += 1;
            }
        }
        Some(c)
    }

    /// How many CPUs the list covers (0: none given).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none was given.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Why the machine cannot be laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// `clusters=k` does not divide the `per` CPUs of a node (or of the machine).
    Clusters {
        /// The cluster size asked for.
        k: usize,
        /// CPUs per node.
        per: usize,
    },
    /// Some CPUs have a node and others none, or the nodes differ in size.
    Nodes,
    /// The `cpu-map` places some CPUs in a cluster and leaves others out.
    CpuMap,
    /// `capacity=` lists `given` values for `cpus` CPUs.
    Capacities {
        /// Values given.
        given: usize,
        /// CPUs of the machine.
        cpus: usize,
    },
}

/// Where the clusters came from, for the boot report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterSource {
    /// One cluster per node.
    None,
    /// The boot line's `clusters=`.
    BootLine,
    /// The device tree's `cpu-map`.
    CpuMap,
}

/// Where the capacities came from, for the boot report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacitySource {
    /// Every CPU 1024.
    Equal,
    /// The boot line's `capacity=`.
    BootLine,
    /// The device tree's `capacity-dmips-mhz`.
    DeviceTree,
}

/// Nodes, clusters and capacities, kernel CPU indices (the boot CPU is 0).
pub struct Layout {
    n: usize,
    nodes: [CpuMask; MAX_CPUS],
    nr_nodes: usize,
    clusters: [CpuMask; MAX_CPUS],
    nr_clusters: usize,
    /// Why clusters were made (or not).
    pub cluster_source: ClusterSource,
    capacity: [u64; MAX_CPUS],
    /// Where the capacities came from.
    pub capacity_source: CapacitySource,
}

impl Layout {
    /// The layout of the `cpus.len()` CPUs described by `cpus`, with `k` from the boot line's
    /// `clusters=` (0: not given; at least a node's CPUs: one cluster per node) and `caps`
    /// from its `capacity=`.
    pub fn new(cpus: &[CpuInfo], k: usize, caps: &Capacities) -> Result<Layout, LayoutError> {
        let n = cpus.len().min(MAX_CPUS);
        let cpus = &cpus[..n];
        let mut layout = Layout {
            n,
            nodes: [CpuMask::EMPTY; MAX_CPUS],
            nr_nodes: 0,
            clusters: [CpuMask::EMPTY; MAX_CPUS],
            nr_clusters: 0,
            cluster_source: ClusterSource::None,
            capacity: [CAPACITY_SCALE as u64; MAX_CPUS],
            capacity_source: CapacitySource::Equal,
        };
        let numbered = cpus.iter().filter(|c| c.node.is_some()).count();
        if numbered != 0 && numbered != n {
            return Err(LayoutError::Nodes);
        }
        // Nodes in order of first appearance, so the boot CPU's node is node 0.
        layout.nr_nodes = group(cpus.iter().map(|c| c.node.unwrap_or(0)), &mut layout.nodes);
        let per = n / layout.nr_nodes.max(1);
        if layout.nodes[..layout.nr_nodes].iter().any(|m| m.weight() != per) {
            return Err(LayoutError::Nodes);
        }
        if k != 0 {
            layout.cluster_source = ClusterSource::BootLine;
            // (A cluster of a node's CPUs is the node: no level of its own. A larger one is
            // no cluster of this machine.)
            if k > per {
                return Err(LayoutError::Clusters { k, per });
            }
            if k < per {
                if !per.is_multiple_of(k) {
                    return Err(LayoutError::Clusters { k, per });
                }
                // Each node's CPUs, in index order, k at a time.
                for i in 0..layout.nr_nodes {
                    let node = layout.nodes[i];
                    let mut cluster = CpuMask::EMPTY;
                    for cpu in (0..n).filter(|&c| node.contains(c)) {
                        cluster.set(cpu);
                        if cluster.weight() == k {
                            layout.push_cluster(cluster);
                            cluster = CpuMask::EMPTY;
                        }
                    }
                }
            }
        } else {
            let mapped = cpus.iter().filter(|c| c.cluster.is_some()).count();
            if mapped != 0 && mapped != n {
                return Err(LayoutError::CpuMap);
            }
            if mapped == n {
                // Each cpu-map cluster, cut to each node it lies in.
                let mut sets = [CpuMask::EMPTY; MAX_CPUS];
                let nr = group(cpus.iter().map(|c| c.cluster.unwrap_or(0)), &mut sets);
                for set in &sets[..nr] {
                    for i in 0..layout.nr_nodes {
                        let part = set.and(&layout.nodes[i]);
                        if !part.is_empty() {
                            layout.push_cluster(part);
                        }
                    }
                }
                layout.cluster_source = ClusterSource::CpuMap;
                // As many clusters as nodes means one cluster per node: no level of its own.
                if layout.nr_clusters <= layout.nr_nodes {
                    layout.nr_clusters = 0;
                }
            }
        }
        if !caps.is_empty() {
            if caps.len() != n {
                return Err(LayoutError::Capacities { given: caps.len(), cpus: n });
            }
            for (c, &v) in layout.capacity.iter_mut().zip(&caps.vals[..n]) {
                *c = v as u64;
            }
            layout.capacity_source = CapacitySource::BootLine;
        } else if cpus.iter().all(|c| c.dmips.is_some_and(|d| d > 0)) {
            // Scaled so the largest is 1024, as Linux does without frequencies.
            let max = cpus.iter().filter_map(|c| c.dmips).max().unwrap_or(1) as u64;
            for (c, info) in layout.capacity.iter_mut().zip(cpus) {
                // (In u128: the property may be 64 bits wide, and the product must not wrap.)
                let scaled = info.dmips.unwrap_or(0) as u128 * CAPACITY_SCALE as u128 / max as u128;
                *c = (scaled as u64).max(1);
            }
            layout.capacity_source = CapacitySource::DeviceTree;
        }
        Ok(layout)
    }

    fn push_cluster(&mut self, set: CpuMask) {
        if let Some(slot) = self.clusters.get_mut(self.nr_clusters) {
            *slot = set;
            self.nr_clusters += 1;
        }
    }

    /// How many NUMA nodes (1: none).
    pub fn nodes(&self) -> usize {
        self.nr_nodes.max(1)
    }

    /// How many clusters the MC level has (0: one per node, no level of its own).
    pub fn clusters(&self) -> usize {
        self.nr_clusters
    }

    /// The clusters' common size, if they have one (0: no clusters, or of unequal sizes).
    pub fn cluster_size(&self) -> usize {
        let w = self.clusters.first().map_or(0, |m| m.weight());
        if self.nr_clusters > 0 && self.clusters[..self.nr_clusters].iter().all(|m| m.weight() == w) {
            w
        } else {
            0
        }
    }

    /// Whether the CPUs differ in capacity.
    pub fn asymmetric(&self) -> bool {
        self.capacity[..self.n].iter().any(|&c| c != self.capacity[0])
    }

    /// Each CPU's capacity (1024 on an equal machine).
    pub fn capacities(&self) -> &[u64] {
        &self.capacity[..self.n]
    }

    /// The description the core's `init` takes.
    pub fn desc(&self) -> TopologyDesc<'_> {
        TopologyDesc {
            nr_cpus: self.n,
            clusters: &self.clusters[..self.nr_clusters],
            nodes: if self.nr_nodes > 1 { &self.nodes[..self.nr_nodes] } else { &[] },
            capacity: if self.asymmetric() { &self.capacity[..self.n] } else { &[] },
            ..TopologyDesc::default()
        }
    }
}

/// Groups CPUs by a key (in order of first appearance) into `sets`; returns how many.
fn group(keys: impl Iterator<Item = usize>, sets: &mut [CpuMask; MAX_CPUS]) -> usize {
    let mut seen = [usize::MAX; MAX_CPUS];
    let mut nr = 0;
    for (cpu, key) in keys.enumerate().take(MAX_CPUS) {
        let slot = match seen[..nr].iter().position(|&s| s == key) {
            Some(i) => i,
            None => {
                seen[nr] = key;
                nr += 1;
                nr - 1
            }
        };
        sets[slot].set(cpu);
    }
    nr
}

/// Why a `cpu-map` cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuMapError {
    /// The map names this CPU (kernel index) more than once: in two cores, or as a core and
    /// as one of its threads. Which cluster it belongs to is then a guess.
    NamedTwice {
        /// The CPU named twice.
        cpu: usize,
    },
}

/// Reads `/cpus/cpu-map` into `cpus[i].cluster`, matching its `cpu` phandles against each
/// CPU's. CPUs the map does not name keep `None`. Only the innermost clusters count (a core's
/// parent); a socket holding cores directly counts as their cluster. A CPU named twice is
/// refused, and `cpus` may then hold part of the map.
pub fn read_cpu_map(fdt: &DeviceTree<'_>, cpus: &mut [CpuInfo]) -> Result<(), CpuMapError> {
    let Some(map) = fdt.find("/cpus/cpu-map") else { return Ok(()) };
    let mut next = 0;
    walk(map, cpus, &mut next, 0)
}

/// The cpu-map's nesting: socket, cluster (possibly nested), core, thread.
const MAX_DEPTH: usize = 6;

fn walk(node: Node<'_>, cpus: &mut [CpuInfo], next: &mut usize, depth: usize) -> Result<(), CpuMapError> {
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    let mut own: Option<usize> = None;
    for child in node.children() {
        if child.name.starts_with("core") {
            // A core: its `cpu`, or its threads' (SMT siblings share the core's cluster).
            let id = *own.get_or_insert_with(|| {
                *next += 1;
                *next - 1
            });
            let mut mark = |p: Option<usize>| -> Result<(), CpuMapError> {
                let Some(p) = p else { return Ok(()) };
                if let Some((cpu, c)) = cpus.iter_mut().enumerate().find(|(_, c)| c.phandle == Some(p)) {
                    if c.cluster.is_some() {
                        return Err(CpuMapError::NamedTwice { cpu });
                    }
                    c.cluster = Some(id);
                }
                Ok(())
            };
            mark(child.property("cpu").and_then(|p| p.as_usize()))?;
            for thread in child.children() {
                mark(thread.property("cpu").and_then(|p| p.as_usize()))?;
            }
        } else {
            walk(child, cpus, next, depth + 1)?;
        }
    }
    Ok(())
}
