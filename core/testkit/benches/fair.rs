//! Hot paths of the fair class at 1, 16, 256 and 1024 queued tasks: enqueue+dequeue,
//! pick-next (choosing among leftmost and buddies), a whole switch (put_prev + pick +
//! set_next, as `schedule` does), and a tick (update_curr + PELT update + preemption check).
//! The `eevdf_*` groups are the first three with the `EEVDF` switch on, in the same run.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sched_core::{DequeueFlags, EnqueueFlags, Features};
use sched_testkit::hotpath::{loaded_rq, median_slot, switch, tick};
use std::hint::black_box;

const SIZES: [usize; 4] = [1, 16, 256, 1024];

/// The enqueue+dequeue, pick and switch groups on runqueues loaded with `features`, their
/// names prefixed with `prefix`.
fn hot_paths(c: &mut Criterion, prefix: &str, features: Features) {
    let mut g = c.benchmark_group(format!("{prefix}enqueue_dequeue"));
    for n in SIZES {
        let s = loaded_rq(n, features);
        s.with_fair(|rq| {
            let slot = median_slot(rq);
            g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
                b.iter(|| {
                    rq.dequeue(black_box(slot), DequeueFlags::SAVE);
                    rq.enqueue(black_box(slot), EnqueueFlags::RESTORE);
                })
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group(format!("{prefix}pick_next"));
    for n in SIZES {
        let s = loaded_rq(n, features);
        s.with_fair(|rq| {
            g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
                b.iter(|| black_box(rq.pick_next_entity()))
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group(format!("{prefix}switch"));
    for n in SIZES {
        let s = loaded_rq(n, features);
        s.with_fair(|rq| {
            g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| b.iter(|| black_box(switch(rq))));
        });
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    hot_paths(c, "", Features::default());

    let mut g = c.benchmark_group("tick");
    for n in SIZES {
        let s = loaded_rq(n, Features::default());
        s.with_fair(|rq| {
            let mut now = rq.clock();
            g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
                b.iter(|| black_box(tick(rq, &mut now)))
            });
        });
    }
    g.finish();

    // The same hot paths with EEVDF picking, in the same run.
    #[cfg(feature = "eevdf")]
    hot_paths(c, "eevdf_", Features::default() | Features::EEVDF);
}

criterion_group!(benches, bench);
criterion_main!(benches);
