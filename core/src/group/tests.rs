//! The groups scheduled: machines with task groups, run tick by tick, against what cgroup
//! v2's `cpu.weight` promises (the shapes of kselftest's `test_cpu.c`).

use super::level::GroupRq;
use super::shares::CpuWeight;
use super::tree::GroupId;
use super::GroupError;
use crate::{Features, NoPlatform, SchedError, Smp, TaskId, TaskParams};
extern crate std;
use std::{boxed::Box, vec::Vec};

pub(super) const MS: u64 = 1_000_000;

/// 256 tasks, 128 slots per CPU of which 8 hold group entities.
pub(super) type M<const C: usize> = Smp<NoPlatform, C, 256, 128, spin::Spin, 8>;

pub(super) fn boot<const C: usize>(features: Features) -> Box<M<C>> {
    let m: Box<M<C>> = Box::new(Smp::new(NoPlatform, features, 1000));
    m.init_with(|t| t.init_flat(C)).unwrap();
    m
}

/// Brings every CPU's clock to 2^63 - 1 ns, as far as one step from 0 goes: from there every
/// reading up to the clock's end is sane (a first reading of 2^63 or more is a broken one).
pub(super) fn climb<const C: usize>(m: &M<C>) {
    for c in 0..C {
        m.tick(c, i64::MAX as u64).unwrap();
    }
}

/// Runs every CPU from `*now` to `until` with a 1 ms tick, switching where asked.
/// Every 97th tick the machine's invariants are checked.
pub(super) fn run<const C: usize>(m: &M<C>, now: &mut u64, until: u64) {
    let mut n = 0u32;
    while *now < until {
        *now += MS;
        for c in 0..C {
            m.tick(c, *now).unwrap();
            if m.need_resched(c) {
                m.schedule(c, *now).unwrap();
                m.finish_switch(c, *now).unwrap();
            }
        }
        n += 1;
        if n.is_multiple_of(97) {
            m.check_invariants().unwrap();
        }
    }
}

/// What `f` reads of group `g`'s runqueue on `cpu`.
pub(super) fn on_level<const C: usize, T>(
    m: &M<C>,
    cpu: usize,
    g: GroupId,
    f: impl FnOnce(&GroupRq) -> T,
) -> T {
    m.with_cpu(cpu, |st| f(&st.levels[g.slot() - 1])).unwrap()
}

pub(super) fn runtime<const C: usize>(m: &M<C>, ids: &[TaskId]) -> u64 {
    ids.iter().map(|&i| m.entity(i).unwrap().sum_exec_runtime).sum()
}

/// A `cpu.max` line.
pub(super) fn max(text: &str) -> super::bandwidth::CpuMax {
    super::bandwidth::CpuMax::parse(text, None).unwrap()
}

/// `n` spinners moved into `g`.
pub(super) fn spinners<const C: usize>(m: &M<C>, now: u64, g: GroupId, n: usize) -> Vec<TaskId> {
    (0..n)
        .map(|_| {
            let t = m.create(0, now, TaskParams::default()).unwrap();
            m.move_task(now, t, g).unwrap();
            t
        })
        .collect()
}

fn weighted(m: &M<1>, w: u32) -> GroupId {
    m.create_group(GroupId::ROOT, CpuWeight::new(w).unwrap()).unwrap()
}

/// kselftest's `test_cpucg_weight_overprovisioned` on one CPU: groups of weight 50, 100 and
/// 150, each with spinners, get CPU time 1:2:3 within 5 %, however many spinners each has.
#[test]
fn weights_50_100_150_share_one_cpu_1_2_3() {
    for (per, features) in
        [(1, Features::default()), (3, Features::default()), (2, Features::default() | Features::EEVDF)]
    {
        let m = boot::<1>(features);
        let mut now = 1;
        let groups: Vec<GroupId> = [50, 100, 150].iter().map(|&w| weighted(&m, w)).collect();
        let tasks: Vec<Vec<TaskId>> = groups.iter().map(|&g| spinners(&m, now, g, per)).collect();
        run(&m, &mut now, 1_000 * MS);
        let base: Vec<u64> = tasks.iter().map(|t| runtime(&m, t)).collect();
        run(&m, &mut now, 11_000 * MS);
        let got: Vec<f64> = tasks.iter().zip(&base).map(|(t, b)| (runtime(&m, t) - b) as f64).collect();
        let unit = got[0];
        for (i, want) in [1.0, 2.0, 3.0].iter().enumerate() {
            let r = got[i] / unit;
            assert!(
                (r / want - 1.0).abs() < 0.05,
                "{per} per group, {features:?}: ratio {r:.3} for {want}: {got:?}"
            );
        }
        m.check_invariants().unwrap();
    }
}

