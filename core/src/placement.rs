//! Where a task goes when it is created or woken (`select_task_rq_fair`).
//!
//! This first version honours affinity and keeps tasks where they are: a new task starts
//! on its parent's CPU and a woken task on the CPU it slept on, moving only when affinity
//! forbids that CPU. Spreading is then the load balancer's job alone. The placement
//! policies of spec §5 (find_idlest_group at fork and exec, wake_affine and
//! select_idle_sibling at wakeup) build on this entry point.

use crate::platform::Platform;
use crate::smp::Smp;
use crate::task::Entity;

/// Why a CPU is being chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectFor {
    /// A new task (fork).
    Fork,
    /// A task replacing its program (exec).
    Exec,
    /// A woken task, with the CPU it last ran on.
    Wake(u32),
}

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize> Smp<P, CPUS, TASKS, Q> {
    /// Chooses the CPU for a task being created or woken by CPU `this`. Always returns a
    /// CPU the task's affinity allows (the callers validated that it allows some online CPU).
    pub(crate) fn select_task_rq(&self, this: usize, e: &Entity, why: SelectFor, _now: u64) -> usize {
        let allowed = e.affinity.and(&self.online());
        let preferred = match why {
            SelectFor::Fork | SelectFor::Exec => this,
            SelectFor::Wake(prev) => prev as usize,
        };
        if allowed.contains(preferred) {
            preferred
        } else if allowed.contains(this) {
            this
        } else {
            allowed.first().unwrap_or(this)
        }
    }
}
