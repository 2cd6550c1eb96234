//! The sysbench engine and the scenarios on it: `sysbench`, `wakeone`, `affinity`, `nice`; the
//! spread tracking behind the host hooks `on_switch` and `on_tick`.

use portable_atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicU8,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

use super::{
    check_invariants, count_primes, finish, mix, ncpus, record_latency, report_cpus, report_latency,
    since_t0, ThreadKind, EXIT_FAILED, MAX_EVENTS, MAX_SPINNERS, NICE_MARGIN_PCT, SB_BARRIER, SB_CREATE_NS,
    SB_SEED, SB_SETUP_NS, T0,
};
use crate::arch::{self, MAX_CPUS};
use crate::kprintln;
use crate::sched;

static SB_THREADS: AtomicU32 = AtomicU32::new(0);
static SB_EVENTS: AtomicU32 = AtomicU32::new(0);
static SB_MAXPRIME: AtomicU32 = AtomicU32::new(0);

/// Unit of the seed's thread start offsets.
const START_OFFSET_UNIT_NS: u64 = 16_000;
/// A small piece of work (about 1 µs) for the start offsets' busy wait.
const START_OFFSET_PRIMES: u32 = 60;

static SB_PRIMES: AtomicU32 = AtomicU32::new(0);
static NEXT_EVENT: AtomicU32 = AtomicU32::new(0);
static SB_SLOTS: [AtomicU32; MAX_SPINNERS as usize] =
    [const { AtomicU32::new(u32::MAX) }; MAX_SPINNERS as usize];
static SB_SLOTS_READY: AtomicBool = AtomicBool::new(false);
static SB_ARRIVED: AtomicU32 = AtomicU32::new(0);
static SB_OPEN: AtomicBool = AtomicBool::new(false);

/// The main thread's slot, so the barrier can wake it.
static SB_MAIN_SLOT: AtomicU32 = AtomicU32::new(u32::MAX);

/// The start barrier: the workers and the main thread wait at it, as in sysbench (whose
/// start barrier counts the workers plus the main thread); the last to arrive wakes the
/// others. The main thread arrives after creating every worker, so the slots are known.
fn start_barrier() {
    let parties = SB_THREADS.load(Relaxed) + 1;
    if SB_ARRIVED.fetch_add(1, AcqRel) + 1 == parties {
        while !SB_SLOTS_READY.load(Acquire) {
            arch::relax();
        }
        if mode() == Mode::Nice {
            NICE_START_AT.store(since_t0(), Relaxed);
            snapshot_cpu_times(&NICE_START);
        }
        SB_OPEN.store(true, Release);
        let main = SB_MAIN_SLOT.load(Relaxed);
        for s in SB_SLOTS.iter().take(parties as usize - 1).map(|s| s.load(Relaxed)).chain([main]) {
            arch::sys_unpark(s as usize);
        }
    } else {
        while !SB_OPEN.load(Acquire) {
            arch::sys_park();
        }
    }
}
static EVENT_DONE: [AtomicU8; MAX_EVENTS as usize] = [const { AtomicU8::new(0) }; MAX_EVENTS as usize];
static THREAD_EVENTS: [AtomicU32; MAX_SPINNERS as usize] =
    [const { AtomicU32::new(0) }; MAX_SPINNERS as usize];
static THREAD_END: [AtomicU64; MAX_SPINNERS as usize] = [const { AtomicU64::new(0) }; MAX_SPINNERS as usize];
static BAD_RESULTS: AtomicU32 = AtomicU32::new(0);
static FINISHED: AtomicU32 = AtomicU32::new(0);
/// Runqueue lengths when half the events were taken.
static HALF_NR: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
static ACTIVE: AtomicBool = AtomicBool::new(false);
static FIRST_SPINNER: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static RUNS_SPINNER: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// The spread instant and the one-per-CPU instant (ns after the first spinner's creation; 0:
/// not yet), and the migrations before the spread (docs/seed-experiment.md defines both).
static SPREAD: AtomicU64 = AtomicU64::new(0);
static ONE_PER_CPU: AtomicU64 = AtomicU64::new(0);
static SPREAD_MIGRATIONS: AtomicU64 = AtomicU64::new(0);
static MIGRATIONS_AT_T0: AtomicU64 = AtomicU64::new(0);

/// The scenarios built on the sysbench workers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Sysbench = 0,
    Wakeone = 1,
    Affinity = 2,
    Nice = 3,
}

