//! The machine layer: everything that touches hardware. It is the only part of the kernel
//! with `unsafe`: the crate denies `unsafe_code`, and this module alone allows it.
//!
//! What every machine shares lives here — the kernel's limits, the stack areas and their
//! checks ([`stacks`]), the per-CPU block and the common entry of every CPU, the defmt logger,
//! the system-call wrappers ([`syscall`]), interrupt masking and the kernel's lock. One
//! module per architecture, chosen by the target, holds the rest, behind the same names:
//!
//! | | `aarch64/` (QEMU `virt`, EL1) | `riscv64/` (QEMU `virt`, S-mode under OpenSBI) |
//! |---|---|---|
//! | boot | `_start`, PSCI `CPU_ON` | `_start`, SBI HSM `hart_start` |
//! | interrupts, IPIs | GICv3, SGIs | `sie`/`sip`, SBI IPIs with a pending-kind word per CPU |
//! | tick | EL1 virtual timer | `stimecmp` (Sstc) or the SBI timer |
//! | traps | vector table, `svc #0` | `stvec`, `ebreak` (S-mode `ecall` belongs to the SBI) |
//! | console, exit | PL011, semihosting | ns16550, `sifive_test` |
//!
//! The Cortex-M port (`cortex_m/`: one Cortex-M4 on `mps2-an386`, two Cortex-M33 on
//! `mps2-an521`) keeps the same names: reset through cortex-m-rt, core 1 started from a vector
//! table named in INITSVTOR1; IPIs through PendSV (to oneself) and the SSE-200's MHU; SysTick
//! as the tick and the CMSDK timer 0 as the clock; `svc #0`; CMSDK UART and semihosting.
//!
//! A port exports: `NAME`, `TICKLESS` (whether its tick can stop); the meaning of the
//! saved-register [`Frame`] (`syscall_arg`, `set_syscall_ret`, `new_thread`) and `fault_info`;
//! `firmware` (the machine's description, see [`Firmware`]), `machine_init`, `cpu_init`,
//! `start_cpu`; `Irq`, `irq_ack`, `irq_eoi`, `send_ipi`; `counter`, `counter_freq`,
//! `program_timer` (a 64-bit port: `slice.rs` arms the tick and the slices with it) or
//! `timer_arm_at` and `timer_stop` (Cortex-M); `irq_save`, `irq_enable`, `relax` (riscv64; the others share
//! `yield`); `trap` (the system-call instruction); `uart_write`; `undefined_instruction`;
//! `exit`, `PROGRAM_WINDOW` (where the runner loads a workload program, if anywhere). Its
//! assembly enters every CPU at [`kernel_entry`] on that CPU's boot stack. To this
//! module alone it gives `set_percpu` and `percpu` (where the CPU keeps its per-CPU block's
//! address) and, with soft IPIs (riscv64, Cortex-M), `IRQ_NUMBER_TIMER` and `IRQ_NUMBER_IPI`
//! for `soft_ipi.rs`. The 64-bit ports share this module's `Frame`; Cortex-M has its own
//! (`Frame`, `FRAME_SIZE`), being the only one whose hardware stacks part of it.
#![allow(unsafe_code)]

mod logger;
#[cfg(any(target_arch = "riscv64", target_arch = "arm"))]
mod soft_ipi;
pub mod stacks;
pub mod syscall;

#[cfg(any(target_arch = "riscv64", target_arch = "arm"))]
pub use soft_ipi::{irq_eoi, Irq};

// The tick and the slice interrupts of the 64-bit ports, on one one-shot timer per CPU.
#[cfg(not(target_arch = "arm"))]
mod slice;
#[cfg(not(target_arch = "arm"))]
pub use slice::{set_running, set_slice_us, timer_arm_at, timer_stop, DEFAULT_SLICE_US, MAX_SLICE_US};

/// The counter frequencies the 64-bit ports take (Hz): at least one count per tick at the
/// fastest tick rate (1000 Hz), and at most 1 GHz. The rate comes from the firmware (the device
/// tree's `timebase-frequency` on riscv64, `CNTFRQ_EL0` on aarch64); anything else is a damaged
/// description, which would set every tick hours apart or a count apart.
#[cfg(not(target_arch = "arm"))]
pub const COUNTER_HZ_RANGE: core::ops::RangeInclusive<u64> = 1_000..=1_000_000_000;

/// A microcontroller's SysTick is periodic and its cores are few: no slices (`slice_us=` other
/// than 0 is refused).
#[cfg(target_arch = "arm")]
pub const DEFAULT_SLICE_US: u64 = 0;
/// See [`DEFAULT_SLICE_US`].
#[cfg(target_arch = "arm")]
pub const MAX_SLICE_US: u64 = 0;
/// No slices on a microcontroller.
#[cfg(target_arch = "arm")]
pub fn set_slice_us(_us: u64) {}
/// No slices on a microcontroller.
#[cfg(target_arch = "arm")]
pub fn set_running(_running: bool) {}

