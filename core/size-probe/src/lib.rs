//! `size_of` of sched-core's machines and per-task state, as the target lays them out. The
//! figures sit in one exported table, [`SCHED_SIZES`], which `cargo xsize` reads from this
//! library compiled for each target (no linking, no running: the values are constants).
//!
//! The configurations are the budget points: (CPUs, live tasks, runnable per CPU).
#![no_std]

use core::mem::size_of;

use sched_core::{EntityCell, NoPlatform, SingleCpu, Smp, TaskEntry};

/// What each entry of [`SCHED_SIZES`] measures, in order (printed by `cargo xsize`).
pub const NAMES: [&str; 8] = [
    "Smp, 2 CPUs, 16 tasks, 16 per CPU",
    "Smp, 4 CPUs, 32 tasks, 32 per CPU",
    "Smp, 8 CPUs, 256 tasks, 64 per CPU",
    "SingleCpu, 8 tasks",
    "per task (what one more task slot adds)",
    "EntityCell (a task's entity, stored)",
    "TaskEntry (a task-table entry)",
    "CpuMask",
];

/// What a machine pays per task: the growth of a 2-CPU `Smp` from 16 to 32 task slots, per
/// slot (the entity's cell and the task table's slot; nothing else depends on `TASKS`).
const PER_TASK: usize =
    (size_of::<Smp<NoPlatform, 2, 32, 16>>() - size_of::<Smp<NoPlatform, 2, 16, 16>>()) / 16;

/// The sizes, in bytes, in the order of [`NAMES`].
#[no_mangle]
#[used]
pub static SCHED_SIZES: [u32; 8] = [
    size_of::<Smp<NoPlatform, 2, 16, 16>>() as u32,
    size_of::<Smp<NoPlatform, 4, 32, 32>>() as u32,
    size_of::<Smp<NoPlatform, 8, 256, 64>>() as u32,
    size_of::<SingleCpu<NoPlatform, 8, 8>>() as u32,
    PER_TASK as u32,
    size_of::<EntityCell>() as u32,
    size_of::<TaskEntry>() as u32,
    size_of::<sched_core::CpuMask>() as u32,
];

/// What each entry of `GROUP_SIZES` measures, in order (built with the `groups` feature).
pub const GROUP_NAMES: [&str; 3] = [
    "Smp, 2 CPUs, 24 per CPU, 8 groups",
    "a group per CPU (runqueue, entity)",
    "a group per machine (shared state)",
];

#[cfg(feature = "groups")]
mod groups {
    use core::mem::size_of;

    use sched_core::group::level::GroupRq;
    use sched_core::group::shared::GroupShared;
    use sched_core::{EntityCell, NoPlatform, Smp};

    type Grouped<const G: usize> = Smp<NoPlatform, 2, 16, 24, sched_core::spin::Spin, G>;

    /// Each CPU holds a runqueue and an entity per group.
    const PER_CPU: usize = size_of::<GroupRq>() + size_of::<EntityCell>();
    /// The rest of what 8 groups add to a 2-CPU machine, per group: the shared state and the
    /// group table's entry.
    const PER_MACHINE: usize = (size_of::<Grouped<8>>() - size_of::<Grouped<0>>()) / 8 - 2 * PER_CPU;
    const _: () = assert!(size_of::<GroupShared>() <= PER_MACHINE);

    /// The sizes, in bytes, in the order of [`super::GROUP_NAMES`].
    #[no_mangle]
    #[used]
    pub static GROUP_SIZES: [u32; 3] = [size_of::<Grouped<8>>() as u32, PER_CPU as u32, PER_MACHINE as u32];
}
