//! The porter's API (`sched_core::port::Scheduler`) holds a port to the calling contract:
//! CPUs up before work is placed, no time 0, no call from inside a call on the same CPU, and
//! the payload a task was created with is what a switch hands back — on any CPU, however
//! soon after `create` it is picked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;

use sched_core::port::{Resched, Scheduler};
use sched_core::{CpuMask, Event, EventKind, Features, Platform, SchedError, TaskId, TaskParams, TaskState};

const T: u64 = 1_000_000;

#[test]
fn work_waits_for_every_cpu_and_time_starts_above_zero() {
    let s: Box<Scheduler<sched_core::NoPlatform, 4, 8, 8>> =
        Box::new(Scheduler::new(sched_core::NoPlatform, Features::DEFAULT, 250));
    assert_eq!(s.cpu_up(0, T), Err(SchedError::NotInitialised), "no machine yet");
    s.init_with(|t| t.init_flat(4)).unwrap();
    assert_eq!(s.tick(0, T), Err(SchedError::CpuNotUp(0)));
    assert_eq!(s.reschedule(0, T, |_| {}).map(|r| r.next), Err(SchedError::CpuNotUp(0)));
    assert_eq!(s.cpu_up(0, 0), Err(SchedError::ZeroTime));
    s.cpu_up(0, T).unwrap();
    s.cpu_up(0, T).unwrap(); // again: nothing happens
    s.cpu_up(2, T).unwrap();
    assert_eq!(s.create(0, T, TaskParams::default(), ()), Err(SchedError::CpuNotUp(1)));
    assert_eq!(s.nr_tasks(), 0, "a refused create leaves nothing behind");
    s.cpu_up(1, T).unwrap();
    s.cpu_up(3, T).unwrap();
    assert_eq!(s.create(0, 0, TaskParams::default(), ()), Err(SchedError::ZeroTime));
    let ids: Vec<_> = (0..4).map(|_| s.create(0, T, TaskParams::default(), ()).unwrap()).collect();
    // Fork placement saw four idle CPUs: the tasks are spread.
    let mut cpus: Vec<usize> = ids.iter().map(|&t| s.task_cpu(t).unwrap()).collect();
    cpus.sort_unstable();
    assert_eq!(cpus, [0, 1, 2, 3]);
    assert_eq!(s.tick(9, T), Err(SchedError::CpuOutOfRange(9)));
    // A new machine: every CPU must come up again (only while no task lives).
    for t in ids {
        s.exit(0, T, t).unwrap();
    }
    s.init_with(|t| t.init_flat(2)).unwrap();
    assert_eq!(s.create(0, T, TaskParams::default(), ()), Err(SchedError::CpuNotUp(0)));
    s.check_invariants().unwrap();
}

/// A platform whose callback calls back into the scheduler on the CPU whose call it ends:
/// what it got.
struct CallsBack {
    inner: Mutex<Vec<Result<(), SchedError>>>,
}

impl Platform for CallsBack {
    type Payload = u32;
    fn resched_cpu(&self, _cpu: usize) {
        // Made on CPU 0's behalf (the test calls only from CPU 0), which is still inside the
        // call that delivers this: a call, and the way-out question.
        let r = SCHED.yield_now(0, 2 * T);
        self.inner.lock().unwrap().push(r);
        let asked = SCHED.need_resched(0).map(|_| ());
        self.inner.lock().unwrap().push(asked);
    }
}

static SCHED: Scheduler<CallsBack, 2, 8, 8> =
    Scheduler::new(CallsBack { inner: Mutex::new(Vec::new()) }, Features::DEFAULT, 250);

#[test]
fn a_callback_calling_back_is_refused_not_deadlocked() {
    SCHED.init_with(|t| t.init_flat(2)).unwrap();
    SCHED.cpu_up(0, T).unwrap();
    SCHED.cpu_up(1, T).unwrap();
    // Creating from CPU 0 asks some CPU to reschedule (preemption of its idle loop).
    let a =
        SCHED.create(0, T, TaskParams { affinity: CpuMask::single(0), ..TaskParams::default() }, 7).unwrap();
    let got = SCHED.platform().inner.lock().unwrap().clone();
    assert!(!got.is_empty(), "the create asked for a reschedule");
    assert!(got.iter().all(|r| *r == Err(SchedError::Reentered(0))), "{got:?}");
    // The outer call completed, and CPU 0 is free for the next call.
    assert_eq!(SCHED.reschedule(0, T, |_| {}).unwrap().next, Some((a, 7)));
    SCHED.check_invariants().unwrap();
}