/// Whether the machine's firmware can send a started hart to the kernel's boot entry, a race
/// `entry_race=on` simulates: riscv64's alone.
pub const HAS_ENTRY_RACE: bool = cfg!(target_arch = "riscv64");

/// Elsewhere than riscv64 there is no such race to simulate (`entry_race=off` is all a boot
/// line may ask for, [`HAS_ENTRY_RACE`]).
#[cfg(not(target_arch = "riscv64"))]
pub fn simulate_entry_race(_on: bool) {}

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use aarch64::*;

#[cfg(target_arch = "riscv64")]
mod riscv64;
#[cfg(target_arch = "riscv64")]
pub use riscv64::*;

#[cfg(target_arch = "arm")]
mod cortex_m;
#[cfg(target_arch = "arm")]
pub use cortex_m::*;

use portable_atomic::{AtomicU64, AtomicUsize, Ordering};

pub use stacks::{
    cpu_stacks_intact, exc_stack_high_water, init_thread_frame, thread_bottom, thread_stack_high_water,
    thread_stack_intact, BOOT_STACK_SIZE, CANARY_BYTES, EXC_STACK_SIZE, STACK_SIZE,
};
pub use syscall::*;

/// Most CPUs this kernel drives (the scheduler's `CPUS`): 8 by default, within the 4 KiB
/// stack budget of a core call at 8 CPUs.
#[cfg(all(not(target_arch = "arm"), not(feature = "cpus-64")))]
pub const MAX_CPUS: usize = 8;
/// The wide build (feature `cpus-64`): up to 64 CPUs, as many as `-smp` gives it. The
/// balancer's per-CPU arrays are wider, so a core call needs more stack (the suite holds this
/// build to its own budget).
#[cfg(all(not(target_arch = "arm"), feature = "cpus-64"))]
pub const MAX_CPUS: usize = 64;
/// Kernel threads in the static pool.
#[cfg(not(target_arch = "arm"))]
pub const MAX_THREADS: usize = 64;
/// Most CPUs this kernel drives on a microcontroller: the Cortex-M4 board has one core.
#[cfg(all(target_arch = "arm", not(board_an521)))]
pub const MAX_CPUS: usize = 1;
/// The dual Cortex-M33 board (`mps2-an521`) has two.
#[cfg(all(target_arch = "arm", board_an521))]
pub const MAX_CPUS: usize = 2;
/// Kernel threads in a microcontroller's static pool.
#[cfg(target_arch = "arm")]
pub const MAX_THREADS: usize = 8;

/// Where the kernel learns its machine: a device tree (aarch64 and riscv64 `virt`), or what
/// the port knows and the boot line it was given (a microcontroller board).
pub enum Firmware {
    /// The device tree the firmware or QEMU passed.
    DeviceTree(crate::devicetree::DeviceTree<'static>),
    /// No device tree: the CPUs' hardware ids and the boot line.
    Fixed {
        /// Hardware ids of the CPUs, the boot CPU first.
        cpus: &'static [u64],
        /// The boot line (not yet checked to be UTF-8); `None`: the firmware would not hand it
        /// over (too long for its buffer).
        bootargs: Option<&'static [u8]>,
    },
}

/// Opens the device tree at `base`, reading its header first so that no more bytes are
/// touched than the header gives (at most [`crate::devicetree::MAX_LEN`]).
///
/// # Safety
///
/// `base` must point at memory the firmware left the tree in: readable for the header
/// ([`crate::devicetree::HEADER_LEN`] bytes), and for as many bytes as a well-formed header
/// there gives, up to `MAX_LEN`; nothing may write it while the kernel runs.
#[cfg(not(target_arch = "arm"))]
pub unsafe fn device_tree_at(
    base: *const u8,
) -> Result<crate::devicetree::DeviceTree<'static>, crate::devicetree::DtError> {
    use crate::devicetree::{total_len, DeviceTree, HEADER_LEN};
    // SAFETY: the caller's promise, for the header's bytes.
    let head = unsafe { core::slice::from_raw_parts(base, HEADER_LEN) };
    let len = total_len(head)?;
    // SAFETY: the caller's promise, for the `len` bytes of a header `total_len` accepted.
    DeviceTree::new(unsafe { core::slice::from_raw_parts(base, len) })
}

/// Size of the saved-register frame the 64-bit ports' trap entries push.
#[cfg(not(target_arch = "arm"))]
pub const FRAME_SIZE: usize = 272;

