extern crate std;

use super::*;
use proptest::prelude::*;
use std::vec::Vec;

/// A prefetch hint covers the first nodes, and their augmentation only when the timeline
/// is augmented (EEVDF).
#[cfg(target_pointer_width = "64")]
#[test]
fn slot_lines_cover_the_first_nodes() {
    let t: Timeline<16> = Timeline::UNSET;
    let line = |p: *const u8| p as usize / crate::lines::LINE;
    let lines = |augmented| {
        let mut seen = Vec::new();
        Timeline::<16>::slot_lines(&t as *const _ as *const u8, 4, augmented, &mut |p| seen.push(line(p)));
        seen
    };
    let plain = lines(false);
    for s in 0..4 {
        assert!(plain.contains(&line(&t.nodes[s] as *const Node as *const u8)));
    }
    assert!(!plain.contains(&line(&t.nodes[15] as *const Node as *const u8)));
    #[cfg(feature = "eevdf")]
    {
        assert!(!plain.contains(&line(&t.aug[0] as *const Aug as *const u8)));
        assert!(lines(true).contains(&line(&t.aug[3] as *const Aug as *const u8)));
    }
}

/// On 64-bit targets the root, the leftmost and the counts come before the nodes, within
/// [`Timeline::HEADER`] bytes: the runqueue's hot fields end with them.
#[cfg(target_pointer_width = "64")]
#[test]
fn the_header_comes_before_the_nodes() {
    use core::mem::offset_of;
    type T = Timeline<64>;
    let ends = [offset_of!(T, root) + 4, offset_of!(T, leftmost) + 4, offset_of!(T, len) + 8];
    for end in ends.into_iter().chain([offset_of!(T, next_seq) + 8]) {
        assert!(end <= T::HEADER, "a header field ends at byte {end}");
    }
    assert_eq!(offset_of!(T, nodes), T::HEADER);
}

fn ids<const C: usize>(t: &Timeline<C>) -> Vec<usize> {
    t.iter().collect()
}

/// Exact structural equality, for "errors leave state unchanged".
fn same<const C: usize>(a: &Timeline<C>, b: &Timeline<C>) -> bool {
    a.nodes == b.nodes
        && a.root == b.root
        && a.leftmost == b.leftmost
        && a.len == b.len
        && a.next_seq == b.next_seq
}

/// Small deterministic PRNG so stress tests need no extra dependency.
fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[test]
fn vruntime_before_is_wrap_safe() {
    assert!(vruntime_before(1, 2));
    assert!(!vruntime_before(2, 1));
    assert!(!vruntime_before(5, 5));
    assert!(vruntime_before(u64::MAX, 0));
    assert!(vruntime_before(u64::MAX - 10, 10));
    assert!(!vruntime_before(10, u64::MAX - 10));
}

#[test]
fn empty() {
    let t = Timeline::<8>::new();
    assert!(t.is_empty());
    assert_eq!(t.len(), 0);
    assert_eq!(t.capacity(), 8);
    assert_eq!(t.leftmost(), None);
    assert_eq!(t.rightmost(), None);
    assert_eq!(t.iter().next(), None);
    assert_eq!(t.successor(0), None);
    assert_eq!(t.vruntime_of(0), None);
    t.check().unwrap();
    let z = Timeline::<0>::default();
    assert_eq!(z.capacity(), 0);
    z.check().unwrap();
}

#[test]
fn orders_by_vruntime() {
    let mut t = Timeline::<16>::new();
    for (id, key) in [(3, 50), (1, 10), (7, 70), (2, 30), (9, 5), (4, 60)] {
        t.insert(id, key).unwrap();
        t.check().unwrap();
    }
    assert_eq!(ids(&t), [9, 1, 2, 3, 4, 7]);
    assert_eq!(t.len(), 6);
    assert_eq!(t.leftmost(), Some(9));
    assert_eq!(t.rightmost(), Some(7));
    assert_eq!(t.vruntime_of(2), Some(30));
    assert!(t.contains(4) && !t.contains(5));
    assert_eq!(t.iter().len(), 6);
}

