//! Simulator speed: simulated CPU-ticks per host second for 8, 64, 256 and 1024 CPUs with
//! 4 spinning tasks per CPU (tickless idle off, so every CPU ticks), 100 ms of virtual time
//! per iteration. Criterion reports time per iteration; ticks per second = CPUs × 25 / time.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sched_sim::experiments::{on_big_stack, spinning};

fn bench_n<const C: usize>(c: &mut Criterion) {
    let mut m = on_big_stack(|| spinning::<C>(C, 4));
    let mut g = c.benchmark_group("sim_100ms");
    g.sample_size(10);
    g.bench_with_input(BenchmarkId::from_parameter(C), &C, |b, _| {
        b.iter(|| {
            let t = m.now() + 100_000_000;
            m.run_until(t);
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    bench_n::<8>(c);
    bench_n::<64>(c);
    bench_n::<256>(c);
    bench_n::<1024>(c);
}

criterion_group!(benches, bench);
criterion_main!(benches);
