//! The timeline's structural check: every invariant the tree, its cached fields and its
//! augmentation must hold, verified without trusting any of them; and a node's depth, which
//! the augmentation's rebuild uses too.

use super::{vruntime_before, Color, Timeline, NIL};

impl<const CAP: usize> Timeline<CAP> {
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

    /// How many parent links lead from queued node `x` to its tree's root, or `None` if `x`
    /// is vacant or the chain does not end within CAP links (a corrupted arena).
    pub(super) fn depth(&self, x: u32) -> Option<usize> {
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
    pub(super) fn blacks_above(&self, x: u32) -> (u32, usize) {
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
}
