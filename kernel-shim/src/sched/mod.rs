//! The host between the machine and sched-core's porter's API (`sched_core::port::Scheduler`).
//! The porting recipe — the platform object, the one way to the core, CPU bring-up, and the
//! one path every interrupt and syscall leaves through, where a CPU switches to whatever the
//! core picked — is [`porting`]; this module holds what it runs on: the kernel thread pool
//! (each task's payload is its thread's slot, so there is no `TaskId` → thread map), the
//! per-thread accounting, sleep, the watchdog, the workloads' hooks and the figures they read.
//!
//! Every call into the core happens with IRQs masked on the calling CPU (inside an
//! exception handler, during boot, or from a thread through `with_core`), so an interrupt
//! can never spin on a runqueue lock its own CPU holds.

use portable_atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

use sched_core::port::Scheduler;
use sched_core::{
    CpuMask, Event, EventKind, Features, MigrateReason, Platform, Policy, SchedError, TaskId, TaskParams,
};

use sched_core::Outcome;

use crate::arch::{self, ExcKind, Frame, MAX_CPUS, MAX_THREADS};

mod porting;

use porting::smp;
pub use porting::{cpu_online, exception, idle_wait, with_core};

/// Task-table size of the core.
#[cfg(not(target_arch = "arm"))]
pub const TASKS: usize = 256;
/// Runnable tasks per CPU.
#[cfg(not(target_arch = "arm"))]
pub const QLEN: usize = 64;
/// Task-table size of the core on a microcontroller (its 8 threads and room to spare).
#[cfg(target_arch = "arm")]
pub const TASKS: usize = 16;
/// Runnable tasks per CPU on a microcontroller.
#[cfg(target_arch = "arm")]
pub const QLEN: usize = 16;
/// The scheduler this kernel runs (sched-core's `Smp` behind the porter's API), its locks
/// spinning with `yield` (see `arch::YieldRelax`).
pub type Kernel = Scheduler<KPlatform, MAX_CPUS, TASKS, QLEN, crate::arch::YieldRelax>;

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

const NONE: usize = usize::MAX;

/// The platform the core calls back into.
pub struct KPlatform;

/// Counters of one CPU, for reports (read through [`cpu_figures`]).
struct CpuCounters {
    /// Timer ticks handled.
    ticks: AtomicU64,
    /// Reschedule IPIs received.
    resched_ipis: AtomicU64,
    /// Reschedule IPIs sent to this CPU.
    resched_sent: AtomicU64,
    /// Ping IPIs received.
    pings: AtomicU64,
    /// Context switches (to a different thread or idle).
    switches: AtomicU64,
    /// Tasks that migrated to this CPU.
    migrations_in: AtomicU64,
    /// Load-balance passes made by this CPU (a pass may have several rounds).
    balance_runs: AtomicU64,
    /// Tasks those passes moved.
    balance_moved: AtomicU64,
    /// Passes by outcome: not designated, balanced, moved, nothing detachable, all pinned,
    /// active balance requested; then rounds that handed over: redirected, retried.
    balance_outcomes: [AtomicU64; 8],
    /// When the CPU came online (ns), 0 while offline.
    online_ns: AtomicU64,
    /// Time spent in the exception handler (IRQs, syscalls, switches), total (ns).
    handler_ns: AtomicU64,
    /// Longest single handler run (ns).
    handler_max_ns: AtomicU64,
}

/// Per-CPU counters.
static CPU: [CpuCounters; MAX_CPUS] = [const {
    CpuCounters {
        ticks: AtomicU64::new(0),
        resched_ipis: AtomicU64::new(0),
        resched_sent: AtomicU64::new(0),
        pings: AtomicU64::new(0),
        switches: AtomicU64::new(0),
        migrations_in: AtomicU64::new(0),
        balance_runs: AtomicU64::new(0),
        balance_moved: AtomicU64::new(0),
        balance_outcomes: [const { AtomicU64::new(0) }; 8],
        online_ns: AtomicU64::new(0),
        handler_ns: AtomicU64::new(0),
        handler_max_ns: AtomicU64::new(0),
    }
}; MAX_CPUS];

