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

/// The spread and one-per-CPU instants (ns after `t0`) and the migrations before the
/// spread, over the events `lines` of a machine with `cpus` CPUs whose workers are the pids
/// `is_worker` accepts.
pub fn instants(lines: &[Line], cpus: usize, workers: usize, is_worker: impl Fn(u32) -> bool) -> Instants {
    let want = workers.min(cpus);
    let t0 = lines.iter().find_map(|l| match &l.event {
        Event::WakeupNew { pid, .. } if is_worker(*pid) => Some(l.time),
        _ => None,
    });
    let mut out = Instants::default();
    let Some(t0) = t0 else { return out };
    // Where each task is queued (None: sleeping), and what each CPU runs.
    let mut queued: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    let mut running: Vec<u32> = vec![0; cpus];
    // The queues follow every event; the instants and migrations count from t0.
    for l in lines {
        let counting = l.time >= t0;
        match &l.event {
            Event::WakeupNew { pid, cpu, .. } => {
                queued.insert(*pid, *cpu);
                out.migrations += u64::from(counting && *cpu != l.cpu && out.spread.is_none());
            }
            Event::Wakeup { pid, cpu } => {
                queued.insert(*pid, *cpu);
            }
            Event::Migrate { pid, to, .. } => {
                if let Some(c) = queued.get_mut(pid) {
                    *c = *to;
                }
                out.migrations += u64::from(counting && out.spread.is_none());
            }
            Event::Waking { .. } => {}
            Event::Switch { prev, prev_runnable, next, .. } => {
                if !prev_runnable {
                    queued.remove(prev);
                }
                if *next != 0 {
                    queued.insert(*next, l.cpu);
                }
                if l.cpu < cpus {
                    running[l.cpu] = *next;
                }
                if !counting {
                    continue;
                }
                let on: Vec<usize> =
                    (0..cpus).filter(|&c| running[c] != 0 && is_worker(running[c])).collect();
                let at = l.time - t0;
                if out.spread.is_none() && on.len() >= want && want > 0 {
                    out.spread = Some(at);
                }
                let alone = on
                    .iter()
                    .filter(|&&c| workers > cpus || queued.values().filter(|&&q| q == c).count() == 1);
                if out.one_per_cpu.is_none() && alone.count() >= want && want > 0 {
                    out.one_per_cpu = Some(at);
                }
            }
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
/// one-per-CPU instants from the first worker's creation (never reached: the run's length);
/// migrations of any task before the spread: `sched_migrate_task` events and fork placements
/// on another CPU than the parent's (Linux sets a new task's CPU without that event; the
/// kernel counts them). `None` if sysbench failed or printed no report.
pub fn sysbench(run: &Run, cpus: usize, threads: usize) -> Option<Figures> {
    if run.status != Some(0) {
        return None;
    }
    let total_ms = after(&run.output, "total time:")? * 1000.0;
    let lines = ftrace::parse(&run.trace);
    // sysbench's workers: the tasks the sysbench process created.
    let workers: std::collections::HashSet<u32> = lines
        .iter()
        .filter_map(|l| match &l.event {
            Event::WakeupNew { pid, .. } if l.by_comm == "sysbench" => Some(*pid),
            _ => None,
        })
        .collect();
    let i = instants(&lines, cpus, threads, |p| workers.contains(&p));
    let ms = |ns: Option<u64>| ns.map_or(total_ms, |ns| ns as f64 / 1e6);
    Some(Figures {
        total_ms,
        avg_ms: after(&run.output, "avg:")?,
        max_ms: after(&run.output, "max:")?,
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
