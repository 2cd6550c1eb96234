//! The current task's charge is skipped only when there is nothing to charge: an enqueue or a
//! dequeue of another task after the clock moved charges the current task first, once.

use sched_core::{DequeueFlags, EnqueueFlags, Features, NoPlatform, SingleCpu, TaskParams, Tunables};

/// When the machine's first pick is made (ns).
const T0: u64 = 5_000_000;

/// One CPU running one of three spinners, picked at `T0`.
fn machine() -> Box<SingleCpu<NoPlatform, 8, 8>> {
    let s = Box::new(SingleCpu::new(NoPlatform, 1024, Tunables::for_cpus(1), Features::default()).unwrap());
    for _ in 0..3 {
        s.create(0, TaskParams::default()).unwrap();
    }
    s.schedule(T0);
    s
}

#[test]
fn moving_others_after_the_clock_moved_charges_the_current_task_first() {
    let s = machine();
    s.with_fair(|rq| {
        let curr = rq.curr_slot().unwrap();
        let other = rq.mru().map(|(slot, _)| slot).find(|&slot| slot != curr).unwrap();
        let ran = |rq: &sched_core::Fair<'_, '_, 8>| rq.entity(curr).unwrap().sum_exec_runtime();
        let start = ran(rq);

        // At the instant it was picked there is nothing to charge.
        rq.dequeue(other, DequeueFlags::SAVE);
        rq.enqueue(other, EnqueueFlags::RESTORE);
        assert_eq!(ran(rq), start);

        // A millisecond later, a save/restore pair of another task (which needs neither the
        // current task's vruntime nor min_vruntime) still charges it, once.
        rq.update_clock(T0 + 1_000_000);
        rq.dequeue(other, DequeueFlags::SAVE);
        assert_eq!(ran(rq), start + 1_000_000);
        rq.enqueue(other, EnqueueFlags::RESTORE);
        assert_eq!(ran(rq), start + 1_000_000);

        // And so does an enqueue that comes first after the clock moved.
        rq.dequeue(other, DequeueFlags::SAVE);
        rq.update_clock(T0 + 3_000_000);
        rq.enqueue(other, EnqueueFlags::RESTORE);
        assert_eq!(ran(rq), start + 3_000_000);
    });
    s.check_invariants().unwrap();
}