/// All migrations so far.
static MIGRATIONS: AtomicU64 = AtomicU64::new(0);
/// Migrations by reason: wakeup, placement, balance, active balance, affinity.
static MIGRATIONS_BY_REASON: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
/// Wakeups of blocked threads so far, and how many of them the core placed on a CPU that
/// had nothing else queued or running (the wakee found an idle CPU).
static WAKEUPS: AtomicU64 = AtomicU64::new(0);
/// See [`WAKEUPS`].
static WAKEUPS_ONTO_IDLE: AtomicU64 = AtomicU64::new(0);
/// Pong IPIs CPU 0 received.
static PONGS: AtomicU64 = AtomicU64::new(0);
/// CPUs online.
static ONLINE: AtomicUsize = AtomicUsize::new(0);

/// One CPU's counters, as plain numbers (each read on its own, not one snapshot).
#[derive(Clone, Copy, Default)]
pub struct CpuFigures {
    /// Timer ticks handled.
    pub ticks: u64,
    /// Reschedule IPIs received.
    pub resched_ipis: u64,
    /// Reschedule IPIs sent to this CPU.
    pub resched_sent: u64,
    /// Ping IPIs received.
    pub pings: u64,
    /// Context switches (to a different thread or idle).
    pub switches: u64,
    /// Tasks that migrated to this CPU.
    pub migrations_in: u64,
    /// Load-balance passes made by this CPU.
    pub balance_runs: u64,
    /// Tasks those passes moved.
    pub balance_moved: u64,
    /// Passes by outcome (see the counters' order in the report).
    pub balance_outcomes: [u64; 8],
    /// When the CPU came online (ns), 0 while offline.
    pub online_ns: u64,
    /// Time in the exception handler, total and longest single run (ns).
    pub handler_ns: u64,
    /// See `handler_ns`.
    pub handler_max_ns: u64,
}

/// `cpu`'s counters.
pub fn cpu_figures(cpu: usize) -> CpuFigures {
    let c = &CPU[cpu.min(MAX_CPUS - 1)];
    let get = |a: &AtomicU64| a.load(Relaxed);
    CpuFigures {
        ticks: get(&c.ticks),
        resched_ipis: get(&c.resched_ipis),
        resched_sent: get(&c.resched_sent),
        pings: get(&c.pings),
        switches: get(&c.switches),
        migrations_in: get(&c.migrations_in),
        balance_runs: get(&c.balance_runs),
        balance_moved: get(&c.balance_moved),
        balance_outcomes: core::array::from_fn(|i| get(&c.balance_outcomes[i])),
        online_ns: get(&c.online_ns),
        handler_ns: get(&c.handler_ns),
        handler_max_ns: get(&c.handler_max_ns),
    }
}

/// Machine-wide counters, as plain numbers.
#[derive(Clone, Copy, Default)]
pub struct Totals {
    /// All migrations so far.
    pub migrations: u64,
    /// Migrations by reason: wakeup, placement, balance, active balance, affinity.
    pub migrations_by_reason: [u64; 5],
    /// Wakeups of blocked threads, and how many found their CPU otherwise empty.
    pub wakeups: u64,
    /// See `wakeups`.
    pub wakeups_onto_idle: u64,
    /// Switch-ins of a thread on a CPU outside its affinity.
    pub affinity_violations: u64,
    /// The first such switch-in: (thread slot, CPU).
    pub first_violation: Option<(u64, u64)>,
    /// Start lag: how long a thread made runnable (created or woken) waited until a CPU
    /// switched to it, ns: how many starts were timed, their sum and the longest.
    pub start_lag: (u64, u64, u64),
    /// Wake-up lag: how long an idle CPU handed a thread (a new one placed there, or a
    /// wakeup) took to switch to a thread, ns: count, sum, longest. The machine's part of
    /// the start lag, whatever the scheduler then picks.
    pub wake_lag: (u64, u64, u64),
}

/// The machine-wide counters.
pub fn totals() -> Totals {
    Totals {
        migrations: MIGRATIONS.load(Relaxed),
        migrations_by_reason: core::array::from_fn(|i| MIGRATIONS_BY_REASON[i].load(Relaxed)),
        wakeups: WAKEUPS.load(Relaxed),
        wakeups_onto_idle: WAKEUPS_ONTO_IDLE.load(Relaxed),
        affinity_violations: AFFINITY_VIOLATIONS.load(Relaxed),
        first_violation: match FIRST_VIOLATION.load(Relaxed) {
            0 => None,
            f => Some(((f - 1) >> 8, (f - 1) & 0xff)),
        },
        start_lag: (START_LAGS.load(Relaxed), START_LAG_SUM.load(Relaxed), START_LAG_MAX.load(Relaxed)),
        wake_lag: (WAKE_LAGS.load(Relaxed), WAKE_LAG_SUM.load(Relaxed), WAKE_LAG_MAX.load(Relaxed)),
    }
}

