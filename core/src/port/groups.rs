//! The porter's calls for task groups (the `groups` feature; docs/groups.md): cgroup v2's
//! `cpu.weight` and `cpu.max` for groups of tasks, through the same checks as every call.

use spin::RelaxStrategy;

use super::Scheduler;
use crate::error::SchedError;
use crate::group::bandwidth::{BandwidthStats, CpuMax};
use crate::group::shares::CpuWeight;
use crate::group::tree::GroupId;
use crate::platform::Platform;
use crate::task::TaskId;

impl<
        P: Platform,
        const CPUS: usize,
        const TASKS: usize,
        const Q: usize,
        R: RelaxStrategy,
        const EVENTS: usize,
        const G: usize,
    > Scheduler<P, CPUS, TASKS, Q, R, EVENTS, G>
{
    /// Creates a group under `parent` with `cpu.weight` `weight` (from `cpu`). A full table,
    /// an unknown parent or one nested [`crate::group::tree::MAX_GROUP_DEPTH`] deep is
    /// refused ([`SchedError::Group`]) and nothing changes.
    ///
    /// ```
    /// use sched_core::{port::Scheduler, Features, NoPlatform, TaskParams};
    /// use sched_core::group::{bandwidth::CpuMax, shares::CpuWeight, tree::GroupId};
    /// static S: Scheduler<NoPlatform, 1, 8, 8, sched_core::spin::Spin, 8, 2> = Scheduler::new(NoPlatform, Features::DEFAULT, 250);
    /// S.init_with(|t| t.init_flat(1)).unwrap();
    /// S.cpu_up(0, 1).unwrap();
    /// let logging = S.create_group(0, GroupId::ROOT, CpuWeight::new(20).unwrap()).unwrap();
    /// S.set_group_max(0, 2, logging, CpuMax::parse("5000 100000", None).unwrap()).unwrap();
    /// let t = S.create(0, 3, TaskParams::default(), ()).unwrap();
    /// S.move_task(0, 4, t, logging).unwrap();
    /// assert_eq!(S.task_group(t), Ok(logging));
    /// ```
    pub fn create_group(
        &self,
        cpu: usize,
        parent: GroupId,
        weight: CpuWeight,
    ) -> Result<GroupId, SchedError> {
        let _inside = self.enter(cpu, None)?;
        Ok(self.smp.create_group(parent, weight)?)
    }

    /// Sets a group's `cpu.weight` (from `cpu`); its shares change on every CPU at once.
    pub fn set_group_weight(
        &self,
        cpu: usize,
        now: u64,
        g: GroupId,
        weight: CpuWeight,
    ) -> Result<(), SchedError> {
        let _inside = self.enter(cpu, Some(now))?;
        Ok(self.smp.set_group_weight(now, g, weight)?)
    }

    /// Sets or clears a group's `cpu.max` (from `cpu`; [`CpuMax::UNLIMITED`] clears it).
    /// The root has no limit ([`crate::group::GroupError::Root`]).
    pub fn set_group_max(&self, cpu: usize, now: u64, g: GroupId, max: CpuMax) -> Result<(), SchedError> {
        let _inside = self.enter(cpu, Some(now))?;
        Ok(self.smp.set_group_max(now, g, max)?)
    }

    /// Deletes a group that holds no task and no group (from `cpu`).
    pub fn delete_group(&self, cpu: usize, g: GroupId) -> Result<(), SchedError> {
        let _inside = self.enter(cpu, None)?;
        Ok(self.smp.delete_group(g)?)
    }

    /// Moves a task into group `g` (from `cpu`), wherever the task is. A new task starts in
    /// its creator's group.
    pub fn move_task(&self, cpu: usize, now: u64, id: TaskId, g: GroupId) -> Result<(), SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        self.smp.move_task(now, id, g)
    }

    /// The group a task is in.
    pub fn task_group(&self, id: TaskId) -> Result<GroupId, SchedError> {
        self.smp.task_group(id)
    }

    /// A group's `cpu.stat` bandwidth figures.
    pub fn group_bandwidth(&self, g: GroupId) -> Result<BandwidthStats, SchedError> {
        self.initialised()?;
        Ok(self.smp.group_bandwidth(g)?)
    }

    /// When the earliest group's `cpu.max` period ends (ns), while any period timer runs:
    /// the tick runs them, so a port that stops a CPU's tick other than through
    /// [`Scheduler::idle_enter`] (which keeps it ticking meanwhile) must tick by then.
    /// Lock-free, from anywhere; `None` while no group's `cpu.max` period runs (no group has
    /// a quota, or every period timer has stopped after a period with nothing taken). A
    /// period timer starts when a quota is written, and again when runtime is taken, in its
    /// phase: forwarded by whole periods from its last expiry (for a new group, from the
    /// clock's start), as v5.7's hrtimer is.
    ///
    /// ```
    /// use sched_core::{port::Scheduler, Features, NoPlatform};
    /// use sched_core::group::{bandwidth::CpuMax, shares::CpuWeight, tree::GroupId};
    /// static S: Scheduler<NoPlatform, 1, 8, 8, sched_core::spin::Spin, 8, 2> = Scheduler::new(NoPlatform, Features::DEFAULT, 250);
    /// S.init_with(|t| t.init_flat(1)).unwrap();
    /// S.cpu_up(0, 1).unwrap();
    /// assert_eq!(S.bandwidth_timer(), None, "no group has a quota");
    /// let g = S.create_group(0, GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    /// S.set_group_max(0, 2, g, CpuMax::parse("20000 100000", None).unwrap()).unwrap();
    /// // Written at 2 ns, the first period ends at 100 ms.
    /// assert_eq!(S.bandwidth_timer(), Some(100_000_000));
    /// ```
    pub fn bandwidth_timer(&self) -> Option<u64> {
        self.smp.bandwidth_timer()
    }

    /// A group's `cpu.weight`.
    pub fn group_weight(&self, g: GroupId) -> Result<CpuWeight, SchedError> {
        self.initialised()?;
        Ok(self.smp.group_weight(g)?)
    }

    /// A group's `cpu.max`: to print it, or to parse a new one against it, as writing only
    /// a quota to cgroup v2's file keeps the period.
    ///
    /// ```
    /// use sched_core::{port::Scheduler, Features, NoPlatform};
    /// use sched_core::group::{bandwidth::CpuMax, shares::CpuWeight, tree::GroupId};
    /// static S: Scheduler<NoPlatform, 1, 8, 8, sched_core::spin::Spin, 8, 2> = Scheduler::new(NoPlatform, Features::DEFAULT, 250);
    /// S.init_with(|t| t.init_flat(1)).unwrap();
    /// S.cpu_up(0, 1).unwrap();
    /// let g = S.create_group(0, GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    /// S.set_group_max(0, 2, g, CpuMax::parse("20000 10000", None).unwrap()).unwrap();
    /// // `echo 5000 > cpu.max`: the quota changes, the period stays.
    /// let now = S.group_max(g).unwrap();
    /// S.set_group_max(0, 3, g, CpuMax::parse("5000", Some(now)).unwrap()).unwrap();
    /// assert_eq!(S.group_max(g).unwrap(), CpuMax::parse("5000 10000", None).unwrap());
    /// ```
    pub fn group_max(&self, g: GroupId) -> Result<CpuMax, SchedError> {
        self.initialised()?;
        Ok(self.smp.group_max(g)?)
    }

    /// How many tasks group `g` holds (`cgroup.procs`' length), not counting its children's;
    /// for the root, the live tasks in no other group.
    ///
    /// ```
    /// use sched_core::{port::Scheduler, Features, NoPlatform, TaskParams};
    /// use sched_core::group::{shares::CpuWeight, tree::GroupId};
    /// static S: Scheduler<NoPlatform, 1, 8, 8, sched_core::spin::Spin, 8, 2> = Scheduler::new(NoPlatform, Features::DEFAULT, 250);
    /// S.init_with(|t| t.init_flat(1)).unwrap();
    /// S.cpu_up(0, 1).unwrap();
    /// let g = S.create_group(0, GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    /// let t = S.create(0, 2, TaskParams::default(), ()).unwrap();
    /// S.move_task(0, 3, t, g).unwrap();
    /// assert_eq!(S.group_tasks(g), Ok(1));
    /// assert_eq!(S.group_tasks(GroupId::ROOT), Ok(0));
    /// ```
    pub fn group_tasks(&self, g: GroupId) -> Result<u32, SchedError> {
        self.initialised()?;
        Ok(self.smp.group_tasks(g)?)
    }
}
