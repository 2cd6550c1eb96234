//! Property test: random sequences of every API operation — including bad input (nice out
//! of range, empty or foreign affinity, stale and unknown ids, operations invalid for the
//! task's state, full tables) — with the invariant checker after every step, and every
//! refused call leaving the whole state unchanged.

use proptest::prelude::*;
use sched_core::{CpuMask, Features, Policy, SchedError, SingleCpu, TaskId, TaskParams, TaskState, Tunables};
use sched_testkit::Recorder;

type S = SingleCpu<Recorder, 12, 8>;

#[derive(Debug, Clone)]
enum Mask {
    All,
    Own,
    Empty,
    Foreign,
}

impl Mask {
    fn get(&self) -> CpuMask {
        match self {
            Mask::All => CpuMask::ALL,
            Mask::Own => CpuMask::single(0),
            Mask::Empty => CpuMask::EMPTY,
            Mask::Foreign => CpuMask::range(1, 64),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Create { nice: i32, policy: u8, mask: Mask },
    Exit(usize),
    Block(usize),
    Wake(usize),
    Tick(u64),
    Schedule(u64),
    Yield,
    SetNice(usize, i32),
    SetAffinity(usize, Mask),
}

fn mask() -> impl Strategy<Value = Mask> {
    prop_oneof![6 => Just(Mask::All), 2 => Just(Mask::Own), 1 => Just(Mask::Empty), 1 => Just(Mask::Foreign)]
}

fn op() -> impl Strategy<Value = Op> {
    // Task references index a list of every id ever issued plus made-up ones, so stale and
    // unknown ids come up often.
    prop_oneof![
        3 => (-23i32..23, 0u8..3, mask()).prop_map(|(nice, policy, mask)| Op::Create { nice, policy, mask }),
        1 => (0usize..40).prop_map(Op::Exit),
        3 => (0usize..40).prop_map(Op::Block),
        3 => (0usize..40).prop_map(Op::Wake),
        4 => (0u64..6_000_000).prop_map(Op::Tick),
        3 => (0u64..2_000_000).prop_map(Op::Schedule),
        1 => Just(Op::Yield),
        1 => (0usize..40, -22i32..22).prop_map(|(i, n)| Op::SetNice(i, n)),
        1 => (0usize..40, mask()).prop_map(|(i, m)| Op::SetAffinity(i, m)),
    ]
}

fn pick(ids: &[TaskId], i: usize) -> TaskId {
    if ids.is_empty() || i >= ids.len() * 2 {
        TaskId::new((i % 20) as u32, 99)
    } else {
        ids[i % ids.len()]
    }
}

/// What the rest of the state must equal after a refused call.
fn snapshot(s: &S) -> (sched_core::RunQueue<8>, sched_core::TaskTable<12>) {
    (s.rq().clone(), s.tasks().clone())
}

fn run(ops: Vec<Op>, features: Features) -> Result<(), TestCaseError> {
    let s: Box<S> =
        Box::new(SingleCpu::new(Recorder::new(1), 1024, Tunables::for_cpus(8), features).unwrap());
    let mut ids: Vec<TaskId> = Vec::new();
    let mut now = 0u64;
    for op in ops {
        let before = snapshot(&s);
        let result: Result<(), SchedError> = match &op {
            Op::Create { nice, policy, mask } => {
                let policy = [Policy::Normal, Policy::Batch, Policy::Idle][*policy as usize];
                let r = s.create(now, TaskParams { nice: *nice, policy, affinity: mask.get() });
                match r {
                    Ok(id) => {
                        prop_assert!((-20..=19).contains(nice));
                        prop_assert!(!ids.contains(&id), "ids are never reused");
                        ids.push(id);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Exit(i) => s.exit(now, pick(&ids, *i)),
            Op::Block(i) => s.block(now, pick(&ids, *i)),
            Op::Wake(i) => s.wake(now, pick(&ids, *i)).map(|_| ()),
            Op::Tick(dt) => {
                now += dt;
                s.tick(now);
                Ok(())
            }
            Op::Schedule(dt) => {
                now += dt;
                s.schedule(now);
                Ok(())
            }
            Op::Yield => {
                s.yield_now(now);
                Ok(())
            }
            Op::SetNice(i, n) => s.set_nice(now, pick(&ids, *i), *n),
            Op::SetAffinity(i, m) => s.set_affinity(pick(&ids, *i), m.get()),
        };
        if let Err(e) = result {
            prop_assert!(snapshot(&s) == before, "{:?} refused with {:?} but changed state", op, e);
            // The error must be the right one.
            match (&op, e) {
                (Op::Create { nice, .. }, SchedError::InvalidNice(n)) => prop_assert_eq!(*nice, n),
                (Op::SetNice(_, nice), SchedError::InvalidNice(n)) => prop_assert_eq!(*nice, n),
                (
                    Op::Create { mask: Mask::Empty, .. } | Op::SetAffinity(_, Mask::Empty),
                    SchedError::EmptyAffinity,
                ) => {}
                (
                    Op::Create { mask: Mask::Foreign, .. } | Op::SetAffinity(_, Mask::Foreign),
                    SchedError::AffinityNotOnline,
                ) => {}
                (Op::Create { .. }, SchedError::TaskTableFull | SchedError::RunQueueFull) => {
                    prop_assert!(s.tasks().len() == 12 || !s.rq().has_room());
                }
                (Op::Wake(_), SchedError::RunQueueFull) => prop_assert!(!s.rq().has_room()),
                (_, SchedError::StaleTask(id)) => {
                    prop_assert!(ids.contains(&id));
                }
                (_, SchedError::UnknownTask(id)) => prop_assert!(!ids.contains(&id)),
                (Op::Block(_), SchedError::InvalidState { state, .. }) => {
                    prop_assert_ne!(state, TaskState::Running)
                }
                (Op::Wake(_), SchedError::InvalidState { state, .. }) => {
                    prop_assert_ne!(state, TaskState::Blocked)
                }
                (Op::Exit(_), SchedError::InvalidState { state, .. }) => {
                    prop_assert_eq!(state, TaskState::Exiting)
                }
                (op, e) => prop_assert!(false, "unexpected {:?} for {:?}", e, op),
            }
        }
        if let Err(v) = s.check_invariants() {
            prop_assert!(false, "after {:?}: {:?}", op, v);
        }
        // The current task, if any, is the one the table calls Running.
        if let Some(c) = s.current() {
            let st = s.state(c).unwrap();
            prop_assert!(matches!(st, TaskState::Running | TaskState::Blocked | TaskState::Exiting));
        }
        prop_assert_eq!(
            s.rq().nr_running() as usize,
            s.tasks()
                .iter()
                .filter(|(_, e)| matches!(e.state, TaskState::Running | TaskState::Runnable))
                .count()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_invariants(ops in prop::collection::vec(op(), 1..250)) {
        run(ops, Features::default())?;
    }

    #[test]
    fn random_operations_with_other_features(
        ops in prop::collection::vec(op(), 1..150),
        bits in 0..=Features::all().bits(),
    ) {
        // (Every switch, EEVDF and its lag rule included: the range is all of them.)
        run(ops, Features::from_bits_truncate(bits))?;
    }
}