/// A group of 100 spinners beside a group of one, equal weights: equal CPU time (Linux
/// without groups would give the many 100 times the one's).
#[test]
fn a_100_thread_group_and_a_1_thread_group_share_equally() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let (many, one) = (weighted(&m, 100), weighted(&m, 100));
    let many_t = spinners(&m, now, many, 100);
    let one_t = spinners(&m, now, one, 1);
    run(&m, &mut now, 1_000 * MS);
    let (a0, b0) = (runtime(&m, &many_t), runtime(&m, &one_t));
    run(&m, &mut now, 11_000 * MS);
    let (a, b) = ((runtime(&m, &many_t) - a0) as f64, (runtime(&m, &one_t) - b0) as f64);
    assert!((a / b - 1.0).abs() < 0.05, "100 threads {a} vs 1 thread {b}");
    m.check_invariants().unwrap();
}

/// kselftest's `test_cpucg_nested_weight_overprovisioned`: a child hierarchy splits its
/// parent's share by its own weights. Root: A (1000) and B (1000); under A: A1 (250) and A2
/// (750). Each leaf has one spinner: B gets half, A1 an eighth, A2 three eighths.
#[test]
fn a_nested_hierarchy_splits_its_parents_share() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let a = weighted(&m, 1000);
    let b = weighted(&m, 1000);
    let a1 = m.create_group(a, CpuWeight::new(250).unwrap()).unwrap();
    let a2 = m.create_group(a, CpuWeight::new(750).unwrap()).unwrap();
    let tb = spinners(&m, now, b, 1);
    let ta1 = spinners(&m, now, a1, 1);
    let ta2 = spinners(&m, now, a2, 1);
    run(&m, &mut now, 1_000 * MS);
    let base = [runtime(&m, &tb), runtime(&m, &ta1), runtime(&m, &ta2)];
    run(&m, &mut now, 17_000 * MS);
    let got = [runtime(&m, &tb) - base[0], runtime(&m, &ta1) - base[1], runtime(&m, &ta2) - base[2]];
    let total: u64 = got.iter().sum();
    for (g, want) in got.iter().zip([0.5, 0.125, 0.375]) {
        let share = *g as f64 / total as f64;
        assert!((share / want - 1.0).abs() < 0.05, "share {share:.4} for {want}: {got:?}");
    }
    m.check_invariants().unwrap();
}

/// Groups that each want less than their share get what they want (kselftest's
/// under-provisioned case): a spinner that sleeps half of each 10 ms in a heavy group
/// beside a light group of spinners gets its half.
#[test]
fn a_group_that_wants_less_than_its_share_gets_what_it_wants() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let (heavy, light) = (weighted(&m, 1000), weighted(&m, 10));
    let sleeper = spinners(&m, now, heavy, 1)[0];
    let hogs = spinners(&m, now, light, 2);
    let mut asleep_since = None;
    let mut last_sum = 0;
    let start = now;
    while now < start + 4_000 * MS {
        let until = now + MS;
        run(&m, &mut now, until);
        let e = m.entity(sleeper).unwrap();
        match asleep_since {
            None if e.sum_exec_runtime - last_sum >= 5 * MS && m.current(0) == Some(sleeper) => {
                m.block(0, now, sleeper).unwrap();
                m.schedule(0, now).unwrap();
                m.finish_switch(0, now).unwrap();
                asleep_since = Some(now);
            }
            Some(t) if now - t >= 5 * MS => {
                m.wake(0, now, sleeper).unwrap();
                asleep_since = None;
                last_sum = e.sum_exec_runtime;
            }
            _ => {}
        }
    }
    let got = m.entity(sleeper).unwrap().sum_exec_runtime as f64 / (now - start) as f64;
    assert!(got > 0.45, "the sleeper got {got:.3} of the CPU, wanting half");
    assert!(runtime(&m, &hogs) > 0, "the light group runs while it sleeps");
    m.check_invariants().unwrap();
}

