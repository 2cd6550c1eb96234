//! Placement and idle balancing at scale: one fork placement (find_idlest_group/cpu from
//! the top domain) and one wakeup placement (wake_affine + select_idle_sibling) on 8, 64,
//! 256 and 1024 CPUs (clusters of 8, every other CPU busy), and one nohz idle balance pass
//! on behalf of 63 tickless idle CPUs of a 64-CPU machine.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sched_core::placement::{SelectFor, Waker};
use sched_core::{CpuMask, Entity, Features, Nice, NoPlatform, Policy, Smp, TaskParams, WakeFlags};

const NOW: u64 = 1_000_000_000;

fn machine<const N: usize>() -> Box<Smp<NoPlatform, N, 1100, 8>> {
    std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(|| {
            let m: Box<Smp<NoPlatform, N, 1100, 8>> =
                Box::new(Smp::new(NoPlatform, Features::default(), 250));
            m.init_with(|t| if N <= 8 { t.init_flat(N) } else { t.init_clusters(N / 8, 8) }).unwrap();
            for cpu in 0..N {
                m.schedule(cpu, NOW - 1_000_000 + cpu as u64).unwrap();
                if cpu % 2 == 1 {
                    let p = TaskParams { affinity: CpuMask::single(cpu), ..TaskParams::default() };
                    m.create(cpu, NOW, p).unwrap();
                    m.schedule(cpu, NOW).unwrap();
                    m.finish_switch(cpu, NOW).unwrap();
                }
            }
            m
        })
        .unwrap()
        .join()
        .unwrap()
}

fn bench_n<const N: usize>(c: &mut Criterion) {
    let m = machine::<N>();
    let template = Entity::new(Nice::ZERO, Policy::Normal, CpuMask::ALL, 0);
    c.benchmark_group("fork_placement").bench_with_input(BenchmarkId::from_parameter(N), &N, |b, _| {
        b.iter(|| {
            let mut e = template;
            m.select_task_rq(0, &mut e, SelectFor::Fork, WakeFlags::FORK, Waker::default()).unwrap()
        })
    });
    let waker = Waker { flips: 1, load: 1024, present: true };
    c.benchmark_group("wakeup_placement").bench_with_input(BenchmarkId::from_parameter(N), &N, |b, _| {
        b.iter(|| {
            let mut e = Entity { cpu: 3, ..template };
            m.select_task_rq(1, &mut e, SelectFor::Wake(3), WakeFlags::empty(), waker).unwrap()
        })
    });
}

fn bench_nohz(c: &mut Criterion) {
    let m = std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(|| {
            let m: Box<Smp<NoPlatform, 64, 64, 8>> = Box::new(Smp::new(NoPlatform, Features::default(), 250));
            m.init_with(|t| t.init_clusters(8, 8)).unwrap();
            for cpu in 1..64 {
                m.schedule(cpu, NOW).unwrap();
                m.nohz_enter_idle(cpu).unwrap();
            }
            // Two tasks pinned to CPU0: CPU0 stays busy and keeps kicking.
            for _ in 0..2 {
                let p = TaskParams { affinity: CpuMask::single(0), ..TaskParams::default() };
                m.create(0, NOW, p).unwrap();
            }
            m.schedule(0, NOW).unwrap();
            m
        })
        .unwrap()
        .join()
        .unwrap();
    let mut now = NOW;
    c.benchmark_group("nohz_idle_balance").bench_function("64 cpus", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // A second later every idle CPU is due; CPU0's tick kicks CPU1.
                now += 1_000_000_000;
                m.tick(0, now).unwrap();
                let t0 = Instant::now();
                let served = m.nohz_idle_balance(1, now).unwrap();
                total += t0.elapsed();
                assert!(served);
            }
            total
        })
    });
}

fn bench(c: &mut Criterion) {
    bench_n::<8>(c);
    bench_n::<64>(c);
    bench_n::<256>(c);
    bench_n::<1024>(c);
    bench_nohz(c);
}

criterion_group!(benches, bench);
criterion_main!(benches);
