//! ftrace's text output of the sched events, read into typed events: `sched_switch`,
//! `sched_wakeup_new`, `sched_waking`, `sched_wakeup` and `sched_migrate_task` (the format is
//! the tracepoints' `print fmt`, which Linux has kept stable since 4.x; an optional
//! `prev_state` suffix `+` means preempted).

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `prev` left the CPU (still runnable if `prev_runnable`), `next` runs.
    Switch { prev: u32, prev_runnable: bool, next: u32, next_comm: String },
    /// A new task was placed on `cpu`.
    WakeupNew { pid: u32, comm: String, cpu: usize },
    /// Somebody started waking `pid` (the wake-up's first instant).
    Waking { pid: u32 },
    /// `pid` was queued on `cpu` by a wake-up.
    Wakeup { pid: u32, cpu: usize },
    /// `pid` moved from `from` to `to`.
    Migrate { pid: u32, from: usize, to: usize },
}

/// One trace line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// When (ns of the guest's monotonic clock; ftrace prints µs).
    pub time: u64,
    /// The CPU it happened on.
    pub cpu: usize,
    /// The task that was running there (`comm-pid` before the CPU; the emitter).
    pub by_comm: String,
    /// Its pid.
    pub by_pid: u32,
    /// The event.
    pub event: Event,
}

/// The value after `key=` in `fields` (up to the next space), `key` starting a word.
fn field<'a>(fields: &'a str, key: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(i) = fields[from..].find(key) {
        let at = from + i;
        let starts_word = at == 0 || fields.as_bytes()[at - 1] == b' ';
        let rest = &fields[at + key.len()..];
        if starts_word && rest.starts_with('=') {
            return rest[1..].split(' ').next();
        }
        from = at + key.len();
    }
    None
}

/// A command name: everything between `key=` and the next ` pid=`-like key (names may hold
/// spaces).
fn comm<'a>(fields: &'a str, key: &str, next: &str) -> &'a str {
    let Some(i) = fields.find(&format!("{key}=")) else { return "" };
    let rest = &fields[i + key.len() + 1..];
    rest.find(&format!(" {next}=")).map_or(rest, |end| &rest[..end])
}

/// Reads one line of ftrace's `trace` file; `None` for a comment or another event.
pub fn parse_line(line: &str) -> Option<Line> {
    // `<comm>-<pid> [<cpu>] <flags> <secs>.<usecs>: <event>: <fields>`
    let open = line.find(" [")?;
    let (who, rest) = line.split_at(open);
    let (by_comm, by_pid) = who.trim().rsplit_once('-')?;
    let close = rest.find(']')?;
    let cpu = rest[2..close].trim().parse().ok()?;
    let rest = &rest[close + 1..];
    let colon = rest.find(": ")?;
    let stamp = rest[..colon].split_whitespace().last()?;
    let (secs, micros) = stamp.split_once('.')?;
    let time = secs.parse::<u64>().ok()? * 1_000_000_000 + micros.parse::<u64>().ok()? * 1_000;
    let (name, fields) = rest[colon + 2..].split_once(": ")?;
    let num = |k: &str| field(fields, k)?.parse::<u32>().ok();
    let event = match name {
        "sched_switch" => Event::Switch {
            prev: num("prev_pid")?,
            prev_runnable: field(fields, "prev_state")?.starts_with('R'),
            next: num("next_pid")?,
            next_comm: comm(fields, "next_comm", "next_pid").to_string(),
        },
        "sched_wakeup_new" => Event::WakeupNew {
            pid: num("pid")?,
            comm: comm(fields, "comm", "pid").to_string(),
            cpu: num("target_cpu")? as usize,
        },
        "sched_waking" => Event::Waking { pid: num("pid")? },
        "sched_wakeup" => Event::Wakeup { pid: num("pid")?, cpu: num("target_cpu")? as usize },
        "sched_migrate_task" => Event::Migrate {
            pid: num("pid")?,
            from: num("orig_cpu")? as usize,
            to: num("dest_cpu")? as usize,
        },
        _ => return None,
    };
    Some(Line { time, cpu, by_comm: by_comm.trim().to_string(), by_pid: by_pid.parse().ok()?, event })
}

/// Every sched event of a trace, in time order (ftrace merges its per-CPU buffers in order).
pub fn parse(lines: &[String]) -> Vec<Line> {
    lines.iter().filter_map(|l| parse_line(l)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as Linux 6.1 prints them, one per event kind.
    #[test]
    fn reads_each_event_kind() {
        let l = parse_line("          <idle>-0       [001] d..2.     1.234567: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=sysbench next_pid=85 next_prio=120").unwrap();
        assert_eq!((l.time, l.cpu, l.by_pid, l.by_comm.as_str()), (1_234_567_000, 1, 0, "<idle>"));
        assert_eq!(
            l.event,
            Event::Switch { prev: 0, prev_runnable: true, next: 85, next_comm: "sysbench".into() }
        );
        let l = parse_line("        sysbench-80      [000] d..3.    12.000001: sched_wakeup_new: comm=sysbench pid=85 prio=120 target_cpu=002").unwrap();
        assert_eq!((l.by_comm.as_str(), l.by_pid), ("sysbench", 80));
        assert_eq!(l.event, Event::WakeupNew { pid: 85, comm: "sysbench".into(), cpu: 2 });
        let l = parse_line("   rt-app-worker-3-91  [003] d.s4.     2.000010: sched_migrate_task: comm=x pid=91 prio=120 orig_cpu=3 dest_cpu=0").unwrap();
        assert_eq!((l.by_comm.as_str(), l.by_pid), ("rt-app-worker-3", 91));
        assert_eq!(l.event, Event::Migrate { pid: 91, from: 3, to: 0 });
        let l = parse_line("  a b-7 [002] dN.4. 3.5: sched_switch: prev_comm=a b prev_pid=7 prev_prio=120 prev_state=S ==> next_comm=my task next_pid=9 next_prio=120").unwrap();
        assert_eq!(
            l.event,
            Event::Switch { prev: 7, prev_runnable: false, next: 9, next_comm: "my task".into() }
        );
        assert_eq!(l.time, 3_000_000_000 + 5_000);
        let l = parse_line("  x-7 [002] d..4. 3.000005: sched_waking: comm=y pid=12 prio=120 target_cpu=001")
            .unwrap();
        assert_eq!(l.event, Event::Waking { pid: 12 });
        assert!(parse_line("# tracer: nop").is_none());
        assert!(parse_line("  x-7 [002] d..4. 3.000005: sched_stat_runtime: comm=y pid=12").is_none());
    }
}
