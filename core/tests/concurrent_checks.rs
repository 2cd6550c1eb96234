//! `check_invariants` from a thread of its own while two CPUs sleep and wake tasks across
//! each other's runqueues: a task a call is moving is in flight, not lost.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::Instant;

use sched_core::port::Scheduler;
use sched_core::{Features, NoPlatform, SchedError, TaskId, TaskParams};

static S: Scheduler<NoPlatform, 2, 16, 16> = Scheduler::new(NoPlatform, Features::DEFAULT, 1000);

#[test]
fn invariants_hold_while_other_cpus_move_tasks() {
    let t0 = Instant::now();
    let now = || t0.elapsed().as_nanos() as u64 + 1;
    S.init_with(|t| t.init_flat(2)).unwrap();
    for cpu in 0..2 {
        S.cpu_up(cpu, now()).unwrap();
    }
    for _ in 0..8 {
        S.create(0, now(), TaskParams::default(), ()).unwrap();
    }
    let asleep: Mutex<Vec<TaskId>> = Mutex::new(Vec::new());
    let (done, wakes, checks) = (AtomicBool::new(false), AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        for cpu in 0..2 {
            let (asleep, wakes, done) = (&asleep, &wakes, &done);
            s.spawn(move || {
                // Until both counts are reached (however fast this host runs either side).
                while !done.load(SeqCst) {
                    // Run whatever is picked briefly, put it to sleep, wake the oldest sleeper
                    // from here: placement moves it to whichever CPU suits.
                    if let Some((t, ())) = S.reschedule(cpu, now(), |_| {}).unwrap().next {
                        S.block(cpu, now(), t).unwrap();
                        asleep.lock().unwrap().push(t);
                    }
                    let next = asleep.lock().unwrap().first().copied();
                    if let Some(t) = next {
                        match S.wake(cpu, now(), t) {
                            Ok(_) => {
                                asleep.lock().unwrap().retain(|&x| x != t);
                                wakes.fetch_add(1, SeqCst);
                            }
                            // Still being switched away on the other CPU, or woken by it.
                            Err(SchedError::InvalidState { .. }) => {}
                            Err(e) => panic!("wake: {e}"),
                        }
                    }
                }
            });
        }
        s.spawn(|| {
            while !done.load(SeqCst) {
                S.check_invariants().unwrap();
                checks.fetch_add(1, SeqCst);
            }
        });
        while (wakes.load(SeqCst) < 5_000 || checks.load(SeqCst) <= 100) && t0.elapsed().as_secs() < 30 {
            std::thread::yield_now();
        }
        done.store(true, SeqCst);
    });
    assert!(wakes.load(SeqCst) >= 5_000, "{} wakeups", wakes.load(SeqCst));
    assert!(checks.load(SeqCst) > 100, "{} checks ran", checks.load(SeqCst));
}
