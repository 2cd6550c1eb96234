//! The aarch64 port (QEMU `virt`, EL1): boot code, exception vectors, the saved-register
//! frame, system registers, the GICv3 and its SGIs, the virtual timer, PSCI, the PL011 and
//! semihosting.

use core::arch::{asm, global_asm};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use aarch64_cpu::registers::{
    Readable, Writeable, CNTFRQ_EL0, CNTVCT_EL0, CNTV_CTL_EL0, CNTV_CVAL_EL0, ESR_EL1, FAR_EL1, TPIDR_EL1,
};
use arm_gic::gicv3::registers::{Gicd, GicrSgi};
use arm_gic::gicv3::{GicCpuInterface, GicV3, SgiTarget, SgiTargetGroup};
use arm_gic::{IntId, InterruptGroup, UniqueMmioPointer};
use qemu_exit::QEMUExit;

use crate::devicetree::{DeviceTree, DtError};

use super::{
    cpu_id, hw_id, record_hw_id, ArchError, ExcKind, FaultInfo, Firmware, Frame, IrqGuard, Lock, ThreadEntry,
    BOOT_STACK_SIZE, FRAME_SIZE, MAX_CPUS,
};

/// What the boot banner calls this machine.
pub const NAME: &str = "aarch64 at EL1";
/// Where the runner's loader puts a workload program: 16 MiB below the end of the machine's
/// 256 MiB of RAM (from 0x4000_0000), far above the kernel's image, stacks and `.bss`.
pub const PROGRAM_WINDOW: Option<usize> = Some(0x4f00_0000);
/// Its tick can stop (a one-shot timer; the counter runs on), so `nohz=on` is offered.
pub const TICKLESS: bool = true;

const UART_BASE: usize = 0x0900_0000;
const GICD_BASE: usize = 0x0800_0000;
const GICR_BASE: usize = 0x080A_0000;
/// Redistributor frames QEMU virt's GICv3 region holds (0xF6_0000 bytes of 128 KiB frames):
/// the most the port looks for the one marked last among.
const GICR_FRAMES: usize = 0x00F6_0000 / 0x2_0000;
const DTB_BASE: usize = 0x4000_0000;
/// The EL1 virtual timer's PPI (INTID 27).
const TIMER_INTID: IntId = IntId::ppi(11);

