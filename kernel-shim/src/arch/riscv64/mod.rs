//! The riscv64 port (QEMU `virt`, S-mode under OpenSBI): boot code, the trap entry, the
//! saved-register frame, CSRs, SBI calls (HSM to start harts, IPIs, the timer), Sstc, the
//! ns16550 UART and the `sifive_test` exit device.
//!
//! Facts of the machine this port relies on: OpenSBI enters the kernel at its link address
//! in S-mode on one hart chosen by lottery (not always hart 0) with `a0` = hart id and
//! `a1` = the device tree; the other harts wait, stopped, until `hart_start`. Kernel threads
//! run in S-mode, so a system call cannot be `ecall` (that goes to OpenSBI): it is `ebreak`,
//! whose breakpoint exception OpenSBI delegates to S-mode. An IPI carries no number: the
//! sender sets the kind's bit in the target's pending word before the SBI call.

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use qemu_exit::QEMUExit;
use riscv::register::{sie, sip, sscratch, stval, time};
use sbi_rt::HartMask;

use crate::devicetree::{DeviceTree, DtError};

use super::{
    cpu_id, hw_id, irq_restore, record_hw_id, soft_ipi, ArchError, ExcKind, FaultInfo, Firmware, Frame, Irq,
    ThreadEntry, BOOT_STACK_SIZE, FRAME_SIZE, MAX_CPUS,
};

/// What the boot banner calls this machine.
pub const NAME: &str = "riscv64 in S-mode";
/// Where the runner's loader puts a workload program: 16 MiB below the end of the machine's
/// 256 MiB of RAM (from 0x8000_0000), above the kernel and below the device tree QEMU puts
/// at the top.
pub const PROGRAM_WINDOW: Option<usize> = Some(0x8f00_0000);
/// Its tick can stop (a one-shot deadline; `time` runs on), so `nohz=on` is offered.
pub const TICKLESS: bool = true;

const UART_BASE: usize = 0x1000_0000;
const SIFIVE_TEST_BASE: u64 = 0x10_0000;

/// `sstatus` bits: interrupts enabled (SIE), previous SIE (SPIE), previous privilege S (SPP).
const SSTATUS_SIE: usize = 1 << 1;
const SSTATUS_SPIE: usize = 1 << 5;
const SSTATUS_SPP: usize = 1 << 8;
/// `sip`/`sie` bits: supervisor software (IPI) and timer interrupts.
const SSIP: usize = 1 << 1;
const STIP: usize = 1 << 5;
/// `scause` codes.
const INTERRUPT: usize = 1 << 63;
const IRQ_SOFTWARE: usize = 1;
const IRQ_TIMER: usize = 5;
/// How a reported interrupt is numbered: its `scause` code.
pub(super) const IRQ_NUMBER_TIMER: u32 = IRQ_TIMER as u32;
pub(super) const IRQ_NUMBER_IPI: u32 = IRQ_SOFTWARE as u32;
const EXC_BREAKPOINT: usize = 3;

/// The device tree's address, from `a1` at boot.
static DTB: AtomicUsize = AtomicUsize::new(0);
/// `rdtime` frequency, from the device tree (QEMU `virt`: 10 MHz).
static TIMEBASE_HZ: AtomicU64 = AtomicU64::new(10_000_000);
/// The hart has Sstc: the tick writes `stimecmp` directly instead of calling the SBI.
static SSTC: AtomicBool = AtomicBool::new(false);

