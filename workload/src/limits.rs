//! The bounds every program keeps, checked by the host when it lowers a file and by the
//! kernel when it receives the encoded program.

/// Task definitions (rt-app `tasks` entries).
pub const MAX_TASKS: usize = 64;
/// Phases of one task.
pub const MAX_PHASES: usize = 64;
/// Events of one phase.
pub const MAX_EVENTS: usize = 64;
/// Mutexes, condition variables, barriers and timers, each.
pub const MAX_RESOURCES: usize = 64;
/// Timers each thread has of its own (`unique…` refs).
pub const MAX_THREAD_TIMERS: usize = 8;
/// Instances of one task.
pub const MAX_INSTANCES: u32 = 1024;
/// A workload file (bytes): ample for the largest program (64 KiB encoded), and bounding what
/// reading one costs.
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// The encoded program, in 32-bit words (64 KiB).
pub const MAX_WORDS: usize = 16 * 1024;
/// A run, runtime, sleep, timer period or start delay (µs): 10 s.
pub const MAX_EVENT_US: u32 = 10_000_000;
/// A workload's `duration` (µs): one hour.
pub const MAX_DURATION_US: u64 = 3_600_000_000;
/// A task's or a phase's loop count (besides -1, forever, for a task).
pub const MAX_LOOPS: u32 = 1_000_000;
/// Bytes of a task's name in the program: a longer name is refused, so that every platform's
/// rows (the simulator's read from the program, the kernel's and Linux's from the file) carry
/// the same names. (Linux cuts a thread's own name to 15 bytes; rt-app's tasks keep theirs.)
pub const NAME_BYTES: usize = 64;
/// The CPUs a `cpus` list may name (the widest kernel build's).
pub const MAX_CPU: u32 = 63;
/// The EEVDF slice a task may ask for (µs; 0 keeps the machine's default): sched-core's
/// bounds (`eevdf::checked_slice_ns`).
pub const MIN_SLICE_US: u32 = 100;
/// See [`MIN_SLICE_US`].
pub const MAX_SLICE_US: u32 = 100_000;
/// Events all of a program's `take` pools hold together (sysbench's `--events`): a platform
/// may keep a record of each.
pub const MAX_POOL_EVENTS: u32 = 1_000_000;
/// A pool's jitter: its events' work varies by up to this many percent either way.
pub const MAX_JITTER_PCT: u32 = 50;
/// A sysbench-like run's model of thread creation and of a worker's set-up (µs each): what
/// the kernel's `create_us=` and `setup_us=`, `cargo xrun` and `cargo xsim` take.
pub const MAX_MODEL_US: u32 = 100_000;
