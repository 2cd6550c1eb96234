//! CFS bandwidth control on one CPU (the `groups` feature; docs/groups.md): a group
//! runqueue with a `cpu.max` quota runs on runtime taken from its group's pool a slice at a
//! time, and is throttled — its entity leaves its parent's runqueue, with its tasks' count
//! at every level above, and its PELT clock stops with those of the levels below it — when
//! it has none left, until its group's period timer hands it runtime again (v5.7's
//! `account_cfs_rq_runtime`, `throttle_cfs_rq`, `unthrottle_cfs_rq`).

use portable_atomic::Ordering::Relaxed;

use super::{DequeueFlags, EnqueueFlags, Fair, PeltFlags};
use crate::group::bandwidth::MIN_RQ_RUNTIME_NS;
use crate::group::level::Level;
use crate::runqueue::SlotId;

impl<const Q: usize> Fair<'_, '_, Q> {
    /// `account_cfs_rq_runtime` on the working level: `delta` ns ran; out of runtime, it
    /// takes a slice from the pool, and if the pool has none the level's current entity is
    /// asked to stop (the level is throttled when it is put back).
    pub(super) fn account_runtime(&mut self, delta: u64) {
        let l = self.level;
        let Some(g) = l.checked_sub(1).and_then(|i| self.levels.get_mut(i as usize)) else { return };
        if !g.runtime_enabled {
            return;
        }
        let rt = &mut g.runtime;
        if rt.throttled {
            // Its entity left its parent: whatever still runs here (it was made current as
            // the level was throttled, by a move into the group) must stop.
            // (Saturating, as `RqRuntime::charge` does: any clock step is taken.)
            rt.remaining = rt.remaining.saturating_sub(i64::try_from(delta).unwrap_or(i64::MAX));
            if self.curr.is_some() {
                self.resched_curr();
            }
            return;
        }
        if rt.remaining > 0 && rt.remaining as u64 > delta {
            rt.remaining -= delta as i64;
            return;
        }
        let Some(sh) = self.pool.shared(l as usize) else { return };
        let ok = {
            let mut pool = sh.bw.lock();
            let ok = rt.charge(delta, &mut pool);
            if pool.active() {
                // The period timer runs while runtime is taken (`start_cfs_bandwidth`).
                sh.arm(self.rq.clock, pool.limit().period_ns());
            }
            ok
        };
        if !ok && self.curr.is_some() {
            self.resched_curr();
        }
    }

    /// Whether level `l` itself is throttled.
    #[inline]
    pub(super) fn is_throttled(&self, l: Level) -> bool {
        l != 0 && self.levels.get(l as usize - 1).is_some_and(|g| g.runtime.throttled)
    }

    /// Whether level `l` or one above it is throttled (`throttled_hierarchy`).
    pub(crate) fn throttled_hierarchy(&self, mut l: Level) -> bool {
        for _ in 0..=crate::group::tree::MAX_GROUP_DEPTH {
            if l == 0 {
                return false;
            }
            if self.is_throttled(l) {
                return true;
            }
            l = self.parent(l);
        }
        false
    }

    /// `sync_throttle` for a new group's level `g`: its clock starts anew (a slot's last
    /// group may have left it stopped: a throttle walks the levels by their parents, a dead
    /// slot's included), stopped under a throttled hierarchy, as those of the levels there.
    pub(crate) fn sync_throttle(&mut self, g: Level) {
        if g == 0 {
            return;
        }
        let under_throttled = self.throttled_hierarchy(self.parent(g));
        let cpu_clock = self.rq.clock_pelt();
        if let Some(lv) = self.levels.get_mut(g as usize - 1) {
            lv.clock = crate::group::level::LevelClock::RUNNING;
            if under_throttled {
                lv.clock.stop(cpu_clock);
            }
        }
    }

    /// Whether level `d` is level `l` or lies below it.
    fn within(&self, mut d: Level, l: Level) -> bool {
        for _ in 0..=crate::group::tree::MAX_GROUP_DEPTH {
            if d == l {
                return true;
            }
            if d == 0 {
                return false;
            }
            d = self.parent(d);
        }
        false
    }

    /// Whether the task at `slot` sits in a throttled hierarchy (the balancer leaves it).
    pub(crate) fn task_throttled(&self, slot: SlotId) -> bool {
        !self.flat() && self.throttled_hierarchy(self.level_of(slot))
    }