global_asm!(
    r#"
.equ FRAME_SIZE, {frame}

.section .data
.balign 8
// Set by the hart that boots the kernel; in .data, so clearing .bss does not reset it.
boot_claim:
    .dword  0
// (`__parked_harts`, per hart id: 0, or 1 while the hart waits in `parked` below, or the CPU
// index + 2 that releases it, is the Rust static PARKED, also in .data.)

.section .text.boot, "ax"
.global _start
_start:
    csrw    sie, zero
    mv      s0, a0              // hart id
    // Only one hart boots the kernel. Under QEMU's parallel mode OpenSBI has been seen to
    // send a second hart here (a hart that had not finished its own start-up when the
    // kernel asked for it with HSM hart_start): it waits until `start_cpu` releases it.
    la      t0, boot_claim
    li      t1, 1
    .option push
    .option arch, +a            // (module-level assembly does not see the target's features)
    amoswap.d t1, t1, (t0)
    .option pop
    bnez    t1, parked
    li      s1, 0               // the boot hart is CPU 0
    // Clear .bss (stacks included) before anything uses memory, then keep the DTB address.
    la      t0, __bss_start
    la      t1, __bss_end
1:
    bgeu    t0, t1, 2f
    sd      zero, 0(t0)
    addi    t0, t0, 8
    j       1b
2:
    la      t0, {dtb}
    sd      a1, 0(t0)
    j       3f

parked:
    li      t0, {parked_harts}
    bgeu    s0, t0, 6f          // a hart id beyond the table waits for ever
    la      t0, __parked_harts
    slli    t1, s0, 3
    add     t0, t0, t1
    li      t1, 1
    sd      t1, 0(t0)
5:
    ld      t1, 0(t0)
    li      t2, 2
    bltu    t1, t2, 5b
    fence   r, rw
    addi    s1, t1, -2          // the CPU index `start_cpu` gave it
    j       3f
6:
    wfi
    j       6b

.global _secondary_entry
_secondary_entry:
    csrw    sie, zero
    mv      s0, a0              // hart id
    mv      s1, a1              // hart_start's opaque value: the CPU index
3:
    // sp = __boot_stacks + (index + 1) * BOOT_STACK_SIZE (a power of two: no `mul`, which
    // module-level assembly may not have).
    la      sp, __boot_stacks
    addi    t0, s1, 1
    slli    t0, t0, {boot_shift}
    add     sp, sp, t0
    la      t0, trap_entry
    csrw    stvec, t0
    mv      a0, s1
    mv      a1, s0
    call    kernel_entry
4:
    wfi
    j       4b

.section .text.trap, "ax"
.balign 4
trap_entry:
    addi    sp, sp, -FRAME_SIZE
    sd      x1, 0(sp)
    sd      x3, 16(sp)
    sd      x4, 24(sp)
    sd      x5, 32(sp)
    sd      x6, 40(sp)
    sd      x7, 48(sp)
    sd      x8, 56(sp)
    sd      x9, 64(sp)
    sd      x10, 72(sp)
    sd      x11, 80(sp)
    sd      x12, 88(sp)
    sd      x13, 96(sp)
    sd      x14, 104(sp)
    sd      x15, 112(sp)
    sd      x16, 120(sp)
    sd      x17, 128(sp)
    sd      x18, 136(sp)
    sd      x19, 144(sp)
    sd      x20, 152(sp)
    sd      x21, 160(sp)
    sd      x22, 168(sp)
    sd      x23, 176(sp)
    sd      x24, 184(sp)
    sd      x25, 192(sp)
    sd      x26, 200(sp)
    sd      x27, 208(sp)
    sd      x28, 216(sp)
    sd      x29, 224(sp)
    sd      x30, 232(sp)
    sd      x31, 240(sp)
    addi    t0, sp, FRAME_SIZE
    sd      t0, 8(sp)           // the interrupted sp
    csrr    t0, sepc
    sd      t0, 248(sp)
    csrr    t0, sstatus
    sd      t0, 256(sp)
    // The handler runs on this CPU's exception stack (its top is the first word of the
    // per-CPU block sscratch points at), so the interrupted thread's stack is left alone
    // once its frame is stored: another CPU may resume that thread right away.
    mv      a0, sp
    csrr    a1, scause
    csrr    t0, sscratch
    ld      sp, 0(t0)
    call    exception_entry
    // a0: the frame to resume (maybe another thread's, on its own stack).
    mv      sp, a0
    ld      t0, 248(sp)
    csrw    sepc, t0
    ld      t0, 256(sp)
    csrw    sstatus, t0
    ld      x1, 0(sp)
    ld      x3, 16(sp)
    ld      x4, 24(sp)
    ld      x5, 32(sp)
    ld      x6, 40(sp)
    ld      x7, 48(sp)
    ld      x8, 56(sp)
    ld      x9, 64(sp)
    ld      x10, 72(sp)
    ld      x11, 80(sp)
    ld      x12, 88(sp)
    ld      x13, 96(sp)
    ld      x14, 104(sp)
    ld      x15, 112(sp)
    ld      x16, 120(sp)
    ld      x17, 128(sp)
    ld      x18, 136(sp)
    ld      x19, 144(sp)
    ld      x20, 152(sp)
    ld      x21, 160(sp)
    ld      x22, 168(sp)
    ld      x23, 176(sp)
    ld      x24, 184(sp)
    ld      x25, 192(sp)
    ld      x26, 200(sp)
    ld      x27, 208(sp)
    ld      x28, 216(sp)
    ld      x29, 224(sp)
    ld      x30, 232(sp)
    ld      x31, 240(sp)
    ld      sp, 8(sp)
    sret
"#,
    frame = const FRAME_SIZE,
    parked_harts = const PARKED_HARTS,
    boot_shift = const BOOT_STACK_SIZE.trailing_zeros(),
    dtb = sym DTB,
);

