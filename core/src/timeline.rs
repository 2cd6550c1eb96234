//! The per-CPU timeline: runnable tasks waiting for the CPU, ordered by vruntime.
//!
//! The task currently running is *not* in the timeline; it is taken out when
//! picked and put back (with its advanced vruntime) when preempted. The
//! leftmost entry is therefore the next task to run, and [`Timeline::leftmost`]
//! is O(1) because it is consulted on every tick.
//!
//! The structure is an AVL tree whose nodes live in a fixed arena of `CAP`
//! slots and are linked by `u32` indices. Slot ids are chosen by the caller,
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
/// Array-of-structs rather than struct-of-arrays because a descent touches
/// key and both links of each node it visits; with 32 bytes aligned to 32 a
/// node never straddles a cache line, so each step costs at most one miss.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(align(32))]
struct Node {
    /// vruntime, compared with [`vruntime_before`].
    key: u64,
    /// Insertion sequence number; breaks ties so equal keys stay FIFO.
    seq: u64,
    left: u32,
    right: u32,
    parent: u32,
    /// AVL height, leaves are 1. Zero means the slot is not queued, so the
    /// height doubles as the in-tree flag without costing another field.
    height: u8,
}

impl Node {
    const VACANT: Node = Node { key: 0, seq: 0, left: NIL, right: NIL, parent: NIL, height: 0 };
    const UNSET: Node = Node { key: 0, seq: 0, left: 0, right: 0, parent: 0, height: 0 };
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
#[derive(Clone, PartialEq, Eq)]
pub struct Timeline<const CAP: usize> {
    nodes: [Node; CAP],
    /// Per slot: its virtual deadline and its subtree's best entry (see [`Aug`]).
    #[cfg(feature = "eevdf")]
    aug: [Aug; CAP],
    /// Whether `aug` is maintained (EEVDF switched on).
    #[cfg(feature = "eevdf")]
    augmented: bool,
    root: u32,
    /// Cached in-order first node, kept up to date by insert and remove.
    leftmost: u32,
    len: usize,
    /// Sequence number for the next insert; every queued seq is before it.
    next_seq: u64,
}

impl<const CAP: usize> Timeline<CAP> {
    /// Rejects, at compile time, capacities whose ids would collide with `NIL`.
    const CAP_FITS_U32: () = assert!(CAP < NIL as usize, "Timeline CAP must be below u32::MAX");

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
        self.nodes.get(id).is_some_and(|n| n.height != 0)
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
        if node.height != 0 {
            return Err(TimelineError::AlreadyQueued);
        }
        let z = id as u32;

        // The new seq exceeds every queued seq, so among equal keys the new
        // node belongs rightmost: descend left only when strictly before.
        let mut parent = NIL;
        let mut cur = self.root;
        let mut go_left = false;
        let mut is_leftmost = true;
        while cur != NIL {
            parent = cur;
            let n = &self.nodes[cur as usize];
            go_left = vruntime_before(vruntime, n.key);
            if go_left {
                cur = n.left;
            } else {
                cur = n.right;
                is_leftmost = false;
            }
        }

