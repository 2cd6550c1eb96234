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
//! Exactly one party owns an entity at a time, and only the owner reads or writes its cell:
//!
//! - a task attached to a runqueue (`Location::OnCpu`): whoever holds that runqueue's lock;
//! - a parked (sleeping) task: whoever holds the task-table lock (with the runqueue lock of
//!   the CPU whose sums carry its blocked load, when it changes them);
//! - a task in transit (being created, woken or migrated): the caller moving it, which the
//!   table's `InTransit` marks to everyone else.
//!
//! The owner's lock orders every access to a cell, so a cell needs no lock of its own: its
//! fields are atomics read and written with `Relaxed` ordering (the `relaxed` module),
//! which compile to the plain loads and stores a plain field would. (An earlier design gave
//! each cell a spin lock; its uncontended atomic read-modify-write, a `lock cmpxchg` on x86
//! that drains the store buffer, was what an entity access cost over a plain array.)
//!
//! The hot paths read and write a cell field by field ([`EntityCell::vruntime`],
//! [`EntityCell::set_vruntime`], …); the cold ones take a copy with [`EntityCell::get`],
//! change it and store it back with [`EntityCell::put`].

use core::sync::atomic::Ordering::Relaxed;
use core::sync::atomic::{AtomicBool, AtomicI8, AtomicU16, AtomicU32, AtomicU8};

use crate::cpumask::CpuMask;
use crate::pelt::{SchedAvg, UtilEst};
use crate::relaxed::{AvgCell, MaskCell, Slot, Word64};
use crate::task::{weight_for, Entity, Policy, TaskId};
use crate::weights::{scale_load_down, LoadWeight, Nice};

/// Nice 0's load weight, what a zeroed cell's stored weight words are relative to.
const NICE_0: LoadWeight = LoadWeight::from_nice(Nice::ZERO);

/// One task's [`Entity`], stored field by field for the owner's relaxed reads and writes
/// (see the module documentation for who the owner is).
///
#[cfg_attr(feature = "internals", doc = "```")]
#[cfg_attr(not(feature = "internals"), doc = "```ignore")]
/// use sched_core::{entities::Entities, CpuMask, Entity, Nice, Policy, TaskId};
/// let ents: Entities<4> = Entities::new();
/// let id = TaskId::new(2, 0);
/// let cell = ents.pool().cell(id).unwrap();
/// cell.put(&Entity::new(Nice::ZERO, Policy::Normal, CpuMask::ALL, 1));
/// cell.set_vruntime(cell.vruntime() + 1_000);
/// assert_eq!(ents.pool().get(id).unwrap().vruntime, 1_000);
/// ```
pub struct EntityCell {
    vruntime: Word64,
    exec_start: Word64,
    sum_exec_runtime: Word64,
    prev_sum_exec_runtime: Word64,
    avg: AvgCell,
    last_wakee: Word64,
    #[cfg(feature = "eevdf")]
    deadline: Word64,
    #[cfg(feature = "eevdf")]
    vlag: Word64,
    #[cfg(feature = "eevdf")]
    slice: Word64,
    wakee_flips: AtomicU32,
    wakee_flip_decay_ts: AtomicU32,
    // CPU numbers, below `MAX_CPUS` (≤ 1024), in 16 bits each.
    cpu: AtomicU16,
    recent_used_cpu: AtomicU16,
    policy: AtomicU8,
    nice: AtomicI8,
    // The load weight policy and nice give, stored so that the hot paths do not look it up
    // on every charge and PELT update. Each word is kept XOR nice 0's value, so that a zeroed
    // cell holds nice 0's weight (as its zeroed policy and nice say) and a machine in a
    // `static` still needs no `.data` image.
    load_weight: AtomicU32,
    load_inv: AtomicU32,
    on_rq: AtomicBool,
    pelt_attached: AtomicBool,
    on_cpu: AtomicBool,
    affinity: MaskCell,
}

/// A getter and a setter per scalar field, documented as [`Entity`]'s field is.
macro_rules! accessors {
    ($($field:ident / $set:ident: $ty:ty;)*) => {
        impl EntityCell {
            $(
                #[doc = concat!("[`Entity::", stringify!($field), "`].")]
                #[inline(always)]
                pub fn $field(&self) -> $ty {
                    Slot::<$ty>::get(&self.$field)
                }

                #[doc = concat!("Sets [`Entity::", stringify!($field), "`].")]
                #[inline(always)]
                pub fn $set(&self, v: $ty) {
                    Slot::<$ty>::set(&self.$field, v)
                }
            )*
        }
    };
}

