//! The load balancer's decisions (docs/linux-v5.7.md §4), each a function of plain data:
//! the per-CPU figures ([`stats::CpuSnap`]), group statistics and domain parameters. None of
//! these modules knows the machine; [`crate::smp`] gathers the figures, calls them in Linux's
//! order and carries out what they decide.
//!
//! Where each decision lives:
//! - [`designate`]: `should_we_balance`, which CPU of a group balances it;
//! - [`stats`]: group and domain statistics, the six group types, a domain's inputs;
//! - [`busiest`]: picking the busiest group and `find_busiest_group`'s decision tree;
//! - [`imbalance`]: `calculate_imbalance`, the migration type and amount;
//! - [`queue`]: `find_busiest_queue` — **the seed's rule** for migrate_util;
//! - [`migrate`]: `can_migrate_task`, `detach_tasks`, the stopper's `detach_one_task`;
//! - [`IdleType`] (`idle.rs`): whether the balancing CPU is idle, busy or going idle;
//! - this file: what every pass shares: one [`BalanceRecord`] per round with
//!   its [`Round`] and [`Outcome`], [`MAX_PINNED_INTERVAL_MS`] and [`estimated_balance_cost`].
//!
//! The pass itself (`load_balance`: the rounds, pinning, failure and interval bookkeeping,
//! the stopper) is `crate::smp`'s `load_balance.rs`; when passes run (`rebalance_domains`,
//! `newidle_balance`) is its `rebalance.rs`.

pub mod busiest;
pub mod designate;
mod idle;
pub mod imbalance;
pub mod migrate;
pub mod queue;
pub mod stats;

pub use idle::IdleType;
pub use imbalance::MigrationType;
pub use stats::GroupType;

use crate::topology::Level;

/// Which round of a balance pass a [`BalanceRecord`] describes. A pass starts with
/// [`Round::First`]; two things make it go on in another round, each with its own record:
/// some tasks could move only to another CPU of the balancing CPU's group (LBF_DST_PINNED:
/// the pass continues with that CPU as destination, [`Round::Redirected`]), or every task of
/// the busiest CPU was pinned away (LBF_ALL_PINNED: the pass starts over without that CPU,
/// [`Round::Redo`], keeping the destination it had).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Round {
    /// The pass's first look at the domain.
    First,
    /// Detaching goes on towards another CPU of the local group.
    Redirected,
    /// The pass starts over without the busiest CPU whose tasks were all pinned.
    Redo,
}

/// What one round of a balance pass came to; the last round's is the pass's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Outcome {
    /// This CPU is not the one that balances this domain now (`should_we_balance`).
    NotDesignated,
    /// No imbalance worth fixing, or no queue to pull from.
    Balanced,
    /// The pass moved tasks (`pass_moved > 0`; this round's `moved` may be 0).
    Moved,
    /// An imbalance and a busiest queue, but no task could be detached.
    NothingDetachable,
    /// Every task looked at was pinned away from the destination and no CPU outside the
    /// destination's group is left to try; or nothing was detachable and the busiest CPU's
    /// running task may not run on the balancing CPU (no active balance possible).
    AllPinned,
    /// Nothing detachable; the busiest CPU's stopper was asked to push its running task.
    ActiveBalance,
    /// This round ends and the pass goes on towards another destination
    /// ([`Round::Redirected`] follows). Not an outcome of the pass.
    Redirected,
    /// This round ends with every task pinned and the pass starts over ([`Round::Redo`]
    /// follows). Not an outcome of the pass.
    Retried,
}

impl Outcome {
    /// Every outcome, in [`Outcome::index`] order: a port's per-outcome counters are an
    /// array of `ALL.len()`.
    pub const ALL: [Outcome; 8] = [
        Outcome::NotDesignated,
        Outcome::Balanced,
        Outcome::Moved,
        Outcome::NothingDetachable,
        Outcome::AllPinned,
        Outcome::ActiveBalance,
        Outcome::Redirected,
        Outcome::Retried,
    ];

    /// Its position in [`Outcome::ALL`].
    ///
    /// ```
    /// use sched_core::Outcome;
    /// assert!(Outcome::ALL.iter().enumerate().all(|(i, o)| o.index() == i));
    /// ```
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Whether this is a failed balance attempt: an imbalance and a busiest queue were found,
    /// yet nothing moved (nothing detachable, every task pinned away, or the busiest CPU's
    /// stopper asked to push its running task instead). The simulator's counts and the
    /// kernel's `trace: balance-failed` lines count these.
    ///
    /// ```
    /// use sched_core::Outcome;
    /// assert!(Outcome::AllPinned.failed() && !Outcome::Moved.failed() && !Outcome::Balanced.failed());
    /// ```
    pub fn failed(self) -> bool {
        matches!(self, Outcome::NothingDetachable | Outcome::AllPinned | Outcome::ActiveBalance)
    }

    /// Whether this record ends its pass (every pass has exactly one such record, its last).
    pub fn ends_pass(self) -> bool {
        !matches!(self, Outcome::Redirected | Outcome::Retried)
    }
}

/// One round of a load-balance attempt, as an event. A pass emits one record per round;
/// the last one's [`Outcome`] is the pass's (see [`Outcome::ends_pass`]).
///
/// A port's event handler that counts the rounds the seed's rule decides (utilisation
/// pulled from an overloaded group):
///
/// ```
/// use sched_core::{BalanceRecord, Event, EventKind, GroupType, MigrationType};
/// fn seed_case(ev: &Event) -> bool {
///     matches!(
///         ev.kind,
///         EventKind::Balance(BalanceRecord {
///             migration: Some(MigrationType::Util),
///             busiest: Some(GroupType::Overloaded),
///             ..
///         })
///     )
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BalanceRecord {
    /// The balancing CPU (whose domain is balanced).
    pub cpu: usize,
    /// Where this round moves tasks to: `cpu`, or another CPU of its group after a redirect.
    pub dst_cpu: usize,
    /// Which round of the pass this is.
    pub round: Round,
    /// The domain level.
    pub level: Level,
    /// Idle type.
    pub idle: IdleType,
    /// The local group's type, once computed.
    pub local: Option<GroupType>,
    /// The busiest group's type, if there was one.
    pub busiest: Option<GroupType>,
    /// How the imbalance was measured.
    pub migration: Option<MigrationType>,
    /// The imbalance found (before moving anything).
    pub imbalance: i64,
    /// The runqueue picked to pull from.
    pub busiest_cpu: Option<usize>,
    /// Tasks moved in this round.
    pub moved: u32,
    /// Tasks moved by the pass so far, this round included.
    pub pass_moved: u32,
    /// Outcome.
    pub outcome: Outcome,
    /// The domain's consecutive failures after this round.
    pub nr_balance_failed: u32,
}

/// Longest balance interval (ms) when all tasks were pinned (`MAX_PINNED_INTERVAL`).
pub const MAX_PINNED_INTERVAL_MS: u64 = 512;

/// Cost (ns) assumed for one newidle balance pass over a domain of `span` CPUs when the
/// platform has no clock to measure it: a fixed part plus a part per CPU whose figures are
/// read. A deterministic stand-in so newidle gating still adapts to domain size.
pub fn estimated_balance_cost(span: usize) -> u64 {
    2_000 + 200 * span as u64
}
