//! A checker for the Chrome JSON traces this project writes: will Perfetto turn the file into
//! per-CPU scheduling tracks?
//!
//! [`check_chrome_trace`] checks the facts described in `docs/trace-formats.md`: the top level
//! is an object with only keys Perfetto's JSON importer knows, `displayTimeUnit` (if present) is
//! `ms` or `ns`, `systemTraceEvents` is non-empty ftrace text whose lines have the shape Perfetto's
//! systrace tokenizer accepts, timestamps never go back on a CPU, every `sched_switch` line carries
//! all seven fields with integer pids and prios, and `sched_switch` appears on enough CPUs.
//!
//! The simulator's tests and the QEMU runner (`cargo xrun`) both use it.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

/// Top-level keys of a Chrome JSON object that Perfetto's JSON importer accepts. Any other key
/// makes it ignore the rest of the file.
pub const KNOWN_TOP_LEVEL_KEYS: [&str; 9] = [
    "traceEvents",
    "displayTimeUnit",
    "systemTraceEvents",
    "otherData",
    "metadata",
    "stackFrames",
    "samples",
    "controllerTraceDataKey",
    "powerTraceAsString",
];

/// The fields a `sched_switch` line must carry (the kernel's `TP_printk` format), in order.
pub const SCHED_SWITCH_FIELDS: [&str; 7] =
    ["prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid", "next_prio"];

/// The `sched_switch` fields that must parse as (possibly negative) integers.
const INTEGER_FIELDS: [&str; 4] = ["prev_pid", "prev_prio", "next_pid", "next_prio"];

/// The line shape Perfetto's systrace tokenizer accepts. Groups: 1 pid, 2 tgid, 3 CPU,
/// 4 timestamp (seconds), 5 event name.
const TOKENIZER_PATTERN: &str =
    r"-(\d+)\s+\(?\s*(\d+|-+)?\)?\s?\[(\d+)\]\s*[a-zA-Z0-9.]{0,4}\s+(\d+\.\d+):\s+(\S+):";

static TOKENIZER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(TOKENIZER_PATTERN).expect("the tokenizer pattern is a valid regex"));

/// What a trace that passes looks like.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// CPUs with at least one well-formed `sched_switch` line.
    pub cpus_with_switches: BTreeSet<usize>,
    /// Number of ftrace lines per event name (`sched_switch`, `sched_waking`, ...).
    pub events: BTreeMap<String, usize>,
}

impl fmt::Display for TraceSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sched_switch on {} CPUs; events:", self.cpus_with_switches.len())?;
        if self.events.is_empty() {
            write!(f, " none")?;
        }
        for (i, (name, n)) in self.events.iter().enumerate() {
            write!(f, "{} {name}={n}", if i == 0 { "" } else { "," })?;
        }
        Ok(())
    }
}

/// One reason Perfetto would not show the trace as per-CPU scheduling tracks. `line` fields
/// are 1-based line numbers within the `systemTraceEvents` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceProblem {
    /// The text is not JSON at all (the parser's message).
    NotJson(String),
    /// The top level is not an object (e.g. a bare event list), so there is no
    /// `systemTraceEvents` and no per-CPU scheduling tracks.
    NotAnObject,
    /// Top-level keys Perfetto does not know; it ignores the rest of the file.
    UnknownTopLevelKeys(Vec<String>),
    /// `displayTimeUnit` is present but not `"ms"` or `"ns"` (its JSON text).
    BadDisplayTimeUnit(String),
    /// `systemTraceEvents` is missing, not a string, or blank.
    NoSystemTraceEvents,
    /// A non-comment line the systrace tokenizer cannot split into its fields.
    Untokenizable {
        /// Line number.
        line: usize,
        /// The line (at most 120 characters of it).
        text: String,
    },
    /// The CPU number of a line does not fit in a `usize`.
    BadCpu {
        /// Line number.
        line: usize,
        /// The CPU field as written.
        cpu: String,
    },
    /// A line's timestamp is earlier than the previous line's on the same CPU.
    TimestampWentBack {
        /// Line number.
        line: usize,
        /// The CPU.
        cpu: usize,
        /// The previous timestamp on that CPU, as written (seconds).
        previous: String,
        /// This line's timestamp, as written (seconds).
        now: String,
    },
    /// A `sched_switch` argument that is not `key=value` with a single `=` (a comm with a
    /// space or an `=` in it splits that way).
    BadSwitchArgument {
        /// Line number.
        line: usize,
        /// The argument as split.
        arg: String,
    },
    /// A `sched_switch` line lacks some of [`SCHED_SWITCH_FIELDS`].
    SwitchMissingFields {
        /// Line number.
        line: usize,
        /// The missing fields, in format order.
        missing: Vec<&'static str>,
    },
    /// A `sched_switch` pid or prio that is not an integer.
    NotAnInteger {
        /// Line number.
        line: usize,
        /// The field.
        field: &'static str,
        /// Its value as written.
        value: String,
    },
    /// `sched_switch` appears on fewer CPUs than wanted.
    TooFewCpus {
        /// CPUs with well-formed `sched_switch` lines.
        seen: usize,
        /// CPUs wanted.
        want: usize,
    },
}