/// The porter's refusals leave the table as it was.
#[test]
fn group_calls_refuse_bad_input() {
    let m = boot::<1>(Features::default());
    let a = weighted(&m, 100);
    let t = m.create(0, 1, TaskParams::default()).unwrap();
    m.move_task(2, t, a).unwrap();
    assert_eq!(m.delete_group(a), Err(GroupError::NotEmpty));
    assert_eq!(m.delete_group(GroupId::ROOT), Err(GroupError::Root));
    let before = m.group_table();
    assert_eq!(CpuWeight::new(0), Err(GroupError::WeightOutOfRange(0)));
    assert_eq!(CpuWeight::new(10_001), Err(GroupError::WeightOutOfRange(10_001)));
    for _ in 0..7 {
        weighted(&m, 100);
    }
    assert_eq!(m.create_group(GroupId::ROOT, CpuWeight::DEFAULT), Err(GroupError::TableFull));
    m.move_task(3, t, GroupId::ROOT).unwrap();
    m.delete_group(a).unwrap();
    assert_eq!(m.move_task(4, t, a), Err(SchedError::Group(GroupError::UnknownGroup)));
    assert_eq!(m.task_group(t), Ok(GroupId::ROOT));
    assert_eq!(before.tasks(a), Ok(1));
    m.check_invariants().unwrap();
}

/// Groups made before a setup (the first, or one again while no task lives) hold tasks after
/// it: the CPUs set up anew walk their levels, so a task moved in is in the group, and the
/// group empties and goes as usual.
#[test]
fn groups_made_before_a_setup_hold_tasks_after_it() {
    for set_up_first in [false, true] {
        let m: Box<M<2>> = Box::new(Smp::new(NoPlatform, Features::default(), 1000));
        if set_up_first {
            m.init_with(|t| t.init_flat(2)).unwrap();
        }
        let g = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
        m.init_with(|t| t.init_flat(2)).unwrap();
        let ids = spinners(&m, 1, g, 2);
        assert!(ids.iter().all(|&t| m.task_group(t) == Ok(g)), "set up first: {set_up_first}");
        assert_eq!(m.group_table().tasks(g), Ok(2));
        let mut now = 1;
        run(&m, &mut now, 50 * MS);
        assert!(runtime(&m, &ids) > 0);
        for &t in &ids {
            m.move_task(now, t, GroupId::ROOT).unwrap();
        }
        m.delete_group(g).unwrap();
        m.check_invariants().unwrap();
    }
}

/// The root holds the live tasks in no other group (`cgroup.procs` of the root): it
/// answered 0 whatever it held.
#[test]
fn the_root_counts_the_tasks_in_no_group() {
    let m = boot::<1>(Features::default());
    let g = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    let ids: Vec<TaskId> = (0..3).map(|_| m.create(0, 1, TaskParams::default()).unwrap()).collect();
    assert_eq!(m.group_tasks(GroupId::ROOT), Ok(3));
    m.move_task(2, ids[0], g).unwrap();
    assert_eq!((m.group_tasks(GroupId::ROOT), m.group_tasks(g)), (Ok(2), Ok(1)));
    m.exit(3, ids[1]).unwrap();
    assert_eq!(m.group_tasks(GroupId::ROOT), Ok(1));
}

/// A group's `cpu.max` holds across a setup again (or one after `set_group_max`): the CPUs
/// set up anew limit it, from fresh sums. (Its limit was lost: the runqueues the setup reset
/// no longer knew it, while the table still showed it.)
#[test]
fn a_limit_holds_across_a_setup() {
    for set_up_first in [false, true] {
        let m: Box<M<1>> = Box::new(Smp::new(NoPlatform, Features::default(), 1000));
        if set_up_first {
            m.init_with(|t| t.init_flat(1)).unwrap();
        }
        let g = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
        m.set_group_max(1, g, max("5000 100000")).unwrap();
        let mut now = 1;
        if set_up_first {
            // A spinner in it runs and throttles before the machine is set up again.
            let ids = spinners(&m, now, g, 1);
            run(&m, &mut now, 300 * MS);
            m.exit(now, ids[0]).unwrap();
            let until = now + 2 * MS;
            run(&m, &mut now, until);
        }
        m.init_with(|t| t.init_flat(1)).unwrap();
        let start = now;
        let ids = spinners(&m, now, g, 1);
        run(&m, &mut now, start + 1000 * MS);
        // 5 % of a second, give or take a period's quota and a tick.
        let ran = runtime(&m, &ids);
        assert!(ran <= 60 * MS, "set up first: {set_up_first}: ran {} ms", ran / MS);
        assert!(ran >= 40 * MS, "set up first: {set_up_first}: ran {} ms", ran / MS);
        assert!(m.group_bandwidth(g).unwrap().nr_throttled > 0);
        m.check_invariants().unwrap();
    }
}