static MODE: AtomicU8 = AtomicU8::new(0);

fn mode() -> Mode {
    match MODE.load(Relaxed) {
        1 => Mode::Wakeone,
        2 => Mode::Affinity,
        3 => Mode::Nice,
        _ => Mode::Sysbench,
    }
}

fn tag() -> &'static str {
    match mode() {
        Mode::Sysbench => "sysbench",
        Mode::Wakeone => "wakeone",
        Mode::Affinity => "affinity",
        Mode::Nice => "nice",
    }
}

/// `scenario=affinity`: its pinned spinners, (CPU, count).
pub(super) const AFF_PINNED: [(usize, u32); 2] = [(1, 4), (6, 2)];
static NICE_LEVEL: AtomicU32 = AtomicU32::new(0);
static NICE_CPU: AtomicU32 = AtomicU32::new(0);
/// Each thread's CPU time when the first thread found the events used up (the end of the
/// window in which all threads compete).
static END_CPU: [AtomicU64; MAX_SPINNERS as usize] = [const { AtomicU64::new(0) }; MAX_SPINNERS as usize];
static END_SNAPPED: AtomicBool = AtomicBool::new(false);
/// Each thread's CPU time when half the events were taken (start of the steady-state
/// window, which ends at the `END_CPU` snapshot).
static HALF_CPU: [AtomicU64; MAX_SPINNERS as usize] = [const { AtomicU64::new(0) }; MAX_SPINNERS as usize];
static HALF_AT: AtomicU64 = AtomicU64::new(0);
/// Each thread's CPU time when the start barrier opened (the start of the window).
static NICE_START: [AtomicU64; MAX_SPINNERS as usize] = [const { AtomicU64::new(0) }; MAX_SPINNERS as usize];
static NICE_START_AT: AtomicU64 = AtomicU64::new(0);

/// Each worker's CPU time now, into `into`.
fn snapshot_cpu_times(into: &[AtomicU64]) {
    for (t, snap) in into.iter().enumerate().take(SB_THREADS.load(Relaxed) as usize) {
        snap.store(sched::thread_cpu_ns_now(SB_SLOTS[t].load(Relaxed) as usize), Relaxed);
    }
}
static END_AT: AtomicU64 = AtomicU64::new(0);
/// Spinners that take part in the spread measurement (the free ones).
static SB_FREE: AtomicU32 = AtomicU32::new(0);
/// CPUs that ran any scenario thread (not the main thread), and when first (ns after T0).
static FIRST_ANY: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

fn all_cpus() -> u64 {
    // (A shift by 64, the wide build's 64 CPUs, would leave no bit.)
    u64::MAX >> (64 - ncpus().clamp(1, 64))
}

/// Spawns worker `i` (the sysbench worker loop) and records its slot.
fn spawn_worker(i: u32, kind: ThreadKind, nice: i32, affinity: u64) {
    let slot = arch::sys_spawn(kind.number(), i as usize, nice, affinity);
    if slot < 0 {
        defmt::error!("{}: FAIL cannot create thread {}", tag(), i);
        arch::exit(EXIT_FAILED);
    }
    // (`Scenario::threads`, checked at the start, keeps the workers within the table.)
    let Some(record) = SB_SLOTS.get(i as usize) else {
        defmt::error!("{}: FAIL thread {} has no slot record", tag(), i);
        arch::exit(EXIT_FAILED);
    };
    record.store(slot as u32, Relaxed);
}