#[test]
fn ties_go_right_fifo() {
    let mut t = Timeline::<16>::new();
    t.insert(5, 100).unwrap();
    t.insert(2, 100).unwrap();
    t.insert(8, 50).unwrap();
    t.insert(0, 100).unwrap();
    t.insert(11, 100).unwrap();
    t.check().unwrap();
    assert_eq!(ids(&t), [8, 5, 2, 0, 11]);
    // A requeued task with an equal key goes behind the others.
    t.remove(5).unwrap();
    t.insert(5, 100).unwrap();
    t.check().unwrap();
    assert_eq!(ids(&t), [8, 2, 0, 11, 5]);
    // Equal to the leftmost key: still not the leftmost.
    t.insert(1, 50).unwrap();
    assert_eq!(t.leftmost(), Some(8));
    assert_eq!(t.successor(8), Some(1));
}

#[test]
fn wraparound_keys() {
    let mut t = Timeline::<16>::new();
    let base = u64::MAX - 2;
    for (id, off) in [(0u64, 4u64), (1, 0), (2, 2), (3, 3), (4, 1), (5, 6)] {
        t.insert(id as usize, base.wrapping_add(off)).unwrap();
    }
    t.check().unwrap();
    // Offsets 3.. wrapped past zero but still sort after u64::MAX - 2.
    assert_eq!(ids(&t), [1, 4, 2, 3, 0, 5]);
    assert_eq!(t.vruntime_of(5), Some(3));
    assert_eq!(t.rightmost(), Some(5));
}

#[test]
fn errors_leave_state_unchanged() {
    let mut t = Timeline::<8>::new();
    t.insert(1, 10).unwrap();
    t.insert(2, 20).unwrap();
    let snap = t.clone();
    assert_eq!(t.insert(1, 5), Err(TimelineError::AlreadyQueued));
    assert_eq!(t.insert(8, 5), Err(TimelineError::IdOutOfRange));
    assert_eq!(t.insert(usize::MAX, 5), Err(TimelineError::IdOutOfRange));
    assert_eq!(t.remove(3), Err(TimelineError::NotQueued));
    assert_eq!(t.remove(8), Err(TimelineError::IdOutOfRange));
    assert_eq!(t.remove(usize::MAX), Err(TimelineError::IdOutOfRange));
    assert!(same(&t, &snap));
    assert_eq!(t.successor(usize::MAX), None);
    assert_eq!(t.vruntime_of(usize::MAX), None);
    assert!(!t.contains(usize::MAX));
    t.remove(1).unwrap();
    assert_eq!(t.remove(1), Err(TimelineError::NotQueued));
    t.check().unwrap();
}

#[test]
fn successor_leftmost_rightmost() {
    let mut t = Timeline::<32>::new();
    for id in 0..20 {
        t.insert(id, (id as u64 * 7) % 20).unwrap();
    }
    t.check().unwrap();
    let order = ids(&t);
    assert_eq!(t.leftmost(), Some(order[0]));
    assert_eq!(t.rightmost(), order.last().copied());
    for w in order.windows(2) {
        assert_eq!(t.successor(w[0]), Some(w[1]));
    }
    assert_eq!(t.successor(*order.last().unwrap()), None);
    assert_eq!(t.successor(25), None);
    // Removing the leftmost promotes its successor.
    let second = t.successor(order[0]);
    t.remove(order[0]).unwrap();
    assert_eq!(t.leftmost(), second);
    t.check().unwrap();
}

#[test]
fn reinsert_after_remove() {
    let mut t = Timeline::<4>::new();
    for round in 0..50u64 {
        for id in 0..4 {
            t.insert(id, round * 10 + (3 - id as u64)).unwrap();
        }
        t.check().unwrap();
        assert_eq!(ids(&t), [3, 2, 1, 0]);
        for id in [1, 3, 0, 2] {
            t.remove(id).unwrap();
            t.check().unwrap();
        }
        assert!(t.is_empty());
    }
}

