//! The hierarchy of task groups: a root and up to `G` groups under it, each with its parent,
//! depth, weight, bandwidth limit and how many tasks and child groups it holds. Every change
//! is checked first and leaves the table as it was when refused.

use super::bandwidth::CpuMax;
use super::shares::CpuWeight;
use super::GroupError;

/// How deep groups nest below the root: it bounds every walk up the hierarchy.
pub const MAX_GROUP_DEPTH: u8 = 8;

/// A group, by slot and generation (a deleted group's id stays stale when its slot is
/// reused, until that slot's 16-bit generation wraps). [`GroupId::ROOT`] is the root group,
/// which holds every task at first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct GroupId {
    slot: u16,
    gen: u16,
}

impl GroupId {
    /// The root group.
    pub const ROOT: GroupId = GroupId { slot: 0, gen: 0 };

    /// Its slot: 0 for the root, 1..=G for the others.
    pub const fn slot(self) -> usize {
        self.slot as usize
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    alive: bool,
    gen: u16,
    parent: u16,
    depth: u8,
    weight: CpuWeight,
    max: CpuMax,
    tasks: u32,
    children: u32,
}

impl Entry {
    const FREE: Entry = Entry {
        alive: false,
        gen: 0,
        parent: 0,
        depth: 0,
        weight: CpuWeight::DEFAULT,
        max: CpuMax::UNLIMITED,
        tasks: 0,
        children: 0,
    };
}

/// The root and `G` group slots.
///
/// ```
/// use sched_core::group::{shares::CpuWeight, tree::{GroupId, Groups}, GroupError};
/// let mut g: Groups<4> = Groups::new();
/// let a = g.create(GroupId::ROOT, CpuWeight::new(50).unwrap()).unwrap();
/// let b = g.create(a, CpuWeight::DEFAULT).unwrap();
/// assert_eq!(g.ancestors(b).collect::<Vec<_>>(), [b, a, GroupId::ROOT]);
/// assert_eq!(g.delete(a), Err(GroupError::NotEmpty));
/// assert_eq!(g.reparent(a, b), Err(GroupError::Cycle));
/// g.delete(b).unwrap();
/// assert_eq!(g.weight(b), Err(GroupError::UnknownGroup));
/// ```
#[derive(Debug, Clone)]
pub struct Groups<const G: usize> {
    /// Slot 0 is the root; 1..=G the groups.
    entries: [Entry; G],
    root: Entry,
}

impl<const G: usize> Groups<G> {
    /// The root alone. (`G` below `u16::MAX`: slots are 16-bit.)
    pub const fn new() -> Groups<G> {
        assert!(G < u16::MAX as usize, "a group slot is 16 bits");
        Groups { entries: [Entry::FREE; G], root: Entry { alive: true, ..Entry::FREE } }
    }

    fn entry(&self, g: GroupId) -> Result<&Entry, GroupError> {
        let e = match g.slot {
            0 => &self.root,
            s => self.entries.get(s as usize - 1).ok_or(GroupError::UnknownGroup)?,
        };
        if e.alive && e.gen == g.gen {
            Ok(e)
        } else {
            Err(GroupError::UnknownGroup)
        }
    }

    fn entry_mut(&mut self, g: GroupId) -> Result<&mut Entry, GroupError> {
        self.entry(g)?;
        Ok(match g.slot {
            0 => &mut self.root,
            s => &mut self.entries[s as usize - 1],
        })
    }

    /// The id of the group in `slot` (0: the root), whether or not it is alive.
    pub(crate) fn id_of_slot(&self, slot: u16) -> GroupId {
        self.id(slot)
    }

    fn id(&self, slot: u16) -> GroupId {
        let gen = if slot == 0 { 0 } else { self.entries[slot as usize - 1].gen };
        GroupId { slot, gen }
    }

    /// A new group under `parent`, of weight `weight` and no bandwidth limit.
    pub fn create(&mut self, parent: GroupId, weight: CpuWeight) -> Result<GroupId, GroupError> {
        let depth = self.entry(parent)?.depth + 1;
        if depth > MAX_GROUP_DEPTH {
            return Err(GroupError::TooDeep);
        }
        let slot = self.entries.iter().position(|e| !e.alive).ok_or(GroupError::TableFull)?;
        let gen = self.entries[slot].gen;
        self.entries[slot] = Entry { alive: true, gen, parent: parent.slot, depth, weight, ..Entry::FREE };
        self.entry_mut(parent)?.children += 1;
        Ok(GroupId { slot: slot as u16 + 1, gen })
    }

