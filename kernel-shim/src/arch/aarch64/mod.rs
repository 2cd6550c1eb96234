//! The aarch64 machine (QEMU `virt`): boot code, exception vectors, the saved-register
//! frame, system registers, the GICv3, the virtual timer, PSCI, the PL011 and semihosting.

mod logger;

use core::arch::{asm, global_asm};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};

use aarch64_cpu::registers::{
    Readable, Writeable, CNTFRQ_EL0, CNTVCT_EL0, CNTV_CTL_EL0, CNTV_CVAL_EL0, ESR_EL1, FAR_EL1, MPIDR_EL1,
    TPIDR_EL1,
};
use arm_gic::gicv3::registers::{Gicd, GicrSgi};
use arm_gic::gicv3::{GicCpuInterface, GicV3, SgiTarget, SgiTargetGroup};
use arm_gic::{IntId, InterruptGroup, UniqueMmioPointer};
use qemu_exit::QEMUExit;

/// Most CPUs this kernel drives (the scheduler's `CPUS`).
pub const MAX_CPUS: usize = 8;
/// Kernel threads in the static pool.
pub const MAX_THREADS: usize = 64;
/// Stack size of every kernel thread.
pub const STACK_SIZE: usize = 16 * 1024;
/// Boot (and then idle) stack of each CPU: CPU 0 initialises the scheduler on it, and
/// `Smp::init_with` builds each CPU's runqueue on the stack.
pub const BOOT_STACK_SIZE: usize = 128 * 1024;
/// Exception stack of each CPU: every call into the core runs on it. The suite measures its
/// high-water mark (about 2.5 KB) and fails above 4 KB; this is twice that budget.
pub const EXC_STACK_SIZE: usize = 8 * 1024;
/// Size of the saved-register frame the vectors push (x0–x30, ELR, SPSR, padding).
pub const FRAME_SIZE: usize = 272;

const UART_BASE: usize = 0x0900_0000;
const GICD_BASE: usize = 0x0800_0000;
const GICR_BASE: usize = 0x080A_0000;
const DTB_BASE: usize = 0x4000_0000;
/// The EL1 virtual timer's PPI (INTID 27).
pub const TIMER_INTID: IntId = IntId::ppi(11);

/// Syscall numbers (in x8 of `svc #0`).
pub const SYS_SPAWN: u64 = 1;
/// Give up the CPU once.
pub const SYS_YIELD: u64 = 2;
/// End the calling thread.
pub const SYS_EXIT: u64 = 3;
/// Block until unparked (returns at once if an unpark is pending).
pub const SYS_PARK: u64 = 4;
/// Unpark a thread (by slot).
pub const SYS_UNPARK: u64 = 5;
/// Set a thread's allowed CPUs (by slot).
pub const SYS_SET_AFFINITY: u64 = 6;
/// Block for at least the given number of nanoseconds (woken from a tick).
pub const SYS_SLEEP: u64 = 7;

global_asm!(
    r#"
.equ STACK_SIZE, {stack}
.equ BOOT_STACK_SIZE, {boot_stack}
.equ EXC_STACK_SIZE, {exc_stack}
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

.section .bss.stacks, "aw", %nobits
.balign 16
.global __boot_stacks
__boot_stacks:
    .space BOOT_STACK_SIZE * {cpus}
.global __exc_stacks
__exc_stacks:
    .space EXC_STACK_SIZE * {cpus}
.global __thread_stacks
__thread_stacks:
    .space STACK_SIZE * {threads}
"#,
    stack = const STACK_SIZE,
    boot_stack = const BOOT_STACK_SIZE,
    exc_stack = const EXC_STACK_SIZE,
    frame = const FRAME_SIZE,
    cpus = const MAX_CPUS,
    threads = const MAX_THREADS,
);

// Symbols of the assembly above: stack areas (only their addresses are used) and the
// secondary CPUs' entry point (only its address is passed to PSCI).
unsafe extern "C" {
    static __boot_stacks: u8;
    static __exc_stacks: u8;
    static __thread_stacks: u8;
    fn _secondary_entry();
}

/// A saved context: what the vectors push on exception entry and pop on return.
#[repr(C)]
pub struct Frame {
    /// x0–x30.
    pub x: [u64; 31],
    /// Where execution resumes.
    pub elr: u64,
    /// The saved PSTATE.
    pub spsr: u64,
    _pad: u64,
}

impl Frame {
    /// System call argument `i` (0..4) of the interrupted thread: x0–x3.
    pub fn syscall_arg(&self, i: usize) -> u64 {
        self.x.get(i).copied().unwrap_or(0)
    }

