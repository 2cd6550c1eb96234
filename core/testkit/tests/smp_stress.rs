//! Concurrency stress: one OS thread per CPU doing real concurrent ticks, schedules,
//! blocks, wakeups, exits, creations, nice and affinity changes and execs, with the load
//! balancer and the active-balance stopper migrating tasks underneath, on 8 and 64 CPUs for a
//! bounded time. Afterwards every invariant must hold: no task lost, duplicated or on two
//! runqueues, and the books balance. A watchdog turns a deadlock into a failure.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use sched_core::{CpuMask, Features, Smp, TaskId, TaskParams, TaskState};
use sched_testkit::Recorder;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A random task of those ever created (it may have exited: callers tolerate refusals).
fn any_task(all: &Mutex<Vec<TaskId>>, rng: &mut Rng) -> Option<TaskId> {
    let a = all.lock().unwrap();
    (!a.is_empty()).then(|| a[rng.below(a.len() as u64) as usize])
}

#[derive(Default)]
struct Books {
    created: AtomicU64,
    exited: AtomicU64,
    ops: AtomicU64,
    /// What each CPU runs (raw task id + 1, 0 = idle), updated between `schedule` and
    /// `finish_switch`, i.e. before the previous task's context counts as saved.
    running: Vec<AtomicU64>,
    double_runs: AtomicU64,
}

