//! What the simulator asks of the host beyond portable, safe Rust: a cache prefetch hint, huge
//! pages for a large machine's state, and the scheduler's locks for a machine that runs on
//! one thread. The only `unsafe` in the crate lives here.
#![allow(unsafe_code)]

use std::cell::Cell;

use sched_core::locks::Locks;

/// Whether [`prefetch`] issues an instruction on this host (x86-64); elsewhere it does
/// nothing, and the simulator does not spend time naming lines for it.
pub(crate) const HAS_PREFETCH: bool = cfg!(target_arch = "x86_64");

/// Asks the host CPU to bring the cache line at `line` into its caches, as a hint: it
/// changes no result, and on hosts without an instruction for it here it does nothing.
#[inline(always)]
pub(crate) fn prefetch(line: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 only hints the cache hierarchy: it does not fault whatever the
    // address (a stale or unmapped one is dropped), and reads into no register and writes
    // nothing. It belongs to SSE, which every x86-64 CPU has.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(line.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
}

/// Asks the host to back the memory of `value` with transparent huge pages, where it can:
/// on a machine of a thousand CPUs the scheduler state spans megabytes, and with 4 KB pages
/// each tick's lines (and their prefetches) miss the TLB too. A hint: contents and results
/// do not change, and without Linux or with its huge pages off nothing happens.
pub(crate) fn use_huge_pages<T>(value: &T) {
    #[cfg(target_os = "linux")]
    {
        const HUGE_PAGE: usize = 2 << 20;
        let start = value as *const T as usize;
        let end = start.saturating_add(core::mem::size_of::<T>());
        // Only whole huge pages inside the value: its neighbours keep their pages.
        let (from, to) = (start.next_multiple_of(HUGE_PAGE), end / HUGE_PAGE * HUGE_PAGE);
        if from >= to {
            return;
        }
        let range = from as *mut libc::c_void;
        // Linux's value (since 6.1); the libc crate names it for glibc targets only.
        const MADV_COLLAPSE: libc::c_int = 25;
        // SAFETY: `from..to` lies within `value`, memory this process owns and has mapped.
        // MADV_HUGEPAGE marks the range for huge pages (the mark stays with the memory after
        // `value` is gone, which only affects how the kernel backs it) and MADV_COLLAPSE
        // moves its present pages into them; neither changes a byte of it, and either failing
        // (an older kernel, huge pages disabled) leaves the range as it was.
        unsafe {
            libc::madvise(range, to - from, libc::MADV_HUGEPAGE);
            libc::madvise(range, to - from, MADV_COLLAPSE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = value;
}

/// The locks of a simulated machine ([`Locks`]). The simulator drives every CPU from one
/// thread, so a lock is a flag in a [`Cell`]: taking it is a load and a store, where a spin
/// lock's is an atomic read-modify-write that on x86-64 also drains the store buffer. The
/// cells make the locks, and so the machine, not `Sync`: the compiler keeps a simulated
/// machine on one thread at a time.
///
/// Taking a lock that is held panics: on one thread nobody else could release it, so it is a
/// broken lock order that would spin forever on a real machine.
#[derive(Debug)]
pub enum OneThread {}

impl Locks for OneThread {
    type Mutex = OneThreadMutex;
    type RwLock = OneThreadRwLock;
}

/// [`OneThread`]'s exclusive lock: whether it is held.
#[derive(Debug)]
pub struct OneThreadMutex {
    held: Cell<bool>,
}

// SAFETY: the lock is held from `lock` or a successful `try_lock` until `unlock`, and while
// it is held neither takes it again: `lock` panics and `try_lock` fails. Being not `Sync`
// (its `Cell`), the lock is only ever used from one thread, so no two threads can race on
// the flag; `GuardNoSend` keeps a guard on the thread that took it.
unsafe impl lock_api::RawMutex for OneThreadMutex {
    #[allow(clippy::declare_interior_mutable_const)] // each lock starts from a copy of it
    const INIT: Self = OneThreadMutex { held: Cell::new(false) };
    type GuardMarker = lock_api::GuardNoSend;

    #[inline(always)]
    fn lock(&self) {
        assert!(!self.held.replace(true), "a scheduler lock taken twice on the simulator's thread");
    }

    #[inline(always)]
    fn try_lock(&self) -> bool {
        !self.held.replace(true)
    }

    #[inline(always)]
    unsafe fn unlock(&self) {
        self.held.set(false);
    }

    #[inline(always)]
    fn is_locked(&self) -> bool {
        self.held.get()
    }
}

/// [`OneThread`]'s reader-writer lock: its readers, or [`OneThreadRwLock::WRITER`].
#[derive(Debug)]
pub struct OneThreadRwLock {
    state: Cell<usize>,
}

impl OneThreadRwLock {
    /// The state while a writer holds the lock.
    const WRITER: usize = usize::MAX;
}

// SAFETY: as for `OneThreadMutex`: a writer holds the lock alone (state `WRITER`, taken only
// from 0), readers only share it (counted, never while a writer holds it), a taking that
// would break this panics or fails, and the lock never leaves its thread.
unsafe impl lock_api::RawRwLock for OneThreadRwLock {
    #[allow(clippy::declare_interior_mutable_const)] // each lock starts from a copy of it
    const INIT: Self = OneThreadRwLock { state: Cell::new(0) };
    type GuardMarker = lock_api::GuardNoSend;

    #[inline(always)]
    fn lock_shared(&self) {
        assert!(self.try_lock_shared(), "a scheduler lock read while written on the simulator's thread");
    }

    #[inline(always)]
    fn try_lock_shared(&self) -> bool {
        let s = self.state.get();
        // (A writer's state is the largest: no reader count reaches it.)
        let free = s < Self::WRITER - 1;
        if free {
            self.state.set(s + 1);
        }
        free
    }

    #[inline(always)]
    unsafe fn unlock_shared(&self) {
        self.state.set(self.state.get() - 1);
    }

    #[inline(always)]
    fn lock_exclusive(&self) {
        assert!(self.try_lock_exclusive(), "a scheduler lock taken twice on the simulator's thread");
    }

    #[inline(always)]
    fn try_lock_exclusive(&self) -> bool {
        let free = self.state.get() == 0;
        if free {
            self.state.set(Self::WRITER);
        }
        free
    }

    #[inline(always)]
    unsafe fn unlock_exclusive(&self) {
        self.state.set(0);
    }

    #[inline(always)]
    fn is_locked(&self) -> bool {
        self.state.get() != 0
    }

    #[inline(always)]
    fn is_locked_exclusive(&self) -> bool {
        self.state.get() == Self::WRITER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Mutex<T> = lock_api::Mutex<OneThreadMutex, T>;
    type RwLock<T> = lock_api::RwLock<OneThreadRwLock, T>;

    #[test]
    fn mutex_excludes_and_releases() {
        let m = Mutex::new(1);
        {
            let mut g = m.lock();
            *g += 1;
            assert!(m.is_locked());
            assert!(m.try_lock().is_none(), "held: a second taker fails");
        }
        assert!(!m.is_locked());
        assert_eq!(*m.try_lock().expect("released"), 2);
    }

    #[test]
    #[should_panic(expected = "taken twice")]
    fn mutex_taken_twice_panics() {
        let m = Mutex::new(());
        let _g = m.lock();
        let _h = m.lock();
    }

    #[test]
    fn rwlock_shares_readers_and_excludes_a_writer() {
        let l = RwLock::new(5);
        {
            let (a, b) = (l.read(), l.read());
            assert_eq!(*a + *b, 10);
            assert!(l.try_write().is_none(), "readers hold it");
        }
        {
            let mut w = l.try_write().expect("free");
            *w = 6;
            assert!(l.try_read().is_none() && l.try_write().is_none(), "the writer holds it alone");
            assert!(l.is_locked_exclusive());
        }
        assert!(!l.is_locked());
        assert_eq!(*l.read(), 6);
    }

    #[test]
    #[should_panic(expected = "read while written")]
    fn rwlock_read_while_written_panics() {
        let l = RwLock::new(());
        let _w = l.write();
        let _r = l.read();
    }
}