#[test]
fn a_switch_hands_back_the_payload_and_reports_an_exit() {
    let s: Box<Scheduler<Payloads, 1, 8, 8>> = Box::new(Scheduler::new(Payloads, Features::DEFAULT, 250));
    s.init_with(|t| t.init_flat(1)).unwrap();
    s.cpu_up(0, T).unwrap();
    let a = s.create(0, T, TaskParams::default(), 11).unwrap();
    let r = s.reschedule(0, T, |_| {}).unwrap();
    assert_eq!((r.next, r.again), (Some((a, 11)), false));
    assert_eq!(s.current(0), Ok(Some((a, 11))));
    assert_eq!(s.payload(a), Ok(11));
    s.exit(0, 2 * T, a).unwrap();
    let mut seen = Vec::new();
    let r = s.reschedule(0, 2 * T, |sw| seen.push(*sw)).unwrap();
    assert_eq!(r.next, None);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].prev, Some((a, TaskState::Exiting, 11)));
    assert_eq!(seen[0].exited, Some((a, 11)), "reported gone, once");
    assert_eq!(s.payload(a), Err(SchedError::StaleTask(a)), "gone once the switch finished");
    // A task that is not running is gone at once: exit says so.
    let b = s.create(0, 3 * T, TaskParams::default(), 12).unwrap();
    let c = s.create(0, 3 * T, TaskParams::default(), 13).unwrap();
    let run = s.reschedule(0, 3 * T, |_| {}).unwrap().next.unwrap().0;
    let queued = if run == b { c } else { b };
    assert_eq!(s.exit(0, 4 * T, queued), Ok(true));
    assert_eq!(s.exit(0, 4 * T, run), Ok(false), "running: it leaves with its switch");
}

#[test]
fn an_exit_between_pick_and_finish_is_reported_by_finish() {
    let s: Box<Scheduler<Payloads, 2, 8, 8>> = Box::new(Scheduler::new(Payloads, Features::DEFAULT, 250));
    s.init_with(|t| t.init_flat(2)).unwrap();
    s.cpu_up(0, T).unwrap();
    s.cpu_up(1, T).unwrap();
    let here = TaskParams { affinity: CpuMask::single(0), ..TaskParams::default() };
    let a = s.create(0, T, here, 21).unwrap();
    s.reschedule(0, T, |_| {}).unwrap();
    // CPU 0 switches away from `a` (it yields to nothing: idle after it blocks)...
    s.block(0, 2 * T, a).unwrap();
    let sw = s.pick(0, 2 * T).unwrap();
    assert_eq!(sw.prev, Some((a, TaskState::Blocked, 21)));
    assert_eq!(s.pick(0, 2 * T).map(|_| ()), Err(SchedError::SwitchPending(0)), "finish first");
    assert_eq!(s.reschedule(0, 2 * T, |_| {}).map(|_| ()), Err(SchedError::SwitchPending(0)));
    // ...and before it finishes, CPU 1 ends the task.
    assert_eq!(s.exit(1, 2 * T, a), Ok(false));
    assert_eq!(s.finish(0, 2 * T), Ok(Some((a, 21))), "the switch that ends it reports it");
    assert_eq!(s.payload(a), Err(SchedError::StaleTask(a)));
    s.check_invariants().unwrap();
}

/// A platform that names each event's task by its payload from inside the callback, as a
/// tracing port does.
struct Names {
    seen: Mutex<Vec<(TaskId, Result<u32, SchedError>)>>,
}

impl Platform for Names {
    type Payload = u32;
    fn resched_cpu(&self, _cpu: usize) {}
    fn event(&self, e: &Event) {
        if let EventKind::NewTask { task } | EventKind::Waking { task, .. } = e.kind {
            self.seen.lock().unwrap().push((task, NAMED.payload(task)));
        }
    }
}

