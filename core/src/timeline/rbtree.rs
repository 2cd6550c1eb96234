//! The red-black tree under the timeline: links, colours, the in-order successor, and the
//! rotations and fixups that keep the tree balanced after an insert or a removal.

use super::{Color, Timeline, NIL};

impl<const CAP: usize> Timeline<CAP> {
    // ---- internals; all ids passed here are queued nodes or NIL ----

    #[inline]
    pub(super) fn opt(x: u32) -> Option<usize> {
        if x == NIL {
            None
        } else {
            Some(x as usize)
        }
    }

    /// Whether `x` is a red node; NIL is out of range, so the lookup doubles as the NIL test
    /// (a missing child counts as black).
    #[inline]
    pub(super) fn is_red(&self, x: u32) -> bool {
        self.nodes.get(x as usize).is_some_and(|n| n.color == Color::Red)
    }

    /// Sets queued node `x`'s colour (NIL: nothing).
    #[inline]
    pub(super) fn paint(&mut self, x: u32, c: Color) {
        if let Some(n) = self.nodes.get_mut(x as usize) {
            n.color = c;
        }
    }

    /// In-order successor via parent links; amortised O(1) across a full walk.
    pub(super) fn next_of(&self, x: u32) -> u32 {
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
    pub(super) fn replace_child(&mut self, p: u32, old: u32, new: u32) {
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

    /// Rotate `x`'s right child up into `x`'s place; returns the new subtree root.
    pub(super) fn rotate_left<const AUG: bool>(&mut self, x: u32) -> u32 {
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
    pub(super) fn rotate_right<const AUG: bool>(&mut self, x: u32) -> u32 {
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
    pub(super) fn insert_fixup<const AUG: bool>(&mut self, mut z: u32) {
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
    pub(super) fn remove_fixup<const AUG: bool>(&mut self, mut x: u32, mut xp: u32) {
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
