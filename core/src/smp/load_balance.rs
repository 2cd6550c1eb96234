//! One load-balance pass over the machine (docs/linux-v5.7.md §4): `load_balance` itself —
//! the rounds (first, redirected, redo), the failure, interval and active-balance bookkeeping
//! around the decisions of [`crate::balance`], the group statistics it gathers. The
//! active-balance stopper is `active.rs`; when passes run, `rebalance.rs`.

use portable_atomic::Ordering::Relaxed;

use crate::balance::busiest::{decide, pick_busiest, GroupDecision};
use crate::balance::designate::should_we_balance;
use crate::balance::imbalance::{Imbalance, MigrationType};
use crate::balance::migrate::{DetachEnv, LbfFlags, NR_MIGRATE_BREAK};
use crate::balance::queue::{find_busiest_queue, QueueEnv};
use crate::balance::stats::{group_stats, CpuSnap, GroupInfo, SgStatus, StatsEnv};
use crate::balance::stats::{DomainEnv, SdStats};
use crate::balance::{BalanceRecord, IdleType, Outcome, Round, MAX_PINNED_INTERVAL_MS};
use crate::weights::saturate_u32;

use super::{BalanceState, RootDomain, Smp};
use crate::cpumask::CpuMask;
use crate::features::{Features, Tunables};
use crate::locks::Locks;
use crate::platform::{EventKind, Platform};
use crate::topology::{Level, SdFlags};

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

/// The fixed inputs of one balance pass: the balancing CPU, the domain, how idle it is, the
/// time, the domain's parameters for the decisions, the tunables and features.
struct PassEnv<'a> {
    cpu: usize,
    lvl: usize,
    d: &'a DomainView,
    idle: IdleType,
    now: u64,
    denv: DomainEnv,
    tunables: Tunables,
    features: Features,
}

impl PassEnv<'_> {
    /// A new round's record towards `dst`, before anything is known.
    fn record(&self, round: Round, dst: usize) -> BalanceRecord {
        BalanceRecord {
            cpu: self.cpu,
            dst_cpu: dst,
            round,
            level: self.d.level,
            idle: self.idle,
            local: None,
            busiest: None,
            migration: None,
            imbalance: 0,
            busiest_cpu: None,
            moved: 0,
            pass_moved: 0,
            outcome: Outcome::Balanced,
            nr_balance_failed: 0,
        }
    }
}

/// What a pass carries from round to round.
struct Pass {
    /// The record of the round under way.
    rec: BalanceRecord,
    /// The CPUs still candidates (a redo leaves out a busiest CPU whose tasks were pinned).
    cpus: CpuMask,
    /// Where tasks go (a redirect moves it within the balancing CPU's group).
    dst_cpu: usize,
    /// `LBF_*` flags, carried over a redo.
    flags: LbfFlags,
    /// What the pass returns: tasks moved (Linux zeroes it on its balanced exits).
    moved: u32,
    /// Tasks moved in the current round and in the whole pass, for the records.
    round_moved: u32,
    pass_moved: u32,
    /// Whether balancing goes on at the levels above.
    continue_balancing: bool,
}

/// How a pass ends (Linux's labels: the balanced and pinned exits, or a settled pass).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// Nothing to do, or not this CPU's turn (`out_balanced`).
    Balanced,
    /// Every candidate's tasks were pinned (`out_all_pinned`).
    AllPinned,
    /// The busiest CPU's running task may not come here (`out_one_pinned`).
    OnePinned,
    /// Settled after a detach (or an attempt at one).
    Done,
}

/// What follows a round's detach.
enum Step {
    /// Settle the pass (failure count, active balance, interval).
    Settle,
    /// Start over without the busiest CPU.
    Redo,
    /// The pass ends here.
    End(Exit),
}

