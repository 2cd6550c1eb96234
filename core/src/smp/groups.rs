//! Task groups on the machine (the `groups` feature; docs/groups.md): creating, weighting
//! and deleting groups, and moving tasks between them.
//!
//! The group table ([`Groups`]) is behind its own lock, a leaf: taken with or without the
//! other locks and released before anything else is locked. The calls that create,
//! configure or delete a group hold the configuration lock (`group_config`) throughout: one
//! such call never sees a group half deleted, nor its slot half reused. What the hot paths
//! read of a group (its parent, its shares, its load) is in [`GroupShared`] atomics; each
//! CPU keeps its runqueue of every group under its runqueue lock.

use crate::locks::Locks;
use portable_atomic::Ordering::Relaxed;

use super::Smp;
use crate::cpumask::CpuMask;
use crate::entities::EntityCell;
use crate::error::SchedError;
use crate::group::bandwidth::{BandwidthStats, CpuMax, PeriodEnd, Pool};
use crate::group::shared::{forward, GroupShared};
use crate::group::shares::CpuWeight;
use crate::group::tree::{GroupId, Groups};
use crate::group::GroupError;
use crate::platform::Platform;
use crate::table::Location;
use crate::task::TaskId;

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    fn shared(&self, g: GroupId) -> Option<&GroupShared> {
        self.gshared.get(g.slot().checked_sub(1)?)
    }

    /// Creates a group under `parent` with `cpu.weight` `weight`. It holds no task until
    /// [`Smp::move_task`] puts one there (or a task in it forks).
    ///
    /// ```
    /// use sched_core::{NoPlatform, Smp, Features, TaskParams};
    /// use sched_core::group::{shares::CpuWeight, tree::GroupId, GroupError};
    /// let m: Box<Smp<NoPlatform, 1, 8, 8, sched_core::spin::Spin, 2>> = Box::new(Smp::new(NoPlatform, Features::default(), 250));
    /// m.init_with(|t| t.init_flat(1)).unwrap();
    /// let a = m.create_group(GroupId::ROOT, CpuWeight::new(200).unwrap()).unwrap();
    /// let t = m.create(0, 1, TaskParams::default()).unwrap();
    /// m.move_task(2, t, a).unwrap();
    /// assert_eq!(m.task_group(t), Ok(a));
    /// assert_eq!(m.delete_group(a), Err(GroupError::NotEmpty));
    /// m.move_task(3, t, GroupId::ROOT).unwrap();
    /// m.delete_group(a).unwrap();
    /// ```
    pub fn create_group(&self, parent: GroupId, weight: CpuWeight) -> Result<GroupId, GroupError> {
        let _config = self.group_config.lock();
        let g = {
            let mut t = self.groups.lock();
            if self.shared(parent).is_some_and(|s| s.dying.load(Relaxed)) {
                return Err(GroupError::UnknownGroup);
            }
            t.create(parent, weight)?
        };
        // A slot's runqueues and entities were left empty when its last group was deleted.
        if let Some(s) = self.shared(g) {
            s.reset(parent.slot() as u16, weight.shares());
        }
        // Every CPU walks the levels before the group can hold a task: its id is not out yet.
        // (The group table is a leaf, released before the runqueue locks.)
        // A group made under a throttled one starts with its clock stopped (`sync_throttle`).
        for cpu in 0..self.nr_cpus() {
            let mut st = self.rq(cpu);
            st.use_groups();
            st.fair(self.pool()).sync_throttle(g.slot() as u16);
        }
        Ok(g)
    }

    /// Sets a group's `cpu.weight`; its entities take the new shares at once on every CPU.
    pub fn set_group_weight(&self, now: u64, g: GroupId, weight: CpuWeight) -> Result<(), GroupError> {
        let _config = self.group_config.lock();
        self.groups.lock().set_weight(g, weight)?;
        if let Some(s) = self.shared(g) {
            s.set_shares(weight.shares());
        }
        for cpu in 0..self.nr_cpus() {
            let mut st = self.rq(cpu);
            st.rq.update_clock(now);
            st.fair(self.pool()).refresh_group(g.slot() as u16);
            self.after_update(cpu, &mut st);
        }
        Ok(())
    }

    /// Deletes a group that holds no task and no group. Its entities' blocked load leaves
    /// their parents' runqueues.
    pub fn delete_group(&self, g: GroupId) -> Result<(), GroupError> {
        let _config = self.group_config.lock();
        {
            let t = self.groups.lock();
            t.weight(g)?;
            if g == GroupId::ROOT {
                return Err(GroupError::Root);
            }
            if t.tasks(g)? != 0 || t.children(g)? != 0 {
                return Err(GroupError::NotEmpty);
            }
            // From here no task may join it, and no group be created under it.
            if let Some(s) = self.shared(g) {
                s.dying.store(true, Relaxed);
            }
        }
        for cpu in 0..self.nr_cpus() {
            let mut st = self.rq(cpu);
            st.fair(self.pool()).retire_group(g.slot() as u16);
            self.after_update(cpu, &mut st);
        }
        if let Some(s) = self.shared(g) {
            s.reset_pool();
        }
        self.groups.lock().delete(g)
    }

    /// The group task `id` is in.
    pub fn task_group(&self, id: TaskId) -> Result<GroupId, SchedError> {
        self.initialised()?;
        self.table().get(id)?;
        // (A relaxed read of one field: the group changes only under the task's lock.)
        let slot = self.pool().cell(id).map_or(0, EntityCell::group);
        Ok(self.groups.lock().id_of_slot(slot))
    }

    /// Moves task `id` into group `to` (`sched_move_task`): its entity leaves its group's
    /// runqueue for `to`'s on the CPU it is on, with its PELT signals; a queued task is
    /// queued there, a running one keeps running there.
    pub fn move_task(&self, now: u64, id: TaskId, to: GroupId) -> Result<(), SchedError> {
        self.initialised()?;
        self.table().get(id)?;
        self.count_in(to)?;
        match self.move_task_locked(now, id, to.slot() as u16) {
            Ok(from) => {
                self.count_out(from);
                Ok(())
            }
            Err(e) => {
                self.count_out(to.slot() as u16);
                Err(e)
            }
        }
    }

    /// Counts a task into group `g` (refused for an unknown group or one being deleted).
    fn count_in(&self, g: GroupId) -> Result<(), GroupError> {
        if g == GroupId::ROOT {
            return Ok(());
        }
        let mut t = self.groups.lock();
        if self.shared(g).is_some_and(|s| s.dying.load(Relaxed)) {
            return Err(GroupError::UnknownGroup);
        }
        t.add_task(g)
    }

    /// Counts a task of group slot `g` out of it (moved away or exited).
    pub(super) fn count_out(&self, g: u16) {
        if g != 0 {
            let mut t = self.groups.lock();
            let id = t.id_of_slot(g);
            let _ = t.remove_task(id);
        }
    }

    /// Counts a new task into group slot `g`, its parent's (which holds the parent, so it is
    /// alive and not being deleted).
    pub(super) fn count_forked(&self, g: u16) {
        if g != 0 {
            let mut t = self.groups.lock();
            let id = t.id_of_slot(g);
            let _ = t.add_task(id);
        }
    }

    fn move_task_locked(&self, now: u64, id: TaskId, to: u16) -> Result<u16, SchedError> {
        loop {
            let entry = *self.table().get(id)?;
            match entry.location {
                Location::InTransit { .. } => core::hint::spin_loop(),
                Location::Parked { cpu } => {
                    let mut st = self.rq(cpu as usize);
                    let t = self.table();
                    // Only the runqueue it sleeps on holds its blocked load.
                    match t.get(id) {
                        Ok(te) if te.location == (Location::Parked { cpu }) => {}
                        _ => continue,
                    }
                    let Some(cell) = self.pool().cell(id) else { return Err(SchedError::UnknownTask(id)) };
                    st.rq.update_clock(now);
                    let from = cell.group();
                    st.fair(self.pool()).change_group(cell, None, to);
                    drop(t);
                    self.after_update(cpu as usize, &mut st);
                    return Ok(from);
                }
                Location::OnCpu { cpu, slot } => {
                    let c = cpu as usize;
                    let Some(mut st) = self.lock_placed(id, entry.location, c) else { continue };
                    let Some(cell) = self.pool().cell(id) else { return Err(SchedError::UnknownTask(id)) };
                    st.rq.update_clock(now);
                    let from = cell.group();
                    st.fair(self.pool()).change_group(cell, Some(slot as u32), to);
                    self.after_update(c, &mut st);
                    return Ok(from);
                }
            }
        }
    }

    /// Sets or clears a group's `cpu.max` (its quota of CPU time per period): its pool is
    /// refilled for the new limit, and each CPU's runqueue of the group starts over with no
    /// runtime, let go if it was throttled, as Linux does when `cpu.max` is written.
    ///
    /// ```
    /// use sched_core::{NoPlatform, Smp, Features};
    /// use sched_core::group::{bandwidth::CpuMax, shares::CpuWeight, tree::GroupId};
    /// let m: Box<Smp<NoPlatform, 2, 8, 8, sched_core::spin::Spin, 2>> = Box::new(Smp::new(NoPlatform, Features::default(), 250));
    /// m.init_with(|t| t.init_flat(2)).unwrap();
    /// let g = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    /// m.set_group_max(1, g, CpuMax::parse("10000 100000", None).unwrap()).unwrap();
    /// assert_eq!(m.group_table().max(g).unwrap().to_string(), "10000 100000");
    /// assert_eq!(m.group_bandwidth(g).unwrap().nr_periods, 0);
    /// ```
    pub fn set_group_max(&self, now: u64, g: GroupId, max: CpuMax) -> Result<(), GroupError> {
        let _config = self.group_config.lock();
        self.groups.lock().set_max(g, max)?;
        let Some(sh) = self.shared(g) else { return Err(GroupError::Root) };
        // (A broken reading would arm the timer past every later tick.)
        let now = self.rq(0).rq.sane_now(now);
        {
            // (The pool's lock is held while the timer is stopped and armed again, as a
            // period's end holds it: a tick meanwhile runs no period of the old limit.)
            let mut pool = sh.bw.lock();
            pool.set_limit(max);
            sh.next_end.store(0, Relaxed);
            if max.quota_ns().is_some() {
                // The period timer starts with the limit (`tg_set_cfs_bandwidth`), in its
                // phase.
                pool.take(0);
                sh.arm(now, max.period_ns());
            }
        }
        if max.quota_ns().is_some() {
            self.bandwidth_used.store(true, Relaxed);
        }
        for cpu in 0..self.nr_cpus() {
            let mut st = self.rq(cpu);
            st.rq.update_clock(now);
            st.fair(self.pool()).reset_runtime(g.slot() as u16, max.quota_ns().is_some());
            self.after_update(cpu, &mut st);
        }
        Ok(())
    }

    /// A group's `cpu.stat` bandwidth figures (zeros for the root, which has no limit).
    pub fn group_bandwidth(&self, g: GroupId) -> Result<BandwidthStats, GroupError> {
        self.groups.lock().weight(g)?;
        Ok(self.shared(g).map(|s| s.bw.lock().stats()).unwrap_or_default())
    }

    /// The groups' period timers, run from the tick: each group whose period has ended at
    /// `now` refills its pool and hands runtime to its throttled runqueues, in the order
    /// they were throttled (`sched_cfs_period_timer`); groups whose periods end at one tick
    /// go parents first, so that a child's level is not served as if under a throttled
    /// parent the same tick lets go. Any CPU's tick may run a period's end; one claims it,
    /// under the pool's lock, where every other write of the timer is made. (Out of line: the
    /// tick's own frame stays as small as without groups.)
    #[inline(never)]
    pub(super) fn bandwidth_periods(&self, now: u64) {
        let due = |sh: &GroupShared| matches!(sh.next_end.load(Relaxed), end if end != 0 && now >= end);
        if !self.gshared.iter().any(due) {
            return;
        }
        for depth in 0..=crate::group::tree::MAX_GROUP_DEPTH as usize {
            for (i, sh) in self.gshared.iter().enumerate() {
                if !due(sh) || self.group_depth(i as u16 + 1) != depth {
                    continue;
                }
                // (The throttled count is read and the timer moved or stopped under the
                // pool's lock, which a throttle holds while it counts itself and arms the
                // timer, and a new limit while it stops and arms it.)
                let outcome = {
                    let mut pool = sh.bw.lock();
                    let end = sh.next_end.load(Relaxed);
                    if end == 0 || now < end {
                        continue;
                    }
                    let (overrun, next) = forward(end, now, pool.limit().period_ns());
                    sh.move_to(next);
                    let outcome = pool.period_end(overrun, sh.nr_throttled.load(Relaxed) > 0);
                    if outcome == PeriodEnd::Stop {
                        sh.next_end.store(0, Relaxed);
                    }
                    outcome
                };
                if outcome == PeriodEnd::Distribute {
                    self.distribute(i as u16 + 1, now);
                }
            }
        }
    }

    /// How many groups lie above group slot `g` (0: a child of the root).
    fn group_depth(&self, g: u16) -> usize {
        let mut d = 0;
        let mut p = self.gshared.get(g as usize - 1).map_or(0, |s| s.parent());
        while p != 0 && d < crate::group::tree::MAX_GROUP_DEPTH as usize {
            p = self.gshared.get(p as usize - 1).map_or(0, |s| s.parent());
            d += 1;
        }
        d
    }

    /// When the earliest group period ends (ns), while any group's period timer runs. The
    /// tick runs the period timers ([`Smp::tick`]); a CPU that stops its tick while idle
    /// (tickless idle) must still tick at this time, or keep ticking while it is `Some`, or
    /// throttled groups wait for a busy CPU's tick to be let go.
    pub fn bandwidth_timer(&self) -> Option<u64> {
        if !self.bandwidth_used.load(Relaxed) {
            return None;
        }
        self.gshared.iter().map(|s| s.next_end.load(Relaxed)).filter(|&e| e != 0).min()
    }

    /// Hands group slot `g`'s refilled pool to its throttled runqueues, the longest
    /// throttled first (the earliest `throttled_at`, ties by CPU). The CPUs throttled when it
    /// starts are found in one pass, as v5.7 walks the list it had (one throttled meanwhile
    /// waits for the next period); each next one is then found anew among those left, so only
    /// a `CpuMask` of them goes on the tick's stack, no list of keys: `CPUS + T²` runqueue
    /// locks for `T` throttled CPUs, not `CPUS × T`. It stops once the pool is spent, as
    /// v5.7 does: the CPUs left wait for the next period.
    #[inline(never)]
    fn distribute(&self, g: u16, now: u64) {
        let Some(sh) = self.gshared.get(g as usize - 1) else { return };
        let throttled = |cpu: usize| {
            let st = self.rq(cpu);
            st.levels
                .get(g as usize - 1)
                .filter(|lv| lv.runtime.throttled)
                .map(|lv| (lv.runtime.throttled_at, cpu))
        };
        let mut left = CpuMask::EMPTY;
        for cpu in 0..self.nr_cpus() {
            if throttled(cpu).is_some() {
                left.set(cpu);
            }
        }
        loop {
            let next = left.iter().filter_map(throttled).min();
            let Some((_, cpu)) = next else { return };
            left.clear(cpu);
            let mut st = self.rq(cpu);
            st.rq.update_clock(now);
            st.fair(self.pool()).distribute(g);
            self.after_update(cpu, &mut st);
            drop(st);
            if sh.bw.lock().runtime() == 0 {
                return;
            }
        }
    }

    /// After a setup (the first, or one again), the groups made before it: their shared sums
    /// and bandwidth pools start afresh, and on every CPU (whose runqueues the setup reset)
    /// their entities start unused, their `cpu.max` applies again, and the CPU walks their
    /// levels, as `create_group` and `set_group_max` made the CPUs of their time do.
    pub(super) fn regroup(&self) {
        let _config = self.group_config.lock();
        // (The group table is a leaf: read slot by slot, released before the runqueue locks.)
        let live = |slot: u16| {
            let t = self.groups.lock();
            let id = t.id_of_slot(slot);
            let weight = t.weight(id).ok()?;
            let parent = t.parent(id).ok().flatten().map_or(0, |p| p.slot() as u16);
            Some((id, weight, t.max(id).unwrap_or(CpuMax::UNLIMITED), parent))
        };
        if self.groups.lock().children(GroupId::ROOT).unwrap_or(0) == 0 {
            return;
        }
        // Per group slot: whether a group lives there, with a quota (read once for all CPUs).
        let mut limited: [Option<bool>; G] = [None; G];
        for (slot, kept) in (1..=G as u16).zip(limited.iter_mut()) {
            let Some((id, weight, max, parent)) = live(slot) else { continue };
            if let Some(s) = self.shared(id) {
                s.reset(parent, weight.shares());
                *s.bw.lock() = Pool::new(max);
            }
            if max.quota_ns().is_some() {
                self.bandwidth_used.store(true, Relaxed);
            }
            *kept = Some(max.quota_ns().is_some());
        }
        for cpu in 0..self.nr_cpus() {
            let mut st = self.rq(cpu);
            st.use_groups();
            let mut f = st.fair(self.pool());
            for (slot, kept) in (1..=G as u16).zip(limited) {
                let Some(quota) = kept else { continue };
                f.clear_group_entity(slot);
                if quota {
                    f.reset_runtime(slot, true);
                }
            }
        }
    }

    /// How many tasks group `g` holds, not counting its children's. The root's are the live
    /// tasks in no other group (a snapshot while tasks come and go on other CPUs).
    pub fn group_tasks(&self, g: GroupId) -> Result<u32, GroupError> {
        if g != GroupId::ROOT {
            return self.groups.lock().tasks(g);
        }
        // (The root's own count is not kept: creating and ending tasks there takes no lock.
        // The live tasks are counted first, under the task table's lock: the group table,
        // a leaf, is taken after it, never before.)
        let live = self.nr_tasks() as u32;
        let t = self.groups.lock();
        let grouped: u32 = (1..=G as u16).filter_map(|s| t.tasks(t.id_of_slot(s)).ok()).sum();
        Ok(live.saturating_sub(grouped))
    }

    /// A group's `cpu.weight`.
    pub fn group_weight(&self, g: GroupId) -> Result<CpuWeight, GroupError> {
        self.groups.lock().weight(g)
    }

    /// A group's `cpu.max` (the root's: no limit), to print it, or to parse a new one that
    /// keeps its period ([`CpuMax::parse`]).
    pub fn group_max(&self, g: GroupId) -> Result<CpuMax, GroupError> {
        self.groups.lock().max(g)
    }

    /// A copy of the group table.
    pub fn group_table(&self) -> Groups<G> {
        self.groups.lock().clone()
    }
}
