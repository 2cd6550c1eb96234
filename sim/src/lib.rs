//! # sched-sim
//!
//! A deterministic multi-CPU machine model that drives `sched-core`'s [`sched_core::Smp`]
//! through the calls the porter's API makes underneath (tick, schedule/finish_switch, create,
//! block, wake, exit), so every scheduling decision is the core's own code. CPUs run truly in parallel in
//! virtual time, which is what neither QEMU mode can show on a 2-core host: the throughput and
//! tail-latency effect of spreading.
//!
//! Same configuration and seed → the same results and the same trace, byte for byte.

#![deny(unsafe_code)]

mod arch;
pub mod cli;
pub mod experiments;
pub mod groups;
pub mod machine;
pub mod picture;
pub mod rng;
pub mod stats;
pub mod story;
pub mod trace;
pub mod trace_check;

pub use experiments::{ab, run_once, spread, AbTable, Workload};
pub use machine::{Behavior, Config, Machine, RunReport, TopologyKind};