accessors! {
    vruntime / set_vruntime: u64;
    exec_start / set_exec_start: u64;
    sum_exec_runtime / set_sum_exec_runtime: u64;
    prev_sum_exec_runtime / set_prev_sum_exec_runtime: u64;
    last_wakee / set_last_wakee: TaskId;
    cpu / set_cpu: u32;
    wakee_flips / set_wakee_flips: u32;
    wakee_flip_decay_ts / set_wakee_flip_decay_ts: u32;
    recent_used_cpu / set_recent_used_cpu: u32;
    on_rq / set_on_rq: bool;
    pelt_attached / set_pelt_attached: bool;
    on_cpu / set_on_cpu: bool;
}

#[cfg(feature = "eevdf")]
accessors! {
    deadline / set_deadline: u64;
    vlag / set_vlag: i64;
    slice / set_slice: u64;
}

impl EntityCell {
    /// A cell of zeros: what a slot holds before its task is created.
    pub const fn new() -> EntityCell {
        EntityCell {
            vruntime: Word64::new(0),
            exec_start: Word64::new(0),
            sum_exec_runtime: Word64::new(0),
            prev_sum_exec_runtime: Word64::new(0),
            avg: AvgCell::new(),
            last_wakee: Word64::new(0),
            #[cfg(feature = "eevdf")]
            deadline: Word64::new(0),
            #[cfg(feature = "eevdf")]
            vlag: Word64::new(0),
            #[cfg(feature = "eevdf")]
            slice: Word64::new(0),
            wakee_flips: AtomicU32::new(0),
            wakee_flip_decay_ts: AtomicU32::new(0),
            cpu: AtomicU16::new(0),
            recent_used_cpu: AtomicU16::new(0),
            policy: AtomicU8::new(0),
            nice: AtomicI8::new(0),
            load_weight: AtomicU32::new(0),
            load_inv: AtomicU32::new(0),
            on_rq: AtomicBool::new(false),
            pelt_attached: AtomicBool::new(false),
            on_cpu: AtomicBool::new(false),
            affinity: MaskCell::new(),
        }
    }

    /// A copy of the whole entity.
    pub fn get(&self) -> Entity {
        Entity {
            policy: self.policy(),
            nice: self.nice(),
            affinity: self.affinity(),
            vruntime: self.vruntime(),
            exec_start: self.exec_start(),
            sum_exec_runtime: self.sum_exec_runtime(),
            prev_sum_exec_runtime: self.prev_sum_exec_runtime(),
            avg: self.avg(),
            on_rq: self.on_rq(),
            pelt_attached: self.pelt_attached(),
            on_cpu: self.on_cpu(),
            cpu: self.cpu(),
            wakee_flips: self.wakee_flips(),
            wakee_flip_decay_ts: self.wakee_flip_decay_ts(),
            last_wakee: self.last_wakee(),
            recent_used_cpu: self.recent_used_cpu(),
            #[cfg(feature = "eevdf")]
            deadline: self.deadline(),
            #[cfg(feature = "eevdf")]
            vlag: self.vlag(),
            #[cfg(feature = "eevdf")]
            slice: self.slice(),
        }
    }

    /// Stores the whole entity `e`.
    pub fn put(&self, e: &Entity) {
        self.set_class(e.policy, e.nice);
        self.set_affinity(e.affinity);
        self.set_vruntime(e.vruntime);
        self.set_exec_start(e.exec_start);
        self.set_sum_exec_runtime(e.sum_exec_runtime);
        self.set_prev_sum_exec_runtime(e.prev_sum_exec_runtime);
        self.set_avg(e.avg);
        self.set_on_rq(e.on_rq);
        self.set_pelt_attached(e.pelt_attached);
        self.set_on_cpu(e.on_cpu);
        self.set_cpu(e.cpu);
        self.set_wakee_flips(e.wakee_flips);
        self.set_wakee_flip_decay_ts(e.wakee_flip_decay_ts);
        self.set_last_wakee(e.last_wakee);
        self.set_recent_used_cpu(e.recent_used_cpu);
        #[cfg(feature = "eevdf")]
        {
            self.set_deadline(e.deadline);
            self.set_vlag(e.vlag);
            self.set_slice(e.slice);
        }
    }

    /// Changes the entity through a copy: `f` gets it, and what `f` leaves is stored (the
    /// cold paths' access; the hot ones touch only the fields they need).
    pub fn modify<T>(&self, f: impl FnOnce(&mut Entity) -> T) -> T {
        let mut e = self.get();
        let r = f(&mut e);
        self.put(&e);
        r
    }

    /// [`Entity::policy`].
    #[inline(always)]
    pub fn policy(&self) -> Policy {
        Slot::<Policy>::get(&self.policy)
    }

    /// [`Entity::nice`].
    #[inline(always)]
    pub fn nice(&self) -> Nice {
        Slot::<Nice>::get(&self.nice)
    }

