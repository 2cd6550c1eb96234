//! The kernel thread pool: one [`Thread`] per slot, and a slot is its task's payload, so a
//! task picked by the core names its thread directly (no `TaskId` → thread map). Creating a
//! thread, joining threads, parking and unparking, and what the reports read of a thread.

use portable_atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst},
};

use sched_core::{CpuMask, Policy, SchedError, TaskId, TaskParams};

use super::cpu::{current_thread, CPUS};
use super::stats::STATS;
use super::{hooks, with_core};
use crate::arch::{self, MAX_CPUS, MAX_THREADS};

/// Park state of a thread: an unpark that found it running (`token`), or it is blocked in
/// the core waiting for one (`parked`).
#[derive(Clone, Copy)]
pub(super) struct Park {
    pub(super) token: bool,
    pub(super) parked: bool,
}

/// One kernel thread's state, in its slot of [`THREADS`] (the slot is its task's payload).
pub(super) struct Thread {
    /// The slot holds a thread (claimed by `spawn`, released when its task is gone).
    pub(super) used: AtomicBool,
    /// Its saved exception frame while it is not running.
    pub(super) frame: AtomicUsize,
    /// Its task's id (`TaskId::to_raw`).
    pub(super) task: AtomicU64,
    /// Its workload's kind (the scenario's number for it).
    pub(super) kind: AtomicUsize,
    /// Allowed CPUs as the kernel asked the core (bit per CPU); during an affinity change,
    /// the intersection of the old and the new mask.
    pub(super) affinity: AtomicU64,
    /// CPUs it was switched in on (bit per CPU), since its creation.
    pub(super) ran_on: AtomicU64,
    /// CPU time (ns): switch-in to switch-out, counter time, since its creation.
    pub(super) cpu_ns: AtomicU64,
    /// Wake-up deadline (ns) while it is blocked in `sys_sleep`; 0 when not sleeping.
    pub(super) sleep_until: AtomicU64,
    /// Bumped when a thread is created in the slot and when it exits, so it is odd while the
    /// slot's thread lives; a waiter compares against the value it saw.
    pub(super) epoch: AtomicU64,
    /// The threads waiting for this one to exit, a bit per slot (several may wait for one).
    pub(super) joiners: AtomicU64,
    /// When it was last made runnable (created or woken; 0: not waiting to start).
    pub(super) ready_at: AtomicU64,
    /// Its last start lag (ns): from its last creation or wakeup to its switch-in
    /// (`u64::MAX`: forgotten).
    pub(super) last_lag: AtomicU64,
    /// Its park state. The lock is taken before any core lock (the lock order:
    /// [`arch::Lock`]).
    pub(super) park: arch::Lock<Park>,
}

impl Thread {
    /// An empty slot.
    const fn empty() -> Thread {
        Thread {
            used: AtomicBool::new(false),
            frame: AtomicUsize::new(0),
            task: AtomicU64::new(0),
            kind: AtomicUsize::new(0),
            affinity: AtomicU64::new(0),
            ran_on: AtomicU64::new(0),
            cpu_ns: AtomicU64::new(0),
            sleep_until: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            joiners: AtomicU64::new(0),
            ready_at: AtomicU64::new(0),
            last_lag: AtomicU64::new(0),
            park: arch::Lock::new(Park { token: false, parked: false }),
        }
    }

    /// Its task's id.
    pub(super) fn task_id(&self) -> TaskId {
        TaskId::from_raw(self.task.load(Relaxed))
    }
}

/// Every thread's state, by slot.
pub(super) static THREADS: [Thread; MAX_THREADS] = [const { Thread::empty() }; MAX_THREADS];

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
        .find(|&i| THREADS[i].used.compare_exchange(false, true, Acquire, Relaxed).is_ok())
        .ok_or(SpawnError::NoThreadSlot)?;
    let t = &THREADS[slot];
    let frame = arch::init_thread_frame(slot, thread_start, kind, arg);
    t.frame.store(frame, Release);
    t.kind.store(kind, Relaxed);
    t.affinity.store(affinity, Relaxed);
    t.ran_on.store(0, Relaxed);
    t.cpu_ns.store(0, Relaxed);
    t.sleep_until.store(0, Relaxed);
    *t.park.lock() = Park { token: false, parked: false };
    t.joiners.store(0, SeqCst);
    t.epoch.fetch_add(1, SeqCst);
    let params = TaskParams { nice, policy: Policy::Normal, affinity: cpu_mask(affinity) };
    // The slot goes with the task: a CPU that picks it at once already knows its thread, and
    // records the task's id for it at the switch. So the id is stored here only if no switch
    // did it first: by then the thread may even have exited and the slot held a newer task.
    let stale = t.task.load(Relaxed);
    let created = with_core(|k| k.create(cpu, now, params, slot as u32));
    match created {
        Ok(id) => {
            let _ = t.task.compare_exchange(stale, id.to_raw(), AcqRel, Relaxed);
            Ok(slot)
        }
        Err(e) => {
            t.epoch.fetch_add(1, SeqCst);
            t.used.store(false, Release);
            Err(SpawnError::Core(e))
        }
    }
}

