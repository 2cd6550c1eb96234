//! The `churn` scenario: random spawn/exit/park/unpark/yield/sleep; every thread starts and
//! exits exactly once.

use portable_atomic::{
    AtomicBool, AtomicU32,
    Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst},
};

use super::{
    check_invariants, count_primes, finish, mix, ncpus, report_cpus, since_t0, wait_with, ThreadKind,
    EXIT_FAILED, SB_SEED, T0,
};
use crate::arch;
use crate::kprintln;
use crate::sched;

/// Serial numbers of churn threads: one per live thread, reused once its thread has exited,
/// so a run of any length never runs out (more than the threads that can be alive at once).
const CH_SERIALS: usize = 256;
/// Most churn threads alive at once: 32, or as many as a small pool holds besides the main
/// thread and one spare.
const CH_LIVE_MAX: u32 = if arch::MAX_THREADS > 33 { 32 } else { arch::MAX_THREADS as u32 - 2 };
/// Operation kinds, as counted.
const CH_OP_NAMES: [&str; 8] =
    ["spawn", "exit", "park", "unpark", "unpark (none parked)", "yield", "sleep", "spawn refused"];
const OP_SPAWN: usize = 0;
const OP_EXIT: usize = 1;
const OP_PARK: usize = 2;
const OP_UNPARK: usize = 3;
const OP_UNPARK_NONE: usize = 4;
const OP_YIELD: usize = 5;
const OP_SLEEP: usize = 6;
const OP_SPAWN_REFUSED: usize = 7;

static CH_TARGET: AtomicU32 = AtomicU32::new(0);
static CH_OPS: AtomicU32 = AtomicU32::new(0);
static CH_COUNT: [AtomicU32; 8] = [const { AtomicU32::new(0) }; 8];
static CH_EXIT_AT_STOP: AtomicU32 = AtomicU32::new(0);
/// Where the search for a free serial starts next.
static CH_NEXT_SERIAL: AtomicU32 = AtomicU32::new(0);
/// Per serial: held by a live (or being spawned) thread.
static CH_HELD: [AtomicBool; CH_SERIALS] = [const { AtomicBool::new(false) }; CH_SERIALS];
/// Per serial: threads spawned, started and exited with it. At the end all three agree for
/// every serial exactly when every thread ran once and exited once.
static CH_SPAWNED: [AtomicU32; CH_SERIALS] = [const { AtomicU32::new(0) }; CH_SERIALS];
static CH_STARTED: [AtomicU32; CH_SERIALS] = [const { AtomicU32::new(0) }; CH_SERIALS];
static CH_EXITED: [AtomicU32; CH_SERIALS] = [const { AtomicU32::new(0) }; CH_SERIALS];
/// Churn children alive or being spawned.
static CH_LIVE: AtomicU32 = AtomicU32::new(0);
/// Thread slot → parked (set by the thread before it parks; cleared by whoever unparks it).
static CH_PARKED: [AtomicBool; arch::MAX_THREADS] = [const { AtomicBool::new(false) }; arch::MAX_THREADS];
static CH_STOP: AtomicBool = AtomicBool::new(false);