pub(super) fn bench_main(mode: Mode, threads: u32, events: u32, maxprime: u32, nice: u32) {
    MODE.store(mode as u8, Relaxed);
    let n = ncpus();
    let total = match mode {
        Mode::Affinity => threads + AFF_PINNED.iter().map(|p| p.1).sum::<u32>(),
        _ => threads,
    };
    SB_THREADS.store(total, Relaxed);
    SB_FREE.store(if mode == Mode::Nice { 0 } else { threads }, Relaxed);
    SB_EVENTS.store(events, Relaxed);
    SB_MAXPRIME.store(maxprime, Relaxed);
    SB_PRIMES.store(count_primes(maxprime), Relaxed);
    if mode == Mode::Wakeone {
        // No start barrier: its wakeups would spread the threads by wakeup placement.
        SB_BARRIER.store(false, Relaxed);
    }
    kprintln!(
        "{}: {} threads, {} events, maxprime {} ({} primes per event), {} CPUs, hz={}, features {}",
        tag(),
        total,
        events,
        maxprime,
        SB_PRIMES.load(Relaxed),
        ncpus(),
        sched::hz(),
        defmt::Debug2Format(&sched::with_core(|k| k.features()))
    );
    MIGRATIONS_AT_T0.store(sched::totals().migrations, Relaxed);
    T0.store(arch::now_ns(), Release);
    ACTIVE.store(true, Release);
    match mode {
        Mode::Sysbench => (0..threads).for_each(|i| {
            busy_for(SB_CREATE_NS.load(Relaxed));
            spawn_worker(i, ThreadKind::Spinner, 0, u64::MAX)
        }),
        Mode::Wakeone => {
            kprintln!("wakeone: creating the threads pinned to CPU 0, then widening them to all CPUs");
            (0..threads).for_each(|i| spawn_worker(i, ThreadKind::Spinner, 0, 1));
            for i in 0..threads {
                let slot = SB_SLOTS[i as usize].load(Relaxed) as usize;
                if !arch::sys_set_affinity(slot, all_cpus()) {
                    defmt::error!("wakeone: FAIL set_affinity of thread {} refused", i);
                    arch::exit(EXIT_FAILED);
                }
            }
            kprintln!("wakeone: all {} threads widened at {} us", threads, since_t0() / 1000);
        }
        Mode::Affinity => {
            (0..threads).for_each(|i| spawn_worker(i, ThreadKind::Spinner, 0, u64::MAX));
            let mut i = threads;
            for &(cpu, count) in AFF_PINNED.iter() {
                let cpu = cpu.min(n - 1);
                kprintln!("affinity: {} threads pinned to CPU {}", count, cpu);
                for _ in 0..count {
                    spawn_worker(i, ThreadKind::Pinned, 0, 1 << cpu);
                    i += 1;
                }
            }
        }
        Mode::Nice => {
            let cpu = n - 1;
            NICE_LEVEL.store(nice, Relaxed);
            NICE_CPU.store(cpu as u32, Relaxed);
            let half = threads / 2;
            kprintln!(
                "nice: {} threads at nice 0 and {} at nice {}, all pinned to CPU {}",
                half,
                threads - half,
                nice,
                cpu
            );
            for i in 0..threads {
                spawn_worker(i, ThreadKind::Spinner, if i < half { 0 } else { nice as i32 }, 1 << cpu);
            }
        }
    }
    SB_SLOTS_READY.store(true, Release);
    if SB_BARRIER.load(Relaxed) {
        // Like sysbench's main thread: wait at the start barrier too, then join.
        SB_MAIN_SLOT.store(sched::current_thread().map_or(u32::MAX, |s| s as u32), Relaxed);
        start_barrier();
    }
    // Like sysbench's main thread: wait for every worker, then report.
    let threads = SB_THREADS.load(Relaxed) as usize;
    let slots = SB_SLOTS.iter().take(threads).fold(0u64, |m, s| m | 1u64 << (s.load(Relaxed) as u64 & 63));
    sched::wait_threads(slots);
    if FINISHED.load(Acquire) as usize != threads {
        defmt::error!(
            "{}: FAIL the main thread woke with {} of {} workers finished",
            tag(),
            FINISHED.load(Acquire),
            threads
        );
        arch::exit(EXIT_FAILED);
    }
    sysbench_report();
}

/// The half-way runqueue lengths as plain numbers for logging.
fn half_nr_snapshot(h: &[AtomicU32; MAX_CPUS], n: usize) -> [u32; MAX_CPUS] {
    let mut out = [0u32; MAX_CPUS];
    for (o, v) in out.iter_mut().zip(h.iter()).take(n) {
        *o = v.load(Relaxed);
    }
    out
}

/// Busy work for `ns` of guest time (counted on the clock, so the same in both QEMU modes).
fn busy_for(ns: u64) {
    let until = arch::now_ns() + ns;
    while arch::now_ns() < until {
        core::hint::black_box(count_primes(START_OFFSET_PRIMES));
    }
}