/// What a detach is asked to do: move `imbalance` from the candidates `cpus` to `dst`
/// (whose group is `grpmask`), looking at most at `loop_max` tasks.
pub(super) struct DetachAsk {
    pub(super) dst: usize,
    pub(super) grpmask: CpuMask,
    pub(super) cpus: CpuMask,
    pub(super) idle: IdleType,
    pub(super) imbalance: Imbalance,
    pub(super) flags: LbfFlags,
    pub(super) loop_max: u32,
}

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
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

    pub(super) fn asym_prefer(&self, a: u32, b: u32) -> bool {
        let t = self.topology();
        t.asym_priority(a as usize) > t.asym_priority(b as usize)
    }

    /// Statistics of every group of the pass's domain (`update_sd_lb_stats`), seen from the
    /// destination `dst` (the balancing CPU, or a CPU of its group after a redirect).
    fn sd_stats(&self, env: &PassEnv, dst: usize, cpus: &CpuMask, interval_ms: u64) -> SdStats {
        let (cpu, lvl, d, idle) = (env.cpu, env.lvl, env.d, env.idle);
        let asym = |a: u32, b: u32| self.asym_prefer(a, b);
        let senv = StatsEnv {
            flags: d.flags,
            imbalance_pct: d.imbalance_pct,
            idle,
            dst_cpu: dst as u32,
            cpus,
            asym_prefer: &asym,
        };
        let snap = |c: usize| self.snap(c);
        let mut sds = SdStats::default();
        let mut status = SgStatus::empty();
        // The topology is only read once init is done, so its read guard is held through the
        // walk (the calls below read it again; nothing writes it meanwhile). Copying the groups
        // out instead costs a CPUS-sized buffer on the stack.
        let topo = self.topology();
        // LBF_NOHZ_STATS: a newly idle CPU refreshes, as it reads them, the averages of
        // tickless CPUs that still carry blocked load, so that a stale load does not make a
        // group look busy.
        let nohz_stats = self.nohz_stats_wanted(idle);
        let mut nohz_again = false;
        for (i, g) in topo.groups(cpu, lvl).enumerate() {
            let id = g.id;
            let local = i == 0;
            if nohz_stats {
                for c in g.span.and(cpus).iter() {
                    nohz_again |= self.update_nohz_stats(c, env.now);
                }
            }
            if local
                && (idle != IdleType::NewlyIdle
                    || self.jiffies(env.now) >= self.sgc_of(id).next_update.load(Relaxed))
            {
                self.update_group_capacity(cpu, dst, lvl, id, interval_ms, env.now);
            }
            let sgc = self.sgc_of(id);
            let info = GroupInfo {
                span: g.span,
                capacity: sgc.capacity.load(Relaxed) as u64,
                min_capacity: sgc.min_capacity.load(Relaxed) as u64,
                max_capacity: sgc.max_capacity.load(Relaxed) as u64,
                imbalance: sgc.imbalance.load(Relaxed),
                asym_prefer_cpu: g.asym_prefer_cpu as u32,
            };
            let s = group_stats(&senv, &info, local, &snap, &mut status);
            if local {
                sds.local = s;
            } else if pick_busiest(&env.denv, &sds.local, sds.busiest.as_ref(), &s, &asym) {
                sds.busiest = Some(s);
            }
            sds.total_load += s.group_load;
            sds.total_capacity += s.group_capacity;
        }
        if nohz_again {
            self.nohz_stats_pass_done(&d.span, env.now);
        }
        if !d.has_parent {
            RootDomain::set(&self.root.overload, status.contains(SgStatus::OVERLOAD));
            RootDomain::set(&self.root.overutilized, status.contains(SgStatus::OVERUTILIZED));
        } else if status.contains(SgStatus::OVERUTILIZED) {
            RootDomain::set(&self.root.overutilized, true);
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
    ///
    /// A pass is rounds over a [`Pass`]: find the imbalance and the busiest CPU, detach from
    /// it (which may redirect the destination within the round, or start the pass over
    /// without a CPU whose tasks were all pinned), then settle the failure count, the
    /// active balance and the interval.
    pub(super) fn load_balance_in(
        &self,
        bal: &mut BalanceState,
        cpu: usize,
        lvl: usize,
        d: &DomainView,
        idle: IdleType,
        now: u64,
    ) -> (u32, bool) {
        let env = PassEnv {
            cpu,
            lvl,
            d,
            idle,
            now,
            denv: DomainEnv {
                flags: d.flags,
                imbalance_pct: d.imbalance_pct,
                prefer_sibling: d.prefer_sibling,
                idle,
            },
            tunables: *self.rq(cpu).rq.tunables(),
            features: self.features(),
        };
        let mut pass = Pass {
            rec: env.record(Round::First, cpu),
            cpus: d.span.and(&self.online()),
            dst_cpu: cpu,
            flags: LbfFlags::empty(),
            moved: 0,
            round_moved: 0,
            pass_moved: 0,
            continue_balancing: true,
        };
        let exit = loop {
            let Some((imb, busiest)) = self.find_imbalance(&env, &mut pass, bal) else {
                break Exit::Balanced;
            };
            match self.detach_round(&env, &mut pass, bal, imb, busiest) {
                Step::Settle => break self.settle(&env, &mut pass, bal, imb.kind, busiest),
                Step::Redo => {}
                Step::End(exit) => break exit,
            }
        };
        self.end_pass(&env, &mut pass, bal, exit);
        (pass.moved, pass.continue_balancing)
    }

    /// A round's first half: whether the destination balances this domain at all
    /// (`should_we_balance`), the domain's statistics, the imbalance and the busiest CPU.
    /// `None`: balanced (or not this CPU's turn), nothing to move.
    // The rounds have one caller each and are inlined into it, so the pass compiles as one
    // function: left to the compiler, a pass ran slower in the balance bench (8 and 64 CPUs).
    #[inline(always)]
    fn find_imbalance(
        &self,
        env: &PassEnv,
        pass: &mut Pass,
        bal: &BalanceState,
    ) -> Option<(Imbalance, usize)> {
        let d = env.d;
        let idle_of = |c: usize| self.snap(c).idle;
        if !should_we_balance(pass.dst_cpu, &d.local_span, env.idle, &pass.cpus, &idle_of) {
            pass.continue_balancing = false;
            pass.rec.outcome = Outcome::NotDesignated;
            return None;
        }
        let interval_ms = bal.domains[env.lvl].balance_interval_ms;
        let mut sds = self.sd_stats(env, pass.dst_cpu, &pass.cpus, interval_ms);
        pass.rec.local = Some(sds.local.group_type);
        pass.rec.busiest = sds.busiest.map(|b| b.group_type);
        let GroupDecision::Imbalanced(imb) = decide(&env.denv, &mut sds) else { return None };
        pass.rec.migration = Some(imb.kind);
        pass.rec.imbalance = imb.amount;
        let busiest = sds.busiest?;
        let qenv = QueueEnv {
            flags: d.flags,
            imbalance_pct: d.imbalance_pct,
            dst_cpu: pass.dst_cpu as u32,
            migration_type: imb.kind,
            imbalance: imb.amount,
            features: env.features,
        };
        let b = find_busiest_queue(&qenv, &busiest.span, &pass.cpus, &|c| self.snap(c))? as usize;
        pass.rec.busiest_cpu = Some(b);
        Some((imb, b))
    }

    /// A round's second half: detach from `busiest` towards the destination, redirecting it
    /// to another CPU of its group when the tasks left may only run there (LBF_DST_PINNED,
    /// a new round); when every task was pinned (LBF_ALL_PINNED), start over without
    /// `busiest` or end the pass.
    #[inline(always)]
    fn detach_round(
        &self,
        env: &PassEnv,
        pass: &mut Pass,
        bal: &BalanceState,
        imb: Imbalance,
        busiest: usize,
    ) -> Step {
        let d = env.d;
        let src_nr = self.snap(busiest).nr_running;
        if src_nr <= 1 || busiest == pass.dst_cpu {
            return Step::Settle;
        }
        let ask = DetachAsk {
            dst: pass.dst_cpu,
            grpmask: d.local_span,
            cpus: pass.cpus,
            idle: env.idle,
            imbalance: imb,
            // Flags carry over a redo, as the kernel's env does.
            flags: pass.flags | LbfFlags::ALL_PINNED,
            loop_max: env.tunables.nr_migrate.min(src_nr),
        };
        let mut det =
            self.detach_env(ask, bal.domains[env.lvl].nr_balance_failed, d.cache_nice_tries, &env.tunables);
        loop {
            let n = self.detach_attach(&mut det, busiest, pass.dst_cpu, env.now);
            pass.moved += n;
            pass.round_moved += n;
            pass.pass_moved += n;
            if det.flags.contains(LbfFlags::NEED_BREAK) {
                det.flags.remove(LbfFlags::NEED_BREAK);
                continue;
            }
            // Some tasks may only run elsewhere in dst's group: go on with that CPU.
            if det.flags.contains(LbfFlags::DST_PINNED) && det.imbalance > 0 {
                pass.rec.outcome = Outcome::Redirected;
                self.end_round(env, pass, bal);
                det.cpus.clear(pass.dst_cpu);
                pass.dst_cpu = det.new_dst_cpu as usize;
                pass.rec.round = Round::Redirected;
                pass.rec.dst_cpu = pass.dst_cpu;
                det.dst_cpu = pass.dst_cpu as u32;
                det.dst_nr_running = self.snap(pass.dst_cpu).nr_running;
                det.flags.remove(LbfFlags::DST_PINNED);
                det.loop_ = 0;
                det.loop_break = NR_MIGRATE_BREAK;
                continue;
            }
            break;
        }
        pass.flags = det.flags;
        pass.cpus = det.cpus;
        // Pinning kept us from evening things out: tell the parent level.
        if pass.flags.contains(LbfFlags::SOME_PINNED) && det.imbalance > 0 && d.has_parent {
            self.set_parent_imbalance(env, true);
        }
        if !pass.flags.contains(LbfFlags::ALL_PINNED) {
            return Step::Settle;
        }
        pass.cpus.clear(busiest);
        if pass.cpus.is_subset_of(&d.local_span) {
            pass.rec.outcome = Outcome::AllPinned;
            return Step::End(Exit::AllPinned);
        }
        // Start over without the busiest CPU, towards the same destination.
        pass.rec.outcome = Outcome::Retried;
        self.end_round(env, pass, bal);
        pass.rec = env.record(Round::Redo, pass.dst_cpu);
        Step::Redo
    }

    /// After the detach: the domain's failure count, the active balance when detaching
    /// failed too often (or is called for at once), and the balance interval.
    #[inline(always)]
    fn settle(
        &self,
        env: &PassEnv,
        pass: &mut Pass,
        bal: &mut BalanceState,
        kind: MigrationType,
        busiest: usize,
    ) -> Exit {
        let (cpu, d, idle) = (env.cpu, env.d, env.idle);
        let db = &mut bal.domains[env.lvl];
        let mut active = false;
        if pass.moved == 0 {
            pass.rec.outcome = Outcome::NothingDetachable;
            if idle != IdleType::NewlyIdle {
                db.nr_balance_failed += 1;
            }
            let voluntary = self.voluntary_active_balance(d, idle, kind, busiest, pass.dst_cpu);
            if voluntary || db.nr_balance_failed > d.cache_nice_tries + 2 {
                let mut st = self.rq(busiest);
                // (A CPU running nothing runs its idle task, which stays on it: pinned, as
                // v5.7 finds `busiest->curr`.)
                let curr_allowed =
                    st.rq.curr_slot().is_some_and(|n| st.rq.ent_in(self.pool(), n).allows(cpu));
                if !curr_allowed {
                    drop(st);
                    pass.flags |= LbfFlags::ALL_PINNED;
                    pass.rec.outcome = Outcome::AllPinned;
                    return Exit::OnePinned;
                }
                if !st.active_balance {
                    st.active_balance = true;
                    st.push_cpu = cpu as u32;
                    // The stopper preempts whatever runs there, as Linux's stop thread
                    // does: a port reschedules only while need_resched is set.
                    st.rq.resched_curr();
                    active = true;
                }
                drop(st);
                if active {
                    self.platform.run_stopper(busiest);
                    pass.rec.outcome = Outcome::ActiveBalance;
                }
                // Kicked: let the stopper move even a cache-hot task.
                db.nr_balance_failed = d.cache_nice_tries + 1;
            }
        } else {
            pass.rec.outcome = Outcome::Moved;
            db.nr_balance_failed = 0;
        }
        if !active || self.voluntary_active_balance(d, idle, kind, busiest, pass.dst_cpu) {
            db.balance_interval_ms = d.min_interval_ms;
        } else if db.balance_interval_ms < d.max_interval_ms {
            db.balance_interval_ms *= 2;
        }
        Exit::Done
    }

    /// The end of a pass: on its balanced and pinned exits, the parent's imbalance flag, the
    /// failure count and the interval back-off (Linux's `out_balanced`, `out_one_pinned`);
    /// then the last round's record.
    #[inline(always)]
    fn end_pass(&self, env: &PassEnv, pass: &mut Pass, bal: &mut BalanceState, exit: Exit) {
        let d = env.d;
        if exit != Exit::Done {
            if exit == Exit::Balanced && d.has_parent && !pass.flags.contains(LbfFlags::ALL_PINNED) {
                self.set_parent_imbalance(env, false);
            }
            let db = &mut bal.domains[env.lvl];
            if exit != Exit::OnePinned {
                db.nr_balance_failed = 0;
            }
            pass.moved = 0;
            if env.idle != IdleType::NewlyIdle
                && ((pass.flags.contains(LbfFlags::ALL_PINNED)
                    && db.balance_interval_ms < MAX_PINNED_INTERVAL_MS)
                    || db.balance_interval_ms < d.max_interval_ms)
            {
                db.balance_interval_ms *= 2;
            }
        }
        self.end_round(env, pass, bal);
    }

    /// Sets or clears the imbalance flag of the balancing CPU's group one level up.
    fn set_parent_imbalance(&self, env: &PassEnv, imbalanced: bool) {
        let pid = self.topology().groups(env.cpu, env.lvl + 1).next().map(|g| g.id);
        if let Some(pid) = pid {
            self.sgc_of(pid).imbalance.store(imbalanced, Relaxed);
        }
    }

    /// Emits the record of a round that ends now, with its outcome already set.
    fn end_round(&self, env: &PassEnv, pass: &mut Pass, bal: &BalanceState) {
        pass.rec.moved = pass.round_moved;
        pass.rec.pass_moved = pass.pass_moved;
        pass.rec.nr_balance_failed = bal.domains[env.lvl].nr_balance_failed;
        self.emit(env.now, env.cpu, EventKind::Balance(pass.rec));
        pass.round_moved = 0;
        pass.rec.moved = 0;
    }

    /// The detach environment for `ask`, with the domain's failure count and cache tries and
    /// the machine's tunables: the one place a [`DetachEnv`] is built.
    pub(super) fn detach_env(
        &self,
        ask: DetachAsk,
        nr_balance_failed: u32,
        cache_nice_tries: u32,
        tunables: &Tunables,
    ) -> DetachEnv {
        DetachEnv {
            dst_cpu: ask.dst as u32,
            dst_nr_running: self.snap(ask.dst).nr_running,
            dst_grpmask: ask.grpmask,
            cpus: ask.cpus,
            new_dst_cpu: ask.dst as u32,
            idle: ask.idle,
            migration_type: ask.imbalance.kind,
            imbalance: ask.imbalance.amount,
            flags: ask.flags,
            loop_: 0,
            loop_max: ask.loop_max,
            loop_break: NR_MIGRATE_BREAK,
            nr_balance_failed,
            cache_nice_tries,
            migration_cost_ns: tunables.migration_cost_ns,
            features: self.features(),
        }
    }
}
