//! Hot paths of the fair class at 1, 16, 256 and 1024 queued tasks: enqueue+dequeue,
//! pick-next (choosing among leftmost and buddies), a whole switch (put_prev + pick +
//! set_next, as `schedule` does), and a tick (update_curr + PELT update + preemption check).
//! The `eevdf_*` groups are the first three with the `EEVDF` switch on, in the same run.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sched_core::{DequeueFlags, EnqueueFlags, Features, NoPlatform, SingleCpu, TaskParams, Tunables};
use std::hint::black_box;

const CAP: usize = 1040;
const SIZES: [usize; 4] = [1, 16, 256, 1024];

/// A machine with `n` spinners queued (plus one running), aged by 100 ms of ticks.
fn loaded_rq(n: usize) -> Box<SingleCpu<NoPlatform, CAP, CAP>> {
    loaded_rq_with(n, Features::default())
}

/// [`loaded_rq`] with the given feature switches.
fn loaded_rq_with(n: usize, features: Features) -> Box<SingleCpu<NoPlatform, CAP, CAP>> {
    let s: Box<SingleCpu<NoPlatform, CAP, CAP>> =
        Box::new(SingleCpu::new(NoPlatform, 1024, Tunables::for_cpus(8), features).unwrap());
    for i in 0..=n {
        s.create(0, TaskParams { nice: (i % 7) as i32 - 3, ..TaskParams::default() }).unwrap();
    }
    s.schedule(0);
    let mut now = 0;
    for _ in 0..100 {
        now += 1_000_000;
        if s.tick(now) {
            s.schedule(now);
        }
    }
    assert_eq!(s.rq().nr_queued(), n);
    s
}

/// The enqueue+dequeue, pick and switch groups on runqueues loaded with `features`, their
/// names prefixed with `prefix`.
fn hot_paths(c: &mut Criterion, prefix: &str, features: Features) {
    let mut g = c.benchmark_group(format!("{prefix}enqueue_dequeue"));
    for n in SIZES {
        let s = loaded_rq_with(n, features);
        s.with_fair(|rq| {
            // The queued task with the median vruntime: from the middle of the timeline, so
            // the tree is at its full depth whichever policy placed the tasks.
            let mut queued: Vec<_> = rq
                .mru()
                .map(|(slot, _)| slot)
                .filter(|&slot| Some(slot) != rq.curr_slot())
                .filter_map(|slot| {
                    Some((rq.entity(slot)?.vruntime().wrapping_sub(rq.min_vruntime()) as i64, slot))
                })
                .collect();
            queued.sort();
            let slot = queued[queued.len() / 2].1;
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
        let s = loaded_rq_with(n, features);
        s.with_fair(|rq| {
            g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
                b.iter(|| black_box(rq.pick_next_entity()))
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group(format!("{prefix}switch"));
    for n in SIZES {
        let s = loaded_rq_with(n, features);
        s.with_fair(|rq| {
            g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
                b.iter(|| {
                    rq.put_prev();
                    let next = rq.pick_next_entity();
                    if let Some(next) = next {
                        rq.set_next(next);
                    }
                    black_box(next)
                })
            });
        });
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    hot_paths(c, "", Features::default());

    let mut g = c.benchmark_group("tick");
    for n in SIZES {
        let s = loaded_rq(n);
        s.with_fair(|rq| {
            let mut now = rq.clock();
            g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
                b.iter(|| {
                    // 4 ms per tick (HZ=250): every call crosses PELT periods and decays.
                    now += 4_000_000;
                    rq.update_clock(now);
                    rq.task_tick();
                    black_box(rq.need_resched())
                })
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
