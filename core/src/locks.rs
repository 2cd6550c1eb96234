//! The locks the scheduler's state sits behind, chosen by one type parameter of
//! [`Smp`](crate::Smp): a machine whose CPUs run at once takes spinning locks; a host that
//! drives every CPU from one thread may take locks without atomic instructions.
//!
//! The lock order is written once, in `smp/mod.rs`, next to the locks.

use spin::RelaxStrategy;

/// The raw locks of one machine: the runqueue, balance, table and group locks
/// ([`Locks::Mutex`]) and the topology's lock ([`Locks::RwLock`]).
///
/// Every [`spin::RelaxStrategy`] is one (spin's locks, spinning its way): `Smp`'s default,
/// [`spin::Spin`], spins with a CPU hint, and a port may pass its own strategy (one that waits
/// for an event, say) exactly as before. A platform whose CPUs are all driven from one
/// thread, as a simulator's are, may name locks that take no atomic instruction; such locks
/// must not be `Sync`, which keeps the whole machine on its thread.
///
/// ```
/// use sched_core::{NoPlatform, Smp, Features};
/// use sched_core::locks::Locks;
/// // A port's own relax strategy makes spinning locks that wait its way.
/// struct Pause;
/// impl sched_core::spin::RelaxStrategy for Pause {
///     fn relax() { core::hint::spin_loop() }
/// }
/// fn takes<L: Locks>() {}
/// takes::<Pause>();
/// let smp: Box<Smp<NoPlatform, 2, 16, 16, Pause>> = Box::new(Smp::new(NoPlatform, Features::default(), 250));
/// smp.init_with(|t| t.init_clusters(1, 2)).unwrap();
/// ```
pub trait Locks {
    /// The exclusive lock of a runqueue, a CPU's balance state, the task table and the
    /// group table.
    type Mutex: lock_api::RawMutex;
    /// The topology's reader-writer lock.
    type RwLock: lock_api::RawRwLock;
}

impl<R: RelaxStrategy> Locks for R {
    type Mutex = spin::mutex::SpinMutex<(), R>;
    type RwLock = spin::rwlock::RwLock<(), R>;
}

/// A lock of kind `L` around a `T`.
pub(crate) type Mutex<L, T> = lock_api::Mutex<<L as Locks>::Mutex, T>;
/// A held [`Mutex`].
pub(crate) type MutexGuard<'a, L, T> = lock_api::MutexGuard<'a, <L as Locks>::Mutex, T>;
/// A reader-writer lock of kind `L` around a `T`.
pub(crate) type RwLock<L, T> = lock_api::RwLock<<L as Locks>::RwLock, T>;
/// A held read lock of a machine's topology: what [`Smp::topology`](crate::Smp::topology) returns.
pub type RwLockReadGuard<'a, L, T> = lock_api::RwLockReadGuard<'a, <L as Locks>::RwLock, T>;
