//! Task groups and CFS bandwidth control (`groups` feature; docs/groups.md): cgroup v2's
//! `cpu.weight` and `cpu.max` as Linux v5.7's fair class has them. Here, the group table and
//! the group decisions on plain numbers (a group's shares and its entity's weight on a CPU,
//! the hierarchical load, PELT's propagation up the hierarchy, the bandwidth pool and a
//! runqueue's runtime) and the state of a group on a CPU; the fair class applies them level
//! by level (`fair/hier.rs`, `fair/hier_pelt.rs`, `fair/throttle.rs`), and the machine and the
//! port take the porter's calls (`Smp::create_group`, `Scheduler::move_task`, …).

pub mod bandwidth;
pub mod level;
pub mod propagate;
pub mod shared;
pub mod shares;
pub mod tree;

pub use crate::error::GroupError;

#[cfg(test)]
mod bandwidth_tests;
#[cfg(all(test, feature = "eevdf"))]
mod eevdf_tests;
#[cfg(test)]
mod tests;