// The secondary harts' entry point in the assembly above (only its address is passed to the
// SBI).
unsafe extern "C" {
    fn _start();
    fn _secondary_entry();
}

/// `Frame::x` index of register `a0` (x10); a1–a3 follow, `a7` (x17) holds the call number.
const A0: usize = 9;
const A7: usize = 16;

/// The frame the trap entry pushes: `x[i]` holds register x(i+1) (`x[1]` the interrupted
/// `sp`), `pc` sepc, `status` sstatus (SPP, SPIE: the privilege and interrupt state `sret`
/// returns to).
impl Frame {
    /// A new thread's first frame: it starts at `entry(a0, a1)` in S-mode with interrupts on,
    /// its stack pointer at `sp_top`.
    pub fn new_thread(entry: ThreadEntry, a0: usize, a1: usize, sp_top: usize) -> Frame {
        let mut x = [0u64; 31];
        x[1] = sp_top as u64;
        x[A0] = a0 as u64;
        x[A0 + 1] = a1 as u64;
        let sstatus = (SSTATUS_SPP | SSTATUS_SPIE) as u64;
        Frame { x, pc: entry as usize as u64, status: sstatus, _pad: 0 }
    }

    /// System call argument `i` (0..4) of the interrupted thread: a0–a3.
    pub fn syscall_arg(&self, i: usize) -> u64 {
        if i < 4 {
            self.x[A0 + i]
        } else {
            0
        }
    }

    /// Sets the system call's return value: a0.
    pub fn set_syscall_ret(&mut self, v: u64) {
        self.x[A0] = v;
    }
}

/// The Rust side of the trap entry. Returns the frame to resume.
#[unsafe(no_mangle)]
extern "C" fn exception_entry(frame: *mut Frame, scause: usize) -> *mut Frame {
    // SAFETY: `frame` is the 272-byte frame this CPU's trap entry pushed on the interrupted
    // stack, and no other code touches it while `f` lives: the thread it belongs to can run
    // elsewhere only after the scheduler's `finish`, which only `exception_exit`, given the
    // address alone after `f`'s last use, calls.
    let f = unsafe { &mut *frame };
    // A slice interrupt (`slice.rs`) with no IPI waiting is the port's alone: the next slice
    // or the tick is armed, and the halt of `relax` hands the emulator's turn on.
    if scause == INTERRUPT | IRQ_TIMER && sip::read().bits() & SSIP == 0 && super::slice::take_slice() {
        relax();
        return frame;
    }
    let kind = if scause & INTERRUPT != 0 {
        match scause & !INTERRUPT {
            IRQ_SOFTWARE | IRQ_TIMER => ExcKind::Irq,
            _ => ExcKind::Unexpected(scause as u64),
        }
    } else if scause == EXC_BREAKPOINT {
        // The system call's `ebreak` is 4 bytes (assembled without compression).
        f.pc += 4;
        ExcKind::Svc(f.x[A7])
    } else {
        ExcKind::Fault
    };
    let entered = crate::sched::exception(f, kind);
    let next = crate::sched::exception_exit(frame as usize, entered) as *mut Frame;
    // A slice interrupt (`slice.rs`) ends with the halt that hands the emulator's turn on.
    if SLICED[cpu_id().min(MAX_CPUS - 1)].swap(false, Ordering::Relaxed) {
        relax();
    }
    next
}

/// Cause, faulting value and return address of the current synchronous exception.
pub fn fault_info(frame: &Frame) -> FaultInfo {
    let scause: usize;
    // SAFETY: reads the scause CSR, no side effects.
    unsafe { asm!("csrr {0}, scause", out(reg) scause, options(nomem, nostack)) };
    FaultInfo([("scause", scause as u64), ("stval", stval::read() as u64), ("sepc", frame.pc)])
}

/// Points `sscratch` at this CPU's per-CPU block (the trap entry finds its stack there).
pub(super) fn set_percpu(addr: usize) {
    // SAFETY: sscratch is this port's per-CPU pointer (read by the trap entry and `percpu`);
    // nothing else uses the register.
    unsafe { sscratch::write(addr) };
}

/// The per-CPU block's address, from `sscratch`.
pub(super) fn percpu() -> usize {
    sscratch::read()
}