#[test]
fn stress_random_stays_balanced() {
    const N: usize = 1024;
    let mut t = Timeline::<N>::new();
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..20_000 {
        let id = (xorshift(&mut s) % N as u64) as usize;
        if t.contains(id) {
            t.remove(id).unwrap();
        } else {
            t.insert(id, xorshift(&mut s) % 4096).unwrap();
        }
        if round % 997 == 0 {
            t.check().unwrap();
        }
    }
    t.check().unwrap();
    // Red-black bound: no path from the root is longer than 2 log2(n + 1) nodes.
    let n = t.len();
    let deepest = (0..N as u32).filter_map(|x| t.depth(x)).max().unwrap() + 1;
    let bound = 2.0 * ((n + 1) as f64).log2();
    assert!((deepest as f64) <= bound, "a path of {deepest} nodes for {n} exceeds the bound {bound}");
    assert_eq!(n, 526);
    let keys: Vec<u64> = t.iter().map(|i| t.vruntime_of(i).unwrap()).collect();
    assert!(keys.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn sequential_keys_both_directions() {
    let mut t = Timeline::<256>::new();
    for id in 0..256 {
        t.insert(id, id as u64).unwrap();
    }
    t.check().unwrap();
    for id in (0..256).rev() {
        t.remove(id).unwrap();
    }
    for id in 0..256 {
        t.insert(id, 1000 - id as u64).unwrap();
    }
    t.check().unwrap();
    assert_eq!(t.leftmost(), Some(255));
    for id in 0..256 {
        assert_eq!(t.leftmost(), Some(255 - id));
        t.remove(255 - id).unwrap();
    }
    t.check().unwrap();
}

#[test]
fn const_new_in_static_at_max_cap() {
    static T: Timeline<65536> = Timeline::new();
    assert!(T.is_empty());
    assert_eq!(T.capacity(), 65536);
    assert!(!T.contains(65535));
}

#[test]
fn check_detects_corruption() {
    let mut t = Timeline::<8>::new();
    for id in 0..6 {
        t.insert(id, id as u64 * 10).unwrap();
    }
    t.check().unwrap();

    let mut bad = t.clone();
    bad.nodes[3].key = 1_000;
    assert_eq!(bad.check(), Err("in-order keys not ascending"));

    let mut bad = t.clone();
    bad.leftmost = 2;
    assert_eq!(bad.check(), Err("cached leftmost is not the in-order first node"));

    let mut bad = t.clone();
    bad.len += 1;
    assert_eq!(bad.check(), Err("len does not match number of queued slots"));

    // A red root, alone so that no red child of it is found first.
    let mut one = Timeline::<8>::new();
    one.insert(0, 0).unwrap();
    one.check().unwrap();
    let r = one.root as usize;
    one.nodes[r].color = Color::Red;
    assert_eq!(one.check(), Err("a root is red"));

    // Blackening a red leaf, or reddening a red node's parent, breaks the colour rules.
    let mut bad = t.clone();
    let leaf = (0..6)
        .find(|&i| t.nodes[i].left == NIL && t.nodes[i].right == NIL && t.nodes[i].color == Color::Red)
        .expect("the six inserts leave a red leaf");
    bad.nodes[leaf].color = Color::Black;
    assert_eq!(bad.check(), Err("black heights differ"));
    let mut bad = t.clone();
    bad.nodes[bad.nodes[leaf].parent as usize].color = Color::Red;
    assert_eq!(bad.check(), Err("a red node has a red child"));

    let mut bad = t.clone();
    let (a, b) = (bad.root, bad.nodes[bad.root as usize].left);
    bad.nodes[a as usize].parent = b;
    assert_eq!(bad.check(), Err("parent links form a cycle"));

    let mut bad = t.clone();
    let r = bad.root as usize;
    bad.nodes[r].left = 77;
    // (Its old left child, whose parent no longer links to it, is met first.)
    assert_eq!(bad.check(), Err("parent does not link to node"));

    let mut bad = t.clone();
    bad.nodes[7].parent = 0;
    assert_eq!(bad.check(), Err("vacant slot has links"));

    // Keys more than 2^63 apart are a caller error the check reports.
    let mut far = Timeline::<4>::new();
    far.insert(0, 0).unwrap();
    far.insert(1, 1 << 62).unwrap();
    far.insert(2, (1 << 63) + 1).unwrap();
    assert_eq!(far.check(), Err("queued keys span 2^63 or more"));
}

/// Two trees in one arena: each keeps its own order, leftmost and length.
#[test]
fn trees_share_an_arena() {
    let mut t: Timeline<16> = Timeline::new();
    let mut b = TimelineHead::EMPTY;
    for id in 0..6usize {
        t.insert(id, 100 - id as u64).unwrap();
    }
    for id in 6..12usize {
        t.with_head(&mut b, |o| o.insert(id, id as u64)).unwrap();
    }
    assert_eq!(ids(&t), [5, 4, 3, 2, 1, 0]);
    assert_eq!(t.with_head(&mut b, |o| ids(o)), [6, 7, 8, 9, 10, 11]);
    t.with_head(&mut b, |o| o.remove(6)).unwrap();
    assert_eq!((t.leftmost(), t.with_head(&mut b, |o| o.leftmost())), (Some(5), Some(7)));
    assert_eq!((t.len(), b.len()), (6, 5));
    // Either tree alone, its heads swapped in, is a well-formed tree of its entries.
    let mut only_b: Timeline<16> = Timeline::new();
    for id in 7..12usize {
        only_b.insert(id, id as u64).unwrap();
    }
    assert_eq!(t.with_head(&mut b, |o| ids(o)), ids(&only_b));
}

#[test]
fn debug_and_display() {
    let mut t = Timeline::<4>::new();
    t.insert(2, 7).unwrap();
    t.insert(0, 3).unwrap();
    assert_eq!(std::format!("{t:?}"), "{0: 3, 2: 7}");
    assert_eq!(std::format!("{}", TimelineError::NotQueued), "task not queued on the timeline");
    assert_eq!((&t).into_iter().collect::<Vec<_>>(), [0, 2]);
}

#[derive(Debug, Clone)]
enum Op {
    Insert(usize, i64),
    Remove(usize),
}

const PCAP: usize = 64;

fn op() -> impl Strategy<Value = Op> {
    // Ids slightly past CAP exercise IdOutOfRange; mostly tiny offsets so
    // ties are common, sometimes large ones (still well within 2^63).
    let offset = prop_oneof![
        4 => -8i64..8,
        1 => -(1i64 << 40)..(1i64 << 40),
    ];
    prop_oneof![
        3 => (0..PCAP + 4, offset).prop_map(|(id, off)| Op::Insert(id, off)),
        2 => (0..PCAP + 4).prop_map(Op::Remove),
    ]
}

proptest! {
    #[test]
    fn matches_sorted_vec_model(
        base in prop_oneof![
            Just(0u64),
            Just(u64::MAX - 3),
            Just(1u64 << 63),
            Just((1u64 << 63) - 5),
            any::<u64>(),
        ],
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        let mut t = Timeline::<PCAP>::new();
        // Model: (key offset from base, seq, id) kept sorted.
        let mut model: Vec<(i64, u64, usize)> = Vec::new();
        let mut seq = 0u64;
        for op in ops {
            let before = t.clone();
            match op {
                Op::Insert(id, off) => {
                    let want = if id >= PCAP {
                        Err(TimelineError::IdOutOfRange)
                    } else if model.iter().any(|e| e.2 == id) {
                        Err(TimelineError::AlreadyQueued)
                    } else {
                        let at = model.partition_point(|e| e.0 <= off);
                        model.insert(at, (off, seq, id));
                        seq += 1;
                        Ok(())
                    };
                    prop_assert_eq!(t.insert(id, base.wrapping_add(off as u64)), want);
                }
                Op::Remove(id) => {
                    let want = if id >= PCAP {
                        Err(TimelineError::IdOutOfRange)
                    } else if let Some(at) = model.iter().position(|e| e.2 == id) {
                        model.remove(at);
                        Ok(())
                    } else {
                        Err(TimelineError::NotQueued)
                    };
                    prop_assert_eq!(t.remove(id), want);
                }
            }
            if before.len() == t.len() {
                prop_assert!(same(&t, &before));
            }
            prop_assert_eq!(t.check(), Ok(()));
            let want_ids: Vec<usize> = model.iter().map(|e| e.2).collect();
            prop_assert_eq!(ids(&t), want_ids.clone());
            prop_assert_eq!(t.len(), model.len());
            prop_assert_eq!(t.leftmost(), want_ids.first().copied());
            prop_assert_eq!(t.rightmost(), want_ids.last().copied());
            for w in want_ids.windows(2) {
                prop_assert_eq!(t.successor(w[0]), Some(w[1]));
            }
            for &(off, _, id) in &model {
                prop_assert_eq!(t.vruntime_of(id), Some(base.wrapping_add(off as u64)));
            }
            for id in 0..PCAP {
                prop_assert_eq!(t.contains(id), want_ids.contains(&id));
            }
        }
    }
}

/// The EEVDF pick against a brute-force one over random inserts (with deadlines),
/// deadline changes, removals and switches of the augmentation, with the structure checked after each step.
#[cfg(feature = "eevdf")]
#[test]
fn eevdf_pick_matches_brute_force() {
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut t: Timeline<48> = Timeline::new();
    t.set_augmented(true);
    // Keys near 2^64 too, so wrap-safe comparison is exercised.
    let base = u64::MAX - 5_000;
    let mut queued: Vec<(usize, u64, u64, u64)> = Vec::new(); // (id, key, deadline, order)
    let mut order = 0u64;
    for step in 0..20_000 {
        let r = xorshift(&mut rng);
        let id = (r % 48) as usize;
        if r.is_multiple_of(97) {
            let on = !t.augmented();
            t.set_augmented(on);
        } else if t.contains(id) && r.is_multiple_of(3) {
            let q = queued.iter_mut().find(|q| q.0 == id).unwrap();
            q.2 = q.1.wrapping_add(xorshift(&mut rng) % 6_000);
            t.set_deadline(id, q.2).unwrap();
        } else if t.contains(id) {
            t.remove(id).unwrap();
            queued.retain(|q| q.0 != id);
        } else {
            assert_eq!(t.set_deadline(id, 0), Err(TimelineError::NotQueued));
            let key = base.wrapping_add(xorshift(&mut rng) % 10_000);
            let deadline = key.wrapping_add(xorshift(&mut rng) % 6_000);
            t.insert_with_deadline(id, key, deadline).unwrap();
            queued.push((id, key, deadline, order));
            order += 1;
        }
        assert_eq!(t.check(), Ok(()), "step {step}");
        let threshold = base.wrapping_add(xorshift(&mut rng) % 11_000);
        let eligible = |k: u64| !vruntime_before(threshold, k);
        let want = queued
            .iter()
            .filter(|q| eligible(q.1))
            .min_by(|a, b| {
                let rel = |x: u64| x.wrapping_sub(base);
                (rel(a.2), rel(a.1), a.3).cmp(&(rel(b.2), rel(b.1), b.3))
            })
            .map(|q| q.0);
        let got = t.pick_eligible(eligible);
        if t.augmented() {
            assert_eq!(got, want, "step {step}: threshold {threshold}");
        } else {
            assert_eq!(got, None, "no pick while the augmentation is off");
        }
    }
}

/// A subtree best that no longer matches its entries is reported, not trusted.
#[cfg(feature = "eevdf")]
#[test]
fn check_detects_a_stale_earliest_deadline() {
    let mut t: Timeline<8> = Timeline::new();
    t.set_augmented(true);
    for (id, key, deadline) in [(0, 10, 50), (1, 20, 30), (2, 30, 40)] {
        t.insert_with_deadline(id, key, deadline).unwrap();
    }
    assert_eq!(t.pick_eligible(|_| true), Some(1));
    assert_eq!(t.pick_eligible(|k| k <= 10), Some(0));
    t.aug[2].deadline = 1;
    assert!(t.check().is_err());
}
