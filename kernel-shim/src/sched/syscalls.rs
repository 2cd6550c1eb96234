//! The kernel's system calls, each a call into the core for the thread that made it (its
//! task's id is its slot's), and the sleepers the tick wakes.

use portable_atomic::{
    AtomicUsize,
    Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst},
};

use super::cpu::{CPUS, NONE};
use super::thread::{cpu_mask, spawn, unpark, THREADS};
use super::{with_core, OUR_CPU};
use crate::arch::{self, Frame, MAX_THREADS};

/// Threads blocked in `sys_sleep`.
static SLEEPERS: AtomicUsize = AtomicUsize::new(0);

/// Threads blocked in `sys_sleep`.
pub fn sleepers() -> usize {
    SLEEPERS.load(Relaxed)
}

/// System call `nr` of the thread running on `cpu`, its arguments and result in `frame`.
pub(super) fn syscall(cpu: usize, frame: &mut Frame, nr: u64) {
    let now = arch::now_ns();
    let current = CPUS[cpu].current.load(Relaxed);
    match nr {
        arch::SYS_SPAWN => {
            let a = |i| frame.syscall_arg(i);
            let ret = match spawn(cpu, now, a(0) as usize, a(1) as usize, a(2) as i32, a(3)) {
                Ok(slot) => slot as u64,
                Err(e) => {
                    defmt::error!("spawn failed: {}", defmt::Debug2Format(&e));
                    u64::MAX
                }
            };
            frame.set_syscall_ret(ret);
        }
        arch::SYS_YIELD => with_core(|k| k.yield_now(cpu, now).expect(OUR_CPU)),
        arch::SYS_EXIT if current != NONE => exit(cpu, now, current),
        arch::SYS_PARK if current != NONE => park(cpu, now, current),
        arch::SYS_UNPARK => {
            let t = frame.syscall_arg(0) as usize;
            frame.set_syscall_ret(if unpark(cpu, now, t) { 0 } else { u64::MAX });
        }
        arch::SYS_SET_AFFINITY => {
            let (t, bits) = (frame.syscall_arg(0) as usize, frame.syscall_arg(1));
            let ok = set_affinity(cpu, now, t, bits);
            frame.set_syscall_ret(if ok { 0 } else { u64::MAX });
        }
        arch::SYS_SLEEP => sleep(cpu, now, current, frame.syscall_arg(0)),
        arch::SYS_EXIT | arch::SYS_PARK => {}
        _ => frame.set_syscall_ret(u64::MAX),
    }
}

/// Thread `t`, running on `cpu`, exits: its task leaves with the switch that ends it, and
/// the threads waiting for it are unparked.
fn exit(cpu: usize, now: u64, t: usize) {
    let id = THREADS[t].task_id();
    match with_core(|k| k.exit(cpu, now, id)) {
        // The caller is the running task: it leaves with the switch that ends it.
        Ok(gone) => debug_assert!(!gone, "a running task is not gone at once"),
        Err(e) => panic!("exit of {:?} refused: {:?}", id, e),
    }
    THREADS[t].epoch.fetch_add(1, SeqCst);
    let mut joiners = THREADS[t].joiners.swap(0, SeqCst);
    while joiners != 0 {
        unpark(cpu, now, joiners.trailing_zeros() as usize);
        joiners &= joiners - 1;
    }
    // Its slot is freed when the switch away from it finishes (`finish` says so).
}

/// Thread `t`, running on `cpu`, parks: it consumes a token, or blocks until an unpark.
fn park(cpu: usize, now: u64, t: usize) {
    let mut p = THREADS[t].park.lock();
    if p.token {
        p.token = false;
    } else {
        let id = THREADS[t].task_id();
        if let Err(e) = with_core(|k| k.block(cpu, now, id)) {
            panic!("block of {:?} refused: {:?}", id, e);
        }
        p.parked = true;
    }
}

/// Sets thread `t`'s affinity to `bits`; false if `t` is no thread or the core refused.
fn set_affinity(cpu: usize, now: u64, t: usize, bits: u64) -> bool {
    if t >= MAX_THREADS || !THREADS[t].used.load(Acquire) {
        return false;
    }
    let old = THREADS[t].affinity.load(Relaxed);
    // While the core changes it, either mask may be in force.
    THREADS[t].affinity.store(old & bits, Relaxed);
    let id = THREADS[t].task_id();
    let ok = with_core(|k| k.set_affinity(cpu, now, id, cpu_mask(bits))).is_ok();
    THREADS[t].affinity.store(if ok { bits } else { old }, Relaxed);
    ok
}

/// Thread `t` (or idle, [`NONE`]) on `cpu` sleeps `ns`: it blocks until a tick past the
/// deadline wakes it; 0 ns (or no thread) yields instead.
fn sleep(cpu: usize, now: u64, t: usize, ns: u64) {
    if ns == 0 || t == NONE {
        with_core(|k| k.yield_now(cpu, now).expect(OUR_CPU));
        return;
    }
    let id = THREADS[t].task_id();
    if let Err(e) = with_core(|k| k.block(cpu, now, id)) {
        panic!("block of sleeping {:?} refused: {:?}", id, e);
    }
    SLEEPERS.fetch_add(1, AcqRel);
    THREADS[t].sleep_until.store(now.saturating_add(ns).max(1), Release);
}

/// Whether any thread sleeps (a CPU keeps ticking while one does: sleepers wake on ticks).
pub(super) fn any_sleeper() -> bool {
    SLEEPERS.load(Acquire) != 0
}

/// Wakes every thread whose `sys_sleep` deadline passed (on any CPU's tick).
pub(super) fn wake_sleepers(cpu: usize, now: u64) {
    for t in THREADS.iter() {
        let d = t.sleep_until.load(Acquire);
        if d != 0 && d <= now && t.sleep_until.compare_exchange(d, 0, AcqRel, Relaxed).is_ok() {
            SLEEPERS.fetch_sub(1, Release);
            let id = t.task_id();
            if let Err(e) = with_core(|k| k.wake(cpu, now, id)) {
                panic!("wake of sleeping {:?} refused: {:?}", id, e);
            }
        }
    }
}
