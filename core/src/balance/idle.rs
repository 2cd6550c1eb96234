//! The `idle` argument every balance decision takes. A leaf of the balancer's modules.

/// `idle` argument of a balance pass (Linux `enum cpu_idle_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum IdleType {
    /// The balancing CPU is idle (periodic balance from an idle tick or nohz).
    Idle,
    /// The balancing CPU is busy.
    NotIdle,
    /// The balancing CPU is about to go idle (newidle balance).
    NewlyIdle,
}
