//! The `boot` scenario: every CPU online and ticking, an IPI to each CPU and back.

use super::{check_invariants, finish, ncpus, wait_until, EXIT_FAILED};
use crate::arch::{self, MAX_CPUS};
use crate::kprintln;
use crate::sched;

pub(super) fn boot() {
    // kmain starts scenarios only once every CPU is online.
    let n = ncpus();
    let all_online = (0..n).map(|c| sched::cpu_figures(c).online_ns).max().unwrap_or(0);
    kprintln!("boot: all {} CPUs online, the last at {} us", n, all_online / 1000);
    let t = arch::now_ns();
    let base: [u64; MAX_CPUS] = core::array::from_fn(|c| sched::cpu_figures(c).ticks);
    if sched::nohz() {
        kprintln!("boot: nohz=on, idle CPUs do not tick: tick check skipped");
    } else if !wait_until(t + 2_000_000_000, || (0..n).all(|c| sched::cpu_figures(c).ticks >= base[c] + 3)) {
        for c in 0..n {
            kprintln!("boot: cpu {} ticks {}", c, sched::cpu_figures(c).ticks);
        }
        defmt::error!("boot: FAIL not every CPU ticked 3 times within 2 s");
        arch::exit(EXIT_FAILED);
    } else {
        kprintln!(
            "boot: every CPU ticks (hz={}), 3 ticks each after {} us",
            sched::hz(),
            (arch::now_ns() - t) / 1000
        );
    }
    for c in 0..n {
        let before = sched::pongs();
        let t = arch::now_ns();
        sched::send_ipi(sched::IPI_PING, c);
        if !wait_until(t + 1_000_000_000, || sched::pongs() > before) {
            defmt::error!("boot: FAIL no answer to the IPI sent to CPU {}", c);
            arch::exit(EXIT_FAILED);
        }
        let rtt = arch::now_ns() - t;
        kprintln!(
            "boot: cpu {} online at {} us, pings received {}, IPI round trip {} us",
            c,
            sched::cpu_figures(c).online_ns / 1000,
            sched::cpu_figures(c).pings,
            rtt / 1000
        );
    }
    if !check_invariants("boot") {
        arch::exit(EXIT_FAILED);
    }
    kprintln!("boot: OK ({} CPUs, boot to all online {} us)", n, all_online / 1000);
    finish(true)
}
