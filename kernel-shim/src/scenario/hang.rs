//! The `hang` scenario: a thread spins with IRQs masked until the watchdog fires.

use super::{ncpus, ThreadKind, EXIT_FAILED};
use crate::arch;
use crate::kprintln;
use crate::sched;

pub(super) fn hang_main(cpu: u32) {
    let n = ncpus() as u32;
    let other = (cpu + 1) % n;
    kprintln!(
        "hang: a thread on CPU {} masks IRQs and spins; a busy thread keeps CPU {} ticking; the watchdog must exit {}",
        cpu,
        other,
        sched::EXIT_WATCHDOG
    );
    if arch::sys_spawn(ThreadKind::Busy.number(), 0, 0, 1 << other) < 0
        || arch::sys_spawn(ThreadKind::Hang.number(), 0, 0, 1 << cpu) < 0
    {
        defmt::error!("hang: FAIL cannot create the threads");
        arch::exit(EXIT_FAILED);
    }
}

/// Masks IRQs and spins forever: this CPU stops ticking.
pub(super) fn hang() {
    kprintln!("hang: CPU {} masks IRQs now", arch::cpu_id());
    let _irq = arch::IrqGuard::mask();
    loop {
        // `yield`, not `isb`: under icount an isb-spin makes guest time crawl.
        arch::relax();
    }
}