/// A saved context: what a 64-bit port's trap entry pushes and pops (the same 272 bytes on
/// both). The port gives it its meaning: `syscall_arg`, `set_syscall_ret`, `new_thread`.
#[cfg(not(target_arch = "arm"))]
#[repr(C)]
pub struct Frame {
    /// The general registers: x0–x30 on aarch64; x1–x31 on riscv64 (`x[1]` is `sp`).
    pub x: [u64; 31],
    /// Where execution resumes (ELR_EL1, sepc).
    pub pc: u64,
    /// The saved status `eret`/`sret` returns to (SPSR_EL1, sstatus).
    pub status: u64,
    _pad: u64,
}

/// The registers that explain a fault, by name (the port's `fault_info`).
pub struct FaultInfo(pub [(&'static str, u64); 3]);

impl core::fmt::Display for FaultInfo {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, (name, value)) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{name} {value:#x}")?;
        }
        Ok(())
    }
}

/// Why the machine could not be brought up: what failed, and the firmware's or driver's
/// error code where there is one (0 otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchError {
    /// What failed.
    pub what: &'static str,
    /// The firmware's (PSCI, SBI) or driver's error code, 0 if none.
    pub code: i64,
}

impl ArchError {
    /// An error without a code.
    pub const fn new(what: &'static str) -> ArchError {
        ArchError { what, code: 0 }
    }
}

impl defmt::Format for ArchError {
    fn format(&self, f: defmt::Formatter<'_>) {
        if self.code == 0 {
            defmt::write!(f, "{=str}", self.what)
        } else {
            defmt::write!(f, "{=str} (error {=i64})", self.what, self.code)
        }
    }
}

/// What a trap was, as the port decoded it for the host.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExcKind {
    /// A system call (the port's trap instruction), with its number.
    Svc(u64),
    /// A synchronous exception that is not a system call: a fault.
    Fault,
    /// An interrupt: read them with `irq_ack`.
    Irq,
    /// Anything this kernel never expects (the port's raw cause or vector).
    Unexpected(u64),
}

/// Per-CPU block; the port keeps its address where each CPU finds its own (aarch64
/// `TPIDR_EL1`, riscv64 `sscratch`, Cortex-M a static indexed by the core's identity) for
/// [`cpu_id`] and its trap entry. The exception stack top must stay first: the riscv64 trap
/// entry loads it from there.
#[repr(C)]
struct PerCpu {
    exc_stack_top: AtomicUsize,
    index: AtomicUsize,
}

static PERCPU: [PerCpu; MAX_CPUS] =
    [const { PerCpu { exc_stack_top: AtomicUsize::new(0), index: AtomicUsize::new(0) } }; MAX_CPUS];

/// Each CPU's hardware id (MPIDR affinity, hart id), by kernel CPU index.
static HW_ID: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// Entered from the port's boot code on every CPU: `cpu` is the kernel's index for it (the
/// boot CPU is 0, whatever its hardware id), `hw_id` its hardware id; its boot stack is set
/// up and interrupts are masked.
#[unsafe(no_mangle)]
extern "C" fn kernel_entry(cpu: usize, hw_id: u64) -> ! {
    let cpu = cpu.min(MAX_CPUS - 1);
    let pc = &PERCPU[cpu];
    pc.index.store(cpu, Ordering::Relaxed);
    pc.exc_stack_top.store(stacks::exc_stack_top(cpu), Ordering::Relaxed);
    HW_ID[cpu].store(hw_id, Ordering::Relaxed);
    set_percpu(pc as *const PerCpu as usize);
    stacks::prepare_cpu(cpu);
    if cpu == 0 {
        stacks::paint_thread_stacks();
        // A zero byte ends whatever the firmware printed (OpenSBI's banner has none): the host
        // decodes the defmt frames after it.
        uart_write(&[0]);
        crate::kmain()
    } else {
        crate::secondary_main(cpu)
    }
}

/// This CPU's index, in O(1) from the per-CPU register.
pub fn cpu_id() -> usize {
    percpu().wrapping_sub(PERCPU.as_ptr() as usize) / core::mem::size_of::<PerCpu>()
}

/// The hardware id of CPU `cpu` (recorded by [`start_cpu`] and at its entry).
pub fn hw_id(cpu: usize) -> u64 {
    HW_ID[cpu.min(MAX_CPUS - 1)].load(Ordering::Relaxed)
}

#[cfg_attr(target_arch = "arm", allow(dead_code))]
fn record_hw_id(cpu: usize, hw_id: u64) {
    HW_ID[cpu.min(MAX_CPUS - 1)].store(hw_id, Ordering::Relaxed);
}

/// Monotonic time in ns since the machine's counter started, never 0 (the scheduler's clock
/// starts above 0; the counter reads 0 only in the first nanoseconds).
pub fn now_ns() -> u64 {
    ((counter() as u128 * 1_000_000_000 / counter_freq() as u128) as u64).max(1)
}

/// A kernel thread's entry point: `entry(a0, a1)`, never returning.
pub type ThreadEntry = extern "C" fn(usize, usize) -> !;