global_asm!(
    r#"
.equ BOOT_STACK_SIZE, {boot_stack}
.equ FRAME_SIZE, {frame}

.section .text.boot, "ax"
.global _start
_start:
    mov     x19, #0
    b       1f
.global _secondary_entry
_secondary_entry:
    mov     x19, x0             // PSCI context id = CPU index
1:
    msr     daifset, #0xf
    mrs     x1, CurrentEL
    lsr     x1, x1, #2
    cmp     x1, #2
    b.ne    2f
    // Started at EL2: run EL1 in AArch64 with the physical counter/timer available, drop.
    mov     x1, #(1 << 31)
    msr     hcr_el2, x1
    mov     x1, #3
    msr     cnthctl_el2, x1
    msr     cntvoff_el2, xzr
    mov     x1, #0x3c5
    msr     spsr_el2, x1
    adr     x1, 2f
    msr     elr_el2, x1
    eret
2:
    cbnz    x19, 4f
    // CPU 0 clears .bss (stacks included) before anything uses memory.
    adrp    x1, __bss_start
    add     x1, x1, :lo12:__bss_start
    adrp    x2, __bss_end
    add     x2, x2, :lo12:__bss_end
3:
    cmp     x1, x2
    b.hs    4f
    stp     xzr, xzr, [x1], #16
    b       3b
4:
    adrp    x1, __boot_stacks
    add     x1, x1, :lo12:__boot_stacks
    add     x2, x19, #1
    mov     x3, #BOOT_STACK_SIZE
    madd    x1, x2, x3, x1
    mov     sp, x1
    adrp    x1, __vectors
    add     x1, x1, :lo12:__vectors
    msr     vbar_el1, x1
    isb
    // kernel_entry(index, MPIDR affinity: Aff0-2 and Aff3, without the flag bits)
    mrs     x1, mpidr_el1
    and     x2, x1, #0xffffff
    lsr     x1, x1, #32
    and     x1, x1, #0xff
    orr     x1, x2, x1, lsl #32
    mov     x0, x19
    bl      kernel_entry
5:
    wfe
    b       5b

.macro VENTRY kind
    .balign 0x80
    sub     sp, sp, #FRAME_SIZE
    stp     x0, x1, [sp, #0]
    mov     x1, #\kind
    b       exc_common
.endm

.section .text.vectors, "ax"
.balign 0x800
.global __vectors
__vectors:
    VENTRY 0
    VENTRY 1
    VENTRY 2
    VENTRY 3
    VENTRY 4
    VENTRY 5
    VENTRY 6
    VENTRY 7
    VENTRY 8
    VENTRY 9
    VENTRY 10
    VENTRY 11
    VENTRY 12
    VENTRY 13
    VENTRY 14
    VENTRY 15

exc_common:
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x19, [sp, #144]
    stp     x20, x21, [sp, #160]
    stp     x22, x23, [sp, #176]
    stp     x24, x25, [sp, #192]
    stp     x26, x27, [sp, #208]
    stp     x28, x29, [sp, #224]
    mrs     x2, elr_el1
    mrs     x3, spsr_el1
    stp     x30, x2, [sp, #240]
    str     x3, [sp, #256]
    // The handler runs on this CPU's exception stack (its top is the first word of the
    // per-CPU block TPIDR_EL1 points at), so the interrupted thread's stack is left alone
    // once its frame is stored: another CPU may resume that thread right away.
    mov     x0, sp
    mrs     x2, tpidr_el1
    ldr     x2, [x2]
    mov     sp, x2
    bl      exception_entry
    // x0: the frame to resume (maybe another thread's, on its own stack).
    mov     sp, x0
    ldr     x3, [sp, #256]
    ldp     x30, x2, [sp, #240]
    msr     elr_el1, x2
    msr     spsr_el1, x3
    ldp     x2, x3, [sp, #16]
    ldp     x4, x5, [sp, #32]
    ldp     x6, x7, [sp, #48]
    ldp     x8, x9, [sp, #64]
    ldp     x10, x11, [sp, #80]
    ldp     x12, x13, [sp, #96]
    ldp     x14, x15, [sp, #112]
    ldp     x16, x17, [sp, #128]
    ldp     x18, x19, [sp, #144]
    ldp     x20, x21, [sp, #160]
    ldp     x22, x23, [sp, #176]
    ldp     x24, x25, [sp, #192]
    ldp     x26, x27, [sp, #208]
    ldp     x28, x29, [sp, #224]
    ldp     x0, x1, [sp, #0]
    add     sp, sp, #FRAME_SIZE
    eret
"#,
    boot_stack = const BOOT_STACK_SIZE,
    frame = const FRAME_SIZE,
);

// The secondary CPUs' entry point in the assembly above (only its address is passed to PSCI).
unsafe extern "C" {
    fn _secondary_entry();
}

/// The frame the vectors push: x0–x30, ELR_EL1 (`pc`), SPSR_EL1 (`status`).
impl Frame {
    /// A new thread's first frame: it starts at `entry(x0 = a0, x1 = a1)` at EL1h with
    /// interrupts unmasked (the vectors take `sp` from the frame's own address, so `_sp_top`
    /// is implied).
    pub fn new_thread(entry: ThreadEntry, a0: usize, a1: usize, _sp_top: usize) -> Frame {
        let mut x = [0u64; 31];
        x[0] = a0 as u64;
        x[1] = a1 as u64;
        Frame { x, pc: entry as usize as u64, status: 0x5, _pad: 0 }
    }

    /// System call argument `i` (0..4) of the interrupted thread: x0–x3.
    pub fn syscall_arg(&self, i: usize) -> u64 {
        self.x.get(i).copied().unwrap_or(0)
    }

    /// Sets the system call's return value: x0.
    pub fn set_syscall_ret(&mut self, v: u64) {
        self.x[0] = v;
    }
}

/// The Rust side of every vector. Returns the frame to resume.
#[unsafe(no_mangle)]
extern "C" fn exception_entry(frame: *mut Frame, kind: u64) -> *mut Frame {
    let kind = match kind {
        4 => {
            let esr = ESR_EL1.get();
            if (esr >> 26) & 0x3f == 0x15 {
                // SAFETY: the vector stored x8 in the frame just pushed at `frame`; nobody
                // else reads or writes it while this handler runs.
                ExcKind::Svc(unsafe { (*frame).x[8] })
            } else {
                ExcKind::Fault
            }
        }
        5 => {
            // A slice interrupt (`slice.rs`) is the port's alone: the next slice or the tick
            // is armed, and `yield` hands the emulator's turn on. Any other interrupt goes to
            // the host's `irq_ack` (and one still pending traps again after the return).
            let cpu = cpu_id().min(MAX_CPUS - 1);
            if let Some(irq) = GicCpuInterface::get_and_acknowledge_interrupt(InterruptGroup::Group1).map(Irq)
            {
                if irq.is_timer() && super::slice::take_slice() {
                    irq_eoi(irq);
                    super::relax();
                    return frame;
                }
                ACKED[cpu].store(irq.0.raw_value() + 1, Ordering::Relaxed);
            }
            ExcKind::Irq
        }
        k => ExcKind::Unexpected(k),
    };
    // SAFETY: `frame` is the 272-byte frame this CPU's vector pushed on the interrupted
    // stack, and no other code touches it while the first half runs: the thread it belongs
    // to can run elsewhere only after the scheduler's `finish`, which only the second half,
    // given the address alone, calls.
    let entered = crate::sched::exception(unsafe { &mut *frame }, kind);
    crate::sched::exception_exit(frame as usize, entered) as *mut Frame
}

/// Syndrome, fault address and return address of the current synchronous exception.
pub fn fault_info(frame: &Frame) -> FaultInfo {
    FaultInfo([("ESR", ESR_EL1.get()), ("FAR", FAR_EL1.get()), ("ELR", frame.pc)])
}

/// Points TPIDR_EL1 at this CPU's per-CPU block.
pub(super) fn set_percpu(addr: usize) {
    TPIDR_EL1.set(addr as u64);
}

/// The per-CPU block's address, from TPIDR_EL1.
pub(super) fn percpu() -> usize {
    TPIDR_EL1.get() as usize
}

/// Executes an undefined instruction (the `fault` scenario checks the fault path).
pub fn undefined_instruction() {
    // SAFETY: `udf` raises a synchronous exception, which the vectors report as a fault
    // (the handler panics); no state of this thread is touched.
    unsafe { asm!("udf #0", options(nostack)) }
}

// ---- interrupt masking, idle, relax ---------------------------------------------------

/// Masks IRQs and FIQs; returns whether IRQs were unmasked (for `irq_restore`).
pub fn irq_save() -> bool {
    let daif: u64;
    // SAFETY: reads DAIF and masks IRQs/FIQs. Not `nomem`: the asm is a compiler barrier, so
    // no memory access of the critical section moves before the mask.
    unsafe {
        asm!("mrs {0}, daif", "msr daifset, #3", out(reg) daif, options(nostack));
    }
    daif & (1 << 7) == 0
}

/// Unmasks IRQs on this CPU (end of boot, entering the idle loop).
pub fn irq_enable() {
    // SAFETY: unmasking interrupts is what the idle loop and threads run with.
    unsafe { asm!("msr daifclr, #3", options(nostack)) }
}

/// A system call: `svc #0` with the number in x8, arguments in x0–x3, the result in x0.
pub(super) fn trap(nr: u64, a0: u64, a1: u64, a2: u64, a3: u64) -> u64 {
    let ret: u64;
    // SAFETY: `svc #0` enters the exception vector, which saves and restores every
    // register except x0 (the result).
    unsafe {
        asm!("svc #0", inlateout("x0") a0 => ret, in("x1") a1, in("x2") a2, in("x3") a3, in("x8") nr);
    }
    ret
}

// ---- time -------------------------------------------------------------------------------

/// Counter frequency (Hz).
pub fn counter_freq() -> u64 {
    CNTFRQ_EL0.get().max(1)
}

/// The virtual counter (ticks at [`counter_freq`]).
pub fn counter() -> u64 {
    CNTVCT_EL0.get()
}

/// Programs this CPU's virtual timer to fire when the counter reaches `at` (at once if it
/// has; `u64::MAX`: never). The tick and the slices are armed through it (`slice.rs`).
pub(super) fn program_timer(at: u64) {
    if at == u64::MAX {
        CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::CLEAR);
    } else {
        CNTV_CVAL_EL0.set(at);
        CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::IMASK::CLEAR);
    }
}

// ---- machine set-up: GICv3, PSCI ----------------------------------------------------------

struct Gic(GicV3<'static>);

// SAFETY: the driver holds raw pointers to the GIC's MMIO frames, which are valid from
// every CPU; it only ever lives behind the `GIC` lock, so one CPU uses it at a time.
unsafe impl Send for Gic {}

/// The GIC driver. A leaf of the lock order ([`super::Lock`]).
static GIC: Lock<Option<Gic>> = Lock::new(None);

/// PSCI through SMC (else HVC), from the device tree's `/psci` node.
static PSCI_SMC: AtomicBool = AtomicBool::new(false);

/// The index of the GIC redistributor whose `GICR_TYPER` affinity is `affinity` (Aff3 and
/// Aff2-0, as [`hw_id`] holds them). The driver numbers redistributors in memory order, which
/// need not be the kernel's CPU order: the boot CPU is CPU 0 whatever its affinity.
fn redistributor_of(gic: &mut GicV3<'_>, affinity: u64) -> Result<usize, ArchError> {
    (0..)
        .map_while(|frame| gic.gicr_typer(frame).ok().map(|t| (frame, t.core_mpidr())))
        .find(|&(_, a)| a == affinity)
        .map(|(frame, _)| frame)
        .ok_or(ArchError::new("no GIC redistributor has this CPU's affinity"))
}

/// Machine-wide set-up on CPU 0, before the others start: the counter's frequency checked,
/// the PSCI conduit from the device tree (needed only to start more than one CPU), the boot
/// CPU's affinity checked against what an SGI reaches, the GIC distributor and every
/// redistributor up to the one marked last (at most [`GICR_FRAMES`]): a machine may have more
/// than the kernel runs on (a core the firmware marked failed, or more cores than the build
/// drives), and the kernel's CPUs look theirs up by affinity among them all.
pub fn machine_init(fdt: Option<&DeviceTree<'_>>, ncpus: usize) -> Result<(), ArchError> {
    let fdt = fdt.ok_or(ArchError::new("no device tree"))?;
    if !super::COUNTER_HZ_RANGE.contains(&CNTFRQ_EL0.get()) {
        return Err(ArchError::new("CNTFRQ_EL0 out of range (1 kHz to 1 GHz)"));
    }
    let method = fdt.find("/psci").and_then(|p| p.property("method")).and_then(|m| m.as_str());
    match method {
        Some("hvc") => PSCI_SMC.store(false, Ordering::Relaxed),
        Some("smc") => PSCI_SMC.store(true, Ordering::Relaxed),
        _ if ncpus > 1 => return Err(ArchError::new("no /psci method (hvc or smc) to start CPUs with")),
        _ => {}
    }
    if !sgi_reaches(hw_id(0)) {
        return Err(ArchError::new(
            "the boot CPU's Aff0 is above 15, where an SGI's target list does not reach",
        ));
    }
    let _irq = IrqGuard::mask();
    let gicd = NonNull::new(GICD_BASE as *mut Gicd).ok_or(ArchError::new("null GICD"))?;
    let gicr = NonNull::new(GICR_BASE as *mut GicrSgi).ok_or(ArchError::new("null GICR"))?;
    let unrecognised = |_| ArchError::new("GICv3 redistributor frames not recognised");
    // SAFETY: these are QEMU virt's GICv3 distributor and redistributor frames, device
    // memory with the MMU off. This first instance only reads registers of the frames up to
    // the one marked last (and the first frame's identification), and is dropped before the
    // driver's own instance is created.
    let frames = {
        let mut probe =
            unsafe { GicV3::new(UniqueMmioPointer::new(gicd), gicr, GICR_FRAMES) }.map_err(unrecognised)?;
        (0..GICR_FRAMES)
            .position(|f| probe.gicr_typer(f).is_ok_and(|t| t.last_redistributor()))
            .map_or(GICR_FRAMES, |last| last + 1)
    };
    if frames < ncpus {
        return Err(ArchError::new("fewer GIC redistributors than CPUs"));
    }
    // SAFETY: as above, and this is the only driver instance from here on (created once).
    let mut gic = unsafe { GicV3::new(UniqueMmioPointer::new(gicd), gicr, frames) }.map_err(unrecognised)?;
    let boot = redistributor_of(&mut gic, hw_id(0))?;
    gic.setup(boot);
    *GIC.lock() = Some(Gic(gic));
    Ok(())
}

/// Per-CPU interrupt set-up: system-register interface, the CPU's redistributor (the one of
/// its affinity) awake, group 1 on, the SGIs `ipis` and the timer PPI enabled, priority mask
/// open.
pub fn cpu_init(cpu: usize, ipis: &[u32]) -> Result<(), ArchError> {
    let _irq = IrqGuard::mask();
    let mut g = GIC.lock();
    let Some(Gic(gic)) = g.as_mut() else { return Err(ArchError::new("GIC not initialised")) };
    let frame = redistributor_of(gic, hw_id(cpu))?;
    if cpu != 0 {
        gic.init_cpu(frame);
        GicCpuInterface::enable_group1(true);
    }
    for &s in ipis {
        gic.enable_interrupt(IntId::sgi(s), Some(frame), true)
            .map_err(|_| ArchError::new("cannot enable an SGI"))?;
    }
    gic.enable_interrupt(TIMER_INTID, Some(frame), true)
        .map_err(|_| ArchError::new("cannot enable the timer PPI"))?;
    GicCpuInterface::set_priority_mask(0xff);
    Ok(())
}

/// Starts the CPU with affinity `hw_id` as kernel CPU `index` (PSCI `CPU_ON`, context id =
/// index); refused before the call if an SGI could not reach it.
pub fn start_cpu(index: usize, hw_id: u64) -> Result<(), ArchError> {
    if !sgi_reaches(hw_id) {
        return Err(ArchError::new("its Aff0 is above 15, where an SGI's target list does not reach"));
    }
    record_hw_id(index, hw_id);
    let entry = _secondary_entry as *const () as usize as u64;
    let r = if PSCI_SMC.load(Ordering::Relaxed) {
        smccc::psci::cpu_on::<smccc::Smc>(hw_id, entry, index as u64)
    } else {
        smccc::psci::cpu_on::<smccc::Hvc>(hw_id, entry, index as u64)
    };
    r.map_err(|e| ArchError { what: "PSCI CPU_ON", code: i64::from(e) })
}

/// An acknowledged interrupt; end it with [`irq_eoi`].
pub struct Irq(IntId);

impl Irq {
    /// Its INTID.
    pub fn number(&self) -> u32 {
        self.0.raw_value()
    }

    /// Whether it is the virtual timer's PPI.
    pub fn is_timer(&self) -> bool {
        self.0 == TIMER_INTID
    }

    /// The IPI kind (the SGI number), if it is an SGI.
    pub fn ipi(&self) -> Option<u32> {
        self.0.sgi_index()
    }
}

/// An interrupt the vector acknowledged for the host (INTID + 1; 0: none).
static ACKED: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// The next pending interrupt, acknowledged (the one the vector already took first). A
/// slice interrupt among them (see `slice.rs`) is handled here: the next slice or the tick
/// is armed and it is ended, and the host goes on to the next.
pub fn irq_ack() -> Option<Irq> {
    loop {
        let irq = match ACKED[cpu_id().min(MAX_CPUS - 1)].swap(0, Ordering::Relaxed) {
            0 => GicCpuInterface::get_and_acknowledge_interrupt(InterruptGroup::Group1).map(Irq)?,
            // (It was a valid INTID when the vector acknowledged it.)
            id => match IntId::try_from(id - 1) {
                Ok(intid) => Irq(intid),
                Err(_) => continue,
            },
        };
        if irq.is_timer() && super::slice::take_slice() {
            irq_eoi(irq);
            continue;
        }
        return Some(irq);
    }
}

/// Ends an acknowledged interrupt.
pub fn irq_eoi(irq: Irq) {
    GicCpuInterface::end_interrupt(irq.0, InterruptGroup::Group1)
}

/// The highest Aff0 an SGI reaches: its target list has one bit for each of Aff0 0 to 15.
/// (GICv3's range selector reaches further on a distributor that supports it; the kernel
/// does not use it, so it refuses a CPU it could not interrupt.)
const SGI_AFF0_MAX: u64 = 15;

/// Whether an SGI can reach the CPU of affinity `hw_id`.
fn sgi_reaches(hw_id: u64) -> bool {
    hw_id & 0xff <= SGI_AFF0_MAX
}

/// Sends IPI `kind` (SGI `kind`) to kernel CPU `cpu`, whose Aff0 is at most
/// [`SGI_AFF0_MAX`] ([`machine_init`] and [`start_cpu`] refuse any other).
pub fn send_ipi(cpu: usize, kind: u32) {
    let mpidr = hw_id(cpu);
    let target = SgiTarget::List {
        affinity3: ((mpidr >> 32) & 0xff) as u8,
        affinity2: ((mpidr >> 16) & 0xff) as u8,
        affinity1: ((mpidr >> 8) & 0xff) as u8,
        target_list: 1 << (mpidr & 0xf),
    };
    // The stores the IPI announces (a wakeup's, a kick's) reach the other CPUs before it:
    // writing the SGI register is no memory access, which no later barrier orders.
    aarch64_cpu::asm::barrier::dsb(aarch64_cpu::asm::barrier::ISHST);
    let _ = GicCpuInterface::send_sgi(IntId::sgi(kind), target, SgiTargetGroup::CurrentGroup1);
}

// ---- PL011, DTB, exit ---------------------------------------------------------------------

/// Writes bytes to the PL011 (polling the TX FIFO). Callers serialise (the log lock).
pub fn uart_write(bytes: &[u8]) {
    let dr = UART_BASE as *mut u32;
    let fr = (UART_BASE + 0x18) as *const u32;
    for &b in bytes {
        // SAFETY: QEMU virt's PL011 data and flag registers, device memory (MMU off).
        unsafe {
            while fr.read_volatile() & (1 << 5) != 0 {}
            dr.write_volatile(b as u32);
        }
    }
}

/// The device tree QEMU placed at 0x4000_0000 (present because the kernel links above it).
pub fn firmware() -> Result<Firmware, ArchError> {
    // SAFETY: RAM starts at 0x4000_0000 and the kernel's image, stacks and data all lie
    // above 0x4020_0000, so the 2 MiB below it are readable and nothing writes them; QEMU
    // put the DTB there before starting the guest.
    match unsafe { super::device_tree_at(DTB_BASE as *const u8) } {
        Ok(tree) => Ok(Firmware::DeviceTree(tree)),
        Err(DtError::Header) => Err(ArchError::new("no device tree at 0x4000_0000")),
        Err(e) => Err(ArchError::new(e.what())),
    }
}

/// Ends the QEMU run with `code` (semihosting).
pub fn exit(code: u32) -> ! {
    qemu_exit::AArch64::new().exit(code)
}
