//! One CPU's load-balance passes over the machine (docs/linux-v5.7.md §4): periodic
//! balancing per sched domain on the tick (`rebalance_domains`), newly-idle balancing, the
//! active-balance stopper, and `load_balance` itself — the retry, pinning, failure and
//! interval bookkeeping around the decisions of [`crate::balance`].

use core::sync::atomic::Ordering::Relaxed;

use crate::balance::busiest::{decide, pick_busiest, DomainEnv, GroupDecision, SdStats};
use crate::balance::designate::should_we_balance;
use crate::balance::imbalance::MigrationType;
use crate::balance::migrate::{detach_one_task, DetachEnv, LbfFlags, NR_MIGRATE_BREAK};
use crate::balance::queue::{find_busiest_queue, QueueEnv};
use crate::balance::stats::{self, group_stats, CpuSnap, GroupInfo, SgStatus, StatsEnv};
use crate::balance::{
    estimated_balance_cost, BalanceRecord, IdleType, Outcome, Round, MAX_PINNED_INTERVAL_MS,
};

use super::{BalanceState, Smp, SYSCTL_MIGRATION_COST_NS};
use crate::cpumask::CpuMask;
use crate::platform::{EventKind, MigrateReason, Platform};
use crate::table::Location;
use crate::topology::{Level, SdFlags};
use spin::RelaxStrategy;

