//! The task table: a fixed number of slots, each with a generation counter so that an id
//! outlives nothing it named. It records each task's state and where it is; the entity
//! itself lives in the machine's [`crate::entities::Entities`], in the cell of the same slot.

use crate::error::SchedError;
use crate::platform::TaskPayload;
use crate::task::{TaskId, TaskState};

/// Where a live task is, which says who owns its entity (see [`crate::entities`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// Attached to CPU `cpu`'s runqueue at `slot` (queued, running, or being switched out).
    OnCpu {
        /// The CPU.
        cpu: u16,
        /// Its runqueue slot there (a [`crate::runqueue::SlotId`]; 16 bits keep a table entry
        /// at 8 bytes).
        slot: u16,
    },
    /// Between runqueues (being created or woken): the caller moving it owns the
    /// entity. Other operations on it wait until it lands.
    InTransit {
        /// The CPU it comes from (the parent's, for a new task).
        from: u16,
    },
    /// Asleep, attached to no runqueue; `cpu` is the CPU whose PELT sums still carry its
    /// blocked load. The holder of the table lock owns its entity.
    Parked {
        /// The CPU it last ran on.
        cpu: u16,
    },
}

/// A live task's table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskEntry {
    /// Its life-cycle state.
    pub state: TaskState,
    /// Where its entity is.
    pub location: Location,
}

/// The end of the free list. Links are slot + 1, so an empty table is all zeros (a machine
/// in a `static` needs no `.data` image).
const NIL: u32 = 0;

/// One slot of the table: a live task's entry, or a link in the free list (so a slot costs
/// 8 bytes plus its generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Free { next: u32 },
    Live(TaskEntry),
}

impl Slot {
    /// What a slot never handed out holds: never read (only slots below `bump` are), and
    /// chosen because its bytes are all zeros (`Free`'s tag sits in a niche, which is not).
    const NEVER_USED: Slot =
        Slot::Live(TaskEntry { state: TaskState::Runnable, location: Location::OnCpu { cpu: 0, slot: 0 } });
}

/// A fixed-capacity table of up to `N` live tasks, each with the platform's payload `T`.
#[derive(Clone, PartialEq, Eq)]
pub struct TaskTable<const N: usize, T: TaskPayload = ()> {
    generation: [u32; N],
    slots: [Slot; N],
    payload: [T; N],
    free_head: u32,
    bump: u32,
    live: usize,
}

impl<const N: usize, T: TaskPayload> TaskTable<N, T> {
    /// Calls `each` with the lines that hold slot `slot` of the table at `at`: its
    /// generation, its entry and its payload (none beyond the table). Addresses only:
    /// nothing is read.
    #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
    pub(crate) fn slot_lines(at: *const u8, slot: usize, each: &mut impl FnMut(*const u8)) {
        use core::mem::{offset_of, size_of};
        use crate::lines::each_line;
        if slot >= N {
            return;
        }
        each_line(at.wrapping_add(offset_of!(Self, generation) + slot * size_of::<u32>()), size_of::<u32>(), each);
        each_line(at.wrapping_add(offset_of!(Self, slots) + slot * size_of::<Slot>()), size_of::<Slot>(), each);
        each_line(at.wrapping_add(offset_of!(Self, payload) + slot * size_of::<T>()), size_of::<T>(), each);
    }

    /// An empty table.
    pub const fn new() -> Self {
        TaskTable {
            generation: [0; N],
            slots: [Slot::NEVER_USED; N],
            payload: [T::NONE; N],
            free_head: NIL,
            bump: 0,
            live: 0,
        }
    }

    /// Number of live tasks.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no task is live.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Whether a slot is free.
    pub fn has_room(&self) -> bool {
        self.free_head != NIL || (self.bump as usize) < N
    }

    /// The id the next [`TaskTable::insert`] will return, if there is room.
    pub fn peek_next_id(&self) -> Option<TaskId> {
        let slot = if self.free_head != NIL {
            self.free_head - 1
        } else if (self.bump as usize) < N {
            self.bump
        } else {
            return None;
        };
        Some(TaskId::new(slot, self.generation[slot as usize]))
    }

