//! One load-balance pass over the machine (docs/linux-v5.7.md §4): `load_balance` itself —
//! the rounds (first, redirected, redo), the failure, interval and active-balance bookkeeping
//! around the decisions of [`crate::balance`], the group statistics it gathers — and the
//! active-balance stopper. When passes run is `rebalance.rs`.

use portable_atomic::Ordering::Relaxed;

use crate::balance::busiest::{decide, pick_busiest, GroupDecision};
use crate::balance::designate::should_we_balance;
use crate::balance::imbalance::MigrationType;
use crate::balance::migrate::{detach_one_task, DetachEnv, LbfFlags, NR_MIGRATE_BREAK};
use crate::balance::queue::{find_busiest_queue, QueueEnv};
use crate::balance::stats::{self, group_stats, CpuSnap, GroupInfo, SgStatus, StatsEnv};
use crate::balance::stats::{DomainEnv, SdStats};
use crate::balance::{BalanceRecord, IdleType, Outcome, Round, MAX_PINNED_INTERVAL_MS};
use crate::weights::saturate_u32;

use super::{BalanceState, Smp};
use crate::cpumask::CpuMask;
use crate::platform::{EventKind, MigrateReason, Platform};
use crate::table::Location;
use crate::topology::{Level, SdFlags};
use spin::RelaxStrategy;

