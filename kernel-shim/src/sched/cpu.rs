//! Each CPU's state as this kernel keeps it beside the core: which thread runs there, the
//! idle loop's frame, and the flags of its exception handler, its tick and its watchdog.

use portable_atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::arch::{self, MAX_CPUS};

/// No thread: the CPU runs its idle loop (in [`Cpu::current`]).
pub(super) const NONE: usize = usize::MAX;

/// One CPU's state, in its slot of [`CPUS`].
pub(super) struct Cpu {
    /// The thread slot running here ([`NONE`]: idle).
    pub(super) current: AtomicUsize,
    /// The idle loop's saved frame while a thread runs here.
    pub(super) idle_frame: AtomicUsize,
    /// The CPU is inside its exception handler.
    pub(super) in_handler: AtomicBool,
    /// A reschedule request for this CPU arrived inside its handler (at the end of one of its
    /// own core calls) and sent no interrupt: the handler's exit looks again before it returns.
    pub(super) resched_late: AtomicBool,
    /// Its tick is stopped (tickless idle).
    pub(super) tickless: AtomicBool,
    /// Its last tick (ns), the watchdog's heartbeat; set when it comes online, 0 before.
    pub(super) heartbeat_ns: AtomicU64,
    /// When it entered the exception handler it is in (ns); 0 outside.
    pub(super) handler_since: AtomicU64,
    /// It waits in its idle loop's `wfi` with IRQs enabled; cleared by the next exception.
    pub(super) waiting: AtomicBool,
}

impl Cpu {
    const fn new() -> Cpu {
        Cpu {
            current: AtomicUsize::new(NONE),
            idle_frame: AtomicUsize::new(0),
            in_handler: AtomicBool::new(false),
            resched_late: AtomicBool::new(false),
            tickless: AtomicBool::new(false),
            heartbeat_ns: AtomicU64::new(0),
            handler_since: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
        }
    }

    /// The thread running here, `None` when idle.
    pub(super) fn running(&self) -> Option<usize> {
        match self.current.load(Relaxed) {
            NONE => None,
            t => Some(t),
        }
    }
}

/// Every CPU's state, by CPU id.
pub(super) static CPUS: [Cpu; MAX_CPUS] = [const { Cpu::new() }; MAX_CPUS];

/// `cpu`'s state (ids past the machine's clamp to its last CPU).
pub(super) fn cpu(cpu: usize) -> &'static Cpu {
    &CPUS[cpu.min(MAX_CPUS - 1)]
}

/// Whether `cpu` stopped its tick (tickless idle).
pub fn is_tickless(c: usize) -> bool {
    cpu(c).tickless.load(Relaxed)
}

/// The calling thread's slot (`None` outside a thread).
pub fn current_thread() -> Option<usize> {
    // Masked, the thread cannot move between reading the CPU id and that CPU's current.
    let _irq = arch::IrqGuard::mask();
    CPUS[arch::cpu_id()].running()
}