    /// Deletes `g`, which must hold no task and no group.
    pub fn delete(&mut self, g: GroupId) -> Result<(), GroupError> {
        let e = *self.entry(g)?;
        if g.slot == 0 {
            return Err(GroupError::Root);
        }
        if e.tasks != 0 || e.children != 0 {
            return Err(GroupError::NotEmpty);
        }
        let parent = self.id(e.parent);
        self.entry_mut(parent)?.children -= 1;
        let slot = &mut self.entries[g.slot as usize - 1];
        *slot = Entry { gen: slot.gen.wrapping_add(1), ..Entry::FREE };
        Ok(())
    }

    /// Moves `g` and its subtree under `parent`: refused if `parent` is in that subtree, or
    /// if the subtree would nest deeper than [`MAX_GROUP_DEPTH`].
    pub fn reparent(&mut self, g: GroupId, parent: GroupId) -> Result<(), GroupError> {
        let e = *self.entry(g)?;
        let p = *self.entry(parent)?;
        if g.slot == 0 {
            return Err(GroupError::Root);
        }
        if self.ancestors(parent).any(|a| a == g) {
            return Err(GroupError::Cycle);
        }
        let below = self.subtree_height(g.slot);
        if p.depth as u32 + 1 + below as u32 > MAX_GROUP_DEPTH as u32 {
            return Err(GroupError::TooDeep);
        }
        let old = self.id(e.parent);
        self.entry_mut(old)?.children -= 1;
        self.entry_mut(parent)?.children += 1;
        self.entries[g.slot as usize - 1].parent = parent.slot;
        self.redepth(g.slot, p.depth + 1);
        Ok(())
    }

    /// Whether the group in slot `i + 1` is group slot `s` or hangs below it.
    fn in_subtree(&self, i: usize, s: u16) -> bool {
        self.entries[i].alive && self.ancestors(self.id(i as u16 + 1)).any(|a| a.slot == s)
    }

    /// How many levels hang below group slot `s` (0: none).
    fn subtree_height(&self, s: u16) -> u8 {
        let top = self.entries[s as usize - 1].depth;
        (0..G).filter(|&i| self.in_subtree(i, s)).map(|i| self.entries[i].depth - top).max().unwrap_or(0)
    }

    /// Gives group slot `s` depth `d` and its subtree the depths below it.
    fn redepth(&mut self, s: u16, d: u8) {
        let delta = d as i16 - self.entries[s as usize - 1].depth as i16;
        for i in 0..G {
            if self.in_subtree(i, s) {
                let e = &mut self.entries[i];
                e.depth = (e.depth as i16 + delta) as u8;
            }
        }
    }

    /// Group `g`'s entry to change, refused for the root (which has no weight or limit).
    fn non_root_mut(&mut self, g: GroupId) -> Result<&mut Entry, GroupError> {
        self.entry(g)?;
        if g.slot == 0 {
            return Err(GroupError::Root);
        }
        self.entry_mut(g)
    }

    /// Sets `g`'s weight (the root has none).
    pub fn set_weight(&mut self, g: GroupId, w: CpuWeight) -> Result<(), GroupError> {
        self.non_root_mut(g)?.weight = w;
        Ok(())
    }

    /// Sets or clears `g`'s bandwidth limit (the root has none). cgroup v2's rule: a child's
    /// limit may exceed its parent's; the parent's still holds at run time.
    pub fn set_max(&mut self, g: GroupId, max: CpuMax) -> Result<(), GroupError> {
        self.non_root_mut(g)?.max = max;
        Ok(())
    }

    /// Counts a task moved into `g`.
    pub fn add_task(&mut self, g: GroupId) -> Result<(), GroupError> {
        self.entry_mut(g)?.tasks += 1;
        Ok(())
    }

    /// Counts a task moved out of `g` or exited.
    pub fn remove_task(&mut self, g: GroupId) -> Result<(), GroupError> {
        let e = self.entry_mut(g)?;
        e.tasks = e.tasks.checked_sub(1).ok_or(GroupError::NoTask)?;
        Ok(())
    }

    /// How many tasks `g` holds.
    pub fn tasks(&self, g: GroupId) -> Result<u32, GroupError> {
        Ok(self.entry(g)?.tasks)
    }

