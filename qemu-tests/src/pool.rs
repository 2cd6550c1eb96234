//! Deterministic boots side by side. A deterministic-mode QEMU (`-icount shift=0,sleep=off`,
//! one TCG thread) keeps one host core busy and its run follows the instructions, not the
//! host's clock (but for the rare race [`Mode::Deterministic`] describes), so independent
//! boots run on as many threads as the host has cores; their results are handed back in
//! order. Parallel-mode boots need the whole host: they run one at a time.
//!
//! Every QEMU of the process also takes a host slot first ([`host_slot`]): a deterministic
//! boot one of [`jobs`] slots, a parallel-mode boot all of them. So pools that run at the same
//! time (the suite's Linux guests beside its other cases) never put more QEMUs on the host than
//! it has cores, and a parallel-mode boot never shares it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Condvar, Mutex};

use crate::qemu::Mode;

/// How many boots in `mode` run at once: deterministic ones, the host's cores or `QEMU_JOBS`
/// (at least 1); parallel ones, one.
pub fn jobs(mode: Mode) -> usize {
    if mode == Mode::Parallel {
        return 1;
    }
    match std::env::var("QEMU_JOBS").ok().and_then(|v| v.parse::<usize>().ok()) {
        Some(n) => n.max(1),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// The host's boot slots: how many are taken, and whether a parallel-mode boot holds or
/// waits for all of them (a waiting one keeps new deterministic boots out, so it gets its
/// turn).
struct Slots {
    taken: usize,
    whole_host: bool,
    waiting_for_host: usize,
}

static SLOTS: Mutex<Slots> = Mutex::new(Slots { taken: 0, whole_host: false, waiting_for_host: 0 });
static FREED: Condvar = Condvar::new();

/// A QEMU's place on the host, given back when dropped.
pub struct HostSlot {
    whole_host: bool,
}

/// Waits for a place on the host for one QEMU in `mode`: one of the [`jobs`] slots for a
/// deterministic boot, the whole host for a parallel-mode one.
pub fn host_slot(mode: Mode) -> HostSlot {
    let lock = || SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    let wait = |g| FREED.wait(g).unwrap_or_else(|e| e.into_inner());
    let mut s = lock();
    if mode == Mode::Parallel {
        s.waiting_for_host += 1;
        while s.whole_host || s.taken > 0 {
            s = wait(s);
        }
        s.waiting_for_host -= 1;
        s.whole_host = true;
        HostSlot { whole_host: true }
    } else {
        let slots = jobs(Mode::Deterministic);
        while s.whole_host || s.waiting_for_host > 0 || s.taken >= slots {
            s = wait(s);
        }
        s.taken += 1;
        HostSlot { whole_host: false }
    }
}

impl Drop for HostSlot {
    fn drop(&mut self) {
        let mut s = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        if self.whole_host {
            s.whole_host = false;
        } else {
            s.taken -= 1;
        }
        FREED.notify_all();
    }
}

/// Runs `work(i)` for every `i` in `0..n`, boots in `mode`, on up to [`jobs`] threads and calls
/// `done(i, result)` in order of `i`, each as soon as it and every earlier one have finished.
pub fn in_order<T: Send>(
    mode: Mode,
    n: usize,
    work: impl Fn(usize) -> T + Sync,
    mut done: impl FnMut(usize, T),
) {
    let threads = jobs(mode).min(n);
    if threads <= 1 {
        (0..n).for_each(|i| done(i, work(i)));
        return;
    }
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (tx, next, work) = (tx.clone(), &next, &work);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || tx.send((i, work(i))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut waiting = BTreeMap::new();
        let mut want = 0;
        for (i, r) in rx {
            waiting.insert(i, r);
            while let Some(r) = waiting.remove(&want) {
                done(want, r);
                want += 1;
            }
        }
    });
}

/// [`in_order`], collecting the results.
pub fn map<T: Send>(mode: Mode, n: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let mut out = Vec::with_capacity(n);
    in_order(mode, n, work, |_, r| out.push(r));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_whatever_finishes_first() {
        // Later items finish first: the order handed back is still 0, 1, 2, ...
        let n = 12;
        let mut seen = Vec::new();
        in_order(
            Mode::Deterministic,
            n,
            |i| {
                std::thread::sleep(std::time::Duration::from_millis((n - i) as u64 * 3));
                i * 10
            },
            |i, r| seen.push((i, r)),
        );
        assert_eq!(seen, (0..n).map(|i| (i, i * 10)).collect::<Vec<_>>());
        assert_eq!(map(Mode::Parallel, 5, |i| i + 1), vec![1, 2, 3, 4, 5]);
        assert!(map(Mode::Deterministic, 0, |i| i).is_empty());
        assert_eq!(jobs(Mode::Parallel), 1);
    }

    #[test]
    fn a_parallel_boot_has_the_host_to_itself() {
        // Deterministic boots hold slots; a parallel-mode one waits until none is held, and
        // while it runs no deterministic boot starts.
        let running = AtomicUsize::new(0);
        let overlapped = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for k in 0..6 {
                let (running, overlapped) = (&running, &overlapped);
                s.spawn(move || {
                    let mode = if k % 3 == 0 { Mode::Parallel } else { Mode::Deterministic };
                    let _slot = host_slot(mode);
                    let weight = if mode == Mode::Parallel { 1000 } else { 1 };
                    let before = running.fetch_add(weight, Ordering::SeqCst);
                    if (mode == Mode::Parallel && before > 0) || before >= 1000 {
                        overlapped.store(true, Ordering::SeqCst);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    running.fetch_sub(weight, Ordering::SeqCst);
                });
            }
        });
        assert!(!overlapped.load(Ordering::SeqCst));
        let slots = SLOTS.lock().unwrap();
        assert!(slots.taken == 0 && !slots.whole_host && slots.waiting_for_host == 0);
    }
}
