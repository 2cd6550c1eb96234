extern crate std;
use super::domain::SD_INIT_FLAGS;
use super::*;
use proptest::prelude::*;
use std::boxed::Box;
use std::collections::HashMap;
use std::vec::Vec;

fn boxed<const N: usize>() -> Box<Topology<N>> {
    Box::new(Topology::empty())
}

/// Runs `f` on a thread with room for a 1024-CPU table built on the stack first.
fn with_big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new().stack_size(64 << 20).spawn(f).unwrap().join().unwrap();
}

fn group_spans<const N: usize>(t: &Topology<N>, cpu: usize, idx: usize) -> Vec<CpuMask> {
    t.groups(cpu, idx).map(|g| g.span).collect()
}

fn r(a: usize, b: usize) -> CpuMask {
    CpuMask::range(a, b)
}

fn m(cpus: &[usize]) -> CpuMask {
    cpus.iter().copied().collect()
}

fn singles(cpus: impl Iterator<Item = usize>) -> Vec<CpuMask> {
    cpus.map(CpuMask::single).collect()
}

#[test]
fn flat_eight_is_one_mc_level() {
    let mut t = boxed::<8>();
    t.init_flat(8).unwrap();
    for cpu in 0..8 {
        assert_eq!(t.nr_levels(cpu), 1);
        let d = t.domain(cpu, 0).unwrap();
        assert_eq!(d.level, Level::Mc);
        assert_eq!((d.span, d.span_weight, d.nr_groups), (r(0, 8), 8, 8));
        assert_eq!((d.imbalance_pct, d.cache_nice_tries, d.busy_factor), (117, 1, 32));
        assert_eq!((d.min_interval_ms, d.max_interval_ms, d.balance_interval_ms), (8, 16, 8));
        assert!(d.flags.contains(SD_INIT_FLAGS | SdFlags::SHARE_PKG_RESOURCES));
        assert!(!d.flags.contains(SdFlags::BALANCE_WAKE));
        assert_eq!(t.llc_size(cpu), 8);
        assert_eq!(t.asym_cpucapacity_level(cpu), None);
    }
    assert_eq!(group_spans(&t, 3, 0), singles([3, 4, 5, 6, 7, 0, 1, 2].into_iter()));
    assert!(t.groups(3, 0).all(|g| g.weight == 1 && g.capacity == 1024));
    assert_eq!(t.nr_groups_total(), 8);
    assert_eq!(t.domain(0, 1), None);
}

#[test]
fn two_clusters_of_four() {
    let mut t = boxed::<8>();
    t.init_clusters(2, 4).unwrap();
    for cpu in 0..8 {
        assert_eq!(t.nr_levels(cpu), 2);
        let mc = t.domain(cpu, 0).unwrap();
        let cluster = if cpu < 4 { r(0, 4) } else { r(4, 8) };
        assert_eq!((mc.level, mc.span, mc.span_weight, mc.nr_groups), (Level::Mc, cluster, 4, 4));
        assert_eq!((mc.imbalance_pct, mc.cache_nice_tries), (117, 1));
        assert_eq!((mc.min_interval_ms, mc.max_interval_ms), (4, 8));
        // MC has no child (prefer_sibling 0 at MC) but carries the flag for DIE.
        assert!(mc.flags.contains(SdFlags::PREFER_SIBLING));
        let die = t.domain(cpu, 1).unwrap();
        assert_eq!((die.level, die.span, die.span_weight, die.nr_groups), (Level::Die, r(0, 8), 8, 2));
        assert_eq!((die.imbalance_pct, die.cache_nice_tries), (125, 1));
        assert_eq!((die.min_interval_ms, die.max_interval_ms), (8, 16));
        assert!(!die.flags.intersects(SdFlags::SHARE_PKG_RESOURCES | SdFlags::NUMA));
        assert_eq!(t.llc_size(cpu), 4);
        assert_eq!(t.llc_span(cpu), cluster);
        assert_eq!(t.llc_id(cpu), cluster.first());
    }
    assert_eq!(group_spans(&t, 5, 1), [r(4, 8), r(0, 4)]);
    assert_eq!(group_spans(&t, 2, 1), [r(0, 4), r(4, 8)]);
    assert_eq!(group_spans(&t, 6, 0), singles([6, 7, 4, 5].into_iter()));
    let die_groups: Vec<_> = t.groups(5, 1).collect();
    assert_eq!((die_groups[0].weight, die_groups[0].capacity), (4, 4096));
    // {0-3} seen from CPU 5 is CPU 0's local group.
    assert_eq!(die_groups[1].id, t.local_group(0, 1).unwrap().id);
    assert_ne!(die_groups[0].id, die_groups[1].id);
    assert_eq!(t.nr_groups_total(), 8 + 2);
    let all: Vec<_> = t.all_groups().map(|g| (g.id, g.span)).collect();
    let expected: Vec<_> = (0..8).map(CpuMask::single).chain([r(0, 4), r(4, 8)]).enumerate().collect();
    assert_eq!(all, expected);
}

