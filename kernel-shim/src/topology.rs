//! The scheduler's view of the machine, from what the device tree says and the boot line's
//! `clusters=`: NUMA nodes (each CPU's `numa-node-id`, as QEMU's `-numa node,cpus=...` gives
//! it), clusters of `k` CPUs inside each node, or one flat cluster. Node distances are not
//! read: the core has one NUMA level.

use sched_core::{CpuMask, TopologyDesc};

use crate::arch::MAX_CPUS;

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
}

/// Nodes and clusters as CPU sets, kernel CPU indices (the boot CPU is 0).
pub struct Layout {
    n: usize,
    nodes: [CpuMask; MAX_CPUS],
    nr_nodes: usize,
    clusters: [CpuMask; MAX_CPUS],
    nr_clusters: usize,
}

impl Layout {
    /// The layout of `node_of.len()` CPUs whose nodes are `node_of` (all `None`: one node),
    /// with clusters of `k` CPUs inside each node (0, or at least a node's CPUs: one cluster
    /// per node).
    pub fn new(node_of: &[Option<usize>], k: usize) -> Result<Layout, LayoutError> {
        let n = node_of.len().min(MAX_CPUS);
        let mut layout = Layout {
            n,
            nodes: [CpuMask::EMPTY; MAX_CPUS],
            nr_nodes: 0,
            clusters: [CpuMask::EMPTY; MAX_CPUS],
            nr_clusters: 0,
        };
        let numbered = node_of.iter().take(n).filter(|x| x.is_some()).count();
        if numbered != 0 && numbered != n {
            return Err(LayoutError::Nodes);
        }
        // Nodes in order of first appearance, so the boot CPU's node is node 0.
        let mut seen = [usize::MAX; MAX_CPUS];
        for (cpu, node) in node_of.iter().take(n).enumerate() {
            let id = node.unwrap_or(0);
            let slot = match seen[..layout.nr_nodes].iter().position(|&s| s == id) {
                Some(i) => i,
                None => {
                    seen[layout.nr_nodes] = id;
                    layout.nr_nodes += 1;
                    layout.nr_nodes - 1
                }
            };
            layout.nodes[slot].set(cpu);
        }
        let per = n / layout.nr_nodes.max(1);
        if layout.nodes[..layout.nr_nodes].iter().any(|m| m.weight() != per) {
            return Err(LayoutError::Nodes);
        }
        if k != 0 && k < per {
            if !per.is_multiple_of(k) {
                return Err(LayoutError::Clusters { k, per });
            }
            // Each node's CPUs, in index order, k at a time.
            for node in &layout.nodes[..layout.nr_nodes] {
                let mut cluster = CpuMask::EMPTY;
                for cpu in (0..n).filter(|&c| node.contains(c)) {
                    cluster.set(cpu);
                    if cluster.weight() == k {
                        layout.clusters[layout.nr_clusters] = cluster;
                        layout.nr_clusters += 1;
                        cluster = CpuMask::EMPTY;
                    }
                }
            }
        }
        Ok(layout)
    }

    /// How many NUMA nodes (1: none).
    pub fn nodes(&self) -> usize {
        self.nr_nodes.max(1)
    }

    /// The description the core's `init` takes.
    pub fn desc(&self) -> TopologyDesc<'_> {
        TopologyDesc {
            nr_cpus: self.n,
            clusters: &self.clusters[..self.nr_clusters],
            nodes: if self.nr_nodes > 1 { &self.nodes[..self.nr_nodes] } else { &[] },
            ..TopologyDesc::default()
        }
    }
}