/// With every task in the root, a machine with groups schedules as one without: the same
/// picks, tick by tick, and the same runtimes and vruntimes, through sleeps, wakeups, nice
/// changes and the balancer on two CPUs (CFS, then EEVDF) — before its first group is
/// created (one level) and after (the levels walked, every task in the root).
#[test]
fn tasks_in_the_root_schedule_as_on_a_machine_without_groups() {
    type Flat = Smp<NoPlatform, 2, 64, 32>;
    type Grouped = Smp<NoPlatform, 2, 64, 40, spin::Spin, 8>;
    for features in [Features::default(), Features::default() | Features::EEVDF] {
        let flat: Box<Flat> = Box::new(Smp::new(NoPlatform, features, 1000));
        let grouped: Box<Grouped> = Box::new(Smp::new(NoPlatform, features, 1000));
        flat.init_with(|t| t.init_flat(2)).unwrap();
        grouped.init_with(|t| t.init_flat(2)).unwrap();
        let mut trace: [Vec<(Option<TaskId>, Option<TaskId>)>; 2] = [Vec::new(), Vec::new()];
        macro_rules! drive {
            ($m:expr, $k:expr) => {{
                let m = $m;
                let mut now = 1;
                let ids: Vec<TaskId> = (0..7)
                    .map(|i| {
                        m.create(i % 2, now, TaskParams { nice: i as i32 - 3, ..TaskParams::default() })
                            .unwrap()
                    })
                    .collect();
                let mut asleep: Vec<Option<u64>> = ids.iter().map(|_| None).collect();
                for tick in 0..3_000u64 {
                    now += MS;
                    for c in 0..2 {
                        m.tick(c, now).unwrap();
                        if m.need_resched(c) {
                            m.schedule(c, now).unwrap();
                            m.finish_switch(c, now).unwrap();
                        }
                    }
                    // Tasks 0..3 sleep 3 ms in every 7 they run; nice changes now and then.
                    for (i, &t) in ids.iter().enumerate().take(3) {
                        match asleep[i] {
                            Some(since) if now - since >= 3 * MS => {
                                m.wake_with(0, now, t, crate::fair::WakeFlags::empty()).unwrap();
                                asleep[i] = None;
                            }
                            None if tick % 7 == i as u64 => {
                                if let Some(c) = (0..2).find(|&c| m.current(c) == Some(t)) {
                                    m.block(c, now, t).unwrap();
                                    m.schedule(c, now).unwrap();
                                    m.finish_switch(c, now).unwrap();
                                    asleep[i] = Some(now);
                                }
                            }
                            _ => {}
                        }
                    }
                    if tick % 500 == 250 {
                        m.set_nice(now, ids[5], (tick / 500) as i32).unwrap();
                    }
                    // The grouped machine gets a group (empty) while its tasks run: from then
                    // on its fair class walks the levels.
                    if $k == 1 && tick == 1_000 {
                        grouped.create_group(GroupId::ROOT, CpuWeight::new(300).unwrap()).unwrap();
                    }
                    trace[$k].push((m.current(0), m.current(1)));
                }
                m.check_invariants().unwrap();
                ids.iter()
                    .map(|&t| {
                        let e = m.entity(t).unwrap();
                        (e.sum_exec_runtime, e.vruntime, e.cpu)
                    })
                    .collect::<Vec<_>>()
            }};
        }
        let a = drive!(&flat, 0);
        let b = drive!(&grouped, 1);
        assert_eq!(trace[0], trace[1], "{features:?}: the picks differ");
        assert_eq!(a, b, "{features:?}: runtimes, vruntimes or CPUs differ");
    }
}

