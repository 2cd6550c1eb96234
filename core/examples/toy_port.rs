//! The smallest complete host of sched-core: two host threads play a 2-CPU machine through
//! the porter's API. Each "thread" of the toy is an index into `WORK` (the task's payload);
//! running it spins a few microseconds per unit of work. PORTING.md walks through it.
//! Run: `cargo run -p sched-core --example toy_port`.
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use sched_core::port::Scheduler;
use sched_core::{Features, Platform, TaskId, TaskParams};

const CPUS: usize = 2;
const THREADS: usize = 6;
const TICK_NS: u64 = 1_000_000; // HZ = 1000

/// A CPU's pending reschedule: the toy's inter-processor interrupt.
static RESCHED: [AtomicBool; CPUS] = [const { AtomicBool::new(false) }; CPUS];
/// Work left per toy thread, and the CPUs each ran on (bit per CPU).
static WORK: [AtomicU32; THREADS] = [const { AtomicU32::new(400) }; THREADS];
static RAN_ON: [AtomicU32; THREADS] = [const { AtomicU32::new(0) }; THREADS];

struct Toy;
impl Platform for Toy {
    type Payload = u32; // the toy thread's index
    fn resched_cpu(&self, cpu: usize) {
        RESCHED[cpu].store(true, SeqCst);
    }
}

static SCHED: Scheduler<Toy, CPUS, 16, 16> = Scheduler::new(Toy, Features::DEFAULT, 1000);

/// One monotonic clock for both CPUs, in ns, never 0.
fn now(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64 + 1
}

fn cpu_main(cpu: usize, t0: Instant, sync: &Barrier) {
    SCHED.cpu_up(cpu, now(t0)).unwrap(); // before this CPU takes any work
    sync.wait(); // placement must see both CPUs
    if cpu == 0 {
        for i in 0..THREADS as u32 {
            SCHED.create(cpu, now(t0), TaskParams::default(), i).unwrap();
        }
    }
    sync.wait(); // the threads exist before either CPU looks for work
    let mut current: Option<(TaskId, u32)> = None;
    let mut next_tick = 0;
    while SCHED.nr_tasks() > 0 {
        let t = now(t0);
        if t >= next_tick {
            // The timer interrupt.
            if SCHED.tick(cpu, t).unwrap() {
                RESCHED[cpu].store(true, SeqCst);
            }
            next_tick = t + TICK_NS;
        }
        // The way out of an interrupt or call: reschedule if asked (or poll while idle).
        if RESCHED[cpu].swap(false, SeqCst) || SCHED.need_resched(cpu).unwrap() || current.is_none() {
            current = SCHED.reschedule(cpu, now(t0), |_| {}).unwrap().next;
        }
        match current {
            Some((id, i)) => {
                RAN_ON[i as usize].fetch_or(1 << cpu, SeqCst);
                let until = Instant::now() + Duration::from_micros(5);
                while Instant::now() < until {}
                if WORK[i as usize].fetch_sub(1, SeqCst) == 1 {
                    SCHED.exit(cpu, now(t0), id).unwrap(); // switched away at the reschedule
                }
            }
            None => std::thread::yield_now(),
        }
    }
}

fn main() {
    SCHED.init_with(|t| t.init_flat(CPUS)).unwrap();
    let (t0, sync) = (Instant::now(), Barrier::new(CPUS));
    std::thread::scope(|s| {
        for cpu in 0..CPUS {
            let sync = &sync;
            s.spawn(move || cpu_main(cpu, t0, sync));
        }
    });
    let both = RAN_ON.iter().fold(0, |m, r| m | r.load(SeqCst));
    assert!(WORK.iter().all(|w| w.load(SeqCst) == 0), "every thread finished its work");
    assert_eq!(both, 0b11, "work ran on both CPUs");
    SCHED.check_invariants().unwrap();
    println!("toy_port: {THREADS} threads done on {CPUS} CPUs in {:?}: ok", t0.elapsed());
}