/// When each thread was last made runnable (created or woken; 0: not waiting to start).
static T_READY_AT: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];
static START_LAGS: AtomicU64 = AtomicU64::new(0);
static START_LAG_SUM: AtomicU64 = AtomicU64::new(0);
static START_LAG_MAX: AtomicU64 = AtomicU64::new(0);

/// Thread `slot` (a task's payload) became runnable at `time`: the clock of its start lag.
fn ready(slot: Option<u32>, time: u64) {
    if let Some(t) = T_READY_AT.get(slot.map_or(usize::MAX, |s| s as usize)) {
        t.store(time.max(1), Relaxed);
    }
}

/// When each idle CPU was first handed a thread since it last ran one (0: not waiting).
static HANDED_AT: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static WAKE_LAGS: AtomicU64 = AtomicU64::new(0);
static WAKE_LAG_SUM: AtomicU64 = AtomicU64::new(0);
static WAKE_LAG_MAX: AtomicU64 = AtomicU64::new(0);

/// CPU `cpu` was handed a thread at `time`: if it is idle, its wake-up lag starts (the first
/// hand-over counts; later ones wait no longer than it).
fn handed(cpu: usize, time: u64) {
    if let (Some(c), Some(at)) = (CURRENT.get(cpu), HANDED_AT.get(cpu)) {
        if c.load(Relaxed) == NONE {
            let _ = at.compare_exchange(0, time.max(1), Relaxed, Relaxed);
        }
    }
}

/// Idle CPU `cpu` picked at `now`: a thread (`ran`), which ends its wake-up lag, if one
/// runs; or nothing, when another CPU took the thread first, which drops it uncounted.
fn woke(cpu: usize, now: u64, ran: bool) {
    let Some(at) = HANDED_AT.get(cpu) else { return };
    let at = at.swap(0, Relaxed);
    if at != 0 && ran {
        let lag = now.saturating_sub(at);
        WAKE_LAGS.fetch_add(1, Relaxed);
        WAKE_LAG_SUM.fetch_add(lag, Relaxed);
        WAKE_LAG_MAX.fetch_max(lag, Relaxed);
    }
}

/// Each thread's last start lag (ns): from its last creation or wakeup to its switch-in.
static T_LAST_LAG: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];

/// Thread `slot`'s last start lag (ns): read by the thread itself after a sleep, its
/// wake-to-run time; `None` if it has not been switched in since [`forget_start_lag`].
pub fn last_start_lag(slot: usize) -> Option<u64> {
    T_LAST_LAG.get(slot).map(|t| t.load(Relaxed)).filter(|&l| l != u64::MAX)
}

/// Forgets thread `slot`'s last start lag (before it sleeps, so that after the sleep
/// [`last_start_lag`] is that wakeup's or nothing).
pub fn forget_start_lag(slot: usize) {
    if let Some(t) = T_LAST_LAG.get(slot) {
        t.store(u64::MAX, Relaxed);
    }
}

/// Thread `slot` is switched in at `now`: ends its start lag, if one was running.
fn started(slot: usize, now: u64) {
    let Some(t) = T_READY_AT.get(slot) else { return };
    let at = t.swap(0, Relaxed);
    if at != 0 {
        let lag = now.saturating_sub(at);
        T_LAST_LAG[slot].store(lag, Relaxed);
        START_LAGS.fetch_add(1, Relaxed);
        START_LAG_SUM.fetch_add(lag, Relaxed);
        START_LAG_MAX.fetch_max(lag, Relaxed);
    }
}

/// Pong IPIs CPU 0 received (the boot scenario's round trips).
pub fn pongs() -> u64 {
    PONGS.load(Acquire)
}

/// CPUs online.
pub fn online() -> usize {
    ONLINE.load(Acquire)
}

