//! The timeline at 16, 256 and 1024 queued entries, CFS beside EEVDF: insert+remove of an
//! entry from the middle with the earliest-deadline augmentation off (CFS) and on (EEVDF), and
//! the pick — CFS's cached leftmost against EEVDF's eligible entry with the earliest deadline
//! (`Timeline::pick_eligible`, eligibility from the load-weighted average).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sched_core::eevdf::{self, AvgVruntime};
use sched_core::Timeline;
use std::hint::black_box;

const CAP: usize = 1040;
const SIZES: [usize; 3] = [16, 256, 1024];
const WEIGHTS: [u64; 5] = [335, 820, 1024, 1277, 3121];

/// `n` entries with vruntimes spread over 20 ms and 3 ms slices (0.1–3 ms for every fifth),
/// the augmentation as asked, and the average their vruntimes make.
fn filled(n: usize, augmented: bool) -> (Box<Timeline<CAP>>, AvgVruntime, u64) {
    let mut t: Box<Timeline<CAP>> = Box::new(Timeline::new());
    t.set_augmented(augmented);
    let base = 1u64 << 40;
    let mut avg = AvgVruntime::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for id in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = base + x % 20_000_000;
        let w = WEIGHTS[id % WEIGHTS.len()];
        let slice = if id % 5 == 0 { 100_000 + x % 2_900_000 } else { 3_000_000 };
        t.insert_with_deadline(id, v, eevdf::deadline(v, slice, w)).unwrap();
        avg.add(v, base, w);
    }
    (t, avg, base)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("timeline_insert_remove");
    for n in SIZES {
        for (name, aug) in [("cfs", false), ("eevdf", true)] {
            let (mut t, _, _) = filled(n, aug);
            let id = n / 2;
            let (v, d) = (t.vruntime_of(id).unwrap(), t.deadline_of(id).unwrap());
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| {
                    t.remove(black_box(id)).unwrap();
                    t.insert_with_deadline(black_box(id), v, d).unwrap();
                })
            });
        }
    }
    g.finish();

    let mut g = c.benchmark_group("timeline_pick");
    for n in SIZES {
        let (t, avg, base) = filled(n, true);
        g.bench_with_input(BenchmarkId::new("cfs_leftmost", n), &n, |b, _| {
            b.iter(|| black_box(t.leftmost()))
        });
        g.bench_with_input(BenchmarkId::new("eevdf_eligible_earliest_deadline", n), &n, |b, _| {
            b.iter(|| black_box(t.pick_eligible(|v| avg.eligible(v, base, None))))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