    /// Sets the system call's return value: x0.
    pub fn set_syscall_ret(&mut self, v: u64) {
        self.x[0] = v;
    }
}

const _: () = assert!(core::mem::size_of::<Frame>() == FRAME_SIZE);

/// Per-CPU block; TPIDR_EL1 holds its address. The exception stack top must stay first.
#[repr(C)]
struct PerCpu {
    exc_stack_top: AtomicUsize,
    index: AtomicUsize,
}

static PERCPU: [PerCpu; MAX_CPUS] =
    [const { PerCpu { exc_stack_top: AtomicUsize::new(0), index: AtomicUsize::new(0) } }; MAX_CPUS];

/// What the vector table hands to Rust.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExcKind {
    /// A synchronous exception from EL1h: `svc` (with its number) or a fault.
    Svc(u64),
    /// A synchronous exception that is not an `svc`: a fault.
    Fault,
    /// An IRQ taken from EL1h.
    Irq,
    /// Anything this kernel never expects (FIQ, SError, SP0 or lower-EL vectors).
    Unexpected(u64),
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
        5 => ExcKind::Irq,
        k => ExcKind::Unexpected(k),
    };
    // SAFETY: `frame` is the 272-byte frame this CPU's vector pushed on the interrupted
    // stack; until this handler returns no other code touches it (the thread it belongs to
    // is not runnable elsewhere before the scheduler's `finish`, which comes after the
    // last use of this reference).
    let f = unsafe { &mut *frame };
    crate::sched::exception(f, frame as usize, kind) as *mut Frame
}

/// Syndrome, fault address and return address of the current synchronous exception.
pub fn fault_info(frame: &Frame) -> (u64, u64, u64) {
    (ESR_EL1.get(), FAR_EL1.get(), frame.elr)
}

/// Entered from the boot code on every CPU with its own boot stack and VBAR set.
#[unsafe(no_mangle)]
extern "C" fn kernel_entry(cpu: usize) -> ! {
    let cpu = cpu.min(MAX_CPUS - 1);
    let pc = &PERCPU[cpu];
    pc.index.store(cpu, Ordering::Relaxed);
    pc.exc_stack_top.store(exc_stacks_base() + (cpu + 1) * EXC_STACK_SIZE, Ordering::Relaxed);
    TPIDR_EL1.set(pc as *const PerCpu as u64);
    let exc_bottom = exc_stacks_base() + cpu * EXC_STACK_SIZE;
    // SAFETY: the lowest words of this CPU's exception and boot stacks: this CPU's own,
    // far below anything used yet (the boot stack is in use only near its top).
    unsafe {
        (exc_bottom as *mut u64).write_volatile(CANARY);
        ((boot_stacks_base() + cpu * BOOT_STACK_SIZE) as *mut u64).write_volatile(CANARY);
    }
    // Paint the rest of the exception stack, so its high-water mark can be measured.
    for w in (exc_bottom + 8..exc_bottom + EXC_STACK_SIZE).step_by(8) {
        // SAFETY: this CPU's own exception stack, which nothing uses before this CPU takes
        // its first exception (IRQs are masked until its idle loop).
        unsafe { (w as *mut u64).write_volatile(PAINT) };
    }
    if cpu == 0 {
        crate::kmain()
    } else {
        crate::secondary_main(cpu)
    }
}

fn boot_stacks_base() -> usize {
    core::ptr::addr_of!(__boot_stacks) as usize
}

fn exc_stacks_base() -> usize {
    core::ptr::addr_of!(__exc_stacks) as usize
}

fn thread_stacks_base() -> usize {
    core::ptr::addr_of!(__thread_stacks) as usize
}

/// This CPU's index, in O(1) from TPIDR_EL1.
pub fn cpu_id() -> usize {
    let p = TPIDR_EL1.get() as usize;
    let base = PERCPU.as_ptr() as usize;
    p.wrapping_sub(base) / core::mem::size_of::<PerCpu>()
}

