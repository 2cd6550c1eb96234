//! The Cortex-M port, for two QEMU boards: one Cortex-M4F on `mps2-an386`
//! (`thumbv7em-none-eabihf`, the one-CPU machine) and two Cortex-M33 on `mps2-an521`
//! (`thumbv8m.main-none-eabihf`, an SSE-200 run Secure; cfg `board_an521`, set by build.rs).
//! Boot through `cortex-m-rt`, the exception entry shared by SysTick, PendSV, SVCall and the
//! interrupts, the saved-register frame, SysTick as the tick, the CMSDK timer 0 as the clock
//! all CPUs share, PendSV as the reschedule interrupt to oneself and the SSE-200's message
//! handling unit (MHU 0) to the other core, the CMSDK UART for defmt, semihosting for the boot
//! line and the exit code.
//!
//! Threads (the idle loop included) run in Thread mode on the process stack; every handler
//! runs on the main stack, which is this CPU's exception stack. SysTick, PendSV and SVCall
//! keep their equal reset priority, so none preempts another and a switch is always made
//! from Thread mode. The FPU is switched off: the kernel uses no floating point, and a stray
//! FP instruction faults instead of leaving FP state unsaved across a switch.

use core::arch::{asm, global_asm};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use cortex_m_rt::{entry, exception, ExceptionFrame};
use qemu_exit::QEMUExit;

use super::{
    irq_restore, soft_ipi, ArchError, ExcKind, FaultInfo, Firmware, Irq, Lock, ThreadEntry, MAX_CPUS,
};

/// What the boot banner calls this machine.
#[cfg(not(board_an521))]
pub const NAME: &str = "Cortex-M4 (mps2-an386) in Thread mode";
/// What the boot banner calls this machine.
#[cfg(board_an521)]
pub const NAME: &str = "Cortex-M33 (mps2-an521, Secure) in Thread mode";
/// No workload programs on a microcontroller (its RAM holds the kernel alone).
pub const PROGRAM_WINDOW: Option<usize> = None;
/// Its tick does not stop: SysTick runs periodically (and idle CPUs are few).
pub const TICKLESS: bool = false;
/// Size of the saved-register frame: the entry's 10 words (r4–r11, EXC_RETURN and a pad that
/// keeps the stack 8-byte aligned) below the 8 words the core stacks itself.
pub const FRAME_SIZE: usize = 72;

/// The CPU clock, which SysTick and the CMSDK timers count (the board's SYSCLK).
#[cfg(not(board_an521))]
const SYSCLK_HZ: u64 = 25_000_000;
#[cfg(not(board_an521))]
const UART0: Reg = Reg(0x4000_4000);
/// The CMSDK timer 0 (the clock): CTRL, VALUE, RELOAD.
#[cfg(not(board_an521))]
const TIMER0: Reg = Reg(0x4000_0000);
#[cfg(board_an521)]
const SYSCLK_HZ: u64 = 20_000_000;
#[cfg(board_an521)]
const UART0: Reg = Reg(0x5020_0000);
#[cfg(board_an521)]
const TIMER0: Reg = Reg(0x5000_0000);
/// SSE-200: which core reads it (0 or 1), its message handling unit 0 (an interrupt to
/// each core: STAT, SET, CLR at +0x00 for core 0 and +0x10 for core 1), and the system
/// control registers that start core 1.
#[cfg(board_an521)]
const CPU_IDENTITY: Reg = Reg(0x4001_F000);
#[cfg(board_an521)]
const MHU0: Reg = Reg(0x5000_3000);
#[cfg(board_an521)]
const INITSVTOR1: Reg = Reg(0x5002_1114);
#[cfg(board_an521)]
const CPUWAIT: Reg = Reg(0x5002_1118);
/// MHU 0's interrupt (IRQ 6) on each core.
#[cfg(board_an521)]
const MHU0_IRQ: u32 = 6;
#[cfg(board_an521)]
const NVIC_ISER0: Reg = Reg(0xE000_E100);
#[cfg(board_an521)]
const VTOR: Reg = Reg(0xE000_ED08);
const SYST_CSR: Reg = Reg(0xE000_E010);
const SYST_RVR: Reg = Reg(0xE000_E014);
const SYST_CVR: Reg = Reg(0xE000_E018);
const ICSR: Reg = Reg(0xE000_ED04);
const ICSR_PENDSVSET: u32 = 1 << 28;
const CPACR: Reg = Reg(0xE000_ED88);
const CFSR: Reg = Reg(0xE000_ED28);
const HFSR: Reg = Reg(0xE000_ED2C);
/// Exception numbers (IPSR).
const EXC_SVCALL: u32 = 11;
const EXC_PENDSV: u32 = 14;
const EXC_SYSTICK: u32 = 15;
/// How a reported interrupt is numbered: its exception number.
pub(super) const IRQ_NUMBER_TIMER: u32 = EXC_SYSTICK;
pub(super) const IRQ_NUMBER_IPI: u32 = EXC_PENDSV;
/// Thread mode, process stack, no FP state: what a new thread's frame returns with.
const EXC_RETURN_THREAD_PSP: u32 = 0xFFFF_FFFD;

