//! Simulator speed: simulated CPU-ticks per host second for 8, 64, 256 and 1024 CPUs with
//! 4 spinning tasks per CPU (tickless idle off, so every CPU ticks), 100 ms of virtual time
//! per iteration. Criterion reports time per iteration; ticks per second = CPUs × 25 / time.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sched_core::CpuMask;
use sched_sim::machine::{Behavior, Config, Machine, TopologyKind};

fn spin<const C: usize>(cpus: usize) -> Box<Machine<C>> {
    let cfg = Config { cpus, topology: TopologyKind::Clusters(8.min(cpus)), nohz: false, ..Config::octo(1) };
    let mut m = Box::new(Machine::<C>::new(cfg).unwrap());
    m.run_until(10_000_000);
    for cpu in 0..cpus {
        for i in 0..4 {
            m.spawn(cpu, Behavior::Spinner, &format!("s{i}"), CpuMask::single(cpu)).unwrap();
        }
        m.start(cpu).unwrap();
    }
    m
}

fn bench_n<const C: usize>(c: &mut Criterion) {
    let mut m =
        std::thread::Builder::new().stack_size(1 << 30).spawn(|| spin::<C>(C)).unwrap().join().unwrap();
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
