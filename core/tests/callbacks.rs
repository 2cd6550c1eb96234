//! No callback can deadlock: a platform whose every callback calls every function of the
//! porter's API, naming its own CPU and every other one, on machines of 1, 2 and 8 CPUs and a
//! big.LITTLE pair; each kind of callback comes at least once on some machine.
//! Each call returns (a result or a typed error); a watchdog fails the test if the machine
//! hangs, and the machine's invariants hold at the end.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::time::Duration;

use sched_core::port::Scheduler;
use sched_core::topology::TopologyError;
use sched_core::{CpuMask, Event, Features, Platform, TaskId, TaskParams};

const MS: u64 = 1_000_000;

// Whether a callback is running (a call made from a callback may cause callbacks of its
// own, which call nothing), and the time the life is at.
thread_local! {
    static NESTED: Cell<bool> = const { Cell::new(false) };
    static NOW: Cell<u64> = const { Cell::new(MS) };
}

/// Calls every function of the API from inside each callback.
struct Hostile<const N: usize> {
    /// Callbacks seen, per kind: resched, stopper, kick, clock, event.
    seen: [AtomicUsize; 5],
    calls: AtomicUsize,
}

impl<const N: usize> Hostile<N> {
    const fn new() -> Self {
        Hostile { seen: [const { AtomicUsize::new(0) }; 5], calls: AtomicUsize::new(0) }
    }
}

/// The schedulers under test, one per machine size.
static S1: Scheduler<Hostile<1>, 1, 32, 32> = Scheduler::new(Hostile::new(), Features::DEFAULT, 250);
static S2: Scheduler<Hostile<2>, 2, 32, 32> = Scheduler::new(Hostile::new(), Features::DEFAULT, 250);
static S8: Scheduler<Hostile<8>, 8, 64, 32> = Scheduler::new(Hostile::new(), Features::DEFAULT, 250);

/// Counts the callback and, unless one is already running, calls everything from it.
fn from_callback<P: Platform<Payload = u32>, const C: usize, const T: usize>(
    seen: &[AtomicUsize; 5],
    calls: &AtomicUsize,
    kind: usize,
    s: &Scheduler<P, C, T, 32>,
) {
    seen[kind].fetch_add(1, SeqCst);
    if NESTED.with(|n| n.replace(true)) {
        return;
    }
    let now = NOW.with(Cell::get);
    for cpu in 0..C {
        calls.fetch_add(call_everything(s, cpu, now), SeqCst);
    }
    NESTED.with(|n| n.set(false));
}

macro_rules! hostile {
    ($n:literal, $s:ident) => {
        impl Platform for Hostile<$n> {
            type Payload = u32;
            fn resched_cpu(&self, _cpu: usize) {
                from_callback(&self.seen, &self.calls, 0, &$s);
            }
            fn run_stopper(&self, _cpu: usize) {
                from_callback(&self.seen, &self.calls, 1, &$s);
            }
            fn kick_nohz(&self, _cpu: usize) {
                from_callback(&self.seen, &self.calls, 2, &$s);
            }
            fn clock_ns(&self) -> Option<u64> {
                from_callback(&self.seen, &self.calls, 3, &$s);
                Some(NOW.with(Cell::get))
            }
            fn event(&self, _e: &Event) {
                from_callback(&self.seen, &self.calls, 4, &$s);
            }
        }
    };
}
hostile!(1, S1);
hostile!(2, S2);
hostile!(8, S8);
hostile!(3, SB);

/// A big.LITTLE pair (the tag 3 only tells its platform apart), for the stopper: an active
/// balance pushes a misfit task up.
static SB: Scheduler<Hostile<3>, 2, 32, 32> = Scheduler::new(Hostile::new(), Features::DEFAULT, 250);

/// Every function of the porter's API, naming `cpu`, from inside a callback. Returns how
/// many calls were made. What they answer is not the point (a call from a callback on its
/// own CPU is refused); that they answer is.
fn call_everything<P: Platform<Payload = u32>, const C: usize, const T: usize>(
    s: &Scheduler<P, C, T, 32>,
    cpu: usize,
    now: u64,
) -> usize {
    let any: Option<TaskId> = s.current(cpu).ok().flatten().map(|(id, _)| id);
    let _ = s.need_resched(cpu);
    let _ = s.tick(cpu, now);
    let _ = s.reschedule(cpu, now, |_| {});
    if s.pick(cpu, now).is_ok() {
        let _ = s.finish(cpu, now);
    }
    let _ = s.finish(cpu, now);
    let _ = s.yield_now(cpu, now);
    let _ = s.idle_enter(cpu);
    let _ = s.serve_kick(cpu, now);
    let _ = s.idle_exit(cpu);
    let _ = s.cpu_up(cpu, now);
    if let Ok(t) = s.create(cpu, now, TaskParams::default(), 99) {
        let _ = s.set_nice(cpu, now, t, 3);
        let _ = s.set_affinity(cpu, now, t, CpuMask::first_n(C));
        let _ = s.exit(cpu, now, t);
    }
    if let Some(t) = any {
        let _ = s.payload(t);
        let _ = s.state(t);
        let _ = s.task_cpu(t);
        let _ = s.wake(cpu, now, t);
        let _ = s.set_nice(cpu, now, t, 0);
        let _ = s.set_affinity(cpu, now, t, CpuMask::first_n(C));
    }
    let _ = s.stats(cpu);
    let _ = s.balance_report(cpu);
    let _ = s.nr_tasks();
    let _ = s.check_invariants();
    s.set_features(s.features());
    let _ = s.set_hz(s.hz());
    let _ = s.init_with(|_| Err(TopologyError::NoCpus));
    let _ = s.events_lost();
    27
}

