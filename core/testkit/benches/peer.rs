//! sched-core's fair class beside a peer, ArceOS's `axsched` 0.3.1 `CFScheduler` (a `BTreeMap`
//! keyed by (vruntime, id), vruntime counted in ticks), through the same operations at 16, 256
//! and 1024 queued tasks in one run, then a table of the ratios (axsched's time over
//! sched-core's, criterion's medians of this run; above 1: sched-core is faster).
//!
//! - enqueue+dequeue: sched-core's dequeue(SAVE) + enqueue(RESTORE) of the median queued task;
//!   axsched's remove_task + add_task (the pairing; add_task re-keys the task at
//!   min_vruntime), and remove_task + put_prev_task (which keeps its vruntime, as the core's
//!   pair does).
//! - switch: sched-core's put_prev + pick + set_next; axsched's put_prev_task + pick_next_task.
//! - tick: sched-core's clock, runtime, PELT and preemption check; axsched's counts a tick and
//!   compares with min_vruntime, what a counter-only tick costs.
//!
//! Group names: `peer_<operation>/<scheduler>/<queued>`. `cargo xreport --timings` runs this
//! five times in one loop and tables the median ratios (docs/performance.md).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axsched::{BaseScheduler, CFSTask, CFScheduler};
use criterion::{BenchmarkId, Criterion};
use sched_core::{DequeueFlags, EnqueueFlags, Features};
use sched_testkit::hotpath::{loaded_rq, median_slot, switch, tick};

const SIZES: [usize; 3] = [16, 256, 1024];

type Task = Arc<CFSTask<usize>>;
type Sched = CFScheduler<usize>;

/// The `fair` bench's nice levels: -3..=3 by task number.
fn nice(i: usize) -> isize {
    (i % 7) as isize - 3
}

/// `n` tasks queued plus one running (returned), aged by 100 ticks with a switch whenever
/// `task_tick` asks for one, as the `fair` bench's `loaded_rq`.
fn loaded(n: usize) -> (Sched, Task) {
    let mut s = Sched::new();
    s.init();
    for i in 0..=n {
        let t = Arc::new(CFSTask::new(i));
        // Before add_task: set_priority does not re-key a queued task.
        assert!(s.set_priority(&t, nice(i)));
        s.add_task(t);
    }
    let mut cur = s.pick_next_task().expect("n + 1 tasks were added");
    for _ in 0..100 {
        if s.task_tick(&cur) {
            s.put_prev_task(cur, false);
            cur = s.pick_next_task().expect("at least the previous task is queued");
        }
    }
    (s, cur)
}