pub(super) fn spinner(i: usize) {
    let events = SB_EVENTS.load(Relaxed);
    let maxprime = SB_MAXPRIME.load(Relaxed);
    let primes = SB_PRIMES.load(Relaxed);
    let seed = SB_SEED.load(Relaxed);
    let setup = SB_SETUP_NS.load(Relaxed);
    if setup != u64::MAX {
        // A set-up of fixed length (`setup_us=`), as the simulator's workers have.
        busy_for(setup);
    } else if seed != 0 {
        // Start offset: 0..7 × 16 µs of work before the thread reaches the barrier, as
        // real threads start at different times (a Linux thread's clone-to-run latency is
        // tens of µs). Busy, not asleep, so it is the same in both QEMU modes.
        busy_for(mix(seed as u64 ^ (i as u64) << 32) % 8 * START_OFFSET_UNIT_NS);
    }
    if SB_BARRIER.load(Relaxed) {
        start_barrier();
    }
    loop {
        let e = NEXT_EVENT.fetch_add(1, Relaxed);
        if e >= events {
            break;
        }
        if e == events / 2 {
            // Steady state: every thread is busy; how evenly are they spread?
            for (c, h) in HALF_NR.iter().enumerate().take(ncpus()) {
                h.store(sched::nr_running(c), Relaxed);
            }
            HALF_AT.store(since_t0(), Relaxed);
            snapshot_cpu_times(&HALF_CPU);
        }
        let t = arch::now_ns();
        if count_primes(maxprime) != primes {
            BAD_RESULTS.fetch_add(1, Relaxed);
        }
        let lat = arch::now_ns() - t;
        EVENT_DONE[e as usize].fetch_add(1, Relaxed);
        THREAD_EVENTS[i].fetch_add(1, Relaxed);
        record_latency(lat);
    }
    if !END_SNAPPED.swap(true, AcqRel) {
        END_AT.store(since_t0(), Relaxed);
        snapshot_cpu_times(&END_CPU);
    }
    THREAD_END[i].store(arch::now_ns() - T0.load(Relaxed), Relaxed);
    FINISHED.fetch_add(1, AcqRel);
}

fn sysbench_report() -> ! {
    let tag = tag();
    let n = ncpus();
    let threads = SB_THREADS.load(Relaxed) as usize;
    let events = SB_EVENTS.load(Relaxed);
    let total = arch::now_ns() - T0.load(Relaxed);
    let mut ok = true;
    let (mut missing, mut duplicated) = (0u32, 0u32);
    for d in EVENT_DONE.iter().take(events as usize) {
        match d.load(Relaxed) {
            0 => missing += 1,
            1 => {}
            _ => duplicated += 1,
        }
    }
    let extra = EVENT_DONE.iter().skip(events as usize).filter(|d| d.load(Relaxed) != 0).count();
    let sum: u32 = THREAD_EVENTS.iter().take(threads).map(|t| t.load(Relaxed)).sum();
    let bad = BAD_RESULTS.load(Relaxed);
    if missing != 0 || duplicated != 0 || extra != 0 || sum != events || bad != 0 {
        ok = false;
    }
    ok &= check_invariants(tag);
    kprintln!("{}: total time {} us for {} events", tag, total / 1000, events);
    report_latency(tag, "event", events);
    for i in 0..threads {
        let slot = SB_SLOTS[i].load(Relaxed) as usize;
        kprintln!(
            "{}: thread {} did {} events, cpu time {} us, ran on CPUs {=u64:#010b}, finished at {} us",
            tag,
            i,
            THREAD_EVENTS[i].load(Relaxed),
            sched::thread_cpu_ns(slot) / 1000,
            sched::thread_ran_on(slot),
            THREAD_END[i].load(Relaxed) / 1000
        );
    }
    // Fair shares: CPU time per thread over the run, and runqueue lengths at half-way.
    let (mut lo, mut hi, mut sum_ns) = (u64::MAX, 0u64, 0u64);
    for slot in SB_SLOTS.iter().take(threads) {
        let c = sched::thread_cpu_ns(slot.load(Relaxed) as usize);
        lo = lo.min(c);
        hi = hi.max(c);
        sum_ns += c;
    }
    kprintln!(
        "{}: cpu time per thread min {} us max {} us mean {} us, max/min x1000 = {}",
        tag,
        lo / 1000,
        hi / 1000,
        sum_ns / threads.max(1) as u64 / 1000,
        hi * 1000 / lo.max(1)
    );
    // The same at steady state: from half-way until the first thread ran out of events,
    // after the start-up transient (fork placement, first balance passes).
    let (mut slo, mut shi) = (u64::MAX, 0u64);
    for (end, half) in END_CPU.iter().zip(HALF_CPU.iter()).take(threads) {
        let c = end.load(Relaxed).saturating_sub(half.load(Relaxed));
        slo = slo.min(c);
        shi = shi.max(c);
    }
    kprintln!(
        "{}: steady state ({} us to {} us): cpu time per thread min {} us max {} us, steady max/min x1000 = {}",
        tag,
        HALF_AT.load(Relaxed) / 1000,
        END_AT.load(Relaxed) / 1000,
        slo / 1000,
        shi / 1000,
        shi * 1000 / slo.max(1)
    );
    let (mut qlo, mut qhi) = (u32::MAX, 0u32);
    for h in HALF_NR.iter().take(n) {
        let v = h.load(Relaxed);
        qlo = qlo.min(v);
        qhi = qhi.max(v);
    }
    kprintln!(
        "{}: runqueue lengths at half-way {=[?]}, max-min = {}",
        tag,
        &half_nr_snapshot(&HALF_NR, n)[..n],
        qhi - qlo
    );
    kprintln!(
        "{}: exactly-once check: {} events, {} missing, {} done twice or more, {} beyond the range, thread sum {}, wrong results {} -> {}",
        tag,
        events,
        missing,
        duplicated,
        extra,
        sum,
        bad,
        if ok { "OK" } else { "FAIL" }
    );
    match mode() {
        Mode::Affinity => ok &= affinity_check(n),
        Mode::Nice => ok &= nice_check(threads),
        Mode::Sysbench | Mode::Wakeone => {}
    }
    let threads = SB_FREE.load(Relaxed) as usize;
    if threads != 0 {
        report_spread(tag, threads, n);
    }
    report_cpus(tag, n);
    kprintln!("{}: {}", tag, if ok { "OK" } else { "FAIL" });
    finish(ok)
}