/// Executes an illegal instruction (the `fault` scenario checks the fault path).
pub fn undefined_instruction() {
    // SAFETY: `unimp` raises an illegal-instruction exception, which the trap entry reports
    // as a fault (the handler panics); no state of this thread is touched.
    unsafe { asm!("unimp", options(nostack)) }
}

// ---- interrupt masking, idle, relax ---------------------------------------------------

/// Masks interrupts (clears `sstatus.SIE`); returns whether they were enabled (for
/// `irq_restore`).
pub fn irq_save() -> bool {
    let old: usize;
    // SAFETY: atomically clears SIE and reads the old sstatus. Not `nomem`: the asm is a
    // compiler barrier, so no memory access of the critical section moves before the mask.
    unsafe { asm!("csrrci {0}, sstatus, 2", out(reg) old, options(nostack)) };
    old & SSTATUS_SIE != 0
}

/// Enables interrupts on this CPU (end of boot, entering the idle loop).
pub fn irq_enable() {
    // SAFETY: setting SIE is what the idle loop and threads run with.
    unsafe { asm!("csrsi sstatus, 2", options(nostack)) }
}

/// A busy-wait step that hands the host CPU on, as aarch64's `yield` does.
///
/// Under QEMU 7.2's single-threaded TCG with icount a spinning hart keeps its slice up to the
/// next timer deadline, and the hart after it in round-robin order is then handed an empty
/// budget, every time: it starves for as long as the spin lasts (a `pause` changes nothing).
/// Only a halt ends a slice early, so this halts without waiting: with interrupts masked it
/// raises its own software interrupt, executes `wfi` (which halts, and under round-robin lets
/// the next hart run; with the interrupt pending the hart resumes at once, which is all that
/// happens under multi-threaded TCG or on hardware), and withdraws the interrupt again unless
/// a real IPI is waiting. Before `cpu_init` enables the software interrupt a `wfi` could wait
/// forever, so early spins only `pause`.
pub fn relax() {
    if sie::read().bits() & SSIP == 0 {
        core::hint::spin_loop();
        return;
    }
    let saved = irq_save();
    let already = sip::read().bits() & SSIP != 0;
    // SAFETY: S-mode may set and clear its own SSIP; with SIE clear no trap is taken, and the
    // pending, enabled interrupt makes `wfi` return at once.
    unsafe {
        sip::set_ssoft();
        asm!("wfi", options(nomem, nostack));
        if !already {
            sip::clear_ssoft();
            // An IPI that arrived meanwhile set SSIP too: keep it pending for its handler.
            if soft_ipi::any(cpu_id()) {
                sip::set_ssoft();
            }
        }
    }
    irq_restore(saved);
}

/// A system call: `ebreak` (4 bytes) with the number in a7, arguments in a0–a3, the result
/// in a0.
pub(super) fn trap(nr: u64, a0: u64, a1: u64, a2: u64, a3: u64) -> u64 {
    let ret: u64;
    // SAFETY: `ebreak` traps to this kernel's trap entry (OpenSBI delegates breakpoints to
    // S-mode), which saves and restores every register except a0 (the result) and resumes
    // after the instruction.
    unsafe {
        asm!(
            ".option push",
            ".option norvc",
            "ebreak",
            ".option pop",
            inlateout("a0") a0 => ret, in("a1") a1, in("a2") a2, in("a3") a3, in("a7") nr,
        );
    }
    ret
}

// ---- time -------------------------------------------------------------------------------

/// `rdtime` frequency (Hz), from the device tree.
pub fn counter_freq() -> u64 {
    TIMEBASE_HZ.load(Ordering::Relaxed).max(1)
}

/// The `time` CSR (ticks at [`counter_freq`]; one clock for all harts).
pub fn counter() -> u64 {
    time::read() as u64
}

/// Programs this hart's timer to fire when `time` reaches `at` (at once if it has;
/// `u64::MAX`: never). The tick and the slices are armed through it (`slice.rs`).
pub(super) fn program_timer(at: u64) {
    if SSTC.load(Ordering::Relaxed) {
        // SAFETY: writes stimecmp (CSR 0x14d), which Sstc gives S-mode: the timer interrupt
        // is pending while `time` ≥ stimecmp, so a new deadline also clears it.
        unsafe { asm!("csrw 0x14d, {0}", in(reg) at, options(nomem, nostack)) };
    } else {
        let _ = sbi_rt::set_timer(at);
    }
}