/// A busy life on `nr` CPUs: spinners, sleepers woken from other CPUs, yields, renices,
/// affinity changes, exits, ticks long enough for every balancer, and idle with nohz.
fn life<P: Platform<Payload = u32>, const C: usize, const T: usize>(s: &'static Scheduler<P, C, T, 32>) {
    s.init_with(|t| t.init_flat(C)).unwrap();
    let mut now = MS;
    let set = |n: u64| NOW.with(|c| c.set(n));
    set(now);
    for cpu in 0..C {
        s.cpu_up(cpu, now).unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..(2 * C + 2) as u32 {
        if let Ok(t) = s.create(0, now, TaskParams::default(), i) {
            tasks.push(t);
        }
    }
    for step in 0..200u64 {
        now += MS;
        set(now);
        for cpu in 0..C {
            let _ = s.tick(cpu, now);
            let _ = s.reschedule(cpu, now, |_| {});
            if let Ok(Some((t, _))) = s.current(cpu) {
                match (step + cpu as u64) % 7 {
                    0 => {
                        let _ = s.block(cpu, now, t);
                    }
                    1 => {
                        let _ = s.yield_now(cpu, now);
                    }
                    2 => {
                        let _ = s.set_nice(cpu, now, t, (step % 10) as i32 - 5);
                    }
                    _ => {}
                }
            } else if s.idle_enter(cpu) == Ok(true) {
                let _ = s.idle_exit(cpu);
            }
        }
        for &t in &tasks {
            let _ = s.wake((step as usize) % C, now, t);
        }
        if step == 150 {
            for &t in tasks.iter().step_by(3) {
                let _ = s.exit(0, now, t);
            }
        }
    }
    if C > 1 {
        pinned_to_one_cpu(s, &tasks, now);
    }
    s.check_invariants().unwrap();
}

/// The callback the busy life may not bring about, a kick: every task pinned to CPU 0, the
/// other CPUs idle and tickless (entered again each round: every callback's calls take them
/// out), and CPU 0's ticks with its tasks queued kick one of them.
fn pinned_to_one_cpu<P: Platform<Payload = u32>, const C: usize, const T: usize>(
    s: &'static Scheduler<P, C, T, 32>,
    tasks: &[TaskId],
    mut now: u64,
) {
    for &t in tasks {
        let _ = s.wake(0, now, t);
        let _ = s.set_affinity(0, now, t, CpuMask::single(0));
    }
    for _ in 0..100 {
        now += MS;
        NOW.with(|c| c.set(now));
        for cpu in 1..C {
            let _ = s.reschedule(cpu, now, |_| {});
            if matches!(s.current(cpu), Ok(None)) {
                let _ = s.idle_enter(cpu);
            }
        }
        let _ = s.tick(0, now);
        let _ = s.reschedule(0, now, |_| {});
    }
}

/// The stopper's callback: a task too big for the LITTLE CPU 0 runs there alone (pinned
/// until its utilisation has grown), and the big CPU 1 is idle; its balance cannot pull a
/// running task, so it asks CPU 0's stopper to push it.
fn misfit_life(s: &'static Scheduler<Hostile<3>, 2, 32, 32>) {
    let mut now = MS;
    let set = |n: u64| NOW.with(|c| c.set(n));
    set(now);
    s.init_with(|t| t.init_big_little(1, 1, 446)).unwrap();
    s.cpu_up(0, now).unwrap();
    s.cpu_up(1, now).unwrap();
    let pinned = TaskParams { affinity: CpuMask::single(0), ..TaskParams::default() };
    let big = s.create(0, now, pinned, 0).unwrap();
    for step in 0..400 {
        if step == 200 {
            let _ = s.set_affinity(0, now, big, CpuMask::first_n(2));
        }
        now += MS;
        set(now);
        for cpu in 0..2 {
            let _ = s.tick(cpu, now);
            let _ = s.reschedule(cpu, now, |_| {});
        }
    }
    s.check_invariants().unwrap();
}

/// Runs `f` on its own thread; a hang past the watchdog's time is a deadlock.
fn within(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the run panicked"),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: deadlocked (no answer in 60 s)"),
    }
}

#[test]
fn every_callback_may_call_every_function_on_1_2_and_8_cpus() {
    within("1 CPU", || life(&S1));
    within("2 CPUs", || life(&S2));
    within("8 CPUs", || life(&S8));
    within("a big.LITTLE pair", || misfit_life(&SB));
    let seen = &SB.platform().seen;
    assert!(seen[1].load(SeqCst) > 0, "big.LITTLE: the stopper ran: {seen:?}");
    for (n, seen, calls) in [
        (1, &S1.platform().seen, &S1.platform().calls),
        (2, &S2.platform().seen, &S2.platform().calls),
        (8, &S8.platform().seen, &S8.platform().calls),
    ] {
        let seen: Vec<usize> = seen.iter().map(|a| a.load(SeqCst)).collect();
        assert!(seen[0] > 0 && seen[4] > 0, "{n} CPUs: reschedules and events came: {seen:?}");
        assert!(calls.load(SeqCst) > 0, "{n} CPUs: the callbacks called");
        if n > 1 {
            assert!(seen[3] > 0, "{n} CPUs: the clock was asked: {seen:?}");
            assert!(seen[2] > 0, "{n} CPUs: idle CPUs were kicked: {seen:?}");
        }
    }
}
