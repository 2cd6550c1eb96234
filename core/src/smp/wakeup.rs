//! The wakeup (`try_to_wake_up`): a blocked task still on its CPU is requeued there; a parked
//! one is placed (`select_task_rq`) on a CPU with room and activated there. Every call
//! validates its input before it changes anything.

use crate::locks::Locks;
use portable_atomic::Ordering::Relaxed;

use super::Smp;
use crate::error::SchedError;
use crate::fair::{EnqueueFlags, WakeFlags};
use crate::placement::{SelectFor, Waker};
use crate::platform::{EventKind, MigrateReason, Platform};
use crate::table::{Location, TaskEntry};
use crate::task::{Entity, TaskId, TaskState};

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// Wakes a blocked task; `cpu` is the waker's CPU. Returns the CPU it was queued on.
    pub fn wake(&self, cpu: usize, now: u64, id: TaskId) -> Result<usize, SchedError> {
        self.wake_with(cpu, now, id, WakeFlags::empty())
    }

    /// Wakes a blocked task with wakeup hints.
    ///
    /// `try_to_wake_up`: read the task's entry, then wake it in place if it is still on its
    /// CPU (`wake_on_cpu`), or choose a CPU for it and move it there if it is parked
    /// (`wake_parked`). Either step retries from a fresh read when the entry changed
    /// between the read and the locks.
    pub fn wake_with(&self, cpu: usize, now: u64, id: TaskId, wf: WakeFlags) -> Result<usize, SchedError> {
        self.check_cpu(cpu)?;
        loop {
            // A parked task's entity is read under the table lock, which owns it.
            let (entry, parked) = {
                let t = self.table();
                let entry = *t.get(id)?;
                let parked = match entry.location {
                    Location::Parked { .. } => self.pool().get(id),
                    _ => None,
                };
                (entry, parked)
            };
            if entry.state != TaskState::Blocked {
                if matches!(entry.state, TaskState::Waking) {
                    core::hint::spin_loop();
                    continue;
                }
                return Err(SchedError::InvalidState { task: id, state: entry.state });
            }
            let woken = match entry.location {
                Location::InTransit { .. } => {
                    core::hint::spin_loop();
                    continue;
                }
                Location::OnCpu { cpu: c, slot } => self.wake_on_cpu(c as usize, slot, now, id, &entry, wf),
                Location::Parked { cpu: prev } => {
                    let Some(entity) = parked else { return Err(SchedError::UnknownTask(id)) };
                    self.wake_parked(cpu, prev, now, id, &entry, &entity, wf)
                }
            };
            if let Some(result) = woken {
                return result;
            }
        }
    }

    /// A blocked task still on CPU `c` (current or being switched out) is requeued there.
    /// `None`: its entry changed since `entry` was read; read it again.
    #[inline(always)]
    fn wake_on_cpu(
        &self,
        c: usize,
        slot: u16,
        now: u64,
        id: TaskId,
        entry: &TaskEntry,
        wf: WakeFlags,
    ) -> Option<Result<usize, SchedError>> {
        let mut st = self.rq(c);
        let mut t = self.table();
        if t.get(id).copied() != Ok(*entry) {
            return None;
        }
        st.rq.update_clock(now);
        st.fair(self.pool()).enqueue(slot as u32, EnqueueFlags::WAKEUP);
        let state =
            if st.rq.curr_slot() == Some(slot as u32) { TaskState::Running } else { TaskState::Runnable };
        if let Ok(e) = t.get_mut(id) {
            e.state = state;
        }
        drop(t);
        st.fair(self.pool()).check_preempt_wakeup(slot as u32, wf);
        self.after_update(c, &mut st);
        let nr_running = st.rq.nr_running();
        drop(st);
        self.emit(now, c, EventKind::Waking { task: id, nr_running });
        Some(Ok(c))
    }

    /// A parked task (`entity`, last on CPU `prev`), woken by `cpu`: taken out of the table
    /// for the trip, placed (`select_task_rq`) on a CPU with room reserved first, and
    /// activated there. `None`: its entry or affinity changed since they were read.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn wake_parked(
        &self,
        cpu: usize,
        prev: u16,
        now: u64,
        id: TaskId,
        entry: &TaskEntry,
        entity: &Entity,
        wf: WakeFlags,
    ) -> Option<Result<usize, SchedError>> {
        // Refuse before changing anything if no allowed CPU has room.
        let allowed = entity.affinity.and(&self.online());
        if !allowed.iter().any(|c| self.rq(c).rq.has_room()) {
            return Some(Err(SchedError::RunQueueFull));
        }
        // Take it out of the table for the trip, with its entity as it is now: a renice
        // meanwhile is kept; a new affinity starts over, as the room check above used the old
        // one.
        let mut e = {
            let mut t = self.table();
            let now_entity = self.pool().get(id);
            match (t.get_mut(id), now_entity) {
                (Ok(te), Some(e)) if *te == *entry && e.affinity == entity.affinity => {
                    te.state = TaskState::Waking;
                    te.location = Location::InTransit { from: prev };
                    e
                }
                _ => return None,
            }
        };
        let taken = e;
        let waker = self.record_wakee(cpu, id, now);
        let (target, affine) = self.select_cpu(cpu, &mut e, SelectFor::Wake(prev as u32), wf, waker);
        // Full: the previous CPU, else any allowed CPU with room; the slot is reserved before
        // anything about the task changes.
        let Some(target) = self.reserve_room(target, prev as usize, &allowed) else {
            self.put_back_to_sleep(id, entry, None);
            return Some(Err(SchedError::RunQueueFull));
        };
        if affine {
            let mut st = self.rq(cpu);
            if let Some(n) = st.rq.curr_slot() {
                if let Some(w) = st.fair(self.pool()).entity(n) {
                    w.set_recent_used_cpu(cpu as u32);
                }
            }
        }
        let mut flags = EnqueueFlags::WAKEUP;
        // (On one CPU a task wakes where it slept: `CPUS > 1` says so to the compiler.)
        let migrated = CPUS > 1 && target != prev as usize;
        // In transit: this call owns the cell.
        self.pool().put(id, e);
        if migrated {
            if let Some(cell) = self.pool().cell(id) {
                self.migrate_sleeping(cell, prev as usize);
            }
            flags |= EnqueueFlags::MIGRATED;
        }
        Some(match self.activate_on(target, now, id, flags, wf, false) {
            Ok(_) => {
                if migrated {
                    let reason = MigrateReason::Wakeup;
                    self.emit(now, target, EventKind::Migrate { task: id, from: prev as usize, reason });
                }
                let nr_running = self.stats(target).nr_running.load(Relaxed);
                self.emit(now, target, EventKind::Waking { task: id, nr_running });
                Ok(target)
            }
            Err(err) => {
                // Cannot happen (the slot was reserved): put it back to sleep.
                self.unreserve(target);
                self.put_back_to_sleep(id, entry, Some(taken));
                Err(err)
            }
        })
    }

    /// Undoes a wakeup's trip: the task's entry as it was before (and, if given, its entity
    /// as it was taken).
    fn put_back_to_sleep(&self, id: TaskId, entry: &TaskEntry, taken: Option<Entity>) {
        let mut t = self.table();
        if let Ok(te) = t.get_mut(id) {
            *te = *entry;
            if let Some(e) = taken {
                self.pool().put(id, e);
            }
        }
    }

    /// `record_wakee`: the task current on `cpu` wakes `wakee`; count a flip if it is not
    /// the one it woke last (halving the count once a second). Returns what the wakeup
    /// path needs of the waker.
    fn record_wakee(&self, cpu: usize, wakee: TaskId, now: u64) -> Waker {
        let mut st = self.rq(cpu);
        // Jiffies modulo 2^32, compared wrap-safe as Linux's time_after does; of a sane
        // reading, as a broken one would stop the halving for 2^31 jiffies.
        let j = self.jiffies(st.rq.sane_now(now)) as u32;
        let hz = self.hz() as i32;
        let Some(n) = st.rq.curr_slot() else { return Waker::default() };
        let fair = st.fair(self.pool());
        let Some(w) = fair.entity(n) else { return Waker::default() };
        let load = fair.task_h_load(n);
        if (j.wrapping_sub(w.wakee_flip_decay_ts()) as i32) > hz {
            w.set_wakee_flips(w.wakee_flips() >> 1);
            w.set_wakee_flip_decay_ts(j);
        }
        if w.last_wakee() != wakee {
            w.set_last_wakee(wakee);
            w.set_wakee_flips(w.wakee_flips() + 1);
        }
        Waker { flips: w.wakee_flips(), load, present: true }
    }
}
