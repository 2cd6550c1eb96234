//! The per-CPU timeline: runnable tasks waiting for the CPU, ordered by vruntime.
//!
//! The task currently running is *not* in the timeline; it is taken out when
//! picked and put back (with its advanced vruntime) when preempted. The
//! leftmost entry is therefore the next task to run, and [`Timeline::leftmost`]
//! is O(1) because it is consulted on every tick.
//!
//! The structure is a red-black tree whose nodes live in a fixed arena of `CAP`
//! slots and are linked by `u32` indices. Red-black rather than AVL because a
//! scheduler removes and re-inserts at the same end of the tree all the time
//! (a task picked, put back and picked again): a red-black tree rebalances that
//! in O(1) amortised over any mix of inserts and removals, where an AVL tree's
//! height changes can climb O(log n) levels on every such round trip. Slot ids are chosen by the caller,
//! who owns the id allocator and uses the same id to index other per-CPU
//! arrays; the timeline never allocates ids itself and needs no `alloc`.
//!
//! Order is (vruntime, insertion sequence). Equal vruntimes therefore keep
//! FIFO order: a newly inserted task goes to the *right* of every queued task
//! with the same vruntime, so it cannot jump ahead of tasks that were waiting.
//!
//! vruntimes are compared wrap-safely ([`vruntime_before`]): the signed
//! difference decides. That is a consistent order only while all queued keys
//! lie within 2^63 of each other, which holds because the scheduler's
//! `min_vruntime` tracks the queued keys and new keys are placed relative to
//! it. [`Timeline::check`] reports a violation of that span.
//!
//! This file holds the arena, its types and the common operations (insert, remove, the
//! leftmost, order queries, iteration); the tree's balancing is in `rbtree.rs`, EEVDF's
//! deadline augmentation and pick in `augment.rs`, the structural check (and the depth walk
//! the augmentation's rebuild shares) in `check.rs`, and running an operation on another
//! tree of the same arena in `head.rs`.

use core::fmt;
use core::iter::FusedIterator;

mod augment;
mod check;
mod head;
mod rbtree;
#[cfg(test)]
mod tests;


/// Link value meaning "no node".
const NIL: u32 = u32::MAX;

/// Ordering of vruntimes: wrap-safe, as signed 64-bit difference.
///
/// `a` is before `b` when `b` is less than 2^63 ahead of `a`, so the order
/// survives the u64 counter wrapping around as long as the compared values
/// lie within 2^63 of each other.
#[inline]
pub fn vruntime_before(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) as i64) < 0
}

/// Why a timeline operation was refused. The timeline is unchanged after any error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TimelineError {
    /// The id is not below the timeline's capacity.
    IdOutOfRange,
    /// The id is already queued; inserting it again would corrupt the tree.
    AlreadyQueued,
    /// The id is not queued, so there is nothing to remove.
    NotQueued,
}

impl fmt::Display for TimelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimelineError::IdOutOfRange => "task id out of range",
            TimelineError::AlreadyQueued => "task already queued on the timeline",
            TimelineError::NotQueued => "task not queued on the timeline",
        })
    }
}

impl core::error::Error for TimelineError {}

/// One arena slot.
///
/// Array-of-structs rather than struct-of-arrays because a descent touches the
/// key and a link of each node it visits; with 32 bytes aligned to 32 a node
/// never straddles a cache line, so each step costs at most one miss. Each link
/// is its own `u32`, loaded as it is, with no shift on the descent's chain.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(align(32))]
struct Node {
    /// vruntime, compared with [`vruntime_before`].
    key: u64,
    /// Insertion sequence number; breaks ties so equal keys stay FIFO.
    seq: u64,
    /// The left child, or `NIL`.
    left: u32,
    /// The right child, or `NIL`.
    right: u32,
    parent: u32,
    /// Its colour, or [`Color::Vacant`] when the slot is not queued: the colour doubles as
    /// the in-tree flag without costing another field.
    color: Color,
}

/// A node's colour in the red-black tree.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Color {
    /// The slot is not queued.
    Vacant,
    /// A red node: its children are black.
    Red,
    /// A black node: every path from a node down to a missing child passes as many.
    Black,
}

impl Node {
    const VACANT: Node = Node { key: 0, seq: 0, left: NIL, right: NIL, parent: NIL, color: Color::Vacant };
    const UNSET: Node = Node { key: 0, seq: 0, left: 0, right: 0, parent: 0, color: Color::Vacant };
}

/// The EEVDF augmentation of one slot: its entry's virtual deadline, and the best entry of the
/// subtree it roots — the earliest (deadline, vruntime, seq), all compared wrap-safely — with
/// that entry's deadline and vruntime cached, so that keeping it up needs no other slot's.
#[cfg(feature = "eevdf")]
#[derive(Clone, Copy, PartialEq, Eq)]
struct Aug {
    deadline: u64,
    best_deadline: u64,
    best_key: u64,
    best: u32,
}

