//! The machine layer: everything that touches hardware, one module per architecture, chosen
//! by the target. It is the only part of the kernel with `unsafe`: the crate denies
//! `unsafe_code`, and this module alone allows it. The rest of the kernel (`main.rs`,
//! `sched/`, the workloads) is the same on every architecture and uses only what each
//! architecture module exports: its limits (`MAX_CPUS`, `MAX_THREADS`, `EXC_STACK_SIZE`), the
//! machine description (`device_tree`, `mpidr`), CPU start-up, the interrupt controller
//! (`gic_init_*`, `irq_ack`, `irq_eoi`, `send_sgi`), the timer and clock (`counter*`,
//! `now_ns`, `timer_arm_at`, `timer_stop`), interrupt masking (`IrqGuard`, `irq_enable`,
//! `wfi`, `relax`, `Lock`, `YieldRelax`), threads and traps (`Frame`, `ExcKind`,
//! `init_thread_frame`, `fault_info`, the `sys_*` calls and `SYS_*` numbers), stack checks
//! and `exit`.
#![allow(unsafe_code)]

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use aarch64::*;