/// Restores the interrupt state the port's `irq_save` reported: unmasks them if they were
/// enabled. Either way a compiler barrier, like `irq_save`, so no access of the critical
/// section moves past it.
pub fn irq_restore(was_enabled: bool) {
    if was_enabled {
        irq_enable();
    } else {
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
    }
}

/// Waits for an interrupt (`wfi` on every port). Under QEMU's single-threaded TCG a halt also
/// ends the CPU's slice.
pub fn wfi() {
    // SAFETY: `wfi` only pauses the CPU until an interrupt is pending.
    unsafe { core::arch::asm!("wfi", options(nomem, nostack)) }
}

/// A busy-wait hint: `yield`, which under QEMU's single-threaded TCG ends the spinning vCPU's
/// slice so another runs (never `isb`: under icount an isb-spin makes time crawl). riscv64 has
/// no such hint; its port has its own `relax`.
#[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
pub fn relax() {
    // SAFETY: `yield` is a hint with no effects (a compiler barrier, for spin loops).
    unsafe { core::arch::asm!("yield", options(nostack)) }
}

/// Interrupts masked on this CPU until dropped (restores the previous mask).
pub struct IrqGuard(bool);

impl IrqGuard {
    /// Masks interrupts.
    pub fn mask() -> IrqGuard {
        IrqGuard(irq_save())
    }
}

impl Drop for IrqGuard {
    fn drop(&mut self) {
        irq_restore(self.0)
    }
}

/// Spin-lock relax strategy of the kernel's locks: the port's [`relax`] (on aarch64 a
/// `yield`, which under QEMU's round-robin TCG ends the spinning vCPU's slice so the lock
/// holder runs).
pub struct YieldRelax;

impl spin::RelaxStrategy for YieldRelax {
    fn relax() {
        relax();
    }
}

/// The kernel's own spin lock.
///
/// The lock order, for every lock of the kernel:
///
/// 1. a workload program's `WORLD` (`scenario/program.rs`): taken while no other lock is held,
///    and no core call is made under it;
/// 2. a thread's park lock (`sched/thread.rs`): before any core lock;
/// 3. the core's locks, in sched-core's order (its `smp` module), through `with_core` with
///    interrupts masked;
/// 4. the logger's (`logger.rs`), taken for each defmt frame with interrupts masked, so under
///    any of the above;
/// 5. leaves, never held while taking another: the clock's `CLOCK` (Cortex-M; read by the
///    core's clock callback and by every log frame's timestamp; its holder reads a timer
///    register and adds, nothing that can fault and so log), and the GIC's `GIC` (aarch64;
///    set-up and per-CPU interrupt routing).
pub type Lock<T> = spin::mutex::Mutex<T, YieldRelax>;

/// The most bytes a workload program has (sched-workload's bound): the program window's
/// length.
pub const PROGRAM_BYTES: usize = sched_workload::limits::MAX_WORDS * 4;

/// The workload program as loaded, copied out of the port's window once.
#[cfg(not(target_arch = "arm"))]
static PROGRAM_COPY: spin::Once<Option<&'static [u8]>> = spin::Once::new();

/// The bytes of the workload program the runner loaded into the port's `PROGRAM_WINDOW`
/// (QEMU's generic loader, before the CPUs start): the whole window, copied into the kernel's
/// own memory with aligned word reads (device memory with the MMU off takes no other
/// access). `None` where the port has no window. What the bytes hold is unchecked here:
/// `sched_workload::Program::parse` checks them.
#[cfg(not(target_arch = "arm"))]
pub fn loaded_program() -> Option<&'static [u8]> {
    *PROGRAM_COPY.call_once(|| {
        let base = PROGRAM_WINDOW?;
        static mut WORDS: [u32; PROGRAM_BYTES / 4] = [0; PROGRAM_BYTES / 4];
        // SAFETY: `call_once` runs this once, and nothing else names `WORDS`, so this is the
        // only reference to it; the window is RAM of this machine that the kernel never uses
        // (see its definition), so each aligned word of it can be read.
        let words = unsafe { &mut *core::ptr::addr_of_mut!(WORDS) };
        for (i, w) in words.iter_mut().enumerate() {
            // SAFETY: within the window, 4-byte aligned (the base is).
            *w = unsafe { ((base + i * 4) as *const u32).read_volatile() };
        }
        // SAFETY: a `[u32]` is a valid `[u8]` of four times its length, alignment 1; the words
        // are not written again (shared from here on).
        Some(unsafe { core::slice::from_raw_parts(words.as_ptr() as *const u8, PROGRAM_BYTES) })
    })
}

/// No workload programs on a microcontroller: its 64 KiB of RAM hold the kernel alone.
#[cfg(target_arch = "arm")]
pub fn loaded_program() -> Option<&'static [u8]> {
    None
}
