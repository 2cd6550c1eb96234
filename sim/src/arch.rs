//! What the simulator asks of the host beyond portable Rust: a cache prefetch hint, and huge
//! pages for a large machine's state. The only `unsafe` in the crate lives here.
#![allow(unsafe_code)]

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
