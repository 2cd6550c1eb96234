//! The limits and build constants several modules share: tick rates, the migration-cost
//! default, and what this build's topology can describe. A leaf: it imports nothing of the
//! crate, so every module may use it without closing an import circle.

/// The highest tick rate [`Smp::init`](crate::Smp::init) accepts: a tick of 1 µs. Jiffies are `now / (10⁹ / HZ)`
/// ns, so the rate must leave a whole nanosecond per tick; well below that, 10⁶ is already far
/// beyond any real kernel's `CONFIG_HZ`.
pub const MAX_HZ: u32 = 1_000_000;

/// The tick rate of a machine built with `hz` 0 (Linux's common `CONFIG_HZ`).
pub const DEFAULT_HZ: u32 = 250;

/// `sysctl_sched_migration_cost` default (ns): cache-hot window and newidle cost floor.
pub const SYSCTL_MIGRATION_COST_NS: u64 = 500_000;

/// Whether this build handles CPUs that are not all alike (the crate's `asym-capacity`
/// feature): capacities that differ, and asym-packing priorities. Without it such topologies
/// are refused, so the flags `ASYM_CPUCAPACITY` and `ASYM_PACKING` are never set and the code
/// they guard is left out.
pub const ASYM_CAPACITY: bool = cfg!(feature = "asym-capacity");

/// Whether this build handles more than one NUMA node (the crate's `numa` feature). Without it
/// such topologies are refused, and the `NUMA` flag is never set.
pub const NUMA: bool = cfg!(feature = "numa");

/// Whether this build handles hardware threads (the crate's `smt` feature). Without it a
/// topology with SMT sets of more than one CPU is refused, and `SHARE_CPUCAPACITY` is never
/// set.
pub const SMT: bool = cfg!(feature = "smt");

/// The most domain levels a CPU can have: SMT, MC, DIE and NUMA.
pub const MAX_LEVELS: usize = 4;

/// `capacity_orig` of the biggest CPU at its highest frequency; the default for every CPU.
pub(crate) const CAPACITY_SCALE: u64 = 1024;
