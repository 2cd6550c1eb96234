//! Workloads as data. A workload is an rt-app JSON file (the subset in [`rtapp`]), lowered on
//! the host to a [`Program`]: a compact, validated word array that the simulator and the
//! bare-metal kernel both execute. The kernel receives the encoded program from the runner and
//! checks it again ([`Program::parse`]) before it runs anything, so a malformed program is a
//! typed error there, never a panic.
//!
//! ```
//! # #[cfg(feature = "std")] {
//! let json = r#"{ "global": { "duration": 1, "calibration": 100 },
//!                 "tasks": { "spin": { "instance": 2, "loop": -1,
//!                     "phases": { "p": { "run0": 1000, "sleep0": 500 } } } } }"#;
//! let words = sched_workload::rtapp::lower(json).unwrap().encode();
//! let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
//! let program = sched_workload::Program::parse(&bytes).unwrap();
//! assert_eq!(program.threads(), 2);
//! # }
//! ```
#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "std")]
pub mod figures;
mod format;
pub mod interp;
#[cfg(feature = "std")]
mod json;
pub mod limits;
#[cfg(feature = "std")]
pub mod rtapp;
#[cfg(feature = "std")]
pub mod sysbench;

#[cfg(feature = "std")]
pub use format::{seal, PhaseDef, PoolDef, ProgramDef, TaskDef};

/// `text` made fit for a one-line message: its control characters and line separators (a
/// line break in a task's name or a JSON key, say) written as escapes, so that a refusal stays
/// one line and a file cannot print a line of its own; past 400 characters (a key of a
/// megabyte), its start and its end with how much was left out between.
///
/// ```
/// assert_eq!(sched_workload::one_line("a\nb\tc\u{2028}"), "a\\nb\\tc\\u{2028}");
/// let long = sched_workload::one_line(&format!("key {}: unknown", "k".repeat(100_000)));
/// assert!(long.len() < 500 && long.starts_with("key kkk") && long.ends_with("kkk: unknown"));
/// ```
#[cfg(feature = "std")]
pub fn one_line(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| match c {
            // (Unicode's own line and paragraph separators break a line too.)
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect();
    // A line of a screen or two: a key of a megabyte keeps its start and the message's end.
    let chars = line.chars().count();
    if chars <= ONE_LINE_MAX {
        return line;
    }
    let (head, tail) = (ONE_LINE_MAX / 2, ONE_LINE_MAX / 4);
    let start: String = line.chars().take(head).collect();
    let end: String = line.chars().skip(chars - tail).collect();
    format!("{start} … ({} characters left out) … {end}", chars - head - tail)
}

/// The most characters [`one_line`] keeps of a message.
#[cfg(feature = "std")]
const ONE_LINE_MAX: usize = 400;
pub use format::{Event, FormatError, PhaseView, Program, TaskView, Timer, PHASE_FOREVER};
pub use interp::{Activation, Host, Step, ThreadId, World};