// ---- machine set-up: SBI -----------------------------------------------------------------

/// Machine-wide set-up on CPU 0, before the others start: the timebase and Sstc from the
/// device tree, and the SBI extensions this port needs (HSM only to start more than one hart).
pub fn machine_init(fdt: Option<&DeviceTree<'_>>, ncpus: usize) -> Result<(), ArchError> {
    let fdt = fdt.ok_or(ArchError::new("no device tree"))?;
    let cpus = fdt.find("/cpus").ok_or(ArchError::new("no /cpus in the device tree"))?;
    let cpu = cpus
        .children()
        .find(|c| c.base_name() == "cpu")
        .ok_or(ArchError::new("no CPU in the device tree"))?;
    // On the CPU's node, or on /cpus for all of them.
    let timebase = cpu.property("timebase-frequency").or_else(|| cpus.property("timebase-frequency"));
    let hz = timebase
        .and_then(|p| p.as_usize())
        .ok_or(ArchError::new("no timebase-frequency in the device tree"))?;
    if !super::COUNTER_HZ_RANGE.contains(&(hz as u64)) {
        return Err(ArchError::new("timebase-frequency out of range (1 kHz to 1 GHz)"));
    }
    TIMEBASE_HZ.store(hz as u64, Ordering::Relaxed);
    let isa = cpu.property("riscv,isa").and_then(|p| p.as_str()).unwrap_or("");
    SSTC.store(isa.split('_').any(|ext| ext == "sstc"), Ordering::Relaxed);
    if !sbi_rt::probe_extension(sbi_rt::Timer).is_available() && !SSTC.load(Ordering::Relaxed) {
        return Err(ArchError::new("neither Sstc nor the SBI timer extension"));
    }
    if ncpus > 1 && !sbi_rt::probe_extension(sbi_rt::Hsm).is_available() {
        return Err(ArchError::new("no SBI HSM extension to start harts with"));
    }
    if ncpus > 1 && !sbi_rt::probe_extension(sbi_rt::Ipi).is_available() {
        return Err(ArchError::new("no SBI IPI extension"));
    }
    Ok(())
}

/// Per-CPU interrupt set-up: the software (IPI) and timer interrupts enabled in `sie`. Every
/// IPI kind is taken, so `_ipis` needs no set-up.
pub fn cpu_init(cpu: usize, _ipis: &[u32]) -> Result<(), ArchError> {
    soft_ipi::clear(cpu);
    // SAFETY: enables the two interrupt sources this kernel handles; they are taken only once
    // sstatus.SIE is set (the idle loop), with the trap entry installed.
    unsafe {
        sie::set_ssoft();
        sie::set_stimer();
    }
    Ok(())
}

/// Starts hart `hw_id` as kernel CPU `index` (SBI HSM `hart_start`, opaque = index).
pub fn start_cpu(index: usize, hw_id: u64) -> Result<(), ArchError> {
    record_hw_id(index, hw_id);
    let entry = if index == 1 && ENTRY_RACE.load(Ordering::Relaxed) {
        _start as *const () as usize
    } else {
        _secondary_entry as *const () as usize
    };
    let r = sbi_rt::hart_start(hw_id as usize, entry, index);
    if r.error == 0 {
        return Ok(());
    }
    // "Already available": the hart is running, which here means it came to `_start` on its
    // own and waits there (see the boot assembly): release it as CPU `index`.
    if r.error as isize == SBI_ERR_ALREADY_AVAILABLE {
        let deadline = counter().saturating_add(counter_freq() / 10);
        while counter() < deadline {
            if release_parked(index, hw_id) {
                return Ok(());
            }
            core::hint::spin_loop();
        }
    }
    Err(ArchError { what: "SBI hart_start", code: r.error as i64 })
}

/// The boot CPU's wait for the others: a hart that came to `_start` by itself although
/// `start_cpu` had started it (OpenSBI sent it to its default entry instead) is released
/// here as the CPU it was started as.
pub fn release_parked_cpus(n: usize) {
    for index in 1..n.min(MAX_CPUS) {
        release_parked(index, hw_id(index));
    }
}

/// Releases hart `hw_id` as CPU `index` if it waits in `_start`'s `parked`.
fn release_parked(index: usize, hw_id: u64) -> bool {
    let Some(slot) = PARKED.get(hw_id as usize) else { return false };
    let released = slot.compare_exchange(1, index as u64 + 2, Ordering::Release, Ordering::Relaxed).is_ok();
    if released {
        crate::kprintln!("hart {=u64} came to the kernel's entry by itself; it runs as CPU {}", hw_id, index);
    }
    released
}

