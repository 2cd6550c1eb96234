//! The invariant checker: every runqueue's own invariants, monotonic `min_vruntime`, and
//! agreement between the task table and the runqueues.

use crate::locks::{Locks, MutexGuard};

use super::{CpuState, Smp};
use crate::platform::Platform;
use crate::runqueue::InvariantViolation;
use crate::table::Location;
use crate::task::{TaskId, TaskState};

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// Checks every invariant of the machine: each runqueue's own, `min_vruntime`
    /// monotonic per CPU, and that the task table and the runqueues agree on where every
    /// task is (no task lost, duplicated or on two runqueues) and on its state, and that no
    /// task sits on a CPU its affinity excludes unless it is still on that CPU with a push
    /// planned to a CPU the affinity allows (or exiting). Takes every
    /// lock in order; meant for tests and stress runs, at a moment no call is under way (a
    /// task a call is moving between runqueues counts as lost).
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.check_invariants_while(|| false)
    }

    /// [`Smp::check_invariants`] while calls may run on other CPUs: `in_flight` says whether
    /// one is under way, asked with every lock held when a task is found in transit between
    /// runqueues (its mover, inside its call, waits for a lock held here to finish the move;
    /// with no call under way it would be lost).
    pub(crate) fn check_invariants_while(
        &self,
        in_flight: impl Fn() -> bool,
    ) -> Result<(), InvariantViolation> {
        let n = self.nr_cpus();
        let mut guards: heapless::Vec<Guard<'_, Q, R, G>, CPUS> = (0..n).map(|c| self.rq(c)).collect();
        let t = self.table();
        let mut attached = 0usize;
        for (c, st) in guards.iter_mut().enumerate() {
            st.check(self.pool())?;
            let mv = st.rq.min_vruntime();
            if crate::timeline::vruntime_before(mv, st.checked_min_vruntime) {
                return fail(c, "min_vruntime went backwards");
            }
            st.checked_min_vruntime = mv;
            attached += st.rq.nr_attached();
        }
        let mut on_cpu = 0usize;
        for (id, e) in t.iter() {
            match e.location {
                Location::OnCpu { cpu, slot } => {
                    on_cpu += 1;
                    self.check_on_cpu(&guards, id, e.state, cpu as usize, slot as u32)?;
                }
                Location::Parked { cpu } => self.check_parked(&guards, id, e.state, cpu as usize)?,
                Location::InTransit { from } => {
                    if !in_flight() {
                        return fail_t(from as usize, "task left in transit", id);
                    }
                }
            }
        }
        self.check_pushes(&guards)?;
        #[cfg(feature = "groups")]
        self.check_groups(&guards)?;
        if on_cpu != attached {
            for (c, st) in guards.iter().enumerate() {
                for (slot, id) in st.rq.attached() {
                    let placed = matches!(t.get(id).map(|e| e.location), Ok(Location::OnCpu { cpu, slot: n }) if cpu as usize == c && n == slot as u16);
                    if !placed {
                        return fail_t(c, "runqueue holds a task the table does not place there", id);
                    }
                }
            }
            return fail(0, "runqueues hold tasks the table does not place there");
        }
        Ok(())
    }

    /// A task the table places in slot `slot` of CPU `c`: the slot holds it, its state
    /// agrees with the runqueue's, and it is queued only where its affinity allows (running
    /// elsewhere only with a push planned).
    fn check_on_cpu(
        &self,
        guards: &[Guard<'_, Q, R, G>],
        id: TaskId,
        state: TaskState,
        c: usize,
        slot: u32,
    ) -> Result<(), InvariantViolation> {
        let Some(st) = guards.get(c) else { return fail(c, "task on a CPU out of range") };
        let Some(ent) = st.rq.entity_in(self.pool(), slot).map(|e| e.get()) else {
            return fail(c, "table points at an empty slot");
        };
        if st.rq.task_at(slot) != Some(id) {
            return fail_t(c, "runqueue slot holds another task", id);
        }
        let is_curr = st.rq.curr_slot() == Some(slot);
        let out = st.rq.switching_out_slot() == Some(slot);
        let ok = match state {
            TaskState::Running => is_curr && ent.on_rq,
            TaskState::Runnable => !is_curr && ent.on_rq,
            TaskState::Blocked | TaskState::Exiting => (is_curr || out) && !ent.on_rq,
            TaskState::Waking => false,
        };
        if !ok {
            return fail_t(c, "task state disagrees with its runqueue", id);
        }
        if !ent.affinity.contains(c) {
            if !ent.on_cpu {
                return fail_t(c, "queued task on a CPU outside its affinity", id);
            }
            // `schedule` and `finish_switch` move such a task by its push alone (an exiting
            // one never runs again).
            let pushed = st.push_for(slot).is_some_and(|p| p.task == id);
            if state != TaskState::Exiting && !pushed {
                return fail_t(c, "running task outside its affinity with no push planned", id);
            }
        }
        Ok(())
    }

    /// A task the table parks (last on CPU `cpu`): blocked, an idle entity, and (EEVDF) the
    /// lag it keeps within its bound.
    #[cfg_attr(not(feature = "eevdf"), allow(unused_variables))]
    fn check_parked(
        &self,
        guards: &[Guard<'_, Q, R, G>],
        id: TaskId,
        state: TaskState,
        cpu: usize,
    ) -> Result<(), InvariantViolation> {
        let Some(entity) = self.pool().get(id) else {
            return fail_t(cpu, "task beyond the entity pool", id);
        };
        if state != TaskState::Blocked || entity.on_rq || entity.on_cpu {
            return fail_t(cpu, "parked task is not a blocked, idle entity", id);
        }
        // The lag a sleeper keeps was clamped when it left, and stays within the bound
        // (which reweights scale alike and a new slice re-clamps).
        #[cfg(feature = "eevdf")]
        if let Some(st) = guards.get(cpu).filter(|st| st.rq.eevdf()) {
            if entity.vlag.unsigned_abs() > st.rq.lag_bound(&entity) as u64 {
                return fail_t(cpu, "a sleeper's kept lag beyond its bound", id);
            }
        }
        Ok(())
    }

    /// Every planned push has its slot reserved at its destination, its task is still on its
    /// CPU, and, while runnable, its affinity allows the destination. (A slot is reserved just
    /// before its push is recorded, so while other CPUs run, a destination may briefly hold
    /// more reservations than pushes.)
    fn check_pushes(&self, guards: &[Guard<'_, Q, R, G>]) -> Result<(), InvariantViolation> {
        for (c, st) in guards.iter().enumerate() {
            for p in st.push.iter().flatten() {
                match st.rq.entity_in(self.pool(), p.slot).map(|e| e.get()) {
                    Some(e) if st.rq.task_at(p.slot) == Some(p.task) && e.on_cpu => {
                        // (One that blocked or exits stays: its push is dropped.)
                        if e.on_rq && !e.affinity.contains(p.dst as usize) {
                            return fail_t(
                                c,
                                "a planned push goes where its task's affinity excludes",
                                p.task,
                            );
                        }
                    }
                    _ => return fail_t(c, "a planned push names a task no longer on its CPU", p.task),
                }
                if guards.get(p.dst as usize).is_none() || p.dst as usize == c {
                    return fail_t(c, "a planned push goes nowhere", p.task);
                }
            }
            let promised =
                guards.iter().flat_map(|g| g.push.iter().flatten()).filter(|p| p.dst as usize == c);
            if promised.count() > st.rq.reserved() as usize {
                return fail(c, "a push is planned here without a reserved slot");
            }
        }
        Ok(())
    }
}

/// A held runqueue lock, as the checker holds every CPU's.
type Guard<'a, const Q: usize, R, const G: usize> = MutexGuard<'a, R, CpuState<Q, G>>;

#[cfg(feature = "groups")]
impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// Every live group's levels agree with the group table and its shared state: a level
    /// enforces `cpu.max` exactly when the table gives the group a quota, and the group's
    /// count of throttled levels is the CPUs where its level is throttled. Skipped while a
    /// group configuration call is under way (it applies a change CPU by CPU); the
    /// configuration lock is only tried, as the runqueue locks are held.
    fn check_groups(&self, guards: &[Guard<'_, Q, R, G>]) -> Result<(), InvariantViolation> {
        let Some(_config) = self.group_config.try_lock() else { return Ok(()) };
        let table = self.groups.lock();
        for slot in 1..=G as u16 {
            let id = table.id_of_slot(slot);
            let Ok(max) = table.max(id) else { continue };
            let limited = max.quota_ns().is_some();
            let mut throttled = 0u32;
            for (c, st) in guards.iter().enumerate() {
                let Some(level) = st.levels.get(slot as usize - 1) else { continue };
                if level.runtime_enabled != limited {
                    return fail(c, "a group's level disagrees with its cpu.max");
                }
                throttled += level.runtime.throttled as u32;
            }
            let counted = self
                .gshared
                .get(slot as usize - 1)
                .map_or(0, |s| s.nr_throttled.load(portable_atomic::Ordering::Relaxed));
            if counted != throttled {
                return fail(0, "a group's throttled count differs from its throttled levels");
            }
        }
        Ok(())
    }
}

/// A violation on `cpu`.
fn fail(cpu: usize, what: &'static str) -> Result<(), InvariantViolation> {
    Err(InvariantViolation { cpu, what, task: None })
}

/// A violation on `cpu` that names task `t`.
fn fail_t(cpu: usize, what: &'static str, t: TaskId) -> Result<(), InvariantViolation> {
    Err(InvariantViolation { cpu, what, task: Some(t) })
}
