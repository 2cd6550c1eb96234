//! A request another CPU posts for a CPU that is inside a call reaches that CPU at the end of
//! the call, and the call's answer counts it: here a wakeup made from an event handler while
//! CPU 0 is on its way out of `reschedule` (after its pass picked idle) makes `reschedule`
//! pick the woken task instead of leaving CPU 0 idle with work queued.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;

use sched_core::port::Scheduler;
use sched_core::{CpuMask, Event, EventKind, Features, Platform, TaskId, TaskParams};

const T: u64 = 1_000_000;

/// Wakes `task` from CPU 1 inside the first `Switch` event of CPU 0 after `armed` is set;
/// records every `resched_cpu` and the wake's answer.
struct WakesFromEvent {
    armed: AtomicBool,
    task: AtomicU64,
    log: Mutex<Vec<String>>,
}

impl Platform for WakesFromEvent {
    type Payload = u32;
    fn resched_cpu(&self, cpu: usize) {
        self.log.lock().unwrap().push(format!("resched {cpu}"));
    }
    fn event(&self, e: &Event) {
        if e.cpu == 0 && matches!(e.kind, EventKind::Switch { .. }) && self.armed.swap(false, SeqCst) {
            let id = TaskId::from_raw(self.task.load(SeqCst));
            let woke = S.wake(1, 3 * T, id);
            self.log.lock().unwrap().push(format!("wake {woke:?}"));
        }
    }
}

static S: Scheduler<WakesFromEvent, 2, 8, 8> = Scheduler::new(
    WakesFromEvent { armed: AtomicBool::new(false), task: AtomicU64::new(0), log: Mutex::new(Vec::new()) },
    Features::DEFAULT,
    250,
);

#[test]
fn a_wakeup_posted_while_the_cpu_leaves_reschedule_is_picked_up() {
    S.init_with(|t| t.init_flat(2)).unwrap();
    S.cpu_up(0, T).unwrap();
    S.cpu_up(1, T).unwrap();
    let only_cpu0 = CpuMask::single(0);
    let task = S.create(0, T, TaskParams { affinity: only_cpu0, ..TaskParams::default() }, 7).unwrap();
    assert_eq!(S.reschedule(0, T, |_| {}).unwrap().next, Some((task, 7)));
    S.block(0, 2 * T, task).unwrap();
    S.platform().task.store(task.to_raw(), SeqCst);
    S.platform().armed.store(true, SeqCst);
    S.platform().log.lock().unwrap().clear();

    // The pass switches the blocked task out for idle; its Switch event, delivered on the way
    // out, wakes the task back onto CPU 0 from CPU 1, which sees CPU 0 still inside and
    // leaves it the reschedule request.
    let run = S.reschedule(0, 3 * T, |_| {}).unwrap();
    let log = S.platform().log.lock().unwrap().clone();
    assert_eq!(log.first().map(String::as_str), Some("wake Ok(0)"), "{log:?}");
    assert!(log.iter().any(|l| l == "resched 0"), "CPU 0 heard of the request: {log:?}");
    assert_eq!(run.next, Some((task, 7)), "reschedule picked the woken task, not idle ({log:?})");
    assert!(!S.need_resched(0).unwrap());
    S.check_invariants().unwrap();
}