/// `entry_race=on`: CPU 1 is started at the kernel's boot entry, as OpenSBI does when it
/// loses a started hart's address, so the suite can check that the boot recovers.
static ENTRY_RACE: AtomicBool = AtomicBool::new(false);

/// Makes `start_cpu` send CPU 1 to `_start` (the boot line's `entry_race=on`; only riscv64's
/// firmware has the race, `HAS_ENTRY_RACE`).
pub fn simulate_entry_race(on: bool) {
    ENTRY_RACE.store(on, Ordering::Relaxed);
}

/// SBI's error for starting a hart that already runs.
const SBI_ERR_ALREADY_AVAILABLE: isize = -6;

/// Hart ids the boot assembly can park (a hart beyond them that comes to `_start` by itself
/// waits for ever).
const PARKED_HARTS: usize = 64;

/// The boot assembly's table of parked harts (`__parked_harts`, see `_start`), in .data so
/// that clearing .bss leaves it alone: this static *is* that table.
#[unsafe(export_name = "__parked_harts")]
#[unsafe(link_section = ".data")]
static PARKED: [AtomicU64; PARKED_HARTS] = [const { AtomicU64::new(0) }; PARKED_HARTS];

/// The next pending interrupt: an IPI kind, else the timer.
pub fn irq_ack() -> Option<Irq> {
    let pending = sip::read().bits();
    if pending & SSIP != 0 {
        // Cleared before the kinds are read: an IPI sent after this read sets it again.
        // SAFETY: S-mode owns SSIP (OpenSBI sets it for an IPI; S-mode clears it).
        unsafe { sip::clear_ssoft() };
    }
    let cpu = cpu_id().min(MAX_CPUS - 1);
    if let Some(ipi) = soft_ipi::take(cpu) {
        return Some(ipi);
    }
    if pending & STIP == 0 {
        return None;
    }
    if super::slice::take_slice() {
        // A slice interrupt: the next one (or the tick) is armed, which clears it; the host
        // has nothing to do, and the exit's halt ends the slice.
        SLICED[cpu].store(true, Ordering::Relaxed);
        return None;
    }
    // The tick: its pending bit clears with the next deadline, which the host arms.
    Some(Irq::Timer)
}

/// Whether this hart took a slice interrupt in the current exception.
static SLICED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Sends IPI `kind` to kernel CPU `cpu`: marks the kind pending there, then the SBI IPI.
pub fn send_ipi(cpu: usize, kind: u32) {
    soft_ipi::mark(cpu, kind);
    let _ = sbi_rt::send_ipi(HartMask::from_mask_base(1, hw_id(cpu) as usize));
}

// ---- ns16550, DTB, exit ---------------------------------------------------------------------

/// Writes bytes to the ns16550 (polling its transmit-holding-empty bit). Callers serialise
/// (the log lock).
pub fn uart_write(bytes: &[u8]) {
    let thr = UART_BASE as *mut u8;
    let lsr = (UART_BASE + 5) as *const u8;
    for &b in bytes {
        // SAFETY: QEMU virt's ns16550 transmit and line-status registers, device memory
        // (no MMU); OpenSBI left it set up.
        unsafe {
            while lsr.read_volatile() & (1 << 5) == 0 {}
            thr.write_volatile(b);
        }
    }
}

/// The device tree OpenSBI passed in `a1`.
pub fn firmware() -> Result<Firmware, ArchError> {
    let addr = DTB.load(Ordering::Relaxed);
    if addr == 0 {
        return Err(ArchError::new("no device tree address from the firmware"));
    }
    // SAFETY: the address the firmware passed at boot; QEMU placed the DTB at the end of RAM,
    // above anything this kernel uses, and nothing writes it.
    match unsafe { super::device_tree_at(addr as *const u8) } {
        Ok(tree) => Ok(Firmware::DeviceTree(tree)),
        Err(DtError::Header) => Err(ArchError::new("the firmware's device tree has no header")),
        Err(e) => Err(ArchError::new(e.what())),
    }
}

/// Ends the QEMU run with `code` (`sifive_test`; the host sees `code & 0xff`).
pub fn exit(code: u32) -> ! {
    // SAFETY: QEMU virt's sifive_test device at 0x10_0000 (from its device tree), device
    // memory without an MMU.
    let dev = unsafe { qemu_exit::RISCV64::new(SIFIVE_TEST_BASE) };
    dev.exit(code)
}
