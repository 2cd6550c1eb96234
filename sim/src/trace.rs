//! Traces of a run: a Perfetto-loadable Chrome JSON file whose `systemTraceEvents` carry
//! ftrace-style `sched_switch` / `sched_waking` lines (one real scheduling track per CPU)
//! plus per-CPU util/load counters, and a self-contained SVG timeline of the same switches.
//!
//! The formats, and what [`crate::trace_check`] checks of them: docs/trace-formats.md. The
//! QEMU runner reuses this writer.

use std::fmt::Write as _;

use sched_core::{TaskId, TaskState};

/// One context switch on one CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switch {
    /// Time (ns).
    pub time: u64,
    /// CPU.
    pub cpu: usize,
    /// Task switched out (None: idle), with its name.
    pub prev: Option<(u32, String)>,
    /// State it was left in (R runnable, S sleeping, X exited).
    pub prev_state: char,
    /// Task switched in (None: idle), with its name.
    pub next: Option<(u32, String)>,
}

/// A recorded trace.
#[derive(Debug, Clone, Default)]
pub struct TraceLog {
    cpus: usize,
    /// Context switches in time order.
    pub switches: Vec<Switch>,
    /// (time, target CPU, pid, name) of wakeups.
    pub wakings: Vec<(u64, usize, u32, String)>,
    /// (time, CPU, util, load) samples.
    pub counters: Vec<(u64, usize, u64, u64)>,
    /// (time, CPU) of balance attempts that found an imbalance and moved nothing (nothing
    /// detachable, all pinned, or an active balance asked for): the A/B picture marks them.
    /// Not part of the Perfetto JSON or the ftrace text.
    pub balance_failures: Vec<(u64, usize)>,
}

fn pid(t: TaskId) -> u32 {
    t.trace_pid()
}

impl TraceLog {
    /// An empty trace for `cpus` CPUs.
    pub fn new(cpus: usize) -> TraceLog {
        TraceLog { cpus, ..TraceLog::default() }
    }

    /// The CPUs it covers.
    pub fn cpus(&self) -> usize {
        self.cpus
    }

    /// Records a switch.
    #[allow(clippy::too_many_arguments)]
    pub fn switch(
        &mut self,
        time: u64,
        cpu: usize,
        prev: Option<TaskId>,
        prev_name: Option<String>,
        next: Option<TaskId>,
        next_name: Option<String>,
        prev_state: Option<Option<TaskState>>,
    ) {
        let state = match prev_state.flatten() {
            None => 'X',
            Some(TaskState::Blocked) => 'S',
            Some(TaskState::Exiting) => 'X',
            Some(_) => 'R',
        };
        let named =
            |t: Option<TaskId>, n: Option<String>| t.map(|t| (pid(t), clean(&n.unwrap_or_default(), pid(t))));
        self.switches.push(Switch {
            time,
            cpu,
            prev: named(prev, prev_name),
            prev_state: if prev.is_none() { 'R' } else { state },
            next: named(next, next_name),
        });
    }

    /// Records a wakeup of `t` onto `cpu`.
    pub fn waking(&mut self, time: u64, cpu: usize, t: TaskId, name: &str) {
        self.wakings.push((time, cpu, pid(t), clean(name, pid(t))));
    }

    /// Records a failed balance attempt by `cpu`.
    pub fn balance_failed(&mut self, time: u64, cpu: usize) {
        self.balance_failures.push((time, cpu));
    }

    /// Records a util/load sample of a CPU.
    pub fn counter(&mut self, time: u64, cpu: usize, util: u64, load: u64) {
        self.counters.push((time, cpu, util, load));
    }

    /// The ftrace text: lines sorted by time (stable), idle is pid 0 `swapper/N`.
    pub fn ftrace_text(&self) -> String {
        let mut lines: Vec<(u64, usize, String)> = Vec::new();
        for s in &self.switches {
            let (pc, pp) = match &s.prev {
                Some((p, n)) => (n.clone(), *p),
                None => (format!("swapper/{}", s.cpu), 0),
            };
            let (nc, np) = match &s.next {
                Some((p, n)) => (n.clone(), *p),
                None => (format!("swapper/{}", s.cpu), 0),
            };
            let line = format!(
                "{pc}-{pp} [{cpu:03}] d..2 {ts}: sched_switch: prev_comm={pc} prev_pid={pp} prev_prio=120 prev_state={st} ==> next_comm={nc} next_pid={np} next_prio=120",
                cpu = s.cpu,
                ts = ts(s.time),
                st = s.prev_state
            );
            lines.push((s.time, s.cpu, line));
        }
        for (t, cpu, p, n) in &self.wakings {
            let line = format!(
                "{n}-{p} [{cpu:03}] d..2 {ts}: sched_waking: comm={n} pid={p} prio=120 target_cpu={cpu:03}",
                ts = ts(*t)
            );
            lines.push((*t, *cpu, line));
        }
        for (t, cpu, util, load) in &self.counters {
            for (name, v) in [("util", util), ("load", load)] {
                let line = format!(
                    "<idle>-0 [{cpu:03}] .... {ts}: tracing_mark_write: C|0|cpu{cpu}_{name}|{v}",
                    ts = ts(*t)
                );
                lines.push((*t, *cpu, line));
            }
        }
        lines.sort_by_key(|(t, _, _)| *t);
        let mut out = String::from("# tracer: nop\n");
        for (_, _, l) in lines {
            out.push_str(&l);
            out.push('\n');
        }
        out
    }

