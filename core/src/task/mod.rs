//! Tasks as the scheduler sees them: identity, policy, weight, affinity and the
//! scheduling entity (vruntime, runtime accounting, PELT signals).

pub(crate) mod id;

pub use id::{TaskId, TaskState};

use crate::cpumask::CpuMask;
use crate::pelt::SchedAvg;
use crate::weights::{LoadWeight, Nice};

/// Scheduling policy within the fair class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Policy {
    /// `SCHED_NORMAL`: interactive-friendly; wakeups may preempt.
    #[default]
    Normal,
    /// `SCHED_BATCH`: never preempts on wakeup; yield does not refresh its runtime.
    Batch,
    /// `SCHED_IDLE`: minimal weight (3); preempted by any other waking task.
    Idle,
}

impl Policy {
    /// The policy stored as `p as u8` (anything else reads as `Idle`, the least favoured).
    pub(crate) const fn from_u8(p: u8) -> Policy {
        match p {
            0 => Policy::Normal,
            1 => Policy::Batch,
            _ => Policy::Idle,
        }
    }
}

/// What a platform asks for when it creates a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskParams {
    /// Nice value, −20..=19.
    pub nice: i32,
    /// Policy.
    pub policy: Policy,
    /// CPUs the task may run on.
    pub affinity: CpuMask,
}

impl Default for TaskParams {
    fn default() -> Self {
        TaskParams { nice: 0, policy: Policy::Normal, affinity: CpuMask::ALL }
    }
}

/// The entity's fields, declared once. Each row is a field of [`Entity`] — its docs, an
/// optional `cfg`, its type, its value in [`Entity::UNUSED`] and the widest value it must
/// hold — and how its task's cell stores it: the storage type, and the setter's visibility
/// and name. `entity_fields!(gen)` hands the rows to the generator `gen`: `entity_struct`
/// below makes [`Entity`], `entity_cell` in the `entities` module its cell with accessors,
/// `get` and `put`, and a test stores every field at its widest and reads it back.
///
/// The rows are in the cell's order: on 64-bit targets the cell is `repr(C)` and 64-byte
/// aligned, so the rows up to `group` share its first cache line with the load weight, `avg`
/// ends within the second, and the rest follow. Policy and nice are stored through `set_class`,
/// which also keeps the load weight they give, so their raw setters stay private.
macro_rules! entity_fields {
    ($gen:ident) => {
        $gen! {
            /// Virtual runtime. Absolute on its runqueue while queued or sleeping there; relative
            /// to `min_vruntime` ("normalised") while in transit between runqueues.
            vruntime: u64 = 0, u64::MAX; Word64, pub set_vruntime;
            /// Task clock at which the current run started or was last accounted.
            exec_start: u64 = 0, u64::MAX - 1; Word64, pub set_exec_start;
            /// Total CPU time received.
            sum_exec_runtime: u64 = 0, u64::MAX - 2; Word64, pub set_sum_exec_runtime;
            /// `sum_exec_runtime` when the task was last picked (to measure its current slice).
            prev_sum_exec_runtime: u64 = 0, u64::MAX - 3; Word64, pub set_prev_sum_exec_runtime;
            /// EEVDF: its virtual deadline (the end of its current request).
            #[cfg(feature = "eevdf")]
            deadline: u64 = 0, u64::MAX - 4; Word64, pub set_deadline;
            /// The CPU it last ran or was queued on (a CPU number: 16 bits in the cell).
            cpu: u32 = u32::MAX, crate::cpumask::MAX_CPUS as u32 - 1; AtomicU16, pub set_cpu;
            /// A CPU it recently ran on or woke a task from, tried at its next wakeup.
            recent_used_cpu: u32 = 0, crate::cpumask::MAX_CPUS as u32 - 2; AtomicU16, pub set_recent_used_cpu;
            /// Policy.
            policy: Policy = Policy::Normal, Policy::Idle; AtomicU8, set_policy_alone;
            /// Nice value.
            nice: Nice = Nice::ZERO, Nice::MIN; AtomicI8, set_nice_alone;
            /// Whether it is accounted in a runqueue (queued or current and runnable).
            on_rq: bool = false, true; AtomicBool, pub set_on_rq;
            /// Whether its PELT signals are attached to a runqueue's sums (Linux marks the
            /// opposite, a migrated or new task, with `last_update_time == 0`).
            pelt_attached: bool = false, true; AtomicBool, pub set_pelt_attached;
            /// Whether a CPU is running it or still switching away from it (its context may
            /// not be saved yet): such a task must not be migrated (Linux `p->on_cpu`).
            on_cpu: bool = false, true; AtomicBool, pub set_on_cpu;
            /// The task group it belongs to, by slot: 0 the root, 1..=G a group (the
            /// `groups` feature).
            #[cfg(feature = "groups")]
            group: u16 = 0, u16::MAX - 6; AtomicU16, pub set_group;
            /// PELT signals.
            avg: SchedAvg = SchedAvg::ZERO, SchedAvg::WIDEST; AvgCell, pub set_avg;
            /// The task it woke last ([`TaskId::NONE`] before its first wakeup of another task).
            last_wakee: TaskId = TaskId::NONE, TaskId::new(u32::MAX - 1, u32::MAX); Word64, pub set_last_wakee;
            /// EEVDF: its lag (virtual service owed, negative if received ahead), kept from its
            /// last dequeue to its next placement.
            #[cfg(feature = "eevdf")]
            vlag: i64 = 0, i64::MIN; Word64, pub set_vlag;
            /// EEVDF: its request size (wall-clock ns); 0 means the machine's default slice.
            #[cfg(feature = "eevdf")]
            slice: u64 = 0, u64::MAX - 5; Word64, pub set_slice;
            /// How often, recently, it woke a different task than the last one (halved every
            /// second): many flips mark a waker serving many wakees (`wake_wide`).
            wakee_flips: u32 = 0, u32::MAX; AtomicU32, pub set_wakee_flips;
            /// Jiffy (modulo 2^32, compared wrap-safe) when `wakee_flips` was last halved.
            wakee_flip_decay_ts: u32 = 0, u32::MAX - 1; AtomicU32, pub set_wakee_flip_decay_ts;
            /// Allowed CPUs.
            affinity: CpuMask = CpuMask::EMPTY, CpuMask::ALL; MaskCell, pub set_affinity;
        }
    };
}
pub(crate) use entity_fields;

