//! What a simulated machine is: its shape (the topology grammar) and its configuration.

use sched_core::topology::{Topology, TopologyError};
use sched_core::{Features, RunnableInit};

/// The machine's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum TopologyKind {
    /// One cluster of all CPUs (what Linux builds on QEMU virt).
    Flat,
    /// Clusters of this many CPUs (2×4 is the seed's octo core).
    Clusters(usize),
    /// First half LITTLE CPUs of this capacity, second half big (1024).
    BigLittle(u64),
    /// Two NUMA nodes, each with clusters of this many CPUs.
    Numa(usize),
    /// `nodes` NUMA nodes of equal CPU counts (in order), each with clusters of `cluster`
    /// CPUs (0, or at least a node's CPUs: one cluster per node) — what the kernel builds
    /// from QEMU's `-numa node` options.
    NumaNodes {
        /// NUMA nodes.
        nodes: usize,
        /// Cluster size inside a node.
        cluster: usize,
    },
}

impl TopologyKind {
    /// Parses `flat`, `2x4`-style `clusters:4`, `biglittle:446`, `numa:4`, `nodes:4` (4 NUMA
    /// nodes) or `nodes:4:2` (4 nodes of clusters of 2).
    pub fn parse(s: &str) -> Option<TopologyKind> {
        let (name, arg) = s.split_once(':').unwrap_or((s, ""));
        match name {
            "nodes" => {
                let (nodes, cluster) = arg.split_once(':').unwrap_or((arg, "0"));
                let nodes = nodes.parse().ok().filter(|&n| n > 0)?;
                Some(TopologyKind::NumaNodes { nodes, cluster: cluster.parse().ok()? })
            }
            "flat" if !s.contains(':') => Some(TopologyKind::Flat),
            "clusters" => arg.parse().ok().map(TopologyKind::Clusters),
            // `biglittle` alone: the LITTLE capacity of the common Arm pairs.
            "biglittle" if !s.contains(':') => Some(TopologyKind::BigLittle(446)),
            "biglittle" => arg.parse().ok().map(TopologyKind::BigLittle),
            "numa" => arg.parse().ok().map(TopologyKind::Numa),
            _ => None,
        }
    }

    /// The grammar [`TopologyKind::parse`] takes, for messages.
    pub const GRAMMAR: &'static str = "flat, clusters:K, biglittle:CAP, numa:K, nodes:N or nodes:N:K";

    /// Whether this shape fits `cpus` CPUs; `Err` says why in a few words.
    pub fn check(self, cpus: usize) -> Result<(), String> {
        let divides = |k: usize, of: usize, what: &str| {
            if k == 0 || !of.is_multiple_of(k) {
                Err(format!("{k} does not divide the {of} CPUs of {what}"))
            } else {
                Ok(())
            }
        };
        match self {
            TopologyKind::Flat => Ok(()),
            TopologyKind::Clusters(0) => Err("clusters of 0 CPUs (one cluster of all is `flat`)".into()),
            TopologyKind::Clusters(k) if k >= cpus => Ok(()),
            TopologyKind::Clusters(k) => divides(k, cpus, "the machine"),
            TopologyKind::BigLittle(cap) if cap == 0 || cap > 1024 => {
                Err(format!("the LITTLE capacity {cap} is not in 1..=1024"))
            }
            TopologyKind::BigLittle(_) if cpus < 2 || !cpus.is_multiple_of(2) => {
                Err(format!("big.LITTLE needs two equal halves: {cpus} CPUs do not split"))
            }
            TopologyKind::BigLittle(_) => Ok(()),
            TopologyKind::Numa(k) => TopologyKind::NumaNodes { nodes: 2, cluster: k }.check(cpus),
            TopologyKind::NumaNodes { nodes, cluster } => {
                divides(nodes, cpus, "the machine")
                    .map_err(|_| format!("{nodes} nodes do not divide the {cpus} CPUs"))?;
                let per = cpus / nodes;
                if cluster == 0 || cluster >= per {
                    Ok(())
                } else {
                    divides(cluster, per, "a node")
                }
            }
        }
    }

    /// The shape in words, on `cpus` CPUs: `flat 1x8`, `2x4 clusters`, `big.LITTLE 4 at 446 +
    /// 4 at 1024`, `2 NUMA nodes of 4 CPUs, clusters of 2`.
    pub fn describe(self, cpus: usize) -> String {
        match self {
            TopologyKind::Flat => format!("flat 1x{cpus}"),
            TopologyKind::Clusters(k) if k == 0 || k >= cpus => format!("flat 1x{cpus}"),
            TopologyKind::Clusters(k) => format!("{}x{k} clusters", cpus / k),
            TopologyKind::BigLittle(cap) => {
                format!("big.LITTLE {} at {cap} + {} at 1024", cpus / 2, cpus - cpus / 2)
            }
            TopologyKind::Numa(k) => TopologyKind::NumaNodes { nodes: 2, cluster: k }.describe(cpus),
            TopologyKind::NumaNodes { nodes, cluster } => {
                let per = cpus / nodes.max(1);
                let inside = if cluster == 0 || cluster >= per {
                    String::new()
                } else {
                    format!(", clusters of {cluster}")
                };
                format!("{nodes} NUMA nodes of {per} CPUs{inside}")
            }
        }
    }

