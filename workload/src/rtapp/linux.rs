//! A workload file as Debian's rt-app 1.0 reads it in the Linux guest: the same tasks, phases
//! and events in the same order, with the guest's logging added to `global`.

use super::{lower, RtAppError};
use crate::json::{self, Json};

/// Where the guest's rt-app writes its per-thread logs, and their name's start: the guest's
/// init prints `/tmp/rt-app-*.log` after each run.
const GUEST_LOG: [(&str, &str); 2] = [("logdir", "/tmp"), ("log_basename", "rt-app")];

/// A file's own settings of rt-app's logs and traces, left out of the guest's file (the
/// runner's log settings and tracing replace them).
const FILE_LOG: [&str; 5] = ["logdir", "log_basename", "log_size", "gnuplot", "ftrace"];

/// Events this project runs that Debian's rt-app 1.0 does not know (its binary names every
/// event it parses; `fork` came later; `take` and `join` are this project's).
const NOT_IN_DEBIAN: &[&str] = &["fork", "take", "join"];

/// Task keys of this project's that rt-app has not, and that Debian's Linux would ignore:
/// `slice`, a request CFS does not take (Linux 6.1 is CFS, and the simulator's and the
/// kernel's CFS ignore it too). The guest's file leaves them out, and says so.
const LEFT_OUT: &[&str] = &["slice"];

/// The file for the guest, and the keys left out of it (JSON paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestFile {
    /// The JSON rt-app reads.
    pub json: String,
    /// The keys left out (a task's `slice`), by JSON path.
    pub left_out: Vec<String>,
}

/// Every event key of event `event` (`fork`, `fork0`, as [`super::lower`] reads keys) of `tasks`, with its JSON path and
/// value: among a task's own keys and its phases' keys, where events are (a task or a phase
/// may have any name, and an event's value holds no event).
fn events_named<'a>(tasks: &'a [(String, Json)], event: &str) -> Vec<(String, &'a Json)> {
    let named = |k: &str| super::event_name(k) == Some(event);
    let mut found = Vec::new();
    let mut take = |keys: &'a [(String, Json)], at: &str| {
        found.extend(keys.iter().filter(|(k, _)| named(k)).map(|(k, v)| (format!("{at}.{k}"), v)));
    };
    for (t, v) in tasks {
        let Json::Object(keys) = v else { continue };
        let at = format!("tasks.{t}");
        take(keys, &at);
        for (k, v) in keys {
            if let ("phases", Json::Object(phases)) = (k.as_str(), v) {
                for (p, v) in phases {
                    if let Json::Object(keys) = v {
                        take(keys, &format!("{at}.phases.{p}"));
                    }
                }
            }
        }
    }
    found
}

/// The JSON path of the first event key named `event` of `tasks` ([`events_named`]).
fn find_event(tasks: &[(String, Json)], event: &str) -> Option<String> {
    events_named(tasks, event).into_iter().next().map(|(path, _)| path)
}

/// The longest `unique…` timer ref Debian's rt-app 1.0 keeps each thread's own: it names a
/// thread's timer by the ref and the thread's address in hex (12 digits) in 21 bytes, so a
/// longer ref loses digits and its threads may share one timer.
const UNIQUE_REF_BYTES: usize = 21 - 12;

