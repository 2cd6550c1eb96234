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
use crate::relaxed::{AvgCell, MaskCell, Slot, Word64, Zeroed};
use crate::task::{entity_fields, weight_for, Entity, Policy, TaskId};
use crate::weights::{scale_load_down, LoadWeight, Nice};

/// Nice 0's load weight, what a zeroed cell's stored weight words are relative to.
const NICE_0: LoadWeight = LoadWeight::from_nice(Nice::ZERO);

/// Makes [`EntityCell`] from the rows of `entity_fields!`: a slot per field of [`Entity`],
/// a getter and a setter per field (documented as [`Entity`]'s field is), `new`, `get` and
/// `put`, and the test of every field's round trip at its full width.
macro_rules! entity_cell {
    ($(
        $(#[doc = $doc:literal])*
        $(#[cfg($cfg:meta)])?
        $field:ident: $ty:ty = $unused:expr, $widest:expr; $store:ty, $svis:vis $set:ident;
    )*) => {
        /// One task's [`Entity`], stored field by field for the owner's relaxed reads and
        /// writes (see the module documentation for who the owner is).
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
        // On 64-bit targets the fields lie in declaration order from a cache line's start:
        // the weight and the rows of `entity_fields!` up to `group` in the first line, PELT's
        // signals next, within the second, and what only wakeups and affinity changes read
        // after them. A task picked on a large machine, whose cell has left the caches, costs
        // two lines (a test holds the layout to that).
        #[cfg_attr(target_pointer_width = "64", repr(C, align(64)))]
        pub struct EntityCell {
            // The load weight policy and nice give, stored so that the hot paths do not look
            // it up on every charge and PELT update. Each word is kept XOR nice 0's value, so
            // that a zeroed cell holds nice 0's weight (as its zeroed policy and nice say) and
            // a machine in a `static` still needs no `.data` image.
            load_weight: AtomicU32,
            load_inv: AtomicU32,
            $($(#[cfg($cfg)])? $field: $store,)*
        }

        impl EntityCell {
            /// A cell of zeros: what a slot holds before its task is created.
            pub const fn new() -> EntityCell {
                EntityCell {
                    $($(#[cfg($cfg)])? $field: <$store as Zeroed>::ZERO,)*
                    load_weight: AtomicU32::ZERO,
                    load_inv: AtomicU32::ZERO,
                }
            }

            /// A copy of the whole entity.
            pub fn get(&self) -> Entity {
                Entity { $($(#[cfg($cfg)])? $field: self.$field(),)* }
            }

            /// Stores the whole entity `e`.
            pub fn put(&self, e: &Entity) {
                $($(#[cfg($cfg)])? self.$set(e.$field);)*
                self.store_weight(e.policy, e.nice);
            }

            $(
                #[doc = concat!("[`Entity::", stringify!($field), "`].")]
                $(#[cfg($cfg)])?
                #[inline(always)]
                pub fn $field(&self) -> $ty {
                    Slot::<$ty>::get(&self.$field)
                }

                #[doc = concat!("Sets [`Entity::", stringify!($field), "`].")]
                $(#[cfg($cfg)])?
                #[inline(always)]
                $svis fn $set(&self, v: $ty) {
                    Slot::<$ty>::set(&self.$field, v)
                }
            )*
        }

        /// Each field stored alone, at its widest, into a zeroed cell comes back whole, and
        /// changes no other field: a narrow slot, a swapped accessor or two fields sharing a
        /// slot fail it.
        #[cfg(test)]
        fn assert_each_field_round_trips_alone() {
            let (w, zero) = (Entity::WIDEST, EntityCell::new().get());
            $(
                $(#[cfg($cfg)])?
                {
                    let cell = EntityCell::new();
                    cell.$set(w.$field);
                    let mut want = zero;
                    want.$field = w.$field;
                    assert_eq!(cell.get(), want, concat!("`", stringify!($field), "` alone at its widest"));
                }
            )*
        }
    };
}

entity_fields!(entity_cell);

impl EntityCell {
    /// Bytes from a cell's start that hold what the tick and a switch read, on 64-bit
    /// targets: its first two cache lines (a test holds the layout to it); the rest
    /// (affinity, wakeup history) only wakeups and affinity changes read.
    #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
    pub(crate) const HOT_LEN: usize = 2 * crate::lines::LINE;

    /// Changes the entity through a copy: `f` gets it, and what `f` leaves is stored (the
    /// cold paths' access; the hot ones touch only the fields they need).
    pub fn modify<T>(&self, f: impl FnOnce(&mut Entity) -> T) -> T {
        let mut e = self.get();
        let r = f(&mut e);
        self.put(&e);
        r
    }

    /// Sets [`Entity::policy`] and [`Entity::nice`], and the load weight they give.
    pub fn set_class(&self, policy: Policy, nice: Nice) {
        self.set_policy_alone(policy);
        self.set_nice_alone(nice);
        self.store_weight(policy, nice);
    }

    /// Stores the load weight `policy` and `nice` give.
    fn store_weight(&self, policy: Policy, nice: Nice) {
        let lw = weight_for(policy, nice);
        // (A task's weight, ≤ 88761 << 10, fits 32 bits.)
        self.load_weight.store(lw.weight as u32 ^ NICE_0.weight as u32, Relaxed);
        self.load_inv.store(lw.inv_weight ^ NICE_0.inv_weight, Relaxed);
    }

    /// Stores a group entity's load weight: the shares its group has on this CPU (a group
    /// entity has no policy or nice; its weight is set only this way, and its cell is never
    /// `put`, which would store the weight of its zeroed policy and nice).
    #[cfg(feature = "groups")]
    pub(crate) fn set_load(&self, lw: LoadWeight) {
        // (A group's shares, at most MAX_SHARES << 10, fit 32 bits.)
        self.load_weight.store(lw.weight as u32 ^ NICE_0.weight as u32, Relaxed);
        self.load_inv.store(lw.inv_weight ^ NICE_0.inv_weight, Relaxed);
    }

    /// Whether its affinity allows `cpu` (reads one word of the mask).
    #[inline]
    pub fn allows(&self, cpu: usize) -> bool {
        self.affinity.contains(cpu)
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

    /// The cells themselves.
    #[cfg(feature = "groups")]
    pub(crate) fn cells(&self) -> &[EntityCell] {
        &self.cells
    }

    /// The cells as a [`Pool`], the handle the fair class and the runqueues use.
    pub fn pool(&self) -> Pool<'_> {
        Pool {
            cells: &self.cells,
            #[cfg(feature = "groups")]
            groups: GroupCells { cells: &[], shared: &[], per_cpu: 0 },
        }
    }
}

/// The group entities' cells of every CPU and what the groups share (the `groups` feature):
/// CPU `c`'s entity of group slot `g` (1..=`per_cpu`) is `cells[c * per_cpu + g - 1]`.
#[cfg(feature = "groups")]
#[derive(Clone, Copy)]
pub(crate) struct GroupCells<'a> {
    pub(crate) cells: &'a [EntityCell],
    pub(crate) shared: &'a [crate::group::shared::GroupShared],
    pub(crate) per_cpu: usize,
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
    #[cfg(feature = "groups")]
    pub(crate) groups: GroupCells<'a>,
}

impl<'a> Pool<'a> {
    /// The pool of task cells `cells` with the group cells and shared state of `groups`.
    #[cfg(feature = "groups")]
    pub(crate) fn with_groups(cells: &'a [EntityCell], groups: GroupCells<'a>) -> Pool<'a> {
        Pool { cells, groups }
    }

    /// CPU `cpu`'s entity of group slot `g` (1..=G).
    #[cfg(feature = "groups")]
    #[inline]
    pub(crate) fn group_cell(self, cpu: u32, g: usize) -> Option<&'a EntityCell> {
        let per = self.groups.per_cpu;
        if g == 0 || g > per {
            return None;
        }
        self.groups.cells.get(cpu as usize * per + g - 1)
    }

    /// What every CPU shares of group slot `g` (1..=G).
    #[cfg(feature = "groups")]
    #[inline]
    pub(crate) fn shared(self, g: usize) -> Option<&'a crate::group::shared::GroupShared> {
        self.groups.shared.get(g.checked_sub(1)?)
    }

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

    /// Every field of an entity survives the trip into a cell and back at its full width,
    /// whole (`put` then `get`) and alone (each setter, into a zeroed cell).
    #[test]
    fn a_cell_keeps_every_field_at_full_width() {
        let cell = EntityCell::new();
        cell.put(&Entity::WIDEST);
        assert_eq!(cell.get(), Entity::WIDEST);
        assert_each_field_round_trips_alone();
        cell.modify(|x| x.vruntime = 1);
        assert_eq!(cell.get(), Entity { vruntime: 1, ..Entity::WIDEST });
    }

    /// On 64-bit targets what the tick and a switch read lies in the cell's first two cache
    /// lines: the weight, clocks, deadline and flags in the first, PELT's signals next.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_cell_s_hot_fields_fill_its_first_two_lines() {
        use core::mem::{align_of, offset_of};
        assert_eq!(align_of::<EntityCell>(), 64);
        for end in [
            offset_of!(EntityCell, load_inv) + 4,
            offset_of!(EntityCell, prev_sum_exec_runtime) + 8,
            offset_of!(EntityCell, on_cpu) + 1,
            offset_of!(EntityCell, cpu) + 2,
        ] {
            assert!(end <= 64, "a hot field ends at byte {end}");
        }
        #[cfg(feature = "eevdf")]
        assert!(offset_of!(EntityCell, deadline) + 8 <= 64);
        let avg_end = offset_of!(EntityCell, avg) + core::mem::size_of::<crate::relaxed::AvgCell>();
        assert!(avg_end <= EntityCell::HOT_LEN, "PELT's signals end at byte {avg_end}");
    }

    /// Fields read alone agree with the copy.
    #[test]
    fn a_cell_s_partial_reads_agree_with_its_copy() {
        let mut e = Entity::new(Nice::new(-7).unwrap(), Policy::Batch, CpuMask::single(1), 3);
        e.avg.load_avg = 10;
        e.avg.util_avg = 12;
        let cell = EntityCell::new();
        cell.put(&e);
        assert!(cell.allows(1) && !cell.allows(0));
        assert_eq!((cell.load_avg(), cell.util()), (10, 12));
        assert_eq!(cell.load(), weight_for(Policy::Batch, Nice::new(-7).unwrap()));
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