#[test]
fn big_little_marks_die_asymmetric() {
    let mut t = boxed::<8>();
    t.init_big_little(4, 4, 446).unwrap();
    assert_eq!((t.capacity_orig(0), t.capacity_orig(7), t.max_capacity_orig()), (446, 1024, 1024));
    for cpu in 0..8 {
        let mc = t.domain(cpu, 0).unwrap();
        let die = t.domain(cpu, 1).unwrap();
        assert_eq!((mc.level, die.level), (Level::Mc, Level::Die));
        assert!(!mc.flags.contains(SdFlags::PREFER_SIBLING));
        assert!(!mc.flags.contains(SdFlags::ASYM_CPUCAPACITY));
        assert!(die.flags.contains(SdFlags::ASYM_CPUCAPACITY | SdFlags::PREFER_SIBLING));
        assert_eq!(t.asym_cpucapacity_level(cpu), Some(1));
    }
    let g: Vec<_> = t.groups(1, 1).collect();
    assert_eq!((g[0].span, g[0].capacity, g[0].min_capacity, g[0].max_capacity), (r(0, 4), 1784, 446, 446));
    assert_eq!((g[1].span, g[1].capacity, g[1].min_capacity, g[1].max_capacity), (r(4, 8), 4096, 1024, 1024));
}

#[test]
fn mixed_cluster_is_asymmetric_at_mc() {
    // One DynamIQ-style cluster holding both kinds: MC sees everything, SMT is gone.
    let caps = [446, 446, 1024, 1024];
    let desc = TopologyDesc { nr_cpus: 4, capacity: &caps, ..TopologyDesc::default() };
    let mut t = boxed::<4>();
    t.init(&desc).unwrap();
    assert_eq!(t.nr_levels(0), 1);
    let mc = t.domain(0, 0).unwrap();
    assert!(mc.flags.contains(SdFlags::ASYM_CPUCAPACITY | SdFlags::PREFER_SIBLING));
    assert_eq!(t.asym_cpucapacity_level(3), Some(0));
}

#[test]
fn numa_one_cluster_per_node() {
    let mut t = boxed::<8>();
    t.init_numa(2, 1, 4).unwrap();
    for cpu in 0..8 {
        // DIE spans the node, like MC, and degenerates into it.
        assert_eq!(t.nr_levels(cpu), 2);
        let mc = t.domain(cpu, 0).unwrap();
        let node = if cpu < 4 { r(0, 4) } else { r(4, 8) };
        assert_eq!((mc.level, mc.span, mc.imbalance_pct), (Level::Mc, node, 117));
        assert!(mc.flags.contains(SdFlags::PREFER_SIBLING));
        let numa = t.domain(cpu, 1).unwrap();
        assert_eq!((numa.level, numa.span, numa.nr_groups), (Level::Numa, r(0, 8), 2));
        assert!(numa.flags.contains(SdFlags::NUMA | SdFlags::SERIALIZE | SdFlags::OVERLAP));
        assert!(numa.flags.contains(SdFlags::WAKE_AFFINE | SdFlags::BALANCE_FORK | SdFlags::BALANCE_EXEC));
        assert!(!numa.flags.contains(SdFlags::PREFER_SIBLING));
        assert_eq!((numa.imbalance_pct, numa.cache_nice_tries), (125, 2));
        assert_eq!((numa.min_interval_ms, numa.max_interval_ms), (8, 16));
    }
    assert_eq!(group_spans(&t, 5, 1), [r(4, 8), r(0, 4)]);
    assert_eq!(t.nr_groups_total(), 8 + 2);
}

#[test]
fn numa_two_clusters_per_node() {
    let mut t = boxed::<16>();
    t.init_numa(2, 2, 4).unwrap();
    let levels: Vec<_> = t.domains(9).map(|d| (d.level, d.span, d.nr_groups)).collect();
    assert_eq!(levels, [(Level::Mc, r(8, 12), 4), (Level::Die, r(8, 16), 2), (Level::Numa, r(0, 16), 2)]);
    assert!(t.domain(9, 0).unwrap().flags.contains(SdFlags::PREFER_SIBLING));
    assert!(t.domain(9, 1).unwrap().flags.contains(SdFlags::PREFER_SIBLING));
    assert_eq!(group_spans(&t, 9, 1), [r(8, 12), r(12, 16)]);
    assert_eq!(group_spans(&t, 13, 1), [r(12, 16), r(8, 12)]);
    assert_eq!(group_spans(&t, 9, 2), [r(8, 16), r(0, 8)]);
    assert_eq!(t.llc_size(9), 4);
    assert_eq!(t.nr_groups_total(), 16 + 4 + 2);
}

