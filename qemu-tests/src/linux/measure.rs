//! Linux's runs measured with the definitions of the kernel's report
//! (docs/seed-experiment.md, "The two instants"; docs/workloads.md for rt-app's figures),
//! from its ftrace events and its programs' own output.

use super::ftrace::{self, Event, Line};
use super::Run;
use crate::sysbench_figures::Figures;

/// The number after `key` on the first line of `lines` holding it (`0.8733s` reads 0.8733).
fn after(lines: &[String], key: &str) -> Option<f64> {
    let l = lines.iter().find(|l| l.contains(key))?;
    let rest = &l[l.find(key)? + key.len()..];
    let n: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    n.parse().ok()
}

/// The spread and one-per-CPU instants (ns after `t0`, the first worker's creation) and the
/// migrations before the spread, over the events `lines` of a machine with `cpus` CPUs whose
/// workers are the pids `is_worker` accepts. Each runqueue's tasks follow every event (a
/// task first seen switched out runnable is queued where it ran); the instants are checked
/// after every event that changes what runs or where. Migrations count `sched_migrate_task`
/// and fork placements on another CPU than the parent's (Linux sets a new task's CPU without
/// that event; the kernel counts them).
pub fn instants(lines: &[Line], cpus: usize, workers: usize, is_worker: impl Fn(u32) -> bool) -> Instants {
    let want = workers.min(cpus);
    let t0 = lines.iter().find_map(|l| match &l.event {
        Event::WakeupNew { pid, .. } if is_worker(*pid) => Some(l.time),
        _ => None,
    });
    let mut out = Instants::default();
    let Some(t0) = t0 else { return out };
    let mut queued: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    let mut running: Vec<u32> = vec![0; cpus];
    for l in lines {
        let counting = l.time >= t0 && out.spread.is_none();
        match &l.event {
            Event::WakeupNew { pid, cpu, .. } => {
                queued.insert(*pid, *cpu);
                out.migrations += u64::from(counting && *cpu != l.cpu);
            }
            Event::Wakeup { pid, cpu } => {
                queued.insert(*pid, *cpu);
            }
            Event::Migrate { pid, to, .. } => {
                if let Some(c) = queued.get_mut(pid) {
                    *c = *to;
                }
                out.migrations += u64::from(counting);
            }
            Event::Waking { .. } => continue,
            Event::Switch { prev, prev_runnable, next, .. } => {
                match (*prev, *prev_runnable) {
                    (0, _) => {}
                    (p, true) => {
                        queued.insert(p, l.cpu);
                    }
                    (p, false) => {
                        queued.remove(&p);
                    }
                }
                if *next != 0 {
                    queued.insert(*next, l.cpu);
                }
                if let Some(r) = running.get_mut(l.cpu) {
                    *r = *next;
                }
            }
        }
        if l.time < t0 || want == 0 {
            continue;
        }
        let at = l.time - t0;
        let on: Vec<usize> = (0..cpus).filter(|&c| running[c] != 0 && is_worker(running[c])).collect();
        if out.spread.is_none() && on.len() >= want {
            out.spread = Some(at);
        }
        // With more workers than CPUs none can be alone: the one-per-CPU instant is the spread's.
        let alone =
            on.iter().filter(|&&c| workers > cpus || queued.values().filter(|&&q| q == c).count() == 1);
        if out.one_per_cpu.is_none() && alone.count() >= want {
            out.one_per_cpu = Some(at);
        }
    }
    out
}

/// The instants of [`instants`] (ns after the first worker's creation).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Instants {
    /// The spread instant, if reached.
    pub spread: Option<u64>,
    /// The one-per-CPU instant, if reached.
    pub one_per_cpu: Option<u64>,
    /// Migrations before the spread instant (all of them, if never reached).
    pub migrations: u64,
}

