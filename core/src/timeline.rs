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

use core::fmt;
use core::iter::FusedIterator;

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

    /// The subtree bests after new leaf `z` is linked, before any rotation. Every ancestor's
    /// subtree gained `z` alone and holds its best without it; so each becomes the earlier of
    /// that and `z`, and once one keeps an entry before `z`, `z` is the best of no subtree
    /// above. One comparison per level, where recomputing a best from both children would
    /// take two and a copy. (The rotations that follow re-derive the nodes they move from
    /// children already up to date.)
    #[cfg(feature = "eevdf")]
    fn raise_best(&mut self, z: u32) {
        let cand = self.own(z);
        let mut x = self.nodes[z as usize].parent;
        while x != NIL {
            let b = self.subtree_best(x);
            if b.2 != z && !self.before(cand, b) {
                return;
            }
            let a = &mut self.aug[x as usize];
            (a.best_deadline, a.best_key, a.best) = cand;
            x = self.nodes[x as usize].parent;
        }
    }

    /// The subtree bests after `z` was unlinked, before any rotation: from `xp` (the deepest
    /// node whose subtree changed) up. Up to `moved` (the successor that took `z`'s place, if
    /// any) each subtree lost the successor, so each is re-derived; above, each lost `z`
    /// alone, so a best changes only where it was `z`, and where it was not, `z` was the best
    /// of no subtree above, so the walk stops there. O(log n), EEVDF only.
    #[cfg(feature = "eevdf")]
    fn refresh_after_remove(&mut self, z: u32, xp: u32, moved: u32) {
        let mut x = xp;
        let mut above_moved = moved == NIL;
        while x != NIL {
            if above_moved && self.aug[x as usize].best != z {
                return;
            }
            self.fix_aug(x);
            above_moved |= x == moved;
            x = self.nodes[x as usize].parent;
        }
    }

    #[cfg(not(feature = "eevdf"))]
    fn refresh_after_remove(&mut self, _z: u32, _xp: u32, _moved: u32) {}

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

    /// Switches the EEVDF augmentation on (rebuilt at once over the queued entries, O(n log n))
    /// or off (no longer maintained).
    #[cfg(feature = "eevdf")]
    pub fn set_augmented(&mut self, on: bool) {
        if on && !self.augmented {
            self.augmented = true;
            // Children before parents: by depth, deepest first; every tree of the arena
            // (`with_head`), not only this one.
            let top = (0..CAP as u32).filter_map(|x| self.depth(x)).max().unwrap_or(0);
            for d in (0..=top).rev() {
                for x in 0..CAP as u32 {
                    if self.depth(x) == Some(d) {
                        self.fix_aug(x);
                    }
                }
            }
        }
        self.augmented = on;
    }

    /// Whether the EEVDF augmentation is maintained.
    #[cfg(feature = "eevdf")]
    pub fn augmented(&self) -> bool {
        self.augmented
    }

    /// The virtual deadline `id` was queued with, or `None` if it is not queued.
    #[cfg(feature = "eevdf")]
    pub fn deadline_of(&self, id: usize) -> Option<u64> {
        self.contains(id).then(|| self.aug[id].deadline)
    }

    /// EEVDF's pick: among the queued entries whose vruntime is `eligible`, the one with the
    /// earliest virtual deadline (ties: smaller vruntime, then earlier insertion). `eligible`
    /// must hold for every vruntime up to some point and for none after it (as "lag ≥ 0"
    /// does), so that eligibility is decided per subtree. O(log n); `None` if none is
    /// eligible or the augmentation is off.
    #[cfg(feature = "eevdf")]
    pub fn pick_eligible(&self, eligible: impl Fn(u64) -> bool) -> Option<usize> {
        if !self.augmented {
            return None;
        }
        // The best candidate seen: an eligible node alone, or a whole eligible subtree (a
        // left subtree of an eligible node), by its best entry.
        let mut best = NIL;
        let mut best_c = (0, 0, NIL);
        let mut node = self.root;
        while node != NIL {
            let n = self.nodes[node as usize];
            if !eligible(n.key) {
                // Everything to the right is later still, so ineligible too.
                node = n.left;
                continue;
            }
            // `node` and its whole left subtree are eligible.
            let mut cand = self.own(node);
            if n.left != NIL {
                let lb = self.subtree_best(n.left);
                if self.before(lb, cand) {
                    cand = lb;
                }
            }
            if best == NIL || self.before(cand, best_c) {
                best = cand.2;
                best_c = cand;
            }
            // Only the right subtree may hold something better.
            match n.right {
                r if r != NIL && self.before(self.subtree_best(r), best_c) => node = r,
                _ => break,
            }
        }
        Self::opt(best)
    }

    /// Queued entry `x` as an EEVDF candidate: (deadline, vruntime, id).
    #[cfg(feature = "eevdf")]
    #[inline]
    fn own(&self, x: u32) -> (u64, u64, u32) {
        (self.aug[x as usize].deadline, self.nodes[x as usize].key, x)
    }

    /// The best entry of the subtree rooted at `x`, as a candidate.
    #[cfg(feature = "eevdf")]
    #[inline]
    fn subtree_best(&self, x: u32) -> (u64, u64, u32) {
        let a = &self.aug[x as usize];
        (a.best_deadline, a.best_key, a.best)
    }

    /// Whether candidate `a` comes before `b` in the EEVDF order (deadline, vruntime, seq);
    /// only a tie of both looks at the entries' insertion order.
    #[cfg(feature = "eevdf")]
    #[inline]
    fn before(&self, a: (u64, u64, u32), b: (u64, u64, u32)) -> bool {
        if a.0 != b.0 {
            return vruntime_before(a.0, b.0);
        }
        if a.1 != b.1 {
            return vruntime_before(a.1, b.1);
        }
        vruntime_before(self.nodes[a.2 as usize].seq, self.nodes[b.2 as usize].seq)
    }

    /// In-order iterator over queued ids, leftmost first.
    pub fn iter(&self) -> Iter<'_, CAP> {
        Iter { timeline: self, next: self.leftmost, remaining: self.len }
    }

    /// Full structural check for tests and a debug invariant checker: BST order under the
    /// (vruntime, seq) order, balance invariant, parent links, len, cached leftmost, in-tree flags.
    ///
    /// Also reports queued keys spanning 2^63 or more, where the wrap-safe
    /// order stops being consistent. O(CAP); never panics, even on a
    /// corrupted structure.
    pub fn check(&self) -> Result<(), &'static str> {
        self.check_nodes(|i| i == self.root, self.len)?;
        self.check_tree()
    }

    /// Pass 1 of [`Timeline::check`] over the whole arena, which may hold several trees
    /// ([`Timeline::with_head`]): `is_root` says which nodes head a tree, `total` how many
    /// entries all the trees hold.
    pub(crate) fn check_nodes(&self, is_root: impl Fn(u32) -> bool, total: usize) -> Result<(), &'static str> {
        // Per slot: link symmetry, colours, and parent chains that end at a root within CAP
        // steps. With the symmetry, acyclic parent links make the child links a forest, so
        // the walks below and in `check_tree` must terminate.
        let mut queued = 0usize;
        for (i, n) in self.nodes.iter().enumerate() {
            let i = i as u32;
            if n.color == Color::Vacant {
                if n.left != NIL || n.right != NIL || n.parent != NIL {
                    return Err("vacant slot has links");
                }
                continue;
            }
            queued += 1;
            for child in [n.left, n.right] {
                if child != NIL {
                    let c = self.nodes.get(child as usize).ok_or("child link out of range")?;
                    if c.color == Color::Vacant {
                        return Err("child link to a vacant slot");
                    }
                    if c.parent != i {
                        return Err("child's parent link does not point back");
                    }
                    if n.color == Color::Red && c.color == Color::Red {
                        return Err("a red node has a red child");
                    }
                }
            }
            if n.left != NIL && n.left == n.right {
                return Err("left and right link to the same node");
            }
            if n.parent == NIL {
                if !is_root(i) {
                    return Err("parentless queued node is not the root");
                }
                if n.color != Color::Black {
                    return Err("a root is red");
                }
            } else {
                let p = self.nodes.get(n.parent as usize).ok_or("parent link out of range")?;
                if p.color == Color::Vacant {
                    return Err("parent link to a vacant slot");
                }
                if p.left != i && p.right != i {
                    return Err("parent does not link to node");
                }
            }
            if self.depth(i).is_none() {
                return Err("parent links form a cycle");
            }
        }
        // Black heights: every path from a root down to a missing child passes as many black
        // nodes as its tree's leftmost path does.
        for i in 0..CAP as u32 {
            let n = &self.nodes[i as usize];
            if n.color == Color::Vacant || (n.left != NIL && n.right != NIL) {
                continue;
            }
            let (root, blacks) = self.blacks_above(i);
            let mut first = root;
            while self.nodes[first as usize].left != NIL {
                first = self.nodes[first as usize].left;
            }
            if self.blacks_above(first).1 != blacks {
                return Err("black heights differ");
            }
        }
        if queued != total {
            return Err("len does not match number of queued slots");
        }
        Ok(())
    }

    /// Pass 2 of [`Timeline::check`], on the tree in use: its root, the in-order walk, its
    /// cached leftmost and length, its sequence numbers and (EEVDF) its augmentation.
    pub(crate) fn check_tree(&self) -> Result<(), &'static str> {
        if self.len == 0 {
            if self.root != NIL {
                return Err("empty timeline has a root");
            }
            if self.leftmost != NIL {
                return Err("empty timeline has a cached leftmost");
            }
            return Ok(());
        }
        match self.nodes.get(self.root as usize) {
            Some(n) if n.color != Color::Vacant && n.parent == NIL => {}
            _ => return Err("root is not a queued parentless node"),
        }

        // Pass 2: in-order walk; adjacent pairs must be strictly increasing
        // and the summed key steps must stay below 2^63.
        let mut first = self.root;
        loop {
            let l = self.nodes[first as usize].left;
            if l == NIL {
                break;
            }
            first = l;
        }
        if first != self.leftmost {
            return Err("cached leftmost is not the in-order first node");
        }
        if !vruntime_before(self.nodes[first as usize].seq, self.next_seq) {
            return Err("seq not before next_seq");
        }
        let mut visited = 1usize;
        let mut span = 0u64;
        let mut prev = first;
        let mut cur = self.next_of(first);
        while cur != NIL {
            visited += 1;
            if visited > self.len {
                return Err("in-order walk visits more than len nodes");
            }
            let (a, b) = (&self.nodes[prev as usize], &self.nodes[cur as usize]);
            if !vruntime_before(b.seq, self.next_seq) {
                return Err("seq not before next_seq");
            }
            let step = b.key.wrapping_sub(a.key);
            if step as i64 >= 0 {
                if step == 0 && !vruntime_before(a.seq, b.seq) {
                    return Err("equal keys not in insertion order");
                }
            } else {
                return Err("in-order keys not ascending");
            }
            span = match span.checked_add(step) {
                Some(s) if s <= i64::MAX as u64 => s,
                _ => return Err("queued keys span 2^63 or more"),
            };
            prev = cur;
            cur = self.next_of(cur);
        }
        if visited != self.len {
            return Err("not every queued node is reachable from the root");
        }
        #[cfg(feature = "eevdf")]
        if self.augmented {
            for x in self.iter() {
                let n = &self.nodes[x];
                let mut best = self.own(x as u32);
                for c in [n.left, n.right] {
                    if c == NIL {
                        continue;
                    }
                    let b = self.subtree_best(c);
                    match self.nodes.get(b.2 as usize) {
                        Some(bn) if bn.color != Color::Vacant && bn.key == b.1 && self.aug[b.2 as usize].deadline == b.0 => {}
                        _ => return Err("a subtree's earliest-deadline entry is not queued as cached"),
                    }
                    if self.before(b, best) {
                        best = b;
                    }
                }
                if self.subtree_best(x as u32) != best {
                    return Err("a subtree's earliest-deadline entry is stale");
                }
            }
        }
        Ok(())
    }

    // ---- internals; all ids passed here are queued nodes or NIL ----

    #[inline]
    fn opt(x: u32) -> Option<usize> {
        if x == NIL {
            None
        } else {
            Some(x as usize)
        }
    }

    /// Whether `x` is a red node; NIL is out of range, so the lookup doubles as the NIL test
    /// (a missing child counts as black).
    #[inline]
    fn is_red(&self, x: u32) -> bool {
        self.nodes.get(x as usize).is_some_and(|n| n.color == Color::Red)
    }

    /// Sets queued node `x`'s colour (NIL: nothing).
    #[inline]
    fn paint(&mut self, x: u32, c: Color) {
        if let Some(n) = self.nodes.get_mut(x as usize) {
            n.color = c;
        }
    }

    /// How many parent links lead from queued node `x` to its tree's root, or `None` if `x`
    /// is vacant or the chain does not end within CAP links (a corrupted arena).
    fn depth(&self, x: u32) -> Option<usize> {
        if self.nodes.get(x as usize)?.color == Color::Vacant {
            return None;
        }
        let mut d = 0;
        let mut y = x;
        while self.nodes[y as usize].parent != NIL {
            y = self.nodes[y as usize].parent;
            d += 1;
            if d > CAP || y as usize >= CAP {
                return None;
            }
        }
        Some(d)
    }

    /// The root above queued node `x` and the black nodes from `x` up to it, both included
    /// (on a forest: [`Timeline::check_nodes`] checks the chains first).
    fn blacks_above(&self, x: u32) -> (u32, usize) {
        let (mut y, mut blacks) = (x, 0);
        loop {
            let n = &self.nodes[y as usize];
            blacks += (n.color == Color::Black) as usize;
            if n.parent == NIL {
                return (y, blacks);
            }
            y = n.parent;
        }
    }

    /// In-order successor via parent links; amortised O(1) across a full walk.
    fn next_of(&self, x: u32) -> u32 {
        let n = &self.nodes[x as usize];
        if n.right != NIL {
            let mut cur = n.right;
            loop {
                let l = self.nodes[cur as usize].left;
                if l == NIL {
                    return cur;
                }
                cur = l;
            }
        }
        let mut child = x;
        let mut up = n.parent;
        while up != NIL && self.nodes[up as usize].right == child {
            child = up;
            up = self.nodes[up as usize].parent;
        }
        up
    }

    /// Point `p`'s link (or the root) that referred to `old` at `new`.
    #[inline]
    fn replace_child(&mut self, p: u32, old: u32, new: u32) {
        if p == NIL {
            self.root = new;
        } else {
            let pn = &mut self.nodes[p as usize];
            if pn.left == old {
                pn.left = new;
            } else {
                pn.right = new;
            }
        }
    }

    /// Recomputes `x`'s subtree best from its own entry and its children's.
    #[cfg(feature = "eevdf")]
    #[inline(always)]
    fn fix_aug(&mut self, x: u32) {
        let n = self.nodes[x as usize];
        let mut best = self.own(x);
        for c in [n.left, n.right] {
            if c != NIL {
                let b = self.subtree_best(c);
                if self.before(b, best) {
                    best = b;
                }
            }
        }
        let a = &mut self.aug[x as usize];
        (a.best_deadline, a.best_key, a.best) = best;
    }

    /// After a rotation that put `y` in `x`'s place: `y`'s subtree holds the entries `x`'s
    /// held, so it takes `x`'s best as it was, and only `x` (now below) is recomputed. Every
    /// caller rotates with the bests up to date, as the insert and remove fixups do.
    #[inline(always)]
    fn rotated_aug<const AUG: bool>(&mut self, x: u32, y: u32) {
        #[cfg(feature = "eevdf")]
        if AUG {
            let Aug { best_deadline, best_key, best, .. } = self.aug[x as usize];
            let a = &mut self.aug[y as usize];
            (a.best_deadline, a.best_key, a.best) = (best_deadline, best_key, best);
            self.fix_aug(x);
        }
        #[cfg(not(feature = "eevdf"))]
        let _ = (x, y);
    }

    /// Rotate `x`'s right child up into `x`'s place; returns the new subtree root.
    fn rotate_left<const AUG: bool>(&mut self, x: u32) -> u32 {
        let y = self.nodes[x as usize].right;
        let t = self.nodes[y as usize].left;
        let p = self.nodes[x as usize].parent;
        self.nodes[x as usize].right = t;
        if t != NIL {
            self.nodes[t as usize].parent = x;
        }
        self.nodes[y as usize].left = x;
        self.nodes[x as usize].parent = y;
        self.nodes[y as usize].parent = p;
        self.replace_child(p, x, y);
        self.rotated_aug::<AUG>(x, y);
        y
    }

    /// Mirror of [`Self::rotate_left`].
    fn rotate_right<const AUG: bool>(&mut self, x: u32) -> u32 {
        let y = self.nodes[x as usize].left;
        let t = self.nodes[y as usize].right;
        let p = self.nodes[x as usize].parent;
        self.nodes[x as usize].left = t;
        if t != NIL {
            self.nodes[t as usize].parent = x;
        }
        self.nodes[y as usize].right = x;
        self.nodes[x as usize].parent = y;
        self.nodes[y as usize].parent = p;
        self.replace_child(p, x, y);
        self.rotated_aug::<AUG>(x, y);
        y
    }

    /// Restores the red-black rules after new red leaf `z` was linked: a red parent is
    /// recoloured with a red uncle (the problem moves up two levels), or one or two rotations
    /// end it. O(1) amortised; rotations refresh (if `AUG`) the nodes they move.
    fn insert_fixup<const AUG: bool>(&mut self, mut z: u32) {
        loop {
            let p = self.nodes[z as usize].parent;
            if p == NIL {
                self.paint(z, Color::Black);
                return;
            }
            if !self.is_red(p) {
                return;
            }
            // A red parent is not the root, so it has a parent.
            let g = self.nodes[p as usize].parent;
            if g == NIL {
                self.paint(p, Color::Black);
                return;
            }
            let gn = self.nodes[g as usize];
            let p_left = gn.left == p;
            let uncle = if p_left { gn.right } else { gn.left };
            if self.is_red(uncle) {
                self.paint(p, Color::Black);
                self.paint(uncle, Color::Black);
                self.paint(g, Color::Red);
                z = g;
                continue;
            }
            // A black uncle: make z the outer grandchild, then rotate the parent up.
            let top = if p_left {
                let p = if self.nodes[p as usize].right == z { self.rotate_left::<AUG>(p) } else { p };
                self.rotate_right::<AUG>(g);
                p
            } else {
                let p = if self.nodes[p as usize].left == z { self.rotate_right::<AUG>(p) } else { p };
                self.rotate_left::<AUG>(g);
                p
            };
            self.paint(top, Color::Black);
            self.paint(g, Color::Red);
            return;
        }
    }

    /// Restores the red-black rules after a black node left the tree's shape: `x` (maybe
    /// NIL) under `xp` is a black short. A red `x` is painted black; otherwise its sibling is
    /// recoloured (the shortage moves up) or at most three rotations end it. O(1) amortised.
    fn remove_fixup<const AUG: bool>(&mut self, mut x: u32, mut xp: u32) {
        while xp != NIL && !self.is_red(x) {
            let x_left = self.nodes[xp as usize].left == x;
            let mut w = if x_left { self.nodes[xp as usize].right } else { self.nodes[xp as usize].left };
            if w == NIL {
                // (Impossible in a valid tree: x's side was a black taller.)
                break;
            }
            if self.is_red(w) {
                self.paint(w, Color::Black);
                self.paint(xp, Color::Red);
                if x_left {
                    self.rotate_left::<AUG>(xp);
                    w = self.nodes[xp as usize].right;
                } else {
                    self.rotate_right::<AUG>(xp);
                    w = self.nodes[xp as usize].left;
                }
            }
            let wn = self.nodes[w as usize];
            let (near, far) = if x_left { (wn.left, wn.right) } else { (wn.right, wn.left) };
            if !self.is_red(near) && !self.is_red(far) {
                self.paint(w, Color::Red);
                x = xp;
                xp = self.nodes[x as usize].parent;
                continue;
            }
            if !self.is_red(far) {
                // The near nephew is red: rotate it up to be the sibling.
                self.paint(near, Color::Black);
                self.paint(w, Color::Red);
                w = if x_left { self.rotate_right::<AUG>(w) } else { self.rotate_left::<AUG>(w) };
            }
            let far = if x_left { self.nodes[w as usize].right } else { self.nodes[w as usize].left };
            self.nodes[w as usize].color = self.nodes[xp as usize].color;
            self.paint(xp, Color::Black);
            self.paint(far, Color::Black);
            if x_left {
                self.rotate_left::<AUG>(xp);
            } else {
                self.rotate_right::<AUG>(xp);
            }
            return;
        }
        self.paint(x, Color::Black);
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

impl<const CAP: usize> Timeline<CAP> {
    /// Runs `f` on the tree `head` names, in this timeline's arena: the timeline's own tree
    /// is set aside meanwhile, and `head` keeps what `f` did. The arena does not know which
    /// tree an entry is on (`contains` answers for the arena): an entry is removed or looked
    /// up through the head of its own tree, which its owner knows (an entity, its runqueue).
    /// [`Timeline::check`] holds for an arena with one tree only.
    ///
    #[cfg_attr(feature = "internals", doc = "```")]
    #[cfg_attr(not(feature = "internals"), doc = "```ignore")]
    /// use sched_core::timeline::{Timeline, TimelineHead};
    /// let mut t: Timeline<8> = Timeline::new();
    /// let mut other = TimelineHead::EMPTY;
    /// t.insert(0, 10).unwrap();
    /// t.with_head(&mut other, |o| o.insert(1, 5)).unwrap();
    /// assert_eq!((t.leftmost(), t.len()), (Some(0), 1), "each tree its own entries");
    /// assert_eq!(t.with_head(&mut other, |o| o.leftmost()), Some(1));
    /// assert_eq!(other.len(), 1);
    /// ```
    pub fn with_head<R>(&mut self, head: &mut TimelineHead, f: impl FnOnce(&mut Self) -> R) -> R {
        self.swap_head(head);
        let r = f(self);
        self.swap_head(head);
        r
    }

    /// The slot at the root of the tree in use (`u32::MAX` when empty).
    #[cfg(feature = "groups")]
    pub(crate) const fn root_id(&self) -> u32 {
        self.root
    }

    /// Exchanges the tree in use with the one `h` names (an involution: twice is nothing).
    pub(crate) fn swap_head(&mut self, h: &mut TimelineHead) {
        core::mem::swap(&mut self.root, &mut h.root);
        core::mem::swap(&mut self.leftmost, &mut h.leftmost);
        core::mem::swap(&mut self.len, &mut h.len);
        core::mem::swap(&mut self.next_seq, &mut h.next_seq);
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

#[cfg(test)]
mod tests {
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
        assert!(bad.check().is_err());

        let mut bad = t.clone();
        bad.leftmost = 2;
        assert!(bad.check().is_err());

        let mut bad = t.clone();
        bad.len += 1;
        assert!(bad.check().is_err());

        let mut bad = t.clone();
        let r = bad.root as usize;
        bad.nodes[r].color = Color::Red;
        assert!(bad.check().is_err(), "a red root");

        // Blackening one leaf, or reddening a red node's child, breaks the colour rules.
        let reds: Vec<usize> = (0..6).filter(|&i| t.nodes[i].color == Color::Red).collect();
        let mut bad = t.clone();
        let leaf = (0..6).find(|&i| t.nodes[i].left == NIL && t.nodes[i].right == NIL && t.nodes[i].color == Color::Red);
        if let Some(leaf) = leaf {
            bad.nodes[leaf].color = Color::Black;
            assert_eq!(bad.check(), Err("black heights differ"));
        }
        assert!(!reds.is_empty() || leaf.is_none());
        let mut bad = t.clone();
        if let Some(&red) = reds.first() {
            bad.nodes[bad.nodes[red].parent as usize].color = Color::Red;
            assert!(bad.check().is_err());
        }

        let mut bad = t.clone();
        let (a, b) = (bad.root, bad.nodes[bad.root as usize].left);
        bad.nodes[a as usize].parent = b;
        assert!(bad.check().is_err(), "a cycle of parent links");

        let mut bad = t.clone();
        let r = bad.root as usize;
        bad.nodes[r].left = 77;
        assert!(bad.check().is_err());

        let mut bad = t.clone();
        bad.nodes[7].parent = 0;
        assert!(bad.check().is_err());

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
    /// removals and switches of the augmentation, with the structure checked after each step.
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
            } else if t.contains(id) {
                t.remove(id).unwrap();
                queued.retain(|q| q.0 != id);
            } else {
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
}