/// Writes the first frame of thread `slot` at the top of its stack: it starts at
/// `entry(x0 = a0, x1 = a1)` at EL1h with interrupts unmasked. Returns the frame's address.
pub fn init_thread_frame(
    slot: usize,
    entry: extern "C" fn(usize, usize) -> !,
    a0: usize,
    a1: usize,
) -> usize {
    let slot = slot.min(MAX_THREADS - 1);
    let top = thread_stacks_base() + (slot + 1) * STACK_SIZE;
    let frame = (top - FRAME_SIZE) as *mut Frame;
    let mut x = [0u64; 31];
    x[0] = a0 as u64;
    x[1] = a1 as u64;
    // SAFETY: the frame and the canary lie inside thread `slot`'s stack, which the caller
    // owns: the slot is allocated to it and no CPU runs on that stack.
    unsafe {
        frame.write(Frame { x, elr: entry as usize as u64, spsr: 0x5, _pad: 0 });
        ((top - STACK_SIZE) as *mut u64).write_volatile(CANARY);
    }
    frame as usize
}

/// Written at the lowest word of every stack; a stack that grew past its end overwrote it.
const CANARY: u64 = 0x57ac_c0de_5afe_f00d;

/// Fills each CPU's exception stack at boot; the deepest word no longer holding it marks how
/// far the stack has ever grown.
const PAINT: u64 = 0x5eed_5eed_5eed_5eed;

/// The most bytes of `cpu`'s exception stack ever used (every call into the core runs on it),
/// from the paint the boot left on it.
pub fn exc_stack_high_water(cpu: usize) -> usize {
    let bottom = exc_stacks_base() + cpu.min(MAX_CPUS - 1) * EXC_STACK_SIZE;
    let untouched = (bottom + 8..bottom + EXC_STACK_SIZE)
        .step_by(8)
        // SAFETY: words of the linker-placed exception stack area, always mapped. A
        // volatile read of a word the CPU may be writing is a diagnostic race: the value read
        // is either the paint or not, and either answer is a valid measurement.
        .take_while(|&w| unsafe { (w as *const u64).read_volatile() } == PAINT)
        .count();
    EXC_STACK_SIZE - 8 - untouched * 8
}

fn canary_intact(bottom: usize) -> bool {
    // SAFETY: `bottom` is the lowest word of one of the linker-placed stack areas, always
    // mapped; a volatile read of it races with nothing that matters (a stack only reaches
    // it by overflowing, which is what this detects).
    unsafe { (bottom as *const u64).read_volatile() == CANARY }
}

/// Whether thread `slot`'s stack still has its canary.
pub fn thread_stack_intact(slot: usize) -> bool {
    canary_intact(thread_stacks_base() + slot.min(MAX_THREADS - 1) * STACK_SIZE)
}

/// Whether `cpu`'s exception and boot (idle) stacks still have their canaries.
pub fn cpu_stacks_intact(cpu: usize) -> bool {
    let cpu = cpu.min(MAX_CPUS - 1);
    canary_intact(exc_stacks_base() + cpu * EXC_STACK_SIZE)
        && canary_intact(boot_stacks_base() + cpu * BOOT_STACK_SIZE)
}

/// Executes an undefined instruction (the `fault` scenario checks the fault path).
pub fn undefined_instruction() {
    // SAFETY: `udf` raises a synchronous exception, which the vectors report as a fault
    // (the handler panics); no state of this thread is touched.
    unsafe { asm!("udf #0", options(nostack)) }
}

// ---- interrupt masking, idle, relax ---------------------------------------------------

/// IRQs masked on this CPU until dropped (restores the previous mask).
pub struct IrqGuard(u64);

impl IrqGuard {
    /// Masks IRQs and FIQs.
    pub fn mask() -> IrqGuard {
        let daif: u64;
        // SAFETY: reads DAIF and masks IRQs/FIQs. Not `nomem`: the asm is a compiler barrier,
        // so no memory access of the critical section moves before the mask.
        unsafe {
            asm!("mrs {0}, daif", "msr daifset, #3", out(reg) daif, options(nostack));
        }
        IrqGuard(daif)
    }
}

impl Drop for IrqGuard {
    fn drop(&mut self) {
        // SAFETY: restores the DAIF value read in `mask`; a compiler barrier like `mask`.
        unsafe { asm!("msr daif, {0}", in(reg) self.0, options(nostack)) }
    }
}

/// Unmasks IRQs on this CPU (end of boot, entering the idle loop).
pub fn irq_enable() {
    // SAFETY: unmasking interrupts is what the idle loop and threads run with.
    unsafe { asm!("msr daifclr, #3", options(nostack)) }
}

/// Waits for an interrupt.
pub fn wfi() {
    // SAFETY: `wfi` only pauses the CPU.
    unsafe { asm!("wfi", options(nomem, nostack)) }
}

