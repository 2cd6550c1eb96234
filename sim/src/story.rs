//! Each worker's story in one traced run — where and when it was created, first ran, blocked
//! (at the start barrier), was woken and ran again — so that a QEMU run and a simulated run of
//! the same workload can be read side by side.

use std::fmt::Write as _;

use crate::picture::IsWorker;
use crate::trace::TraceLog;

/// One worker's first steps: (time ns, CPU) of each, if the trace has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Story {
    /// The worker's name in the trace.
    pub name: String,
    /// Created: its first wakeup (`sched_wakeup_new`), onto the CPU placement chose.
    pub created: Option<(u64, usize)>,
    /// First switched in.
    pub first_run: Option<(u64, usize)>,
    /// First switched out asleep (at the start barrier, for a sysbench-like worker).
    pub blocked: Option<(u64, usize)>,
    /// Woken after that, onto the CPU wakeup placement chose.
    pub woken: Option<(u64, usize)>,
    /// First switched in after that wakeup.
    pub ran_again: Option<(u64, usize)>,
}

/// The workers' stories in `log`, in order of creation.
pub fn stories(log: &TraceLog, is_worker: IsWorker) -> Vec<Story> {
    // (time, order, pid, name, event) with wakeups before switches at one instant.
    enum Ev {
        Wake(usize),
        In(usize),
        OutAsleep(usize),
    }
    let mut evs: Vec<(u64, u8, u32, &str, Ev)> = Vec::new();
    for (t, cpu, pid, name) in &log.wakings {
        evs.push((*t, 0, *pid, name, Ev::Wake(*cpu)));
    }
    for s in &log.switches {
        if let Some((pid, name)) = &s.prev {
            if s.prev_state == 'S' {
                evs.push((s.time, 1, *pid, name, Ev::OutAsleep(s.cpu)));
            }
        }
        if let Some((pid, name)) = &s.next {
            evs.push((s.time, 2, *pid, name, Ev::In(s.cpu)));
        }
    }
    evs.sort_by_key(|e| (e.0, e.1));
    let mut order: Vec<u32> = Vec::new();
    let mut by_pid: std::collections::BTreeMap<u32, Story> = std::collections::BTreeMap::new();
    for (t, _, pid, name, ev) in evs {
        if !is_worker(name) {
            continue;
        }
        let s = by_pid.entry(pid).or_insert_with(|| {
            order.push(pid);
            Story { name: name.to_string(), ..Story::default() }
        });
        match ev {
            Ev::Wake(cpu) if s.created.is_none() => s.created = Some((t, cpu)),
            Ev::Wake(cpu) if s.blocked.is_some() && s.woken.is_none() => s.woken = Some((t, cpu)),
            Ev::In(cpu) if s.first_run.is_none() => s.first_run = Some((t, cpu)),
            Ev::In(cpu) if s.woken.is_some() && s.ran_again.is_none() => s.ran_again = Some((t, cpu)),
            Ev::OutAsleep(cpu) if s.first_run.is_some() && s.blocked.is_none() => s.blocked = Some((t, cpu)),
            _ => {}
        }
    }
    order.into_iter().filter_map(|p| by_pid.remove(&p)).collect()
}

/// The stories as a table titled `title`, times in ms from the first worker's creation.
pub fn table(title: &str, stories: &[Story]) -> String {
    let origin = stories.iter().filter_map(|s| s.created.map(|c| c.0)).min().unwrap_or(0);
    let cell = |x: Option<(u64, usize)>| match x {
        Some((t, cpu)) => format!("{:>8.3} CPU{cpu:<2}", t.saturating_sub(origin) as f64 / 1e6),
        None => format!("{:>14}", "—"),
    };
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = writeln!(
        out,
        "{:<10} {:>14} {:>14} {:>14} {:>14} {:>14}",
        "worker", "created", "first run", "blocked", "woken", "ran again"
    );
    for s in stories {
        let _ = writeln!(
            out,
            "{:<10} {} {} {} {} {}",
            s.name,
            cell(s.created),
            cell(s.first_run),
            cell(s.blocked),
            cell(s.woken),
            cell(s.ran_again)
        );
    }
    let _ = writeln!(out, "{}", summary(stories));
    out
}

/// In one line: how many workers first ran before the next was created, and how wakeups
/// and creations shared CPUs (CPUs chosen for two workers or more).
pub fn summary(stories: &[Story]) -> String {
    let ran_before_next = stories
        .windows(2)
        .filter(|w| match (w[0].first_run, w[1].created) {
            (Some((r, _)), Some((c, _))) => r <= c,
            _ => false,
        })
        .count();
    let shared = |cpus: Vec<usize>| {
        let mut counts = std::collections::BTreeMap::new();
        for c in cpus {
            *counts.entry(c).or_insert(0u32) += 1;
        }
        counts.into_iter().filter(|&(_, n)| n > 1).map(|(c, n)| format!("CPU{c}×{n}")).collect::<Vec<_>>()
    };
    let created = shared(stories.iter().filter_map(|s| s.created.map(|c| c.1)).collect());
    let woken = shared(stories.iter().filter_map(|s| s.woken.map(|c| c.1)).collect());
    let list = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.join(" ") };
    format!(
        "{} of {} workers ran before the next was created; created onto one CPU with another: {}; woken onto one CPU with another: {}",
        ran_before_next,
        stories.len().saturating_sub(1),
        list(&created),
        list(&woken)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sched_core::{TaskId, TaskState};

    #[test]
    fn a_worker_story_reads_creation_run_block_wake_and_run() {
        let mut l = TraceLog::new(2);
        let id = |p| Some(TaskId::new(p, 0));
        let name = |n: &str| Some(n.to_string());
        l.waking(1_000_000, 1, TaskId::new(2, 0), "worker0");
        l.switch(1_100_000, 1, None, None, id(2), name("worker0"), None);
        l.switch(1_300_000, 1, id(2), name("worker0"), None, None, Some(Some(TaskState::Blocked)));
        l.waking(1_500_000, 1, TaskId::new(3, 0), "worker1");
        l.waking(2_000_000, 0, TaskId::new(2, 0), "worker0");
        l.switch(2_050_000, 0, None, None, id(2), name("worker0"), None);
        l.waking(2_100_000, 0, TaskId::new(3, 0), "main");
        let s = stories(&l, |n| n.starts_with("worker"));
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].created, Some((1_000_000, 1)));
        assert_eq!(s[0].first_run, Some((1_100_000, 1)));
        assert_eq!(s[0].blocked, Some((1_300_000, 1)));
        assert_eq!(s[0].woken, Some((2_000_000, 0)));
        assert_eq!(s[0].ran_again, Some((2_050_000, 0)));
        assert_eq!((s[1].created, s[1].first_run), (Some((1_500_000, 1)), None));
        let t = table("t", &s);
        assert!(t.contains("worker0       0.000 CPU1"), "{t}");
        assert!(t.contains("1 of 1 workers ran before the next was created"), "{t}");
        assert!(t.contains("created onto one CPU with another: CPU1×2"), "{t}");
    }
}