extern "C" fn thread_start(kind: usize, arg: usize) -> ! {
    (hooks().thread_main)(kind, arg);
    arch::sys_exit()
}

/// Blocks the calling thread until every live thread in `slots` (a bit per slot) has
/// exited. Threads that already exited, or slots with no thread, count as done. Several
/// threads may wait for the same one.
pub fn wait_threads(slots: u64) {
    const _: () = assert!(MAX_THREADS <= u64::BITS as usize, "a bit per slot in `slots` and `joiners`");
    let Some(me) = current_thread() else { return };
    let mut seen = [0u64; MAX_THREADS];
    let mut waiting = 0u64;
    for s in (0..MAX_THREADS).filter(|s| slots >> s & 1 != 0) {
        let e = THREADS[s].epoch.load(SeqCst);
        if e % 2 == 1 && s != me {
            seen[s] = e;
            waiting |= 1 << s;
            THREADS[s].joiners.fetch_or(1 << me, SeqCst);
        }
    }
    // An exit between the snapshot and the registration is caught by the epoch check; one
    // after it unparks us (or leaves a token, so the park returns at once).
    while (0..MAX_THREADS).any(|s| waiting >> s & 1 != 0 && THREADS[s].epoch.load(SeqCst) == seen[s]) {
        arch::sys_park();
    }
}

/// Makes thread `t` runnable if parked, else leaves it a token. False if `t` is no thread.
pub(super) fn unpark(cpu: usize, now: u64, t: usize) -> bool {
    if t >= MAX_THREADS || !THREADS[t].used.load(Acquire) {
        return false;
    }
    let mut p = THREADS[t].park.lock();
    if p.parked {
        p.parked = false;
        let id = THREADS[t].task_id();
        if let Err(e) = with_core(|k| k.wake(cpu, now, id)) {
            panic!("wake of {:?} refused: {:?}", id, e);
        }
    } else {
        p.token = true;
    }
    true
}

/// The core's CPU mask of a kernel mask (bit per CPU).
pub(super) fn cpu_mask(bits: u64) -> CpuMask {
    let mut mask = CpuMask::first_n(0);
    for c in (0..MAX_CPUS).filter(|c| bits >> c & 1 != 0) {
        mask = mask.with(c);
    }
    mask
}

/// Releases slot `t` once its task is gone.
pub(super) fn free_thread(t: usize) {
    THREADS[t].used.store(false, Release);
}

/// Gives thread `slot` an EEVDF slice of `ns` (0: the machine's default; else 0.1–100 ms).
#[cfg(not(target_arch = "arm"))]
pub fn set_slice(slot: usize, ns: u64) -> Result<(), SchedError> {
    let id = TaskId::from_raw(THREADS.get(slot).map_or(0, |t| t.task.load(Relaxed)));
    with_core(|k| k.set_slice(arch::cpu_id(), arch::now_ns(), id, ns))
}

/// Kernel threads in use (slots taken).
pub fn threads_in_use() -> usize {
    THREADS.iter().filter(|t| t.used.load(Acquire)).count()
}

/// CPU time of thread `slot` (ns) up to its last switch-out.
pub fn thread_cpu_ns(slot: usize) -> u64 {
    THREADS.get(slot).map_or(0, |t| t.cpu_ns.load(Relaxed))
}

/// CPU time of thread `slot` (ns) including the current stint if it is running now. Not
/// atomic: a switch-out between the reads can count up to that stint twice.
pub fn thread_cpu_ns_now(slot: usize) -> u64 {
    let _irq = arch::IrqGuard::mask();
    let now = arch::now_ns();
    let running = (0..MAX_CPUS).find(|&c| CPUS[c].current.load(Relaxed) == slot);
    let stint = running.map_or(0, |c| now.saturating_sub(STATS.cpu[c].switch_in.load(Relaxed)));
    thread_cpu_ns(slot) + stint
}

/// The CPUs thread `slot` was switched in on (bit per CPU).
pub fn thread_ran_on(slot: usize) -> u64 {
    THREADS.get(slot).map_or(0, |t| t.ran_on.load(Relaxed))
}