/// The queued task in the middle of the (vruntime, id) order. The queue is drained and refilled
/// in the same order (put_prev_task keeps vruntimes; fresh ids keep the order). While the task is
/// out, set_priority with its own nice folds its tick count into its vruntime (same value), so
/// that add_task files it under the key remove_task looks up: add_task resets the base vruntime
/// but not the tick count.
fn median(s: &mut Sched, n: usize) -> Task {
    let order: Vec<Task> = std::iter::from_fn(|| s.pick_next_task()).collect();
    assert_eq!(order.len(), n);
    let m = Arc::clone(&order[n / 2]);
    assert!(s.set_priority(&m, nice(*m.inner())));
    for t in order {
        s.put_prev_task(t, false);
    }
    m
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("peer_enqueue_dequeue");
    for n in SIZES {
        let s = loaded_rq(n, Features::default());
        s.with_fair(|rq| {
            let slot = median_slot(rq);
            g.bench_with_input(BenchmarkId::new("sched-core", n), &n, |b, _| {
                b.iter(|| {
                    rq.dequeue(black_box(slot), DequeueFlags::SAVE);
                    rq.enqueue(black_box(slot), EnqueueFlags::RESTORE);
                })
            });
        });
        // remove + add_task: add_task places at min_vruntime, so after the first round the
        // task sits at the left of the tree (every B-tree leaf has the same depth).
        let (mut s, _running) = loaded(n);
        let m = median(&mut s, n);
        g.bench_with_input(BenchmarkId::new("axsched", n), &n, |b, _| {
            b.iter(|| {
                let t = s.remove_task(black_box(&m)).expect("the median task is queued");
                s.add_task(t);
            })
        });
        // remove + put_prev_task: the vruntime is kept, so the task stays the median.
        let (mut s, _running) = loaded(n);
        let m = median(&mut s, n);
        g.bench_with_input(BenchmarkId::new("axsched-keep", n), &n, |b, _| {
            b.iter(|| {
                let t = s.remove_task(black_box(&m)).expect("the median task is queued");
                s.put_prev_task(t, false);
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("peer_switch");
    for n in SIZES {
        let s = loaded_rq(n, Features::default());
        s.with_fair(|rq| {
            g.bench_with_input(BenchmarkId::new("sched-core", n), &n, |b, _| {
                b.iter(|| black_box(switch(rq)))
            });
        });
        // The running task back in, the leftmost out (insert + pop_first).
        let (mut s, running) = loaded(n);
        let mut cur = Some(running);
        g.bench_with_input(BenchmarkId::new("axsched", n), &n, |b, _| {
            b.iter(|| {
                s.put_prev_task(cur.take().expect("one task runs"), false);
                cur = s.pick_next_task();
                black_box(cur.is_some())
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("peer_tick");
    for n in SIZES {
        let s = loaded_rq(n, Features::default());
        s.with_fair(|rq| {
            let mut now = rq.clock();
            g.bench_with_input(BenchmarkId::new("sched-core", n), &n, |b, _| {
                b.iter(|| black_box(tick(rq, &mut now)))
            });
        });
        // One more tick counted on the running task and the comparison with min_vruntime.
        let (mut s, cur) = loaded(n);
        g.bench_with_input(BenchmarkId::new("axsched", n), &n, |b, _| {
            b.iter(|| black_box(s.task_tick(black_box(&cur))))
        });
    }
    g.finish();
}

/// The rows of the ratio table: (operation, group, axsched's id).
const ROWS: [(&str, &str, &str); 4] = [
    ("enqueue+dequeue (axsched: remove_task + add_task)", "peer_enqueue_dequeue", "axsched"),
    ("enqueue+dequeue (axsched: remove_task + put_prev_task)", "peer_enqueue_dequeue", "axsched-keep"),
    ("switch", "peer_switch", "axsched"),
    ("tick (axsched: a counter)", "peer_tick", "axsched"),
];

/// Where criterion keeps its results: `$CRITERION_HOME`, `$CARGO_TARGET_DIR/criterion`, or
/// `target/criterion` beside this binary's `target/release/deps`.
fn criterion_home() -> PathBuf {
    if let Some(h) = std::env::var_os("CRITERION_HOME") {
        return h.into();
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t).join("criterion");
    }
    let exe = std::env::current_exe().unwrap_or_default();
    exe.ancestors().nth(3).map_or_else(|| PathBuf::from("target"), Path::to_path_buf).join("criterion")
}

/// Criterion's median estimate (ns) of benchmark `group/id/n` under `home`, if it ran.
fn median_ns(home: &Path, group: &str, id: &str, n: usize) -> Option<f64> {
    let path = home.join(group).join(id).join(n.to_string()).join("new/estimates.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}

/// The ratio table of this run's medians (rows whose two sides both ran).
fn ratios(home: &Path) -> String {
    let mut out = String::from(
        "\naxsched 0.3.1 CFScheduler beside sched-core: criterion medians of this run, ns; ratio = axsched / sched-core\n",
    );
    out += &format!(
        "{:<56} {:>6} {:>9} {:>11} {:>7}\n",
        "operation", "queued", "axsched", "sched-core", "ratio"
    );
    for (what, group, peer) in ROWS {
        for n in SIZES {
            if let (Some(a), Some(c)) =
                (median_ns(home, group, peer, n), median_ns(home, group, "sched-core", n))
            {
                out += &format!("{what:<56} {n:>6} {a:>9.1} {c:>11.1} {:>6.2}x\n", a / c);
            }
        }
    }
    out
}

fn main() {
    let home = criterion_home();
    let mut c = Criterion::default().output_directory(&home).configure_from_args();
    bench(&mut c);
    c.final_summary();
    print!("{}", ratios(&home));
}
