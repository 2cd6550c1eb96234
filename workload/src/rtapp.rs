//! The rt-app subset this project runs, lowered to a [`ProgramDef`].
//!
//! rt-app (scheduler-tools/rt-app; Debian's package `rt-app`, 1.0) describes a workload as
//! tasks that run phases of events. What is taken here, with rt-app's units (µs, `duration`
//! in seconds):
//!
//! - `global`: `duration` (s; -1 or 0: until every task has finished its loops),
//!   `calibration` (ns per loop of `run`'s busy work, or `"CPUn"`: checked, and used by no
//!   platform here, since a `run` of N µs is N µs of work on each), `default_policy`
//!   (`SCHED_OTHER` only); `global` itself may be left out, as in rt-app;
//! - `tasks`, each with `instance` (threads, default 1; 0: only `fork` starts it), `loop`
//!   (times its phases run, default -1, or any negative: until `duration` ends; 0: none, the
//!   thread ends after its delay; a task without `phases` gives its `loop` to its one phase,
//!   so 0 there loops it until `duration` ends, as rt-app does), `delay` (µs after the start),
//!   `cpus` (allowed CPUs), `priority` (the nice value, -20..19), `policy` (`SCHED_OTHER`),
//!   `slice` (the EEVDF slice its threads ask for, µs: this project's key, not rt-app's, as
//!   Linux 6.12's `sched_runtime` of a fair task), and `phases` (each with its own `loop`,
//!   default 1, 0 or negative: until `duration` ends, where later phases are never reached,
//!   and `cpus`) or its events directly;
//! - the events `run`, `runtime`, `sleep`, `timer` (`ref`, `period`, `mode` relative or
//!   absolute; a ref starting with `unique` is each thread's own), `barrier`, `lock`,
//!   `unlock`, `wait` and `sync` (`ref`, `mutex`), `signal`, `broad`, `suspend` (its own
//!   task's name), `resume`, `yield`, `fork`; an event key may carry a number (`run0`,
//!   `sleep0`, `run1`: rt-app's repeats of an event in one phase), and events run in file
//!   order;
//! - this project's two events, which rt-app lacks: `take` (`ref`, `size`, `run`, `jitter`:
//!   take the next of a pool of `size` events shared by every thread naming `ref`, and do its
//!   `run` µs of work, varied by up to `jitter` % either way where the platform models it; a
//!   thread that finds the pool empty ends, as sysbench's workers share one event counter),
//!   and `join` (wait until every thread this one forked has ended).
//!
//! A barrier's parties are every thread that names it, once per naming, forked ones included
//! (counted as if every forking thread ran all its loops).
//!
//! Anything else is refused, never ignored: an unknown key or event, another policy, a value
//! of the wrong type or out of range, a key given twice, a workload that cannot run as
//! written (a barrier one thread uses, a `wait` without its mutex held, a mutex still held at
//! the end of a phase, no end). Each refusal is one [`RtAppError`] naming the JSON path.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::format::{Event, PhaseDef, PoolDef, Program, ProgramDef, TaskDef, Timer, PHASE_FOREVER};
use crate::json::{self, Json};
use crate::limits::{
    MAX_CPU, MAX_DURATION_US, MAX_EVENTS, MAX_EVENT_US, MAX_FILE_BYTES, MAX_INSTANCES, MAX_JITTER_PCT,
    MAX_LOOPS, MAX_PHASES, MAX_POOL_EVENTS, MAX_RESOURCES, MAX_SLICE_US, MAX_TASKS, MAX_THREAD_TIMERS,
    MAX_WORDS, MIN_SLICE_US, NAME_BYTES,
};

/// Why a workload file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtAppError {
    /// Not JSON (or a key given twice): where and what.
    Json {
        /// Line (from 1).
        line: usize,
        /// Column (from 1).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A key, event or value outside the subset this project runs.
    Unsupported {
        /// The JSON path.
        path: String,
        /// What is not supported.
        what: String,
    },
    /// A value of the wrong type, or out of its range.
    BadValue {
        /// The JSON path.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// More than the program format holds (tasks, phases, events, resources, size).
    TooLarge {
        /// The JSON path.
        path: String,
        /// What is past which limit.
        why: String,
    },
    /// Well-formed, but it cannot run as written.
    Inconsistent {
        /// The JSON path.
        path: String,
        /// Why.
        why: String,
    },
}

impl RtAppError {
    /// The process exit code the runner and the simulator give this refusal: each kind its
    /// own.
    pub fn exit_code(&self) -> u8 {
        match self {
            RtAppError::Json { .. } => 10,
            RtAppError::Unsupported { .. } => 11,
            RtAppError::BadValue { .. } => 12,
            RtAppError::TooLarge { .. } => 13,
            RtAppError::Inconsistent { .. } => 14,
        }
    }
}

impl fmt::Display for RtAppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // (Paths and messages quote the file's own keys and names: escaped, one line.)
        let l = crate::one_line;
        match self {
            RtAppError::Json { line, column, message } => {
                write!(f, "line {line} column {column}: not valid JSON: {}", l(message))
            }
            RtAppError::Unsupported { path, what } => write!(f, "{}: not supported: {}", l(path), l(what)),
            RtAppError::BadValue { path, why } => write!(f, "{}: {}", l(path), l(why)),
            RtAppError::TooLarge { path, why } => write!(f, "{}: too large: {}", l(path), l(why)),
            RtAppError::Inconsistent { path, why } => write!(f, "{}: cannot run: {}", l(path), l(why)),
        }
    }
}