/// PELT up the hierarchy: a busy task moved into a group (two deep) takes its load and
/// utilisation with it, and the CPU's runqueue keeps them at once through the group
/// entities (propagation), rather than losing them and waiting for PELT to build them up.
#[test]
fn a_task_moved_into_a_group_keeps_its_signals_at_the_top() {
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let a = weighted(&m, 100);
    let b = m.create_group(a, CpuWeight::DEFAULT).unwrap();
    let t = m.create(0, now, TaskParams::default()).unwrap();
    run(&m, &mut now, 400 * MS);
    let top = |m: &M<1>| m.with_cpu(0, |st| (st.rq.avg().load_avg, st.rq.avg().util_avg)).unwrap();
    let (load, util) = top(&m);
    assert!(load > 900 && util > 900, "a spinner's signals near full: {load} {util}");
    m.move_task(now, t, b).unwrap();
    let (l2, u2) = top(&m);
    assert!(l2 * 10 >= load * 9 && u2 * 10 >= util * 9, "kept at the top: {load}→{l2}, {util}→{u2}");
    // And back out: the group entities give it up as it leaves them.
    m.move_task(now, t, GroupId::ROOT).unwrap();
    let (l3, u3) = top(&m);
    assert!(l3 * 10 <= load * 12 && u3 * 10 <= util * 12, "not counted twice: {load}→{l3}, {util}→{u3}");
    run(&m, &mut now, 800 * MS);
    m.check_invariants().unwrap();
}

/// Linux's order in a dequeue's walk above the task: each level still counts the leaving
/// task while its signals catch up, and a group entity's runnable count is the one its last
/// update took (`se_update_runnable`), so the time before the dequeue accrues at the count
/// that held then: 2 here, for the CPU's runqueue and for the group's entity, not 1.
#[test]
fn a_dequeue_accrues_the_time_before_it_at_the_count_before_it() {
    use crate::pelt::SchedAvg;
    let m = boot::<1>(Features::default());
    let mut now = 1;
    let a = weighted(&m, 100);
    spinners(&m, now, a, 2);
    run(&m, &mut now, 200 * MS);
    let ge = || m.pool().group_cell(0, a.slot()).unwrap();
    let top = || m.with_cpu(0, |st| (*st.rq.avg(), st.rq.cfs.load.down())).unwrap();
    let ((root, load), entity) = (top(), ge().avg());
    // Half a tick on, the running task blocks; its group keeps the other one queued.
    now += MS / 2;
    m.block(0, now, m.current(0).unwrap()).unwrap();
    let (root_after, entity_after) = (top().0, ge().avg());
    let at_count = |mut avg: SchedAvg, load: u64, n: u64, after: &SchedAvg| {
        avg.update_sum(after.last_update_time, load, n, true);
        avg.runnable_sum
    };
    assert_ne!(at_count(root, load, 1, &root_after), at_count(root, load, 2, &root_after));
    assert_eq!(root_after.runnable_sum, at_count(root, load, 2, &root_after), "the CPU's runqueue");
    assert_eq!(entity_after.runnable_sum, at_count(entity, 1, 2, &entity_after), "the group's entity");
    m.check_invariants().unwrap();
}

/// A task that wakes on another CPU attaches its signals to its group's runqueue there,
/// and the group's load takes them at once (`update_tg_load_avg` after the attach), so the
/// shares its enqueue computes next already count it.
#[test]
fn a_task_attached_on_another_cpu_counts_in_its_groups_load_at_once() {
    let m = boot::<2>(Features::default());
    let mut now = 1;
    let a = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    let t = spinners(&m, now, a, 1)[0];
    m.set_affinity(now, t, crate::CpuMask::single(0)).unwrap();
    run(&m, &mut now, 200 * MS);
    assert_eq!(m.current(0), Some(t));
    m.block(0, now, t).unwrap();
    m.schedule(0, now).unwrap();
    m.finish_switch(0, now).unwrap();
    m.set_affinity(now, t, crate::CpuMask::single(1)).unwrap();
    assert_eq!(m.wake(0, now, t).unwrap(), 1);
    let (contrib, load) = on_level(&m, 1, a, |lv| (lv.tg_contrib, lv.cfs.avg.load_avg));
    assert!(load > 500, "a spinner's load came along: {load}");
    assert_eq!(contrib, load);
    m.check_invariants().unwrap();
}