#[cfg(feature = "eevdf")]
impl Aug {
    const ZERO: Aug = Aug { deadline: 0, best_deadline: 0, best_key: 0, best: 0 };
}

/// Runnable, not-running tasks of one CPU ordered by (vruntime, insertion order).
///
/// Worst-case O(log n) insert and remove, O(1) leftmost. Holds at most `CAP`
/// tasks with ids `0..CAP`; `CAP` may be at most 2^32 - 1 since links are `u32`.
// On 64-bit targets the root, the leftmost and the counts come first, next to the runqueue's
// other hot fields; the nodes after them.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(target_pointer_width = "64", repr(C))]
pub struct Timeline<const CAP: usize> {
    root: u32,
    /// Cached in-order first node, kept up to date by insert and remove.
    leftmost: u32,
    len: usize,
    /// Sequence number for the next insert; every queued seq is before it.
    next_seq: u64,
    /// Whether `aug` is maintained (EEVDF switched on).
    #[cfg(feature = "eevdf")]
    augmented: bool,
    nodes: [Node; CAP],
    /// Per slot: its virtual deadline and its subtree's best entry (see [`Aug`]).
    #[cfg(feature = "eevdf")]
    aug: [Aug; CAP],
}

impl<const CAP: usize> Timeline<CAP> {
    /// Rejects, at compile time, capacities whose ids would collide with `NIL`.
    const CAP_FITS_U32: () = assert!(CAP < NIL as usize, "Timeline CAP must be below u32::MAX");

    /// Bytes before the nodes on 64-bit targets: the root, the leftmost, the counts (a
    /// test holds the layout to it).
    #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
    pub(crate) const HEADER: usize = 32;

    /// Calls `each` with the lines that hold the first `slots` slots of the timeline at
    /// `at`: its nodes, and with `augmented` (EEVDF's deadlines) their augmentation too.
    /// Addresses only: nothing is read.
    #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
    pub(crate) fn slot_lines(at: *const u8, slots: usize, augmented: bool, each: &mut impl FnMut(*const u8)) {
        use core::mem::{offset_of, size_of};
        let slots = slots.min(CAP);
        crate::lines::each_line(at.wrapping_add(offset_of!(Self, nodes)), slots * size_of::<Node>(), each);
        #[cfg(feature = "eevdf")]
        if augmented {
            crate::lines::each_line(at.wrapping_add(offset_of!(Self, aug)), slots * size_of::<Aug>(), each);
        }
        #[cfg(not(feature = "eevdf"))]
        let _ = augmented;
    }

    /// All zeros (links not yet `NIL`), for a runqueue that `init` has not
    /// built yet; not a usable timeline.
    pub(crate) const UNSET: Self = Timeline {
        nodes: [Node::UNSET; CAP],
        #[cfg(feature = "eevdf")]
        aug: [Aug::ZERO; CAP],
        #[cfg(feature = "eevdf")]
        augmented: false,
        root: 0,
        leftmost: 0,
        len: 0,
        next_seq: 0,
    };

    /// An empty timeline. `const` so per-CPU timelines can live in statics.
    pub const fn new() -> Self {
        let () = Self::CAP_FITS_U32;
        Timeline {
            nodes: [Node::VACANT; CAP],
            #[cfg(feature = "eevdf")]
            aug: [Aug::ZERO; CAP],
            #[cfg(feature = "eevdf")]
            augmented: false,
            root: NIL,
            leftmost: NIL,
            len: 0,
            next_seq: 0,
        }
    }

    /// Number of queued tasks.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no task is queued (the CPU would go idle after the current task).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of id slots, `CAP`.
    #[inline]
    pub fn capacity(&self) -> usize {
        CAP
    }

    /// Whether `id` is queued. Out-of-range ids are simply not queued.
    #[inline]
    pub fn contains(&self, id: usize) -> bool {
        self.nodes.get(id).is_some_and(|n| n.color != Color::Vacant)
    }

    /// Insert id with key vruntime. Ties (equal vruntime) go to the RIGHT of existing equal keys,
    /// i.e. order is (vruntime wrap-safe, then insertion sequence number ascending).
    ///
    /// Worst case O(log n).
    pub fn insert(&mut self, id: usize, vruntime: u64) -> Result<(), TimelineError> {
        self.insert_with_deadline(id, vruntime, vruntime)
    }