impl std::error::Error for RtAppError {}

/// The event keys, longest first where one is a prefix of another (`runtime` before `run`).
const EVENTS: [&str; 17] = [
    "runtime", "run", "sleep", "timer", "barrier", "lock", "unlock", "wait", "signal", "broad", "sync",
    "suspend", "resume", "yield", "fork", "take", "join",
];

/// The event a key names: as in rt-app, the event whose name starts it, whatever follows
/// (`run0`, `run_big`; the longest name where two would, `runtime` before `run`).
fn event_name(key: &str) -> Option<&'static str> {
    EVENTS.into_iter().find(|e| key.starts_with(e))
}

fn unsupported(path: &str, what: impl Into<String>) -> RtAppError {
    RtAppError::Unsupported { path: path.to_string(), what: what.into() }
}

fn bad(path: &str, why: impl Into<String>) -> RtAppError {
    RtAppError::BadValue { path: path.to_string(), why: why.into() }
}

fn too_large(path: &str, why: impl Into<String>) -> RtAppError {
    RtAppError::TooLarge { path: path.to_string(), why: why.into() }
}

fn cannot(path: &str, why: impl Into<String>) -> RtAppError {
    RtAppError::Inconsistent { path: path.to_string(), why: why.into() }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn object<'a>(v: &'a Json, path: &str) -> Result<&'a [(String, Json)], RtAppError> {
    match v {
        Json::Object(e) => Ok(e),
        other => Err(bad(path, format!("expected an object, found {}", other.kind()))),
    }
}

fn string<'a>(v: &'a Json, path: &str) -> Result<&'a str, RtAppError> {
    match v {
        Json::String(s) if !s.is_empty() => Ok(s),
        Json::String(_) => Err(bad(path, "an empty name")),
        other => Err(bad(path, format!("expected a string, found {}", other.kind()))),
    }
}

/// `true` or `false`.
fn boolean(v: &Json, path: &str) -> Result<bool, RtAppError> {
    match v {
        Json::Bool(b) => Ok(*b),
        other => Err(bad(path, format!("expected true or false, found {}", other.kind()))),
    }
}

/// The whole numbers an `i64` holds, as `f64`s: exactly [-2^63, 2^63).
const I64_SPAN: core::ops::Range<f64> = i64::MIN as f64..-(i64::MIN as f64);

/// The refusal of `-0`, the same in every build.
const NEGATIVE_ZERO: &str = "expected an integer, found -0 (write 0)";

/// A whole number within `lo..=hi`, written as a JSON integer: rt-app's reader (json-c) takes
/// `2.0`, `1e2` or `-0` for a double and refuses it where it wants an integer.
fn int(v: &Json, path: &str, lo: i64, hi: i64) -> Result<i64, RtAppError> {
    let out_of_range = |n: &dyn core::fmt::Display| bad(path, format!("{n} is out of range ({lo} to {hi})"));
    let n = match v {
        Json::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            // (`-0` is an integer to serde_json with `arbitrary_precision`, which this crate
            // turns on; `-0.0` is a float.)
            (Some(0), _, _) if n.to_string().starts_with('-') => return Err(bad(path, NEGATIVE_ZERO)),
            (None, None, Some(f)) if f == 0.0 && f.is_sign_negative() => {
                return Err(bad(path, NEGATIVE_ZERO))
            }
            (Some(i), _, _) => i,
            // (A whole number past i64 is out of any range here, not a fraction.)
            (None, Some(u), _) => return Err(out_of_range(&u)),
            (None, None, Some(f)) if f.fract() == 0.0 && !I64_SPAN.contains(&f) => {
                return Err(out_of_range(&format_args!("{f:e}")))
            }
            // (The value as f64's Debug writes it: `2.0` for `2.0`, `100.0` for `1e2`.)
            (None, None, Some(f)) if f.fract() == 0.0 => {
                let why = "rt-app reads a number written with a fraction or an exponent as a double";
                return Err(bad(path, format!("expected an integer, found {f:?} ({why})")));
            }
            (None, None, Some(f)) => return Err(bad(path, format!("expected a whole number, found {f:?}"))),
            // (No f64 holds it: beyond f64's range, so beyond any range here.)
            _ => return Err(out_of_range(&n)),
        },
        other => return Err(bad(path, format!("expected a number, found {}", other.kind()))),
    };
    if n < lo || n > hi {
        return Err(bad(path, format!("{n} is out of range ({lo} to {hi})")));
    }
    Ok(n)
}

/// A duration in µs, within the format's bound.
fn micros(v: &Json, path: &str) -> Result<u32, RtAppError> {
    Ok(int(v, path, 0, MAX_EVENT_US as i64)? as u32)
}

