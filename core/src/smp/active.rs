//! Active balancing (docs/linux-v5.7.md §4): when detaching fails, the balancer has the
//! busiest CPU's stopper push its running task once it is switched out
//! (`active_load_balance_cpu_stop`), and some cases call for that at once
//! (`voluntary_active_balance`).

use crate::locks::Locks;

use super::load_balance::{DetachAsk, DomainView};
use super::Smp;
use crate::balance::imbalance::{Imbalance, MigrationType};
use crate::balance::migrate::{detach_one_task, LbfFlags};
use crate::balance::stats;
use crate::balance::IdleType;
use crate::cpumask::CpuMask;
use crate::platform::{MigrateReason, Platform};
use crate::table::Location;
use crate::topology::SdFlags;

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// `voluntary_active_balance`: cases where pushing a running task is right even
    /// without repeated failures.
    pub(super) fn voluntary_active_balance(
        &self,
        d: &DomainView,
        idle: IdleType,
        kind: MigrationType,
        src: usize,
        dst: usize,
    ) -> bool {
        if idle != IdleType::NotIdle && d.flags.asym_packing() && self.asym_prefer(dst as u32, src as u32) {
            return true;
        }
        let (s, t) = (self.snap(src), self.snap(dst));
        if idle != IdleType::NotIdle
            && s.h_nr_running == 1
            && stats::check_cpu_capacity(&s, d.imbalance_pct)
            && s.capacity * (d.imbalance_pct as u64) < t.capacity * 100
        {
            return true;
        }
        kind == MigrationType::Misfit
    }

    /// The active-balance stopper on `cpu` (`active_load_balance_cpu_stop`): push one task
    /// that may move to the CPU that asked. Runs from `finish_switch`, once the running
    /// task was switched out.
    pub(crate) fn active_balance_stop(&self, cpu: usize, now: u64) {
        let target = {
            let st = self.rq(cpu);
            if !st.active_balance {
                return;
            }
            st.push_cpu as usize
        };
        // The target's lowest balancing domain that contains this CPU.
        let lvl = {
            let topo = self.topology();
            topo.domains(target).position(|d| d.flags.contains(SdFlags::LOAD_BALANCE) && d.span.contains(cpu))
        };
        let mut moved = None;
        {
            let bal = self.bal(target);
            let mut st = self.rq(cpu);
            if st.rq.nr_running() >= 1 && target != cpu {
                if let Some(lvl) = lvl {
                    let d = self.domain_view(target, lvl);
                    let tun = *st.rq.tunables();
                    let ask = DetachAsk {
                        dst: target,
                        grpmask: CpuMask::single(target),
                        cpus: CpuMask::single(target),
                        idle: IdleType::Idle,
                        imbalance: Imbalance { kind: MigrationType::Task, amount: 1 },
                        flags: LbfFlags::DST_PINNED,
                        loop_max: tun.nr_migrate,
                    };
                    let cache_nice_tries = d.map(|d| d.cache_nice_tries).unwrap_or(0);
                    let mut env =
                        self.detach_env(ask, bal.domains[lvl].nr_balance_failed, cache_nice_tries, &tun);
                    st.rq.update_clock(now);
                    if let Some(e) = detach_one_task(&mut env, &mut st.fair(self.pool())) {
                        // Its slot here waits for it until it lands (see attach_moved).
                        st.rq.reserve();
                        if let Ok(te) = self.table().get_mut(e) {
                            te.location = Location::InTransit { from: cpu as u16 };
                        }
                        moved = Some((e, lvl));
                    }
                }
            }
            st.active_balance = false;
            st.rq.resched_curr();
            self.after_update(cpu, &mut st);
        }
        // The failures that called for the stopper are forgotten once its task landed (a
        // full target sends it back, and the failures stand).
        if let Some((e, lvl)) = moved {
            if self.attach_moved(e, cpu, target, now, MigrateReason::ActiveBalance) {
                self.bal(target).domains[lvl].nr_balance_failed = 0;
            }
        }
    }
}