    /// [`Timeline::insert`] with the entry's virtual deadline, which orders the EEVDF pick
    /// ([`Timeline::pick_eligible`]); without the `eevdf` feature it is not kept.
    pub fn insert_with_deadline(&mut self, id: usize, vruntime: u64, deadline: u64) -> Result<(), TimelineError> {
        #[cfg(not(feature = "eevdf"))]
        let _ = deadline;
        let node = self.nodes.get(id).ok_or(TimelineError::IdOutOfRange)?;
        if node.color != Color::Vacant {
            return Err(TimelineError::AlreadyQueued);
        }
        let z = id as u32;

        let (parent, go_left, is_leftmost) = self.descend(vruntime);

        self.nodes[id] = Node { key: vruntime, seq: self.next_seq, left: NIL, right: NIL, parent, color: Color::Red };
        self.next_seq = self.next_seq.wrapping_add(1);
        if parent == NIL {
            self.root = z;
        } else if go_left {
            self.nodes[parent as usize].left = z;
        } else {
            self.nodes[parent as usize].right = z;
        }
        if is_leftmost {
            self.leftmost = z;
        }
        #[cfg(feature = "eevdf")]
        if self.augmented {
            self.aug[id] = Aug { deadline, best_deadline: deadline, best_key: vruntime, best: z };
        } else {
            // The subtree bests are rebuilt from the deadlines when the augmentation is
            // switched on; until then only the deadline is kept.
            self.aug[id].deadline = deadline;
        }
        self.len += 1;
        if self.aug_kept() {
            // Bests first, on the tree as linked: every ancestor holds its best without `z`.
            #[cfg(feature = "eevdf")]
            self.raise_best(z);
            self.insert_fixup::<true>(z);
        } else {
            self.insert_fixup::<false>(z);
        }
        Ok(())
    }

    /// Where a new entry of key `vruntime` is linked: its parent (`NIL` in an empty tree),
    /// whether on the parent's left, and whether it becomes the leftmost entry. The new seq
    /// exceeds every queued seq, so among equal keys the new entry goes rightmost: the
    /// descent goes left only when strictly before.
    ///
    /// It goes in runs, left while the key is before each node's, then right while it is
    /// not, and so on, so each step loads only the link it follows and the next node's
    /// address waits for that one load. The way to go is a branch, and it predicts well: a
    /// scheduler's inserts take few paths (a preempted task goes back near the right end, a
    /// woken one near the left, a requeued one to its old place). A select between both
    /// links would put the key's load and the comparison on every level's critical path.
    #[inline(always)]
    fn descend(&self, vruntime: u64) -> (u32, bool, bool) {
        let (mut parent, mut cur, mut is_leftmost) = (NIL, self.root, true);
        loop {
            while cur != NIL {
                let n = &self.nodes[cur as usize];
                if !vruntime_before(vruntime, n.key) {
                    break;
                }
                (parent, cur) = (cur, n.left);
            }
            if cur == NIL {
                return (parent, true, is_leftmost);
            }
            is_leftmost = false;
            while cur != NIL {
                let n = &self.nodes[cur as usize];
                if vruntime_before(vruntime, n.key) {
                    break;
                }
                (parent, cur) = (cur, n.right);
            }
            if cur == NIL {
                return (parent, false, false);
            }
        }
    }

    /// Remove a queued id. Worst case O(log n).
    pub fn remove(&mut self, id: usize) -> Result<(), TimelineError> {
        let node = *self.nodes.get(id).ok_or(TimelineError::IdOutOfRange)?;
        if node.color == Color::Vacant {
            return Err(TimelineError::NotQueued);
        }
        let z = id as u32;
        if self.leftmost == z {
            self.leftmost = self.next_of(z);
        }

        let (l, r, p) = (node.left, node.right, node.parent);
        // `x` takes the place of the node that left the tree's shape (z, or its successor
        // moved into z's place), `xp` is x's parent (x may be NIL), and `lost` that node's
        // colour: losing a black one leaves a black short on x's path.
        let (x, xp, lost);
        // The successor moved into z's place, if any.
        let mut moved = NIL;
        if l == NIL || r == NIL {
            x = if l != NIL { l } else { r };
            if x != NIL {
                self.nodes[x as usize].parent = p;
            }
            self.replace_child(p, z, x);
            (xp, lost) = (p, node.color);
        } else {
            // Two children: relink the in-order successor `s` into z's place, with z's
            // colour. Ids are caller-owned, so nodes are moved, never their contents.
            let mut s = r;
            loop {
                let sl = self.nodes[s as usize].left;
                if sl == NIL {
                    break;
                }
                s = sl;
            }
            let sn = self.nodes[s as usize];
            x = sn.right;
            lost = sn.color;
            if s == r {
                xp = s;
            } else {
                xp = sn.parent;
                self.nodes[xp as usize].left = x;
                if x != NIL {
                    self.nodes[x as usize].parent = xp;
                }
                self.nodes[s as usize].right = r;
                self.nodes[r as usize].parent = s;
            }
            moved = s;
            let sn = &mut self.nodes[s as usize];
            sn.left = l;
            sn.parent = p;
            sn.color = node.color;
            self.nodes[l as usize].parent = s;
            self.replace_child(p, z, s);
        }

        self.nodes[id] = Node::VACANT;
        self.len -= 1;
        if self.aug_kept() {
            self.refresh_after_remove(z, xp, moved);
            if lost == Color::Black {
                self.remove_fixup::<true>(x, xp);
            }
        } else if lost == Color::Black {
            self.remove_fixup::<false>(x, xp);
        }
        Ok(())
    }