/// A `cpus` list as a mask.
fn cpus(v: &Json, path: &str) -> Result<u64, RtAppError> {
    let Json::Array(items) = v else {
        return Err(bad(path, format!("expected an array of CPU numbers, found {}", v.kind())));
    };
    if items.is_empty() {
        return Err(bad(path, "an empty CPU list allows no CPU"));
    }
    let mut mask = 0u64;
    for (i, c) in items.iter().enumerate() {
        mask |= 1 << int(c, &format!("{path}[{i}]"), 0, MAX_CPU as i64)?;
    }
    Ok(mask)
}

/// `SCHED_OTHER`, the one policy this scheduler core has.
fn policy(v: &Json, path: &str) -> Result<(), RtAppError> {
    match string(v, path)? {
        "SCHED_OTHER" => Ok(()),
        other => Err(unsupported(path, format!("policy {other} (only SCHED_OTHER: the fair class)"))),
    }
}

/// Names to numbers, in the order they first appear.
#[derive(Default)]
struct Names(Vec<String>);

impl Names {
    /// The number of `name`, a new one if it is new: at most `limit` of them (`what`).
    fn index_within(&mut self, name: &str, path: &str, what: &str, limit: usize) -> Result<u16, RtAppError> {
        if let Some(i) = self.0.iter().position(|n| n == name) {
            return Ok(i as u16);
        }
        if self.0.len() >= limit {
            return Err(too_large(path, format!("more than {limit} {what}")));
        }
        self.0.push(name.to_string());
        Ok(self.0.len() as u16 - 1)
    }

    /// [`Names::index_within`] the bound of shared resources.
    fn index(&mut self, name: &str, path: &str, what: &str) -> Result<u16, RtAppError> {
        self.index_within(name, path, what, MAX_RESOURCES)
    }
}

/// What the lowering collects beside the tasks.
#[derive(Default)]
struct Resources {
    mutexes: Names,
    conds: Names,
    barriers: Names,
    timers: Names,
    /// The task being lowered's per-thread timers (each thread numbers its own from 0), and
    /// the most any task has.
    per_thread_timers: Names,
    most_thread_timers: usize,
    pools: Names,
    /// Each pool's size and jitter, as its first `take` gave them.
    pool_defs: Vec<PoolDef>,
}

/// A workload file's bytes, read up to one past [`MAX_FILE_BYTES`] (which [`lower_bytes`]
/// then refuses): a huge file, or an endless one, is not read whole.
///
/// ```
/// let path = std::env::temp_dir().join(format!("read-doc-{}.json", std::process::id()));
/// std::fs::write(&path, vec![b' '; 2 << 20]).unwrap();
/// let bytes = sched_workload::rtapp::read(&path).unwrap();
/// assert_eq!(bytes.len(), sched_workload::limits::MAX_FILE_BYTES + 1);
/// let e = sched_workload::rtapp::lower_bytes(&bytes).unwrap_err();
/// assert_eq!((e.exit_code(), e.to_string().as_str()), (13, "the file: too large: more than 1048576 bytes"));
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub fn read(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`lower`] of a file's bytes as read: bytes that are not UTF-8 text are refused as not
/// JSON, at the line and column (in bytes) of the first bad byte.
///
/// ```
/// use sched_workload::rtapp::{lower_bytes, RtAppError};
/// let Err(e @ RtAppError::Json { .. }) = lower_bytes(b"{\n  \"x\xff\": 1}") else { panic!() };
/// assert_eq!((e.exit_code(), e.to_string().as_str()), (10, "line 2 column 5: not valid JSON: not UTF-8 text"));
/// ```
pub fn lower_bytes(bytes: &[u8]) -> Result<ProgramDef, RtAppError> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(too_large("the file", format!("more than {MAX_FILE_BYTES} bytes")));
    }
    match core::str::from_utf8(bytes) {
        Ok(text) => lower(text),
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            let column = good.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
            Err(RtAppError::Json { line, column, message: "not UTF-8 text".into() })
        }
    }
}

