//! Task groups (cgroup v2's `cpu.weight` and `cpu.max`) for the kernel's threads: the
//! porter's group calls from a thread, on its own CPU with IRQs masked as every call is.

use sched_core::group::bandwidth::{BandwidthStats, CpuMax};
use sched_core::group::shares::CpuWeight;
use sched_core::group::tree::GroupId;
use sched_core::{SchedError, TaskId};

use super::thread::THREADS;
use super::with_core;
use crate::arch;

/// How many groups the kernel's scheduler holds besides the root.
pub const GROUPS: usize = 8;

/// Creates a group of `cpu.weight` `weight` under `parent`.
pub fn create_group(parent: GroupId, weight: u32) -> Result<GroupId, SchedError> {
    let w = CpuWeight::new(weight)?;
    with_core(|k| k.create_group(arch::cpu_id(), parent, w))
}

/// Sets a group's `cpu.weight`.
pub fn set_group_weight(g: GroupId, weight: u32) -> Result<(), SchedError> {
    let w = CpuWeight::new(weight)?;
    with_core(|k| k.set_group_weight(arch::cpu_id(), arch::now_ns(), g, w))
}

/// How many threads group `g` counts.
pub fn group_tasks(g: GroupId) -> Result<u32, SchedError> {
    with_core(|k| k.group_tasks(g))
}

/// Sets a group's `cpu.max` from its text (`"10000 100000"`, `"max"`).
pub fn set_group_max(g: GroupId, text: &str) -> Result<(), SchedError> {
    let max = CpuMax::parse(text, None)?;
    with_core(|k| k.set_group_max(arch::cpu_id(), arch::now_ns(), g, max))
}

/// Moves thread `slot` into group `g`.
pub fn move_thread(slot: usize, g: GroupId) -> Result<(), SchedError> {
    let id =
        TaskId::from_raw(THREADS.get(slot).map_or(0, |t| t.task.load(portable_atomic::Ordering::Relaxed)));
    with_core(|k| k.move_task(arch::cpu_id(), arch::now_ns(), id, g))
}

/// Deletes a group that holds no thread and no group.
pub fn delete_group(g: GroupId) -> Result<(), SchedError> {
    with_core(|k| k.delete_group(arch::cpu_id(), g))
}

/// A group's `cpu.stat` bandwidth figures.
pub fn group_bandwidth(g: GroupId) -> BandwidthStats {
    with_core(|k| k.group_bandwidth(g).unwrap_or_default())
}
