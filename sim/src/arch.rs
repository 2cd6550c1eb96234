//! What the simulator asks of the host CPU beyond portable Rust: a cache prefetch hint. The
//! only `unsafe` in the crate lives here.
#![allow(unsafe_code)]

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