/// What the balancer needs of one domain, copied out of the topology.
#[derive(Debug, Clone, Copy)]
pub(super) struct DomainView {
    pub(super) level: Level,
    pub(super) span: CpuMask,
    pub(super) flags: SdFlags,
    pub(super) imbalance_pct: u32,
    pub(super) busy_factor: u32,
    pub(super) cache_nice_tries: u32,
    pub(super) min_interval_ms: u64,
    pub(super) max_interval_ms: u64,
    pub(super) prefer_sibling: bool,
    pub(super) has_parent: bool,
    /// The span of the balancing CPU's own group at this level (empty if it has none).
    pub(super) local_span: CpuMask,
}

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: RelaxStrategy>
    Smp<P, CPUS, TASKS, Q, R>
{
    /// What `cpu` last published, as the balancer's decisions read it. (Out of line on 32-bit
    /// targets: many callers, and an MCU image pays for each copy.)
    #[cfg_attr(target_pointer_width = "32", inline(never))]
    pub(super) fn snap(&self, cpu: usize) -> CpuSnap {
        let s = self.stats(cpu);
        CpuSnap {
            nr_running: s.nr_running.load(Relaxed),
            h_nr_running: s.h_nr_running.load(Relaxed),
            idle_h_nr_running: s.idle_h_nr_running.load(Relaxed),
            load: s.load.load(Relaxed) as u64,
            runnable: s.runnable.load(Relaxed) as u64,
            util: s.util.load(Relaxed) as u64,
            capacity: s.capacity.load(Relaxed) as u64,
            capacity_orig: s.capacity_orig.load(Relaxed) as u64,
            misfit_task_load: s.misfit_task_load.load(Relaxed) as u64,
            idle: s.idle.load(Relaxed),
        }
    }

    pub(super) fn domain_view(&self, cpu: usize, lvl: usize) -> Option<DomainView> {
        let topo = self.topology();
        let d = topo.domain(cpu, lvl)?;
        let child_prefer =
            lvl > 0 && topo.domain(cpu, lvl - 1).is_some_and(|c| c.flags.contains(SdFlags::PREFER_SIBLING));
        Some(DomainView {
            level: d.level,
            span: d.span,
            flags: d.flags,
            imbalance_pct: d.imbalance_pct,
            busy_factor: d.busy_factor,
            cache_nice_tries: d.cache_nice_tries,
            min_interval_ms: d.min_interval_ms,
            max_interval_ms: d.max_interval_ms,
            prefer_sibling: child_prefer,
            has_parent: lvl + 1 < topo.nr_levels(cpu),
            local_span: topo.groups(cpu, lvl).next().map(|g| g.span).unwrap_or_default(),
        })
    }

    fn asym_prefer(&self, a: u32, b: u32) -> bool {
        let t = self.topology();
        t.asym_priority(a as usize) > t.asym_priority(b as usize)
    }

    /// Statistics of every group of `cpu`'s domain `lvl` (`update_sd_lb_stats`), seen from
    /// the destination `dst` (`cpu`, or a CPU of its group after a redirect).
    #[allow(clippy::too_many_arguments)]
    fn sd_stats(
        &self,
        cpu: usize,
        dst: usize,
        lvl: usize,
        d: &DomainView,
        idle: IdleType,
        cpus: &CpuMask,
        interval_ms: u64,
        now: u64,
    ) -> SdStats {
        let asym = |a: u32, b: u32| self.asym_prefer(a, b);
        let env = StatsEnv {
            flags: d.flags,
            imbalance_pct: d.imbalance_pct,
            idle,
            dst_cpu: dst as u32,
            cpus,
            asym_prefer: &asym,
        };
        let denv = DomainEnv {
            flags: d.flags,
            imbalance_pct: d.imbalance_pct,
            prefer_sibling: d.prefer_sibling,
            idle,
        };
        let snap = |c: usize| self.snap(c);
        let mut sds = SdStats::default();
        let mut status = SgStatus::empty();
        let groups: heapless::Vec<(usize, CpuMask, u32), CPUS> = {
            let topo = self.topology();
            topo.groups(cpu, lvl).map(|g| (g.id, g.span, g.asym_prefer_cpu as u32)).collect()
        };
        for (i, (id, span, prefer)) in groups.iter().enumerate() {
            let local = i == 0;
            if local
                && (idle != IdleType::NewlyIdle
                    || self.jiffies(now) >= self.sgc_of(*id).next_update.load(Relaxed))
            {
                self.update_group_capacity(cpu, dst, lvl, *id, interval_ms, now);
            }
            let sgc = self.sgc_of(*id);
            let info = GroupInfo {
                span: *span,
                capacity: sgc.capacity.load(Relaxed) as u64,
                min_capacity: sgc.min_capacity.load(Relaxed) as u64,
                max_capacity: sgc.max_capacity.load(Relaxed) as u64,
                imbalance: sgc.imbalance.load(Relaxed),
                asym_prefer_cpu: *prefer,
            };
            let s = group_stats(&env, &info, local, &snap, &mut status);
            if local {
                sds.local = s;
            } else if pick_busiest(&denv, &sds.local, sds.busiest.as_ref(), &s, &asym) {
                sds.busiest = Some(s);
            }
            sds.total_load += s.group_load;
            sds.total_capacity += s.group_capacity;
        }
        if !d.has_parent {
            self.root.overload.store(status.contains(SgStatus::OVERLOAD), Relaxed);
            self.root.overutilized.store(status.contains(SgStatus::OVERUTILIZED), Relaxed);
        } else if status.contains(SgStatus::OVERUTILIZED) {
            self.root.overutilized.store(true, Relaxed);
        }
        sds
    }

    /// `update_group_capacity` for `cpu`'s local group at `lvl`: at the base level from the
    /// destination CPU's own capacity, above from `cpu`'s child domain's groups.
    fn update_group_capacity(
        &self,
        cpu: usize,
        dst: usize,
        lvl: usize,
        id: usize,
        interval_ms: u64,
        now: u64,
    ) {
        let interval = self.sd_interval(interval_ms, 1, false);
        let sgc = self.sgc_of(id);
        sgc.next_update.store(self.jiffies(now) + interval, Relaxed);
        let (cap, min, max) = if lvl == 0 {
            // No RT/DL/IRQ classes here: the fair class has the whole CPU.
            let c = self.topology().capacity_orig(dst);
            let mut st = self.rq(dst);
            st.rq.set_capacity(c);
            self.cpus[dst].stats.capacity.store(saturate_u32(st.rq.capacity()), Relaxed);
            (c, c, c)
        } else {
            let topo = self.topology();
            let mut acc = (0u64, u64::MAX, 0u64);
            for g in topo.groups(cpu, lvl - 1) {
                let s = self.sgc_of(g.id);
                acc.0 += s.capacity.load(Relaxed) as u64;
                acc.1 = acc.1.min(s.min_capacity.load(Relaxed) as u64);
                acc.2 = acc.2.max(s.max_capacity.load(Relaxed) as u64);
            }
            acc
        };
        sgc.capacity.store(saturate_u32(cap), Relaxed);
        sgc.min_capacity.store(saturate_u32(min), Relaxed);
        sgc.max_capacity.store(saturate_u32(max), Relaxed);
    }

    /// `load_balance` of `cpu`'s domain `d` (level `lvl`). Returns (tasks moved, continue
    /// balancing upwards). Emits one [`BalanceRecord`] per round; the last ends the pass.
    pub(super) fn load_balance_in(
        &self,
        bal: &mut BalanceState,
        cpu: usize,
        lvl: usize,
        d: &DomainView,
        idle: IdleType,
        now: u64,
    ) -> (u32, bool) {
        let features = self.features();
        let tunables = *self.rq(cpu).rq.tunables();
        let fresh = |round: Round, dst: usize| BalanceRecord {
            cpu,
            dst_cpu: dst,
            round,
            level: d.level,
            idle,
            local: None,
            busiest: None,
            migration: None,
            imbalance: 0,
            busiest_cpu: None,
            moved: 0,
            pass_moved: 0,
            outcome: Outcome::Balanced,
            nr_balance_failed: 0,
        };
        let mut rec = fresh(Round::First, cpu);
        let mut cpus = d.span.and(&self.online());
        let dst_grpmask = d.local_span;
        let mut dst_cpu = cpu;
        let mut flags = LbfFlags::empty();
        let mut moved = 0u32;
        // What the records report: tasks moved in the current round and in the whole pass
        // (`moved` is what the pass returns, which Linux zeroes on its balanced exits).
        let mut round_moved = 0u32;
        let mut pass_moved = 0u32;
        let mut active = false;
        let mut continue_balancing = true;
        let mut busiest_cpu;
        let mut imb;

        enum Exit {
            Balanced,
            AllPinned,
            OnePinned,
            Done,
        }

        let exit = 'redo: loop {
            // The destination may have been redirected by an earlier round: it is the one asked.
            if !should_we_balance(dst_cpu, &dst_grpmask, idle, &cpus, &|c| self.snap(c).idle) {
                continue_balancing = false;
                rec.outcome = Outcome::NotDesignated;
                break 'redo Exit::Balanced;
            }
            let interval_ms = bal.domains[lvl].balance_interval_ms;
            let mut sds = self.sd_stats(cpu, dst_cpu, lvl, d, idle, &cpus, interval_ms, now);
            rec.local = Some(sds.local.group_type);
            rec.busiest = sds.busiest.map(|b| b.group_type);
            let denv = DomainEnv {
                flags: d.flags,
                imbalance_pct: d.imbalance_pct,
                prefer_sibling: d.prefer_sibling,
                idle,
            };
            let GroupDecision::Imbalanced(found) = decide(&denv, &mut sds) else {
                break 'redo Exit::Balanced;
            };
            imb = found;
            rec.migration = Some(imb.kind);
            rec.imbalance = imb.amount;
            let Some(busiest) = sds.busiest else { break 'redo Exit::Balanced };
            let qenv = QueueEnv {
                flags: d.flags,
                imbalance_pct: d.imbalance_pct,
                dst_cpu: dst_cpu as u32,
                migration_type: imb.kind,
                imbalance: imb.amount,
                features,
            };
            let Some(b) = find_busiest_queue(&qenv, &busiest.span, &cpus, &|c| self.snap(c)) else {
                break 'redo Exit::Balanced;
            };
            busiest_cpu = b as usize;
            rec.busiest_cpu = Some(b as usize);
            let src_nr = self.snap(busiest_cpu).nr_running;
            let mut denv_det = DetachEnv {
                dst_cpu: dst_cpu as u32,
                dst_nr_running: self.snap(dst_cpu).nr_running,
                dst_grpmask,
                cpus,
                new_dst_cpu: dst_cpu as u32,
                idle,
                migration_type: imb.kind,
                imbalance: imb.amount,
                // Flags carry over a redo, as the kernel's env does.
                flags,
                loop_: 0,
                loop_max: tunables.nr_migrate.min(src_nr),
                loop_break: NR_MIGRATE_BREAK,
                nr_balance_failed: bal.domains[lvl].nr_balance_failed,
                cache_nice_tries: d.cache_nice_tries,
                migration_cost_ns: tunables.migration_cost_ns,
                features,
            };
            if src_nr > 1 && busiest_cpu != dst_cpu {
                denv_det.flags |= LbfFlags::ALL_PINNED;
                loop {
                    let n = self.detach_attach(&mut denv_det, busiest_cpu, dst_cpu, now);
                    moved += n;
                    round_moved += n;
                    pass_moved += n;
                    if denv_det.flags.contains(LbfFlags::NEED_BREAK) {
                        denv_det.flags.remove(LbfFlags::NEED_BREAK);
                        continue;
                    }
                    // Some tasks may only run elsewhere in dst's group: retry with that CPU.
                    if denv_det.flags.contains(LbfFlags::DST_PINNED) && denv_det.imbalance > 0 {
                        rec.outcome = Outcome::Redirected;
                        self.end_round(&mut rec, &mut round_moved, pass_moved, bal, lvl, now);
                        denv_det.cpus.clear(dst_cpu);
                        dst_cpu = denv_det.new_dst_cpu as usize;
                        rec.round = Round::Redirected;
                        rec.dst_cpu = dst_cpu;
                        denv_det.dst_cpu = dst_cpu as u32;
                        denv_det.dst_nr_running = self.snap(dst_cpu).nr_running;
                        denv_det.flags.remove(LbfFlags::DST_PINNED);
                        denv_det.loop_ = 0;
                        denv_det.loop_break = NR_MIGRATE_BREAK;
                        continue;
                    }
                    break;
                }
                flags = denv_det.flags;
                cpus = denv_det.cpus;
                // Pinning kept us from evening things out: tell the parent level.
                if flags.contains(LbfFlags::SOME_PINNED) && denv_det.imbalance > 0 && d.has_parent {
                    let pid = self.topology().groups(cpu, lvl + 1).next().map(|g| g.id);
                    if let Some(pid) = pid {
                        self.sgc_of(pid).imbalance.store(true, Relaxed);
                    }
                }
                if flags.contains(LbfFlags::ALL_PINNED) {
                    cpus.clear(busiest_cpu);
                    if !cpus.is_subset_of(&dst_grpmask) {
                        // Start over without the busiest CPU, towards the same destination.
                        rec.outcome = Outcome::Retried;
                        self.end_round(&mut rec, &mut round_moved, pass_moved, bal, lvl, now);
                        rec = fresh(Round::Redo, dst_cpu);
                        continue 'redo;
                    }
                    rec.outcome = Outcome::AllPinned;
                    break 'redo Exit::AllPinned;
                }
            }
            let db = &mut bal.domains[lvl];
            if moved == 0 {
                rec.outcome = Outcome::NothingDetachable;
                if idle != IdleType::NewlyIdle {
                    db.nr_balance_failed += 1;
                }
                let voluntary = self.voluntary_active_balance(d, idle, imb.kind, busiest_cpu, dst_cpu);
                if voluntary || db.nr_balance_failed > d.cache_nice_tries + 2 {
                    let mut st = self.rq(busiest_cpu);
                    let curr_allowed =
                        st.rq.curr_slot().is_none_or(|n| st.rq.ent_in(self.pool(), n).allows(cpu));
                    if !curr_allowed {
                        drop(st);
                        flags |= LbfFlags::ALL_PINNED;
                        rec.outcome = Outcome::AllPinned;
                        break 'redo Exit::OnePinned;
                    }
                    if !st.active_balance {
                        st.active_balance = true;
                        st.push_cpu = cpu as u32;
                        // The stopper preempts whatever runs there, as Linux's stop
                        // thread does: a port reschedules only while need_resched is set.
                        st.rq.resched_curr();
                        active = true;
                    }
                    drop(st);
                    if active {
                        self.platform.run_stopper(busiest_cpu);
                        rec.outcome = Outcome::ActiveBalance;
                    }
                    // Kicked: let the stopper move even a cache-hot task.
                    db.nr_balance_failed = d.cache_nice_tries + 1;
                }
            } else {
                rec.outcome = Outcome::Moved;
                db.nr_balance_failed = 0;
            }
            if !active || self.voluntary_active_balance(d, idle, imb.kind, busiest_cpu, dst_cpu) {
                db.balance_interval_ms = d.min_interval_ms;
            } else if db.balance_interval_ms < d.max_interval_ms {
                db.balance_interval_ms *= 2;
            }
            break 'redo Exit::Done;
        };
        let db = &mut bal.domains[lvl];
        match exit {
            Exit::Done => {}
            Exit::Balanced | Exit::AllPinned | Exit::OnePinned => {
                if matches!(exit, Exit::Balanced) && d.has_parent && !flags.contains(LbfFlags::ALL_PINNED) {
                    let pid = self.topology().groups(cpu, lvl + 1).next().map(|g| g.id);
                    if let Some(pid) = pid {
                        self.sgc_of(pid).imbalance.store(false, Relaxed);
                    }
                }
                if !matches!(exit, Exit::OnePinned) {
                    db.nr_balance_failed = 0;
                }
                moved = 0;
                if idle != IdleType::NewlyIdle
                    && ((flags.contains(LbfFlags::ALL_PINNED)
                        && db.balance_interval_ms < MAX_PINNED_INTERVAL_MS)
                        || db.balance_interval_ms < d.max_interval_ms)
                {
                    db.balance_interval_ms *= 2;
                }
            }
        }
        self.end_round(&mut rec, &mut round_moved, pass_moved, bal, lvl, now);
        (moved, continue_balancing)
    }

    /// Emits the record of a round that ends now, with its outcome already set.
    fn end_round(
        &self,
        rec: &mut BalanceRecord,
        round_moved: &mut u32,
        pass_moved: u32,
        bal: &BalanceState,
        lvl: usize,
        now: u64,
    ) {
        rec.moved = *round_moved;
        rec.pass_moved = pass_moved;
        rec.nr_balance_failed = bal.domains[lvl].nr_balance_failed;
        self.emit(now, rec.cpu, EventKind::Balance(*rec));
        *round_moved = 0;
        rec.moved = 0;
    }

    /// `voluntary_active_balance`: cases where pushing a running task is right even
    /// without repeated failures.
    fn voluntary_active_balance(
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
            let mut bal = self.bal(target);
            let mut st = self.rq(cpu);
            if st.rq.nr_running() >= 1 && target != cpu {
                if let Some(lvl) = lvl {
                    let d = self.domain_view(target, lvl);
                    let tun = *st.rq.tunables();
                    let mut env = DetachEnv {
                        dst_cpu: target as u32,
                        dst_nr_running: self.snap(target).nr_running,
                        dst_grpmask: CpuMask::single(target),
                        cpus: CpuMask::single(target),
                        new_dst_cpu: target as u32,
                        idle: IdleType::Idle,
                        migration_type: MigrationType::Task,
                        imbalance: 1,
                        flags: LbfFlags::DST_PINNED,
                        loop_: 0,
                        loop_max: tun.nr_migrate,
                        loop_break: NR_MIGRATE_BREAK,
                        nr_balance_failed: bal.domains[lvl].nr_balance_failed,
                        cache_nice_tries: d.map(|d| d.cache_nice_tries).unwrap_or(0),
                        migration_cost_ns: tun.migration_cost_ns,
                        features: self.features(),
                    };
                    st.rq.update_clock(now);
                    if let Some(e) = detach_one_task(&mut env, &mut st.rq.fair(self.pool())) {
                        // Its slot here waits for it until it lands (see attach_moved).
                        st.rq.reserve();
                        if let Ok(te) = self.table().get_mut(e) {
                            te.location = Location::InTransit { from: cpu as u16 };
                        }
                        bal.domains[lvl].nr_balance_failed = 0;
                        moved = Some(e);
                    }
                }
            }
            st.active_balance = false;
            st.rq.resched_curr();
            self.after_update(cpu, &mut st);
        }
        if let Some(e) = moved {
            self.attach_moved(e, cpu, target, now, MigrateReason::ActiveBalance);
        }
    }
}
