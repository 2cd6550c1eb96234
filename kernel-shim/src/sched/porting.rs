//! The porting recipe: everything this kernel does to host sched-core, in one place and in
//! the order a port needs it (see the root PORTING.md for the contract each step keeps):
//!
//! 1. the [`Platform`] the core calls back: a reschedule IPI for another CPU, the clock,
//!    events (here only counted, for the reports);
//! 2. [`with_core`]: the only way to the core, with this CPU's IRQs masked;
//! 3. [`cpu_online`]: each CPU's first pass through the scheduler (`cpu_up`);
//! 4. [`exception`]: every interrupt and system call ends here: the tick (`tick`), the
//!    reschedule IPI (`serve_kick` on a tickless CPU), the system calls (`syscalls.rs`:
//!    `create`, `block`, `wake`, `exit`, `yield_now`, `set_affinity`), then the way out;
//! 5. the way out ([`reschedule`]): while `need_resched`, `pick`, store the interrupted
//!    frame as the previous thread's, load the next thread's (its slot is the task's
//!    payload), `finish`;
//! 6. idle ([`update_tickless`], [`idle_wait`]): `idle_enter` and stop the tick when the
//!    core counts the CPU tickless, `idle_exit` and re-arm it when work comes.
//!
//! The instrumentation (`STATS`, the watchdog's heartbeat, the workloads' hooks) is one line
//! at each place it hooks in; a port leaves those lines out.

use portable_atomic::Ordering::{Acquire, Relaxed, Release};
use sched_core::{Event, Platform};

use super::cpu::{CPUS, NONE};
use super::stats::STATS;
use super::syscalls::{any_sleeper, syscall, wake_sleepers};
use super::thread::{free_thread, THREADS};
use super::watchdog::watchdog_check;
use super::{arm_tick, hooks, send_ipi, KPlatform, Kernel, IPI_PING, IPI_PONG, IPI_RESCHED, OUR_CPU};
use super::{IDLE_EXIT_YIELD, NOHZ, ONLINE, PONGS, SCHEDULER};
use crate::arch::{self, ExcKind, Frame, MAX_CPUS};

