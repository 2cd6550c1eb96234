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

/// `text` made fit for a one-line message: its control characters (a line break in a task's
/// name or a JSON key, say) written as escapes, so that a refusal stays one line and a file
/// cannot print a line of its own.
///
/// ```
/// assert_eq!(sched_workload::one_line("a\nb\tc"), "a\\nb\\tc");
/// ```
#[cfg(feature = "std")]
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect()
}
pub use format::{Event, FormatError, PhaseView, Program, TaskView, Timer, PHASE_FOREVER};
pub use interp::{Activation, Host, Step, ThreadId, World};