/// Lowers a workload file's text to a program, or says in one error why not.
///
/// ```
/// use sched_workload::rtapp::{lower, RtAppError};
/// let refused = lower(r#"{"global": {"calibration": 100}, "tasks": {"t": {"phases": {"p": {"spin": 1}}}}}"#);
/// let Err(e @ RtAppError::Unsupported { .. }) = refused else { panic!() };
/// assert_eq!(e.to_string(), "tasks.t.phases.p.spin: not supported: unknown event (known: runtime run sleep timer barrier lock unlock wait signal broad sync suspend resume yield fork take join, each maybe with more after it: run0)");
/// ```
pub fn lower(text: &str) -> Result<ProgramDef, RtAppError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(too_large("the file", format!("more than {MAX_FILE_BYTES} bytes")));
    }
    let root = json::parse(text).map_err(|e| RtAppError::Json {
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    let top = object(&root, "the file")?;
    let mut def = ProgramDef::default();
    let (mut global, mut tasks) = (None, None);
    for (k, v) in top {
        match k.as_str() {
            "global" => global = Some(v),
            "tasks" => tasks = Some(v),
            other => return Err(unsupported(other, "unknown top-level key (known: global tasks)")),
        }
    }
    lower_global(global, &mut def)?;
    let tasks = object(tasks.ok_or_else(|| bad("tasks", "missing: the workload has no tasks"))?, "tasks")?;
    if tasks.is_empty() {
        return Err(bad("tasks", "no tasks"));
    }
    if tasks.len() > MAX_TASKS {
        return Err(too_large("tasks", format!("{} tasks, at most {MAX_TASKS}", tasks.len())));
    }
    let names: Vec<&str> = tasks.iter().map(|(k, _)| k.as_str()).collect();
    let mut res = Resources::default();
    for (name, v) in tasks {
        res.per_thread_timers = Names::default();
        def.tasks.push(lower_task(name, v, &names, &mut res)?);
        res.most_thread_timers = res.most_thread_timers.max(res.per_thread_timers.0.len());
    }
    finish(&mut def, res)?;
    Ok(def)
}

/// `global` (optional, as in rt-app: without it, rt-app's defaults).
fn lower_global(global: Option<&Json>, def: &mut ProgramDef) -> Result<(), RtAppError> {
    let path = "global";
    let Some(global) = global else { return Ok(()) };
    for (k, v) in object(global, path)? {
        let p = join(path, k);
        match k.as_str() {
            "duration" => {
                let s = int(v, &p, -1, (MAX_DURATION_US / 1_000_000) as i64)?;
                def.duration_us = s.max(0) as u64 * 1_000_000;
            }
            // Checked as rt-app takes it, and used by no platform here: the simulator and the
            // kernel do a `run` of N µs as N µs of work, as rt-app does on the machine it
            // calibrated, and Linux's rt-app measures its own (`rtapp::linux`).
            "calibration" => calibration(v, &p)?,
            "default_policy" => policy(v, &p)?,
            // Where and how rt-app logs, and whether it locks its pages: checked as rt-app
            // reads them, and changing nothing here (the Linux guest's rt-app gets the
            // runner's own log settings, and `lock_pages` as written).
            "logdir" | "log_basename" => drop(string(v, &p)?),
            "log_size" => match v {
                Json::String(s) if ["disable", "file", "auto"].contains(&s.as_str()) => {}
                Json::String(s) => return Err(bad(&p, format!("{s:?}: MB, or disable, file or auto"))),
                _ => drop(int(v, &p, 0, i32::MAX as i64)?),
            },
            "gnuplot" | "lock_pages" => drop(boolean(v, &p)?),
            // rt-app's trace categories, a comma list (a boolean is its older form).
            "ftrace" => match v {
                Json::String(s) => {
                    let known = ["main", "task", "loop", "event", "stats", "none"];
                    if let Some(c) = s.split(',').find(|c| !known.iter().any(|k| k.eq_ignore_ascii_case(c))) {
                        return Err(bad(&p, format!("{c:?}: a comma list of {}", known.join(", "))));
                    }
                }
                _ => drop(boolean(v, &p)?),
            },
            // What would change the run or its figures is taken only as off.
            "pi_enabled" | "cumulative_slack" => {
                if boolean(v, &p)? {
                    let why = if k == "pi_enabled" {
                        "priority-inheritance mutexes (only false)"
                    } else {
                        "cumulative slack figures (only false)"
                    };
                    return Err(unsupported(&p, why));
                }
            }
            _ => {
                return Err(unsupported(
                    &p,
                    "unknown global key (known: duration calibration default_policy logdir log_basename log_size gnuplot ftrace lock_pages pi_enabled cumulative_slack)",
                ))
            }
        }
    }
    Ok(())
}

/// `calibration`: ns per loop of `run`'s work (0: measure), or `"CPUn"`, the CPU rt-app
/// measures it on.
fn calibration(v: &Json, p: &str) -> Result<(), RtAppError> {
    match v {
        Json::String(s) => match s.strip_prefix("CPU").map(str::parse::<u32>) {
            Some(Ok(cpu)) if cpu <= MAX_CPU => Ok(()),
            _ => Err(bad(p, format!("{s:?}: ns per loop, or \"CPUn\" (a CPU up to {MAX_CPU})"))),
        },
        _ => int(v, p, 0, i32::MAX as i64).map(drop),
    }
}

fn lower_task(name: &str, v: &Json, tasks: &[&str], res: &mut Resources) -> Result<TaskDef, RtAppError> {
    let path = join("tasks", name);
    if name.len() > NAME_BYTES {
        return Err(too_large(&path, format!("a name of {} bytes, at most {NAME_BYTES}", name.len())));
    }
    if name.contains('\0') {
        return Err(bad(&path, "a task's name holds no NUL (the program ends a name at one)"));
    }
    if name.chars().any(char::is_control) {
        return Err(bad(
            &path,
            "a task's name holds no control character (it names a table's rows and log lines)",
        ));
    }
    if name.is_empty() {
        return Err(bad(&path, "a task's name is not empty (the tables name its rows by it)"));
    }
    if name.contains('/') {
        return Err(bad(&path, "a task's name holds no '/' (rt-app names its log file after it)"));
    }
    let mut t = TaskDef { name: name.to_string(), instances: 1, loops: -1, ..TaskDef::default() };
    let mut phases = None;
    let mut direct = Vec::new();
    for (k, v) in object(v, &path)? {
        let p = join(&path, k);
        match k.as_str() {
            "instance" => t.instances = int(v, &p, 0, MAX_INSTANCES as i64)? as u32,
            // (rt-app takes any negative count as forever.)
            "loop" => t.loops = int(v, &p, i32::MIN as i64, MAX_LOOPS as i64)?.max(-1) as i32,
            // (rt-app takes a negative delay as none.)
            "delay" => t.delay_us = int(v, &p, i32::MIN as i64, MAX_EVENT_US as i64)?.max(0) as u32,
            "cpus" => t.cpus = cpus(v, &p)?,
            "priority" => t.nice = int(v, &p, -20, 19)? as i32,
            "slice" => {
                let us = int(v, &p, 0, MAX_SLICE_US as i64)? as u32;
                if us != 0 && us < MIN_SLICE_US {
                    return Err(bad(
                        &p,
                        format!("{us}: 0 (the default) or {MIN_SLICE_US}..={MAX_SLICE_US} µs"),
                    ));
                }
                t.slice_us = us;
            }
            "policy" => policy(v, &p)?,
            "phases" => phases = Some(object(v, &p)?),
            _ if event_name(k).is_some() => direct.push((k.clone(), v.clone())),
            _ => return Err(unsupported(
                &p,
                "unknown task key (known: instance loop delay cpus priority policy slice phases, or events)",
            )),
        }
    }
    match phases {
        Some(_) if !direct.is_empty() => {
            return Err(unsupported(
                &join(&path, &direct[0].0),
                "events beside phases (put them in a phase)",
            ));
        }
        Some(phases) => {
            if phases.is_empty() {
                return Err(bad(&join(&path, "phases"), "no phases"));
            }
            if phases.len() > MAX_PHASES {
                return Err(too_large(
                    &join(&path, "phases"),
                    format!("{} phases, at most {MAX_PHASES}", phases.len()),
                ));
            }
            for (pname, pv) in phases {
                let ppath = join(&join(&path, "phases"), pname);
                t.phases.push(lower_phase(Some(pname), object(pv, &ppath)?, &ppath, name, tasks, res)?);
            }
        }
        None => {
            if direct.is_empty() {
                return Err(bad(&path, "no phases and no events"));
            }
            // rt-app makes the loop of a phaseless task its one phase's, so 0 runs it until
            // the duration ends, as -1 does (rather than not at all).
            if t.loops == 0 {
                t.loops = -1;
            }
            t.phases.push(lower_phase(None, &direct, &path, name, tasks, res)?);
        }
    }
    Ok(t)
}

/// One phase: the phase `name` of `phases`, or `None` for a phaseless task's own events
/// (whose `loop` and `cpus` are the task's, read before; any name is a phase's, `""` too).
fn lower_phase(
    name: Option<&str>,
    entries: &[(String, Json)],
    path: &str,
    task: &str,
    tasks: &[&str],
    res: &mut Resources,
) -> Result<PhaseDef, RtAppError> {
    let mut ph = PhaseDef { name: name.unwrap_or("").to_string(), loops: 1, ..PhaseDef::default() };
    // Mutexes held at each point, in the order taken: a phase must leave none held.
    let mut held: Vec<(u16, String)> = Vec::new();
    for (k, v) in entries {
        let p = join(path, k);
        match k.as_str() {
            // (In a phaseless task these keys are the task's and never reach here.)
            // (rt-app ends a phase when its count, from 1 up, equals `loop`: never, for 0 or less.)
            "loop" if name.is_some() => {
                ph.loops = match int(v, &p, i32::MIN as i64, MAX_LOOPS as i64)? {
                    n if n <= 0 => PHASE_FOREVER,
                    n => n as u32,
                }
            }
            "cpus" if name.is_some() => ph.cpus = cpus(v, &p)?,
            _ => {
                let Some(event) = event_name(k) else {
                    return Err(unsupported(
                        &p,
                        format!(
                            "unknown event (known: {}, each maybe with more after it: run0)",
                            EVENTS.join(" ")
                        ),
                    ));
                };
                if ph.events.len() == MAX_EVENTS {
                    return Err(too_large(path, format!("more than {MAX_EVENTS} events in one phase")));
                }
                let e = lower_event(event, v, &p, task, tasks, res)?;
                check_lock_order(&e, &p, &mut held, res)?;
                ph.events.push(e);
            }
        }
    }
    if ph.events.is_empty() {
        return Err(bad(path, "a phase with no events"));
    }
    if let Some((_, name)) = held.first() {
        return Err(cannot(path, format!("mutex {name:?} is still held at the end of the phase")));
    }
    Ok(ph)
}

fn lower_event(
    event: &str,
    v: &Json,
    p: &str,
    task: &str,
    tasks: &[&str],
    res: &mut Resources,
) -> Result<Event, RtAppError> {
    let cond_and_mutex = |v: &Json, res: &mut Resources| -> Result<(u16, u16), RtAppError> {
        let (mut cond, mut mutex) = (None, None);
        for (k, x) in object(v, p)? {
            let kp = join(p, k);
            match k.as_str() {
                "ref" => cond = Some(res.conds.index(string(x, &kp)?, &kp, "condition variables")?),
                "mutex" => mutex = Some(res.mutexes.index(string(x, &kp)?, &kp, "mutexes")?),
                _ => return Err(unsupported(&kp, "unknown key (known: ref mutex)")),
            }
        }
        let cond = cond.ok_or_else(|| bad(p, "missing: ref (the condition variable)"))?;
        Ok((cond, mutex.ok_or_else(|| bad(p, "missing: mutex"))?))
    };
    Ok(match event {
        "run" => Event::Run { us: micros(v, p)? },
        "runtime" => Event::Runtime { us: micros(v, p)? },
        "sleep" => Event::Sleep { us: micros(v, p)? },
        "timer" => {
            let (mut timer, mut period, mut absolute) = (None, None, false);
            for (k, x) in object(v, p)? {
                let kp = join(p, k);
                match k.as_str() {
                    "ref" => {
                        let name = string(x, &kp)?;
                        timer = Some(if name.starts_with("unique") {
                            Timer::PerThread(res.per_thread_timers.index_within(
                                name,
                                &kp,
                                "per-thread timers in one task",
                                MAX_THREAD_TIMERS,
                            )?)
                        } else {
                            Timer::Shared(res.timers.index(name, &kp, "timers")?)
                        });
                    }
                    // (0, as in rt-app's tutorial: the timer restarts from now, no wait.)
                    "period" => period = Some(micros(x, &kp)?),
                    "mode" => {
                        absolute = match string(x, &kp)? {
                            "absolute" => true,
                            "relative" => false,
                            other => return Err(bad(&kp, format!("{other:?}: relative or absolute"))),
                        }
                    }
                    _ => return Err(unsupported(&kp, "unknown key (known: ref period mode)")),
                }
            }
            let timer = timer.ok_or_else(|| bad(p, "missing: ref"))?;
            Event::Timer { timer, period_us: period.ok_or_else(|| bad(p, "missing: period"))?, absolute }
        }
        "barrier" => Event::Barrier(res.barriers.index(string(v, p)?, p, "barriers")?),
        "lock" => Event::Lock(res.mutexes.index(string(v, p)?, p, "mutexes")?),
        "unlock" => Event::Unlock(res.mutexes.index(string(v, p)?, p, "mutexes")?),
        "signal" => Event::Signal(res.conds.index(string(v, p)?, p, "condition variables")?),
        "broad" => Event::Broad(res.conds.index(string(v, p)?, p, "condition variables")?),
        // rt-app 1.0 waits on the condition the string names, later rt-app on the task's own
        // name whatever the string: only the task's own name means the same to both.
        "suspend" => match string(v, p)? {
            own if own == task => Event::Suspend(res.conds.index(own, p, "condition variables")?),
            other => {
                return Err(cannot(
                    p,
                    format!("suspend names its own task ({task:?}), not {other:?}: rt-app's versions read any other name apart"),
                ))
            }
        },
        "resume" => Event::Resume(res.conds.index(string(v, p)?, p, "condition variables")?),
        "wait" => {
            let (cond, mutex) = cond_and_mutex(v, res)?;
            Event::Wait { cond, mutex }
        }
        "sync" => {
            let (cond, mutex) = cond_and_mutex(v, res)?;
            Event::Sync { cond, mutex }
        }
        "yield" => Event::Yield,
        "join" => match v {
            Json::Bool(true) => Event::Join,
            _ => return Err(bad(p, format!("expected true, found {}", v.kind()))),
        },
        "take" => {
            let (mut pool, mut size, mut us, mut jitter) = (None, None, None, 0);
            for (k, x) in object(v, p)? {
                let kp = join(p, k);
                match k.as_str() {
                    "ref" => pool = Some((string(x, &kp)?.to_string(), kp)),
                    "size" => size = Some(int(x, &kp, 1, MAX_POOL_EVENTS as i64)? as u32),
                    "run" => us = Some(micros(x, &kp)?),
                    "jitter" => jitter = int(x, &kp, 0, MAX_JITTER_PCT as i64)? as u32,
                    _ => return Err(unsupported(&kp, "unknown key (known: ref size run jitter)")),
                }
            }
            let (name, kp) = pool.ok_or_else(|| bad(p, "missing: ref (the pool)"))?;
            let size = size.ok_or_else(|| bad(p, "missing: size (the pool's events)"))?;
            let us = us.ok_or_else(|| bad(p, "missing: run (each event's work, µs)"))?;
            let n = res.pools.index(&name, &kp, "pools")?;
            let want = PoolDef { name, size, jitter_pct: jitter };
            match res.pool_defs.get(n as usize) {
                None => res.pool_defs.push(want),
                Some(had) if *had == want => {}
                Some(had) => {
                    return Err(cannot(
                        p,
                        format!(
                            "pool {:?} was given size {} and jitter {} before, here {} and {}",
                            had.name, had.size, had.jitter_pct, want.size, want.jitter_pct
                        ),
                    ))
                }
            }
            Event::Take { pool: n, us }
        }
        "fork" => {
            let name = string(v, p)?;
            let t = tasks
                .iter()
                .position(|t| *t == name)
                .ok_or_else(|| bad(p, format!("no task {name:?} to fork")))?;
            Event::Fork(t as u16)
        }
        _ => unreachable!("every name in EVENTS is lowered"),
    })
}

/// `lock` takes a mutex not held, `unlock` releases a held one, `wait` and `sync` need theirs
/// held (rt-app's condition variables are used under their mutex).
fn check_lock_order(
    e: &Event,
    p: &str,
    held: &mut Vec<(u16, String)>,
    res: &Resources,
) -> Result<(), RtAppError> {
    let name = |m: u16| res.mutexes.0[m as usize].clone();
    match *e {
        Event::Lock(m) if held.iter().any(|(h, _)| *h == m) => {
            Err(cannot(p, format!("mutex {:?} is taken again by the thread that holds it", name(m))))
        }
        Event::Lock(m) if !held.is_empty() => Err(cannot(
            p,
            format!("takes mutex {:?} while holding {:?} (nested locks can deadlock)", name(m), held[0].1),
        )),
        Event::Lock(m) => {
            held.push((m, name(m)));
            Ok(())
        }
        Event::Unlock(m) => match held.iter().position(|(h, _)| *h == m) {
            Some(i) => {
                held.remove(i);
                Ok(())
            }
            None => Err(cannot(p, format!("mutex {:?} is released without being held", name(m)))),
        },
        Event::Wait { mutex, .. } | Event::Sync { mutex, .. } if !held.iter().any(|(h, _)| *h == mutex) => {
            Err(cannot(p, format!("waits under mutex {:?} without holding it (lock it first)", name(mutex))))
        }
        // A take may end the thread (its pool empty), and it would end holding the mutex.
        Event::Barrier(_)
        | Event::Sleep { .. }
        | Event::Timer { .. }
        | Event::Suspend(_)
        | Event::Join
        | Event::Take { .. }
            if !held.is_empty() =>
        {
            Err(cannot(p, format!("blocks while holding mutex {:?}", held[0].1)))
        }
        _ => Ok(()),
    }
}

/// Resource tables, barrier parties, and the whole-program checks.
fn finish(def: &mut ProgramDef, res: Resources) -> Result<(), RtAppError> {
    // The tasks that run: those started with the workload, and those a running task forks
    // (a task that only forks itself, or a cycle no running task enters, never starts).
    let mut runs: Vec<bool> = def.tasks.iter().map(|t| t.instances > 0).collect();
    loop {
        let forked: Vec<u16> = events(def)
            .filter_map(|(i, e)| match e {
                Event::Fork(f) if runs[i] => Some(f),
                _ => None,
            })
            .collect();
        let mut grew = false;
        for f in forked {
            if let Some(r) = runs.get_mut(f as usize).filter(|r| !**r) {
                *r = true;
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    for (i, t) in def.tasks.iter().enumerate() {
        let path = join("tasks", &t.name);
        if !runs[i] {
            return Err(cannot(
                &join(&path, "instance"),
                "0 instances and no task that runs forks it: it never runs",
            ));
        }
        if t.loops == -1 && def.duration_us == 0 {
            return Err(cannot(
                &join(&path, "loop"),
                "it loops forever and global.duration sets no end (it is 0 or less, or missing)",
            ));
        }
        // (A task of no loops reaches none of its phases.)
        let forever = t.phases.iter().find(|p| p.loops == PHASE_FOREVER && t.loops != 0);
        if let Some(ph) = forever.filter(|_| def.duration_us == 0) {
            return Err(cannot(
                &join(&join(&join(&path, "phases"), &ph.name), "loop"),
                "the phase loops forever and global.duration sets no end (it is 0 or less, or missing)",
            ));
        }
    }
    if def.tasks.iter().map(|t| t.instances).sum::<u32>() == 0 {
        return Err(cannot("tasks", "no task starts a thread"));
    }
    def.pools = res.pool_defs;
    let events: u64 = def.pools.iter().map(|p| u64::from(p.size)).sum();
    if events > u64::from(MAX_POOL_EVENTS) {
        return Err(too_large("tasks", format!("{events} pool events in all, at most {MAX_POOL_EVENTS}")));
    }
    refuse_after_take(def)?;
    timer_modes(def);
    def.mutexes = res.mutexes.0;
    def.conds = res.conds.0;
    def.timers = res.timers.0;
    def.per_thread_timers = res.most_thread_timers as u32;
    // The threads each task will have, forks included, read from the program as encoded
    // (with stand-in parties, which the count does not read).
    def.barriers = res.barriers.0.iter().map(|n| (n.clone(), 2)).collect();
    let bytes = def.to_bytes();
    let words = bytes.len() / 4;
    if words > MAX_WORDS {
        return Err(too_large("the file", format!("{words} words encoded, at most {MAX_WORDS}")));
    }
    let prog = Program::parse(&bytes).map_err(|e| cannot("tasks", format!("does not encode: {e}")))?;
    // Per barrier: its parties, every thread of every task that names it, once per naming (as
    // rt-app counts them); the threads that can wait at it at once, each such thread once;
    // and the first task naming it, for the refusals.
    let mut parties: HashMap<u16, (u64, u64, String)> = HashMap::new();
    // (Each task's count once: counting reads the whole program.)
    let counts = prog.thread_totals();
    for (ti, t) in def.tasks.iter().enumerate() {
        let path = join("tasks", &t.name);
        let mut named: Vec<u16> = Vec::new();
        for e in t.phases.iter().flat_map(|p| &p.events) {
            if let Event::Barrier(b) = *e {
                let Some(threads) = counts[ti] else {
                    return Err(cannot(
                        &path,
                        "its threads take part in a barrier but are forked without bound (by a task that loops forever, or in a cycle)",
                    ));
                };
                // (Forks of forks can count past any machine: saturate, the bound below refuses.)
                let e = parties.entry(b).or_insert_with(|| (0, 0, path.clone()));
                e.0 = e.0.saturating_add(threads);
                if !named.contains(&b) {
                    named.push(b);
                    e.1 = e.1.saturating_add(threads);
                }
            }
        }
    }
    let mut barriers = Vec::new();
    for (i, name) in res.barriers.0.iter().enumerate() {
        let (n, at_once, path) = &parties[&(i as u16)];
        if *n > u64::from(MAX_INSTANCES) * 64 {
            return Err(too_large(
                path,
                format!("barrier {name:?} has {n} parties, at most {}", MAX_INSTANCES * 64),
            ));
        }
        if *n < 2 {
            return Err(cannot(
                path,
                format!("barrier {name:?} has one thread only: it would never hold anyone"),
            ));
        }
        if n > at_once {
            return Err(cannot(
                path,
                format!(
                    "barrier {name:?} counts {n} parties (one per naming) but {at_once} threads can wait at it at once (a task names it twice): it would never release"
                ),
            ));
        }
        barriers.push((name.clone(), *n as u32));
    }
    def.barriers = barriers;
    Ok(())
}

/// A thread may end at a `take` (its pool empty), so a barrier or a fork after one might
/// never be reached: its parties or forks would be miscounted. Refused (with more than one
/// loop of the task, every barrier and fork of it comes after its take).
fn refuse_after_take(def: &ProgramDef) -> Result<(), RtAppError> {
    for t in &def.tasks {
        let takes = t.phases.iter().flat_map(|p| &p.events).any(|e| matches!(e, Event::Take { .. }));
        let mut taken = takes && t.loops != 1;
        for ph in &t.phases {
            // A phase that loops meets its own events again after its take.
            let phase_takes = ph.events.iter().any(|e| matches!(e, Event::Take { .. }));
            taken |= phase_takes && ph.loops != 1;
            for e in &ph.events {
                match e {
                    Event::Take { .. } => taken = true,
                    Event::Barrier(_) | Event::Fork(_) if taken => {
                        let task = join("tasks", &t.name);
                        let at =
                            if ph.name.is_empty() { task } else { join(&join(&task, "phases"), &ph.name) };
                        return Err(cannot(
                            &at,
                            "a barrier or fork after a take: the thread may end at the take (its pool empty) and never reach it",
                        ));
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// rt-app keeps a timer's mode on the timer, not on each use: once one use says `absolute`,
/// every use of that timer is absolute (a shared timer's uses in every task; a thread's own,
/// `unique…`, timer's in its task).
fn timer_modes(def: &mut ProgramDef) {
    // A shared timer is one for every task; a thread's own is one per task.
    let key = |i: usize, timer: Timer| match timer {
        Timer::Shared(_) => (usize::MAX, timer),
        own => (i, own),
    };
    let absolute: HashSet<(usize, Timer)> = events(def)
        .filter_map(|(i, e)| match e {
            Event::Timer { timer, absolute: true, .. } => Some(key(i, timer)),
            _ => None,
        })
        .collect();
    for (i, t) in def.tasks.iter_mut().enumerate() {
        for e in t.phases.iter_mut().flat_map(|p| p.events.iter_mut()) {
            if let Event::Timer { timer, absolute: a, .. } = e {
                *a |= absolute.contains(&key(i, *timer));
            }
        }
    }
}

/// Every event of every task, with its task's index.
fn events(def: &ProgramDef) -> impl Iterator<Item = (usize, Event)> + '_ {
    def.tasks
        .iter()
        .enumerate()
        .flat_map(|(i, t)| t.phases.iter().flat_map(move |p| p.events.iter().map(move |e| (i, *e))))
}

pub mod linux;

#[cfg(test)]
mod tests;