/// `scenario=affinity`: no thread ever switched in outside its affinity (the check), and when
/// each CPU first ran a scenario thread (a figure: how soon work reaches every CPU depends on
/// the run's timing, which the runner's deterministic cases judge).
fn affinity_check(n: usize) -> bool {
    let totals = sched::totals();
    let v = totals.affinity_violations;
    let ok = v == 0;
    match totals.first_violation {
        None => kprintln!("affinity: no thread ran outside its affinity (checked on every switch-in)"),
        Some((thread, cpu)) => defmt::error!(
            "affinity: FAIL {} switch-ins outside the affinity, the first: thread slot {} on CPU {}",
            v,
            thread,
            cpu
        ),
    }
    for (c, f) in FIRST_ANY.iter().enumerate().take(n) {
        let f = f.load(Relaxed);
        if f == 0 {
            kprintln!("affinity: cpu {} never ran a scenario thread", c);
        } else {
            kprintln!("affinity: cpu {} first ran a scenario thread at {} us", c, f / 1000);
        }
    }
    ok
}

/// `scenario=nice`: CPU time per group against the weight ratio.
fn nice_check(threads: usize) -> bool {
    let nice = NICE_LEVEL.load(Relaxed) as usize;
    let half = threads / 2;
    let cpu_of = |i: usize| END_CPU[i].load(Relaxed).saturating_sub(NICE_START[i].load(Relaxed));
    let g0: u64 = (0..half).map(cpu_of).sum::<u64>() / half as u64;
    let g1: u64 = (half..threads).map(cpu_of).sum::<u64>() / (threads - half) as u64;
    for i in 0..threads {
        kprintln!(
            "nice: thread {} (nice {}) CPU time {} us from the barrier until the events ran out",
            i,
            if i < half { 0 } else { nice },
            cpu_of(i) / 1000
        );
    }
    let w = sched_core::weights::PRIO_TO_WEIGHT[20 + nice] as u64;
    // Ratios ×1000.
    let expected = 1024 * 1000 / w;
    let measured = g0 * 1000 / g1.max(1);
    let dev = measured.abs_diff(expected) * 100 / expected;
    let ok = dev <= NICE_MARGIN_PCT;
    kprintln!(
        "nice: CPU {}, window of competition {}..{} us: mean CPU time per thread: nice 0 {} us, nice {} {} us",
        NICE_CPU.load(Relaxed),
        NICE_START_AT.load(Relaxed) / 1000,
        END_AT.load(Relaxed) / 1000,
        g0 / 1000,
        nice,
        g1 / 1000
    );
    kprintln!(
        "nice: CPU-time ratio nice 0 / nice {} = {}.{=u64:03}, expected 1024/{} = {}.{=u64:03}, off by {} % (margin {} %) -> {}",
        nice,
        measured / 1000,
        measured % 1000,
        w,
        expected / 1000,
        expected % 1000,
        dev,
        NICE_MARGIN_PCT,
        if ok { "OK" } else { "FAIL" }
    );
    ok
}