impl fmt::Display for TraceProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceProblem::NotJson(e) => write!(f, "not JSON: {e}"),
            TraceProblem::NotAnObject => {
                write!(f, "top level is not an object: no systemTraceEvents, so no per-CPU scheduling tracks")
            }
            TraceProblem::UnknownTopLevelKeys(keys) => {
                write!(f, "unknown top-level keys {keys:?}: Perfetto ignores the rest of the file")
            }
            TraceProblem::BadDisplayTimeUnit(u) => write!(f, "displayTimeUnit {u} is not \"ms\" or \"ns\""),
            TraceProblem::NoSystemTraceEvents => {
                write!(f, "systemTraceEvents is missing, not a string, or empty")
            }
            TraceProblem::Untokenizable { line, text } => {
                write!(f, "line {line}: not an ftrace line Perfetto can tokenize: {text}")
            }
            TraceProblem::BadCpu { line, cpu } => write!(f, "line {line}: CPU number {cpu} is out of range"),
            TraceProblem::TimestampWentBack { line, cpu, previous, now } => {
                write!(f, "line {line}: timestamp goes back on CPU {cpu} ({previous} then {now})")
            }
            TraceProblem::BadSwitchArgument { line, arg } => {
                write!(f, "line {line}: sched_switch argument {arg:?} is not key=value (a comm with a space or '='?)")
            }
            TraceProblem::SwitchMissingFields { line, missing } => {
                write!(f, "line {line}: sched_switch lacks {}", missing.join(", "))
            }
            TraceProblem::NotAnInteger { line, field, value } => {
                write!(f, "line {line}: sched_switch {field}={value:?} is not an integer")
            }
            TraceProblem::TooFewCpus { seen, want } => {
                write!(f, "sched_switch seen on {seen} CPUs, want at least {want}")
            }
        }
    }
}

/// The outcome of [`check_chrome_trace`]: a summary, or every problem found.
pub type TraceCheck = Result<TraceSummary, Vec<TraceProblem>>;

/// Checks that `json`, a Chrome JSON trace, will give per-CPU scheduling tracks in Perfetto,
/// with `sched_switch` lines on at least `min_cpus` CPUs (0: no minimum).
///
/// Returns the summary when nothing is wrong, and otherwise all problems found (a missing or
/// empty `systemTraceEvents` stops the check of the ftrace text).
pub fn check_chrome_trace(json: &str, min_cpus: usize) -> TraceCheck {
    let value: serde_json::Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => return Err(vec![TraceProblem::NotJson(e.to_string())]),
    };
    let Some(top) = value.as_object() else { return Err(vec![TraceProblem::NotAnObject]) };
    let mut problems = Vec::new();
    let unknown: Vec<String> =
        top.keys().filter(|k| !KNOWN_TOP_LEVEL_KEYS.contains(&k.as_str())).cloned().collect();
    if !unknown.is_empty() {
        problems.push(TraceProblem::UnknownTopLevelKeys(unknown));
    }
    if let Some(unit) = top.get("displayTimeUnit") {
        if unit != "ms" && unit != "ns" {
            problems.push(TraceProblem::BadDisplayTimeUnit(unit.to_string()));
        }
    }
    let text = match top.get("systemTraceEvents").and_then(|t| t.as_str()) {
        Some(t) if !t.trim().is_empty() => t,
        _ => {
            problems.push(TraceProblem::NoSystemTraceEvents);
            return Err(problems);
        }
    };
    let summary = check_ftrace_text(text, &mut problems);
    if summary.cpus_with_switches.len() < min_cpus {
        problems.push(TraceProblem::TooFewCpus { seen: summary.cpus_with_switches.len(), want: min_cpus });
    }
    if problems.is_empty() {
        Ok(summary)
    } else {
        Err(problems)
    }
}