/// A busy-wait hint (`yield`, never `isb`: under icount an isb-spin makes time crawl).
pub fn relax() {
    // SAFETY: `yield` is a hint with no effects (a compiler barrier, for spin loops).
    unsafe { asm!("yield", options(nostack)) }
}

/// Spin-lock relax strategy that issues `yield`: under QEMU's round-robin TCG a `yield`
/// ends the spinning vCPU's slice, so the lock holder runs (an `isb` spin does not).
pub struct YieldRelax;

impl spin::RelaxStrategy for YieldRelax {
    fn relax() {
        relax();
    }
}

/// The kernel's own spin lock (its waits spin with `yield`).
pub type Lock<T> = spin::mutex::Mutex<T, YieldRelax>;

// ---- syscalls (threads enter the scheduler through `svc`) ------------------------------

fn svc(nr: u64, a0: u64, a1: u64, a2: u64, a3: u64) -> u64 {
    let ret: u64;
    // SAFETY: `svc #0` enters the exception vector, which saves and restores every
    // register except x0 (the result).
    unsafe {
        asm!("svc #0", inlateout("x0") a0 => ret, in("x1") a1, in("x2") a2, in("x3") a3, in("x8") nr);
    }
    ret
}

/// Creates a thread of `kind` with argument `arg`, nice value and affinity (bit per CPU).
/// Returns the thread slot, or a negative error.
pub fn sys_spawn(kind: usize, arg: usize, nice: i32, affinity: u64) -> i64 {
    svc(SYS_SPAWN, kind as u64, arg as u64, nice as i64 as u64, affinity) as i64
}

/// Yields the CPU once.
pub fn sys_yield() {
    svc(SYS_YIELD, 0, 0, 0, 0);
}

/// Blocks the calling thread until [`sys_unpark`] names it; returns at once if that
/// already happened since its last park.
pub fn sys_park() {
    svc(SYS_PARK, 0, 0, 0, 0);
}

/// Makes thread `slot` runnable if it is parked, else lets its next park return at once.
/// Returns false if `slot` is not a live thread.
pub fn sys_unpark(slot: usize) -> bool {
    svc(SYS_UNPARK, slot as u64, 0, 0, 0) == 0
}

/// Sets the allowed CPUs (bit per CPU) of thread `slot` (the core's `set_affinity`).
/// Returns false if `slot` is not a live thread or the core refused the mask.
pub fn sys_set_affinity(slot: usize, affinity: u64) -> bool {
    svc(SYS_SET_AFFINITY, slot as u64, affinity, 0, 0) == 0
}

/// Blocks the calling thread for at least `ns` nanoseconds (it is woken by the first tick
/// of any CPU after the deadline, so up to one tick period later); `ns == 0` yields.
pub fn sys_sleep(ns: u64) {
    svc(SYS_SLEEP, ns, 0, 0, 0);
}

/// Ends the calling thread.
pub fn sys_exit() -> ! {
    svc(SYS_EXIT, 0, 0, 0, 0);
    // The scheduler never resumes an exited thread.
    loop {
        wfi();
    }
}

// ---- time -------------------------------------------------------------------------------

/// Counter frequency (Hz).
pub fn counter_freq() -> u64 {
    CNTFRQ_EL0.get().max(1)
}

/// Monotonic time in ns since the counter started (QEMU: machine reset), never 0 (the
/// scheduler's clock starts above 0; the counter reads 0 only in the first nanoseconds).
pub fn now_ns() -> u64 {
    let cnt = CNTVCT_EL0.get() as u128;
    ((cnt * 1_000_000_000 / counter_freq() as u128) as u64).max(1)
}

/// The virtual counter (ticks at [`counter_freq`]).
pub fn counter() -> u64 {
    CNTVCT_EL0.get()
}

/// Arms the virtual timer to fire when the counter reaches `at` (at once if it has).
pub fn timer_arm_at(at: u64) {
    CNTV_CVAL_EL0.set(at);
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::IMASK::CLEAR);
}

/// Stops the virtual timer (a tickless idle CPU).
pub fn timer_stop() {
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::CLEAR);
}

// ---- GICv3 ------------------------------------------------------------------------------