    /// NUMA nodes (1: none).
    pub fn nodes(self) -> usize {
        match self {
            TopologyKind::Numa(_) => 2,
            TopologyKind::NumaNodes { nodes, .. } => nodes.max(1),
            _ => 1,
        }
    }

    /// The MC level's cluster size on `cpus` CPUs (0: one cluster per node).
    pub fn cluster_size(self, cpus: usize) -> usize {
        let per = cpus / self.nodes();
        let k = match self {
            TopologyKind::Flat => 0,
            TopologyKind::Clusters(k) | TopologyKind::Numa(k) => k,
            TopologyKind::BigLittle(_) => cpus / 2,
            TopologyKind::NumaNodes { cluster, .. } => cluster,
        };
        if k == 0 || k >= per {
            0
        } else {
            k
        }
    }

    /// Each CPU's capacity, if they differ (big.LITTLE: the first half LITTLE).
    pub fn capacities(self, cpus: usize) -> Option<Vec<u64>> {
        match self {
            TopologyKind::BigLittle(cap) => {
                Some((0..cpus).map(|c| if c < cpus / 2 { cap } else { 1024 }).collect())
            }
            _ => None,
        }
    }

    pub(super) fn build<const C: usize>(self, t: &mut Topology<C>, cpus: usize) -> Result<(), TopologyError> {
        match self {
            TopologyKind::Flat => t.init_flat(cpus),
            // Clusters of the whole machine or larger: one cluster of all its CPUs.
            TopologyKind::Clusters(k) => {
                let k = k.clamp(1, cpus.max(1));
                t.init_clusters(cpus / k, k)
            }
            TopologyKind::BigLittle(cap) => t.init_big_little(cpus / 2, cpus - cpus / 2, cap),
            TopologyKind::Numa(k) => TopologyKind::NumaNodes { nodes: 2, cluster: k }.build(t, cpus),
            TopologyKind::NumaNodes { nodes, cluster } => {
                let per = cpus / nodes.max(1);
                let k = if cluster == 0 || cluster >= per { per } else { cluster };
                t.init_numa(nodes.max(1), per / k.max(1), k.max(1))
            }
        }
    }
}

/// Parameters of a simulated machine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Config {
    /// Number of CPUs.
    pub cpus: usize,
    /// Topology.
    pub topology: TopologyKind,
    /// Tick rate (0: the core's default, 250).
    pub hz: u32,
    /// Scheduler features.
    #[serde(serialize_with = "ser_features")]
    pub features: Features,
    /// New-task runnable initialisation (v5.7.0 or 5.7.14).
    #[serde(skip)]
    pub runnable_init: RunnableInit,
    /// Reschedule IPI latency.
    pub ipi_latency_ns: u64,
    /// A sysbench-like main thread's work before each worker's creation (thread-creation
    /// cost). (Written to traces only when not the default, which keeps older traces valid.)
    #[serde(skip_serializing_if = "is_default_create")]
    pub create_ns: u64,
    /// A sysbench-like worker's set-up before the start barrier.
    #[serde(skip_serializing_if = "is_default_setup")]
    pub setup_ns: u64,
    /// Cost of a context switch before the next task progresses.
    pub switch_cost_ns: u64,
    /// Cache refill paid by a task that runs on another CPU than last time.
    pub migration_cost_ns: u64,
    /// Idle CPUs stop their tick (nohz) and are kicked to balance.
    pub nohz: bool,
    /// Seed of all randomness (tick phases, workload jitter).
    pub seed: u64,
    /// Record a trace.
    pub trace: bool,
    /// Run the core's invariant checker after every event (stress tests; slow).
    #[serde(skip)]
    pub check_every_event: bool,
    /// The activations a workload program's run records before it is cut there
    /// ([`super::MAX_ACTIVATIONS`]; tests take fewer).
    #[serde(skip)]
    pub max_activations: usize,
}

/// The default thread-creation cost of a sysbench-like main thread (ns).
pub const DEFAULT_CREATE_NS: u64 = 30_000;
/// The default set-up of a sysbench-like worker before the start barrier (ns).
pub const DEFAULT_SETUP_NS: u64 = 20_000;

fn is_default_create(ns: &u64) -> bool {
    *ns == DEFAULT_CREATE_NS
}

fn is_default_setup(ns: &u64) -> bool {
    *ns == DEFAULT_SETUP_NS
}

fn ser_features<S: serde::Serializer>(f: &Features, s: S) -> Result<S::Ok, S::Error> {
    let names: Vec<&str> = f.iter_names().map(|(n, _)| n).collect();
    s.collect_seq(names)
}

impl Config {
    /// The seed's machine: an octo core of 2 clusters × 4, HZ=250, features as in Linux.
    pub fn octo(seed: u64) -> Config {
        Config {
            cpus: 8,
            topology: TopologyKind::Clusters(4),
            hz: 250,
            features: Features::default(),
            runnable_init: RunnableInit::CpuCapacity,
            ipi_latency_ns: 5_000,
            create_ns: DEFAULT_CREATE_NS,
            setup_ns: DEFAULT_SETUP_NS,
            switch_cost_ns: 3_000,
            migration_cost_ns: 30_000,
            nohz: true,
            seed,
            trace: false,
            check_every_event: false,
            max_activations: super::MAX_ACTIVATIONS,
        }
    }
}
