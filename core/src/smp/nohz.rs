//! nohz idle balancing (docs/linux-v5.7.md §4): tickless idle CPUs don't balance themselves; a busy CPU's
//! tick kicks one of them, which balances on behalf of all of them.
//!
//! Tickless idle is the platform's choice: it calls [`Smp::nohz_enter_idle`] when it stops
//! an idle CPU's tick. A platform that keeps ticking on idle CPUs never calls it, no CPU is
//! ever tickless, nobody is kicked, and each idle CPU balances itself on its own ticks. The
//! `nohz` feature (on by default) builds the calls in; without it a small machine saves
//! their code.

use portable_atomic::Ordering::Relaxed;

use super::Smp;
use crate::balance::stats::{check_cpu_capacity, CpuSnap};
use crate::balance::IdleType;
#[cfg(feature = "nohz")]
use crate::error::SchedError;
use crate::locks::Locks;
use crate::platform::Platform;

use super::nohz_state::{Nohz, NOHZ, NOHZ_BALANCE_KICK, NOHZ_KICK_MASK, NOHZ_STATS_KICK};
use crate::cpumask::CpuMask;
use crate::pelt::LOAD_AVG_PERIOD;

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    fn llc_id(&self, cpu: usize) -> usize {
        self.topology().llc_id(cpu).unwrap_or(cpu)
    }

    #[cfg(feature = "nohz")]
    fn nohz_init(&self) {
        if self.nohz.initialised.swap(true, Relaxed) {
            return;
        }
        for cpu in 0..self.nr_cpus() {
            self.nohz.nr_busy[self.llc_id(cpu)].fetch_add(1, Relaxed);
        }
    }

    /// The platform stopped `cpu`'s tick while idle (`nohz_balance_enter_idle`): it no
    /// longer balances itself; busy CPUs will kick an idle balancer instead.
    /// Nothing happens unless the CPU is idle; a CPU out of range is
    /// [`SchedError::CpuOutOfRange`].
    #[cfg(feature = "nohz")]
    pub fn nohz_enter_idle(&self, cpu: usize) -> Result<(), SchedError> {
        self.check_cpu(cpu)?;
        if !self.stats(cpu).idle.load(Relaxed) {
            return Ok(());
        }
        self.nohz_init();
        self.nohz.has_blocked.store(true, Relaxed);
        if !self.nohz.idle[cpu].swap(true, Relaxed) {
            self.nohz.nr_tickless.fetch_add(1, Relaxed);
        }
        if !self.nohz.not_busy[cpu].swap(true, Relaxed) {
            self.nohz.nr_busy[self.llc_id(cpu)].fetch_sub(1, Relaxed);
        }
        Ok(())
    }

    /// `nohz_balance_exit_idle`: `cpu` ticks again. A CPU out of range is
    /// [`SchedError::CpuOutOfRange`].
    #[cfg(feature = "nohz")]
    pub fn nohz_exit_idle(&self, cpu: usize) -> Result<(), SchedError> {
        self.check_cpu(cpu)?;
        self.nohz_exit_idle_on(cpu);
        Ok(())
    }

    pub(super) fn nohz_exit_idle_on(&self, cpu: usize) {
        // Called from every busy tick: read first, so a CPU that is already busy does not
        // write the shared flag lines.
        if self.nohz.idle[cpu].load(Relaxed) && self.nohz.idle[cpu].swap(false, Relaxed) {
            self.nohz.nr_tickless.fetch_sub(1, Relaxed);
        }
        if self.nohz.initialised.load(Relaxed)
            && self.nohz.not_busy[cpu].load(Relaxed)
            && self.nohz.not_busy[cpu].swap(false, Relaxed)
        {
            self.nohz.nr_busy[self.llc_id(cpu)].fetch_add(1, Relaxed);
        }
    }

    /// `nohz_balancer_kick`, from a busy CPU's tick: kick the first tickless idle CPU when
    /// there is work it could take (docs/linux-v5.7.md §4's conditions).
    pub(crate) fn nohz_balancer_kick(&self, cpu: usize, now: u64) {
        self.nohz_exit_idle_on(cpu);
        if self.nohz.nr_tickless.load(Relaxed) == 0 {
            return;
        }
        let j = self.jiffies(now);
        let mut flags = 0u8;
        if self.nohz.has_blocked.load(Relaxed) && j > self.nohz.next_blocked.load(Relaxed) {
            flags = NOHZ_STATS_KICK;
        }
        if j >= self.nohz.next_balance.load(Relaxed) && self.should_kick(cpu) {
            flags = NOHZ_KICK_MASK;
        }
        if flags != 0 {
            self.kick_ilb(flags);
        }
    }

    fn should_kick(&self, cpu: usize) -> bool {
        let s = self.snap_for_kick(cpu);
        if s.nr_running >= 2 {
            return true;
        }
        let topo = self.topology();
        let llc_busy = self.nohz.nr_busy[topo.llc_id(cpu).unwrap_or(cpu)].load(Relaxed) > 1;
        if let Some(base) = topo.domain(cpu, 0) {
            if s.h_nr_running >= 1 && check_cpu_capacity(&s, base.imbalance_pct) {
                return true;
            }
        }
        if let Some(d) = topo.domains(cpu).find(|d| d.flags.asym_packing()) {
            let mine = topo.asym_priority(cpu);
            if d.span.iter().any(|i| self.nohz.is_tickless(i) && topo.asym_priority(i) > mine) {
                return true;
            }
            // No preferred CPU idles: the misfit and cache checks below still apply.
        }
        if let Some(lvl) = topo.asym_cpucapacity_level(cpu) {
            let pct = topo.domain(cpu, lvl).map_or(125, |d| d.imbalance_pct);
            let max_cap = topo.max_capacity_orig();
            // check_misfit_status: a misfit task that a bigger (or less loaded) CPU can help.
            return s.misfit_task_load != 0 && (s.capacity_orig < max_cap || check_cpu_capacity(&s, pct));
        }
        llc_busy
    }

    fn snap_for_kick(&self, cpu: usize) -> CpuSnap {
        let s = self.stats(cpu);
        CpuSnap {
            nr_running: s.nr_running.load(Relaxed),
            h_nr_running: s.h_nr_running.load(Relaxed),
            capacity: s.capacity.load(Relaxed) as u64,
            capacity_orig: s.capacity_orig.load(Relaxed) as u64,
            misfit_task_load: s.misfit_task_load.load(Relaxed) as u64,
            ..Default::default()
        }
    }

    /// `kick_ilb`: flag the first tickless idle CPU and wake it (once per kick).
    fn kick_ilb(&self, flags: u8) {
        let ilb = (0..self.nr_cpus()).find(|&c| self.nohz.is_tickless(c) && self.stats(c).idle.load(Relaxed));
        let Some(ilb) = ilb else { return };
        let old = self.nohz.flags[ilb].fetch_or(flags, Relaxed);
        if old & NOHZ_KICK_MASK != 0 {
            return;
        }
        self.platform.kick_nohz(ilb);
    }

    internal! {
        /// The nohz idle-balancing state (which CPUs are tickless, pending kicks), for reports.
        pub fn nohz(&self) -> &Nohz<CPUS> {
            &self.nohz
        }
    }

    /// `nohz_idle_balance` on a kicked idle CPU: balance (or refresh the blocked load of)
    /// every tickless idle CPU that is due, then itself. Returns whether a kick was served.
    /// A CPU out of range is [`SchedError::CpuOutOfRange`]; a broken `now` (2^63 ns or more
    /// ahead of the CPU's last reading) or one behind it is taken as the CPU's last sane
    /// reading, as the balancer's timers are set from it.
    #[cfg(feature = "nohz")]
    pub fn nohz_idle_balance(&self, cpu: usize, now: u64) -> Result<bool, SchedError> {
        self.check_cpu(cpu)?;
        // (One CPU is never kicked: there is no other CPU to kick it.)
        if CPUS == 1 {
            return Ok(false);
        }
        let now = self.rq(cpu).rq.sane_now(now);
        Ok(self.nohz_idle_balance_on(cpu, now))
    }

    /// Whether a kick to balance for the tickless CPUs waits on `cpu` (a plain load: every
    /// switch asks, and the usual answer needs no read-modify-write).
    #[inline]
    pub(super) fn nohz_kick_pending(&self, cpu: usize) -> bool {
        self.nohz.flags[cpu].load(Relaxed) != 0
    }

    pub(super) fn nohz_idle_balance_on(&self, cpu: usize, now: u64) -> bool {
        // (A swap of zero for zero would change nothing.)
        if !self.nohz_kick_pending(cpu) {
            return false;
        }
        let flags = self.nohz.flags[cpu].swap(0, Relaxed);
        if flags & NOHZ_KICK_MASK == 0 {
            return false;
        }
        if !self.stats(cpu).idle.load(Relaxed) {
            return false;
        }
        self.nohz_pass(cpu, now, flags, IdleType::Idle);
        true
    }

    /// `_nohz_idle_balance` on `cpu`, `idle` (a kicked CPU, or a newly idle one refreshing
    /// the blocked load of the tickless ones): for each tickless idle CPU, bring its blocked
    /// load up to date and, with [`NOHZ_BALANCE_KICK`] in `flags`, balance for it when due;
    /// then the same for `cpu` itself, but for a newly idle one. Returns whether the pass
    /// went all the way (it stops when work arrives on `cpu`).
    fn nohz_pass(&self, cpu: usize, now: u64, flags: u8, idle: IdleType) -> bool {
        let newly = idle == IdleType::NewlyIdle;
        let j = self.jiffies(now);
        if flags & NOHZ_STATS_KICK != 0 {
            self.nohz.has_blocked.store(false, Relaxed);
        }
        // The earliest balance due among the tickless CPUs served here, this one included:
        // it becomes the kick gate, so it must not leave out anyone still tickless.
        let mut next_balance: Option<u64> = None;
        let mut has_blocked = false;
        let mut aborted = false;
        for other in 0..self.nr_cpus() {
            if other == cpu || !self.nohz.is_tickless(other) || !self.stats(other).idle.load(Relaxed) {
                continue;
            }
            // Abort if work arrived here meanwhile: this CPU has better things to do.
            if self.stats(cpu).nr_running.load(Relaxed) > 0 {
                has_blocked = true;
                aborted = true;
                break;
            }
            // (One whose blocked load is all gone is left alone, as Linux's
            // `update_nohz_stats` leaves it.)
            has_blocked |= self.publishes_blocked_load(other) && self.refresh_blocked(other, now, false);
            let due = self.next_balance(other);
            if j >= due && flags & NOHZ_BALANCE_KICK != 0 {
                self.rebalance_domains(other, now, IdleType::Idle);
            }
            let nb = self.next_balance(other);
            next_balance = Some(next_balance.map_or(nb, |n| n.min(nb)));
        }
        if !aborted {
            // Then itself, its own blocked load counting as the others' does (a newly idle
            // CPU's was just brought up to date, and it is not tickless).
            if !newly {
                has_blocked |= self.refresh_blocked(cpu, now, false);
                if flags & NOHZ_BALANCE_KICK != 0 {
                    self.rebalance_domains(cpu, now, IdleType::Idle);
                }
                let nb = self.next_balance(cpu);
                next_balance = Some(next_balance.map_or(nb, |n| n.min(nb)));
            }
            // The next stats kick waits only after a full pass (an aborted one lets the next
            // busy tick kick again).
            if flags & NOHZ_STATS_KICK != 0 {
                self.nohz.next_blocked.store(j + self.ms_to_jiffies(LOAD_AVG_PERIOD), Relaxed);
            }
        }
        if has_blocked {
            self.nohz.has_blocked.store(true, Relaxed);
        }
        // An aborted pass did not see every tickless CPU, so it leaves the gate as it was
        // (at worst in the past: the next busy tick kicks again).
        if let (false, Some(nb)) = (aborted, next_balance) {
            self.nohz.next_balance.store(nb, Relaxed);
        }
        !aborted
    }

    /// `nohz_newidle_balance`: `cpu`, going idle without a balance pass though its idle is
    /// long enough for one (nothing is overloaded), brings the tickless CPUs' blocked load
    /// up to date itself when it is due, rather than wake one of them for it; if work arrives
    /// meanwhile it kicks one instead.
    pub(super) fn nohz_newidle_balance(&self, cpu: usize, now: u64) {
        if !(CPUS > 1 && NOHZ) {
            return;
        }
        if !self.nohz.has_blocked.load(Relaxed) || self.jiffies(now) < self.nohz.next_blocked.load(Relaxed) {
            return;
        }
        if !self.nohz_pass(cpu, now, NOHZ_STATS_KICK, IdleType::NewlyIdle) {
            self.kick_ilb(NOHZ_STATS_KICK);
        }
    }

    /// Whether a balance pass of an `idle` CPU refreshes tickless CPUs' blocked load as it
    /// reads their figures (`LBF_NOHZ_STATS`): a newly idle one, while some tickless CPU may
    /// still have blocked load.
    pub(super) fn nohz_stats_wanted(&self, idle: IdleType) -> bool {
        CPUS > 1 && NOHZ && idle == IdleType::NewlyIdle && self.nohz.has_blocked.load(Relaxed)
    }

    /// `update_nohz_stats`: brings the blocked load of `cpu`, if tickless and still carrying
    /// some, up to `now`, at most once a jiffy. Returns whether it still has blocked load.
    pub(super) fn update_nohz_stats(&self, cpu: usize, now: u64) -> bool {
        if !self.nohz.is_tickless(cpu) || !self.publishes_blocked_load(cpu) {
            return false;
        }
        self.refresh_blocked(cpu, now, true)
    }

    /// Whether idle `cpu`'s published figures still hold load to decay: an idle CPU's change
    /// only when they are brought up to date, which publishes them, so they are read without
    /// its lock.
    fn publishes_blocked_load(&self, cpu: usize) -> bool {
        let s = self.stats(cpu);
        s.load.load(Relaxed) != 0 || s.util_avg.load(Relaxed) != 0
    }

    /// Brings `cpu`'s blocked load up to `now` and publishes its figures; with
    /// `once_a_jiffy`, not if its clock has already reached this jiffy (a tickless CPU's
    /// clock moves when its blocked load is refreshed: Linux's
    /// `last_blocked_load_update_tick`). Returns whether any is left to decay.
    #[inline(never)]
    fn refresh_blocked(&self, cpu: usize, now: u64, once_a_jiffy: bool) -> bool {
        let mut st = self.rq(cpu);
        if !once_a_jiffy || self.jiffies(st.rq.clock()) < self.jiffies(now) {
            st.rq.update_clock(now);
            st.update_blocked_averages(self.pool());
            self.after_update(cpu, &mut st);
        }
        st.rq.avg().load_avg != 0 || st.rq.avg().util_avg != 0
    }

    /// After a pass that left some tickless CPU with blocked load: if the pass's domain
    /// (`span`) covers every tickless CPU, it did a stats kick's work, so the next one waits
    /// (`LBF_NOHZ_AGAIN`).
    pub(super) fn nohz_stats_pass_done(&self, span: &CpuMask, now: u64) {
        if (0..self.nr_cpus()).all(|c| !self.nohz.is_tickless(c) || span.contains(c)) {
            let j = self.jiffies(now) + self.ms_to_jiffies(LOAD_AVG_PERIOD);
            self.nohz.next_blocked.store(j, Relaxed);
        }
    }

    /// Called by `rebalance_domains` of an idle CPU: the nohz balancer's next deadline
    /// follows the earliest idle CPU's.
    pub(crate) fn nohz_note_next_balance(&self, next: u64) {
        let cur = self.nohz.next_balance.load(Relaxed);
        if cur > next {
            self.nohz.next_balance.store(next, Relaxed);
        }
    }
}
