//! rt-app's runs on Linux read into the same [`Activation`]s the simulator and the kernel
//! report, so that one definition ([`sched_workload::figures`]) makes every platform's
//! figures.
//!
//! rt-app 1.0 logs a line per phase iteration and thread (`idx perf run period start end
//! rel_st slack c_duration c_period wu_lat`, µs, start and end on the monotonic clock that
//! ftrace's `mono` clock also reads). What its log lacks comes from the trace:
//! - which phase: the task's phases in order, each its `loop` times (the log's order);
//! - the wake-to-run latency of an iteration without a timer sleep: from the thread's last
//!   `sched_waking` in the iteration to its next switch-in (rt-app's `wu_lat`, from the
//!   timer's deadline, where the iteration's last blocking event is its phase's only timer:
//!   rt-app sums `wu_lat` over an iteration's timers);
//! - the CPU an iteration ended on, the threads' CPU time and the run's length.

use std::collections::HashMap;

use sched_workload::figures::{per_task, TaskFigures};
use sched_workload::interp::Activation;
use sched_workload::Event as ProgramEvent;
use sched_workload::ProgramDef;

use super::ftrace::{self, Event, Line};
use super::Run;

/// What one rt-app run on Linux measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// rt-app's figures per task, in the program's order.
    pub tasks: Vec<TaskFigures>,
    /// From the first thread's creation to the last thread's last switch-out (ns).
    pub run_ns: u64,
    /// Migrations of the workload's threads (`sched_migrate_task`).
    pub migrations: u64,
}

/// One log line: (run, start, end, slack, wu_lat), µs.
fn log_line(l: &str) -> Option<[i64; 5]> {
    let f: Vec<i64> = l.split_whitespace().map(|w| w.parse().ok()).collect::<Option<_>>()?;
    (f.len() >= 11).then(|| [f[2], f[4], f[5], f[7], f[10]])
}

/// rt-app's thread creations, in order (its thread index): the tasks created as copies of
/// the rt-app process (a new task's name, recorded in the event, is its parent's), each with
/// the event's line.
fn creations(lines: &[Line]) -> Vec<&Line> {
    lines.iter().filter(|l| matches!(&l.event, Event::WakeupNew { comm, .. } if comm == "rt-app")).collect()
}

/// Whether the phase's last blocking event is its one timer: then rt-app's `wu_lat` (from the
/// timer's deadline) is the iteration's wake-to-run latency. (rt-app sums `wu_lat` over every
/// timer of an iteration, where the kernel and the simulator measure the last wake-up.)
fn timer_blocks_last(events: &[ProgramEvent]) -> bool {
    let timers = events.iter().filter(|e| matches!(e, ProgramEvent::Timer { .. })).count();
    let blocking = |e: &ProgramEvent| {
        matches!(
            e,
            ProgramEvent::Sleep { .. }
                | ProgramEvent::Barrier(_)
                | ProgramEvent::Lock(_)
                | ProgramEvent::Wait { .. }
                | ProgramEvent::Sync { .. }
                | ProgramEvent::Suspend(_)
        )
    };
    let timer = events.iter().rposition(|e| matches!(e, ProgramEvent::Timer { .. }));
    timers == 1 && timer > events.iter().rposition(blocking)
}

/// The wake-to-run latency of an iteration `start..=end` from the thread's history: from its
/// last wake-up in the iteration to its next switch-in within it (0 if the wake-up found it
/// still on its CPU); `None` if it was not woken.
fn woken_latency(h: &History, start: u64, end: u64) -> Option<u64> {
    // (Both lists are in time order: binary searches keep a long run linear.)
    let w = *h.wakings[..h.wakings.partition_point(|&w| w <= end)].last().filter(|&&w| w > start)?;
    let next = h.on.partition_point(|(from, _, _)| *from < w);
    if next > 0 && h.on[next - 1].1 >= w {
        return Some(0);
    }
    let on = h.on.get(next).filter(|(from, _, _)| *from <= end)?;
    Some(on.0.saturating_sub(w))
}

/// Which phase each log line is: the task's phases in order, each its `loop` times, round
/// and round (prefix sums of the loop counts); a phase that loops until the end takes every
/// line from its first on.
struct PhaseOrder(Vec<u64>);

impl PhaseOrder {
    fn of(t: &sched_workload::TaskDef) -> PhaseOrder {
        let mut sum = 0u64;
        PhaseOrder(
            t.phases
                .iter()
                .map(|p| {
                    sum = match p.loops {
                        sched_workload::PHASE_FOREVER => u64::MAX,
                        n => sum.saturating_add(u64::from(n)),
                    };
                    sum
                })
                .collect(),
        )
    }

    /// The phase of line `k`.
    fn phase(&self, k: u64) -> usize {
        let total = self.0.last().copied().unwrap_or(1).max(1);
        self.0.partition_point(|&end| end <= k % total)
    }
}