        self.nodes[id] = Node { key: vruntime, seq: self.next_seq, left: NIL, right: NIL, parent, height: 1 };
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
            self.rebalance_after_insert::<true>(z, parent);
        } else {
            self.rebalance_after_insert::<false>(z, parent);
        }
        Ok(())
    }

    /// Remove a queued id. Worst case O(log n).
    pub fn remove(&mut self, id: usize) -> Result<(), TimelineError> {
        let node = *self.nodes.get(id).ok_or(TimelineError::IdOutOfRange)?;
        if node.height == 0 {
            return Err(TimelineError::NotQueued);
        }
        let z = id as u32;
        if self.leftmost == z {
            self.leftmost = self.next_of(z);
        }

        let (l, r, p) = (node.left, node.right, node.parent);
        // Deepest node whose subtree height may have changed.
        let fix_from;
        // The successor moved into z's place, if any.
        let mut moved = NIL;
        if l == NIL || r == NIL {
            let child = if l != NIL { l } else { r };
            if child != NIL {
                self.nodes[child as usize].parent = p;
            }
            self.replace_child(p, z, child);
            fix_from = p;
        } else {
            // Two children: relink the in-order successor `s` into z's place.
            // Ids are caller-owned, so nodes are moved, never their contents.
            let mut s = r;
            loop {
                let sl = self.nodes[s as usize].left;
                if sl == NIL {
                    break;
                }
                s = sl;
            }
            if s == r {
                fix_from = s;
            } else {
                let sp = self.nodes[s as usize].parent;
                let sr = self.nodes[s as usize].right;
                self.nodes[sp as usize].left = sr;
                if sr != NIL {
                    self.nodes[sr as usize].parent = sp;
                }
                self.nodes[s as usize].right = r;
                self.nodes[r as usize].parent = s;
                fix_from = sp;
            }
            moved = s;
            let sn = &mut self.nodes[s as usize];
            sn.left = l;
            sn.parent = p;
            // s inherits z's old height so the retrace's early stop compares
            // against the height this position had before the removal.
            sn.height = node.height;
            self.nodes[l as usize].parent = s;
            self.replace_child(p, z, s);
        }

        self.nodes[id] = Node::VACANT;
        self.len -= 1;
        if self.aug_kept() {
            self.rebalance_after_remove::<true>(z, fix_from, moved);
        } else {
            self.rebalance_after_remove::<false>(z, fix_from, moved);
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

    /// Heights, balance and (if `AUG`) subtree bests from a new leaf `z`'s parent up.
    #[inline]
    fn rebalance_after_insert<const AUG: bool>(&mut self, z: u32, parent: u32) {
        self.retrace::<AUG>(parent, NIL);
        #[cfg(feature = "eevdf")]
        if AUG {
            self.raise_best(z);
        }
        #[cfg(not(feature = "eevdf"))]
        let _ = z;
    }

    /// The subtree bests after new leaf `z`'s retrace. Every ancestor's subtree gained `z`
    /// alone, and holds its best without `z` (untouched, or re-derived by a rotation from
    /// children that had not seen `z`) or with it (a rotation that moved `z` or saw it); so
    /// each becomes the earlier of that and `z`, and once one keeps an entry before `z`,
    /// `z` is the best of no subtree above. One comparison per level, where recomputing a
    /// best from both children would take two and a copy.
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

    /// Heights, balance and (if `AUG`) subtree bests after removing `z`: from `fix_from`, the
    /// deepest node whose subtree lost a node, up; `moved` is the successor that took `z`'s
    /// place, if any.
    #[inline]
    fn rebalance_after_remove<const AUG: bool>(&mut self, z: u32, fix_from: u32, moved: u32) {
        // A successor moved into z's place holds its old subtree's best, and the retrace may
        // stop below it: bring the path up to it up to date first, and propagate above it too.
        if AUG && moved != NIL {
            let mut x = fix_from;
            while x != NIL {
                self.fix_aug::<AUG>(x);
                if x == moved {
                    break;
                }
                x = self.nodes[x as usize].parent;
            }
        }
        let rest = self.retrace::<AUG>(fix_from, z);
        self.propagate::<AUG>(rest, z);
        if moved != NIL {
            let above = self.nodes[moved as usize].parent;
            self.propagate::<AUG>(above, z);
        }
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
        self.nodes.get(id).filter(|n| n.height != 0).map(|n| n.key)
    }

    /// Switches the EEVDF augmentation on (rebuilt at once over the queued entries, O(n log n))
    /// or off (no longer maintained).
    #[cfg(feature = "eevdf")]
    pub fn set_augmented(&mut self, on: bool) {
        if on && !self.augmented {
            self.augmented = true;
            // Children before parents: by height, lowest first; every tree of the arena
            // (`with_head`), not only this one.
            let top = self.nodes.iter().map(|n| n.height).max().unwrap_or(0);
            for h in 1..=top {
                for x in 0..CAP {
                    if self.nodes[x].height == h {
                        self.fix_aug::<true>(x as u32);
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
        // Per slot: link symmetry, heights and balance. Heights strictly decrease along
        // child links, so once this passes the links form a forest and the walks of
        // `check_tree` must terminate.
        let mut queued = 0usize;
        for (i, n) in self.nodes.iter().enumerate() {
            let i = i as u32;
            if n.height == 0 {
                if n.left != NIL || n.right != NIL || n.parent != NIL {
                    return Err("vacant slot has links");
                }
                continue;
            }
            queued += 1;
            for child in [n.left, n.right] {
                if child != NIL {
                    let c = self.nodes.get(child as usize).ok_or("child link out of range")?;
                    if c.height == 0 {
                        return Err("child link to a vacant slot");
                    }
                    if c.parent != i {
                        return Err("child's parent link does not point back");
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
            } else {
                let p = self.nodes.get(n.parent as usize).ok_or("parent link out of range")?;
                if p.height == 0 {
                    return Err("parent link to a vacant slot");
                }
                if p.left != i && p.right != i {
                    return Err("parent does not link to node");
                }
            }
            let (hl, hr) = (self.height(n.left), self.height(n.right));
            if hl.abs_diff(hr) > 1 {
                return Err("AVL balance violated");
            }
            if u16::from(n.height) != 1 + u16::from(hl.max(hr)) {
                return Err("stored height is wrong");
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
            Some(n) if n.height != 0 && n.parent == NIL => {}
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
                        Some(bn) if bn.height != 0 && bn.key == b.1 && self.aug[b.2 as usize].deadline == b.0 => {}
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

    /// Height of a subtree; NIL is out of range, so the lookup doubles as the NIL test.
    #[inline]
    fn height(&self, x: u32) -> u8 {
        self.nodes.get(x as usize).map_or(0, |n| n.height)
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

    #[inline]
    fn update_height<const AUG: bool>(&mut self, x: u32) {
        let n = self.nodes[x as usize];
        self.nodes[x as usize].height = 1 + self.height(n.left).max(self.height(n.right));
        self.fix_aug::<AUG>(x);
    }

    /// Recomputes `x`'s subtree best from its own entry and its children's (if `AUG`, which
    /// is never true without the `eevdf` feature).
    #[inline(always)]
    fn fix_aug<const AUG: bool>(&mut self, x: u32) {
        #[cfg(feature = "eevdf")]
        if AUG {
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
        #[cfg(not(feature = "eevdf"))]
        let _ = x;
    }

    /// Refreshes the subtree bests from `x` up towards the root after removing `z` (from
    /// where the retrace stopped; O(log n), EEVDF only). Everything below `x` is up to date and
    /// each subtree from `x` up lost `z` alone, so a best changes only where it was `z`; and
    /// where it was not, `z` was the best of no subtree above, so the walk stops there.
    #[inline]
    fn propagate<const AUG: bool>(&mut self, mut x: u32, z: u32) {
        #[cfg(feature = "eevdf")]
        if AUG {
            while x != NIL && self.aug[x as usize].best == z {
                self.fix_aug::<AUG>(x);
                x = self.nodes[x as usize].parent;
            }
        }
        #[cfg(not(feature = "eevdf"))]
        let _ = (&mut x, z);
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
        self.update_height::<AUG>(x);
        self.update_height::<AUG>(y);
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
        self.update_height::<AUG>(x);
        self.update_height::<AUG>(y);
        y
    }

    /// Restore heights and balance from `x` up (and, after a removal, the EEVDF augmentation
    /// of the nodes it passes). Stops as soon as a subtree keeps its previous height, since no
    /// height or balance above it can have changed; that bounds the work to O(log n) and
    /// usually to a few levels. Returns where it stopped: the parent of the last node it
    /// fixed (NIL at the root), from which only the augmentation may still need refreshing.
    ///
    /// `removed`: the entry a removal took out, or NIL after an insert. Rotations refresh
    /// the nodes they move either way. After a removal a node passed is refreshed only where
    /// its best was `removed` (its subtree lost that entry alone, or the successor, whose
    /// path the caller refreshed first); after an insert none is, and the caller raises the
    /// bests once the heights are done ([`Self::rebalance_after_insert`]).
    fn retrace<const AUG: bool>(&mut self, mut x: u32, removed: u32) -> u32 {
        #[cfg(not(feature = "eevdf"))]
        let _ = removed;
        while x != NIL {
            let old = self.nodes[x as usize].height;
            let (l, r) = (self.nodes[x as usize].left, self.nodes[x as usize].right);
            let (hl, hr) = (self.height(l), self.height(r));
            let top = if hl > hr + 1 {
                let ln = self.nodes[l as usize];
                if self.height(ln.left) < self.height(ln.right) {
                    self.rotate_left::<AUG>(l);
                }
                self.rotate_right::<AUG>(x)
            } else if hr > hl + 1 {
                let rn = self.nodes[r as usize];
                if self.height(rn.right) < self.height(rn.left) {
                    self.rotate_right::<AUG>(r);
                }
                self.rotate_left::<AUG>(x)
            } else {
                self.nodes[x as usize].height = 1 + hl.max(hr);
                #[cfg(feature = "eevdf")]
                if AUG && removed != NIL && self.aug[x as usize].best == removed {
                    self.fix_aug::<AUG>(x);
                }
                x
            };
            let tn = &self.nodes[top as usize];
            if tn.height == old {
                return tn.parent;
            }
            x = tn.parent;
        }
        NIL
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
        // AVL bound: height < 1.4405 log2(n + 2) − 0.3277 (a leaf has height 1); for the
        // 526 nodes left here that is 12.70, so at most 12. No binary tree of 526 nodes is
        // lower than ceil(log2(527)) = 10, which is what this sequence reaches.
        let (h, n) = (t.height(t.root), t.len());
        let bound = 1.4405 * ((n + 2) as f64).log2() - 0.3277;
        assert!((h as f64) < bound, "height {h} for {n} nodes exceeds the AVL bound {bound}");
        assert_eq!((n, h), (526, 10));
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
        bad.nodes[r].height += 1;
        assert!(bad.check().is_err());

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
