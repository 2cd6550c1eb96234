//! Interrupts for ports whose IPIs carry no number (riscv64: the SBI's IPI; Cortex-M: PendSV
//! and the SSE-200's message handling unit): the sender marks the kind in the target's
//! pending word, then raises the machine's one IPI; the target takes the kinds one by one. The
//! port's `irq_ack` answers the tick or the next kind as an [`Irq`].

use portable_atomic::{AtomicU32, Ordering};

use super::{IRQ_NUMBER_IPI, IRQ_NUMBER_TIMER, MAX_CPUS};

/// IPI kinds pending per CPU (bit per kind), set before the interrupt that announces them.
static PENDING: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Marks IPI `kind` pending on `cpu` (before the port raises the interrupt).
pub(super) fn mark(cpu: usize, kind: u32) {
    PENDING[cpu.min(MAX_CPUS - 1)].fetch_or(1 << (kind & 31), Ordering::Release);
}

/// Takes the lowest pending kind of `cpu`, if any.
pub(super) fn take(cpu: usize) -> Option<Irq> {
    let word = &PENDING[cpu.min(MAX_CPUS - 1)];
    let kinds = word.load(Ordering::Acquire);
    if kinds == 0 {
        return None;
    }
    let k = kinds.trailing_zeros();
    word.fetch_and(!(1 << k), Ordering::AcqRel);
    Some(Irq::Ipi(k))
}

/// Whether `cpu` has kinds pending.
#[cfg_attr(not(target_arch = "riscv64"), allow(dead_code))]
pub(super) fn any(cpu: usize) -> bool {
    PENDING[cpu.min(MAX_CPUS - 1)].load(Ordering::Acquire) != 0
}

/// Forgets `cpu`'s kinds (its bring-up).
pub(super) fn clear(cpu: usize) {
    PENDING[cpu.min(MAX_CPUS - 1)].store(0, Ordering::Relaxed);
}

/// A pending interrupt (nothing to end: [`irq_eoi`] does nothing).
pub enum Irq {
    /// The tick.
    Timer,
    /// An IPI of this kind.
    Ipi(u32),
}

impl Irq {
    /// Its number in the port's numbering (`scause` code, exception number).
    pub fn number(&self) -> u32 {
        match self {
            Irq::Timer => IRQ_NUMBER_TIMER,
            Irq::Ipi(_) => IRQ_NUMBER_IPI,
        }
    }

    /// Whether it is the tick.
    pub fn is_timer(&self) -> bool {
        matches!(self, Irq::Timer)
    }

    /// The IPI kind, if it is an IPI.
    pub fn ipi(&self) -> Option<u32> {
        match self {
            Irq::Ipi(k) => Some(*k),
            Irq::Timer => None,
        }
    }
}

/// Ends an interrupt: nothing to do (the port cleared its source before the kinds were read).
pub fn irq_eoi(_irq: Irq) {}
