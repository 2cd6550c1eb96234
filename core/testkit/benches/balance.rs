//! One top-level balance pass (group statistics over every CPU, the decision, and one
//! migration) on 8, 64, 256 and 1024 CPUs, clusters of 8. Each iteration pulls one
//! task from an overloaded CPU to an idle one; the move is undone outside the timing.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sched_core::{CpuMask, Features, IdleType, NoPlatform, Smp, TaskId, TaskParams};

const NOW: u64 = 1_000_000_000;

struct Setup<const N: usize> {
    m: Box<Smp<NoPlatform, N, 2100, 8>>,
    dst: usize,
    top: usize,
}

fn setup<const N: usize>() -> Setup<N> {
    // Built on a big stack: the machine is several MB before it reaches the heap.
    std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(|| {
            let m: Box<Smp<NoPlatform, N, 2100, 8>> =
                Box::new(Smp::new(NoPlatform, Features::default(), 250));
            m.init_with(|t| if N <= 8 { t.init_flat(N) } else { t.init_clusters(N / 8, 8) }).unwrap();
            let dst = N - 1;
            for cpu in 0..N - 1 {
                let n = if cpu == 0 { 3 } else { 1 };
                // Pinned while created, so fork placement cannot spread them (the destination
                // must start idle and CPU0 overloaded), then free to move.
                let here = TaskParams { affinity: CpuMask::single(cpu), ..TaskParams::default() };
                let ids: Vec<TaskId> = (0..n).map(|_| m.create(cpu, NOW, here).unwrap()).collect();
                m.schedule(cpu, NOW).unwrap();
                m.finish_switch(cpu, NOW).unwrap();
                for t in ids {
                    m.set_affinity(NOW, t, CpuMask::ALL).unwrap();
                    m.inject_task_pelt(t, 600, 600, 1024).unwrap();
                }
            }
            let top = m.topology().nr_levels(dst) - 1;
            Setup { m, dst, top }
        })
        .unwrap()
        .join()
        .unwrap()
}

fn inject<const N: usize>(s: &Setup<N>) {
    s.m.inject_rq_pelt(0, 1024, 3072, 3072).unwrap();
    for cpu in 1..N - 1 {
        s.m.inject_rq_pelt(cpu, 1024, 1024, 1024).unwrap();
    }
    s.m.inject_rq_pelt(s.dst, 0, 0, 0).unwrap();
}

fn bench_n<const N: usize>(c: &mut Criterion) {
    let s = setup::<N>();
    let mut g = c.benchmark_group("balance_pass");
    g.bench_with_input(BenchmarkId::from_parameter(N), &N, |b, _| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                inject(&s);
                let t0 = Instant::now();
                let (moved, _) = s.m.balance_domain(s.dst, s.top, IdleType::Idle, NOW).unwrap();
                total += t0.elapsed();
                assert_eq!(moved, 1);
                // Undo: send the pulled task back to CPU0.
                let t = s.m.with_cpu(s.dst, |c| c.rq.mru().next().map(|(_, id)| id)).unwrap().unwrap();
                s.m.set_affinity(NOW, t, CpuMask::single(0)).unwrap();
                s.m.set_affinity(NOW, t, CpuMask::ALL).unwrap();
            }
            total
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