/// A one-line verdict for a check: `OK: <summary>` or `FAIL: <n> problem(s): <the first few>`.
pub fn verdict(check: &TraceCheck) -> String {
    const SHOWN: usize = 3;
    match check {
        Ok(summary) => format!("OK: {summary}"),
        Err(problems) => {
            let mut s =
                format!("FAIL: {} problem{}: ", problems.len(), if problems.len() == 1 { "" } else { "s" });
            let shown: Vec<String> = problems.iter().take(SHOWN).map(|p| p.to_string()).collect();
            s.push_str(&shown.join("; "));
            if problems.len() > SHOWN {
                s.push_str(&format!("; and {} more", problems.len() - SHOWN));
            }
            s
        }
    }
}

/// Checks the ftrace text line by line, pushing problems and returning what it saw.
fn check_ftrace_text(text: &str, problems: &mut Vec<TraceProblem>) -> TraceSummary {
    let mut summary = TraceSummary::default();
    let mut last: BTreeMap<usize, Timestamp<'_>> = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        if l.trim().is_empty() || l.starts_with('#') {
            continue;
        }
        let Some(caps) = TOKENIZER.captures(l) else {
            problems.push(TraceProblem::Untokenizable { line, text: l.chars().take(120).collect() });
            continue;
        };
        // Groups 3 to 5 take part in every match; `as_str` borrows from the text, not `caps`.
        let group = |i: usize| caps.get(i).map_or("", |m| m.as_str());
        let (cpu_text, ts_text, event) = (group(3), group(4), group(5));
        let end = caps.get(0).map_or(l.len(), |m| m.end());
        *summary.events.entry(event.to_string()).or_default() += 1;
        let Ok(cpu) = cpu_text.parse::<usize>() else {
            problems.push(TraceProblem::BadCpu { line, cpu: cpu_text.to_string() });
            continue;
        };
        let ts = Timestamp::new(ts_text);
        if let Some(prev) = last.insert(cpu, ts) {
            if ts < prev {
                problems.push(TraceProblem::TimestampWentBack {
                    line,
                    cpu,
                    previous: prev.text.to_string(),
                    now: ts_text.to_string(),
                });
            }
        }
        if event == "sched_switch" && switch_fields_ok(line, &l[end..], problems) {
            summary.cpus_with_switches.insert(cpu);
        }
    }
    summary
}

/// Checks the arguments of a `sched_switch` line (the text after `sched_switch:`): every
/// argument is `key=value` with one `=` (so comms hold no spaces or `=`), all fields are
/// present, pids and prios are integers. Arguments are split on whitespace, with `==>` as a
/// separator too, as Perfetto's parser splits them.
fn switch_fields_ok(line: usize, args: &str, problems: &mut Vec<TraceProblem>) -> bool {
    let mut ok = true;
    let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
    for arg in args.split_whitespace().flat_map(|a| a.split("==>")).filter(|a| !a.is_empty()) {
        let split = arg.split_once('=').filter(|(k, _)| !k.is_empty());
        if let Some((k, v)) = split {
            // Kept even if malformed, so that a bad comm is not also reported as missing.
            fields.insert(k, v);
        }
        if split.is_none_or(|(_, v)| v.contains('=')) {
            problems.push(TraceProblem::BadSwitchArgument { line, arg: arg.to_string() });
            ok = false;
        }
    }
    let missing: Vec<&'static str> =
        SCHED_SWITCH_FIELDS.iter().copied().filter(|k| !fields.contains_key(k)).collect();
    if !missing.is_empty() {
        problems.push(TraceProblem::SwitchMissingFields { line, missing });
        return false;
    }
    for field in INTEGER_FIELDS {
        let value = fields[field];
        if !is_integer(value) {
            problems.push(TraceProblem::NotAnInteger { line, field, value: value.to_string() });
            ok = false;
        }
    }
    ok
}

/// An optional minus sign and one or more ASCII digits.
fn is_integer(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A `<seconds>.<fraction>` timestamp compared exactly, as decimal text (no float rounding,
/// no overflow).
#[derive(Debug, Clone, Copy)]
struct Timestamp<'a> {
    /// The text as written.
    text: &'a str,
    /// Whole seconds without leading zeros.
    whole: &'a str,
    /// Fraction without trailing zeros.
    fraction: &'a str,
}

impl<'a> Timestamp<'a> {
    /// Splits a tokenizer timestamp (`\d+\.\d+`).
    fn new(text: &'a str) -> Timestamp<'a> {
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        Timestamp { text, whole: whole.trim_start_matches('0'), fraction: fraction.trim_end_matches('0') }
    }
}

impl Ord for Timestamp<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Without leading zeros, a longer whole part is a larger number; the fractions
        // without trailing zeros compare as text.
        (self.whole.len(), self.whole, self.fraction).cmp(&(other.whole.len(), other.whole, other.fraction))
    }
}

impl PartialOrd for Timestamp<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Timestamp<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Timestamp<'_> {}

#[cfg(test)]
mod tests;
