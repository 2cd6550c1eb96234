//! Where a task goes when it is created, execs or wakes (`select_task_rq_fair`, docs/linux-v5.7.md §5).
//!
//! - **Fork / exec** take the slow path: from the highest domain with BALANCE_FORK /
//!   BALANCE_EXEC down, `find_idlest_group` then `find_idlest_group_cpu`.
//! - **Wakeups** take the fast path: `wake_affine` (idle, then weight) between the waker's
//!   CPU and the previous one when they share a WAKE_AFFINE domain, then
//!   `select_idle_sibling` within the target's LLC — or, on asymmetric-capacity machines,
//!   `select_idle_capacity`. Nothing outside the target's LLC is considered on this path.
//!
//! Affinity always wins: every candidate is filtered by the task's mask and a disallowed
//! result falls back to an allowed CPU.

use portable_atomic::Ordering::Relaxed;

use super::{update_avg, Smp};
use crate::balance::stats::{classify, GroupType, SgStats};
use crate::capacity::fits_capacity;
use crate::cpumask::CpuMask;
use crate::error::SchedError;
use crate::fair::WakeFlags;
use crate::locks::Locks;
use crate::pelt::SCHED_CAPACITY_SCALE;
use crate::placement::{
    affine_weight_prefers_this, idlest_beats_local, pick_idlest, sis_prop_budget, wake_wide, AffineSide,
    SelectFor, Waker, SCAN_COST_PER_CPU_NS,
};
use crate::platform::Platform;
use crate::task::Entity;
use crate::topology::SdFlags;
use crate::weights::saturate_u32;

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    internal! {
        /// Chooses the CPU for `e`, being created, exec'ing or woken by CPU `this`, and says
        /// whether a wakeup went the affine fast path (then the waker's `recent_used_cpu`
        /// becomes `this`). Always a CPU `e`'s affinity allows. For experiments (the `internals`
        /// feature, whose `placement` module names its inputs): where a task would go, without
        /// moving it. CPUs out of range (`this`, the previous CPU of a wakeup, `e.cpu` for exec)
        /// and an affinity with no online CPU are refused.
        pub fn select_task_rq(
            &self,
            this: usize,
            e: &mut Entity,
            why: SelectFor,
            wf: WakeFlags,
            waker: Waker,
        ) -> Result<(usize, bool), SchedError> {
            self.check_cpu(this)?;
            match why {
                SelectFor::Fork => {}
                SelectFor::Exec => self.check_cpu(e.cpu as usize)?,
                SelectFor::Wake(p) => self.check_cpu(p as usize)?,
            }
            self.check_affinity(&e.affinity)?;
            Ok(self.select_cpu(this, e, why, wf, waker))
        }
    }

    /// [`Smp::select_task_rq`] for callers that validated their input.
    pub(crate) fn select_cpu(
        &self,
        this: usize,
        e: &mut Entity,
        why: SelectFor,
        wf: WakeFlags,
        waker: Waker,
    ) -> (usize, bool) {
        if CPUS == 1 {
            // The only CPU (callers validated that the task may run there); its waker's
            // `recent_used_cpu` is already 0. Keeps the placement walk out of a one-CPU image.
            return (0, false);
        }
        let allowed = e.affinity.and(&self.online());
        let (prev, flag) = match why {
            SelectFor::Fork => (this, SdFlags::BALANCE_FORK),
            SelectFor::Exec => (e.cpu as usize, SdFlags::BALANCE_EXEC),
            SelectFor::Wake(p) => (p as usize, SdFlags::BALANCE_WAKE),
        };
        let is_wake = matches!(why, SelectFor::Wake(_));
        let sync = wf.contains(WakeFlags::SYNC) && waker.present;
        let want_affine =
            is_wake && !self.wakes_wide(this, e.wakee_flips, waker.flips) && allowed.contains(this);
        let task_load = self.placed_load(e);
        let mut new_cpu = prev;
        let mut slow: Option<usize> = None;
        {
            let topo = self.topology();
            for (lvl, d) in topo.domains(this).enumerate() {
                if !d.flags.contains(SdFlags::LOAD_BALANCE) {
                    break;
                }
                if want_affine && d.flags.contains(SdFlags::WAKE_AFFINE) && d.span.contains(prev) {
                    if this != prev {
                        new_cpu = self.wake_affine(d.imbalance_pct, task_load, this, prev, sync, waker.load);
                    }
                    slow = None;
                    break;
                }
                if d.flags.contains(flag) {
                    slow = Some(lvl);
                } else if !want_affine {
                    break;
                }
            }
        }
        let cpu = if let Some(lvl) = slow {
            self.find_idlest_cpu(this, lvl, e, task_load, prev, flag)
        } else if is_wake {
            self.select_idle_sibling(this, e, prev, new_cpu)
        } else {
            new_cpu
        };
        let affine_fast = slow.is_none() && is_wake && want_affine;
        let cpu = if allowed.contains(cpu) {
            cpu
        } else if allowed.contains(prev) {
            prev
        } else {
            allowed.first().unwrap_or(this)
        };
        (cpu, affine_fast)
    }

    /// `wake_wide`: the waker and wakee switch partners so often (relative to the LLC size)
    /// that pulling wakees next to the waker would pile them up.
    fn wakes_wide(&self, this: usize, wakee_flips: u32, waker_flips: u32) -> bool {
        wake_wide(self.topology().llc_size(this) as u32, wakee_flips, waker_flips)
    }

    /// The load the placement weighs a task by (`task_h_load`): with task groups, the part of
    /// its last CPU's load its hierarchy gives it there; its own load average otherwise.
    pub(crate) fn placed_load(&self, e: &Entity) -> u64 {
        #[cfg(feature = "groups")]
        if G > 0 && e.group != 0 && e.pelt_attached && (e.cpu as usize) < self.nr_cpus() {
            return self.rq(e.cpu as usize).fair(self.pool()).group_task_h_load(e.group, e.avg.load_avg);
        }
        e.avg.load_avg
    }

    /// `wake_affine`: `this` if the idle or weight test prefers it, else `prev`.
    fn wake_affine(
        &self,
        pct: u32,
        task_load: u64,
        this: usize,
        prev: usize,
        sync: bool,
        waker_load: u64,
    ) -> usize {
        if let Some(t) = self.wake_affine_idle(this, prev, sync) {
            return t;
        }
        if let Some(t) = self.wake_affine_weight(pct, task_load, this, prev, sync, waker_load) {
            return t;
        }
        prev
    }

    fn is_idle(&self, cpu: usize) -> bool {
        self.stats(cpu).idle.load(Relaxed)
    }

    /// `sched_idle_cpu`: only SCHED_IDLE tasks there.
    fn sched_idle_cpu(&self, cpu: usize) -> bool {
        let s = self.stats(cpu);
        let nr = s.nr_running.load(Relaxed);
        nr > 0 && nr == s.idle_h_nr_running.load(Relaxed)
    }

    fn share_cache(&self, a: usize, b: usize) -> bool {
        self.topology().llc_span(a).contains(b)
    }

    /// `wake_affine_idle`.
    pub(crate) fn wake_affine_idle(&self, this: usize, prev: usize, sync: bool) -> Option<usize> {
        if self.is_idle(this) && self.share_cache(this, prev) {
            return Some(if self.is_idle(prev) { prev } else { this });
        }
        if sync && self.stats(this).nr_running.load(Relaxed) == 1 {
            return Some(this);
        }
        None
    }

    /// `wake_affine_weight`: compares the load `this` would have with the task (whose load is
    /// `task_load`, [`Smp::placed_load`]), against `prev` without it, each scaled by the
    /// other's capacity, with a bias towards `prev`.
    pub(crate) fn wake_affine_weight(
        &self,
        pct: u32,
        task_load: u64,
        this: usize,
        prev: usize,
        sync: bool,
        waker_load: u64,
    ) -> Option<usize> {
        let (t, p) = (self.stats(this), self.stats(prev));
        let this_side =
            AffineSide { load: t.load.load(Relaxed) as u64, capacity: t.capacity.load(Relaxed) as u64 };
        let prev_side =
            AffineSide { load: p.load.load(Relaxed) as u64, capacity: p.capacity.load(Relaxed) as u64 };
        let sync_waker = sync.then_some(waker_load);
        affine_weight_prefers_this(this_side, prev_side, task_load, pct, sync_waker).then_some(this)
    }

    /// `select_idle_sibling`: an idle CPU near `target` (its LLC), else `target`.
    pub(crate) fn select_idle_sibling(
        &self,
        this: usize,
        e: &mut Entity,
        prev: usize,
        target: usize,
    ) -> usize {
        let allowed = e.affinity.and(&self.online());
        let recent = e.recent_used_cpu as usize;
        // Everything this wakeup needs from the topology, under one read lock.
        let (asym_span, llc, prev_shares, recent_shares) = {
            let topo = self.topology();
            let asym_span = topo
                .asym_cpucapacity_level(target)
                .map(|lvl| topo.domain(target, lvl).map(|d| d.span).unwrap_or_default());
            let shares = |c: usize| topo.llc_span(c).contains(target);
            (asym_span, topo.llc_span(target), shares(prev), shares(recent))
        };
        if let Some(span) = asym_span {
            return self.select_idle_capacity(e, span.and(&allowed), target).unwrap_or(target);
        }
        let idle_or_sched_idle = |c: usize| self.is_idle(c) || self.sched_idle_cpu(c);
        if idle_or_sched_idle(target) {
            return target;
        }
        if prev != target && prev_shares && idle_or_sched_idle(prev) {
            return prev;
        }
        // (Linux also lets a per-CPU kworker waker stack with its wakee; there are no
        // kernel threads here.)
        if recent != prev
            && recent != target
            && recent_shares
            && idle_or_sched_idle(recent)
            && allowed.contains(recent)
        {
            e.recent_used_cpu = prev as u32;
            return recent;
        }
        if llc.weight() <= 1 {
            return target;
        }
        if let Some(c) = self.select_idle_core(&allowed, &llc, target) {
            return c;
        }
        if let Some(c) = self.select_idle_cpu(this, &allowed, &llc, target) {
            return c;
        }
        if let Some(c) = self.select_idle_smt(&allowed, target) {
            return c;
        }
        target
    }

    /// `select_idle_core` (SMT machines only): a core of the LLC whose threads are all idle.
    fn select_idle_core(&self, allowed: &CpuMask, llc: &CpuMask, target: usize) -> Option<usize> {
        let topo = self.topology();
        if !topo.domains(target).any(|d| d.flags.share_cpucapacity()) {
            return None;
        }
        let mut seen = CpuMask::EMPTY;
        for c in llc.and(allowed).iter_wrap(target) {
            if seen.contains(c) {
                continue;
            }
            let core = topo.domain(c, 0).filter(|d| d.flags.share_cpucapacity()).map(|d| d.span);
            let core = core.unwrap_or(CpuMask::single(c));
            seen = seen.or(&core);
            if core.iter().all(|s| self.is_idle(s)) && allowed.contains(c) {
                return Some(c);
            }
        }
        None
    }

    /// `select_idle_smt`: an idle hardware thread sibling of `target`.
    fn select_idle_smt(&self, allowed: &CpuMask, target: usize) -> Option<usize> {
        let topo = self.topology();
        let core = topo.domain(target, 0).filter(|d| d.flags.share_cpucapacity())?.span;
        core.and(allowed).iter().find(|&c| c != target && self.is_idle(c))
    }

    /// `select_idle_cpu`: scan the LLC from `target` (wrapping) for an idle CPU, at most as
    /// many probes as SIS_PROP allows from this CPU's average idle time and the LLC's average
    /// scan cost.
    fn select_idle_cpu(&self, this: usize, allowed: &CpuMask, llc: &CpuMask, target: usize) -> Option<usize> {
        let avg_idle = self.rq(this).avg_idle / 512;
        let llc_id = llc.first().unwrap_or(target);
        let avg_cost = self.llc_scan_cost[llc_id].load(Relaxed) as u64 + 1;
        let mut nr = sis_prop_budget(llc.weight() as u64, avg_idle, avg_cost);
        let t0 = self.platform.clock_ns();
        let mut probes = 0u64;
        let mut found = None;
        for c in llc.and(allowed).iter_wrap(target) {
            nr -= 1;
            if nr == 0 {
                return None;
            }
            probes += 1;
            if self.is_idle(c) || self.sched_idle_cpu(c) {
                found = Some(c);
                break;
            }
        }
        let cost = match (t0, self.platform.clock_ns()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => SCAN_COST_PER_CPU_NS * probes,
        };
        let old = self.llc_scan_cost[llc_id].load(Relaxed) as u64;
        self.llc_scan_cost[llc_id].store(saturate_u32(update_avg(old, cost)), Relaxed);
        found
    }

    /// `select_idle_capacity`: the first idle CPU (from `target`, wrapping) the task fits,
    /// else the idle CPU with the most capacity.
    fn select_idle_capacity(&self, e: &Entity, cpus: CpuMask, target: usize) -> Option<usize> {
        let util = e.util_est();
        let mut best: Option<(u64, usize)> = None;
        for c in cpus.iter_wrap(target) {
            if !self.is_idle(c) && !self.sched_idle_cpu(c) {
                continue;
            }
            let cap = self.stats(c).capacity.load(Relaxed) as u64;
            if fits_capacity(util, cap) {
                return Some(c);
            }
            if best.is_none_or(|(b, _)| cap > b) {
                best = Some((cap, c));
            }
        }
        best.map(|(_, c)| c)
    }

    /// `find_idlest_cpu`: from domain `lvl` of `this` downwards, the idlest group and its
    /// idlest CPU; a CPU that changes continues in that CPU's smaller domains.
    fn find_idlest_cpu(
        &self,
        this: usize,
        lvl: usize,
        e: &Entity,
        task_load: u64,
        prev: usize,
        flag: SdFlags,
    ) -> usize {
        let mut cpu = this;
        let mut new_cpu = cpu;
        let mut level = Some(lvl);
        {
            let topo = self.topology();
            let span = topo.domain(this, lvl).map(|d| d.span).unwrap_or_default();
            if !span.intersects(&e.affinity) {
                return prev;
            }
        }
        while let Some(l) = level {
            let d = {
                let topo = self.topology();
                topo.domain(cpu, l).copied()
            };
            let Some(d) = d else { break };
            let child = l.checked_sub(1);
            if !d.flags.contains(flag) {
                level = child;
                continue;
            }
            let Some(group) = self.find_idlest_group(cpu, l, e, task_load) else {
                level = child;
                continue;
            };
            new_cpu = self.find_idlest_group_cpu(&group, e, cpu);
            if new_cpu == cpu {
                level = child;
                continue;
            }
            // Continue below, in the new CPU's domains smaller than this one.
            cpu = new_cpu;
            let weight = d.span_weight;
            let topo = self.topology();
            level = None;
            for (i, t) in topo.domains(cpu).enumerate() {
                if weight <= t.span_weight {
                    break;
                }
                if t.flags.contains(flag) {
                    level = Some(i);
                }
            }
        }
        new_cpu
    }

    /// Per-group statistics as the task's placement sees them (`update_sg_wakeup_stats`):
    /// the task's own contribution (if it still counts somewhere; its load `task_load`,
    /// [`Smp::placed_load`]) is left out.
    fn wakeup_stats(
        &self,
        span: &CpuMask,
        e: &Entity,
        task_load: u64,
        pct: u32,
        asym_cap: bool,
        gid: usize,
    ) -> SgStats {
        let mut s =
            SgStats { span: *span, first_cpu: span.first().unwrap_or(0) as u32, ..SgStats::default() };
        for c in span.iter() {
            let st = self.stats(c);
            // The task counts on its own CPU while runnable there, and in that CPU's PELT
            // sums while attached there (also while blocked).
            let counts_pelt = e.pelt_attached && e.cpu as usize == c;
            let running_here = e.on_rq && e.cpu as usize == c;
            let load = st.load.load(Relaxed) as u64;
            let util_avg = st.util_avg.load(Relaxed) as u64;
            let util_est = st.util_est.load(Relaxed) as u64;
            let runnable = st.runnable.load(Relaxed) as u64;
            let (load, util, runnable) = if counts_pelt {
                let u = util_avg.saturating_sub(e.avg.util_avg);
                let est = if running_here {
                    util_est.saturating_sub(e.avg.util_est.task_estimate() as u64)
                } else {
                    util_est
                };
                (
                    load.saturating_sub(task_load),
                    u.max(est).min(st.capacity_orig.load(Relaxed) as u64),
                    runnable.saturating_sub(e.avg.runnable_avg),
                )
            } else {
                (load, st.util.load(Relaxed) as u64, runnable)
            };
            s.group_load += load;
            s.group_util += util;
            s.group_runnable += runnable;
            let local = running_here as u32;
            s.sum_h_nr_running += st.h_nr_running.load(Relaxed).saturating_sub(local);
            let nr = st.nr_running.load(Relaxed).saturating_sub(local);
            s.sum_nr_running += nr;
            if nr == 0 && (st.idle.load(Relaxed) || running_here) {
                s.idle_cpus += 1;
            }
        }
        let sgc = self.sgc_of(gid);
        s.max_capacity = sgc.max_capacity.load(Relaxed) as u64;
        s.min_capacity = sgc.min_capacity.load(Relaxed) as u64;
        if asym_cap && !fits_capacity(e.util_est(), s.max_capacity) {
            s.group_misfit_task_load = 1;
        }
        s.group_capacity = sgc.capacity.load(Relaxed) as u64;
        s.group_weight = span.weight() as u32;
        s.group_type = classify(pct, sgc.imbalance.load(Relaxed), &s);
        if matches!(s.group_type, GroupType::FullyBusy | GroupType::Overloaded) {
            s.avg_load = s.group_load * SCHED_CAPACITY_SCALE / s.group_capacity.max(1);
        }
        s
    }

    /// `find_idlest_group`: the idlest non-local group of `cpu`'s domain `lvl`, if moving
    /// there beats staying in the local group. Ties favour the local group.
    pub(crate) fn find_idlest_group(
        &self,
        cpu: usize,
        lvl: usize,
        e: &Entity,
        task_load: u64,
    ) -> Option<SgStats> {
        // The topology's read guard is held through the walk (see `sd_stats`).
        let topo = self.topology();
        let d = *topo.domain(cpu, lvl)?;
        let asym_cap = d.flags.asym_cpucapacity();
        let mut local: Option<SgStats> = None;
        let mut idlest: Option<SgStats> = None;
        for g in topo.groups(cpu, lvl) {
            let span = &g.span;
            if !span.intersects(&e.affinity) {
                continue;
            }
            let s = self.wakeup_stats(span, e, task_load, d.imbalance_pct, asym_cap, g.id);
            if span.contains(cpu) {
                local = Some(s);
            } else if pick_idlest(idlest.as_ref(), &s) {
                idlest = Some(s);
            }
        }
        let idlest = idlest?;
        let Some(local) = local else { return Some(idlest) };
        let numa = d.flags.numa();
        idlest_beats_local(&local, &idlest, d.imbalance_pct, numa).then_some(idlest)
    }

    /// `find_idlest_group_cpu`: a CPU running only SCHED_IDLE tasks; else the most
    /// recently idled idle CPU (an idle CPU that never recorded an idle time is not
    /// chosen); else the least loaded CPU (starting from `this`).
    pub(crate) fn find_idlest_group_cpu(&self, group: &SgStats, e: &Entity, this: usize) -> usize {
        if group.group_weight == 1 {
            return group.first_cpu as usize;
        }
        let mut latest_idle = 0u64;
        let mut shallowest: Option<usize> = None;
        let mut min_load = u64::MAX;
        let mut least_loaded = this;
        for c in group.span.and(&e.affinity).iter() {
            if self.sched_idle_cpu(c) {
                return c;
            }
            let st = self.stats(c);
            if st.idle.load(Relaxed) {
                let stamp = st.idle_stamp.load(Relaxed);
                if stamp > latest_idle {
                    latest_idle = stamp;
                    shallowest = Some(c);
                }
            } else if shallowest.is_none() {
                let load = st.load.load(Relaxed) as u64;
                if load < min_load {
                    min_load = load;
                    least_loaded = c;
                }
            }
        }
        shallowest.unwrap_or(least_loaded)
    }
}

#[cfg(test)]
mod tests;