/// Makes [`Entity`] from the rows of `entity_fields!`.
macro_rules! entity_struct {
    ($(
        $(#[doc = $doc:literal])*
        $(#[cfg($cfg:meta)])?
        $field:ident: $ty:ty = $unused:expr, $widest:expr; $store:ty, $svis:vis $set:ident;
    )*) => {
        /// The scheduling entity: everything the fair class keeps per task, as a plain value
        /// (a copy). It is stored, field by field, in the cell of its task's slot (see the
        /// `entities` module), so it does not repeat the task's id.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Entity {
            $(
                $(#[doc = $doc])*
                $(#[cfg($cfg)])?
                pub $field: $ty,
            )*
        }

        impl Entity {
            /// An entity of no task (what a read of an empty runqueue slot sees): nice 0, no
            /// CPU, no wakee.
            pub const UNUSED: Entity = Entity { $($(#[cfg($cfg)])? $field: $unused,)* };

            /// Every field at the widest value it must hold (the round-trip test's entity).
            #[cfg(test)]
            pub(crate) const WIDEST: Entity = Entity { $($(#[cfg($cfg)])? $field: $widest,)* };
        }
    };
}

entity_fields!(entity_struct);

impl Entity {
    /// A fresh entity for a new task (PELT initialised to a "heavy" newborn).
    pub fn new(nice: Nice, policy: Policy, affinity: CpuMask, cpu: u32) -> Entity {
        let load = weight_for(policy, nice);
        Entity {
            policy,
            nice,
            affinity,
            avg: crate::pelt::init_task_avg(load.down()),
            cpu,
            recent_used_cpu: cpu,
            // Nothing run, queued or woken yet; no wakee (`TaskId::NONE`).
            ..Entity::UNUSED
        }
    }

    /// Load weight (high resolution) and inverse, from the policy and nice value (a table
    /// lookup, so the entity need not store it).
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn load(&self) -> LoadWeight {
        weight_for(self.policy, self.nice)
    }

    /// The down-scaled weight PELT and the balancer use (1024 for nice 0).
    #[cfg_attr(target_pointer_width = "64", inline)]
    pub fn weight(&self) -> u64 {
        self.load().down()
    }

    /// EEVDF: its slice (ns), or `default_ns` (the machine's) if it asked for none.
    #[cfg(feature = "eevdf")]
    pub fn slice_or(&self, default_ns: u64) -> u64 {
        crate::eevdf::slice_or(self.slice, default_ns)
    }

    /// EEVDF: how far its kept lag may go either way, with `default_ns` the machine's slice
    /// and `tick_ns` its tick: the virtual time of twice its slice or a tick
    /// ([`crate::eevdf::lag_limit`]).
    #[cfg(feature = "eevdf")]
    pub fn lag_bound(&self, default_ns: u64, tick_ns: u64) -> i64 {
        crate::eevdf::lag_limit(self.slice_or(default_ns), tick_ns, self.weight())
    }

    /// EEVDF: bounds its kept lag again (after its slice, or the default, got smaller).
    #[cfg(feature = "eevdf")]
    pub(crate) fn clamp_kept_lag(&mut self, default_ns: u64, tick_ns: u64) {
        let bound = self.lag_bound(default_ns, tick_ns);
        self.vlag = self.vlag.clamp(-bound, bound);
    }

    /// `task_util`: the PELT utilisation.
    pub fn util(&self) -> u64 {
        self.avg.util_avg
    }

    /// `task_util_est`: max of util_avg and the estimate.
    pub fn util_est(&self) -> u64 {
        self.avg.util_est.task_util_est(self.avg.util_avg)
    }
}

/// The load weight a task of this policy and nice level gets.
#[cfg_attr(target_pointer_width = "64", inline)]
pub fn weight_for(policy: Policy, nice: Nice) -> LoadWeight {
    match policy {
        Policy::Idle => LoadWeight::idle_policy(),
        Policy::Normal | Policy::Batch => LoadWeight::from_nice(nice),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trip() {
        let id = TaskId::new(7, 3);
        assert_eq!(TaskId::from_raw(id.to_raw()), id);
        assert_eq!(id.trace_pid(), 8);
    }

    #[test]
    fn idle_policy_weight() {
        assert_eq!(weight_for(Policy::Idle, Nice::MIN).down(), 3);
        assert_eq!(weight_for(Policy::Batch, Nice::ZERO).down(), 1024);
    }
}
