//! The host between the machine and sched-core's porter's API (`sched_core::port::Scheduler`).
//!
//! - [`porting`]: the porting recipe, the part a port copies: the platform object, the one
//!   way to the core, CPU bring-up, and the one path every interrupt and system call leaves
//!   through, where a CPU switches to whatever the core picked;
//! - `cpu`: each CPU's state beside the core (running thread, idle frame, handler and tick
//!   flags), one `Cpu` per CPU;
//! - `thread`: the kernel thread pool, one `Thread` per slot (each task's payload is its
//!   thread's slot, so there is no `TaskId` → thread map);
//! - `syscalls`: the system calls, and the sleepers the tick wakes;
//! - `watchdog`: the hung-CPU check every tick makes;
//! - `stats`: the counters the reports and the suite's judges read, fed by the recipe's
//!   event and switch hooks;
//! - here: the scheduler object, the boot switches, the tick grid and the workloads' hooks.
//!
//! Every call into the core happens with IRQs masked on the calling CPU (inside an
//! exception handler, during boot, or from a thread through `with_core`), so an interrupt
//! can never spin on a runqueue lock its own CPU holds.

use portable_atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed},
};

use sched_core::port::Scheduler;
use sched_core::Features;

use crate::arch::{self, MAX_CPUS};

mod cpu;
#[cfg(not(target_arch = "arm"))]
mod groups;
mod porting;
mod stats;
mod syscalls;
mod thread;
mod watchdog;

pub use cpu::{current_thread, is_tickless};
#[cfg(not(target_arch = "arm"))]
pub use groups::{
    create_group, delete_group, group_bandwidth, group_tasks, move_thread, set_group_max, set_group_weight,
};
pub use porting::{cpu_online, exception, exception_exit, idle_wait, with_core};
pub use stats::{cpu_figures, forget_start_lag, last_start_lag, totals, CpuFigures, Totals};
pub use syscalls::sleepers;
#[cfg(not(target_arch = "arm"))]
pub use thread::set_slice;
pub use thread::{
    spawn, thread_cpu_ns, thread_cpu_ns_now, thread_ran_on, threads_in_use, wait_threads, SpawnError,
};
pub use watchdog::{set_watchdog_ticks, DEFAULT_WATCHDOG_TICKS, EXIT_WATCHDOG, MAX_WATCHDOG_TICKS};

/// Task-table size of the core.
#[cfg(not(target_arch = "arm"))]
pub const TASKS: usize = 256;
/// Runnable tasks per CPU, and the slots of the group entities (`groups::GROUPS`).
#[cfg(not(target_arch = "arm"))]
pub const QLEN: usize = 64 + groups::GROUPS;
/// Task groups besides the root: a virt board's core has them (`scenario=groups`), a
/// microcontroller's does not (its core is built without the `groups` feature).
#[cfg(not(target_arch = "arm"))]
const KGROUPS: usize = groups::GROUPS;
#[cfg(target_arch = "arm")]
const KGROUPS: usize = 0;
/// Task-table size of the core on a microcontroller (its 8 threads and room to spare).
#[cfg(target_arch = "arm")]
pub const TASKS: usize = 16;
/// Runnable tasks per CPU on a microcontroller.
#[cfg(target_arch = "arm")]
pub const QLEN: usize = 16;
/// The scheduler this kernel runs (sched-core's `Smp` behind the porter's API), its locks
/// spinning with `yield` (see `arch::YieldRelax`).
pub type Kernel = Scheduler<
    KPlatform,
    MAX_CPUS,
    TASKS,
    QLEN,
    crate::arch::YieldRelax,
    { sched_core::port::DEFAULT_EVENTS },
    KGROUPS,
>;

/// What the host calls in the workloads it runs. The workloads register them once at boot
/// ([`set_hooks`]); the host never names a workload.
pub struct Hooks {
    /// The body of every kernel thread, by kind and argument (as given to [`spawn`]).
    pub thread_main: fn(kind: usize, arg: usize),
    /// After each tick on a CPU, at time `now`.
    pub on_tick: fn(cpu: usize, now: u64),
    /// After each switch on a CPU, with the kind of the thread now running (`None`: idle).
    pub on_switch: fn(cpu: usize, now: u64, kind: Option<usize>),
}

/// Nothing to call before the workloads register theirs.
const NO_HOOKS: Hooks = Hooks { thread_main: |_, _| {}, on_tick: |_, _| {}, on_switch: |_, _, _| {} };

static HOOKS: spin::Once<Hooks> = spin::Once::new();

/// Registers the workloads' hooks (boot, before the first thread is spawned); later calls
/// change nothing.
pub fn set_hooks(hooks: Hooks) {
    HOOKS.call_once(|| hooks);
}

fn hooks() -> &'static Hooks {
    HOOKS.get().unwrap_or(&NO_HOOKS)
}

/// IPI asking a CPU to reschedule.
pub const IPI_RESCHED: u32 = 0;
/// IPI of the boot scenario's round trip (to the target CPU).
pub const IPI_PING: u32 = 1;
/// IPI answering a ping (back to CPU 0).
pub const IPI_PONG: u32 = 2;
/// IPI kinds every CPU takes (on aarch64 the IPIs of these numbers).
pub const IPIS: [u32; 3] = [IPI_RESCHED, IPI_PING, IPI_PONG];

/// The platform the core calls back into.
pub struct KPlatform;

/// Pong IPIs CPU 0 received.
static PONGS: AtomicU64 = AtomicU64::new(0);
/// CPUs online.
static ONLINE: AtomicUsize = AtomicUsize::new(0);