/// Runs `f` with the core, on this CPU with its IRQs masked: the only way to reach the core
/// from outside this module. The core's locks are spin locks that ticks and IPIs take too;
/// a core call interrupted on its own CPU by a handler that takes the same lock would spin
/// forever, so every call — from a handler (IRQs already masked; masking again is free of
/// effect) or from a thread — comes through here.
pub fn with_core<T>(f: impl FnOnce(&'static Kernel) -> T) -> T {
    let _irq = arch::IrqGuard::mask();
    f(&SCHEDULER)
}

impl Platform for KPlatform {
    /// The task's thread slot.
    type Payload = u32;
    fn resched_cpu(&self, c: usize) {
        if c >= MAX_CPUS {
            return;
        }
        let me = arch::cpu_id();
        // On the way out of this CPU's handler `need_resched` is checked anyway, and again if
        // this came after the last check (see `Cpu::resched_late`).
        if c == me && CPUS[me].in_handler.load(Relaxed) {
            CPUS[me].resched_late.store(true, Relaxed);
            return;
        }
        STATS.cpu[c].resched_sent.fetch_add(1, Relaxed);
        arch::send_ipi(c, IPI_RESCHED);
    }

    fn clock_ns(&self) -> Option<u64> {
        Some(arch::now_ns())
    }

    fn event(&self, event: &Event) {
        STATS.event(event);
    }
}

/// Marks this CPU online: records the time, and passes it through the scheduler once.
pub fn cpu_online(cpu: usize) {
    STATS.cpu[cpu].online_ns.store(arch::now_ns().max(1), Relaxed);
    // Its timer is armed: from now on it must tick (a CPU that hangs before its first tick
    // is watched too).
    CPUS[cpu].heartbeat_ns.store(arch::now_ns().max(1), Release);
    // The CPU's idle loop passes through the scheduler once, as a booting Linux CPU does
    // when its first kthreads go to sleep: that stamps when it went idle. Fork placement
    // chooses among idle CPUs by that stamp and never picks one that has none, so without
    // this pass every fork stayed in the parent's cluster. No task exists before all CPUs
    // are online (the scenario starts after that), so there is nothing to pick.
    let now = arch::now_ns();
    with_core(|k| k.cpu_up(cpu, now).expect(OUR_CPU));
    ONLINE.fetch_add(1, Release);
}

/// Every exception's first half (IRQs masked): its interrupts or its system call, which may
/// read and write the interrupted context's `frame`. Returns when the handler was entered,
/// for [`exception_exit`], which every exception calls next.
pub fn exception(frame: &mut Frame, kind: ExcKind) -> u64 {
    let cpu = arch::cpu_id();
    let me = &CPUS[cpu];
    let entered = arch::now_ns();
    me.waiting.store(false, Release);
    me.in_handler.store(true, Relaxed);
    me.handler_since.store(entered.max(1), Relaxed);
    match kind {
        ExcKind::Irq => handle_irqs(cpu),
        ExcKind::Svc(nr) => syscall(cpu, frame, nr),
        ExcKind::Fault => panic!("unhandled synchronous exception: {}", arch::fault_info(frame)),
        ExcKind::Unexpected(k) => panic!("unexpected exception (vector entry {})", k),
    }
    entered
}

/// Every exception's second half: the switch, if the core asks for one. It takes the
/// interrupted frame's address, not a reference: once `finish` has run, the frame's thread
/// may resume on another CPU (or exit, and its slot go to a new thread) while this handler
/// still runs. Returns the address of the frame to resume.
pub fn exception_exit(addr: usize, entered: u64) -> usize {
    let cpu = arch::cpu_id();
    let me = &CPUS[cpu];
    let mut next = reschedule(cpu, addr);
    // A request delivered at the end of the exit's last core call (idle_enter, say).
    for _ in 0..SWITCH_PASSES {
        if !me.resched_late.swap(false, Relaxed) {
            break;
        }
        next = reschedule(cpu, next);
    }
    if !arch::cpu_stacks_intact(cpu) {
        panic!("stack overflow: CPU {}'s exception or boot stack", cpu);
    }
    me.in_handler.store(false, Relaxed);
    me.handler_since.store(0, Relaxed);
    STATS.handler_ran(cpu, arch::now_ns().saturating_sub(entered));
    next
}

fn handle_irqs(cpu: usize) {
    while let Some(irq) = arch::irq_ack() {
        if irq.is_timer() {
            arm_tick(cpu);
            let now = arch::now_ns();
            STATS.cpu[cpu].ticks.fetch_add(1, Relaxed);
            CPUS[cpu].heartbeat_ns.store(now, Release);
            watchdog_check(cpu, now);
            if any_sleeper() {
                wake_sleepers(cpu, now);
            }
            with_core(|k| k.tick(cpu, now).expect(OUR_CPU));
            (hooks().on_tick)(cpu, now);
        } else {
            match irq.ipi() {
                Some(IPI_RESCHED) => {
                    STATS.cpu[cpu].resched_ipis.fetch_add(1, Relaxed);
                    // Maybe a kick to balance for all tickless CPUs; the core ignores the
                    // call if there is none.
                    if CPUS[cpu].tickless.load(Relaxed) {
                        with_core(|k| k.serve_kick(cpu, arch::now_ns()).expect(OUR_CPU));
                    }
                }
                Some(IPI_PING) => {
                    STATS.cpu[cpu].pings.fetch_add(1, Relaxed);
                    send_ipi(IPI_PONG, 0);
                }
                Some(IPI_PONG) => {
                    PONGS.fetch_add(1, Release);
                }
                _ => crate::kprintln!("spurious interrupt {}", irq.number()),
            }
        }
        arch::irq_eoi(irq);
    }
}

/// The most pick/finish passes of one exception exit (this kernel's cap since before the
/// porter's API, whose `reschedule` makes at most `MAX_PASSES`); more waits for the next exit.
const SWITCH_PASSES: usize = 8;

/// If the core wants this CPU to reschedule: let it pick, store the interrupted context
/// (`frame`) as prev's, and return next's. `finish` comes after prev's frame is stored, and
/// this handler runs on the CPU's exception stack, so prev may resume on another CPU from
/// then on.
fn reschedule(cpu: usize, frame: usize) -> usize {
    with_core(|k| {
        let me = &CPUS[cpu];
        let mut cur = frame;
        let was_idle = me.current.load(Relaxed) == NONE;
        for _ in 0..SWITCH_PASSES {
            // need_resched answers for every request delivered before and during it: only
            // one that comes with a later call (idle_enter, say) needs another look.
            me.resched_late.store(false, Relaxed);
            if !k.need_resched(cpu).expect(OUR_CPU) {
                break;
            }
            cur = switch(k, cpu, cur);
        }
        if NOHZ.load(Relaxed) {
            update_tickless(k, cpu);
        }
        if was_idle && me.current.load(Relaxed) != NONE && IDLE_EXIT_YIELD.load(Relaxed) {
            // Leaving idle for a task: hand the host CPU on once (see `IDLE_EXIT_YIELD`).
            arch::relax();
        }
        cur
    })
}

/// One switch on `cpu`: the core picks, `frame` (the interrupted context) is stored as the
/// previous thread's (or the idle loop's), and the next thread's frame is returned.
fn switch(k: &Kernel, cpu: usize, frame: usize) -> usize {
    let me = &CPUS[cpu];
    let now = arch::now_ns();
    let prev = me.current.load(Relaxed);
    let switch = k.pick(cpu, now).expect(OUR_CPU);
    // The thread is the task's payload. A new task may be picked before `spawn` recorded its
    // id for the thread: record it here too, before the thread runs (it names itself by it).
    let next = match switch.next {
        Some((id, slot)) => {
            THREADS[slot as usize].task.store(id.to_raw(), Relaxed);
            slot as usize
        }
        None => NONE,
    };
    STATS.switched(cpu, now, prev, next, switch.prev.map(|(_, state, _)| state));
    match prev {
        NONE => me.idle_frame.store(frame, Relaxed),
        _ if !arch::thread_stack_intact(prev) => {
            panic!("stack overflow: thread {} (kind {})", prev, THREADS[prev].kind.load(Relaxed))
        }
        _ => THREADS[prev].frame.store(frame, Release),
    }
    let cur = match next {
        NONE => me.idle_frame.load(Relaxed),
        _ => THREADS[next].frame.load(Acquire),
    };
    me.current.store(next, Relaxed);
    arch::set_running(next != NONE);
    // A thread whose task exited is gone once the switch away from it finishes.
    if let Some((_, slot)) = k.finish(cpu, now).expect(OUR_CPU) {
        free_thread(slot as usize);
    }
    (hooks().on_switch)(cpu, now, (next != NONE).then(|| THREADS[next].kind.load(Relaxed)));
    cur
}

/// With `nohz=on`: an idle CPU tells the core (`idle_enter`) and stops its tick when the core
/// counts it tickless (busy CPUs then kick it to balance for all tickless CPUs); a CPU with
/// work tells it `idle_exit` and ticks again.
fn update_tickless(k: &Kernel, cpu: usize) {
    let me = &CPUS[cpu];
    // A CPU keeps ticking while threads sleep: sleepers are woken from ticks.
    let idle = me.current.load(Relaxed) == NONE && k.stats(cpu).is_ok_and(|s| s.idle) && !any_sleeper();
    let tickless = me.tickless.load(Relaxed);
    if idle && !tickless {
        // The core counts it tickless (it checked the same idleness).
        if k.idle_enter(cpu).expect(OUR_CPU) {
            arch::timer_stop();
            me.tickless.store(true, Release);
        }
    } else if !idle && tickless {
        k.idle_exit(cpu).expect(OUR_CPU);
        arm_tick(cpu);
        // The watchdog reads `tickless`, then the heartbeat: restart the heartbeat first.
        me.heartbeat_ns.store(arch::now_ns(), Release);
        me.tickless.store(false, Release);
    }
}

/// One wait of the idle loop: marks this CPU as waiting for an interrupt (for the watchdog),
/// then `wfi`. Call with IRQs enabled; the next exception clears the mark.
pub fn idle_wait() {
    CPUS[arch::cpu_id()].waiting.store(true, Release);
    arch::wfi();
}
