//! Task groups on the simulated machine: the core's group calls at the machine's `now`, with
//! the reschedules they ask for passed on as the event loop passes any other.

use sched_core::group::bandwidth::{BandwidthStats, CpuMax};
use sched_core::group::shares::CpuWeight;
use sched_core::group::tree::GroupId;
use sched_core::group::GroupError;
use sched_core::TaskId;

impl<const C: usize, const G: usize> super::Machine<C, G> {
    /// Creates a group of `cpu.weight` `weight` under `parent`.
    pub fn create_group(&mut self, parent: GroupId, weight: u32) -> Result<GroupId, GroupError> {
        self.smp.create_group(parent, CpuWeight::new(weight)?)
    }

    /// Sets a group's `cpu.weight`.
    pub fn set_group_weight(&mut self, g: GroupId, weight: u32) -> Result<(), GroupError> {
        self.now = self.now.max(1);
        self.smp.set_group_weight(self.now, g, CpuWeight::new(weight)?)?;
        self.pass_reschedules();
        Ok(())
    }

    /// Deletes a group that holds no task and no group.
    pub fn delete_group(&mut self, g: GroupId) -> Result<(), GroupError> {
        self.smp.delete_group(g)
    }

    /// How many tasks group `g` counts.
    pub fn group_tasks(&self, g: GroupId) -> Result<u32, GroupError> {
        self.smp.group_tasks(g)
    }

    /// Sets a group's `cpu.max` from its text ("10000 100000", "max").
    pub fn set_group_max(&mut self, g: GroupId, text: &str) -> Result<(), GroupError> {
        let max = CpuMax::parse(text, self.smp.group_table().max(g).ok())?;
        self.now = self.now.max(1);
        self.smp.set_group_max(self.now, g, max)?;
        self.pass_reschedules();
        Ok(())
    }

    /// Moves a task into group `g`.
    pub fn move_task(&mut self, t: TaskId, g: GroupId) -> Result<(), sched_core::SchedError> {
        self.now = self.now.max(1);
        self.smp.move_task(self.now, t, g)?;
        self.pass_reschedules();
        Ok(())
    }

    /// A group's `cpu.stat` bandwidth figures.
    pub fn group_bandwidth(&self, g: GroupId) -> Result<BandwidthStats, GroupError> {
        self.smp.group_bandwidth(g)
    }

    /// The CPU time task `t` has had up to now (its current run included).
    pub fn cpu_time(&self, t: TaskId) -> u64 {
        let done = self.tasks.get(&t).map_or(0, |s| s.ran_ns);
        let running =
            self.cpus.iter().find(|c| c.running == Some(t)).map_or(0, |c| self.now.saturating_sub(c.since));
        done + running
    }

    /// Every CPU the core asked to reschedule gets its IPI.
    fn pass_reschedules(&mut self) {
        for cpu in 0..self.cpus.len() {
            self.ipi_self_if_resched(cpu);
        }
        self.after_core_call(usize::MAX);
    }
}