    /// Whether the EEVDF augmentation is maintained (never without the `eevdf` feature). The
    /// rebalancing after an insert or a removal is compiled once for each answer, so CFS's
    /// paths carry none of the augmentation's checks.
    #[inline]
    fn aug_kept(&self) -> bool {
        #[cfg(feature = "eevdf")]
        return self.augmented;
        #[cfg(not(feature = "eevdf"))]
        false
    }

    /// The task to run next (smallest vruntime, earliest inserted among equals). O(1).
    #[inline]
    pub fn leftmost(&self) -> Option<usize> {
        Self::opt(self.leftmost)
    }

    /// In-order next queued id after `id`; `successor(leftmost)` is the
    /// second-leftmost, used for wakeup-preemption and buddy decisions.
    /// `None` if `id` is last or not queued.
    pub fn successor(&self, id: usize) -> Option<usize> {
        if !self.contains(id) {
            return None;
        }
        Self::opt(self.next_of(id as u32))
    }

    /// The queued task with the largest (vruntime, seq). O(log n).
    pub fn rightmost(&self) -> Option<usize> {
        let mut cur = self.root;
        if cur == NIL {
            return None;
        }
        loop {
            let r = self.nodes[cur as usize].right;
            if r == NIL {
                return Some(cur as usize);
            }
            cur = r;
        }
    }

    /// The vruntime `id` was queued with, or `None` if it is not queued.
    #[inline]
    pub fn vruntime_of(&self, id: usize) -> Option<u64> {
        self.nodes.get(id).filter(|n| n.color != Color::Vacant).map(|n| n.key)
    }

    /// In-order iterator over queued ids, leftmost first.
    pub fn iter(&self) -> Iter<'_, CAP> {
        Iter { timeline: self, next: self.leftmost, remaining: self.len }
    }
}

/// One tree's own part of a timeline: its root, its leftmost entry, its length and its
/// insertion counter. Trees can share one timeline's arena of slots, each entry on at most
/// one of them (a CPU's group runqueues each keep a head: docs/groups.md);
/// [`Timeline::with_head`] runs any operation on the tree a head names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineHead {
    root: u32,
    leftmost: u32,
    len: usize,
    next_seq: u64,
}

impl TimelineHead {
    /// The slot at its tree's root (`u32::MAX` when empty).
    #[cfg(feature = "groups")]
    pub(crate) const fn root_id(&self) -> u32 {
        self.root
    }

    /// An empty tree.
    pub const EMPTY: TimelineHead = TimelineHead { root: NIL, leftmost: NIL, len: 0, next_seq: 0 };

    /// Entries on this tree.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree has no entry.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for TimelineHead {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl<const CAP: usize> Default for Timeline<CAP> {
    fn default() -> Self {
        Self::new()
    }
}

/// Shows queued `id: vruntime` pairs in order; the arena itself is noise.
impl<const CAP: usize> fmt::Debug for Timeline<CAP> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter().map(|id| (id, self.nodes[id].key))).finish()
    }
}

impl<'a, const CAP: usize> IntoIterator for &'a Timeline<CAP> {
    type Item = usize;
    type IntoIter = Iter<'a, CAP>;

    fn into_iter(self) -> Iter<'a, CAP> {
        self.iter()
    }
}

/// In-order iterator over queued ids, from [`Timeline::iter`].
#[derive(Clone)]
pub struct Iter<'a, const CAP: usize> {
    timeline: &'a Timeline<CAP>,
    next: u32,
    remaining: usize,
}

impl<const CAP: usize> Iterator for Iter<'_, CAP> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.next == NIL {
            return None;
        }
        let id = self.next;
        self.next = self.timeline.next_of(id);
        self.remaining = self.remaining.saturating_sub(1);
        Some(id as usize)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<const CAP: usize> ExactSizeIterator for Iter<'_, CAP> {}

impl<const CAP: usize> FusedIterator for Iter<'_, CAP> {}