#[test]
fn numa_asymmetry_leaves_die_spreading() {
    // A LITTLE node and a big node: only NUMA sees a big CPU from everywhere.
    let caps = [446, 446, 1024, 1024];
    let nodes = [r(0, 2), r(2, 4)];
    let desc = TopologyDesc { nr_cpus: 4, nodes: &nodes, capacity: &caps, ..TopologyDesc::default() };
    let mut t = boxed::<4>();
    t.init(&desc).unwrap();
    let levels: Vec<_> = t.domains(0).map(|d| d.level).collect();
    assert_eq!(levels, [Level::Mc, Level::Numa]);
    assert!(t.domain(0, 0).unwrap().flags.contains(SdFlags::PREFER_SIBLING));
    assert!(t.domain(0, 1).unwrap().flags.contains(SdFlags::ASYM_CPUCAPACITY));
    assert_eq!(t.asym_cpucapacity_level(0), Some(1));

    // With two clusters per node DIE survives, and keeps PREFER_SIBLING: the flag NUMA
    // strips goes to the NODE level between them, which degenerates.
    let caps = [446, 446, 446, 446, 1024, 1024, 1024, 1024];
    let clusters = [r(0, 2), r(2, 4), r(4, 6), r(6, 8)];
    let nodes = [r(0, 4), r(4, 8)];
    let desc = TopologyDesc { nr_cpus: 8, clusters: &clusters, nodes: &nodes, capacity: &caps, ..desc };
    let mut t = boxed::<8>();
    t.init(&desc).unwrap();
    let levels: Vec<_> = t.domains(0).map(|d| (d.level, d.flags.contains(SdFlags::PREFER_SIBLING))).collect();
    assert_eq!(levels, [(Level::Mc, true), (Level::Die, true), (Level::Numa, false)]);
    assert_eq!(t.asym_cpucapacity_level(5), Some(2));
}

#[test]
fn smt_cores_in_clusters() {
    let smt = [r(0, 2), r(2, 4), r(4, 6), r(6, 8)];
    let clusters = [r(0, 4), r(4, 8)];
    let desc = TopologyDesc { nr_cpus: 8, smt: &smt, clusters: &clusters, ..TopologyDesc::default() };
    let mut t = boxed::<8>();
    t.init(&desc).unwrap();
    let s = t.domain(3, 0).unwrap();
    assert_eq!(
        (s.level, s.span, s.nr_groups, s.imbalance_pct, s.cache_nice_tries),
        (Level::Smt, r(2, 4), 2, 110, 0)
    );
    assert!(s.flags.contains(SdFlags::SHARE_CPUCAPACITY | SdFlags::SHARE_PKG_RESOURCES));
    assert_eq!((s.min_interval_ms, s.max_interval_ms), (2, 4));
    assert_eq!(group_spans(&t, 3, 0), singles([3, 2].into_iter()));
    assert_eq!(group_spans(&t, 3, 1), [r(2, 4), r(0, 2)]);
    assert_eq!(group_spans(&t, 3, 2), [r(0, 4), r(4, 8)]);
    assert_eq!(t.llc_span(3), r(0, 4));
    assert_eq!(t.nr_groups_total(), 8 + 4 + 2);
}

#[test]
fn scattered_sets_follow_wrap_order() {
    // Threads 0/4, 1/5, ... share a core; cores {0,4},{1,5} form a cluster.
    let smt = [m(&[0, 4]), m(&[1, 5]), m(&[2, 6]), m(&[3, 7])];
    let clusters = [m(&[0, 1, 4, 5]), m(&[2, 3, 6, 7])];
    let desc = TopologyDesc { nr_cpus: 8, smt: &smt, clusters: &clusters, ..TopologyDesc::default() };
    let mut t = boxed::<8>();
    t.init(&desc).unwrap();
    assert_eq!(group_spans(&t, 5, 1), [m(&[1, 5]), m(&[0, 4])]);
    assert_eq!(group_spans(&t, 5, 2), [m(&[0, 1, 4, 5]), m(&[2, 3, 6, 7])]);
    assert_eq!(group_spans(&t, 6, 2), [m(&[2, 3, 6, 7]), m(&[0, 1, 4, 5])]);
    assert_eq!(group_spans(&t, 4, 0), singles([4, 0].into_iter()));
}