struct Gic(GicV3<'static>);

// SAFETY: the driver holds raw pointers to the GIC's MMIO frames, which are valid from
// every CPU; it only ever lives behind the `GIC` lock, so one CPU uses it at a time.
unsafe impl Send for Gic {}

static GIC: Lock<Option<Gic>> = Lock::new(None);

/// Initialises the distributor and all `ncpus` redistributors, and this CPU's interface.
/// CPU 0, once, before the others start.
pub fn gic_init_global(ncpus: usize) -> Result<(), &'static str> {
    let _irq = IrqGuard::mask();
    let gicd = NonNull::new(GICD_BASE as *mut Gicd).ok_or("null GICD")?;
    let gicr = NonNull::new(GICR_BASE as *mut GicrSgi).ok_or("null GICR")?;
    // SAFETY: these are QEMU virt's GICv3 distributor and redistributor frames, device
    // memory with the MMU off, and this is the only driver instance (created once).
    let mut gic = unsafe { GicV3::new(UniqueMmioPointer::new(gicd), gicr, ncpus) }
        .map_err(|_| "GICv3 redistributor frames not recognised")?;
    gic.setup(0);
    *GIC.lock() = Some(Gic(gic));
    Ok(())
}

/// Per-CPU GIC set-up: system-register interface, redistributor awake, group 1 on, the
/// SGIs and the timer PPI enabled, priority mask open.
pub fn gic_init_cpu(cpu: usize, sgis: &[u32]) -> Result<(), &'static str> {
    let _irq = IrqGuard::mask();
    let mut g = GIC.lock();
    let Some(Gic(gic)) = g.as_mut() else { return Err("GIC not initialised") };
    if cpu != 0 {
        gic.init_cpu(cpu);
        GicCpuInterface::enable_group1(true);
    }
    for &s in sgis {
        gic.enable_interrupt(IntId::sgi(s), Some(cpu), true).map_err(|_| "cannot enable an SGI")?;
    }
    gic.enable_interrupt(TIMER_INTID, Some(cpu), true).map_err(|_| "cannot enable the timer PPI")?;
    GicCpuInterface::set_priority_mask(0xff);
    Ok(())
}

/// An acknowledged interrupt; end it with [`irq_eoi`].
pub struct Irq(IntId);

impl Irq {
    /// Its INTID.
    pub fn intid(&self) -> u32 {
        self.0.raw_value()
    }

    /// Whether it is the virtual timer's PPI.
    pub fn is_timer(&self) -> bool {
        self.0 == TIMER_INTID
    }

    /// The SGI number, if it is an SGI.
    pub fn sgi(&self) -> Option<u32> {
        self.0.sgi_index()
    }
}

/// The next pending interrupt, acknowledged.
pub fn irq_ack() -> Option<Irq> {
    GicCpuInterface::get_and_acknowledge_interrupt(InterruptGroup::Group1).map(Irq)
}

/// Ends an acknowledged interrupt.
pub fn irq_eoi(irq: Irq) {
    GicCpuInterface::end_interrupt(irq.0, InterruptGroup::Group1)
}

/// This CPU's affinity (MPIDR_EL1 without the flag bits).
pub fn mpidr() -> u64 {
    MPIDR_EL1.get() & 0xff_00ff_ffff
}

/// Sends SGI `sgi` to the CPU with affinity `mpidr`.
pub fn send_sgi(sgi: u32, mpidr: u64) {
    let target = SgiTarget::List {
        affinity3: ((mpidr >> 32) & 0xff) as u8,
        affinity2: ((mpidr >> 16) & 0xff) as u8,
        affinity1: ((mpidr >> 8) & 0xff) as u8,
        target_list: 1 << (mpidr & 0xf),
    };
    let _ = GicCpuInterface::send_sgi(IntId::sgi(sgi), target, SgiTargetGroup::CurrentGroup1);
}

// ---- PSCI -------------------------------------------------------------------------------

/// Starts CPU `mpidr` at the secondary entry with context id `index`, via HVC or SMC.
pub fn psci_cpu_on(use_smc: bool, mpidr: u64, index: usize) -> Result<(), smccc::psci::Error> {
    let entry = _secondary_entry as *const () as usize as u64;
    if use_smc {
        smccc::psci::cpu_on::<smccc::Smc>(mpidr, entry, index as u64)
    } else {
        smccc::psci::cpu_on::<smccc::Hvc>(mpidr, entry, index as u64)
    }
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
pub fn device_tree() -> Result<fdt::Fdt<'static>, fdt::FdtError> {
    // SAFETY: QEMU put the DTB there before starting the guest; nothing writes that memory
    // (the kernel's image, stacks and data all lie above 0x4020_0000).
    unsafe { fdt::Fdt::from_ptr(DTB_BASE as *const u8) }
}

/// Ends the QEMU run with `code` (semihosting).
pub fn exit(code: u32) -> ! {
    qemu_exit::AArch64::new().exit(code)
}
