//! Where every task's scheduling [`Entity`] lives: one cell per task-table slot, for the
//! task's whole life, whether it runs, waits on a runqueue, sleeps or moves between CPUs.
//!
//! An entity is stored once. A runqueue holds only the ids of the tasks attached to it (and
//! its timeline and MRU links); the task table holds only state and location. This is
//! Linux's layout — the entity is part of the task, and a runqueue links to it — and it is
//! what keeps a machine's memory at `TASKS` entities, not `TASKS + CPUS × Q`.
//!
//! ## Who may touch a cell
//!
//! Each cell is a spin lock, but it is never contended when the rules hold, because exactly
//! one party owns an entity at a time and only the owner locks its cell:
//!
//! - a task attached to a runqueue (`Location::OnCpu`): whoever holds that runqueue's lock;
//! - a parked (sleeping) task: whoever holds the task-table lock (with the runqueue lock of
//!   the CPU whose sums carry its blocked load, when it changes them);
//! - a task in transit (being created, woken or migrated): the caller moving it, which the
//!   table's `InTransit` marks to everyone else.
//!
//! A cell's lock is therefore innermost: nothing else is locked while one is held, and two
//! cells are held at once only for two tasks attached to the runqueue whose lock is held.
//! Debug builds assert that a cell is never found locked (a nested or unowned access).
//!
//! An uncontended lock still costs one atomic read-modify-write (on x86 a `lock cmpxchg`, up
//! to about 5 ns on this project's machine, where it drains the store buffer): what an entity
//! access costs over the plain array that a runqueue-owned arena of entities would be. The
//! fair class's hot paths therefore lock each entity at most once per call and pass it down,
//! and leave the current task's cell alone when there is nothing to charge it.

use spin::mutex::{Mutex, MutexGuard};

use crate::task::{Entity, TaskId};

/// One entity cell per task slot: the storage a machine of `N` tasks reserves for them.
pub struct Entities<const N: usize> {
    cells: [Mutex<Entity>; N],
}

impl<const N: usize> Entities<N> {
    /// Room for `N` entities (each holds zeros until its task is created, so a machine in a
    /// `static` needs no `.data` image).
    pub const fn new() -> Self {
        Entities { cells: [const { Mutex::new(Entity::ZEROED) }; N] }
    }

    /// The cells as a [`Pool`], the handle the fair class and the runqueues use.
    pub fn pool(&self) -> Pool<'_> {
        Pool { cells: &self.cells }
    }
}

impl<const N: usize> Default for Entities<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// A shared handle to a machine's entity cells (copyable; no lock is held by the handle).
#[derive(Clone, Copy)]
pub struct Pool<'a> {
    cells: &'a [Mutex<Entity>],
}

impl<'a> Pool<'a> {
    /// Locks the cell of task-table slot `slot` (see the module documentation for who may).
    /// `None` for a slot beyond the pool.
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn lock_slot(self, slot: usize) -> Option<MutexGuard<'a, Entity>> {
        let cell = self.cells.get(slot)?;
        match cell.try_lock() {
            Some(g) => Some(g),
            None => {
                debug_assert!(false, "entity cell {slot} locked twice: a nested or unowned access");
                Some(cell.lock())
            }
        }
    }

    /// Locks the cell of task `id`'s slot (the generation is the task table's business).
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn lock(self, id: TaskId) -> Option<MutexGuard<'a, Entity>> {
        self.lock_slot(id.slot())
    }

    /// A copy of task `id`'s entity.
    pub fn get(self, id: TaskId) -> Option<Entity> {
        self.lock(id).map(|g| *g)
    }

    /// Stores `e` as task `id`'s entity.
    pub fn put(self, id: TaskId, e: Entity) {
        if let Some(mut g) = self.lock(id) {
            *g = e;
        }
    }
}
