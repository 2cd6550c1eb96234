//! Deterministic boots side by side. A deterministic-mode QEMU (`-icount shift=0,sleep=off`,
//! one TCG thread) keeps one host core busy and produces the same run whatever the host does,
//! so independent boots run on as many threads as the host has cores; their results are handed
//! back in order. Parallel-mode boots need the whole host: they run one at a time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

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
}