/// `text` checked as [`lower`] checks it, then written back for rt-app 1.0 with the guest's
/// log settings in `global`, and `calibration` measured by rt-app at its start (`"CPU0"`):
/// the kernel and the simulator take a `run` of N µs as N µs of work at their CPU's own
/// speed, which on Linux is rt-app's own calibration. A task's `slice` is left out (CFS takes
/// no slice request). An event Debian's 1.0 lacks is refused ([`RtAppError::Unsupported`],
/// naming its path).
///
/// ```
/// let text = r#"{"global": {"calibration": 100}, "tasks": {"t": {"loop": 2, "run": 10}}}"#;
/// let guest = sched_workload::rtapp::linux::guest_json(text).unwrap();
/// assert!(guest.left_out.is_empty());
/// assert_eq!(guest.json, r#"{"global":{"calibration":"CPU0","logdir":"/tmp","log_basename":"rt-app"},"tasks":{"t":{"loop":2,"phases":{"p":{"run":10}}}}}"#);
/// ```
pub fn guest_json(text: &str) -> Result<GuestFile, RtAppError> {
    lower(text)?;
    // `lower` accepted it: it parses, and its top level is an object.
    let Ok(Json::Object(mut top)) = json::parse(text) else {
        return Err(super::bad("the file", "not an object"));
    };
    let mut left_out = Vec::new();
    // rt-app's defaults for a file without `global` log elsewhere: the guest's settings go in one.
    if !top.iter().any(|(k, _)| k == "global") {
        top.push(("global".into(), Json::Object(Vec::new())));
    }
    for (key, value) in top.iter_mut() {
        match (key.as_str(), value) {
            ("tasks", Json::Object(tasks)) => {
                refuse_what_rtapp_lacks(tasks)?;
                refuse_long_unique_refs(tasks)?;
                for (name, task) in tasks.iter_mut() {
                    let Json::Object(keys) = task else { continue };
                    keys.retain(|(k, _)| {
                        let keep = !LEFT_OUT.contains(&k.as_str());
                        if !keep {
                            left_out.push(format!("tasks.{name}.{k}"));
                        }
                        keep
                    });
                    in_one_phase(keys);
                }
            }
            ("global", Json::Object(global)) => {
                // The file's own log settings give way to the guest's, which the runner reads.
                global.retain(|(k, _)| !FILE_LOG.contains(&k.as_str()));
                match global.iter_mut().find(|(k, _)| k == "calibration") {
                    Some((_, v)) => *v = Json::String("CPU0".into()),
                    None => global.push(("calibration".into(), Json::String("CPU0".into()))),
                }
                global.extend(GUEST_LOG.iter().map(|(k, v)| (k.to_string(), Json::String(v.to_string()))));
            }
            _ => {}
        }
    }
    Ok(GuestFile { json: Json::Object(top).to_string(), left_out })
}

/// The keys of a task rather than of its events.
const TASK_KEYS: &[&str] = &["instance", "loop", "delay", "cpus", "priority", "policy", "phases"];

/// A task written without `phases` gets its events in one phase: rt-app 1.0 takes a phaseless
/// task's `loop` as its phase's and then loops the task forever (fixed upstream after 1.0).
/// Its `loop` stays the task's, but a count of 0 or less becomes -1: as the phase's it meant
/// until the end, where as the task's 0 would run nothing.
fn in_one_phase(keys: &mut Vec<(String, Json)>) {
    if keys.iter().any(|(k, _)| k == "phases") {
        return;
    }
    for (k, v) in keys.iter_mut() {
        if k == "loop" && matches!(v, Json::Number(n) if n.as_i64().is_some_and(|n| n <= 0)) {
            *v = Json::Number((-1).into());
        }
    }
    let (task, events): (Vec<_>, Vec<_>) = keys.drain(..).partition(|(k, _)| TASK_KEYS.contains(&k.as_str()));
    *keys = task;
    keys.push(("phases".into(), Json::Object(vec![("p".into(), Json::Object(events))])));
}

/// A `unique…` timer ref longer than [`UNIQUE_REF_BYTES`], refused: on Debian's rt-app its
/// threads might share the timer each has its own of on the other platforms.
fn refuse_long_unique_refs(tasks: &[(String, Json)]) -> Result<(), RtAppError> {
    for (path, v) in events_named(tasks, "timer") {
        let Json::Object(keys) = v else { continue };
        for (k, r) in keys {
            if let ("ref", Json::String(r)) = (k.as_str(), r) {
                if r.starts_with("unique") && r.len() > UNIQUE_REF_BYTES {
                    let why = format!(
                        "a unique timer ref past {UNIQUE_REF_BYTES} bytes: Debian's rt-app 1.0 cuts a thread's timer name to 21 bytes, and its threads could share it"
                    );
                    return Err(super::unsupported(&format!("{path}.ref"), why));
                }
            }
        }
    }
    Ok(())
}