    /// Sets [`Entity::policy`] and [`Entity::nice`], and the load weight they give.
    pub fn set_class(&self, policy: Policy, nice: Nice) {
        Slot::<Policy>::set(&self.policy, policy);
        Slot::<Nice>::set(&self.nice, nice);
        let lw = weight_for(policy, nice);
        // (A task's weight, ≤ 88761 << 10, fits 32 bits.)
        self.load_weight.store(lw.weight as u32 ^ NICE_0.weight as u32, Relaxed);
        self.load_inv.store(lw.inv_weight ^ NICE_0.inv_weight, Relaxed);
    }

    /// [`Entity::affinity`].
    pub fn affinity(&self) -> CpuMask {
        self.affinity.get()
    }

    /// Sets [`Entity::affinity`].
    pub fn set_affinity(&self, mask: CpuMask) {
        self.affinity.set(mask)
    }

    /// Whether its affinity allows `cpu` (reads one word of the mask).
    #[inline]
    pub fn allows(&self, cpu: usize) -> bool {
        self.affinity.contains(cpu)
    }

    /// [`Entity::avg`] (a copy of its PELT signals).
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn avg(&self) -> SchedAvg {
        self.avg.get()
    }

    /// Sets [`Entity::avg`].
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn set_avg(&self, avg: SchedAvg) {
        self.avg.set(avg)
    }

    /// Brings its PELT signals up to PELT time `now` (see [`SchedAvg::update_task`]): one
    /// read when less than a 1024 ns unit has passed, as the signals then stay as they are.
    #[inline]
    pub fn update_pelt(&self, now: u64, on_rq: bool, running: bool) -> bool {
        if crate::pelt::elapsed_units(self.avg.last_update_time(), now) == Some(0) {
            return false;
        }
        self.update_pelt_slow(now, on_rq, running)
    }

    /// [`EntityCell::update_pelt`] when time has passed: out of line on 64-bit targets, so
    /// that the signals can stay in registers between the cell's loads and stores.
    #[cfg_attr(target_pointer_width = "64", inline(never))]
    fn update_pelt_slow(&self, now: u64, on_rq: bool, running: bool) -> bool {
        let mut avg = self.avg();
        let changed = avg.update_task(now, self.weight(), on_rq, running);
        self.set_avg(avg);
        changed
    }

    /// Its PELT `load_avg` alone.
    #[inline]
    pub fn load_avg(&self) -> u64 {
        self.avg.load_avg()
    }

    /// Its PELT `util_avg` alone ([`Entity::util`]).
    #[inline]
    pub fn util(&self) -> u64 {
        self.avg.util_avg()
    }

    /// Its utilisation estimate alone.
    #[inline]
    pub fn util_est_parts(&self) -> UtilEst {
        self.avg.util_est()
    }

    /// Sets its utilisation estimate alone.
    #[inline]
    pub fn set_util_est_parts(&self, ue: UtilEst) {
        self.avg.set_util_est(ue)
    }

    /// [`Entity::util_est`]: max of util_avg and the estimate.
    pub fn util_est(&self) -> u64 {
        self.util_est_parts().task_util_est(self.util())
    }

    /// [`Entity::load`]: its load weight, as [`EntityCell::set_class`] stored it with policy
    /// and nice.
    #[inline]
    pub fn load(&self) -> LoadWeight {
        LoadWeight { weight: self.load_weight(), inv_weight: self.load_inv.load(Relaxed) ^ NICE_0.inv_weight }
    }

    /// `load().weight` alone (one read: the paths that need no inverse skip its load).
    #[inline]
    pub fn load_weight(&self) -> u64 {
        (self.load_weight.load(Relaxed) ^ NICE_0.weight as u32) as u64
    }

    /// [`Entity::weight`]: the down-scaled weight.
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn weight(&self) -> u64 {
        scale_load_down(self.load_weight())
    }
}

impl Default for EntityCell {
    fn default() -> Self {
        Self::new()
    }
}

/// One entity cell per task slot: the storage a machine of `N` tasks reserves for them.
pub struct Entities<const N: usize> {
    cells: [EntityCell; N],
}

impl<const N: usize> Entities<N> {
    /// Room for `N` entities (each holds zeros until its task is created, so a machine in a
    /// `static` needs no `.data` image).
    pub const fn new() -> Self {
        Entities { cells: [const { EntityCell::new() }; N] }
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

/// A shared handle to a machine's entity cells (copyable).
#[derive(Clone, Copy)]
pub struct Pool<'a> {
    cells: &'a [EntityCell],
}

impl<'a> Pool<'a> {
    /// The cell of task-table slot `slot` (see the module documentation for who may touch
    /// it). `None` for a slot beyond the pool.
    #[inline]
    pub fn cell_slot(self, slot: usize) -> Option<&'a EntityCell> {
        self.cells.get(slot)
    }

