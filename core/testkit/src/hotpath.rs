//! The fair class's hot paths as the benchmarks run them (`benches/fair.rs`, and beside
//! axsched in `benches/peer.rs`): one runqueue loaded with spinners, and the operations timed.
//!
//! ```
//! use sched_core::{DequeueFlags, EnqueueFlags, Features};
//! use sched_testkit::hotpath::{loaded_rq, median_slot, switch};
//! let s = loaded_rq(16, Features::default());
//! s.with_fair(|rq| {
//!     let m = median_slot(rq);
//!     rq.dequeue(m, DequeueFlags::SAVE);
//!     rq.enqueue(m, EnqueueFlags::RESTORE);
//!     assert!(switch(rq).is_some());
//! });
//! ```

use sched_core::{Fair, Features, NoPlatform, SingleCpu, SlotId, TaskParams, Tunables};

/// Task slots of the benchmarks' runqueue: room for 1024 queued tasks and the running one.
pub const CAP: usize = 1040;

/// The benchmarks' machine: one CPU, no platform.
pub type BenchCpu = SingleCpu<NoPlatform, CAP, CAP>;

/// A machine with `n` spinners queued (plus one running), nice -3..=3 by task number, aged by
/// 100 ms of ticks, with the given feature switches.
pub fn loaded_rq(n: usize, features: Features) -> Box<BenchCpu> {
    let s: Box<BenchCpu> =
        Box::new(SingleCpu::new(NoPlatform, 1024, Tunables::for_cpus(8), features).unwrap());
    for i in 0..=n {
        s.create(0, TaskParams { nice: (i % 7) as i32 - 3, ..TaskParams::default() }).unwrap();
    }
    s.schedule(0);
    let mut now = 0;
    for _ in 0..100 {
        now += 1_000_000;
        if s.tick(now) {
            s.schedule(now);
        }
    }
    assert_eq!(s.rq().nr_queued(), n);
    s
}

/// The queued task with the median vruntime: from the middle of the timeline, so the tree is
/// at its full depth whichever policy placed the tasks.
pub fn median_slot<const Q: usize>(rq: &Fair<'_, '_, Q>) -> SlotId {
    let mut queued: Vec<(i64, SlotId)> = rq
        .mru()
        .map(|(slot, _)| slot)
        .filter(|&slot| Some(slot) != rq.curr_slot())
        .filter_map(|slot| Some((rq.entity(slot)?.vruntime().wrapping_sub(rq.min_vruntime()) as i64, slot)))
        .collect();
    queued.sort();
    queued[queued.len() / 2].1
}

/// A switch as `schedule` makes it: the running task put back, the next picked and made
/// current. Returns the task picked.
#[inline]
pub fn switch<const Q: usize>(rq: &mut Fair<'_, '_, Q>) -> Option<SlotId> {
    rq.put_prev();
    let next = rq.pick_next_entity();
    if let Some(next) = next {
        rq.set_next(next);
    }
    next
}

/// A tick 4 ms after the last (HZ 250: every tick crosses PELT periods and decays): the clock,
/// the running task's runtime and PELT, the preemption check. Returns whether it asks for a
/// reschedule.
#[inline]
pub fn tick<const Q: usize>(rq: &mut Fair<'_, '_, Q>, now: &mut u64) -> bool {
    *now += 4_000_000;
    rq.update_clock(*now);
    rq.task_tick();
    rq.need_resched()
}
