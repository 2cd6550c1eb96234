//! A worked port with every piece of a real one: four OS threads play a 4-CPU machine through
//! the porter's API (PORTING.md, "Worked examples"). Each CPU has its own tick, an IPI (a
//! flag and an unpark), and tickless idle; tasks sleep and wake each other with the
//! lost-wakeup protocol, wakeups that find every runqueue full wait in the port's list, and
//! exits are reaped once, at once or at the switch. The invariant checker runs all along.
//! Run: `cargo run -p sched-core --example threads_port`.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Barrier, Mutex, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use sched_core::port::Scheduler;
use sched_core::{Features, Platform, SchedError, TaskId, TaskParams, TaskState};

const CPUS: usize = 4;
const TICK_NS: u64 = 1_000_000; // HZ = 1000
/// 32 live tasks, 4 attached (running or queued) per CPU: 16 in all, fewer than the
/// workload holds at its peak, so some wakeups meet full runqueues.
static SCHED: Scheduler<Port, CPUS, 32, 4> = Scheduler::new(Port, Features::DEFAULT, 1000);

/// The port's threads, by index (a task's payload). Created in this order by the parent.
const LISTENERS: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7]; // sleep until the broadcast
const DAEMON: u32 = 8; // sleeps for ever; the broadcaster kills it
const PAIRS: [(u32, u32); 2] = [(10, 9), (12, 11)]; // ping-pong: (starts with the token, other)
const SPINNERS: [u32; 8] = [13, 14, 15, 16, 17, 18, 19, 20];
const YIELDER: u32 = 21;
const BROADCASTER: u32 = 22;
const PARENT: u32 = 23;
const THREADS: usize = 24;
const ROUNDS: u32 = 300; // ping-pong round trips per pair
const SPIN_UNITS: u32 = 300; // a spinner's work after the broadcast, in 5 µs units

static T0: OnceLock<Instant> = OnceLock::new();
/// The CPUs' IPIs: a pending reschedule, and the thread to unpark from idle.
static IPI: [AtomicBool; CPUS] = [const { AtomicBool::new(false) }; CPUS];
static CPU_THREAD: [OnceLock<Thread>; CPUS] = [const { OnceLock::new() }; CPUS];
/// Per thread: its task id (raw), wake tokens, work left, rounds done (a sleeper: woken),
/// reaped.
static ID: [AtomicU64; THREADS] = [const { AtomicU64::new(0) }; THREADS];
static TOKENS: [AtomicU32; THREADS] = [const { AtomicU32::new(0) }; THREADS];
static WORK: [AtomicU32; THREADS] = [const { AtomicU32::new(SPIN_UNITS) }; THREADS];
static DONE: [AtomicU32; THREADS] = [const { AtomicU32::new(0) }; THREADS];
static REAPED: [AtomicBool; THREADS] = [const { AtomicBool::new(false) }; THREADS];
/// Wakeups refused with `RunQueueFull`, retried when a task blocks or exits.
static WAITING: Mutex<VecDeque<TaskId>> = Mutex::new(VecDeque::new());
static NEXT_CHILD: AtomicU32 = AtomicU32::new(0);
static BROADCAST: AtomicBool = AtomicBool::new(false);
// What happened, reported at the end: wakeups refused by full runqueues and retried,
// wakeups that came before the block, blocks undone in place, tickless sleeps, exits of
// sleeping tasks (gone at once).
enum Seen {
    Full,
    Retried,
    Early,
    InPlace,
    Tickless,
    AtOnce,
}
static COUNT: [AtomicU32; 6] = [const { AtomicU32::new(0) }; 6];

fn count(what: Seen) {
    COUNT[what as usize].fetch_add(1, SeqCst);
}

struct Port;
impl Platform for Port {
    type Payload = u32; // the thread's index
    fn resched_cpu(&self, cpu: usize) {
        IPI[cpu].store(true, SeqCst);
        if let Some(t) = CPU_THREAD[cpu].get() {
            t.unpark();
        }
    }
}

fn now() -> u64 {
    T0.get().map_or(0, |t| t.elapsed().as_nanos() as u64) + 1
}

fn id(i: u32) -> TaskId {
    TaskId::from_raw(ID[i as usize].load(SeqCst))
}

fn spin_unit() {
    let until = Instant::now() + Duration::from_micros(5);
    while Instant::now() < until {}
}

/// A thread is gone: free it, exactly once.
fn reap(i: u32) {
    assert!(!REAPED[i as usize].swap(true, SeqCst), "thread {i} reaped twice");
    if REAPED.iter().all(|r| r.load(SeqCst)) {
        CPU_THREAD.iter().filter_map(OnceLock::get).for_each(Thread::unpark); // all done
    }
}