/// Each CPU's SysTick reload value + 1 (its tick period in CPU cycles), 0 before it starts.
static PERIOD: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
/// A SysTick interrupt not yet handed to the host by `irq_ack`, per CPU.
static TIMER_PENDING: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// Each CPU's per-CPU block, by core.
static PERCPU_ADDR: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
/// The clock: timer 0's wraps and its last count (read under the lock, so that CPUs agree on
/// when it wrapped). A leaf of the lock order ([`super::Lock`]).
static CLOCK: Lock<(u32, u32)> = Lock::new((0, 0));

global_asm!(
    r#"
.syntax unified
.thumb
.equ EXC_RETURN_THREAD_PSP, {exc_return}

// The first thread-mode code after the reset handler's `main`: r0 = top of the boot (idle)
// stack, r1 = top of the exception stack. Thread mode moves to the process stack, the main
// stack becomes the exception stack, then kernel_entry(cpu 0, hardware id 0).
.section .text.m_start, "ax"
.global m_start
.type m_start, %function
.thumb_func
m_start:
    msr     psp, r0
    movs    r2, #2
    msr     control, r2
    isb
    msr     msp, r1
    movs    r0, #0
    movs    r2, #0
    movs    r3, #0
    bl      kernel_entry
1:
    b       1b

// A secondary core's reset handler (from its vector table in RAM, whose first word gave it
// its exception stack as the main stack): the same as m_start, with its boot stack and index
// from M_SECONDARY.
.section .text.m_secondary, "ax"
.global m_secondary
.type m_secondary, %function
.thumb_func
m_secondary:
    cpsid   i
    movw    r3, :lower16:{secondary}
    movt    r3, :upper16:{secondary}
    ldr     r0, [r3]
    msr     psp, r0
    movs    r2, #2
    msr     control, r2
    isb
    ldr     r0, [r3, #4]
    mov     r2, r0
    movs    r3, #0
    bl      kernel_entry
1:
    b       1b

// SysTick, PendSV, SVCall and every interrupt (DefaultHandler): the interrupted thread's
// r4-r11 and EXC_RETURN go below the frame the core pushed on the process stack; the
// handler, on the main stack, returns the frame to resume (maybe another thread's), whose
// registers are reloaded.
.section .text.m_exception, "ax"
.global SysTick
.type SysTick, %function
.global PendSV
.type PendSV, %function
.global SVCall
.type SVCall, %function
.global DefaultHandler
.type DefaultHandler, %function
.thumb_func
SysTick:
.thumb_func
PendSV:
.thumb_func
SVCall:
.thumb_func
DefaultHandler:
    mrs     r0, psp
    stmdb   r0!, {{r2, r4-r11, lr}}
    mrs     r1, ipsr
    bl      m_exception_entry
    ldmia   r0!, {{r2, r4-r11, lr}}
    msr     psp, r0
    bx      lr
"#,
    exc_return = const EXC_RETURN_THREAD_PSP,
    secondary = sym M_SECONDARY,
);

unsafe extern "C" {
    fn m_start(boot_stack_top: usize, exc_stack_top: usize) -> !;
    #[cfg_attr(not(board_an521), allow(dead_code))]
    fn m_secondary() -> !;
}

/// What a secondary core's reset handler reads: its boot stack's top and its CPU index.
static M_SECONDARY: [AtomicU32; 2] = [const { AtomicU32::new(0) }; 2];

/// A saved context: the entry's words (a pad, r4–r11, EXC_RETURN), then what the core stacked
/// (r0–r3, r12, lr, pc, xPSR).
#[repr(C)]
pub struct Frame {
    _pad: u32,
    /// r4–r11.
    pub r4_r11: [u32; 8],
    /// The EXC_RETURN the exception returns with.
    pub exc_return: u32,
    /// r0–r3: the system call's arguments, r0 its result.
    pub r0_r3: [u32; 4],
    /// r12: the system call's number.
    pub r12: u32,
    /// lr of the interrupted code.
    pub lr: u32,
    /// Where execution resumes.
    pub pc: u32,
    /// The saved program status (the Thumb bit must be set).
    pub xpsr: u32,
}

impl Frame {
    /// A new thread's first frame: it starts at `entry(r0 = a0, r1 = a1)` in Thread mode on
    /// its process stack (which the frame's end, `_sp_top`, becomes), interrupts on.
    pub fn new_thread(entry: ThreadEntry, a0: usize, a1: usize, _sp_top: usize) -> Frame {
        Frame {
            _pad: 0,
            r4_r11: [0; 8],
            exc_return: EXC_RETURN_THREAD_PSP,
            r0_r3: [a0 as u32, a1 as u32, 0, 0],
            r12: 0,
            lr: 0,
            // The stacked pc is the instruction's address, without the Thumb bit.
            pc: entry as usize as u32 & !1,
            xpsr: 1 << 24,
        }
    }

    /// System call argument `i` (0..4) of the interrupted thread: r0–r3.
    pub fn syscall_arg(&self, i: usize) -> u64 {
        self.r0_r3.get(i).copied().unwrap_or(0) as u64
    }

    /// Sets the system call's return value: r0 (32 bits; the caller sign-extends).
    pub fn set_syscall_ret(&mut self, v: u64) {
        self.r0_r3[0] = v as u32;
    }
}

/// The Rust side of the exception entry. Returns the frame to resume.
#[unsafe(no_mangle)]
extern "C" fn m_exception_entry(frame: *mut Frame, ipsr: u32) -> *mut Frame {
    // SAFETY: `frame` is the 72-byte frame the entry completed on the interrupted thread's
    // process stack, and no other code touches it while `f` lives: the thread can be resumed
    // only after the scheduler's `finish`, which only `exception_exit`, given the address
    // alone after `f`'s last use, calls.
    let f = unsafe { &mut *frame };
    let me = core_id();
    let kind = match ipsr & 0x1ff {
        EXC_SYSTICK => {
            TIMER_PENDING[me].store(true, Ordering::Relaxed);
            ExcKind::Irq
        }
        EXC_PENDSV => ExcKind::Irq,
        #[cfg(board_an521)]
        n if n == 16 + MHU0_IRQ => {
            // Cleared before the kinds are read: an IPI sent after this raises it again.
            write(MHU0.at(0x10 * me + 0x8), read(MHU0.at(0x10 * me)));
            // The clear lands before the kinds are read, or an IPI could find both empty.
            cortex_m::asm::dmb();
            ExcKind::Irq
        }
        EXC_SVCALL => ExcKind::Svc(f.r12 as u64),
        n => ExcKind::Unexpected(n as u64),
    };
    let entered = crate::sched::exception(f, kind);
    crate::sched::exception_exit(frame as usize, entered) as *mut Frame
}

/// A 32-bit register of the System Control Space or of the board. Only this module makes
/// one: the constants above, and [`Reg::at`] within their blocks.
#[derive(Clone, Copy)]
struct Reg(usize);

impl Reg {
    /// The register `off` bytes into the block this one starts (an offset the block has).
    const fn at(self, off: usize) -> Reg {
        Reg(self.0 + off)
    }
}

fn read(r: Reg) -> u32 {
    // SAFETY: `r` is a register this port names (`Reg`), device memory.
    unsafe { (r.0 as *const u32).read_volatile() }
}

fn write(r: Reg, v: u32) {
    // SAFETY: `r` is a register this port names (`Reg`), device memory.
    unsafe { (r.0 as *mut u32).write_volatile(v) }
}

/// Fault status and the faulting frame's pc.
pub fn fault_info(frame: &Frame) -> FaultInfo {
    FaultInfo([("CFSR", read(CFSR) as u64), ("HFSR", read(HFSR) as u64), ("PC", frame.pc as u64)])
}

/// A fault (an undefined instruction, a bus error, an FP instruction with the FPU off)
/// escalates here: reported like the other ports' unhandled exceptions, then the panic exit.
#[exception]
unsafe fn HardFault(ef: &ExceptionFrame) -> ! {
    panic!("unhandled synchronous exception: CFSR {:#x} HFSR {:#x} PC {:#x}", read(CFSR), read(HFSR), ef.pc())
}

/// Reset → `main` (core 0): the UART on, the clock started, the FPU off, interrupts masked;
/// then onto the boot stack as the process stack, with the main stack as the exception stack.
#[entry]
fn main() -> ! {
    cortex_m::interrupt::disable();
    write(CPACR, 0);
    // CMSDK UART: transmit enabled (output is dropped silently without it).
    write(UART0.at(0x10), 16);
    write(UART0.at(0x8), 1);
    // Timer 0 counts down from 2^32 - 1 at the CPU clock, forever: the clock.
    write(TIMER0.at(0x8), u32::MAX);
    write(TIMER0.at(0x4), u32::MAX);
    write(TIMER0, 1);
    // SAFETY: m_start switches to stacks nothing uses yet and never returns.
    unsafe { m_start(super::stacks::boot_stack_top(0), super::stacks::exc_stack_top(0)) }
}

/// Which core runs this (0 on the one-core board).
fn core_id() -> usize {
    #[cfg(board_an521)]
    return (read(CPU_IDENTITY) as usize).min(MAX_CPUS - 1);
    #[cfg(not(board_an521))]
    0
}

/// Records this CPU's per-CPU block.
pub(super) fn set_percpu(addr: usize) {
    PERCPU_ADDR[core_id()].store(addr, Ordering::Relaxed);
}

/// The per-CPU block's address.
pub(super) fn percpu() -> usize {
    PERCPU_ADDR[core_id()].load(Ordering::Relaxed)
}

/// Executes an undefined instruction (the `fault` scenario checks the fault path).
pub fn undefined_instruction() {
    // SAFETY: `udf` raises a UsageFault, escalated to HardFault, which reports and exits.
    unsafe { asm!("udf #0", options(nostack)) }
}

// ---- interrupt masking, idle, relax ---------------------------------------------------

/// Masks interrupts (PRIMASK); returns whether they were enabled (for `irq_restore`).
pub fn irq_save() -> bool {
    let primask: u32;
    // SAFETY: reads PRIMASK and masks interrupts. Not `nomem`: the asm is a compiler
    // barrier, so no memory access of the critical section moves before the mask.
    unsafe { asm!("mrs {0}, primask", "cpsid i", out(reg) primask, options(nostack)) };
    primask & 1 == 0
}

/// Unmasks interrupts (entering the idle loop).
pub fn irq_enable() {
    // SAFETY: unmasking is what the idle loop and threads run with.
    unsafe { asm!("cpsie i", options(nostack)) }
}

/// A system call: `svc #0` with the number in r12, arguments in r0–r3, the result in r0
/// (sign-extended, so a negative answer stays negative).
pub(super) fn trap(nr: u64, a0: u64, a1: u64, a2: u64, a3: u64) -> u64 {
    let ret: u32;
    // SAFETY: `svc #0` enters SVCall, which saves every register and returns the result in r0.
    unsafe {
        asm!(
            "svc #0",
            inlateout("r0") a0 as u32 => ret,
            in("r1") a1 as u32,
            in("r2") a2 as u32,
            in("r3") a3 as u32,
            in("r12") nr as u32,
        );
    }
    ret as i32 as i64 as u64
}

// ---- time: the CMSDK timer 0 as the clock, SysTick as the tick ----------------------------------

/// The clock's frequency: the CPU clock the timer counts.
pub fn counter_freq() -> u64 {
    SYSCLK_HZ
}

/// CPU cycles since boot, from timer 0 (32 bits, counting down) and the wraps seen: one
/// clock for every CPU. Read under a lock so the CPUs agree on each wrap; any CPU's tick
/// reads it far more often than once per wrap (171 s at 25 MHz).
pub fn counter() -> u64 {
    let saved = irq_save();
    let mut clock = CLOCK.lock();
    let now = !read(TIMER0.at(0x4));
    if now < clock.1 {
        clock.0 = clock.0.wrapping_add(1);
    }
    clock.1 = now;
    let value = (clock.0 as u64) << 32 | now as u64;
    drop(clock);
    irq_restore(saved);
    value
}

/// SysTick is periodic: the first call on a CPU starts its SysTick with `period` CPU cycles
/// per tick, and later calls change nothing unless the period changes. `_at` is not used: the
/// ticks fall every period from where SysTick started, not on the host's grid, so `skew=`
/// has no effect here.
pub fn timer_arm_at(_at: u64, period: u64) {
    let period = period.clamp(2, 1 << 24) as u32;
    let mine = &PERIOD[core_id()];
    if mine.load(Ordering::Relaxed) == period {
        return;
    }
    write(SYST_CSR, 0);
    write(SYST_RVR, period - 1);
    write(SYST_CVR, 0);
    mine.store(period, Ordering::Relaxed);
    // Enabled, interrupting, counting the CPU clock.
    write(SYST_CSR, 0b111);
}

/// The tick does not stop here (`TICKLESS` is false; `nohz=on` is refused at boot).
pub fn timer_stop() {}

// ---- machine set-up ---------------------------------------------------------------------------

/// The boot line as semihosting gives it (QEMU: the image's path, then `-append`'s text),
/// written once at boot by [`firmware`].
struct CmdLine(UnsafeCell<[u8; CMDLINE_MAX]>);

/// The buffer for the boot line, its NUL included: QEMU refuses a longer one, and the kernel
/// then refuses the run (exit 3).
const CMDLINE_MAX: usize = 2048;

// SAFETY: written only inside `CMDLINE_LEN.call_once`, before any reader gets a reference.
unsafe impl Sync for CmdLine {}

static CMDLINE: CmdLine = CmdLine(UnsafeCell::new([0; CMDLINE_MAX]));
static CMDLINE_LEN: spin::Once<usize> = spin::Once::new();

/// The machine: its cores (hardware ids 0 and, on the dual-core board, 1) and the boot line
/// from semihosting (`SYS_GET_CMDLINE`).
pub fn firmware() -> Result<Firmware, ArchError> {
    let len = *CMDLINE_LEN.call_once(|| {
        // One byte is kept for the terminating NUL.
        let mut block = [CMDLINE.0.get() as usize, CMDLINE_MAX - 1];
        // SAFETY: SYS_GET_CMDLINE (0x15) writes a NUL-terminated line of at most `block[1]`
        // bytes at `block[0]` (the static buffer, which nothing reads yet) and its length into
        // `block[1]`; QEMU runs with `-semihosting`. Passed as a raw pointer: the call
        // writes the block.
        let r = unsafe { cortex_m_semihosting::syscall1(0x15, block.as_mut_ptr() as usize) };
        // SAFETY: the block written by the call above.
        let said = unsafe { core::ptr::read_volatile(&block[1]) };
        // (QEMU refuses a line that does not fit the buffer, its NUL included.)
        if r == 0 {
            said.min(CMDLINE_MAX - 1)
        } else {
            usize::MAX
        }
    });
    if len == usize::MAX {
        return Ok(Firmware::Fixed { cpus: &[0, 1][..MAX_CPUS], bootargs: None });
    }
    // SAFETY: the buffer is written above, once, before this shared reference is made.
    let buf: &'static [u8; CMDLINE_MAX] = unsafe { &*CMDLINE.0.get() };
    let line = &buf[..len];
    let line = line.iter().position(|&b| b == 0).map_or(line, |end| &line[..end]);
    // The first word is the image's path; the boot line follows it.
    let bootargs = match line.iter().position(|&b| b == b' ') {
        Some(i) => &line[i + 1..],
        None => &[][..],
    };
    Ok(Firmware::Fixed { cpus: &[0, 1][..MAX_CPUS], bootargs: Some(bootargs) })
}

/// Nothing machine-wide to set up beyond what `main` did.
pub fn machine_init(_fdt: Option<&crate::devicetree::DeviceTree<'_>>, ncpus: usize) -> Result<(), ArchError> {
    if ncpus > MAX_CPUS {
        return Err(ArchError::new("more CPUs than this board has"));
    }
    Ok(())
}

/// Per CPU: SysTick and PendSV need no enabling; on the dual-core board MHU 0's interrupt
/// (the other core's IPIs) is enabled in this core's NVIC.
pub fn cpu_init(cpu: usize, _ipis: &[u32]) -> Result<(), ArchError> {
    soft_ipi::clear(cpu);
    #[cfg(board_an521)]
    write(NVIC_ISER0, 1 << MHU0_IRQ);
    Ok(())
}

/// Core 1's vector table: core 0's, with core 1's own stack and reset handler (the SSE-200
/// starts core 1 from the table INITSVTOR1 names; QEMU's starts it powered off, waiting).
#[cfg(board_an521)]
#[repr(C, align(512))]
struct VectorTable(UnsafeCell<[u32; 128]>);

// SAFETY: written once by core 0 before core 1 is released, read by core 1's hardware.
#[cfg(board_an521)]
unsafe impl Sync for VectorTable {}

#[cfg(board_an521)]
static CORE1_VECTORS: VectorTable = VectorTable(UnsafeCell::new([0; 128]));

/// Starts core `hw_id` (1) as kernel CPU `index`: its vector table (core 0's, with its own
/// exception stack and `m_secondary` as reset), INITSVTOR1, then CPUWAIT cleared.
#[cfg(board_an521)]
pub fn start_cpu(index: usize, hw_id: u64) -> Result<(), ArchError> {
    if hw_id != 1 || index >= MAX_CPUS {
        return Err(ArchError::new("the SSE-200 starts only core 1"));
    }
    super::record_hw_id(index, hw_id);
    M_SECONDARY[0].store(super::stacks::boot_stack_top(index) as u32, Ordering::Relaxed);
    // Core 1's index, which m_secondary also passes as its hardware id (core 1 is CPU 1).
    M_SECONDARY[1].store(index as u32, Ordering::Relaxed);
    let table = CORE1_VECTORS.0.get() as *mut u32;
    let ours = read(VTOR) as *const u32;
    for i in 0..128 {
        // SAFETY: core 0's vector table (128 words: 16 exceptions and the SSE-200's and the
        // board's interrupts) and core 1's, which nothing else uses before core 1 starts.
        unsafe { table.add(i).write_volatile(ours.add(i).read_volatile()) };
    }
    // SAFETY: the same table, as above.
    unsafe {
        table.write_volatile(super::stacks::exc_stack_top(index) as u32);
        table.add(1).write_volatile(m_secondary as *const () as usize as u32 | 1);
    }
    // The table and M_SECONDARY are ordinary stores: complete them before core 1 starts.
    cortex_m::asm::dsb();
    write(INITSVTOR1, table as usize as u32);
    write(CPUWAIT, 0);
    Ok(())
}

/// One CPU: there is no other to start.
#[cfg(not(board_an521))]
pub fn start_cpu(_index: usize, _hw_id: u64) -> Result<(), ArchError> {
    Err(ArchError::new("this board has one CPU"))
}

/// The next interrupt to handle: the tick, else an IPI kind.
pub fn irq_ack() -> Option<Irq> {
    let me = core_id();
    if TIMER_PENDING[me].swap(false, Ordering::Relaxed) {
        return Some(Irq::Timer);
    }
    soft_ipi::take(me)
}

/// Sends IPI `kind` to CPU `cpu`: marks it pending there, then pends PendSV if that is this
/// core (it runs when the current handler, if any, returns) or raises MHU 0's interrupt on
/// the other core.
pub fn send_ipi(cpu: usize, kind: u32) {
    let cpu = cpu.min(MAX_CPUS - 1);
    soft_ipi::mark(cpu, kind);
    if cpu == core_id() {
        write(ICSR, ICSR_PENDSVSET);
    } else {
        // The kind's bit before the interrupt that announces it (memory, then device).
        #[cfg(board_an521)]
        cortex_m::asm::dmb();
        #[cfg(board_an521)]
        write(MHU0.at(0x10 * cpu + 0x4), 1);
    }
}

// ---- UART, exit ---------------------------------------------------------------------------------

/// Writes bytes to CMSDK UART0 (polling its transmit-full bit). Callers serialise (the log
/// lock).
pub fn uart_write(bytes: &[u8]) {
    for &b in bytes {
        while read(UART0.at(0x4)) & 1 != 0 {}
        write(UART0, b as u32);
    }
}

/// Ends the QEMU run with `code` (semihosting `SYS_EXIT_EXTENDED`).
pub fn exit(code: u32) -> ! {
    qemu_exit::AArch32::new().exit(code)
}
