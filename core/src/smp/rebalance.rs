//! When balancing runs (docs/linux-v5.7.md §4): the periodic balance a tick triggers
//! (`trigger_load_balance`, `rebalance_domains` with its per-domain intervals and busy
//! factor), and the newly-idle balance of a CPU about to idle, gated by its average idle time
//! and the measured cost of earlier passes. Each pass itself is `load_balance.rs`.

use portable_atomic::Ordering::Relaxed;

use crate::locks::Locks;

use super::nohz_state::NOHZ;
use super::{BalanceState, Smp};
use crate::balance::{estimated_balance_cost, IdleType};
use crate::limits::DEFAULT_HZ;
use crate::platform::Platform;
use crate::relaxed::Slot;
use crate::topology::SdFlags;

/// The most one newly idle balance pass is taken to cost (1 s): a pass timed by a clock that
/// jumped (one answering 0 until calibrated, then the epoch) would otherwise look to cost
/// ages, hold off newly idle balancing for good and overflow the sums of costs.
const MAX_NEWIDLE_COST_NS: u64 = 1_000_000_000;

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// Jiffy of time `now`. (Out of line on 32-bit targets, as [`Smp::sd_interval`].)
    #[cfg_attr(target_pointer_width = "32", inline(never))]
    pub(crate) fn jiffies(&self, now: u64) -> u64 {
        match self.hz.load(Relaxed) {
            // The default rate's jiffy is a constant: the compiler divides by multiplying.
            0 => now / (1_000_000_000 / DEFAULT_HZ as u64),
            hz => now / (1_000_000_000 / hz as u64),
        }
    }

    pub(crate) fn ms_to_jiffies(&self, ms: u64) -> u64 {
        (ms * self.hz() as u64).div_ceil(1000)
    }

    /// `max_load_balance_interval`: HZ × CPUs / 10 jiffies.
    pub(super) fn max_lb_interval(&self) -> u64 {
        (self.hz() as u64 * self.nr_cpus() as u64 / 10).max(1)
    }

    /// `get_sd_balance_interval` in jiffies. (Out of line on 32-bit targets: four callers, and
    /// its 64-bit divisions are long there.)
    #[cfg_attr(target_pointer_width = "32", inline(never))]
    pub(super) fn sd_interval(&self, interval_ms: u64, busy_factor: u32, busy: bool) -> u64 {
        let ms = if busy { interval_ms * busy_factor as u64 } else { interval_ms };
        self.ms_to_jiffies(ms).clamp(1, self.max_lb_interval())
    }

    /// `trigger_load_balance` after a tick: run the periodic balance if it is due. Returns
    /// whether a balance pass ran (it may have pulled work to `cpu` and asked it to
    /// reschedule); decaying blocked load and kicking an idle balancer elsewhere do not count.
    pub(crate) fn trigger_load_balance(&self, cpu: usize, now: u64, idle: bool) -> bool {
        if CPUS == 1 {
            // One CPU has no sched domain, so no pass ever moves its next balance from 0:
            // every tick is "due" and all a pass does is decay the blocked load. Doing just
            // that keeps the balancer out of a one-CPU image (CPUS is a constant here).
            self.rq(cpu).update_blocked_averages(self.pool());
            if !idle && NOHZ {
                self.nohz_exit_idle_on(cpu);
            }
            return false;
        }
        let due = self.jiffies(now) >= self.next_balance(cpu);
        // A kicked idle CPU balances for all tickless CPUs (and itself) instead.
        if idle && NOHZ && self.nohz_idle_balance_on(cpu, now) {
            return true;
        }
        if due {
            self.rq(cpu).update_blocked_averages(self.pool());
            let idle = if idle { IdleType::Idle } else { IdleType::NotIdle };
            self.rebalance_domains(cpu, now, idle);
        }
        if !idle && NOHZ {
            self.nohz_balancer_kick(cpu, now);
        }
        due
    }

    /// `rebalance_domains`: walks `cpu`'s domains bottom-up and balances each one whose
    /// interval has expired, then sets when the next balance is due.
    pub(crate) fn rebalance_domains(&self, cpu: usize, now: u64, mut idle: IdleType) {
        if cpu >= self.nr_cpus() {
            return;
        }
        let mut bal = self.bal(cpu);
        let j = self.jiffies(now);
        let mut next_balance = j + 60 * self.hz() as u64;
        let mut update_next = false;
        let mut continue_balancing = true;
        let mut need_decay = false;
        let mut max_cost = 0u64;
        let levels = self.topology().nr_levels(cpu);
        for lvl in 0..levels {
            let Some(d) = self.domain_view(cpu, lvl) else { break };
            // Decay the newidle cost estimate once a second.
            let db = &mut bal.domains[lvl];
            if now > db.next_decay_max_lb_cost {
                db.max_newidle_lb_cost = db.max_newidle_lb_cost * 253 / 256;
                db.next_decay_max_lb_cost = now.saturating_add(1_000_000_000);
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
            let mut st = self.rq(cpu);
            st.max_idle_balance_cost = max_cost.max(st.rq.tunables().migration_cost_ns);
        }
        if update_next {
            self.cpus[cpu].next_balance.set(next_balance);
            if idle == IdleType::Idle && NOHZ {
                self.nohz_note_next_balance(next_balance);
            }
        }
    }

    /// `newidle_balance`: `cpu` is about to go idle; pull a task if it is worth the cost.
    pub(crate) fn newidle_balance(&self, cpu: usize, now: u64) -> bool {
        let (avg_idle, long, go) = {
            let mut st = self.rq(cpu);
            st.idle_stamp = now.max(1);
            // An idle long enough to be worth a pass, and something to pull.
            let long = st.avg_idle >= st.rq.tunables().migration_cost_ns;
            (st.avg_idle, long, long && self.root.overload.load(Relaxed))
        };
        if CPUS == 1 {
            // No domain to pull from: what remains of the pass is the blocked-load update.
            if go {
                self.rq(cpu).update_blocked_averages(self.pool());
            }
            return false;
        }
        let mut bal = self.bal(cpu);
        let j = self.jiffies(now);
        let mut next_balance = j + self.hz() as u64;
        let levels = self.topology().nr_levels(cpu);
        let mut pulled = false;
        if go {
            self.rq(cpu).update_blocked_averages(self.pool());
            let mut curr_cost = 0u64;
            for lvl in 0..levels {
                let Some(d) = self.domain_view(cpu, lvl) else { break };
                if !d.flags.contains(SdFlags::LOAD_BALANCE) {
                    continue;
                }
                // When the level is due next, from its interval as it stands (after the pass,
                // which may have reset or doubled it: v5.7's `update_next_balance` follows it).
                let due = |bal: &BalanceState| {
                    let interval =
                        self.sd_interval(bal.domains[lvl].balance_interval_ms, d.busy_factor, false);
                    bal.domains[lvl].last_balance.saturating_add(interval)
                };
                if avg_idle < curr_cost + bal.domains[lvl].max_newidle_lb_cost {
                    next_balance = next_balance.min(due(&bal));
                    break;
                }
                if d.flags.contains(SdFlags::BALANCE_NEWIDLE) {
                    // The clock is a callback, and a callback runs with no lock held: this
                    // CPU's balance state is let go around each reading (a call the clock
                    // makes may balance on this CPU's behalf), as Linux lets go of the
                    // runqueue lock for its newly-idle pass.
                    drop(bal);
                    let t0 = self.platform.clock_ns();
                    bal = self.bal(cpu);
                    let (moved, _) = self.load_balance_in(&mut bal, cpu, lvl, &d, IdleType::NewlyIdle, now);
                    drop(bal);
                    let t1 = self.platform.clock_ns();
                    bal = self.bal(cpu);
                    let cost = match (t0, t1) {
                        (Some(a), Some(b)) => b.saturating_sub(a).min(MAX_NEWIDLE_COST_NS),
                        _ => estimated_balance_cost(d.span.weight()),
                    };
                    let db = &mut bal.domains[lvl];
                    db.max_newidle_lb_cost = db.max_newidle_lb_cost.max(cost);
                    curr_cost += cost;
                    pulled |= moved > 0;
                }
                next_balance = next_balance.min(due(&bal));
                if pulled || self.snap(cpu).nr_running > 0 {
                    break;
                }
            }
            let mut st = self.rq(cpu);
            st.max_idle_balance_cost = st.max_idle_balance_cost.max(curr_cost);
        } else {
            // Not worth trying; still account when the base domain is due.
            if let Some(d) = self.domain_view(cpu, 0) {
                let interval = self.sd_interval(bal.domains[0].balance_interval_ms, d.busy_factor, false);
                next_balance = next_balance.min(bal.domains[0].last_balance + interval);
            }
        }
        // (Under the balance-state lock `bal`, as every write of it is.)
        let nb = &self.cpus[cpu].next_balance;
        if Slot::<u64>::get(nb) > next_balance {
            nb.set(next_balance);
        }
        if pulled {
            self.rq(cpu).idle_stamp = 0;
        }
        if long && !go {
            drop(bal);
            self.nohz_newidle_balance(cpu, now);
        }
        pulled
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use portable_atomic::{AtomicU64, Ordering::Relaxed};
    use std::boxed::Box;
    use std::sync::Mutex;
    use std::vec::Vec;

    use super::*;
    use crate::balance::BalanceRecord;
    use crate::platform::{Event, EventKind};
    use crate::topology::Level;
    use crate::{Features, TaskParams};

    /// A clock that advances 0.3 ms per reading, and a record of balance attempts.
    #[derive(Default)]
    struct Clocked {
        t: AtomicU64,
        records: Mutex<Vec<BalanceRecord>>,
    }

    impl Platform for Clocked {
        type Payload = ();
        fn resched_cpu(&self, _: usize) {}
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
        }
        m.cpus[3].next_balance.set(u64::MAX);
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
        assert_ne!(m.next_balance(3), u64::MAX, "next_balance still updated");
    }

    #[test]
    fn s14_no_overload_skips_newidle_balance() {
        let m = machine(1_000_000, false);
        m.newidle_balance(3, NOW);
        assert!(levels_tried(&m).is_empty());
        assert_ne!(m.next_balance(3), u64::MAX);
    }

    #[test]
    fn s14_cost_budget_stops_at_die() {
        let m = machine(1_000_000, true);
        m.cpus[3].balance.lock().domains[0].max_newidle_lb_cost = 100_000;
        m.newidle_balance(3, NOW);
        // MC: 0 + 0.1 ms ≤ 1 ms runs and measures 0.3 ms, which it records; DIE: 0.3 + 0.8 ms
        // > 1 ms skipped.
        assert_eq!(levels_tried(&m), [Level::Mc]);
        assert_eq!(m.cpus[3].balance.lock().domains[0].max_newidle_lb_cost, 300_000);
        assert_ne!(m.next_balance(3), u64::MAX);
    }

    /// The newly-idle gate is the `migration_cost_ns` tunable, as v5.7's is the sysctl: at
    /// 0.1 ms, an average idle of 0.4 ms is enough to try MC.
    #[test]
    fn the_newidle_gate_follows_the_migration_cost_tunable() {
        let m = machine(400_000, true);
        m.set_tunables(crate::Tunables { migration_cost_ns: 100_000, ..m.tunables() }).unwrap();
        m.newidle_balance(3, NOW);
        assert_eq!(levels_tried(&m), [Level::Mc]);
    }

    /// A newly-idle pass sets the next balance from the interval the pass left (it resets it
    /// after a pull), as v5.7's `update_next_balance` follows `load_balance`.
    #[test]
    fn a_newidle_pass_times_the_next_balance_by_the_interval_it_left() {
        let m = machine(1_000_000, true);
        let ids: Vec<_> = (0..2).map(|_| movable(&m, 2)).collect();
        run_once(&m, 2);
        m.inject_rq_pelt(2, 1024, 2048, 2048).unwrap();
        for &t in &ids {
            m.inject_task_pelt(t, 512, 512, 1024).unwrap();
        }
        let j = m.jiffies(NOW);
        {
            let mut b = m.cpus[3].balance.lock();
            b.domains[0].balance_interval_ms = 8;
            b.domains[0].last_balance = j;
        }
        assert!(m.newidle_balance(3, NOW), "pulled");
        assert_eq!(m.cpus[3].balance.lock().domains[0].balance_interval_ms, 4, "reset by the pass");
        assert_eq!(m.next_balance(3), j + 1, "last_balance + 4 ms at HZ=250");
    }

    /// A task made on `cpu` that may then run anywhere.
    fn movable<const Q: usize>(m: &Smp<Clocked, 8, 32, Q>, cpu: usize) -> crate::TaskId {
        let on = TaskParams { affinity: crate::cpumask::CpuMask::single(cpu), ..TaskParams::default() };
        let t = m.create(cpu, NOW, on).unwrap();
        m.set_affinity(NOW, t, crate::cpumask::CpuMask::ALL).unwrap();
        t
    }

    fn run_once<const Q: usize>(m: &Smp<Clocked, 8, 32, Q>, cpu: usize) {
        m.schedule(cpu, NOW).unwrap();
        m.finish_switch(cpu, NOW).unwrap();
    }

    /// A detached task that finds its destination full goes back to its source and is not a
    /// move: the pass fails (and counts a failure), where it reported `Moved` and forgot the
    /// failures that lead to an active balance.
    #[test]
    fn a_task_that_comes_back_is_not_moved() {
        use crate::balance::Outcome;
        let m: Box<Smp<Clocked, 8, 32, 2>> = Box::new(Smp::new(Clocked::default(), Features::default(), 250));
        m.init_with(|t| t.init_clusters(2, 4)).unwrap();
        let mut queued0 = None;
        for cpu in 0..8 {
            let n = if cpu == 0 || cpu == 4 { 2 } else { 1 };
            let ids: Vec<_> = (0..n).map(|_| movable(&m, cpu)).collect();
            run_once(&m, cpu);
            if cpu == 0 {
                queued0 = ids.iter().copied().find(|&t| m.current(0) != Some(t));
            }
        }
        for cpu in 0..8 {
            let (n, load) = match cpu {
                0 => (2, 4096),
                4 => (2, 2048),
                _ => (1, 1024),
            };
            m.inject_rq_pelt(cpu, 1024, 1024 * n, load).unwrap();
        }
        m.inject_task_pelt(queued0.unwrap(), 512, 512, 1024).unwrap();
        let nr = |c: usize| m.rq(c).rq.nr_running();
        assert_eq!((nr(0), nr(4)), (2, 2), "CPU 4 is full (2 slots)");
        let (moved, _) = m.balance_domain(4, 1, IdleType::NotIdle, NOW).unwrap();
        let r = *m.platform.records.lock().unwrap().last().unwrap();
        assert_eq!((nr(0), nr(4)), (2, 2), "nothing moved");
        assert_eq!((moved, r.outcome), (0, Outcome::NothingDetachable), "{r:?}");
        assert_eq!(m.balance_state(4).unwrap().domains[1].nr_balance_failed, 1);
    }

    /// Two clusters of 4 CPUs, each ticked once at `NOW`; the CPUs in `loaded` carry 600 of
    /// blocked load (load, runnable and util) and those in `idle` enter tickless idle.
    #[cfg(feature = "nohz")]
    fn tickless(loaded: &[usize], idle: &[usize]) -> Box<M> {
        let m: Box<M> = Box::new(Smp::new(Clocked::default(), Features::default(), 250));
        m.init_with(|t| t.init_clusters(2, 4)).unwrap();
        for cpu in 0..8 {
            m.tick(cpu, NOW).unwrap();
        }
        for &cpu in loaded {
            m.inject_rq_pelt(cpu, 600, 600, 600).unwrap();
        }
        for &cpu in idle {
            m.nohz_enter_idle(cpu).unwrap();
        }
        m
    }

    /// The CPU a nohz kick serves counts its own blocked load as the others': with blocked
    /// load left there, the stats kicks go on.
    #[cfg(feature = "nohz")]
    #[test]
    fn a_nohz_pass_counts_the_kicked_cpus_own_blocked_load() {
        use super::super::nohz_state::{NOHZ_BALANCE_KICK, NOHZ_STATS_KICK};
        let m = tickless(&[1], &[1]);
        m.nohz.flags[1].store(NOHZ_BALANCE_KICK | NOHZ_STATS_KICK, Relaxed);
        assert!(m.nohz_idle_balance_on(1, NOW + 4_000_000));
        let (load, util) = {
            let st = m.rq(1);
            (st.rq.avg().load_avg, st.rq.avg().util_avg)
        };
        assert!(load != 0 || util != 0, "decayed, not gone");
        assert!(m.nohz.has_blocked.load(Relaxed), "the kicked CPU still has blocked load");
    }

    /// A kicked CPU's pass refreshes the tickless CPUs that still have blocked load and leaves
    /// alone those whose load is all gone, as `update_nohz_stats` does.
    #[cfg(feature = "nohz")]
    #[test]
    fn a_nohz_pass_skips_tickless_cpus_without_blocked_load() {
        use super::super::nohz_state::NOHZ_STATS_KICK;
        let m = tickless(&[2], &[2, 3]);
        let avg3 = *m.rq(3).rq.avg();
        assert_eq!(avg3.load_avg + avg3.util_avg, 0, "CPU 3 has none");
        m.nohz.flags[1].store(NOHZ_STATS_KICK, Relaxed);
        let later = NOW + 40_000_000;
        assert!(m.nohz_idle_balance_on(1, later));
        assert_eq!(m.rq(2).rq.clock(), later, "CPU 2 refreshed");
        assert_eq!(m.rq(3).rq.clock(), NOW, "CPU 3 left alone");
    }

    /// A newly idle CPU's pass refreshes a tickless CPU's blocked load as it reads it
    /// (`LBF_NOHZ_STATS`), at most once a jiffy; a busier kind of pass leaves it to the kicks.
    #[cfg(feature = "nohz")]
    #[test]
    fn a_newidle_pass_decays_a_tickless_cpus_blocked_load_once_a_jiffy() {
        let m = tickless(&[1], &[1]);
        let load = || m.rq(1).rq.avg().load_avg;
        let later = NOW + 40_000_000;
        m.balance_domain(0, 0, IdleType::Idle, later).unwrap();
        assert_eq!(load(), 600, "an idle CPU's pass does not refresh others");
        m.balance_domain(0, 0, IdleType::NewlyIdle, later).unwrap();
        let decayed = load();
        assert!(0 < decayed && decayed < 600, "decayed over 40 ms: {decayed}");
        assert_eq!(m.stats(1).load.load(Relaxed) as u64, decayed, "published");
        m.balance_domain(0, 0, IdleType::NewlyIdle, later + 1_000_000).unwrap();
        assert_eq!(load(), decayed, "not again within the jiffy");
        m.balance_domain(0, 0, IdleType::NewlyIdle, later + 4_000_000).unwrap();
        assert!(load() < decayed, "again in the next jiffy");
        assert!(m.nohz.has_blocked.load(Relaxed));
        let again = m.jiffies(later + 4_000_000) + m.ms_to_jiffies(32);
        assert_eq!(m.nohz.next_blocked.load(Relaxed), again, "the stats kick waits");
        // A tickless CPU outside the pass's domain: the kick still has work, and is not put off.
        m.nohz.next_blocked.store(0, Relaxed);
        m.inject_rq_pelt(5, 600, 600, 600).unwrap();
        m.nohz_enter_idle(5).unwrap();
        m.balance_domain(0, 0, IdleType::NewlyIdle, later + 8_000_000).unwrap();
        assert_eq!(m.nohz.next_blocked.load(Relaxed), 0, "CPU 5 is outside CPU 0's cluster");
        m.balance_domain(0, 1, IdleType::NewlyIdle, later + 12_000_000).unwrap();
        assert!(m.rq(5).rq.avg().load_avg < 600, "the machine's level reads CPU 5");
        let again = m.jiffies(later + 12_000_000) + m.ms_to_jiffies(32);
        assert_eq!(m.nohz.next_blocked.load(Relaxed), again);
    }

    /// A CPU going idle without a balance pass (nothing is overloaded) refreshes the tickless
    /// CPUs' blocked load itself once the stats are due and its idle is long enough
    /// (`nohz_newidle_balance`); a short idle leaves it to a kick.
    #[cfg(feature = "nohz")]
    #[test]
    fn a_cpu_going_idle_refreshes_the_tickless_cpus_blocked_load() {
        let m = tickless(&[5], &[5]);
        let load = || m.rq(5).rq.avg().load_avg;
        let cost = m.tunables().migration_cost_ns;
        let later = NOW + 40_000_000;
        for (avg_idle, refreshed) in [(cost - 1, false), (cost, true)] {
            m.root.overload.store(false, Relaxed);
            m.rq(0).avg_idle = avg_idle;
            assert!(!m.newidle_balance(0, later));
            assert_eq!(load() < 600, refreshed, "avg_idle {avg_idle}");
        }
        let again = m.jiffies(later) + m.ms_to_jiffies(32);
        assert_eq!(m.nohz.next_blocked.load(Relaxed), again, "the next refresh waits");
        assert!(m.nohz.has_blocked.load(Relaxed), "decayed, not gone");
    }
}