static IN_HANDLER: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// A reschedule request for this CPU arrived inside its handler (at the end of one of its
/// own core calls) and sent no interrupt: the handler's exit looks again before it returns.
static RESCHED_LATE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
static CURRENT: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(NONE) }; MAX_CPUS];
static IDLE_FRAME: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
/// Idle CPUs stop their tick (`nohz=on`).
static NOHZ: AtomicBool = AtomicBool::new(false);
/// This CPU's tick is stopped.
static TICKLESS: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

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

/// The pid of a task in trace lines: its thread slot (the task's payload) + 1. (The payload
/// is stored before the task is queued, so every event can name its thread; the task table's
/// lock is never held while a callback runs.)
fn trace_pid(id: TaskId) -> u32 {
    smp().payload(id).map_or(0, |slot| slot + 1)
}

/// Turns switch tracing on or off.
pub fn set_trace(on: bool) {
    TRACE.store(on, Relaxed);
}

static T_USED: [AtomicBool; MAX_THREADS] = [const { AtomicBool::new(false) }; MAX_THREADS];
static T_FRAME: [AtomicUsize; MAX_THREADS] = [const { AtomicUsize::new(0) }; MAX_THREADS];
static T_TASK: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];
static T_KIND: [AtomicUsize; MAX_THREADS] = [const { AtomicUsize::new(0) }; MAX_THREADS];
/// Allowed CPUs of each thread as the kernel asked the core (bit per CPU); during an
/// affinity change, the intersection of the old and the new mask.
static T_AFF: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];
/// CPUs each thread was switched in on (bit per CPU), since its creation.
static T_RAN_ON: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];
/// CPU time of each thread (ns): switch-in to switch-out, counter time, since its creation.
static T_CPU_NS: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];
/// Wake-up deadline (ns) of a thread blocked in `sys_sleep`; 0 when not sleeping.
static T_SLEEP_UNTIL: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];
/// Per slot: bumped when a thread is created in it and when it exits, so it is odd while the
/// slot's thread lives; a waiter compares against the value it saw.
static T_EPOCH: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];
/// Per slot: the thread waiting for this one to exit (`NONE`: nobody).
static T_JOINER: [AtomicUsize; MAX_THREADS] = [const { AtomicUsize::new(NONE) }; MAX_THREADS];
/// Threads blocked in `sys_sleep`.
static SLEEPERS: AtomicUsize = AtomicUsize::new(0);
/// When the thread running on each CPU was switched in (ns).
static SWITCH_IN: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// Switch-ins of a thread on a CPU outside its affinity.
static AFFINITY_VIOLATIONS: AtomicU64 = AtomicU64::new(0);
/// The first such switch-in: `thread << 8 | cpu`, plus 1; 0 if none.
static FIRST_VIOLATION: AtomicU64 = AtomicU64::new(0);

/// `watchdog=` unless given: 250 ticks, 1 s at the default HZ.
pub const DEFAULT_WATCHDOG_TICKS: u32 = 250;
/// Largest `watchdog=`.
pub const MAX_WATCHDOG_TICKS: u32 = 100_000;
/// Watchdog: a CPU whose tick is running must tick within this many ticks (0: off).
static WATCHDOG_TICKS: AtomicU64 = AtomicU64::new(DEFAULT_WATCHDOG_TICKS as u64);
/// Each CPU's last tick (ns), its heartbeat; set when it comes online, 0 before.
static HEARTBEAT_NS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static WATCHDOG_FIRED: AtomicBool = AtomicBool::new(false);
/// When each CPU entered the exception handler it is in (ns); 0 outside.
static HANDLER_SINCE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// The CPU waits in its idle loop's `wfi` with IRQs enabled; cleared by the next exception.
static WAITING: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// Exit code when the watchdog finds a hung CPU.
pub const EXIT_WATCHDOG: u32 = 5;

/// Sets the watchdog period in ticks (0 turns it off); boot, before the CPUs tick.
pub fn set_watchdog_ticks(ticks: u32) {
    WATCHDOG_TICKS.store(ticks as u64, Relaxed);
}

/// Park state of each thread: an unpark that found it running (`token`), or it is blocked
/// in the core waiting for one (`parked`). The lock is taken before any core lock.
#[derive(Clone, Copy)]
struct Park {
    token: bool,
    parked: bool,
}

static PARK: [arch::Lock<Park>; MAX_THREADS] =
    [const { arch::Lock::new(Park { token: false, parked: false }) }; MAX_THREADS];