    /// How many groups `g` holds.
    pub fn children(&self, g: GroupId) -> Result<u32, GroupError> {
        Ok(self.entry(g)?.children)
    }

    /// `g`'s weight.
    pub fn weight(&self, g: GroupId) -> Result<CpuWeight, GroupError> {
        Ok(self.entry(g)?.weight)
    }

    /// `g`'s bandwidth limit.
    pub fn max(&self, g: GroupId) -> Result<CpuMax, GroupError> {
        Ok(self.entry(g)?.max)
    }

    /// `g`'s depth: 0 for the root.
    pub fn depth(&self, g: GroupId) -> Result<u8, GroupError> {
        Ok(self.entry(g)?.depth)
    }

    /// `g`'s parent (`None` for the root).
    pub fn parent(&self, g: GroupId) -> Result<Option<GroupId>, GroupError> {
        let e = self.entry(g)?;
        Ok((g.slot != 0).then(|| self.id(e.parent)))
    }

    /// `g`, its parent, and so on up to the root; nothing for an unknown group.
    pub fn ancestors(&self, g: GroupId) -> impl Iterator<Item = GroupId> + '_ {
        let mut next = self.entry(g).ok().map(|_| g);
        let mut steps = 0u8;
        core::iter::from_fn(move || {
            let cur = next?;
            steps += 1;
            next = if cur.slot == 0 || steps > MAX_GROUP_DEPTH {
                None
            } else {
                Some(self.id(self.entries[cur.slot as usize - 1].parent))
            };
            Some(cur)
        })
    }
}

impl<const G: usize> Default for Groups<G> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    /// Every refusal leaves the table as it was.
    #[test]
    fn refusals_leave_the_table_unchanged() {
        let mut g: Groups<2> = Groups::new();
        let a = g.create(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
        let b = g.create(a, CpuWeight::DEFAULT).unwrap();
        let before = std::format!("{g:?}");
        assert_eq!(g.create(GroupId::ROOT, CpuWeight::DEFAULT), Err(GroupError::TableFull));
        assert_eq!(g.delete(GroupId::ROOT), Err(GroupError::Root));
        assert_eq!(g.set_weight(GroupId::ROOT, CpuWeight::MAX), Err(GroupError::Root));
        assert_eq!(g.delete(a), Err(GroupError::NotEmpty));
        assert_eq!(g.reparent(a, b), Err(GroupError::Cycle));
        assert_eq!(g.reparent(a, a), Err(GroupError::Cycle));
        g.add_task(b).unwrap();
        assert_eq!(g.delete(b), Err(GroupError::NotEmpty));
        g.remove_task(b).unwrap();
        assert_eq!(g.remove_task(b), Err(GroupError::NoTask));
        assert_eq!(std::format!("{g:?}"), before);
        // A deleted group's id is stale, even once its slot is reused.
        g.delete(b).unwrap();
        let c = g.create(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
        assert_eq!(c.slot(), b.slot());
        assert_eq!(g.depth(b), Err(GroupError::UnknownGroup));
        assert_eq!(g.depth(c), Ok(1));
    }

    /// Nesting is bounded, by creation and by moving a subtree.
    #[test]
    fn depth_is_bounded() {
        let mut g: Groups<16> = Groups::new();
        let mut chain = std::vec![GroupId::ROOT];
        for _ in 0..MAX_GROUP_DEPTH {
            chain.push(g.create(*chain.last().unwrap(), CpuWeight::DEFAULT).unwrap());
        }
        let deepest = *chain.last().unwrap();
        assert_eq!(g.depth(deepest), Ok(MAX_GROUP_DEPTH));
        assert_eq!(g.create(deepest, CpuWeight::DEFAULT), Err(GroupError::TooDeep));
        assert_eq!(g.ancestors(deepest).count(), MAX_GROUP_DEPTH as usize + 1);
        // A two-level subtree cannot move under the second-deepest group.
        let s = g.create(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
        let t = g.create(s, CpuWeight::DEFAULT).unwrap();
        assert_eq!(g.reparent(s, chain[MAX_GROUP_DEPTH as usize - 1]), Err(GroupError::TooDeep));
        // Under the root's child it fits, and the depths follow.
        g.reparent(s, chain[1]).unwrap();
        assert_eq!((g.depth(s), g.depth(t)), (Ok(2), Ok(3)));
        assert_eq!(g.parent(s), Ok(Some(chain[1])));
    }
}
