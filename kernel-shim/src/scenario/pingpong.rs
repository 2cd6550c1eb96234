//! The `pingpong` scenario: pairs of threads wake each other through park/unpark.

use portable_atomic::{
    AtomicBool, AtomicU32,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use sched_core::MigrateReason;

use super::{
    check_invariants, finish, ncpus, record_latency, report_cpus, report_latency, ThreadKind, EXIT_FAILED,
    MAX_PAIRS, T0,
};
use crate::arch;
use crate::kprintln;
use crate::sched;

static PP_PAIRS: AtomicU32 = AtomicU32::new(0);
static PP_ROUNDS: AtomicU32 = AtomicU32::new(0);
static PP_READY: AtomicBool = AtomicBool::new(false);
static PP_SLOT: [[AtomicU32; 2]; MAX_PAIRS as usize] =
    [const { [AtomicU32::new(0), AtomicU32::new(0)] }; MAX_PAIRS as usize];
static PP_COUNT: [[AtomicU32; 2]; MAX_PAIRS as usize] =
    [const { [AtomicU32::new(0), AtomicU32::new(0)] }; MAX_PAIRS as usize];
static PP_FINISHED: AtomicU32 = AtomicU32::new(0);

pub(super) fn pingpong_main(pairs: u32, rounds: u32) {
    PP_PAIRS.store(pairs, Relaxed);
    PP_ROUNDS.store(rounds, Relaxed);
    kprintln!("pingpong: {} pairs, {} round trips each, {} CPUs, hz={}", pairs, rounds, ncpus(), sched::hz());
    T0.store(arch::now_ns(), Release);
    for (i, slots) in PP_SLOT.iter().enumerate().take(pairs as usize) {
        for (side, kind) in [ThreadKind::Ping, ThreadKind::Pong].into_iter().enumerate() {
            let slot = arch::sys_spawn(kind.number(), i, 0, u64::MAX);
            if slot < 0 {
                defmt::error!("pingpong: FAIL cannot create thread {} of pair {}", side, i);
                arch::exit(EXIT_FAILED);
            }
            slots[side].store(slot as u32, Relaxed);
        }
    }
    PP_READY.store(true, Release);
}

fn wait_ready() {
    while !PP_READY.load(Acquire) {
        arch::relax();
    }
}

/// Starts every round: wakes its partner, then blocks until woken back.
pub(super) fn ping(i: usize) {
    wait_ready();
    let partner = PP_SLOT[i][1].load(Relaxed) as usize;
    for _ in 0..PP_ROUNDS.load(Relaxed) {
        let t = arch::now_ns();
        if !arch::sys_unpark(partner) {
            defmt::error!("pingpong: FAIL pair {} lost its partner", i);
            arch::exit(EXIT_FAILED);
        }
        arch::sys_park();
        record_latency(arch::now_ns() - t);
        PP_COUNT[i][0].fetch_add(1, Relaxed);
    }
    pingpong_finished();
}

/// Answers every round: blocks until woken, then wakes its partner.
pub(super) fn pong(i: usize) {
    wait_ready();
    let partner = PP_SLOT[i][0].load(Relaxed) as usize;
    for _ in 0..PP_ROUNDS.load(Relaxed) {
        arch::sys_park();
        PP_COUNT[i][1].fetch_add(1, Relaxed);
        if !arch::sys_unpark(partner) {
            defmt::error!("pingpong: FAIL pair {} lost its partner", i);
            arch::exit(EXIT_FAILED);
        }
    }
    pingpong_finished();
}

fn pingpong_finished() {
    let pairs = PP_PAIRS.load(Relaxed);
    if PP_FINISHED.fetch_add(1, AcqRel) + 1 < 2 * pairs {
        return;
    }
    let total = arch::now_ns() - T0.load(Relaxed);
    let rounds = PP_ROUNDS.load(Relaxed);
    let mut ok = true;
    for (i, c) in PP_COUNT.iter().enumerate().take(pairs as usize) {
        let (a, b) = (c[0].load(Relaxed), c[1].load(Relaxed));
        if a != rounds || b != rounds {
            defmt::error!("pingpong: FAIL pair {}: {} pings, {} pongs, expected {}", i, a, b, rounds);
            ok = false;
        }
    }
    kprintln!("pingpong: {} round trips in {} us", pairs * rounds, total / 1000);
    // Wakee placement: where the core put each woken thread.
    kprintln!(
        "pingpong: wakee placement: {} wakeups, {} onto an idle CPU, {} moved to another CPU",
        sched::totals().wakeups,
        sched::totals().wakeups_onto_idle,
        sched::totals().migrations_by_reason[MigrateReason::Wakeup.index()]
    );
    report_latency("pingpong", "round trip", pairs * rounds);
    ok &= check_invariants("pingpong");
    report_cpus("pingpong", ncpus());
    kprintln!("pingpong: {}", if ok { "OK" } else { "FAIL" });
    finish(ok)
}