/// The HZ values a kernel can be booted with (Linux's CONFIG_HZ choices).
pub const HZ_CHOICES: [u32; 4] = [100, 250, 300, 1000];
/// `hz=` unless given (Linux's CONFIG_HZ default).
pub const DEFAULT_HZ: u32 = sched_core::smp::DEFAULT_HZ;
/// The scheduler: built with the defaults, it is all zeros and lives in `.bss`; boot sets
/// its HZ before `init`.
static SMP: Kernel = Scheduler::new(KPlatform, Features::DEFAULT, DEFAULT_HZ);

/// Sets the scheduler's HZ at boot (one of [`HZ_CHOICES`]); false if unsupported.
pub fn select_hz(hz: u32) -> bool {
    HZ_CHOICES.contains(&hz) && SMP.set_hz(hz).is_ok()
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
    SMP.hz()
}

/// Every call into the core keeps the porter's contract: its own CPU, brought up, with IRQs
/// masked (`with_core`), a switch finished before the next, time above 0. A refusal on those
/// grounds would be a bug of this kernel.
const OUR_CPU: &str = "the kernel calls the core as the porter's contract asks";

/// Logs a wakeup, new task or migration for `trace=on`. (Events reach the platform at the
/// end of a call, maybe another CPU's, so the logging CPU is not named.)
fn trace_event(event: &Event) {
    match event.kind {
        EventKind::Waking { task, .. } => defmt::info!(
            "trace: waking cpu={=usize} t={=u64} pid={=u32}",
            event.cpu,
            event.time,
            trace_pid(task)
        ),
        EventKind::NewTask { task } => {
            defmt::info!(
                "trace: new cpu={=usize} t={=u64} pid={=u32}",
                event.cpu,
                event.time,
                trace_pid(task)
            )
        }
        EventKind::Migrate { task, from, reason } => defmt::info!(
            "trace: migrate cpu={=usize} t={=u64} pid={=u32} from={=usize} reason={=str}",
            event.cpu,
            event.time,
            trace_pid(task),
            from,
            match reason {
                MigrateReason::Wakeup => "wakeup",
                MigrateReason::Placement => "placement",
                MigrateReason::Balance => "balance",
                MigrateReason::ActiveBalance => "active",
                MigrateReason::Affinity => "affinity",
            }
        ),
        _ => {}
    }
}

/// Sends IPI `kind` to `cpu`.
pub fn send_ipi(kind: u32, cpu: usize) {
    arch::send_ipi(cpu.min(MAX_CPUS - 1), kind);
}

/// Why a thread could not be created.
#[derive(Debug, Clone, Copy)]
pub enum SpawnError {
    /// All kernel thread slots are in use.
    NoThreadSlot,
    /// The core refused the task.
    Core(SchedError),
}

/// Creates a kernel thread running the workloads' `thread_main(kind, arg)` and makes it a
/// task of the core, created by the task running on `cpu`. Call with IRQs masked.
pub fn spawn(
    cpu: usize,
    now: u64,
    kind: usize,
    arg: usize,
    nice: i32,
    affinity: u64,
) -> Result<usize, SpawnError> {
    let slot = (0..MAX_THREADS)
        .find(|&i| T_USED[i].compare_exchange(false, true, Acquire, Relaxed).is_ok())
        .ok_or(SpawnError::NoThreadSlot)?;
    let frame = arch::init_thread_frame(slot, thread_start, kind, arg);
    T_FRAME[slot].store(frame, Release);
    T_KIND[slot].store(kind, Relaxed);
    T_AFF[slot].store(affinity, Relaxed);
    T_RAN_ON[slot].store(0, Relaxed);
    T_CPU_NS[slot].store(0, Relaxed);
    T_SLEEP_UNTIL[slot].store(0, Relaxed);
    *PARK[slot].lock() = Park { token: false, parked: false };
    T_JOINER[slot].store(NONE, SeqCst);
    T_EPOCH[slot].fetch_add(1, SeqCst);
    let params = TaskParams { nice, policy: Policy::Normal, affinity: cpu_mask(affinity) };
    // The slot goes with the task: a CPU that picks it at once already knows its thread, and
    // records the task's id for it at the switch. So the id is stored here only if no switch
    // did it first: by then the thread may even have exited and the slot held a newer task.
    let stale = T_TASK[slot].load(Relaxed);
    let created = with_core(|k| k.create(cpu, now, params, slot as u32));
    match created {
        Ok(id) => {
            let _ = T_TASK[slot].compare_exchange(stale, id.to_raw(), AcqRel, Relaxed);
            Ok(slot)
        }
        Err(e) => {
            T_EPOCH[slot].fetch_add(1, SeqCst);
            T_USED[slot].store(false, Release);
            Err(SpawnError::Core(e))
        }
    }
}

