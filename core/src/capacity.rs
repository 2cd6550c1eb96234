//! Capacity comparisons shared by the balancer, placement and misfit tracking.

/// `fits_capacity`: `util` fits `capacity` with a 20 % margin (util × 1280 < capacity × 1024).
///
#[cfg_attr(feature = "internals", doc = "```")]
#[cfg_attr(not(feature = "internals"), doc = "```ignore")]
/// use sched_core::capacity::fits_capacity;
/// assert!(fits_capacity(800, 1024)); // 800 × 1.25 = 1000 < 1024
/// assert!(!fits_capacity(820, 1024)); // 1025 ≥ 1024
/// ```
pub fn fits_capacity(util: u64, capacity: u64) -> bool {
    util * 1280 < capacity * 1024
}