static NAMED: Scheduler<Names, 2, 8, 8> =
    Scheduler::new(Names { seen: Mutex::new(Vec::new()) }, Features::DEFAULT, 250);

#[test]
fn a_callback_may_read_a_payload() {
    NAMED.init_with(|t| t.init_flat(2)).unwrap();
    NAMED.cpu_up(0, T).unwrap();
    NAMED.cpu_up(1, T).unwrap();
    let a = NAMED.create(0, T, TaskParams::default(), 5).unwrap();
    let cpu = NAMED.task_cpu(a).unwrap();
    NAMED.reschedule(cpu, T, |_| {}).unwrap();
    NAMED.block(cpu, 2 * T, a).unwrap();
    NAMED.reschedule(cpu, 2 * T, |_| {}).unwrap();
    NAMED.wake(0, 3 * T, a).unwrap();
    let seen = NAMED.platform().seen.lock().unwrap().clone();
    assert_eq!(seen, [(a, Ok(5)), (a, Ok(5))], "NewTask, then Waking");
}

struct Payloads;
impl Platform for Payloads {
    type Payload = u32;
    fn resched_cpu(&self, _cpu: usize) {}
}

/// Two threads play two CPUs: one creates tasks as fast as it can, the other reschedules
/// as fast as it can and ends each task it picks. Every pick carries the payload its task was
/// created with, however soon after `create` it comes: there is no map for the port to
/// publish, so nothing to race with.
#[test]
fn a_task_picked_at_once_on_another_cpu_has_its_payload() {
    static M: Scheduler<Payloads, 2, 64, 64> = Scheduler::new(Payloads, Features::DEFAULT, 250);
    static NOW: AtomicU64 = AtomicU64::new(1);
    static DONE: AtomicBool = AtomicBool::new(false);
    let now = || NOW.fetch_add(1_000, SeqCst);
    M.init_with(|t| t.init_flat(2)).unwrap();
    M.cpu_up(0, now()).unwrap();
    M.cpu_up(1, now()).unwrap();
    let picker = std::thread::spawn(move || {
        let mut picked = Vec::new();
        while !DONE.load(SeqCst) || M.nr_tasks() > 0 {
            if let Ok(Resched { next: Some((id, payload)), .. }) = M.reschedule(1, now(), |_| {}) {
                picked.push((id, payload));
                M.exit(1, now(), id).unwrap();
            }
        }
        picked
    });
    let pinned = TaskParams { affinity: CpuMask::single(1), ..TaskParams::default() };
    let mut created = HashMap::new();
    for payload in 1..=3_000u32 {
        match M.create(0, now(), pinned, payload) {
            Ok(id) => {
                created.insert(id, payload);
            }
            Err(SchedError::TaskTableFull | SchedError::RunQueueFull) => std::thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
    DONE.store(true, SeqCst);
    let picked = picker.join().unwrap();
    assert!(picked.len() > 100, "picked {}", picked.len());
    assert_eq!(picked.len(), created.len(), "every task created was picked once");
    for (id, payload) in picked {
        assert_eq!(created.get(&id), Some(&payload), "{id:?}");
    }
    M.check_invariants().unwrap();
}

/// PORTING.md states the figures it quotes from the code: the pass cap and the worked
/// ports' lengths.
#[test]
fn porting_md_states_the_code_s_figures() {
    // (Words as a reader sees them: line breaks are spaces.)
    let text = include_str!("../../../PORTING.md").split_whitespace().collect::<Vec<_>>().join(" ");
    let passes = sched_core::port::MAX_PASSES;
    assert!(text.contains(&format!("`MAX_PASSES` ({passes})")), "MAX_PASSES");
    assert!(text.contains(&format!("`MAX_PASSES` = {passes}")), "MAX_PASSES in the rules table");
    let toy = include_str!("../../examples/toy_port.rs").lines().count();
    assert!(text.contains(&format!("`core/examples/toy_port.rs` ({toy} lines)")), "toy port: {toy} lines");
    let threads = include_str!("../../examples/threads_port.rs").lines().count();
    let stated = format!("`core/examples/threads_port.rs` ({threads} lines)");
    assert!(text.contains(&stated), "threads port: {threads} lines");
    let port_files = [
        ("main.rs", include_str!("../../../kernel-shim/src/main.rs")),
        ("sched/porting.rs", include_str!("../../../kernel-shim/src/sched/porting.rs")),
        ("sched/mod.rs", include_str!("../../../kernel-shim/src/sched/mod.rs")),
        ("arch/mod.rs", include_str!("../../../kernel-shim/src/arch/mod.rs")),
        ("arch/aarch64/mod.rs", include_str!("../../../kernel-shim/src/arch/aarch64/mod.rs")),
        ("arch/riscv64/mod.rs", include_str!("../../../kernel-shim/src/arch/riscv64/mod.rs")),
        ("arch/cortex_m/mod.rs", include_str!("../../../kernel-shim/src/arch/cortex_m/mod.rs")),
    ];
    for (name, src) in port_files {
        let n = src.lines().count();
        let stated = [format!("`{name}` ({n} lines"), format!("`{name}` ({n}\nlines")];
        let stated =
            stated.iter().any(|s| text.contains(&s.split_whitespace().collect::<Vec<_>>().join(" ")));
        assert!(stated, "PORTING.md: kernel {name}, {n} lines");
    }
}

/// A finish with no pick before it, and a tick rate `init` would refuse, are refused at
/// once, and nothing changes.
#[test]
fn finish_without_pick_and_a_refused_hz_change_nothing() {
    let s: Box<Scheduler<Payloads, 1, 8, 8>> = Box::new(Scheduler::new(Payloads, Features::DEFAULT, 250));
    let too_fast = sched_core::smp::MAX_HZ + 1;
    assert_eq!(s.set_hz(too_fast), Err(sched_core::InitError::Hz(too_fast)));
    assert_eq!(s.hz(), 250, "a refused rate leaves the old one");
    s.set_hz(sched_core::smp::MAX_HZ).unwrap();
    s.set_hz(250).unwrap();
    s.init_with(|t| t.init_flat(1)).unwrap();
    s.cpu_up(0, T).unwrap();
    assert_eq!(s.finish(0, T), Err(SchedError::NoSwitchPicked(0)));
    let a = s.create(0, T, TaskParams::default(), 3).unwrap();
    assert_eq!(s.finish(0, T), Err(SchedError::NoSwitchPicked(0)), "still none picked");
    assert_eq!(s.pick(0, T).unwrap().next, Some((a, 3)));
    assert_eq!(s.finish(0, T), Ok(None));
    assert_eq!(s.finish(0, T), Err(SchedError::NoSwitchPicked(0)), "one finish per pick");
    assert_eq!(s.current(0), Ok(Some((a, 3))));
    s.check_invariants().unwrap();
}

/// The kernel hosts the core as any port does: with sched-core built without its
/// `internals` (and so without `testing`) on every target, so its build shows it reaches
/// the core only through `port::Scheduler`.
#[test]
fn the_kernel_builds_the_core_without_its_internals() {
    let manifest = include_str!("../../../kernel-shim/Cargo.toml");
    let deps: Vec<&str> = manifest.lines().filter(|l| l.starts_with("sched-core")).collect();
    assert!(!deps.is_empty(), "kernel-shim/Cargo.toml names sched-core");
    for d in deps {
        assert!(!d.contains("internals") && !d.contains("testing"), "{d}");
    }
}

/// The front page's example is the crate README's, which runs as a doctest, and stays within
/// the front page's 20 lines.
#[test]
fn the_front_page_s_example_is_the_crate_readme_s() {
    let example = |md: &'static str| md.split("```rust\n").nth(1).and_then(|s| s.split("```").next());
    let front = example(include_str!("../../../README.md")).expect("a rust block in README.md");
    assert_eq!(Some(front), example(include_str!("../../README.md")), "README.md and core/README.md");
    assert!(front.lines().count() <= 20, "{} lines", front.lines().count());
}
