//! Hooks for tests and benchmarks (cargo feature `testing`): run one balance pass on
//! demand and inject PELT figures, as the scenarios of docs/linux-v5.7.md §6 set them.

use crate::locks::Locks;

use super::Smp;
use crate::balance::IdleType;
use crate::error::SchedError;
use crate::platform::Platform;
use crate::table::Location;
use crate::task::{TaskId, TaskState};
use crate::weights::saturate_u32;

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// Runs one `load_balance` of `cpu`'s domain `level` now, whether or not its interval
    /// has expired (experiments and tests). Returns (tasks moved, continue upwards); the
    /// [`crate::balance::BalanceRecord`]s (one per round) go to the platform as events.
    /// A CPU out of range is [`SchedError::CpuOutOfRange`].
    pub fn balance_domain(
        &self,
        cpu: usize,
        level: usize,
        idle: IdleType,
        now: u64,
    ) -> Result<(u32, bool), SchedError> {
        self.check_cpu(cpu)?;
        let mut bal = self.bal(cpu);
        let Some(d) = self.domain_view(cpu, level) else { return Ok((0, true)) };
        Ok(self.load_balance_in(&mut bal, cpu, level, &d, idle, now))
    }

    /// Overrides a CPU's runqueue PELT averages (sums set to match), as docs/linux-v5.7.md §6's
    /// scenarios inject them. The runqueue's util_est sum is capped at `util`.
    pub fn inject_rq_pelt(&self, cpu: usize, util: u64, runnable: u64, load: u64) -> Result<(), SchedError> {
        self.check_cpu(cpu)?;
        let mut st = self.rq(cpu);
        let a = &mut st.rq.cfs.avg;
        let div = a.divider();
        a.util_avg = util;
        a.util_sum = saturate_u32(util * div);
        a.runnable_avg = runnable;
        a.runnable_sum = runnable * div;
        a.load_avg = load;
        a.load_sum = load * div;
        a.util_est.enqueued = a.util_est.enqueued.min(util as u32);
        st.rq.cfs.pelt_slack = crate::runqueue::PeltSlack::default();
        self.after_update(cpu, &mut st);
        Ok(())
    }

    /// Overrides a queued or running task's PELT averages and util_est (as docs/linux-v5.7.md §6's
    /// scenarios do); the runqueue's util_est sum follows.
    pub fn inject_task_pelt(
        &self,
        id: TaskId,
        util: u64,
        util_est: u32,
        load: u64,
    ) -> Result<(), SchedError> {
        let loc = self.table().get(id)?.location;
        let Location::OnCpu { cpu, slot } = loc else {
            return Err(SchedError::InvalidState { task: id, state: TaskState::Blocked });
        };
        let mut st = self.rq(cpu as usize);
        let rq = &mut st.rq;
        let Some(cell) = rq.entity_in(self.pool(), slot as u32) else {
            return Err(SchedError::UnknownTask(id));
        };
        cell.modify(|e| {
            let queued = e.on_rq;
            if queued {
                crate::pelt::util_est_sub(&mut rq.cfs.avg.util_est, &e.avg.util_est);
            }
            let div = e.avg.divider();
            e.avg.util_avg = util;
            e.avg.util_sum = saturate_u32(util * div);
            e.avg.load_avg = load.min(e.weight());
            e.avg.load_sum = e.avg.load_avg * div / e.weight().max(1);
            e.avg.runnable_avg = util.min(1024);
            e.avg.runnable_sum = e.avg.runnable_avg * div;
            e.avg.util_est = crate::pelt::UtilEst { enqueued: util_est, ewma: util_est };
            if queued {
                crate::pelt::util_est_add(&mut rq.cfs.avg.util_est, &e.avg.util_est);
            }
        });
        st.rq.cfs.pelt_slack = crate::runqueue::PeltSlack::default();
        self.after_update(cpu as usize, &mut st);
        Ok(())
    }
}