/// xorshift64.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Rng {
        Rng(mix(seed ^ stream.wrapping_mul(0x9E37_79B9)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Counts one operation; the one that reaches the target stops the run.
fn churn_op(kind: usize) {
    CH_COUNT[kind].fetch_add(1, Relaxed);
    if CH_OPS.fetch_add(1, AcqRel) + 1 >= CH_TARGET.load(Relaxed) {
        CH_STOP.store(true, SeqCst);
    }
}

/// Spawns a churn child unless too many are alive. A spawn the kernel refuses is counted as
/// an operation (so the run still ends) and fails the run's check.
fn churn_spawn() -> bool {
    if CH_LIVE.fetch_add(1, AcqRel) >= CH_LIVE_MAX {
        CH_LIVE.fetch_sub(1, AcqRel);
        return false;
    }
    // At most CH_LIVE_MAX serials are held, so a free one is always found.
    let start = CH_NEXT_SERIAL.fetch_add(1, Relaxed) as usize;
    let serial = (0..CH_SERIALS)
        .map(|k| (start + k) % CH_SERIALS)
        .find(|&s| CH_HELD[s].compare_exchange(false, true, Acquire, Relaxed).is_ok());
    let spawned = serial.is_some_and(|s| {
        CH_SPAWNED[s].fetch_add(1, Relaxed);
        if arch::sys_spawn(ThreadKind::Churn.number(), s, 0, u64::MAX) < 0 {
            CH_SPAWNED[s].fetch_sub(1, Relaxed);
            CH_HELD[s].store(false, Release);
            return false;
        }
        true
    });
    if spawned {
        churn_op(OP_SPAWN);
    } else {
        CH_LIVE.fetch_sub(1, AcqRel);
        churn_op(OP_SPAWN_REFUSED);
    }
    spawned
}

/// Unparks one parked churn thread, searching from a random slot.
fn churn_unpark(rng: &mut Rng) {
    let start = (rng.next() % arch::MAX_THREADS as u64) as usize;
    for k in 0..arch::MAX_THREADS {
        let s = (start + k) % arch::MAX_THREADS;
        if CH_PARKED[s].compare_exchange(true, false, SeqCst, Relaxed).is_ok() {
            if !arch::sys_unpark(s) {
                defmt::error!("churn: FAIL parked thread slot {} is not a live thread", s);
                arch::exit(EXIT_FAILED);
            }
            churn_op(OP_UNPARK);
            return;
        }
    }
    churn_op(OP_UNPARK_NONE);
}

/// Unparks every parked churn thread (after the stop).
fn churn_unpark_all() {
    for (s, p) in CH_PARKED.iter().enumerate() {
        if p.compare_exchange(true, false, SeqCst, Relaxed).is_ok() {
            arch::sys_unpark(s);
        }
    }
}

fn churn_sleep(rng: &mut Rng) {
    arch::sys_sleep(rng.next() % 2_000_000 + 1);
    churn_op(OP_SLEEP);
}

pub(super) fn churn_main(ops: u32) {
    CH_TARGET.store(ops, Relaxed);
    let seed = SB_SEED.load(Relaxed) as u64;
    kprintln!(
        "churn: {} operations, seed {}, at most {} threads alive, {} CPUs, hz={}",
        ops,
        seed,
        CH_LIVE_MAX,
        ncpus(),
        sched::hz()
    );
    T0.store(arch::now_ns(), Release);
    let mut rng = Rng::new(seed, u64::MAX);
    // The main thread never parks or exits before the stop: it keeps the population alive
    // and unparks, so the run cannot deadlock with every thread parked.
    while !CH_STOP.load(SeqCst) {
        if CH_LIVE.load(Relaxed) < 4 {
            churn_spawn();
            continue;
        }
        match rng.next() % 10 {
            0..=2 => {
                churn_spawn();
            }
            3..=6 => churn_unpark(&mut rng),
            7..=8 => {
                arch::sys_yield();
                churn_op(OP_YIELD);
            }
            _ => churn_sleep(&mut rng),
        }
    }
    let stopped = since_t0();
    kprintln!("churn: {} operations reached at {} us; waiting for every thread to exit", ops, stopped / 1000);
    let deadline = arch::now_ns() + 20_000_000_000;
    while CH_LIVE.load(Acquire) != 0 {
        churn_unpark_all();
        if arch::now_ns() > deadline {
            defmt::error!("churn: FAIL {} threads still alive 20 s after the stop", CH_LIVE.load(Acquire));
            arch::exit(EXIT_FAILED);
        }
        // Sleep, not spin: under icount a vCPU that spins (even with `yield`) while every
        // other one waits in WFI can hold back their timer interrupts for a long time.
        arch::sys_sleep(1_000_000);
    }
    // The last exits free their slots when their CPUs switch away from them.
    let me = 1;
    // This thread may sleep between checks (one tick at a time). A CPU of a parallel-mode
    // run can be held back by its host for a while: the watchdog's 10 s, not a speed check.
    let settled = wait_with(
        arch::now_ns() + 10_000_000_000,
        || sched::threads_in_use() == me && sched::with_core(|k| k.nr_tasks()) == me,
        || arch::sys_sleep(1_000_000),
    );
    churn_report(settled)
}

pub(super) fn churn_child(serial: usize) {
    CH_STARTED[serial].fetch_add(1, Relaxed);
    let me = sched::current_thread().unwrap_or(usize::MAX);
    let mut rng = Rng::new(SB_SEED.load(Relaxed) as u64, serial as u64);
    let mut exited = false;
    while !CH_STOP.load(SeqCst) {
        core::hint::black_box(count_primes(20 + (rng.next() % 200) as u32));
        match rng.next() % 100 {
            0..=9 => {
                if !churn_spawn() {
                    arch::sys_yield();
                    churn_op(OP_YIELD);
                }
            }
            10..=19 => {
                exited = true;
                break;
            }
            20..=39 => {
                let Some(p) = CH_PARKED.get(me) else { continue };
                p.store(true, SeqCst);
                if CH_STOP.load(SeqCst) {
                    // Whoever already claimed the flag unparks us; the token is harmless.
                    let _ = p.compare_exchange(true, false, SeqCst, Relaxed);
                    break;
                }
                arch::sys_park();
                churn_op(OP_PARK);
            }
            40..=59 => churn_unpark(&mut rng),
            60..=79 => {
                arch::sys_yield();
                churn_op(OP_YIELD);
            }
            _ => churn_sleep(&mut rng),
        }
    }
    if exited {
        churn_op(OP_EXIT);
    } else {
        CH_EXIT_AT_STOP.fetch_add(1, Relaxed);
    }
    CH_EXITED[serial].fetch_add(1, Relaxed);
    CH_HELD[serial].store(false, Release);
    CH_LIVE.fetch_sub(1, AcqRel);
}

fn churn_report(settled: bool) -> ! {
    let (mut spawned, mut lost, mut twice) = (0u32, 0u32, 0u32);
    for s in 0..CH_SERIALS {
        let sp = CH_SPAWNED[s].load(Relaxed);
        let (st, ex) = (CH_STARTED[s].load(Relaxed), CH_EXITED[s].load(Relaxed));
        spawned += sp;
        // Threads of this serial that never started or never exited, and starts or exits
        // beyond the spawns.
        lost += sp.saturating_sub(st.min(ex));
        twice += st.max(ex).saturating_sub(sp);
    }
    let exits = CH_COUNT[OP_EXIT].load(Relaxed) + CH_EXIT_AT_STOP.load(Relaxed);
    let total = CH_OPS.load(Relaxed);
    kprintln!("churn: {} operations in {} us", total, since_t0() / 1000);
    for (name, c) in CH_OP_NAMES.iter().zip(CH_COUNT.iter()) {
        kprintln!("churn: {} {}", name, c.load(Relaxed));
    }
    kprintln!(
        "churn: threads spawned {}, spawn refused {}, exited {} ({} by choice, {} at the stop), sleeps pending {}",
        spawned,
        CH_COUNT[OP_SPAWN_REFUSED].load(Relaxed),
        exits,
        CH_COUNT[OP_EXIT].load(Relaxed),
        CH_EXIT_AT_STOP.load(Relaxed),
        sched::sleepers()
    );
    let mut ok = lost == 0 && twice == 0 && exits == spawned && CH_COUNT[OP_SPAWN_REFUSED].load(Relaxed) == 0;
    kprintln!(
        "churn: exactly-once check: {} threads, {} never started or never exited, {} started or exited twice, exits {} = spawns {} -> {}",
        spawned,
        lost,
        twice,
        exits,
        spawned,
        if ok { "OK" } else { "FAIL" }
    );
    kprintln!(
        "churn: kernel threads in use {}, core tasks {} (expected 1 each: the main thread) -> {}",
        sched::threads_in_use(),
        sched::with_core(|k| k.nr_tasks()),
        if settled { "OK" } else { "FAIL" }
    );
    ok &= settled;
    ok &= check_invariants("churn");
    report_cpus("churn", ncpus());
    kprintln!("churn: {}", if ok { "OK" } else { "FAIL" });
    finish(ok)
}