/// The over-provisioned weights on four CPUs, one spinner per CPU in each group (kselftest's
/// shape): the balancer spreads them and the groups' shares follow their weights across CPUs.
#[test]
fn weights_50_100_150_share_four_cpus_1_2_3() {
    let m = boot::<4>(Features::default());
    let mut now = 1;
    let groups: Vec<GroupId> = [50, 100, 150]
        .iter()
        .map(|&w| m.create_group(GroupId::ROOT, CpuWeight::new(w).unwrap()).unwrap())
        .collect();
    let tasks: Vec<Vec<TaskId>> = groups.iter().map(|&g| spinners(&m, now, g, 4)).collect();
    run(&m, &mut now, 2_000 * MS);
    let base: Vec<u64> = tasks.iter().map(|t| runtime(&m, t)).collect();
    run(&m, &mut now, 12_000 * MS);
    let got: Vec<f64> = tasks.iter().zip(&base).map(|(t, b)| (runtime(&m, t) - b) as f64).collect();
    for (i, want) in [1.0, 2.0, 3.0].iter().enumerate() {
        let r = got[i] / got[0];
        assert!((r / want - 1.0).abs() < 0.05, "ratio {r:.3} for {want}: {got:?}");
    }
    m.check_invariants().unwrap();
}

/// LTP's `cfs_bandwidth01` shape: a three-level hierarchy on four CPUs with `cpu.max`
/// limits of 10 ms periods at each level, whose tasks sleep, wake, and move between its
/// groups, with limits changed and groups created and deleted meanwhile. No task is lost or
/// starved and the machine stays consistent throughout.
#[test]
fn a_three_level_hierarchy_under_churn_loses_no_task() {
    let m = boot::<4>(Features::default());
    let mut now = 1;
    let top = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    let mid = [
        m.create_group(top, CpuWeight::new(200).unwrap()).unwrap(),
        m.create_group(top, CpuWeight::DEFAULT).unwrap(),
    ];
    let leaves: Vec<GroupId> = mid
        .iter()
        .flat_map(|&p| {
            [
                m.create_group(p, CpuWeight::new(50).unwrap()).unwrap(),
                m.create_group(p, CpuWeight::new(300).unwrap()).unwrap(),
            ]
        })
        .collect();
    m.set_group_max(now, top, max("25000 10000")).unwrap();
    m.set_group_max(now, mid[0], max("5000 10000")).unwrap();
    m.set_group_max(now, leaves[3], max("2000 10000")).unwrap();
    let tasks: Vec<TaskId> = (0..16).map(|i| spinners(&m, now, leaves[i % 4], 1)[0]).collect();
    let mut asleep: Vec<Option<u64>> = tasks.iter().map(|_| None).collect();
    let mut spare: Option<GroupId> = None;
    for step in 0..4_000u64 {
        let until = now + MS;
        run(&m, &mut now, until);
        let i = (step * 7 % 16) as usize;
        let t = tasks[i];
        match asleep[i] {
            Some(since) if now - since >= 4 * MS => {
                m.wake_with((step % 4) as usize, now, t, crate::fair::WakeFlags::empty()).unwrap();
                asleep[i] = None;
            }
            None if step % 3 == 0 => {
                if let Some(c) = (0..4).find(|&c| m.current(c) == Some(t)) {
                    m.block(c, now, t).unwrap();
                    m.schedule(c, now).unwrap();
                    m.finish_switch(c, now).unwrap();
                    asleep[i] = Some(now);
                }
            }
            _ => {}
        }
        if step % 5 == 0 {
            // Moves between leaves, to a middle group and back, running or not.
            let to =
                if step % 15 == 0 { mid[(step / 15 % 2) as usize] } else { leaves[(step / 5 % 4) as usize] };
            m.move_task(now, tasks[(step * 3 % 16) as usize], to).unwrap();
        }
        if step % 250 == 0 {
            spare = match spare {
                None => Some(m.create_group(mid[1], CpuWeight::new(10).unwrap()).unwrap()),
                Some(g) => {
                    m.delete_group(g).unwrap();
                    None
                }
            };
        }
        if step % 200 == 0 {
            m.set_group_weight(now, mid[0], CpuWeight::new(50 + (step as u32 / 200) * 40).unwrap()).unwrap();
        }
        if step % 300 == 150 {
            let limit = if step % 600 == 150 { max("max 10000") } else { max("3000 10000") };
            m.set_group_max(now, leaves[0], limit).unwrap();
        }
    }
    for (i, &t) in tasks.iter().enumerate() {
        if asleep[i].is_some() {
            m.wake_with(0, now, t, crate::fair::WakeFlags::empty()).unwrap();
        }
    }
    let before: Vec<u64> = tasks.iter().map(|&t| m.entity(t).unwrap().sum_exec_runtime).collect();
    let until = now + 2_000 * MS;
    run(&m, &mut now, until);
    for (i, &t) in tasks.iter().enumerate() {
        assert!(m.entity(t).unwrap().sum_exec_runtime > before[i], "task {i} starved after the churn");
    }
    let counted: u32 =
        leaves.iter().chain(&mid).chain([&top]).map(|&g| m.group_table().tasks(g).unwrap()).sum();
    assert_eq!(counted, 16, "every task counted in exactly one group");
    m.check_invariants().unwrap();
}

