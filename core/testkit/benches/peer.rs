//! A peer for the fair class's hot paths: ArceOS's `axsched` 0.3.1 `CFScheduler` (a `BTreeMap` keyed
//! by (vruntime, id), vruntime counted in ticks) at 1, 16, 256 and 1024 queued tasks. The group names
//! are the `fair` bench's with an `axsched/` prefix, so `axsched/switch/16` ÷ `switch/16` is the ratio.

use std::hint::black_box;
use std::sync::Arc;

use axsched::{BaseScheduler, CFSTask, CFScheduler};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

const SIZES: [usize; 4] = [1, 16, 256, 1024];

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
    // remove + add_task: the API's dequeue and enqueue. add_task places at min_vruntime, so after
    // the first round the task sits at the left of the tree (every B-tree leaf has the same depth).
    let mut g = c.benchmark_group("axsched/enqueue_dequeue");
    for n in SIZES {
        let (mut s, _running) = loaded(n);
        let m = median(&mut s, n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                let t = s.remove_task(black_box(&m)).expect("the median task is queued");
                s.add_task(t);
            })
        });
    }
    g.finish();

    // remove + put_prev_task: the vruntime is kept, so the task stays the median, like the
    // core's dequeue(SAVE) + enqueue(RESTORE).
    let mut g = c.benchmark_group("axsched/enqueue_dequeue_keep");
    for n in SIZES {
        let (mut s, _running) = loaded(n);
        let m = median(&mut s, n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                let t = s.remove_task(black_box(&m)).expect("the median task is queued");
                s.put_prev_task(t, false);
            })
        });
    }
    g.finish();

    // A switch: the running task back in, the leftmost out (insert + pop_first).
    let mut g = c.benchmark_group("axsched/switch");
    for n in SIZES {
        let (mut s, running) = loaded(n);
        let mut cur = Some(running);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                s.put_prev_task(cur.take().expect("one task runs"), false);
                cur = s.pick_next_task();
                black_box(cur.is_some())
            })
        });
    }
    g.finish();

    // A tick: one more tick counted on the running task and the comparison with min_vruntime.
    let mut g = c.benchmark_group("axsched/tick");
    for n in SIZES {
        let (mut s, cur) = loaded(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| black_box(s.task_tick(black_box(&cur))))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