#[test]
fn mc_equal_to_smt_degenerates_unless_packing() {
    // Each cluster is a single two-thread core.
    let sets = [r(0, 2), r(2, 4)];
    let mut desc = TopologyDesc { nr_cpus: 4, smt: &sets, clusters: &sets, ..TopologyDesc::default() };
    let mut t = boxed::<4>();
    t.init(&desc).unwrap();
    let levels: Vec<_> = t.domains(1).map(|d| d.level).collect();
    assert_eq!(levels, [Level::Smt, Level::Die]);
    assert!(t.domain(1, 0).unwrap().flags.contains(SdFlags::PREFER_SIBLING));
    assert_eq!(group_spans(&t, 1, 1), [r(0, 2), r(2, 4)]);
    assert_eq!(t.llc_size(1), 2);

    // ASYM_PACKING does not need groups, so MC stays, with a single group.
    let prio = [0, 0, 0, 0];
    desc.asym_packing = Some(&prio);
    t.init(&desc).unwrap();
    let levels: Vec<_> = t.domains(1).map(|d| (d.level, d.nr_groups)).collect();
    assert_eq!(levels, [(Level::Smt, 2), (Level::Mc, 1), (Level::Die, 2)]);
    assert_eq!(t.llc_size(1), 2);
}

#[test]
fn asym_packing_preferred_cpus() {
    let smt = [r(0, 2), r(2, 4)];
    let mut desc = TopologyDesc { nr_cpus: 4, smt: &smt, ..TopologyDesc::default() };
    let mut t = boxed::<4>();
    t.init(&desc).unwrap();
    assert_eq!(t.asym_priority(3), -3);
    assert!(!t.domain(0, 1).unwrap().flags.contains(SdFlags::ASYM_PACKING));

    let default_prio = [0, -1, -2, -3];
    desc.asym_packing = Some(&default_prio);
    t.init(&desc).unwrap();
    let mc = t.domain(0, 1).unwrap();
    assert_eq!(mc.level, Level::Mc);
    assert!(mc.flags.contains(SdFlags::ASYM_PACKING));
    let prefer: Vec<_> = t.groups(0, 1).map(|g| (g.span, g.asym_prefer_cpu)).collect();
    assert_eq!(prefer, [(r(0, 2), 0), (r(2, 4), 2)]);

    let custom = [1, 5, 3, 3];
    desc.asym_packing = Some(&custom);
    t.init(&desc).unwrap();
    assert_eq!(t.asym_priority(1), 5);
    let prefer: Vec<_> = t.groups(3, 1).map(|g| g.asym_prefer_cpu).collect();
    assert_eq!(prefer, [2, 1]);
    assert_eq!(t.groups(0, 0).map(|g| g.asym_prefer_cpu).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn one_cpu_has_no_domain() {
    let mut t = boxed::<4>();
    t.init_flat(1).unwrap();
    assert_eq!((t.nr_cpus(), t.nr_levels(0), t.nr_groups_total()), (1, 0, 0));
    assert_eq!(t.llc_span(0), CpuMask::single(0));
    assert_eq!(t.groups(0, 0).count(), 0);
}

#[test]
fn out_of_range_queries_are_empty() {
    let mut t = boxed::<8>();
    assert_eq!((t.nr_cpus(), t.nr_levels(0), t.llc_size(0)), (0, 0, 0));
    t.init_clusters(2, 2).unwrap();
    assert_eq!(t.domain(4, 0), None);
    assert_eq!(t.domain(usize::MAX, 0), None);
    assert_eq!(t.domain(0, 9), None);
    assert_eq!(t.groups(7, 0).count(), 0);
    assert_eq!(t.groups(0, 5).count(), 0);
    assert_eq!((t.capacity_orig(4), t.asym_priority(4), t.llc_size(4)), (0, i32::MIN, 0));
    assert_eq!(t.llc_span(usize::MAX), CpuMask::EMPTY);
    assert_eq!(t.llc_id(4), None);
    assert_eq!(t.asym_cpucapacity_level(99), None);
    assert_eq!(t.domains(99).count(), 0);
}

#[test]
fn reinit_replaces_everything() {
    let mut t = boxed::<8>();
    t.init_numa(2, 2, 2).unwrap();
    t.init_flat(4).unwrap();
    assert_eq!(t.nr_cpus(), 4);
    assert_eq!(t.nr_levels(5), 0);
    assert_eq!(t.nr_groups_total(), 4);
    assert_eq!(group_spans(&t, 2, 0), singles([2, 3, 0, 1].into_iter()));
    assert_eq!(t.domain(0, 0).unwrap().span, r(0, 4));
}

#[test]
fn large_flat_and_clustered_machines() {
    with_big_stack(|| {
        let mut t = boxed::<1024>();
        t.init_flat(1024).unwrap();
        let d = t.domain(1000, 0).unwrap();
        assert_eq!((d.level, d.span_weight, d.nr_groups), (Level::Mc, 1024, 1024));
        assert_eq!(t.groups(1000, 0).count(), 1024);
        assert_eq!(t.groups(1000, 0).nth(24).unwrap().span, CpuMask::single(0));
        assert_eq!(t.nr_groups_total(), 1024);
        assert_eq!((d.min_interval_ms, d.max_interval_ms), (1024, 2048));

        t.init_clusters(128, 8).unwrap();
        assert_eq!(t.nr_groups_total(), 1024 + 128);
        let mc = t.domain(1000, 0).unwrap();
        assert_eq!((mc.span, mc.nr_groups), (r(1000, 1008), 8));
        let die = t.domain(1000, 1).unwrap();
        assert_eq!((die.span_weight, die.nr_groups), (1024, 128));
        let spans = group_spans(&t, 1000, 1);
        assert_eq!((spans[0], spans[1], spans[127]), (r(1000, 1008), r(1008, 1016), r(992, 1000)));
        // The same group from different CPUs has one id.
        let id_from_0 = t.groups(0, 1).find(|g| g.span == r(8, 16)).unwrap().id;
        assert_eq!(t.local_group(9, 1).unwrap().id, id_from_0);
        assert_eq!(t.local_group(15, 1).unwrap().id, id_from_0);
        let mut seen = std::collections::BTreeSet::new();
        for cpu in 0..1024 {
            for idx in 0..t.nr_levels(cpu) {
                seen.extend(t.groups(cpu, idx).map(|g| g.id));
            }
        }
        assert_eq!(seen.len(), 1024 + 128);
        assert_eq!(seen.last(), Some(&(1024 + 128 - 1)));
    });
}

#[test]
fn too_many_for_the_table() {
    let mut t = boxed::<8>();
    assert_eq!(t.init_flat(9), Err(TopologyError::TooManyCpus { cpus: 9, max: 8 }));
    assert_eq!(t.init_clusters(usize::MAX, 2), Err(TopologyError::TooManyCpus { cpus: usize::MAX, max: 8 }));
    assert_eq!(
        t.init_big_little(usize::MAX, 1, 446),
        Err(TopologyError::TooManyCpus { cpus: usize::MAX, max: 8 })
    );
    assert_eq!(
        t.init_numa(usize::MAX / 2, 3, 1),
        Err(TopologyError::TooManyCpus { cpus: usize::MAX, max: 8 })
    );
    assert_eq!(Topology::<2048>::max_cpus(), MAX_CPUS);
    with_big_stack(|| {
        let mut big = Box::new(Topology::<2048>::empty());
        assert_eq!(big.init_flat(1025), Err(TopologyError::TooManyCpus { cpus: 1025, max: 1024 }));
    });
}

#[test]
fn every_error_leaves_the_table_unchanged() {
    let mut t = boxed::<8>();
    t.init_clusters(2, 4).unwrap();
    let before = (t.nr_cpus(), t.nr_groups_total(), *t.domain(5, 1).unwrap(), group_spans(&t, 5, 1));
    let d = TopologyDesc { nr_cpus: 8, ..TopologyDesc::default() };
    let caps8 = [1024; 8];
    let prio3 = [0; 3];
    let halves = [r(0, 4), r(4, 8)];
    let quarters = [r(0, 2), r(2, 4), r(4, 6), r(6, 8)];
    let cases: [(TopologyDesc<'_>, TopologyError); 13] = [
        (TopologyDesc { nr_cpus: 0, ..d }, TopologyError::NoCpus),
        (TopologyDesc { nr_cpus: 9, ..d }, TopologyError::TooManyCpus { cpus: 9, max: 8 }),
        (
            TopologyDesc { capacity: &caps8[..7], ..d },
            TopologyError::BadLength { slice: "capacity", len: 7, cpus: 8 },
        ),
        (
            TopologyDesc { asym_packing: Some(&prio3), ..d },
            TopologyError::BadLength { slice: "asym_packing", len: 3, cpus: 8 },
        ),
        (
            TopologyDesc { capacity: &[1024, 1024, 0, 1024, 1024, 1024, 1024, 1024], ..d },
            TopologyError::ZeroCapacity { cpu: 2 },
        ),
        (
            TopologyDesc { capacity: &[1024, 1024, 1024, 1024, 1025, 1024, 1024, 1024], ..d },
            TopologyError::CapacityTooLarge { cpu: 4 },
        ),
        (TopologyDesc { clusters: &[r(0, 4), r(4, 9)], ..d }, TopologyError::CpuOutOfRange { cpu: 8 }),
        (
            TopologyDesc { smt: &[r(0, 8), CpuMask::EMPTY], ..d },
            TopologyError::EmptySet { level: Level::Smt },
        ),
        (TopologyDesc { clusters: &[r(0, 5), r(4, 8)], ..d }, TopologyError::Overlap { level: Level::Mc }),
        (
            TopologyDesc { nodes: &[r(0, 4), r(5, 8)], ..d },
            TopologyError::NotCovered { cpu: 4, level: Level::Die },
        ),
        (
            TopologyDesc { smt: &[r(0, 3), r(3, 8)], clusters: &halves, ..d },
            TopologyError::NotNested { level: Level::Smt },
        ),
        (
            TopologyDesc { clusters: &[r(0, 2), r(2, 6), r(6, 8)], nodes: &halves, ..d },
            TopologyError::NotNested { level: Level::Mc },
        ),
        // Without clusters, SMT sets must lie inside one node.
        (
            TopologyDesc { smt: &[r(0, 3), r(3, 8)], nodes: &halves, ..d },
            TopologyError::NotNested { level: Level::Smt },
        ),
    ];
    for (desc, err) in cases {
        assert_eq!(t.init(&desc), Err(err), "{desc:?}");
        let now = (t.nr_cpus(), t.nr_groups_total(), *t.domain(5, 1).unwrap(), group_spans(&t, 5, 1));
        assert_eq!(now, before);
    }
    // Valid variants of the same pieces are accepted.
    let ok = TopologyDesc { smt: &quarters, clusters: &halves, nodes: &halves, capacity: &caps8, ..d };
    assert_eq!(t.init(&ok), Ok(()));
    assert_eq!(t.init_flat(0), Err(TopologyError::NoCpus));
    assert_eq!(t.init_big_little(2, 2, 0), Err(TopologyError::ZeroCapacity { cpu: 0 }));
    assert_eq!(t.init_big_little(2, 2, 2000), Err(TopologyError::CapacityTooLarge { cpu: 0 }));
    assert_eq!(t.nr_cpus(), 8);
}

#[test]
fn errors_display() {
    let e = TopologyError::NotCovered { cpu: 3, level: Level::Mc };
    assert_eq!(std::format!("{e}"), "cpu 3 is in no set at level MC");
}

/// A random machine of up to 64 CPUs: CPUs scattered over clusters, clusters over nodes,
/// cores of up to two threads inside clusters.
#[derive(Debug, Clone)]
struct Machine {
    n: usize,
    smt: Vec<CpuMask>,
    clusters: Vec<CpuMask>,
    nodes: Vec<CpuMask>,
    caps: Vec<u64>,
    prio: Option<Vec<i32>>,
}

fn machine() -> impl Strategy<Value = Machine> {
    (1usize..=64).prop_flat_map(|n| {
        (
            proptest::collection::vec((0usize..8, 0usize..3), n),
            proptest::collection::vec(0usize..3, 8),
            proptest::collection::vec(prop_oneof![Just(446u64), Just(1024u64)], n),
            proptest::collection::vec(-4i32..4, n),
            (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        )
            .prop_map(
                move |(place, node_of, caps, prio, (smt, clusters, nodes, use_caps, packing))| {
                    let mut cl = [CpuMask::EMPTY; 8];
                    let mut core = [[CpuMask::EMPTY; 3]; 8];
                    for (cpu, &(c, k)) in place.iter().enumerate() {
                        cl[c].set(cpu);
                        core[c][k].set(cpu);
                    }
                    let mut nd = [CpuMask::EMPTY; 3];
                    for (c, &node) in node_of.iter().enumerate() {
                        nd[node] = nd[node].or(&cl[c]);
                    }
                    let keep =
                        |v: &[CpuMask]| v.iter().copied().filter(|s| !s.is_empty()).collect::<Vec<_>>();
                    Machine {
                        n,
                        smt: if smt { keep(core.as_flattened()) } else { Vec::new() },
                        clusters: if clusters { keep(&cl) } else { Vec::new() },
                        nodes: if nodes { keep(&nd) } else { Vec::new() },
                        caps: if use_caps { caps } else { Vec::new() },
                        prio: packing.then_some(prio),
                    }
                },
            )
    })
}

fn check_machine(t: &Topology<64>, mc: &Machine) -> Result<(), TestCaseError> {
    let n = mc.n;
    let all = CpuMask::first_n(n);
    let mut ids: HashMap<(Level, CpuMask), usize> = HashMap::new();
    let mut spans_of: HashMap<usize, (Level, CpuMask)> = HashMap::new();
    for cpu in 0..n {
        let mut below: Option<&Domain> = None;
        for (idx, d) in t.domains(cpu).enumerate() {
            prop_assert!(d.span.contains(cpu));
            prop_assert!(d.span.is_subset_of(&all));
            prop_assert_eq!(d.span_weight, d.span.weight());
            prop_assert!(d.span_weight > 1);
            if let Some(child) = below {
                prop_assert!(child.span.is_subset_of(&d.span));
                prop_assert!(child.level < d.level);
            }
            let groups: Vec<&Group> = t.groups(cpu, idx).collect();
            prop_assert_eq!(groups.len(), d.nr_groups);
            prop_assert!(groups[0].span.contains(cpu), "local group first");
            if let Some(child) = below {
                prop_assert_eq!(groups[0].span, child.span);
            }
            let mut covered = CpuMask::EMPTY;
            let mut last_key = None;
            for g in &groups {
                prop_assert!(!g.span.intersects(&covered), "groups overlap");
                covered = covered.or(&g.span);
                prop_assert_eq!(g.weight, g.span.weight());
                let caps: Vec<u64> = g.span.iter().map(|c| t.capacity_orig(c)).collect();
                prop_assert_eq!(g.capacity, caps.iter().sum::<u64>());
                prop_assert_eq!(g.min_capacity, *caps.iter().min().unwrap());
                prop_assert_eq!(g.max_capacity, *caps.iter().max().unwrap());
                prop_assert!(g.span.contains(g.asym_prefer_cpu));
                let best = g.span.iter().map(|c| t.asym_priority(c)).max().unwrap();
                let first_best = g.span.iter().find(|&c| t.asym_priority(c) == best).unwrap();
                prop_assert_eq!(g.asym_prefer_cpu, first_best);
                // Wrapped order: each group's nearest CPU after `cpu` comes later.
                let key = g.span.iter().map(|c| (c + MAX_CPUS - cpu) % MAX_CPUS).min().unwrap();
                prop_assert!(last_key < Some(key), "wrap order");
                last_key = Some(key);
                prop_assert!(g.id < t.nr_groups_total());
                let id = *ids.entry((d.level, g.span)).or_insert(g.id);
                prop_assert_eq!(id, g.id, "one id per group");
                let owner = *spans_of.entry(g.id).or_insert((d.level, g.span));
                prop_assert_eq!(owner, (d.level, g.span), "one group per id");
            }
            prop_assert_eq!(covered, d.span, "groups cover the span");
            below = Some(d);
        }
        if n > 1 {
            prop_assert_eq!(below.map(|d| d.span), Some(all), "top spans every CPU");
        }
        let llc = t.llc_span(cpu);
        prop_assert!(llc.contains(cpu));
        prop_assert_eq!(t.llc_size(cpu), llc.weight());
        if let Some(cl) = mc.clusters.iter().find(|s| s.contains(cpu)) {
            prop_assert!(llc.is_subset_of(cl));
        }
    }
    prop_assert_eq!(ids.len(), t.nr_groups_total());
    let listed: Vec<usize> = t.all_groups().map(|g| g.id).collect();
    prop_assert_eq!(listed, (0..t.nr_groups_total()).collect::<Vec<_>>());
    Ok(())
}

proptest! {
    #[test]
    fn random_partitions_build_consistent_domains(mc in machine()) {
        let desc = TopologyDesc {
            nr_cpus: mc.n,
            smt: &mc.smt,
            clusters: &mc.clusters,
            nodes: &mc.nodes,
            capacity: &mc.caps,
            asym_packing: mc.prio.as_deref(),
        };
        let mut t = boxed::<64>();
        prop_assert_eq!(t.init(&desc), Ok(()));
        check_machine(&t, &mc)?;
    }
}

/// The one-CPU shortcut of `Topology::init` answers every query as the planner's table does,
/// and refuses what the planner refuses.
#[test]
fn one_cpu_shortcut_matches_the_planner() {
    let view = |t: &Topology<1>| {
        (
            (
                t.nr_cpus(),
                t.capacity_orig(0),
                t.max_capacity_orig(),
                t.asym_priority(0),
                t.nr_levels(0),
                t.domains(0).count(),
                t.local_group(0, 0).map(|g| g.span),
            ),
            (
                t.llc_span(0),
                t.llc_size(0),
                t.llc_id(0),
                t.asym_cpucapacity_level(0),
                t.nr_groups_total(),
                t.all_groups().count(),
            ),
        )
    };
    for caps in [&[][..], &[1024], &[446], &[1], &[0], &[1025]] {
        let desc = TopologyDesc {
            nr_cpus: 1,
            smt: &[],
            clusters: &[],
            nodes: &[],
            capacity: caps,
            asym_packing: None,
        };
        let mut quick: Topology<1> = Topology::empty();
        let mut planned: Topology<1> = Topology::empty();
        let a = quick.init(&desc);
        let b = planned.apply(&desc::Plan::from_desc(&desc));
        assert_eq!(a, b, "capacities {caps:?}");
        if a.is_ok() {
            assert_eq!(view(&quick), view(&planned), "capacities {caps:?}");
        }
    }
}

/// `init_flat` builds the planner's table for a flat machine entry for entry, whatever the
/// previous contents, and refuses what the planner refuses.
#[test]
fn flat_shortcut_matches_the_planner() {
    fn check<const CPUS: usize>() {
        for n in 0..=CPUS + 1 {
            let mut quick: Box<Topology<CPUS>> = Box::new(Topology::empty());
            let mut planned: Box<Topology<CPUS>> = Box::new(Topology::empty());
            // Start from a different machine, so that every entry must be rewritten.
            if CPUS >= 4 {
                quick.init_clusters(2, CPUS / 2).unwrap();
                planned.init_big_little(1, CPUS - 1, 512).unwrap();
            }
            let plan = desc::Plan::preset(n, desc::Sets::Blocks { count: 1, size: n }, desc::Sets::NONE);
            let a = quick.init_flat(n);
            let b = planned.apply(&plan);
            assert_eq!(a, b, "{n} of {CPUS} CPUs");
            if a.is_ok() {
                assert!(*quick == *planned, "{n} of {CPUS} CPUs");
            }
        }
    }
    check::<1>();
    check::<2>();
    check::<4>();
    check::<8>();
    check::<64>();
}

/// A build without `asym-capacity`, `numa` and `smt` (as a small machine builds) refuses the
/// machines that need them, naming the feature, and leaves the table as it was; the machines
/// it keeps build as in any other build. (`cargo xtest` runs this without default features.)
#[test]
#[cfg(not(any(feature = "asym-capacity", feature = "numa", feature = "smt")))]
fn small_build_refuses_what_it_left_out() {
    let mut t: Box<Topology<8>> = Box::new(Topology::empty());
    t.init_clusters(2, 4).unwrap();
    let llc = t.llc_span(5);
    let needs = |feature| Err(TopologyError::NotBuiltIn { feature });
    assert_eq!(t.init_big_little(4, 4, 512), needs("asym-capacity"));
    assert_eq!(t.init_numa(2, 1, 4), needs("numa"));
    let caps = [1024, 1024, 1024, 512];
    let uneven = TopologyDesc { nr_cpus: 4, capacity: &caps, ..Default::default() };
    assert_eq!(t.init(&uneven), needs("asym-capacity"));
    let prio = [3, 2, 1, 0];
    let packing = TopologyDesc { nr_cpus: 4, asym_packing: Some(&prio), ..Default::default() };
    assert_eq!(t.init(&packing), needs("asym-capacity"));
    let threads = [CpuMask::range(0, 2), CpuMask::range(2, 4)];
    let smt = TopologyDesc { nr_cpus: 4, smt: &threads, ..Default::default() };
    assert_eq!(t.init(&smt), needs("smt"));
    // Nothing changed.
    assert_eq!((t.nr_cpus(), t.llc_span(5)), (8, llc));
    // Equal capacities, singleton SMT sets and one node are fine.
    let equal = [1024; 4];
    let ones = [CpuMask::single(0), CpuMask::single(1), CpuMask::single(2), CpuMask::single(3)];
    let node = [CpuMask::range(0, 4)];
    let plain = TopologyDesc { nr_cpus: 4, capacity: &equal, smt: &ones, nodes: &node, ..Default::default() };
    assert_eq!(t.init(&plain), Ok(()));
    assert_eq!(t.nr_levels(0), 1);
    t.init_big_little(4, 4, 1024).unwrap();
}

/// The presets build what a description of the same machine builds, entry for entry: a port
/// that describes its machine (the kernel, from the device tree) gets the table the simulator
/// gets from the preset.
#[test]
fn presets_match_their_descriptions() {
    fn blocks(n: usize, k: usize) -> Vec<CpuMask> {
        (0..n / k).map(|i| CpuMask::range(i * k, i * k + k)).collect()
    }
    fn same(preset: impl FnOnce(&mut Topology<16>) -> Result<(), TopologyError>, desc: &TopologyDesc) {
        let mut a: Box<Topology<16>> = Box::new(Topology::empty());
        let mut b: Box<Topology<16>> = Box::new(Topology::empty());
        preset(&mut a).unwrap();
        b.init(desc).unwrap();
        assert!(*a == *b, "{desc:?}");
    }
    let (c4, c2) = (blocks(16, 4), blocks(16, 2));
    let halves = blocks(16, 8);
    same(|t| t.init_clusters(4, 4), &TopologyDesc { nr_cpus: 16, clusters: &c4, ..Default::default() });
    #[cfg(feature = "numa")]
    same(
        |t| t.init_numa(2, 4, 2),
        &TopologyDesc { nr_cpus: 16, clusters: &c2, nodes: &halves, ..Default::default() },
    );
    #[cfg(feature = "asym-capacity")]
    {
        let caps: Vec<u64> = (0..16).map(|c| if c < 8 { 446 } else { 1024 }).collect();
        same(
            |t| t.init_big_little(8, 8, 446),
            &TopologyDesc { nr_cpus: 16, clusters: &halves, capacity: &caps, ..Default::default() },
        );
    }
    let _ = (&c2, &halves);
}