/// EEVDF switched on at run time on a machine with groups: every level's average starts from
/// sums rebuilt from its own tree (group entities and tasks alike), which the invariant
/// checker recomputes level by level, every runnable entity starts a request, and the run
/// goes on with them.
#[test]
fn switching_eevdf_on_with_groups_rebuilds_every_levels_average() {
    let m = boot::<2>(Features::default());
    let mut now = 1;
    let outer = m.create_group(GroupId::ROOT, CpuWeight::new(100).unwrap()).unwrap();
    let inner = m.create_group(outer, CpuWeight::new(300).unwrap()).unwrap();
    let mut tasks = spinners(&m, now, outer, 3);
    tasks.extend(spinners(&m, now, inner, 3));
    for nice in [-3, 0, 4] {
        tasks.push(m.create(0, now, TaskParams { nice, ..TaskParams::default() }).unwrap());
    }
    run(&m, &mut now, 200 * MS);
    // Switched while a grouped task runs on CPU 0: its topmost group entity is the top
    // level's current one.
    let grouped = &tasks[..6];
    for _ in 0..100 {
        if m.current(0).is_some_and(|t| grouped.contains(&t)) {
            break;
        }
        let t = now + MS;
        run(&m, &mut now, t);
    }
    assert!(m.current(0).is_some_and(|t| grouped.contains(&t)), "a grouped task runs on CPU 0");
    m.set_features(Features::default() | Features::EEVDF);
    m.check_invariants().unwrap();
    // Every runnable entity of every level starts a request of one slice at the switch.
    let slice = m.tunables().min_granularity_ns;
    let one_slice = |load| crate::weights::calc_delta_fair(slice, &load);
    for &t in &tasks {
        let e = m.entity(t).unwrap();
        assert_eq!(e.deadline.wrapping_sub(e.vruntime), one_slice(e.load()), "{t:?}");
    }
    for cpu in 0..2 {
        for g in [outer, inner] {
            let e = m.pool().group_cell(cpu, g.slot()).unwrap();
            if e.on_rq() {
                assert_eq!(e.deadline().wrapping_sub(e.vruntime()), one_slice(e.load()), "{g:?} on {cpu}");
            }
        }
    }
    let before = runtime(&m, &tasks);
    let until = now + 200 * MS;
    run(&m, &mut now, until);
    m.check_invariants().unwrap();
    assert_eq!(runtime(&m, &tasks) - before, 2 * 200 * MS, "both CPUs kept busy after the switch");
}

/// A misfit task's load on an asymmetric machine is `task_h_load`, as the balancer moves it:
/// a spinner in a group of weight 10 (shares 102) beside a nice-19 spinner of the root (weight
/// 15) on a LITTLE CPU runs most of the time and does not fit it, yet carries about a tenth of
/// its own load average there. (The nice-19 spinner fits, and is no misfit.)
#[test]
fn a_misfit_task_in_a_light_group_carries_its_hierarchical_load() {
    let m: Box<M<2>> = Box::new(Smp::new(NoPlatform, Features::default(), 1000));
    m.init_with(|t| t.init_big_little(1, 1, 446)).unwrap();
    let mut now = 1;
    let little = TaskParams { affinity: crate::CpuMask::single(0), ..TaskParams::default() };
    let light = m.create_group(GroupId::ROOT, CpuWeight::new(10).unwrap()).unwrap();
    let grouped = m.create(0, now, little).unwrap();
    m.move_task(now, grouped, light).unwrap();
    let root = m.create(0, now, TaskParams { nice: 19, ..little }).unwrap();
    run(&m, &mut now, 500 * MS);
    let (mut seen_grouped, mut seen_root) = (false, false);
    for _ in 0..200 {
        let until = now + MS;
        run(&m, &mut now, until);
        let curr = m.current(0);
        let misfit = m.rq(0).misfit_task_load;
        if curr == Some(grouped) {
            let own = m.entity(grouped).unwrap().avg.load_avg;
            assert!(misfit > 0 && misfit * 5 < own, "hierarchical {misfit} against its own {own}");
            seen_grouped = true;
        } else {
            assert_eq!((curr, misfit), (Some(root), 0));
            seen_root = true;
        }
    }
    assert!(seen_grouped && seen_root, "both ran");
    m.check_invariants().unwrap();
}