/// What the balancer needs of one domain, copied out of the topology.
#[derive(Debug, Clone, Copy)]
pub(super) struct DomainView {
    level: Level,
    span: CpuMask,
    flags: SdFlags,
    imbalance_pct: u32,
    busy_factor: u32,
    cache_nice_tries: u32,
    min_interval_ms: u64,
    max_interval_ms: u64,
    prefer_sibling: bool,
    has_parent: bool,
    /// The span of the balancing CPU's own group at this level (empty if it has none).
    local_span: CpuMask,
}

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: RelaxStrategy>
    Smp<P, CPUS, TASKS, Q, R>
{
    fn snap(&self, cpu: usize) -> CpuSnap {
        let s = self.stats(cpu);
        CpuSnap {
            nr_running: s.nr_running.load(Relaxed),
            h_nr_running: s.h_nr_running.load(Relaxed),
            idle_h_nr_running: s.idle_h_nr_running.load(Relaxed),
            load: s.load.load(Relaxed),
            runnable: s.runnable.load(Relaxed),
            util: s.util.load(Relaxed),
            capacity: s.capacity.load(Relaxed),
            capacity_orig: s.capacity_orig.load(Relaxed),
            misfit_task_load: s.misfit_task_load.load(Relaxed),
            idle: s.idle.load(Relaxed),
        }
    }

    pub(super) fn domain_view(&self, cpu: usize, lvl: usize) -> Option<DomainView> {
        let topo = self.topo.read();
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

    /// Jiffy of time `now`.
    pub(crate) fn jiffies(&self, now: u64) -> u64 {
        now / (1_000_000_000 / self.hz as u64)
    }

    pub(crate) fn ms_to_jiffies(&self, ms: u64) -> u64 {
        (ms * self.hz as u64).div_ceil(1000)
    }

    /// `max_load_balance_interval`: HZ × CPUs / 10 jiffies.
    fn max_lb_interval(&self) -> u64 {
        (self.hz as u64 * self.nr_cpus() as u64 / 10).max(1)
    }

    /// `get_sd_balance_interval` in jiffies.
    fn sd_interval(&self, interval_ms: u64, busy_factor: u32, busy: bool) -> u64 {
        let ms = if busy { interval_ms * busy_factor as u64 } else { interval_ms };
        self.ms_to_jiffies(ms).clamp(1, self.max_lb_interval())
    }

    fn asym_prefer(&self, a: u32, b: u32) -> bool {
        let t = self.topo.read();
        t.asym_priority(a as usize) > t.asym_priority(b as usize)
    }

    /// `trigger_load_balance` after a tick: run the periodic balance if it is due.
    pub(crate) fn trigger_load_balance(&self, cpu: usize, now: u64, idle: bool) {
        let due = {
            let b = self.cpus[cpu].balance.lock();
            self.jiffies(now) >= b.next_balance
        };
        // A kicked idle CPU balances for all tickless CPUs (and itself) instead.
        if idle && self.nohz_idle_balance(cpu, now) {
            return;
        }
        if due {
            self.cpus[cpu].rq.lock().rq.update_blocked_averages();
            let idle = if idle { IdleType::Idle } else { IdleType::NotIdle };
            self.rebalance_domains(cpu, now, idle);
        }
        if !idle {
            self.nohz_balancer_kick(cpu, now);
        }
    }

    /// `rebalance_domains`: walks `cpu`'s domains bottom-up and balances each one whose
    /// interval has expired, then sets when the next balance is due.
    pub fn rebalance_domains(&self, cpu: usize, now: u64, mut idle: IdleType) {
        if cpu >= self.nr_cpus() {
            return;
        }
        let mut bal = self.cpus[cpu].balance.lock();
        let j = self.jiffies(now);
        let mut next_balance = j + 60 * self.hz as u64;
        let mut update_next = false;
        let mut continue_balancing = true;
        let mut need_decay = false;
        let mut max_cost = 0u64;
        let levels = self.topo.read().nr_levels(cpu);
        for lvl in 0..levels {
            let Some(d) = self.domain_view(cpu, lvl) else { break };
            // Decay the newidle cost estimate once a second.
            let db = &mut bal.domains[lvl];
            if now > db.next_decay_max_lb_cost {
                db.max_newidle_lb_cost = db.max_newidle_lb_cost * 253 / 256;
                db.next_decay_max_lb_cost = now + 1_000_000_000;
                need_decay = true;
            }
            max_cost += db.max_newidle_lb_cost;
            if !d.flags.contains(SdFlags::LOAD_BALANCE) {
                continue;
            }
            if !continue_balancing {
                if need_decay {
                    continue;
                }
                break;
            }
            let busy = idle != IdleType::Idle;
            let mut interval = self.sd_interval(bal.domains[lvl].balance_interval_ms, d.busy_factor, busy);
            if j >= bal.domains[lvl].last_balance + interval {
                let (moved, cont) = self.load_balance_in(&mut bal, cpu, lvl, &d, idle, now);
                continue_balancing = cont;
                if moved > 0 {
                    idle = if self.snap(cpu).idle { IdleType::Idle } else { IdleType::NotIdle };
                }
                bal.domains[lvl].last_balance = j;
                interval = self.sd_interval(
                    bal.domains[lvl].balance_interval_ms,
                    d.busy_factor,
                    idle != IdleType::Idle,
                );
            }
            let due = bal.domains[lvl].last_balance + interval;
            if next_balance > due {
                next_balance = due;
                update_next = true;
            }
        }
        if need_decay {
            let mut st = self.cpus[cpu].rq.lock();
            st.max_idle_balance_cost = max_cost.max(SYSCTL_MIGRATION_COST_NS);
        }
        if update_next {
            bal.next_balance = next_balance;
            if idle == IdleType::Idle {
                self.nohz_note_next_balance(next_balance);
            }
        }
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
            let topo = self.topo.read();
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
                capacity: sgc.capacity.load(Relaxed),
                min_capacity: sgc.min_capacity.load(Relaxed),
                max_capacity: sgc.max_capacity.load(Relaxed),
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
        let interval = self.ms_to_jiffies(interval_ms).clamp(1, self.max_lb_interval());
        let sgc = self.sgc_of(id);
        sgc.next_update.store(self.jiffies(now) + interval, Relaxed);
        let (cap, min, max) = if lvl == 0 {
            // No RT/DL/IRQ classes here: the fair class has the whole CPU.
            let c = self.topo.read().capacity_orig(dst);
            let mut st = self.cpus[dst].rq.lock();
            st.rq.set_capacity(c);
            self.cpus[dst].stats.capacity.store(st.rq.capacity(), Relaxed);
            (c, c, c)
        } else {
            let topo = self.topo.read();
            let mut acc = (0u64, u64::MAX, 0u64);
            for g in topo.groups(cpu, lvl - 1) {
                let s = self.sgc_of(g.id);
                acc.0 += s.capacity.load(Relaxed);
                acc.1 = acc.1.min(s.min_capacity.load(Relaxed));
                acc.2 = acc.2.max(s.max_capacity.load(Relaxed));
            }
            acc
        };
        sgc.capacity.store(cap, Relaxed);
        sgc.min_capacity.store(min, Relaxed);
        sgc.max_capacity.store(max, Relaxed);
    }

    /// `load_balance` of `cpu`'s domain `d` (level `lvl`). Returns (tasks moved, continue
    /// balancing upwards). Emits a [`BalanceRecord`].
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
        let tunables = *self.cpus[cpu].rq.lock().rq.tunables();
        let fresh = |round: Round, dst: usize| BalanceRecord {
            cpu: cpu as u32,
            dst_cpu: dst as u32,
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
            rec.busiest_cpu = Some(b);
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
                        rec.dst_cpu = dst_cpu as u32;
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
                    let pid = self.topo.read().groups(cpu, lvl + 1).next().map(|g| g.id);
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
                    let mut st = self.cpus[busiest_cpu].rq.lock();
                    let curr_allowed = st.rq.curr_node().is_none_or(|n| st.rq.ent(n).affinity.contains(cpu));
                    if !curr_allowed {
                        drop(st);
                        flags |= LbfFlags::ALL_PINNED;
                        rec.outcome = Outcome::AllPinned;
                        break 'redo Exit::OnePinned;
                    }
                    if !st.active_balance {
                        st.active_balance = true;
                        st.push_cpu = cpu as u32;
                        active = true;
                    }
                    drop(st);
                    if active {
                        self.platform.run_stopper(busiest_cpu as u32);
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
                    let pid = self.topo.read().groups(cpu, lvl + 1).next().map(|g| g.id);
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
        if idle != IdleType::NotIdle
            && d.flags.contains(SdFlags::ASYM_PACKING)
            && self.asym_prefer(dst as u32, src as u32)
        {
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
            let st = self.cpus[cpu].rq.lock();
            if !st.active_balance {
                return;
            }
            st.push_cpu as usize
        };
        // The target's lowest balancing domain that contains this CPU.
        let lvl = {
            let topo = self.topo.read();
            topo.domains(target).position(|d| d.flags.contains(SdFlags::LOAD_BALANCE) && d.span.contains(cpu))
        };
        let mut moved = None;
        {
            let mut bal = self.cpus[target].balance.lock();
            let mut st = self.cpus[cpu].rq.lock();
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
                    if let Some(e) = detach_one_task(&mut env, &mut st.rq) {
                        if let Ok(te) = self.tasks.lock().get_mut(e.id) {
                            te.location = Location::InTransit { from: cpu as u32 };
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

    /// `newidle_balance`: `cpu` is about to go idle; pull a task if it is worth the cost.
    pub(crate) fn newidle_balance(&self, cpu: usize, now: u64) -> bool {
        let (avg_idle, go) = {
            let mut st = self.cpus[cpu].rq.lock();
            st.idle_stamp = now.max(1);
            let go = st.avg_idle >= SYSCTL_MIGRATION_COST_NS && self.root.overload.load(Relaxed);
            (st.avg_idle, go)
        };
        let mut bal = self.cpus[cpu].balance.lock();
        let j = self.jiffies(now);
        let mut next_balance = j + self.hz as u64;
        let levels = self.topo.read().nr_levels(cpu);
        let mut pulled = false;
        if go {
            self.cpus[cpu].rq.lock().rq.update_blocked_averages();
            let mut curr_cost = 0u64;
            for lvl in 0..levels {
                let Some(d) = self.domain_view(cpu, lvl) else { break };
                if !d.flags.contains(SdFlags::LOAD_BALANCE) {
                    continue;
                }
                let interval = self.sd_interval(bal.domains[lvl].balance_interval_ms, d.busy_factor, false);
                next_balance = next_balance.min(bal.domains[lvl].last_balance + interval);
                if avg_idle < curr_cost + bal.domains[lvl].max_newidle_lb_cost {
                    break;
                }
                if d.flags.contains(SdFlags::BALANCE_NEWIDLE) {
                    let t0 = self.platform.clock_ns();
                    let (moved, _) = self.load_balance_in(&mut bal, cpu, lvl, &d, IdleType::NewlyIdle, now);
                    let cost = match (t0, self.platform.clock_ns()) {
                        (Some(a), Some(b)) => b.saturating_sub(a),
                        _ => estimated_balance_cost(d.span.weight()),
                    };
                    let db = &mut bal.domains[lvl];
                    db.max_newidle_lb_cost = db.max_newidle_lb_cost.max(cost);
                    curr_cost += cost;
                    pulled |= moved > 0;
                }
                if pulled || self.snap(cpu).nr_running > 0 {
                    break;
                }
            }
            let mut st = self.cpus[cpu].rq.lock();
            st.max_idle_balance_cost = st.max_idle_balance_cost.max(curr_cost);
        } else {
            // Not worth trying; still account when the base domain is due.
            if let Some(d) = self.domain_view(cpu, 0) {
                let interval = self.sd_interval(bal.domains[0].balance_interval_ms, d.busy_factor, false);
                next_balance = next_balance.min(bal.domains[0].last_balance + interval);
            }
        }
        if bal.next_balance > next_balance {
            bal.next_balance = next_balance;
        }
        if pulled {
            self.cpus[cpu].rq.lock().idle_stamp = 0;
        }
        pulled
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::boxed::Box;
    use std::sync::Mutex;
    use std::vec::Vec;

    use super::*;
    use crate::platform::Event;
    use crate::{Features, TaskParams};

    /// A clock that advances 0.3 ms per reading, and a record of balance attempts.
    #[derive(Default)]
    struct Clocked {
        t: AtomicU64,
        records: Mutex<Vec<BalanceRecord>>,
    }

    impl Platform for Clocked {
        fn resched_cpu(&self, _: u32) {}
        fn clock_ns(&self) -> Option<u64> {
            Some(self.t.fetch_add(300_000, Relaxed))
        }
        fn event(&self, e: &Event) {
            if let EventKind::Balance(r) = e.kind {
                self.records.lock().unwrap().push(r);
            }
        }
    }

    type M = Smp<Clocked, 8, 32, 32>;
    const NOW: u64 = 1_000_000_000;

    fn machine(avg_idle: u64, overload: bool) -> Box<M> {
        let m: Box<M> = Box::new(Smp::new(Clocked::default(), Features::default(), 250));
        m.init_with(|t| t.init_clusters(2, 4)).unwrap();
        m.create(0, NOW, TaskParams::default()).unwrap();
        m.cpus[3].rq.lock().avg_idle = avg_idle;
        {
            let mut b = m.cpus[3].balance.lock();
            b.domains[0].max_newidle_lb_cost = 300_000;
            b.domains[1].max_newidle_lb_cost = 800_000;
            b.domains[0].next_decay_max_lb_cost = u64::MAX;
            b.domains[1].next_decay_max_lb_cost = u64::MAX;
            b.next_balance = u64::MAX;
        }
        m.root.overload.store(overload, Relaxed);
        m
    }

    fn levels_tried(m: &M) -> Vec<Level> {
        m.platform
            .records
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.idle == IdleType::NewlyIdle)
            .map(|r| r.level)
            .collect()
    }

    #[test]
    fn s14_short_average_idle_skips_newidle_balance() {
        let m = machine(400_000, true);
        assert!(!m.newidle_balance(3, NOW));
        assert!(levels_tried(&m).is_empty());
        assert_ne!(m.cpus[3].balance.lock().next_balance, u64::MAX, "next_balance still updated");
    }

    #[test]
    fn s14_no_overload_skips_newidle_balance() {
        let m = machine(1_000_000, false);
        m.newidle_balance(3, NOW);
        assert!(levels_tried(&m).is_empty());
        assert_ne!(m.cpus[3].balance.lock().next_balance, u64::MAX);
    }

    #[test]
    fn s14_cost_budget_stops_at_die() {
        let m = machine(1_000_000, true);
        m.newidle_balance(3, NOW);
        // MC: 0 + 0.3 ms ≤ 1 ms runs and measures 0.3 ms; DIE: 0.3 + 0.8 ms > 1 ms skipped.
        assert_eq!(levels_tried(&m), [Level::Mc]);
        assert_eq!(m.cpus[3].balance.lock().domains[0].max_newidle_lb_cost, 300_000);
        assert_ne!(m.cpus[3].balance.lock().next_balance, u64::MAX);
    }
}