/// Pong IPIs CPU 0 received (the boot scenario's round trips).
pub fn pongs() -> u64 {
    PONGS.load(Acquire)
}

/// CPUs online.
pub fn online() -> usize {
    ONLINE.load(Acquire)
}

/// Idle CPUs stop their tick (`nohz=on`).
static NOHZ: AtomicBool = AtomicBool::new(false);

/// Whether idle CPUs stop their tick.
pub fn nohz() -> bool {
    NOHZ.load(Relaxed)
}

/// Turns tickless idle on or off (boot, before the CPUs idle).
pub fn set_nohz(on: bool) {
    NOHZ.store(on, Relaxed);
}

/// `trace=on`: log every context switch (`trace: switch ...`), wakeup (`trace: waking ...`),
/// new-task placement (`trace: new ...`) and migration (`trace: migrate ...`), for the host's
/// trace writer and for reading placement decisions.
static TRACE: AtomicBool = AtomicBool::new(false);

/// `idle_yield=on` (the default): a CPU that leaves idle for a task executes one `yield`
/// before resuming it. On hardware this hint costs nothing. Under QEMU's deterministic
/// mode one host thread runs the vCPUs in turn and a busy vCPU keeps it until the next
/// timer deadline, so when one CPU wakes tasks onto several idle CPUs, each of those would
/// start only at a later deadline, one per deadline; with the yield the woken vCPUs all
/// start in one pass, as they would on parallel hardware.
static IDLE_EXIT_YIELD: AtomicBool = AtomicBool::new(true);

/// Sets `idle_yield` (boot).
pub fn set_idle_exit_yield(on: bool) {
    IDLE_EXIT_YIELD.store(on, Relaxed);
}

/// Turns switch tracing on or off.
pub fn set_trace(on: bool) {
    TRACE.store(on, Relaxed);
}

/// The HZ values a kernel can be booted with (Linux's CONFIG_HZ choices).
pub const HZ_CHOICES: [u32; 4] = [100, 250, 300, 1000];
/// `hz=` unless given (Linux's CONFIG_HZ default).
pub const DEFAULT_HZ: u32 = sched_core::smp::DEFAULT_HZ;
/// The scheduler: built with the defaults, it is all zeros and lives in `.bss`; boot sets
/// its HZ before `init`. Every call into it, the handlers' included, goes through
/// [`with_core`] (in a handler, masking again costs three system register accesses); only
/// the `Platform` callbacks, which run inside core calls, and boot, before any CPU takes an
/// interrupt, name it directly.
static SCHEDULER: Kernel = Scheduler::new(KPlatform, Features::DEFAULT, DEFAULT_HZ);

/// Sets the scheduler's HZ at boot (one of [`HZ_CHOICES`]); false if unsupported.
pub fn select_hz(hz: u32) -> bool {
    HZ_CHOICES.contains(&hz) && SCHEDULER.set_hz(hz).is_ok()
}

/// `skew=on` (the default): CPU c's ticks are offset by c/n of a period, so the n CPUs'
/// ticks never fall on the same instant (Linux's `skew_tick=1` offsets by c/n of half a
/// period). Besides spreading the tick work, this matters under QEMU's deterministic mode,
/// where one host thread runs the vCPUs in turn and a busy vCPU keeps running until the next
/// timer deadline of any vCPU: with aligned ticks there is one deadline per period, so a
/// vCPU that was just sent work waits whole ticks for its turn (one more vCPU starts per
/// tick); with skewed ticks there are n deadlines per period.
static SKEW: AtomicBool = AtomicBool::new(true);
/// CPUs the ticks are skewed over.
static SKEW_CPUS: AtomicUsize = AtomicUsize::new(1);

/// Sets tick skew (boot, before any CPU arms its tick) for `ncpus` CPUs.
pub fn set_skew(on: bool, ncpus: usize) {
    SKEW.store(on, Relaxed);
    SKEW_CPUS.store(ncpus.max(1), Relaxed);
}

/// Arms `cpu`'s tick for the next point of its tick grid after now. Every CPU's ticks lie on
/// one grid (period 1/HZ, plus the CPU's skew), whether it ticked last period or leaves
/// tickless idle, so handler latency never makes the ticks drift apart or together.
pub fn arm_tick(cpu: usize) {
    let period = (arch::counter_freq() / hz() as u64).max(1);
    let offset = if SKEW.load(Relaxed) { period * cpu as u64 / SKEW_CPUS.load(Relaxed) as u64 } else { 0 };
    let now = arch::counter();
    let next = if now < offset { offset } else { ((now - offset) / period + 1) * period + offset };
    arch::timer_arm_at(next, period);
}

/// The tick rate.
pub fn hz() -> u32 {
    SCHEDULER.hz()
}

/// Every call into the core keeps the porter's contract: its own CPU, brought up, with IRQs
/// masked (`with_core`), a switch finished before the next, time above 0. A refusal on those
/// grounds would be a bug of this kernel.
const OUR_CPU: &str = "the kernel calls the core as the porter's contract asks";

/// Sends IPI `kind` to `cpu`.
pub fn send_ipi(kind: u32, cpu: usize) {
    arch::send_ipi(cpu.min(MAX_CPUS - 1), kind);
}

/// Switches the core's features at run time (every CPU's next decision sees them).
pub fn set_features(f: Features) {
    with_core(|k| k.set_features(f));
}

/// The core's features now.
pub fn features() -> Features {
    with_core(|k| k.features())
}

/// Tasks on `cpu`'s runqueue (running and queued), as the core publishes it.
pub fn nr_running(cpu: usize) -> u32 {
    with_core(|k| k.stats(cpu).map_or(0, |s| s.nr_running))
}