    /// `check_cfs_rq_runtime`: level `l`, out of runtime, is throttled. Returns whether it was.
    pub(super) fn check_runtime(&mut self, l: Level) -> bool {
        let must = l != 0
            && self.levels.get(l as usize - 1).is_some_and(|g| g.runtime_enabled && g.runtime.must_throttle());
        if must {
            self.throttle(l);
        }
        must
    }

    /// `check_enqueue_throttle`: level `l` just got its first entity; if its group has no
    /// runtime for it, it is throttled at once.
    pub(super) fn check_enqueue_throttle(&mut self, l: Level) {
        let Some(g) = l.checked_sub(1).and_then(|i| self.levels.get(i as usize)) else { return };
        if !g.runtime_enabled || g.runtime.throttled || g.cfs.nr_running != 1 || self.curr_of(l).is_some() {
            return;
        }
        if g.runtime.remaining <= 0 {
            self.at(l, |f| f.account_runtime(0));
            self.check_runtime(l);
        }
    }

    /// `return_cfs_rq_runtime`: level `l` emptied; what runtime it has beyond 1 ms goes back
    /// to the pool for the other CPUs.
    pub(super) fn return_runtime(&mut self, l: Level) {
        let Some(g) = l.checked_sub(1).and_then(|i| self.levels.get_mut(i as usize)) else { return };
        if !g.runtime_enabled || g.cfs.nr_running != 0 || g.runtime.remaining <= MIN_RQ_RUNTIME_NS as i64 {
            return;
        }
        let Some(sh) = self.pool.shared(l as usize) else { return };
        g.runtime.remaining = sh.bw.lock().give_back(g.runtime.remaining);
    }

    /// Marks the group entity at `slot` as taken by a throttle.
    fn set_left_with_throttle(&mut self, slot: SlotId) {
        if let Some(g) = self.my_q(slot).and_then(|l| self.levels.get_mut((l as usize).wrapping_sub(1))) {
            g.left_with_throttle = true;
        }
    }

    /// `flags` for enqueueing the entity at `slot`, with [`EnqueueFlags::UNTHROTTLE`] added
    /// if it is a group entity a throttle took (which this enqueue brings back: the mark goes).
    pub(super) fn group_enqueue_flags(&mut self, slot: SlotId, flags: EnqueueFlags) -> EnqueueFlags {
        let level = self.my_q(slot).and_then(|l| self.levels.get_mut((l as usize).wrapping_sub(1)));
        if level.is_some_and(|g| core::mem::take(&mut g.left_with_throttle)) {
            flags | EnqueueFlags::UNTHROTTLE
        } else {
            flags
        }
    }

    /// Level `l`'s current entity, outside `at`.
    fn curr_of(&self, l: Level) -> Option<SlotId> {
        match l {
            0 => self.rq.top_curr,
            l => self.levels[l as usize - 1].curr,
        }
    }

    /// `throttle_cfs_rq`: level `l`'s entity leaves its parent's runqueue (and each entity
    /// above that is left with nothing queued), and every level above stops counting its
    /// tasks.
    fn throttle(&mut self, l: Level) {
        // Throttled first, so that the walk leaves the weight of its entity, now under a
        // throttled hierarchy, alone (as v5.7's `tg_throttle_down` before its walk).
        let now = self.rq.clock;
        self.levels[l as usize - 1].runtime.throttle(now);
        // Its clock and those of the levels below it stop (`tg_throttle_down`).
        let cpu_clock = self.rq.clock_pelt();
        for d in 1..=self.levels.len() as Level {
            if self.within(d, l) {
                self.levels[d as usize - 1].clock.stop(cpu_clock);
            }
        }
        let g = &self.levels[l as usize - 1];
        let (tasks, idle) = (g.cfs.h_nr_running, g.cfs.idle_h_nr_running);
        let mut dequeue = true;
        let mut cur = self.up(l);
        while let Some((s, pl)) = cur {
            if !self.ent(s).on_rq() {
                break;
            }
            // (An entity's dequeue uncounts one task of it already.)
            let counted = if dequeue {
                self.at(pl, |f| f.dequeue_entity::<false>(s, DequeueFlags::SLEEP));
                self.set_left_with_throttle(s);
                self.return_runtime(pl);
                1
            } else {
                // (Before the level stops counting them, as a dequeue's walk.)
                self.at(pl, |f| f.age_counted(s, PeltFlags::empty()));
                0
            };
            let c = self.cfs_of(pl);
            c.h_nr_running = c.h_nr_running.saturating_sub(tasks - counted.min(tasks));
            c.idle_h_nr_running = c.idle_h_nr_running.saturating_sub(idle);
            if c.load.weight != 0 {
                dequeue = false;
            }
            cur = self.up(pl);
        }
        if let Some(sh) = self.pool.shared(l as usize) {
            // (Counted and the timer armed under the pool's lock, which the period's end
            // holds while it reads the count and stops the timer: neither misses the other.)
            let mut pool = sh.bw.lock();
            sh.nr_throttled.fetch_add(1, Relaxed);
            // The period timer must run to let it go (`start_cfs_bandwidth`).
            pool.take(0);
            sh.arm(now, pool.limit().period_ns());
        }
    }

