//! The EEVDF augmentation of the timeline: each slot's virtual deadline and its subtree's
//! earliest-deadline entry, kept up through inserts, removals and rotations, and the pick
//! that descends by them.

use super::Timeline;
#[cfg(feature = "eevdf")]
use super::{vruntime_before, Aug, NIL};

impl<const CAP: usize> Timeline<CAP> {
    /// The subtree bests after new leaf `z` is linked, before any rotation. Every ancestor's
    /// subtree gained `z` alone and holds its best without it; so each becomes the earlier of
    /// that and `z`, and once one keeps an entry before `z`, `z` is the best of no subtree
    /// above. One comparison per level, where recomputing a best from both children would
    /// take two and a copy. (The rotations that follow re-derive the nodes they move from
    /// children already up to date.)
    #[cfg(feature = "eevdf")]
    pub(super) fn raise_best(&mut self, z: u32) {
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
    pub(super) fn refresh_after_remove(&mut self, z: u32, xp: u32, moved: u32) {
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
    pub(super) fn refresh_after_remove(&mut self, _z: u32, _xp: u32, _moved: u32) {}

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

    /// Gives the queued `id` a new virtual deadline, its place unchanged; the subtree bests
    /// above it follow. O(log n). An `id` not queued is
    /// [`TimelineError::NotQueued`](super::TimelineError::NotQueued).
    #[cfg(feature = "eevdf")]
    pub fn set_deadline(&mut self, id: usize, deadline: u64) -> Result<(), super::TimelineError> {
        if !self.contains(id) {
            return Err(super::TimelineError::NotQueued);
        }
        self.aug[id].deadline = deadline;
        if self.augmented {
            let mut x = id as u32;
            while x != NIL {
                self.fix_aug(x);
                x = self.nodes[x as usize].parent;
            }
        }
        Ok(())
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
    pub(super) fn own(&self, x: u32) -> (u64, u64, u32) {
        (self.aug[x as usize].deadline, self.nodes[x as usize].key, x)
    }

    /// The best entry of the subtree rooted at `x`, as a candidate.
    #[cfg(feature = "eevdf")]
    #[inline]
    pub(super) fn subtree_best(&self, x: u32) -> (u64, u64, u32) {
        let a = &self.aug[x as usize];
        (a.best_deadline, a.best_key, a.best)
    }

    /// Whether candidate `a` comes before `b` in the EEVDF order (deadline, vruntime, seq);
    /// only a tie of both looks at the entries' insertion order.
    #[cfg(feature = "eevdf")]
    #[inline]
    pub(super) fn before(&self, a: (u64, u64, u32), b: (u64, u64, u32)) -> bool {
        if a.0 != b.0 {
            return vruntime_before(a.0, b.0);
        }
        if a.1 != b.1 {
            return vruntime_before(a.1, b.1);
        }
        vruntime_before(self.nodes[a.2 as usize].seq, self.nodes[b.2 as usize].seq)
    }

    /// Recomputes `x`'s subtree best from its own entry and its children's.
    #[cfg(feature = "eevdf")]
    #[inline(always)]
    pub(super) fn fix_aug(&mut self, x: u32) {
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
    pub(super) fn rotated_aug<const AUG: bool>(&mut self, x: u32, y: u32) {
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
}