/// Gives thread `i` a token and wakes it. A task not asleep (`InvalidState`: still running)
/// finds the token when it looks again after its `block`, and one that took it and exited
/// meanwhile is gone (`StaleTask`); a wakeup that finds every runqueue it may use full
/// waits in `WAITING`.
fn give(cpu: usize, i: u32) {
    TOKENS[i as usize].fetch_add(1, SeqCst);
    match SCHED.wake(cpu, now(), id(i)) {
        Ok(_) => {}
        Err(SchedError::InvalidState { .. } | SchedError::StaleTask(_)) => count(Seen::Early),
        Err(SchedError::RunQueueFull) => {
            count(Seen::Full);
            WAITING.lock().unwrap().push_back(id(i));
        }
        Err(e) => panic!("wake of thread {i}: {e}"),
    }
}

/// Room appeared (a task blocked or exited): the waiting wakeups, in order, while they fit.
/// The list is not held across a call into the scheduler, whose callbacks may want it too.
fn retry_waiting(cpu: usize) {
    loop {
        // (Its own statement: the guard is dropped before the wake.)
        let next = WAITING.lock().unwrap().pop_front();
        let Some(t) = next else { break };
        match SCHED.wake(cpu, now(), t) {
            Ok(_) => count(Seen::Retried),
            Err(SchedError::RunQueueFull) => {
                WAITING.lock().unwrap().push_front(t);
                break;
            }
            Err(e) => panic!("retried wake: {e}"),
        }
    }
}

/// The sleep side of the lost-wakeup protocol: take a token, or block, then look again. A
/// token that came before the block undoes it (a wake of a task still current on its CPU
/// keeps it running there). `false`: asleep, switch away.
fn take_or_sleep(cpu: usize, me: TaskId, i: u32) -> bool {
    let take = || TOKENS[i as usize].fetch_update(SeqCst, SeqCst, |t| t.checked_sub(1)).is_ok();
    if take() {
        return true;
    }
    SCHED.block(cpu, now(), me).unwrap();
    if !take() {
        return false;
    }
    match SCHED.wake(cpu, now(), me) {
        Ok(_) => count(Seen::InPlace),
        Err(SchedError::InvalidState { .. }) => {} // the giver's wake came first
        Err(e) => panic!("wake in place: {e}"),
    }
    true
}

/// Runs one step of thread `i` (task `me`) on `cpu`. Returns whether it must switch away
/// (it blocked, yielded or exited).
fn step(cpu: usize, me: TaskId, i: u32) -> bool {
    // Published by the creator when `create` returns and by the task when it first runs, so
    // a task woken by one it woke has its id known.
    ID[i as usize].store(me.to_raw(), SeqCst);
    let exit = || !SCHED.exit(cpu, now(), me).unwrap(); // running: gone at the next switch
    match i {
        PARENT => {
            let c = NEXT_CHILD.load(SeqCst);
            if c == PARENT {
                return exit();
            }
            match SCHED.create(cpu, now(), TaskParams::default(), c) {
                Ok(t) => ID[c as usize].store(t.to_raw(), SeqCst),
                Err(SchedError::RunQueueFull) => {
                    SCHED.yield_now(cpu, now()).unwrap(); // try again once others ran
                    return true;
                }
                Err(e) => panic!("create: {e}"),
            }
            NEXT_CHILD.store(c + 1, SeqCst);
            false
        }
        _ if LISTENERS.contains(&i) || i == DAEMON => {
            if DONE[i as usize].load(SeqCst) == 0 {
                if !take_or_sleep(cpu, me, i) {
                    return true;
                }
                DONE[i as usize].store(1, SeqCst);
            }
            // Woken by the broadcast: stay (attached) until it is over, then leave.
            spin_unit();
            BROADCAST.load(SeqCst) && exit()
        }
        _ if PAIRS.iter().any(|&(a, b)| i == a || i == b) => {
            let (a, b) = *PAIRS.iter().find(|&&(a, b)| i == a || i == b).unwrap();
            let partner = if i == a { b } else { a };
            if !take_or_sleep(cpu, me, i) {
                return true;
            }
            let done = DONE[i as usize].fetch_add(1, SeqCst) + 1;
            // The first holder passes every round; the other all but its last.
            if i == a || done < ROUNDS {
                give(cpu, partner);
            }
            done == ROUNDS && exit()
        }
        _ if SPINNERS.contains(&i) => {
            spin_unit();
            if BROADCAST.load(SeqCst) && WORK[i as usize].fetch_sub(1, SeqCst) == 1 {
                return exit();
            }
            false
        }
        YIELDER => {
            spin_unit();
            if WORK[i as usize].fetch_sub(1, SeqCst) == 1 {
                return exit();
            }
            SCHED.yield_now(cpu, now()).unwrap();
            true
        }
        BROADCASTER => {
            let asleep = |t: u32| SCHED.state(id(t)) == Ok(TaskState::Blocked);
            if !(LISTENERS.iter().all(|&l| asleep(l)) && asleep(DAEMON)) {
                SCHED.yield_now(cpu, now()).unwrap();
                return true;
            }
            for l in LISTENERS {
                give(cpu, l);
            }
            BROADCAST.store(true, SeqCst);
            // Asleep and switched out, it is gone at once; just blocked, at its switch.
            if SCHED.exit(cpu, now(), id(DAEMON)).unwrap() {
                count(Seen::AtOnce);
                reap(DAEMON);
            }
            exit()
        }
        _ => unreachable!("thread {i}"),
    }
}

