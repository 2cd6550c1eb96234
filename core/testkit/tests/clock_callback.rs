//! The platform's clock is a callback, and a callback runs with no lock held, so what it calls
//! returns. A newly-idle balance pass asks the clock around each domain's pass; here the
//! clock runs the other CPU's `reschedule`, whose stopper completes the active balance that
//! pass has just asked for and so takes the balancing CPU's balance state. With that state
//! held across the reading, the machine would wait for itself for ever.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::time::Duration;

use sched_core::port::Scheduler;
use sched_core::{CpuMask, Features, Platform, TaskParams};

const MS: u64 = 1_000_000;

thread_local! {
    /// The time the life is at, and whether the clock is already calling out.
    static NOW: Cell<u64> = const { Cell::new(MS) };
    static CALLING: Cell<bool> = const { Cell::new(false) };
}

/// A clock that, each time it is read, runs CPU 0's `reschedule` (the big CPU 1 balances).
struct Clocked {
    readings: AtomicUsize,
}

static S: Scheduler<Clocked, 2, 8, 8> =
    Scheduler::new(Clocked { readings: AtomicUsize::new(0) }, Features::DEFAULT, 250);

impl Platform for Clocked {
    type Payload = u32;
    fn resched_cpu(&self, _cpu: usize) {}
    fn clock_ns(&self) -> Option<u64> {
        self.readings.fetch_add(1, SeqCst);
        let now = NOW.with(Cell::get);
        if !CALLING.with(|c| c.replace(true)) {
            S.reschedule(0, now, |_| {}).expect("CPU 0 is not inside a call");
            CALLING.with(|c| c.set(false));
        }
        Some(now)
    }
}

/// CPU 0's capacity: a LITTLE CPU's.
const LITTLE: u64 = 446;
/// The big task's utilisation: more than fits on a LITTLE CPU with its margin.
const BIG_UTIL: u64 = 600;
/// A load average that never paused.
const FULL: u64 = 1024;

/// CPU 0 is a LITTLE ([`LITTLE`]), CPU 1 a big one. A task too big for CPU 0 runs there
/// alone; CPU 1's only task blocks, so CPU 1 balances as it goes idle: the misfit task cannot
/// be pulled while it runs, so the pass asks CPU 0's stopper to push it (an active balance),
/// and the clock's call of CPU 0's `reschedule` carries that out while CPU 1's pass is still
/// under way.
fn life() -> (usize, usize) {
    let set = |n: u64| NOW.with(|c| c.set(n));
    let mut now = MS;
    S.init_with(|t| t.init_big_little(1, 1, LITTLE)).unwrap();
    S.cpu_up(0, now).unwrap();
    S.cpu_up(1, now).unwrap();
    let pinned = |cpu| TaskParams { affinity: CpuMask::single(cpu), ..TaskParams::default() };
    let big = S.create(0, now, pinned(0), 0).unwrap();
    assert_eq!(S.reschedule(0, now, |_| {}).unwrap().next.map(|(t, _)| t), Some(big));
    S.set_affinity(0, now, big, CpuMask::first_n(2)).unwrap();
    let smp = S.smp();
    smp.inject_task_pelt(big, BIG_UTIL, BIG_UTIL as u32, FULL).unwrap();
    smp.inject_rq_pelt(0, LITTLE, BIG_UTIL, FULL).unwrap();
    // CPU 0's tick publishes the misfit load. A second task there for a moment marks the
    // machine overloaded (as a runqueue of two does), which a newly-idle pass requires.
    now += 4 * MS;
    set(now);
    S.tick(0, now).unwrap();
    let brief = S.create(0, now, pinned(0), 2).unwrap();
    assert!(S.exit(0, now, brief).unwrap(), "queued, it is gone at once");
    // CPU 1 runs a task of its own, which blocks: CPU 1 balances as it goes idle.
    let small = S.create(1, now, pinned(1), 1).unwrap();
    assert_eq!(S.reschedule(1, now, |_| {}).unwrap().next.map(|(t, _)| t), Some(small));
    now += MS;
    set(now);
    S.block(1, now, small).unwrap();
    let before = S.platform().readings.load(SeqCst);
    let next = S.reschedule(1, now, |_| {}).unwrap().next.map(|(t, _)| t);
    let read = S.platform().readings.load(SeqCst) - before;
    S.check_invariants().unwrap();
    assert_eq!(next, Some(big), "the big CPU runs the misfit task the stopper pushed to it");
    (read, S.task_cpu(big).unwrap())
}

#[test]
fn a_clock_that_calls_the_machine_during_a_newly_idle_pass_returns() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(life()).unwrap());
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok((readings, cpu)) => {
            assert!(readings >= 2, "the pass read the clock before and after ({readings} readings)");
            assert_eq!(cpu, 1);
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the machine waits for itself: a callback held a lock")
        }
        Err(e) => panic!("the life failed: {e}"),
    }
}