fn stress<const CPUS: usize>(
    run_for: Duration,
    setup: fn(&mut sched_core::Topology<CPUS>) -> Result<(), sched_core::TopologyError>,
) {
    let m: Arc<Smp<Recorder, CPUS, 1024, 64>> =
        Arc::new(Smp::new(Recorder::quiet(CPUS), Features::default(), 1000));
    m.init_with(setup).unwrap();
    let books =
        Arc::new(Books { running: (0..CPUS).map(|_| AtomicU64::new(0)).collect(), ..Books::default() });
    let blocked: Arc<Mutex<Vec<TaskId>>> = Arc::new(Mutex::new(Vec::new()));
    let all: Arc<Mutex<Vec<TaskId>>> = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let (done_tx, done_rx) = mpsc::channel();
    for cpu in 0..CPUS {
        let (m, books, blocked, all, done_tx) =
            (m.clone(), books.clone(), blocked.clone(), all.clone(), done_tx.clone());
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((cpu as u64 + 1) * 0x1234_5678));
                let now = || start.elapsed().as_nanos() as u64 + 1_000_000_000;
                while start.elapsed() < run_for {
                    books.ops.fetch_add(1, Relaxed);
                    let kicked = m.platform().take_resched(cpu);
                    m.tick(cpu, now()).unwrap();
                    if kicked || m.need_resched(cpu) || m.current(cpu).is_none() {
                        let next = m.schedule(cpu, now()).unwrap();
                        let raw = next.map_or(0, |t| t.to_raw() + 1);
                        books.running[cpu].store(raw, Relaxed);
                        // A task may be resumed by one CPU only: no other CPU may still
                        // be running it (it would still be there: we only clear our slot
                        // before our own finish_switch).
                        if raw != 0 && (0..CPUS).any(|c| c != cpu && books.running[c].load(Relaxed) == raw) {
                            books.double_runs.fetch_add(1, Relaxed);
                        }
                        m.finish_switch(cpu, now()).unwrap();
                    }
                    let cur = m.current(cpu);
                    match rng.below(100) {
                        0..=14 => {
                            if let Some(t) = cur {
                                if m.block(cpu, now(), t).is_ok() {
                                    blocked.lock().unwrap().push(t);
                                }
                            }
                        }
                        15..=39 => {
                            let t = {
                                let mut b = blocked.lock().unwrap();
                                if b.is_empty() {
                                    None
                                } else {
                                    let i = rng.below(b.len() as u64) as usize;
                                    Some(b.swap_remove(i))
                                }
                            };
                            if let Some(t) = t {
                                // A refusal (not yet switched out, or exited) is fine.
                                let _ = m.wake(cpu, now(), t);
                            }
                        }
                        40..=44 => {
                            if let Some(t) = cur {
                                if m.exit(now(), t).is_ok() {
                                    books.exited.fetch_add(1, Relaxed);
                                }
                            }
                        }
                        45..=59 => {
                            // Another CPU may count an exit before its creator counts the creation.
                            let live = books.created.load(Relaxed).saturating_sub(books.exited.load(Relaxed));
                            if live < 6 * CPUS as u64 {
                                let affinity = if rng.below(4) == 0 {
                                    CpuMask::single(rng.below(CPUS as u64) as usize)
                                } else {
                                    CpuMask::ALL
                                };
                                let nice = rng.below(10) as i32 - 5;
                                if let Ok(t) = m.create(
                                    cpu,
                                    now(),
                                    TaskParams { nice, affinity, ..TaskParams::default() },
                                ) {
                                    books.created.fetch_add(1, Relaxed);
                                    all.lock().unwrap().push(t);
                                }
                            }
                        }
                        60..=64 => {
                            let t = any_task(&all, &mut rng);
                            if let Some(t) = t {
                                let _ = m.set_nice(now(), t, rng.below(40) as i32 - 20);
                            }
                        }
                        65..=69 => {
                            let t = any_task(&all, &mut rng);
                            if let Some(t) = t {
                                let lo = rng.below(CPUS as u64) as usize;
                                let mask = CpuMask::range(lo, lo + 1 + rng.below(4) as usize);
                                let _ = m.set_affinity(now(), t, mask);
                            }
                        }
                        70..=74 => m.yield_now(cpu, now()).unwrap(),
                        // Exec balancing races the affinity changes above for the same
                        // running tasks: neither may leave one outside its mask.
                        75..=77 => {
                            if let Some(t) = cur {
                                let _ = m.exec(cpu, now(), t);
                            }
                        }
                        _ => {}
                    }
                }
                let _ = done_tx.send(cpu);
            })
            .unwrap();
    }
    drop(done_tx);
    // Watchdog: every CPU thread must finish shortly after the deadline.
    let deadline = Instant::now() + run_for + Duration::from_secs(60);
    let mut finished = 0;
    while finished < CPUS {
        let left = deadline.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(left) {
            Ok(_) => finished += 1,
            Err(_) => panic!(
                "watchdog: {} of {CPUS} CPU threads still running — deadlock or livelock",
                CPUS - finished
            ),
        }
    }
    m.check_invariants().unwrap();
    let created = books.created.load(Relaxed);
    let exited = books.exited.load(Relaxed);
    // Tasks that exited while current leave at their CPU's next switch; finish those.
    let later = start.elapsed().as_nanos() as u64 + 10_000_000_000;
    for cpu in 0..CPUS {
        m.schedule(cpu, later).unwrap();
        m.finish_switch(cpu, later).unwrap();
    }
    m.check_invariants().unwrap();
    assert_eq!(m.nr_tasks() as u64, created - exited, "tasks lost or duplicated");
    let all = all.lock().unwrap();
    let live = all.iter().filter(|&&t| m.state(t).is_ok()).count() as u64;
    assert_eq!(live, created - exited);
    for &t in all.iter() {
        if let Ok(st) = m.state(t) {
            assert!(matches!(st, TaskState::Runnable | TaskState::Running | TaskState::Blocked));
        }
    }
    let ops = books.ops.load(Relaxed);
    let migrations = m.platform().migration_count();
    eprintln!("{CPUS} CPUs: {ops} rounds, {created} created, {exited} exited, {migrations} migrations");
    assert!(created > CPUS as u64 && ops > 1000, "the stress did real work");
    assert_eq!(books.double_runs.load(Relaxed), 0, "a task was resumed on two CPUs at once");
    assert!(migrations > 0, "the balancer moved tasks");
}

/// The machine is built on the stack before it moves into its Arc (several MB in debug
/// builds), so run on a thread with room for that.
fn on_big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new().stack_size(512 << 20).spawn(f).unwrap().join().unwrap();
}

/// How long each stress runs: 1.5 s, or `STRESS_SECS` seconds for a long hunt.
fn run_for() -> Duration {
    let secs = std::env::var("STRESS_SECS").ok().and_then(|s| s.parse::<f64>().ok());
    secs.map_or(Duration::from_millis(1500), Duration::from_secs_f64)
}

#[test]
fn concurrent_8_cpus() {
    on_big_stack(|| stress::<8>(run_for(), |t| t.init_clusters(2, 4)));
}

#[test]
fn concurrent_64_cpus() {
    on_big_stack(|| stress::<64>(run_for(), |t| t.init_clusters(8, 8)));
}