    /// The cell of task `id`'s slot (the generation is the task table's business).
    #[inline]
    pub fn cell(self, id: TaskId) -> Option<&'a EntityCell> {
        self.cell_slot(id.slot())
    }

    /// A copy of task `id`'s entity.
    pub fn get(self, id: TaskId) -> Option<Entity> {
        self.cell(id).map(EntityCell::get)
    }

    /// [`EntityCell::modify`] on task `id`'s cell; `None` for a slot beyond the pool.
    pub fn modify<T>(self, id: TaskId, f: impl FnOnce(&mut Entity) -> T) -> Option<T> {
        self.cell(id).map(|c| c.modify(f))
    }

    /// Stores `e` as task `id`'s entity.
    pub fn put(self, id: TaskId, e: Entity) {
        if let Some(c) = self.cell(id) {
            c.put(&e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pelt::{SchedAvg, UtilEst};

    /// Every field of an entity survives the trip into a cell and back: a field that `get` or
    /// `put` forgot would come back as zero.
    #[test]
    fn a_cell_keeps_every_field() {
        let e = Entity {
            policy: Policy::Batch,
            nice: Nice::new(-7).unwrap(),
            affinity: CpuMask::single(1).with(crate::MAX_CPUS - 1),
            vruntime: u64::MAX - 1,
            exec_start: 2,
            sum_exec_runtime: 3,
            prev_sum_exec_runtime: 4,
            avg: SchedAvg {
                last_update_time: 5,
                load_sum: 6,
                runnable_sum: 7,
                util_sum: 8,
                period_contrib: 9,
                load_avg: 10,
                runnable_avg: 11,
                util_avg: 12,
                util_est: UtilEst { enqueued: 13, ewma: 14 },
            },
            on_rq: true,
            pelt_attached: true,
            on_cpu: true,
            cpu: 15,
            wakee_flips: 16,
            wakee_flip_decay_ts: 17,
            last_wakee: TaskId::new(18, 19),
            recent_used_cpu: 20,
            #[cfg(feature = "eevdf")]
            deadline: 21,
            #[cfg(feature = "eevdf")]
            vlag: -22,
            #[cfg(feature = "eevdf")]
            slice: 23,
        };
        let cell = EntityCell::new();
        cell.put(&e);
        assert_eq!(cell.get(), e);
        assert!(cell.allows(1) && !cell.allows(0));
        assert_eq!((cell.load_avg(), cell.util()), (10, 12));
        cell.modify(|x| x.vruntime = 1);
        assert_eq!(cell.get(), Entity { vruntime: 1, ..e });
    }

    /// A fresh cell reads as zeros (what a `static` machine's `.bss` holds), and its stored
    /// weight is that of the policy and nice its zeros say: nice 0, normal.
    #[test]
    fn a_new_cell_is_zero() {
        let c = EntityCell::new();
        let z = c.get();
        assert_eq!((z.vruntime, z.cpu, z.on_rq, z.affinity), (0, 0, false, CpuMask::EMPTY));
        assert_eq!(z.last_wakee, TaskId::new(0, 0));
        assert_eq!((z.policy, z.nice), (Policy::Normal, Nice::ZERO));
        assert_eq!(c.load(), weight_for(Policy::Normal, Nice::ZERO));
        assert_eq!(c.weight(), 1024);
    }

    /// The stored weight follows policy and nice through `put` and `modify`, for every
    /// policy and nice level.
    #[test]
    fn the_stored_weight_follows_policy_and_nice() {
        let cell = EntityCell::new();
        for policy in [Policy::Normal, Policy::Batch, Policy::Idle] {
            for n in -20..=19 {
                let nice = Nice::new(n).unwrap();
                cell.put(&Entity::new(nice, policy, CpuMask::ALL, 0));
                assert_eq!(cell.load(), weight_for(policy, nice), "{policy:?} nice {n}");
                let other = Nice::new(19 - (n + 20)).unwrap();
                cell.modify(|e| e.nice = other);
                assert_eq!(cell.load(), weight_for(policy, other), "{policy:?} nice {n} then {other:?}");
            }
        }
    }

    /// CPU numbers up to the widest machine's survive their 16-bit fields.
    #[test]
    fn cpu_numbers_fit_their_fields() {
        let cell = EntityCell::new();
        let top = crate::MAX_CPUS as u32 - 1;
        cell.set_cpu(top);
        cell.set_recent_used_cpu(top);
        assert_eq!((cell.cpu(), cell.recent_used_cpu()), (top, top));
    }
}
