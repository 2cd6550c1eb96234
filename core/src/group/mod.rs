//! Task groups and CFS bandwidth control (`groups` feature; docs/groups.md): cgroup v2's
//! `cpu.weight` and `cpu.max` as Linux v5.7's fair class has them. So far the group table and
//! the group decisions on plain numbers: a group's shares and its entity's weight on a CPU,
//! the hierarchical load, PELT's propagation up the hierarchy, the bandwidth pool and a
//! runqueue's runtime. The per-CPU group
//! runqueues that carry them out, and the porter's calls, are not built yet.

pub mod bandwidth;
pub mod level;
pub mod propagate;
pub mod shares;
pub mod tree;

use core::fmt;

/// Why a group operation was refused. The group table is unchanged after any error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GroupError {
    /// A `cpu.weight` outside 1..=10000.
    WeightOutOfRange(u32),
    /// A quota (ns) below 1 ms or above [`bandwidth::MAX_QUOTA_NS`].
    QuotaOutOfRange(u64),
    /// A period (ns) outside 1 ms..=1 s.
    PeriodOutOfRange(u64),
    /// `cpu.max` text that is not a quota (µs or `max`) and an optional period (µs).
    Malformed,
    /// Every group slot is taken.
    TableFull,
    /// The id names no group (never, or one deleted since).
    UnknownGroup,
    /// The root group has no weight or limit of its own and cannot be deleted or moved.
    Root,
    /// The group still holds tasks or groups.
    NotEmpty,
    /// A task counted out of a group that holds none.
    NoTask,
    /// Groups would nest deeper than [`tree::MAX_GROUP_DEPTH`].
    TooDeep,
    /// The move would put a group under itself.
    Cycle,
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupError::WeightOutOfRange(w) => write!(f, "cpu.weight {w} outside 1..=10000"),
            GroupError::QuotaOutOfRange(q) => write!(f, "quota {q} ns outside 1 ms..=2^44-1 µs"),
            GroupError::PeriodOutOfRange(p) => write!(f, "period {p} ns outside 1 ms..=1 s"),
            GroupError::Malformed => {
                f.write_str("cpu.max is a quota in µs or max, and an optional period in µs")
            }
            GroupError::TableFull => f.write_str("the group table is full"),
            GroupError::UnknownGroup => f.write_str("no such group"),
            GroupError::Root => f.write_str("the root group has no weight or limit and stays"),
            GroupError::NotEmpty => f.write_str("the group holds tasks or groups"),
            GroupError::NoTask => f.write_str("the group holds no task"),
            GroupError::TooDeep => f.write_str("groups would nest too deep"),
            GroupError::Cycle => f.write_str("a group cannot move under itself"),
        }
    }
}

impl core::error::Error for GroupError {}

#[cfg(test)]
mod sched_tests;