    /// `unthrottle_cfs_rq` once level `l` is let go (its runtime already given): its entity
    /// and those above that left with it come back, and the levels above count its tasks
    /// again up to a level still throttled.
    fn unthrottle(&mut self, l: Level) {
        if let Some(sh) = self.pool.shared(l as usize) {
            sh.nr_throttled.fetch_sub(1, Relaxed);
        }
        // Its clock and those below it start again, but where a level on the way is still
        // throttled (`tg_unthrottle_up`; before the test below, as there).
        let cpu_clock = self.rq.clock_pelt();
        for d in 1..=self.levels.len() as Level {
            if self.within(d, l) && !self.throttled_hierarchy(d) {
                self.levels[d as usize - 1].clock.start(cpu_clock);
            }
        }
        let g = &self.levels[l as usize - 1];
        if g.cfs.load.weight == 0 {
            return;
        }
        let (tasks, idle) = (g.cfs.h_nr_running, g.cfs.idle_h_nr_running);
        let mut enqueue = true;
        let mut cur = self.up(l);
        while let Some((s, pl)) = cur {
            if self.ent(s).on_rq() {
                enqueue = false;
            }
            // (An entity's enqueue counts one task of it already.)
            let counted = if enqueue {
                let flags = self.group_enqueue_flags(s, EnqueueFlags::WAKEUP);
                self.at(pl, |f| f.enqueue_entity::<false>(s, flags));
                self.check_enqueue_throttle(pl);
                1
            } else {
                self.at(pl, |f| f.age_counted(s, PeltFlags::empty()));
                0
            };
            let c = self.cfs_of(pl);
            c.h_nr_running += tasks.saturating_sub(counted);
            c.idle_h_nr_running += idle;
            if self.is_throttled(pl) {
                break;
            }
            cur = self.up(pl);
        }
        // An idle CPU with work again picks it.
        if self.rq.curr.is_none() && self.rq.cfs.nr_running > 0 {
            self.resched_curr();
        }
    }

    /// The period's end for group slot `g` on this CPU (`distribute_cfs_runtime`): a
    /// throttled runqueue of the group gets its deficit and a slice from the refilled pool, and
    /// goes on if that brings it above 0. Returns whether it was let go.
    pub(crate) fn distribute(&mut self, g: Level) -> bool {
        let now = self.rq.clock;
        let Some(lv) = self.levels.get((g as usize).wrapping_sub(1)).filter(|lv| lv.runtime.throttled) else {
            return false;
        };
        // A level that cannot run its slice (nothing queued, or an ancestor throttled) gets
        // Linux's grant: its deficit and 1 ns.
        let runs = lv.cfs.load.weight != 0 && !self.throttled_hierarchy(self.parent(g));
        let (Some(sh), Some(lv)) = (self.pool.shared(g as usize), self.levels.get_mut(g as usize - 1)) else {
            return false;
        };
        let go = {
            let mut pool = sh.bw.lock();
            let grant = pool.give(lv.runtime.remaining, runs);
            let rt = &mut lv.runtime;
            rt.remaining = rt.remaining.saturating_add(i64::try_from(grant).unwrap_or(i64::MAX));
            let go = rt.remaining > 0;
            if go {
                rt.unthrottle(now, 0, &mut pool);
            }
            go
        };
        if go {
            self.unthrottle(g);
        }
        go
    }

    /// A new `cpu.max` for group slot `g`: its runqueue here starts over with no runtime,
    /// let go if it was throttled, and is limited if `enabled`.
    pub(crate) fn reset_runtime(&mut self, g: Level, enabled: bool) {
        let now = self.rq.clock;
        let (Some(sh), Some(lv)) = (self.pool.shared(g as usize), self.levels.get_mut((g as usize).wrapping_sub(1)))
        else {
            return;
        };
        let was = lv.runtime.throttled;
        lv.runtime_enabled = enabled;
        lv.runtime.reset(now, &mut sh.bw.lock());
        if was {
            self.unthrottle(g);
        }
    }
}
