//! Where a CPU's next tick reads, for a platform that can prefetch.
//!
//! On a machine whose scheduler state outgrows the host's caches, each tick finds its CPU's
//! lines gone from them. A platform that knows which CPU it serves next (the simulator
//! does: its ticks are queued in time order) can prefetch those lines while it still works
//! on the current event. [`Smp::cpu_lines`] names the CPU's hot lines, [`Smp::task_lines`]
//! those of the running task and of the leftmost queued task, usually the next pick (the CPU
//! publishes it in [`RqStats::first_queued`](super::RqStats::first_queued)). They compute
//! addresses from the layout and read only published atomics (that hint, the feature set),
//! so they take no lock; an answer gone stale (a task has moved on) wastes a prefetch but
//! never changes a result.

use core::mem::offset_of;

use crate::locks::Locks;

use portable_atomic::Ordering::Relaxed;

use super::{CpuCell, CpuState, RqStats, Smp};
use crate::entities::EntityCell;
#[cfg(feature = "eevdf")]
use crate::features::Features;
use crate::lines::each_line;
use crate::platform::Platform;
use crate::runqueue::RunQueue;
use crate::table::TaskTable;
use crate::task::TaskId;

/// The runqueue slots whose lines a hint covers: the first four. A runqueue hands out slots
/// it never used in ascending order and reuses freed ones first, so a CPU that has only ever
/// held a few tasks keeps them there; covering more would spend a busy CPU's prefetches on
/// slots it may not use.
const WARM_SLOTS: usize = 4;

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    internal! {
        /// Calls `each` with the address of every cache line of `cpu` itself that its tick
        /// reads first: its cell up to the end of the runqueue's hot fields (balance
        /// deadline, published figures, lock, clocks, counts and sums) and the lines of the
        /// runqueue's first slots (timeline nodes, MRU links, ids). The published figures
        /// hold the hint [`Smp::task_lines`] reads, so a platform prefetching in a pipeline
        /// asks for these one step before it asks for those.
        ///
        /// A hint for prefetching: it reads only the feature set and takes no lock, so it may
        /// be called at any time from any thread; an unknown `cpu` names nothing. On 64-bit
        /// targets, whose layout keeps the hot fields together (a test in `smp::percpu` holds
        /// it).
        pub fn cpu_lines(&self, cpu: usize, mut each: impl FnMut(*const u8)) {
            let Some(cell) = self.cpus.get(cpu) else { return };
            let start = cell as *const CpuCell<Q, R, G> as *const u8;
            let rq = (cell.rq.data_ptr() as *const u8).wrapping_add(offset_of!(CpuState<Q, G>, rq));
            let hot_end = rq.wrapping_add(RunQueue::<Q>::HOT_LEN);
            each_line(start, (hot_end as usize).saturating_sub(start as usize), &mut each);
            #[cfg(feature = "eevdf")]
            let augmented = self.features().contains(Features::EEVDF);
            #[cfg(not(feature = "eevdf"))]
            let augmented = false;
            RunQueue::<Q>::slot_lines(rq, WARM_SLOTS, augmented, &mut each);
        }
    }

    internal! {
        /// Whether the CPUs publish [`RqStats::first_queued`](super::RqStats::first_queued),
        /// the hint [`Smp::task_lines`] reads (off by default: it costs every tick and switch
        /// a few instructions that only a prefetching platform uses).
        pub fn set_prefetch_hints(&self, on: bool) {
            self.prefetch_hints.store(on, Relaxed);
        }
    }

    internal! {
        /// Calls `each` with the address of every cache line of the tasks a tick of `cpu`
        /// reads first: the entity's hot lines and task-table slot of `curr` (the task the
        /// platform last saw running there) and of the task queued first, which a switch at
        /// this tick picks unless a buddy or EEVDF's eligibility chooses another. Returns the
        /// table slot of the latter, so the platform can prefetch its own record of it too.
        ///
        /// A hint for prefetching: it reads only the CPU's published
        /// [`RqStats::first_queued`](super::RqStats::first_queued) (in a line
        /// [`Smp::cpu_lines`] names; without [`Smp::set_prefetch_hints`] it names only
        /// `curr`) and takes no lock, so it may be called at any time from any thread; a stale
        /// `curr` or hint, or an unknown `cpu`, only makes the list useless or empty.
        pub fn task_lines(&self, cpu: usize, curr: Option<TaskId>, mut each: impl FnMut(*const u8)) -> Option<usize> {
            let cell = self.cpus.get(cpu)?;
            let curr = curr.map(TaskId::slot);
            if let Some(slot) = curr {
                self.slot_task_lines(slot, &mut each);
            }
            let first = cell.stats.first_queued.load(Relaxed);
            let first = (first != RqStats::NO_SLOT).then_some(usize::from(first)).filter(|&s| Some(s) != curr)?;
            self.slot_task_lines(first, &mut each);
            Some(first)
        }
    }

    /// The lines of the task in table slot `slot`: its entity's hot lines and its table slot.
    fn slot_task_lines(&self, slot: usize, each: &mut impl FnMut(*const u8)) {
        if let Some(entity) = self.ents.pool().cell_slot(slot) {
            each_line(entity as *const EntityCell as *const u8, EntityCell::HOT_LEN, each);
        }
        TaskTable::<TASKS, P::Payload>::slot_lines(self.tasks.data_ptr() as *const u8, slot, each);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec::Vec;

    use super::*;
    use crate::lines::LINE;
    use crate::{Features, NoPlatform, TaskParams};

    type M = Smp<NoPlatform, 2, 8, 8>;

    fn line(p: *const u8) -> usize {
        p as usize / LINE
    }

    /// Two flat CPUs, one task created and running on `cpu`.
    fn running_on(cpu: usize) -> (std::boxed::Box<M>, TaskId) {
        let m: std::boxed::Box<M> = std::boxed::Box::new(Smp::new(NoPlatform, Features::default(), 250));
        m.init_with(|t| t.init_flat(2)).unwrap();
        let t = m.create(cpu, 0, TaskParams::default()).unwrap();
        assert_eq!(m.schedule(cpu, 0).unwrap(), Some(t));
        m.finish_switch(cpu, 0).unwrap();
        (m, t)
    }

    fn lines(m: &M, cpu: usize, curr: Option<TaskId>) -> Vec<usize> {
        let mut seen = Vec::new();
        m.cpu_lines(cpu, |p| seen.push(p as usize));
        let _ = m.task_lines(cpu, curr, |p| seen.push(p as usize));
        assert!(seen.iter().all(|p| p % LINE == 0), "line starts only");
        seen.iter().map(|&p| p / LINE).collect()
    }

    /// The hint names the CPU's hot lines (the cell's header, the lock, the runqueue's
    /// clocks and sums, the timeline's header), the running task's entity and table entry,
    /// and nothing for a CPU the machine does not have.
    #[test]
    fn a_tick_s_lines_cover_the_cpu_and_its_task() {
        let (m, t) = running_on(1);
        let seen = lines(&m, 1, Some(t));
        let cell = &m.cpus[1];
        let st = m.rq(1);
        let hot = [
            &cell.next_balance as *const _ as *const u8,
            &cell.stats as *const _ as *const u8,
            &cell.rq as *const _ as *const u8,
            &st.rq.clock as *const u64 as *const u8,
            &st.rq.cfs as *const _ as *const u8,
            &st.rq.tunables as *const _ as *const u8,
            &st.rq.timeline as *const _ as *const u8,
        ];
        drop(st);
        for p in hot {
            assert!(seen.contains(&line(p)), "a hot field's line is missing");
        }
        let entity = m.ents.pool().cell(t).unwrap() as *const EntityCell as *const u8;
        assert!(seen.contains(&line(entity)));
        assert!(seen.contains(&line(entity.wrapping_add(EntityCell::HOT_LEN - 1))));
        let entry = m.table().get(t).unwrap() as *const crate::table::TaskEntry as *const u8;
        assert!(seen.contains(&line(entry)), "the task's table entry");

        let idle = lines(&m, 1, None);
        assert!(!idle.contains(&line(entity)) && idle.len() < seen.len());
        assert!(lines(&m, 2, Some(t)).is_empty());
    }

    /// The task queued behind the running one is the one a switch would pick: once asked,
    /// the CPU publishes its slot, and the hint names its entity and returns the slot.
    #[test]
    fn the_task_queued_first_is_named_too() {
        let (m, a) = running_on(0);
        m.set_prefetch_hints(true);
        m.tick(0, 1_000_000).unwrap();
        assert_eq!(m.task_lines(0, Some(a), |_| {}), None, "nothing queued behind the runner");
        m.set_prefetch_hints(false);
        let pinned = TaskParams { affinity: crate::CpuMask::single(0), ..TaskParams::default() };
        let b = m.create(0, 1_000, pinned).unwrap();
        m.tick(0, 2_000_000).unwrap();
        assert_eq!(m.cpus[0].stats.first_queued.load(Relaxed), RqStats::NO_SLOT, "hints are off");
        assert_eq!(m.task_lines(0, Some(a), |_| {}), None);
        m.set_prefetch_hints(true);
        m.tick(0, 4_000_000).unwrap();
        assert_eq!(m.cpus[0].stats.first_queued.load(Relaxed), b.slot() as u16);
        let mut seen = Vec::new();
        assert_eq!(m.task_lines(0, Some(a), |p| seen.push(line(p))), Some(b.slot()));
        let entity = m.ents.pool().cell(b).unwrap() as *const EntityCell as *const u8;
        assert!(seen.contains(&line(entity)));
    }
}