/// The program scenario's pool takers are the spinners from now on: `workers` of them will
/// be created, the first now (the spread and one-per-CPU instants count from here).
#[cfg(not(target_arch = "arm"))]
pub(super) fn track_workers(workers: u32) {
    SB_FREE.store(workers, Relaxed);
    MIGRATIONS_AT_T0.store(sched::totals().migrations, Relaxed);
    T0.store(arch::now_ns(), Release);
    ACTIVE.store(true, Release);
}

/// The spread lines of `threads` spinners on `n` CPUs, with `tag` (docs/seed-experiment.md
/// defines the instants).
pub(super) fn report_spread(tag: &str, threads: usize, n: usize) {
    let want = threads.min(n);
    match SPREAD.load(Acquire) {
        0 => kprintln!("{}: spread never reached ({} CPUs each running a spinner)", tag, want),
        s => kprintln!(
            "{}: spread time {} us (first spinner created -> {} CPUs each running a spinner), {} migrations before it",
            tag,
            s / 1000,
            want,
            SPREAD_MIGRATIONS.load(Relaxed)
        ),
    }
    // With more spinners than CPUs no CPU can run one alone: the two instants are one.
    if threads <= n {
        match ONE_PER_CPU.load(Acquire) {
            0 => kprintln!("{}: one-per-CPU never reached ({} CPUs each running a spinner alone)", tag, want),
            s => kprintln!(
                "{}: one-per-CPU time {} us (first spinner created -> {} CPUs each running a spinner alone on its runqueue)",
                tag,
                s / 1000,
                want
            ),
        }
    }
    for (c, f) in FIRST_SPINNER.iter().enumerate().take(n) {
        let f = f.load(Relaxed);
        kprintln!("{}: cpu {} first spinner at {} us", tag, c, if f == 0 { -1 } else { (f / 1000) as i64 });
    }
}

/// Records the spread instant (the first at which min(spinners, CPUs) CPUs each run a
/// spinner) and the one-per-CPU instant (each of them alone on its runqueue).
fn check_spread(now: u64) {
    let threads = SB_FREE.load(Relaxed);
    if threads == 0 || ONE_PER_CPU.load(Relaxed) != 0 {
        return;
    }
    let n = ncpus();
    let want = (threads as usize).min(n);
    let at = now.saturating_sub(T0.load(Relaxed)).max(1);
    // CPUs running a spinner, and of them those running it alone (every one of them with
    // more spinners than CPUs, where none can be alone: the two instants are one).
    let (mut running, mut alone) = (0, 0);
    for c in (0..n).filter(|&c| RUNS_SPINNER[c].load(Relaxed)) {
        running += 1;
        alone += usize::from(threads as usize > n || sched::nr_running(c) == 1);
    }
    if SPREAD.load(Relaxed) == 0 && running >= want && SPREAD.compare_exchange(0, at, AcqRel, Relaxed).is_ok()
    {
        let m = sched::totals().migrations - MIGRATIONS_AT_T0.load(Relaxed);
        SPREAD_MIGRATIONS.store(m, Relaxed);
    }
    if alone >= want {
        let _ = ONE_PER_CPU.compare_exchange(0, at, AcqRel, Relaxed);
    }
}

/// After every switch on `cpu` (handler context).
pub fn on_switch(cpu: usize, now: u64, kind: Option<usize>) {
    if !ACTIVE.load(Acquire) {
        return;
    }
    let kind = kind.and_then(ThreadKind::from_number);
    let spinner = matches!(kind, Some(ThreadKind::Spinner | ThreadKind::ProgramWorker));
    RUNS_SPINNER[cpu].store(spinner, Relaxed);
    if kind.is_some_and(|k| k != ThreadKind::Main) && FIRST_ANY[cpu].load(Relaxed) == 0 {
        FIRST_ANY[cpu].store(now.saturating_sub(T0.load(Relaxed)).max(1), Relaxed);
    }
    if spinner && FIRST_SPINNER[cpu].load(Relaxed) == 0 {
        FIRST_SPINNER[cpu].store(now.saturating_sub(T0.load(Relaxed)).max(1), Relaxed);
    }
    check_spread(now);
}

/// On every tick of `cpu` (handler context).
pub fn on_tick(cpu: usize, now: u64) {
    let _ = cpu;
    if ACTIVE.load(Acquire) {
        check_spread(now);
    }
}