    /// The Chrome JSON document Perfetto opens (`displayTimeUnit`, `systemTraceEvents`,
    /// `traceEvents` with process/thread names, `otherData`).
    pub fn chrome_json(&self, other: serde_json::Value) -> String {
        let mut events = vec![serde_json::json!({
            "name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": { "name": "fairsched" }
        })];
        for cpu in 0..self.cpus {
            events.push(serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": 0, "tid": cpu, "args": { "name": format!("CPU {cpu}") }
            }));
        }
        serde_json::to_string(&serde_json::json!({
            "displayTimeUnit": "ms",
            "systemTraceEvents": self.ftrace_text(),
            "traceEvents": events,
            "otherData": other,
        }))
        .unwrap_or_default()
    }

    /// A self-contained SVG: one lane per CPU, a coloured bar per task run, between `from`
    /// and `to` ns.
    pub fn svg(&self, title: &str, from: u64, to: u64) -> String {
        let width = 1200.0;
        let lane = 22.0;
        let left = 60.0;
        let top = 40.0;
        let span = (to.saturating_sub(from)).max(1) as f64;
        let x = |t: u64| left + (t.saturating_sub(from)) as f64 / span * (width - left - 10.0);
        let height = top + lane * self.cpus as f64 + 40.0;
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="11"><rect width="100%" height="100%" fill="white"/><text x="{left}" y="20" font-size="14">{}</text>"#,
            escape(title)
        );
        // Runs: from a switch-in to the next switch on that CPU.
        let mut open: Vec<Option<(u64, u32, String)>> = vec![None; self.cpus];
        let mut bars: Vec<(usize, u64, u64, u32, String)> = Vec::new();
        for sw in &self.switches {
            if let Some((start, p, n)) = open[sw.cpu].take() {
                bars.push((sw.cpu, start, sw.time, p, n));
            }
            if let Some((p, n)) = &sw.next {
                open[sw.cpu] = Some((sw.time, *p, n.clone()));
            }
        }
        for (cpu, o) in open.into_iter().enumerate() {
            if let Some((start, p, n)) = o {
                bars.push((cpu, start, to, p, n));
            }
        }
        for cpu in 0..self.cpus {
            let y = top + lane * cpu as f64;
            let _ = write!(
                s,
                r#"<text x="4" y="{}">CPU{cpu}</text><line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="gray" stroke-width="0.5"/>"#,
                y + 14.0,
                width - 10.0,
                y + lane,
                y + lane
            );
        }
        for (cpu, a, b, p, n) in bars {
            if b <= from || a >= to {
                continue;
            }
            let (x0, x1) = (x(a.max(from)), x(b.min(to)));
            let y = top + lane * cpu as f64 + 2.0;
            let hue = (p * 47) % 360;
            let _ = write!(
                s,
                r#"<rect x="{x0:.2}" y="{y}" width="{:.2}" height="{}" fill="hsl({hue},60%,60%)"><title>{} pid {p} on CPU{cpu}: {:.3}–{:.3} ms</title></rect>"#,
                (x1 - x0).max(0.5),
                lane - 4.0,
                escape(&n),
                a as f64 / 1e6,
                b as f64 / 1e6
            );
        }
        let _ = write!(
            s,
            r#"<text x="{left}" y="{}">{:.1} ms</text><text x="{}" y="{}" text-anchor="end">{:.1} ms</text></svg>"#,
            height - 12.0,
            from as f64 / 1e6,
            width - 10.0,
            height - 12.0,
            to as f64 / 1e6
        );
        s
    }
}

fn ts(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1_000)
}

/// A comm Perfetto can parse: no spaces or '=', not empty.
fn clean(name: &str, pid: u32) -> String {
    let c: String =
        name.chars().map(|ch| if ch.is_whitespace() || ch == '=' { '_' } else { ch }).take(15).collect();
    if c.is_empty() {
        format!("task{pid}")
    } else {
        c
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ftrace_lines_have_the_tokenizer_shape() {
        let mut t = TraceLog::new(2);
        let a = TaskId::new(3, 0);
        t.switch(1_500_000, 1, None, None, Some(a), Some("worker 0".into()), None);
        t.waking(1_000_000, 1, a, "worker 0");
        t.counter(2_000_000, 0, 512, 1024);
        let text = t.ftrace_text();
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].contains("sched_waking: comm=worker_0 pid=4 prio=120 target_cpu=001"));
        assert!(lines[1]
            .starts_with("swapper/1-0 [001] d..2 0.001500: sched_switch: prev_comm=swapper/1 prev_pid=0"));
        assert!(lines[1].ends_with("next_comm=worker_0 next_pid=4 next_prio=120"));
        assert!(lines[2].contains("tracing_mark_write: C|0|cpu0_util|512"));
        let json: serde_json::Value = serde_json::from_str(&t.chrome_json(serde_json::json!({}))).unwrap();
        assert_eq!(json["displayTimeUnit"], "ms");
        assert!(json["systemTraceEvents"].as_str().unwrap().contains("sched_switch"));
        let svg = t.svg("x", 0, 3_000_000);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>") && svg.contains("<rect"));
    }
}
