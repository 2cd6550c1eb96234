//! Several trees on one arena: a [`TimelineHead`] holds one tree's own fields while another
//! tree's are in the timeline, and [`Timeline::with_head`] swaps them in for one operation.

use super::{Timeline, TimelineHead};

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
