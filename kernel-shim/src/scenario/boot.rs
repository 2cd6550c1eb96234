//! The `boot` scenario: every CPU online and ticking, an SGI to each CPU and back.

use super::*;

pub(super) fn boot() {
    // kmain starts scenarios only once every CPU is online.
    let n = ncpus();
    let all_online = (0..n).map(|c| CPU[c].online_ns.load(Relaxed)).max().unwrap_or(0);
    kprintln!("boot: all {} CPUs online, the last at {} us", n, all_online / 1000);
    let t = arch::now_ns();
    let base: [u64; MAX_CPUS] = core::array::from_fn(|c| CPU[c].ticks.load(Relaxed));
    if sched::nohz() {
        kprintln!("boot: nohz=on, idle CPUs do not tick: tick check skipped");
    } else if !wait_until(t + 2_000_000_000, || (0..n).all(|c| CPU[c].ticks.load(Relaxed) >= base[c] + 3)) {
        for (c, cc) in CPU.iter().enumerate().take(n) {
            kprintln!("boot: cpu {} ticks {}", c, cc.ticks.load(Relaxed));
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
    for (c, cc) in CPU.iter().enumerate().take(n) {
        let before = sched::PONGS.load(Acquire);
        let t = arch::now_ns();
        sched::send_sgi(sched::SGI_PING, c);
        if !wait_until(t + 1_000_000_000, || sched::PONGS.load(Acquire) > before) {
            defmt::error!("boot: FAIL no answer to the SGI sent to CPU {}", c);
            arch::exit(EXIT_FAILED);
        }
        let rtt = arch::now_ns() - t;
        kprintln!(
            "boot: cpu {} online at {} us, pings received {}, SGI round trip {} us",
            c,
            cc.online_ns.load(Relaxed) / 1000,
            cc.pings.load(Relaxed),
            rtt / 1000
        );
    }
    if !check_invariants("boot") {
        arch::exit(EXIT_FAILED);
    }
    kprintln!("boot: OK ({} CPUs, boot to all online {} us)", n, all_online / 1000);
    arch::exit(0);
}
