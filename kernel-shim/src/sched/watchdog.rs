//! The watchdog: on every tick a CPU checks that every other CPU whose tick runs ticked
//! within the period (`watchdog=` ticks); a hung CPU ends the run with [`EXIT_WATCHDOG`] and
//! every CPU's state in the log.

use portable_atomic::{
    AtomicBool, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed},
};

use super::cpu::{CPUS, NONE};
use super::hz;
use super::thread::THREADS;
use crate::arch::{self, MAX_CPUS};

/// `watchdog=` unless given: 250 ticks, 1 s at the default HZ.
pub const DEFAULT_WATCHDOG_TICKS: u32 = 250;
/// Largest `watchdog=`.
pub const MAX_WATCHDOG_TICKS: u32 = 100_000;
/// Exit code when the watchdog finds a hung CPU.
pub const EXIT_WATCHDOG: u32 = 5;

/// A CPU whose tick is running must tick within this many ticks (0: off).
static WATCHDOG_TICKS: AtomicU64 = AtomicU64::new(DEFAULT_WATCHDOG_TICKS as u64);
/// Set by the first CPU that reports a hung one (the others stay quiet).
static WATCHDOG_FIRED: AtomicBool = AtomicBool::new(false);

/// Sets the watchdog period in ticks (0 turns it off); boot, before the CPUs tick.
pub fn set_watchdog_ticks(ticks: u32) {
    WATCHDOG_TICKS.store(ticks as u64, Relaxed);
}

/// On every tick of `cpu`: checks that every other CPU whose tick runs (online, not
/// tickless) ticked within the watchdog period; if not, logs the hung CPU and exits with
/// [`EXIT_WATCHDOG`].
pub(super) fn watchdog_check(cpu: usize, now: u64) {
    let ticks = WATCHDOG_TICKS.load(Relaxed);
    if ticks == 0 {
        return;
    }
    let limit = ticks * 1_000_000_000 / hz() as u64;
    for c in (0..MAX_CPUS).filter(|&c| c != cpu) {
        let other = &CPUS[c];
        // A CPU leaving tickless idle stores its heartbeat before clearing `tickless`.
        if other.tickless.load(Acquire) {
            continue;
        }
        let hb = other.heartbeat_ns.load(Acquire);
        if hb == 0 || now <= hb || now - hb <= limit {
            continue;
        }
        // A CPU waiting in `wfi` with IRQs enabled is not hung, however late its tick: under
        // QEMU's icount mode an idle vCPU's timer interrupt waits while another vCPU runs.
        // (A CPU stuck with IRQs masked, or in a handler, is never marked waiting.)
        if other.waiting.load(Acquire) {
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
        report_cpus(now);
        arch::exit(EXIT_WATCHDOG);
    }
}

/// Logs every online CPU's tick, handler and thread, for the watchdog's report.
fn report_cpus(now: u64) {
    for (o, c) in CPUS.iter().enumerate().filter(|(_, c)| c.heartbeat_ns.load(Relaxed) != 0) {
        let since = c.handler_since.load(Relaxed);
        let t = c.current.load(Relaxed);
        defmt::error!(
            "watchdog: cpu {}: last tick {} us ago, {}, in a handler for {} us (0: not in one), thread {} kind {}",
            o,
            now.saturating_sub(c.heartbeat_ns.load(Relaxed)) / 1000,
            if c.tickless.load(Relaxed) { "tickless" } else { "ticking" },
            if since == 0 { 0 } else { now.saturating_sub(since) / 1000 },
            if t == NONE { -1 } else { t as i64 },
            if t == NONE { -1 } else { THREADS[t].kind.load(Relaxed) as i64 }
        );
    }
}