/// Blocks the calling thread until every live thread in `slots` (a bit per slot) has
/// exited. Threads that already exited, or slots with no thread, count as done.
pub fn wait_threads(slots: u64) {
    let Some(me) = current_thread() else { return };
    let mut seen = [0u64; MAX_THREADS];
    let mut waiting = 0u64;
    for s in (0..MAX_THREADS).filter(|s| slots >> s & 1 != 0) {
        let e = T_EPOCH[s].load(SeqCst);
        if e % 2 == 1 && s != me {
            seen[s] = e;
            waiting |= 1 << s;
            T_JOINER[s].store(me, SeqCst);
        }
    }
    // An exit between the snapshot and the registration is caught by the epoch check; one
    // after it unparks us (or leaves a token, so the park returns at once).
    while (0..MAX_THREADS).any(|s| waiting >> s & 1 != 0 && T_EPOCH[s].load(SeqCst) == seen[s]) {
        arch::sys_park();
    }
}

/// Makes thread `t` runnable if parked, else leaves it a token. False if `t` is no thread.
fn unpark(cpu: usize, now: u64, t: usize) -> bool {
    if t >= MAX_THREADS || !T_USED[t].load(Acquire) {
        return false;
    }
    let mut p = PARK[t].lock();
    if p.parked {
        p.parked = false;
        let id = TaskId::from_raw(T_TASK[t].load(Relaxed));
        if let Err(e) = with_core(|k| k.wake(cpu, now, id)) {
            panic!("wake of {:?} refused: {:?}", id, e);
        }
    } else {
        p.token = true;
    }
    true
}

fn cpu_mask(bits: u64) -> CpuMask {
    let mut mask = CpuMask::first_n(0);
    for c in (0..MAX_CPUS).filter(|c| bits >> c & 1 != 0) {
        mask = mask.with(c);
    }
    mask
}

fn free_thread(t: usize) {
    T_USED[t].store(false, Release);
}

/// The calling thread's slot (`None` outside a thread).
pub fn current_thread() -> Option<usize> {
    // Masked, the thread cannot move between reading the CPU id and that CPU's current.
    let _irq = arch::IrqGuard::mask();
    match CURRENT[arch::cpu_id()].load(Relaxed) {
        NONE => None,
        t => Some(t),
    }
}

/// Gives thread `slot` an EEVDF slice of `ns` (0: the machine's default; else 0.1–100 ms).
#[cfg(not(target_arch = "arm"))]
pub fn set_slice(slot: usize, ns: u64) -> Result<(), sched_core::SchedError> {
    let id = TaskId::from_raw(T_TASK.get(slot).map_or(0, |t| t.load(Relaxed)));
    with_core(|k| k.set_slice(arch::cpu_id(), arch::now_ns(), id, ns))
}

/// Switches the core's features at run time (every CPU's next decision sees them).
pub fn set_features(f: sched_core::Features) {
    with_core(|k| k.set_features(f));
}

/// The core's features now.
pub fn features() -> sched_core::Features {
    with_core(|k| k.features())
}

/// Kernel threads in use (slots taken).
pub fn threads_in_use() -> usize {
    T_USED.iter().filter(|u| u.load(Acquire)).count()
}

/// CPU time of thread `slot` (ns) up to its last switch-out.
pub fn thread_cpu_ns(slot: usize) -> u64 {
    T_CPU_NS.get(slot).map_or(0, |t| t.load(Relaxed))
}

/// CPU time of thread `slot` (ns) including the current stint if it is running now. Not
/// atomic: a switch-out between the reads can count up to that stint twice.
pub fn thread_cpu_ns_now(slot: usize) -> u64 {
    let _irq = arch::IrqGuard::mask();
    let now = arch::now_ns();
    let running = (0..MAX_CPUS).find(|&c| CURRENT[c].load(Relaxed) == slot);
    let stint = running.map_or(0, |c| now.saturating_sub(SWITCH_IN[c].load(Relaxed)));
    thread_cpu_ns(slot) + stint
}