/// The way out of an interrupt: switch, reap what the switch finished, retry the waiting
/// wakeups when a task blocked or exited.
fn switch(cpu: usize) -> Option<(TaskId, u32)> {
    let mut room = false;
    let run = SCHED
        .reschedule(cpu, now(), |sw| {
            if let Some((_, i)) = sw.exited {
                reap(i);
            }
            room |= matches!(sw.prev, Some((_, TaskState::Blocked | TaskState::Exiting, _)));
        })
        .unwrap();
    if room {
        retry_waiting(cpu);
    }
    if run.again {
        IPI[cpu].store(true, SeqCst);
    }
    run.next
}

fn cpu_main(cpu: usize, sync: &Barrier) {
    CPU_THREAD[cpu].set(thread::current()).unwrap();
    SCHED.cpu_up(cpu, now()).unwrap(); // before this CPU takes any work
    sync.wait(); // placement must see every CPU
    if cpu == 0 {
        let t = SCHED.create(cpu, now(), TaskParams::default(), PARENT).unwrap();
        ID[PARENT as usize].store(t.to_raw(), SeqCst);
    }
    let (mut current, mut next_tick, mut ticks) = (None, now(), 0u32);
    while !REAPED.iter().all(|r| r.load(SeqCst)) {
        if now() >= next_tick {
            // The timer interrupt.
            IPI[cpu].fetch_or(SCHED.tick(cpu, now()).unwrap(), SeqCst);
            next_tick = now() + TICK_NS;
            ticks += 1;
            if cpu == 0 && ticks % 10 == 0 {
                SCHED.check_invariants().unwrap();
            }
        }
        if IPI[cpu].swap(false, SeqCst) || SCHED.need_resched(cpu).unwrap() {
            current = switch(cpu);
        }
        match current {
            Some((me, i)) => {
                if step(cpu, me, i) {
                    IPI[cpu].store(true, SeqCst);
                }
            }
            // Idle: tickless if the core agrees (it then balances for this CPU and sends an
            // IPI when work comes), else sleep until the next tick.
            None if SCHED.idle_enter(cpu).unwrap() => {
                count(Seen::Tickless);
                while !IPI[cpu].load(SeqCst) && !REAPED.iter().all(|r| r.load(SeqCst)) {
                    thread::park();
                }
                SCHED.idle_exit(cpu).unwrap();
                next_tick = now();
            }
            None => thread::park_timeout(Duration::from_nanos(next_tick.saturating_sub(now()))),
        }
    }
}

fn main() {
    SCHED.init_with(|t| t.init_flat(CPUS)).unwrap();
    T0.set(Instant::now()).unwrap();
    for (a, _) in PAIRS {
        TOKENS[a as usize].store(1, SeqCst);
    }
    let sync = Barrier::new(CPUS);
    thread::scope(|s| {
        for cpu in 0..CPUS {
            let sync = &sync;
            s.spawn(move || cpu_main(cpu, sync));
        }
    });
    assert_eq!(SCHED.nr_tasks(), 0, "every task exited");
    assert!(WAITING.lock().unwrap().is_empty(), "every refused wakeup was delivered");
    let [full, retried, early, in_place, tickless, at_once] = COUNT.each_ref().map(|c| c.load(SeqCst));
    assert!(full >= 1 && retried == full, "full runqueues refused {full} wakeups, {retried} retried");
    assert!(
        DONE.iter()
            .enumerate()
            .all(|(i, d)| !PAIRS.iter().any(|&(a, b)| i as u32 == a || i as u32 == b)
                || d.load(SeqCst) == ROUNDS),
        "every ping-pong round was played"
    );
    SCHED.check_invariants().unwrap();
    println!(
        "threads_port: {THREADS} threads on {CPUS} CPUs in {:?}; wakeups refused by full runqueues {full} \
         (all retried), before the block {early}, blocks undone in place {in_place}; tickless sleeps \
         {tickless}; reaped {THREADS} ({at_once} at its exit): ok",
        T0.get().unwrap().elapsed()
    );
}