/// A sysbench run's figures on `cpus` CPUs with `threads` workers, as the kernel's report
/// gives them: sysbench's own total time and per-request average and maximum; the spread and
/// one-per-CPU instants and the migrations before the spread ([`instants`]; an instant never
/// reached counts as the whole run). `Err` says why the run cannot be measured: sysbench
/// failed, its report or the trace is missing, or the trace does not show every worker.
pub fn sysbench(run: &Run, cpus: usize, threads: usize) -> Result<Figures, String> {
    if run.status != Some(0) {
        return Err(format!("sysbench exited with {:?}: {:?}", run.status, run.output.last()));
    }
    let total_ms = after(&run.output, "total time:").ok_or("sysbench printed no total time")? * 1000.0;
    if let Some(why) = &run.trace_problem {
        return Err(why.clone());
    }
    if run.trace.is_empty() {
        return Err("the run's trace is missing".into());
    }
    let lines = ftrace::parse(&run.trace);
    // sysbench's workers: the tasks created as copies of the sysbench process (a new task's
    // name, recorded in the event, is its parent's); its main task was created by the shell.
    let workers: std::collections::HashSet<u32> = lines
        .iter()
        .filter_map(|l| match &l.event {
            Event::WakeupNew { pid, comm, .. } if comm == "sysbench" => Some(*pid),
            _ => None,
        })
        .collect();
    if workers.len() != threads {
        return Err(format!("the trace shows {} sysbench workers created, not {threads}", workers.len()));
    }
    let i = instants(&lines, cpus, threads, |p| workers.contains(&p));
    let ms = |ns: Option<u64>| ns.map_or(total_ms, |ns| ns as f64 / 1e6);
    Ok(Figures {
        total_ms,
        avg_ms: after(&run.output, "avg:").ok_or("sysbench printed no average")?,
        max_ms: after(&run.output, "max:").ok_or("sysbench printed no maximum")?,
        spread_ms: ms(i.spread),
        one_per_cpu_ms: ms(i.one_per_cpu),
        migrations: i.migrations as f64,
        failed: f64::NAN,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(t: u64, cpu: usize, by: &str, event: Event) -> Line {
        Line { time: t, cpu, by_comm: by.into(), by_pid: 1, event }
    }

    fn switch(t: u64, cpu: usize, prev: u32, runnable: bool, next: u32) -> Line {
        line(t, cpu, "x", Event::Switch { prev, prev_runnable: runnable, next, next_comm: String::new() })
    }

    /// Two workers on two CPUs: created on CPU 0 (one placed on CPU 1, a placement
    /// migration), both running at 30 (spread), the second alone only once the main task
    /// (pid 1) sleeps at 50 (one-per-CPU).
    #[test]
    fn spread_and_one_per_cpu_follow_the_definitions() {
        let lines = vec![
            switch(0, 1, 0, true, 1),
            line(10, 1, "sysbench", Event::WakeupNew { pid: 10, comm: "s".into(), cpu: 0 }),
            line(20, 1, "sysbench", Event::WakeupNew { pid: 11, comm: "s".into(), cpu: 1 }),
            switch(25, 0, 0, true, 10),
            switch(30, 1, 1, true, 11),
            switch(40, 0, 10, true, 10),
            switch(50, 1, 11, true, 11),
            line(50, 1, "x", Event::Migrate { pid: 1, from: 1, to: 0 }),
            switch(55, 0, 10, true, 10),
        ];
        let i = instants(&lines, 2, 2, |p| p >= 10);
        assert_eq!(i.spread, Some(20), "both CPUs run a worker from 30, 20 after the first creation");
        // At 30 the main task is queued on CPU 1 beside worker 11; the migration takes it to
        // CPU 0 beside worker 10 at 50, so nobody is alone until... never here.
        assert_eq!(i.one_per_cpu, None);
        assert_eq!(
            i.migrations, 1,
            "the placement on CPU 1 from CPU 1 is none; the wakeup_new on CPU 0 from CPU 1 is one"
        );
        let mut alone = lines.clone();
        // The main task runs on CPU 0 a moment, then sleeps.
        alone.push(switch(58, 0, 10, true, 1));
        alone.push(switch(60, 0, 1, false, 10));
        let i = instants(&alone, 2, 2, |p| p >= 10);
        assert_eq!(i.one_per_cpu, Some(50), "the main task slept at 60");
    }

    #[test]
    fn sysbench_report_numbers_are_read() {
        let out: Vec<String> = [
            "    total time:                          0.8733s",
            "         avg:                                    6.96",
            "         max:                                  200.50",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(after(&out, "total time:"), Some(0.8733));
        assert_eq!(after(&out, "avg:"), Some(6.96));
        assert_eq!(after(&out, "max:"), Some(200.5));
    }
}