    /// Stores a new live task with its payload and returns its id.
    pub fn insert(&mut self, entry: TaskEntry, payload: T) -> Result<TaskId, SchedError> {
        let slot = if self.free_head != NIL {
            let s = self.free_head - 1;
            self.free_head = match self.slots[s as usize] {
                Slot::Free { next } => next,
                Slot::Live(_) => NIL, // (the free list never holds a live slot)
            };
            s
        } else if (self.bump as usize) < N {
            self.bump += 1;
            self.bump - 1
        } else {
            return Err(SchedError::TaskTableFull);
        };
        self.slots[slot as usize] = Slot::Live(entry);
        self.payload[slot as usize] = payload;
        self.live += 1;
        Ok(TaskId::new(slot, self.generation[slot as usize]))
    }

    /// Validates an id: unknown if the slot is out of range or was never handed out, or the
    /// generation is one the slot has not reached; stale if it is behind the slot's. The
    /// generation wraps, so "behind" is at most 2^31 generations: the table cannot tell an
    /// id issued before a wrap from a made-up one, and answers stale for both.
    pub fn validate(&self, id: TaskId) -> Result<(), SchedError> {
        let s = id.slot();
        // A slot never handed out is unknown whatever it holds.
        if s >= self.bump as usize {
            return Err(SchedError::UnknownTask(id));
        }
        // How many occupants the slot has had since the id's (the counter wraps).
        let behind = self.generation[s].wrapping_sub(id.generation());
        if behind == 0 && matches!(self.slots[s], Slot::Live(_)) {
            Ok(())
        } else if (1..=1 << 31).contains(&behind) {
            Err(SchedError::StaleTask(id))
        } else {
            Err(SchedError::UnknownTask(id))
        }
    }

    /// The live entry of `id`.
    pub fn get(&self, id: TaskId) -> Result<&TaskEntry, SchedError> {
        self.validate(id)?;
        match self.slots.get(id.slot()) {
            Some(Slot::Live(e)) => Ok(e),
            _ => Err(SchedError::UnknownTask(id)),
        }
    }

    /// The live entry of `id`, mutably.
    pub fn get_mut(&mut self, id: TaskId) -> Result<&mut TaskEntry, SchedError> {
        self.validate(id)?;
        match self.slots.get_mut(id.slot()) {
            Some(Slot::Live(e)) => Ok(e),
            _ => Err(SchedError::UnknownTask(id)),
        }
    }

    /// The payload of task `id` if it is live, else `T::NONE`; a payload of no bytes (such
    /// as `()`) has one value, so then there is no lookup at all.
    pub(crate) fn payload_or_none(&self, id: TaskId) -> T {
        match core::mem::size_of::<T>() {
            0 => T::NONE,
            _ => self.payload(id).unwrap_or(T::NONE),
        }
    }

    /// The payload of live task `id`.
    pub fn payload(&self, id: TaskId) -> Result<T, SchedError> {
        self.validate(id)?;
        self.payload.get(id.slot()).copied().ok_or(SchedError::UnknownTask(id))
    }

    /// Frees the slot of an exited task; its id becomes stale.
    pub fn remove(&mut self, id: TaskId) -> Result<TaskEntry, SchedError> {
        self.validate(id)?;
        let s = id.slot();
        let (Some(slot), Some(gen)) = (self.slots.get_mut(s), self.generation.get_mut(s)) else {
            return Err(SchedError::UnknownTask(id));
        };
        let Slot::Live(e) = *slot else { return Err(SchedError::UnknownTask(id)) };
        *slot = Slot::Free { next: self.free_head };
        *gen = gen.wrapping_add(1);
        if let Some(p) = self.payload.get_mut(s) {
            *p = T::NONE;
        }
        self.free_head = s as u32 + 1;
        self.live -= 1;
        Ok(e)
    }