/// The first event of `tasks` that Debian's rt-app cannot run, refused.
fn refuse_what_rtapp_lacks(tasks: &[(String, Json)]) -> Result<(), RtAppError> {
    for event in NOT_IN_DEBIAN {
        if let Some(path) = find_event(tasks, event) {
            let why = format!("Debian's rt-app 1.0 (the Linux guest) has no {event} event");
            return Err(super::unsupported(&path, why));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_debian_lacks_is_refused_with_its_path() {
        let text = r#"{"global": {"calibration": 100}, "tasks": {"p": {"loop": 1, "phases": {"a": {"run": 10, "fork1": "c"}}}, "c": {"instance": 0, "loop": 1, "run": 5}}}"#;
        assert!(lower(text).is_ok(), "the project runs it");
        let e = guest_json(text).unwrap_err();
        assert_eq!(e.exit_code(), 11);
        assert_eq!(
            e.to_string(),
            "tasks.p.phases.a.fork1: not supported: Debian's rt-app 1.0 (the Linux guest) has no fork event"
        );
        let take = r#"{"global": {"calibration": 100}, "tasks": {"p": {"loop": 1, "take": {"ref": "e", "size": 4, "run": 5}}}}"#;
        assert!(lower(take).is_ok(), "the project runs it");
        assert_eq!(
            guest_json(take).unwrap_err().to_string(),
            "tasks.p.take: not supported: Debian's rt-app 1.0 (the Linux guest) has no take event"
        );
        // A task or a phase may bear an event's name: only event keys are events.
        let named = r#"{"global": {"calibration": 100}, "tasks": {"take": {"loop": 1, "phases": {"join2": {"run": 10}}}}}"#;
        assert!(guest_json(named).is_ok());
    }

    /// A `unique` timer ref Debian's rt-app would cut (and so maybe share between threads)
    /// is refused for the guest, in a task's events or a phase's, whichever timer it is; one
    /// short enough is kept.
    #[test]
    fn a_unique_ref_rtapp_would_cut_is_refused() {
        let with = |phase_ref: &str| {
            format!(
                r#"{{"tasks": {{"p": {{"loop": 1, "phases": {{"a": {{"timer0": {{"ref": "unique", "period": 10}}, "run": 5, "timer1": {{"ref": "{phase_ref}", "period": 10}}}}}}}}}}}}"#
            )
        };
        assert!(guest_json(&with("unique_ab")).is_ok(), "9 bytes keep every digit");
        let e = guest_json(&with("unique_abc")).unwrap_err();
        assert_eq!(e.exit_code(), 11);
        assert!(
            e.to_string()
                .starts_with("tasks.p.phases.a.timer1.ref: not supported: a unique timer ref past 9 bytes"),
            "{e}"
        );
        assert!(guest_json(&with("shared_timer_ref")).is_ok(), "a shared timer's name is not cut");
    }

    #[test]
    fn a_slice_is_left_out_and_said() {
        let sliced =
            r#"{"global": {"calibration": 100}, "tasks": {"p": {"slice": 500, "loop": 1, "run": 10}}}"#;
        let g = guest_json(sliced).unwrap();
        assert_eq!(g.left_out, ["tasks.p.slice"]);
        assert!(!g.json.contains("slice"), "{}", g.json);
    }

    /// A phaseless task's `loop` of 0 runs until the end here, as in rt-app, where it is the
    /// phase's; the guest's file, which gives it a phase, says so with -1 at the task.
    #[test]
    fn a_phaseless_zero_loop_stays_endless_in_the_guest() {
        let text = r#"{"global": {"duration": 1}, "tasks": {"p": {"loop": 0, "run": 10}, "q": {"loop": 2, "run": 10}}}"#;
        let g = guest_json(text).unwrap();
        assert!(g.json.contains(r#""p":{"loop":-1,"phases":{"p":{"run":10}}}"#), "{}", g.json);
        assert!(g.json.contains(r#""q":{"loop":2,"phases""#), "{}", g.json);
        assert_eq!(super::super::lower(text).unwrap().tasks[0].loops, -1);
    }
}