/// The CPUs thread `slot` was switched in on (bit per CPU).
pub fn thread_ran_on(slot: usize) -> u64 {
    T_RAN_ON.get(slot).map_or(0, |t| t.load(Relaxed))
}

/// Threads blocked in `sys_sleep`.
pub fn sleepers() -> usize {
    SLEEPERS.load(Relaxed)
}

extern "C" fn thread_start(kind: usize, arg: usize) -> ! {
    (hooks().thread_main)(kind, arg);
    arch::sys_exit()
}

/// Wakes every thread whose `sys_sleep` deadline passed (on any CPU's tick).
fn wake_sleepers(cpu: usize, now: u64) {
    for (t, until) in T_SLEEP_UNTIL.iter().enumerate() {
        let d = until.load(Acquire);
        if d != 0 && d <= now && until.compare_exchange(d, 0, AcqRel, Relaxed).is_ok() {
            SLEEPERS.fetch_sub(1, Release);
            let id = TaskId::from_raw(T_TASK[t].load(Relaxed));
            if let Err(e) = with_core(|k| k.wake(cpu, now, id)) {
                panic!("wake of sleeping {:?} refused: {:?}", id, e);
            }
        }
    }
}

/// On every tick: checks that every other CPU whose tick runs (online, not tickless) ticked
/// within the watchdog period; if not, logs the hung CPU and exits with [`EXIT_WATCHDOG`].
fn watchdog_check(cpu: usize, now: u64) {
    let ticks = WATCHDOG_TICKS.load(Relaxed);
    if ticks == 0 {
        return;
    }
    let limit = ticks * 1_000_000_000 / hz() as u64;
    for c in (0..MAX_CPUS).filter(|&c| c != cpu) {
        // A CPU leaving tickless idle stores its heartbeat before clearing TICKLESS.
        if TICKLESS[c].load(Acquire) {
            continue;
        }
        let hb = HEARTBEAT_NS[c].load(Acquire);
        if hb == 0 || now <= hb || now - hb <= limit {
            continue;
        }
        // A CPU waiting in `wfi` with IRQs enabled is not hung, however late its tick: under
        // QEMU's icount mode an idle vCPU's timer interrupt waits while another vCPU runs.
        // (A CPU stuck with IRQs masked, or in a handler, is never marked waiting.)
        if WAITING[c].load(Acquire) {
            continue;
        }
        if WATCHDOG_FIRED.swap(true, AcqRel) {
            return;
        }
        defmt::error!(
            "watchdog: CPU {} hung (last heartbeat at {} us, {} us ago, limit {} ticks = {} us; noticed by CPU {})",
            c,
            hb / 1000,
            (now - hb) / 1000,
            ticks,
            limit / 1000,
            cpu
        );
        for (o, since) in
            HANDLER_SINCE.iter().enumerate().filter(|&(o, _)| HEARTBEAT_NS[o].load(Relaxed) != 0)
        {
            let since = since.load(Relaxed);
            let t = CURRENT[o].load(Relaxed);
            defmt::error!(
                "watchdog: cpu {}: last tick {} us ago, {}, in a handler for {} us (0: not in one), thread {} kind {}",
                o,
                now.saturating_sub(HEARTBEAT_NS[o].load(Relaxed)) / 1000,
                if TICKLESS[o].load(Relaxed) { "tickless" } else { "ticking" },
                if since == 0 { 0 } else { now.saturating_sub(since) / 1000 },
                if t == NONE { -1 } else { t as i64 },
                if t == NONE { -1 } else { T_KIND[t].load(Relaxed) as i64 }
            );
        }
        arch::exit(EXIT_WATCHDOG);
    }
}

/// Whether `cpu` stopped its tick (tickless idle).
pub fn is_tickless(cpu: usize) -> bool {
    TICKLESS[cpu.min(MAX_CPUS - 1)].load(Relaxed)
}

/// Tasks on `cpu`'s runqueue (running and queued), as the core publishes it.
pub fn nr_running(cpu: usize) -> u32 {
    with_core(|k| k.stats(cpu).map_or(0, |s| s.nr_running))
}