    /// Live tasks with their entries, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (TaskId, &TaskEntry)> + '_ {
        self.slots[..self.bump as usize].iter().enumerate().filter_map(|(i, s)| match s {
            Slot::Live(e) => Some((TaskId::new(i as u32, self.generation[i]), e)),
            Slot::Free { .. } => None,
        })
    }
}

impl<const N: usize, T: TaskPayload> Default for TaskTable<N, T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    fn parked() -> TaskEntry {
        TaskEntry { state: TaskState::Blocked, location: Location::Parked { cpu: 0 } }
    }

    /// The hint lists the lines of a slot's generation, entry and payload, and nothing for
    /// a slot beyond the table.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_slot_s_lines_hold_its_generation_entry_and_payload() {
        let t: TaskTable<8, u64> = TaskTable::new();
        let line = |p: *const u8| p as usize / crate::lines::LINE;
        let mut seen = std::vec::Vec::new();
        TaskTable::<8, u64>::slot_lines(&t as *const _ as *const u8, 5, &mut |p| seen.push(line(p)));
        for field in [&t.generation[5] as *const u32 as *const u8, &t.slots[5] as *const Slot as *const u8] {
            assert!(seen.contains(&line(field)));
        }
        assert!(seen.contains(&line(&t.payload[5] as *const u64 as *const u8)));
        let mut beyond = 0;
        TaskTable::<8, u64>::slot_lines(&t as *const _ as *const u8, 8, &mut |_| beyond += 1);
        assert_eq!(beyond, 0);
    }

    #[test]
    fn stale_ids_are_errors() {
        let mut t: TaskTable<2> = TaskTable::new();
        let a = t.insert(parked(), ()).unwrap();
        let b = t.insert(parked(), ()).unwrap();
        assert_eq!(t.insert(parked(), ()), Err(SchedError::TaskTableFull));
        t.remove(a).unwrap();
        let c = t.insert(parked(), ()).unwrap();
        assert_eq!(c.slot(), a.slot());
        assert_ne!(c, a);
        assert_eq!(t.get(a).err(), Some(SchedError::StaleTask(a)));
        assert!(t.get(b).is_ok() && t.get(c).is_ok());
        let never = TaskId::new(1, 7);
        assert_eq!(t.get(never).err(), Some(SchedError::UnknownTask(never)));
        let out = TaskId::new(9, 0);
        assert_eq!(t.get(out).err(), Some(SchedError::UnknownTask(out)));
        assert_eq!(t.remove(a).err(), Some(SchedError::StaleTask(a)));
        assert_eq!(t.len(), 2);
    }

    /// A slot whose generation wrapped past zero still tells its old ids as stale.
    #[test]
    fn stale_ids_stay_stale_across_the_generation_wrap() {
        let mut t: TaskTable<1> = TaskTable::new();
        let a = t.insert(parked(), ()).unwrap();
        t.remove(a).unwrap();
        t.generation[0] = u32::MAX;
        let old = t.insert(parked(), ()).unwrap();
        assert_eq!(old.generation(), u32::MAX);
        t.remove(old).unwrap();
        let new = t.insert(parked(), ()).unwrap();
        assert_eq!(new.generation(), 0);
        assert!(t.get(new).is_ok());
        assert_eq!(t.get(old).err(), Some(SchedError::StaleTask(old)));
        let ahead = TaskId::new(0, 5);
        assert_eq!(t.get(ahead).err(), Some(SchedError::UnknownTask(ahead)));
    }

    #[test]
    fn payloads_live_and_die_with_their_task() {
        let mut t: TaskTable<2, u32> = TaskTable::new();
        let a = t.insert(parked(), 7).unwrap();
        let b = t.insert(parked(), 9).unwrap();
        assert_eq!((t.payload(a), t.payload(b)), (Ok(7), Ok(9)));
        t.remove(a).unwrap();
        assert_eq!(t.payload(a), Err(SchedError::StaleTask(a)));
        let c = t.insert(parked(), 11).unwrap();
        assert_eq!((t.payload(c), t.payload(b)), (Ok(11), Ok(9)));
    }
}