/// Per pid: its on-CPU intervals (from, to, cpu), and its wakings.
#[derive(Default)]
struct History {
    on: Vec<(u64, u64, usize)>,
    wakings: Vec<u64>,
}

fn histories(lines: &[Line]) -> HashMap<u32, History> {
    let mut h: HashMap<u32, History> = HashMap::new();
    let mut since: HashMap<usize, (u32, u64)> = HashMap::new();
    for l in lines {
        match &l.event {
            Event::Switch { prev, next, .. } => {
                if let Some((pid, from)) = since.remove(&l.cpu) {
                    if pid == *prev && pid != 0 {
                        h.entry(pid).or_default().on.push((from, l.time, l.cpu));
                    }
                }
                since.insert(l.cpu, (*next, l.time));
            }
            Event::Waking { pid } => h.entry(*pid).or_default().wakings.push(l.time),
            _ => {}
        }
    }
    h
}

/// The figures of one rt-app `run` of `def` on a machine of `cpus` CPUs; `None` (with why)
/// if rt-app failed or its logs do not match the program.
pub fn measure(run: &Run, def: &ProgramDef, cpus: usize) -> Result<Measured, String> {
    if run.status != Some(0) {
        return Err(format!("rt-app exited with {:?}: {}", run.status, run.output.join(" / ")));
    }
    if let Some(why) = &run.trace_problem {
        return Err(why.clone());
    }
    if run.trace.is_empty() {
        return Err("the run's trace is missing".into());
    }
    let lines = ftrace::parse(&run.trace);
    let created = creations(&lines);
    let pids: Vec<u32> = created
        .iter()
        .filter_map(|l| match l.event {
            Event::WakeupNew { pid, .. } => Some(pid),
            _ => None,
        })
        .collect();
    let threads: u32 = def.tasks.iter().map(|t| t.instances).sum();
    if run.logs.len() != threads as usize || pids.len() != threads as usize {
        return Err(format!(
            "{} rt-app logs and {} thread creations in the trace, not one per thread ({threads})",
            run.logs.len(),
            pids.len()
        ));
    }
    let hist = histories(&lines);
    let names: Vec<String> = def.tasks.iter().map(|t| t.name.clone()).collect();
    let mut acts = Vec::new();
    let mut cpu_ns = vec![0u64; def.tasks.len()];
    let mut seen = vec![false; pids.len()];
    for (file, body) in &run.logs {
        // `rt-app-<task>-<idx>.log`
        let bad = || format!("an rt-app log named {file}");
        let stem = file.strip_prefix("rt-app-").and_then(|f| f.strip_suffix(".log")).ok_or_else(bad)?;
        let (task_name, idx) = stem.rsplit_once('-').ok_or_else(bad)?;
        let task = names
            .iter()
            .position(|n| n == task_name)
            .ok_or_else(|| format!("{file}: no task {task_name}"))?;
        let thread: usize = idx.parse().map_err(|_| bad())?;
        match seen.get_mut(thread) {
            Some(s) if !*s => *s = true,
            _ => return Err(format!("{file}: thread {thread} is not one of the {threads} or has two logs")),
        }
        let h = hist.get(&pids[thread]);
        cpu_ns[task] += h.map_or(0, |h| h.on.iter().map(|(a, b, _)| b.saturating_sub(*a)).sum());
        let t = &def.tasks[task];
        let order = PhaseOrder::of(t);
        let us = |v: i64| (v.max(0) as u64).saturating_mul(1000);
        for (k, [run_us, start, end, slack, wu_lat]) in body.iter().filter_map(|l| log_line(l)).enumerate() {
            let phase = order.phase(k as u64);
            let Some(events) = t.phases.get(phase).map(|p| &p.events) else { continue };
            let timer = events.iter().any(|e| matches!(e, ProgramEvent::Timer { .. }));
            let (start, end) = (us(start), us(end));
            let wake = if timer_blocks_last(events) && slack >= 0 {
                Some(us(wu_lat))
            } else {
                h.and_then(|h| woken_latency(h, start, end))
            };
            // The CPU it ended on; unknown (past the 64 a figure shows) if the trace has none.
            let cpu = h
                .and_then(|h| h.on[..h.on.partition_point(|(from, _, _)| *from <= end)].last())
                .map_or(u16::MAX, |(_, _, c)| *c as u16);
            acts.push(Activation {
                thread: thread as u16,
                task: task as u16,
                phase: phase as u16,
                start,
                end,
                run_ns: us(run_us),
                slack_ns: timer.then_some(slack.saturating_mul(1000)),
                wake_latency_ns: wake,
                cpu,
            });
        }
    }
    let first = created.first().map(|l| l.time);
    let last = pids.iter().filter_map(|p| hist.get(p)?.on.last().map(|o| o.1)).max();
    let run_ns = match (first, last) {
        (Some(f), Some(l)) if l > f => l - f,
        _ => return Err("the trace shows no rt-app thread running".into()),
    };
    // Migrations of its threads, and (as the kernel counts them) placements of a new thread
    // on another CPU than its creator's.
    let placements =
        created.iter().filter(|l| matches!(l.event, Event::WakeupNew { cpu, .. } if cpu != l.cpu));
    let migrations =
        lines.iter().filter(|l| matches!(&l.event, Event::Migrate { pid, .. } if pids.contains(pid)));
    let migrations = (placements.count() + migrations.count()) as u64;
    Ok(Measured { tasks: per_task(&names, &acts, &cpu_ns, run_ns, cpus), run_ns, migrations })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One thread, one phase with a timer: a log line that slept (its wu_lat is the wake
    /// latency) and one that missed (no sleep: the trace's waking, none here).
    #[test]
    fn log_lines_become_activations() {
        let def = sched_workload::rtapp::lower(
            r#"{"global": {"duration": 1, "calibration": 100}, "tasks": {"a": {"loop": -1, "phases": {"p": {"runtime": 10, "timer": {"ref": "unique", "period": 100}}}}}}"#,
        )
        .unwrap();
        let trace = [
            "  rt-app-50 [000] d.... 1.000000: sched_wakeup_new: comm=rt-app pid=51 prio=120 target_cpu=001",
            "  <idle>-0 [001] d.... 1.000010: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=a next_pid=51 next_prio=120",
            "  a-51 [001] d.... 1.000100: sched_switch: prev_comm=a prev_pid=51 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120",
        ];
        let run = Run {
            output: vec![],
            logs: vec![(
                "rt-app-a-0.log".into(),
                vec![
                    "#idx perf run period start end rel_st slack c_duration c_period wu_lat".into(),
                    "   0  10  10  100  1000010  1000110  0  80  10  100  7".into(),
                    "   0  10  150  150  1000110  1000260  100  -50  10  100  0".into(),
                ],
            )],
            trace: trace.iter().map(|s| s.to_string()).collect(),
            status: Some(0),
            trace_problem: None,
        };
        let m = measure(&run, &def, 2).unwrap();
        let a = &m.tasks[0];
        assert_eq!(a.activations, 2);
        assert_eq!((a.slack_us.count, a.misses), (2, 1));
        assert_eq!(a.wake_us.count, 1, "the missed timer did not sleep");
        assert_eq!(a.wake_us.max, 7.0);
        assert_eq!(m.run_ns, 100_000);
        assert_eq!(a.cpu_share_pct, 45.0, "90 µs on CPU over 100 µs of 2 CPUs");
        assert_eq!(a.last_phase_cpus, 0b10);
    }

    /// A wake-up that finds the thread still on its CPU costs nothing; one after the
    /// iteration's end does not count; the phase order wraps round the task's loops, and stops
    /// at a phase that loops until the end.
    #[test]
    fn wake_latency_and_phase_order() {
        let h = History { on: vec![(10, 20, 0), (50, 60, 1)], wakings: vec![15, 40] };
        assert_eq!(woken_latency(&h, 0, 30), Some(0), "woken at 15 while running 10..20");
        assert_eq!(woken_latency(&h, 30, 70), Some(10), "woken at 40, ran at 50");
        assert_eq!(woken_latency(&h, 30, 45), None, "its switch-in came after the iteration");
        let t = sched_workload::TaskDef {
            phases: vec![
                sched_workload::PhaseDef { loops: 2, ..Default::default() },
                sched_workload::PhaseDef { loops: 1, ..Default::default() },
            ],
            ..Default::default()
        };
        let o = PhaseOrder::of(&t);
        assert_eq!((0..7).map(|k| o.phase(k)).collect::<Vec<_>>(), [0, 0, 1, 0, 0, 1, 0]);
        let mut t = t;
        t.phases.insert(
            1,
            sched_workload::PhaseDef { loops: sched_workload::PHASE_FOREVER, ..Default::default() },
        );
        let o = PhaseOrder::of(&t);
        assert_eq!(
            (0..5).map(|k| o.phase(k)).collect::<Vec<_>>(),
            [0, 0, 1, 1, 1],
            "the phase after is never reached"
        );
        assert!(timer_blocks_last(&[
            ProgramEvent::Sleep { us: 1 },
            ProgramEvent::Timer { timer: sched_workload::Timer::Shared(0), period_us: 5, absolute: false }
        ]));
        assert!(!timer_blocks_last(&[
            ProgramEvent::Timer { timer: sched_workload::Timer::Shared(0), period_us: 5, absolute: false },
            ProgramEvent::Barrier(0)
        ]));
        // Two timers: rt-app's `wu_lat` is the sum of both wake-ups, not the last one's.
        let timer = |t| ProgramEvent::Timer {
            timer: sched_workload::Timer::Shared(t),
            period_us: 5,
            absolute: false,
        };
        assert!(!timer_blocks_last(&[
            ProgramEvent::Run { us: 1 },
            timer(0),
            ProgramEvent::Run { us: 1 },
            timer(1)
        ]));
    }
}