/// A task in a light group is placed by its hierarchical load, as Linux's wake-up and
/// slow-path placement weigh it (`task_h_load`): a spinner in a group of weight 10 beside a
/// spinner of the root weighs about a tenth of its own load average; a task of the root
/// weighs its own.
#[test]
fn a_task_in_a_light_group_is_placed_by_its_hierarchical_load() {
    let m = boot::<2>(Features::default());
    let mut now = 1;
    let on0 = TaskParams { affinity: crate::CpuMask::single(0), ..TaskParams::default() };
    let light = m.create_group(GroupId::ROOT, CpuWeight::new(10).unwrap()).unwrap();
    let grouped = m.create(0, now, on0).unwrap();
    m.move_task(now, grouped, light).unwrap();
    let root = m.create(0, now, on0).unwrap();
    run(&m, &mut now, 500 * MS);
    let e = m.entity(grouped).unwrap();
    let placed = m.placed_load(&e);
    assert!(
        placed > 0 && placed * 5 < e.avg.load_avg,
        "hierarchical {placed} against its own {}",
        e.avg.load_avg
    );
    let r = m.entity(root).unwrap();
    assert_eq!(m.placed_load(&r), r.avg.load_avg);
}

/// The cache-hot buddy rule (`task_hot`) reads the buddies of the task's own runqueue: a
/// task that is its group runqueue's last buddy stays for a busy destination, as a task at
/// the top level does, until the domain's failures pass its cache tries.
#[test]
fn a_groups_buddy_is_cache_hot_to_a_busy_cpu() {
    use crate::balance::migrate::{can_migrate_task, DetachEnv, LbfFlags};
    use crate::balance::{IdleType, MigrationType};
    use crate::table::Location;
    let m = boot::<2>(Features::default());
    let now = 1;
    let g = m.create_group(GroupId::ROOT, CpuWeight::DEFAULT).unwrap();
    let ts = spinners(&m, now, g, 2);
    // Both on CPU 0, and allowed on CPU 1.
    for &t in &ts {
        m.set_affinity(now, t, crate::CpuMask::single(0)).unwrap();
        m.set_affinity(now, t, crate::CpuMask::first_n(2)).unwrap();
    }
    let slot = |t| match m.table().get(t).unwrap().location {
        Location::OnCpu { cpu: 0, slot } => slot as crate::runqueue::SlotId,
        l => panic!("{t:?} is not on CPU 0: {l:?}"),
    };
    let (a, b) = (slot(ts[0]), slot(ts[1]));
    let mut st = m.rq(0);
    // As when `a` was preempted in its group.
    st.levels[g.slot() - 1].cfs.last = Some(a);
    let mut env = DetachEnv {
        dst_cpu: 1,
        dst_nr_running: 1,
        dst_grpmask: crate::CpuMask::single(1),
        cpus: crate::CpuMask::first_n(2),
        new_dst_cpu: 1,
        idle: IdleType::NotIdle,
        migration_type: MigrationType::Load,
        imbalance: 1024,
        flags: LbfFlags::empty(),
        loop_: 0,
        loop_max: 2,
        loop_break: 32,
        nr_balance_failed: 0,
        cache_nice_tries: 1,
        // (Recency alone never makes a task hot here.)
        migration_cost_ns: 0,
        features: Features::default(),
    };
    let f = st.fair(m.pool());
    assert!(!can_migrate_task(&mut env, &f, a), "its group's last buddy is hot");
    assert!(can_migrate_task(&mut env, &f, b), "the group's other task is not");
    env.nr_balance_failed = 2;
    assert!(can_migrate_task(&mut env, &f, a), "past the cache tries it goes");
}
