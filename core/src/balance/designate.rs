//! `should_we_balance`: which CPU of a group balances a domain on the group's behalf.

use super::idle::IdleType;
use crate::cpumask::CpuMask;

/// Whether `dst_cpu` is the CPU that balances its group (`group_mask`, the local group's
/// balance mask) now. `cpus` are the CPUs the pass still considers (a pass drops CPUs as it
/// goes); `is_idle` reads a CPU's published idleness.
///
/// The destination must still be a candidate; a newly idle CPU always balances; otherwise
/// the first idle CPU of the group among the candidates does, or, none being idle, the
/// group's first CPU.
///
#[cfg_attr(feature = "internals", doc = "```")]
#[cfg_attr(not(feature = "internals"), doc = "```ignore")]
/// use sched_core::balance::{designate::should_we_balance, IdleType};
/// use sched_core::CpuMask;
/// let group = CpuMask::first_n(4);
/// let all = CpuMask::first_n(8);
/// // CPUs 2 and 3 idle: CPU 2 balances for the group.
/// let idle = |c: usize| c >= 2;
/// assert!(should_we_balance(2, &group, IdleType::Idle, &all, &idle));
/// assert!(!should_we_balance(3, &group, IdleType::Idle, &all, &idle));
/// // A destination the pass no longer considers never balances.
/// let mut fewer = all;
/// fewer.clear(2);
/// assert!(!should_we_balance(2, &group, IdleType::NewlyIdle, &fewer, &idle));
/// ```
pub fn should_we_balance(
    dst_cpu: usize,
    group_mask: &CpuMask,
    idle: IdleType,
    cpus: &CpuMask,
    is_idle: &dyn Fn(usize) -> bool,
) -> bool {
    if !cpus.contains(dst_cpu) {
        return false;
    }
    if idle == IdleType::NewlyIdle {
        return true;
    }
    let first_idle = group_mask.and(cpus).iter().find(|&c| is_idle(c));
    first_idle.or_else(|| group_mask.first()) == Some(dst_cpu)
}
