//! The porting recipe: everything this kernel does to host sched-core, in one place and in
//! the order a port needs it (see the root PORTING.md for the contract each step keeps):
//!
//! 1. the [`Platform`] the core calls back: a reschedule IPI for another CPU, the clock,
//!    events for the reports;
//! 2. [`with_core`]: the only way to the core, with this CPU's IRQs masked;
//! 3. [`cpu_online`]: each CPU's first pass through the scheduler (`cpu_up`) before it is
//!    counted online;
//! 4. [`exception`]: every interrupt and system call ends here: the tick
//!    (`tick`), the reschedule IPI (`serve_kick` on a tickless CPU), the system calls
//!    (`create`, `block`, `wake`, `exit`, `yield_now`, `set_affinity`), then the way out;
//! 5. the way out ([`reschedule`]): while `need_resched`, `pick`, store the interrupted
//!    frame as the previous thread's, load the next thread's (its slot is the task's
//!    payload), `finish`;
//! 6. idle ([`update_tickless_with`], [`idle_wait`]): `idle_enter` and stop the tick when the core
//!    counts the CPU tickless, `idle_exit` and re-arm it when work comes.

use super::*;

/// Runs `f` with the core, on this CPU with its IRQs masked: the only way to reach the core
/// from outside this module. The core's locks are spin locks that ticks and IPIs take too;
/// a core call interrupted on its own CPU by a handler that takes the same lock would spin
/// forever, so every call — from a handler (IRQs already masked; masking again is free of
/// effect) or from a thread — comes through here.
pub fn with_core<T>(f: impl FnOnce(&'static Kernel) -> T) -> T {
    let _irq = arch::IrqGuard::mask();
    f(smp())
}

/// The scheduler static. Private: every call into the core, the handlers'
/// included, goes through [`with_core`] (in a handler, masking again costs three system
/// register accesses); only the `Platform` callbacks, which run inside core calls, use it
/// directly.
pub(super) fn smp() -> &'static Kernel {
    &SMP
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
        // this came after the last check (see RESCHED_LATE).
        if c == me && IN_HANDLER[me].load(Relaxed) {
            RESCHED_LATE[me].store(true, Relaxed);
            return;
        }
        CPU[c].resched_sent.fetch_add(1, Relaxed);
        arch::send_ipi(c, IPI_RESCHED);
    }

    fn clock_ns(&self) -> Option<u64> {
        Some(arch::now_ns())
    }

    fn event(&self, event: &Event) {
        let c = event.cpu.min(MAX_CPUS - 1);
        if TRACE.load(Relaxed) {
            trace_event(event);
        }
        match event.kind {
            // Payloads may be read from a callback (PORTING.md): the thread's start lag starts.
            EventKind::NewTask { task } => {
                ready(smp().payload(task).ok(), event.time);
                handed(c, event.time);
                handed(c, event.time);
            }
            EventKind::Waking { task, nr_running } => {
                ready(smp().payload(task).ok(), event.time);
                handed(c, event.time);
                WAKEUPS.fetch_add(1, Relaxed);
                // 1: the wakee is alone there.
                if nr_running == 1 {
                    WAKEUPS_ONTO_IDLE.fetch_add(1, Relaxed);
                }
            }
            EventKind::Migrate { reason, .. } => {
                CPU[c].migrations_in.fetch_add(1, Relaxed);
                MIGRATIONS.fetch_add(1, Relaxed);
                let r = match reason {
                    MigrateReason::Wakeup => 0,
                    MigrateReason::Placement => 1,
                    MigrateReason::Balance => 2,
                    MigrateReason::ActiveBalance => 3,
                    MigrateReason::Affinity => 4,
                };
                MIGRATIONS_BY_REASON[r].fetch_add(1, Relaxed);
            }
            EventKind::Balance(r) => {
                let b = r.cpu.min(MAX_CPUS - 1);
                if r.outcome.ends_pass() {
                    CPU[b].balance_runs.fetch_add(1, Relaxed);
                }
                CPU[b].balance_moved.fetch_add(r.moved as u64, Relaxed);
                let o = match r.outcome {
                    Outcome::NotDesignated => 0,
                    Outcome::Balanced => 1,
                    Outcome::Moved => 2,
                    Outcome::NothingDetachable => 3,
                    Outcome::AllPinned => 4,
                    Outcome::ActiveBalance => 5,
                    Outcome::Redirected => 6,
                    Outcome::Retried => 7,
                };
                CPU[b].balance_outcomes[o].fetch_add(1, Relaxed);
            }
            _ => {}
        }
    }
}

/// Marks this CPU online: records the time, and passes it through the scheduler once.
pub fn cpu_online(cpu: usize) {
    CPU[cpu].online_ns.store(arch::now_ns().max(1), Relaxed);
    // Its timer is armed: from now on it must tick (a CPU that hangs before its first tick
    // is watched too).
    HEARTBEAT_NS[cpu].store(arch::now_ns().max(1), Release);
    // The CPU's idle loop passes through the scheduler once, as a booting Linux CPU does
    // when its first kthreads go to sleep: that stamps when it went idle. Fork placement
    // chooses among idle CPUs by that stamp and never picks one that has none, so without
    // this pass every fork stayed in the parent's cluster. No task exists before all CPUs
    // are online (the scenario starts after that), so there is nothing to pick.
    let now = arch::now_ns();
    with_core(|k| k.cpu_up(cpu, now).expect(OUR_CPU));
    ONLINE.fetch_add(1, Release);
}

/// Every exception ends here (IRQs masked). Returns the address of the frame to resume.
pub fn exception(frame: &mut Frame, addr: usize, kind: ExcKind) -> usize {
    let cpu = arch::cpu_id();
    let entered = arch::now_ns();
    WAITING[cpu].store(false, Release);
    IN_HANDLER[cpu].store(true, Relaxed);
    HANDLER_SINCE[cpu].store(entered.max(1), Relaxed);
    match kind {
        ExcKind::Irq => handle_irqs(cpu),
        ExcKind::Svc(nr) => syscall(cpu, frame, nr),
        ExcKind::Fault => {
            panic!("unhandled synchronous exception: {}", arch::fault_info(frame));
        }
        ExcKind::Unexpected(k) => panic!("unexpected exception (vector entry {})", k),
    }
    let mut next = reschedule(cpu, addr);
    // A request delivered at the end of the exit's last core call (idle_enter, say).
    for _ in 0..SWITCH_PASSES {
        if !RESCHED_LATE[cpu].swap(false, Relaxed) {
            break;
        }
        next = reschedule(cpu, next);
    }
    if !arch::cpu_stacks_intact(cpu) {
        panic!("stack overflow: CPU {}'s exception or boot stack", cpu);
    }
    IN_HANDLER[cpu].store(false, Relaxed);
    HANDLER_SINCE[cpu].store(0, Relaxed);
    let spent = arch::now_ns().saturating_sub(entered);
    CPU[cpu].handler_ns.fetch_add(spent, Relaxed);
    CPU[cpu].handler_max_ns.fetch_max(spent, Relaxed);
    next
}

fn handle_irqs(cpu: usize) {
    while let Some(irq) = arch::irq_ack() {
        if irq.is_timer() {
            arm_tick(cpu);
            CPU[cpu].ticks.fetch_add(1, Relaxed);
            let now = arch::now_ns();
            HEARTBEAT_NS[cpu].store(now, Release);
            watchdog_check(cpu, now);
            if SLEEPERS.load(Acquire) != 0 {
                wake_sleepers(cpu, now);
            }
            with_core(|k| k.tick(cpu, now).expect(OUR_CPU));
            (hooks().on_tick)(cpu, now);
        } else {
            match irq.ipi() {
                Some(IPI_RESCHED) => {
                    CPU[cpu].resched_ipis.fetch_add(1, Relaxed);
                    if TICKLESS[cpu].load(Relaxed) {
                        // Maybe a kick to balance for all tickless CPUs; the core ignores
                        // the call if there is none.
                        with_core(|k| k.serve_kick(cpu, arch::now_ns()).expect(OUR_CPU));
                    }
                }
                Some(IPI_PING) => {
                    CPU[cpu].pings.fetch_add(1, Relaxed);
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

fn syscall(cpu: usize, frame: &mut Frame, nr: u64) {
    let now = arch::now_ns();
    match nr {
        arch::SYS_SPAWN => {
            let a = |i| frame.syscall_arg(i);
            let r = spawn(cpu, now, a(0) as usize, a(1) as usize, a(2) as i32, a(3));
            let ret = match r {
                Ok(slot) => slot as u64,
                Err(e) => {
                    defmt::error!("spawn failed: {}", defmt::Debug2Format(&e));
                    u64::MAX
                }
            };
            frame.set_syscall_ret(ret);
        }
        arch::SYS_YIELD => with_core(|k| k.yield_now(cpu, now).expect(OUR_CPU)),
        arch::SYS_EXIT => {
            let t = CURRENT[cpu].load(Relaxed);
            if t != NONE {
                let id = TaskId::from_raw(T_TASK[t].load(Relaxed));
                match with_core(|k| k.exit(cpu, now, id)) {
                    // The caller is the running task: it leaves with the switch that ends it.
                    Ok(gone) => debug_assert!(!gone, "a running task is not gone at once"),
                    Err(e) => panic!("exit of {:?} refused: {:?}", id, e),
                }
                T_EPOCH[t].fetch_add(1, SeqCst);
                let joiner = T_JOINER[t].swap(NONE, SeqCst);
                if joiner != NONE {
                    unpark(cpu, now, joiner);
                }
                // Its slot is freed when the switch away from it finishes (`finish` says so).
            }
        }
        arch::SYS_PARK => {
            let t = CURRENT[cpu].load(Relaxed);
            if t != NONE {
                let mut p = PARK[t].lock();
                if p.token {
                    p.token = false;
                } else {
                    let id = TaskId::from_raw(T_TASK[t].load(Relaxed));
                    if let Err(e) = with_core(|k| k.block(cpu, now, id)) {
                        panic!("block of {:?} refused: {:?}", id, e);
                    }
                    p.parked = true;
                }
            }
        }
        arch::SYS_UNPARK => {
            let t = frame.syscall_arg(0) as usize;
            frame.set_syscall_ret(if unpark(cpu, now, t) { 0 } else { u64::MAX });
        }
        arch::SYS_SET_AFFINITY => {
            let (t, bits) = (frame.syscall_arg(0) as usize, frame.syscall_arg(1));
            frame.set_syscall_ret(u64::MAX);
            if t < MAX_THREADS && T_USED[t].load(Acquire) {
                let old = T_AFF[t].load(Relaxed);
                // While the core changes it, either mask may be in force.
                T_AFF[t].store(old & bits, Relaxed);
                let id = TaskId::from_raw(T_TASK[t].load(Relaxed));
                match with_core(|k| k.set_affinity(cpu, now, id, cpu_mask(bits))) {
                    Ok(()) => {
                        T_AFF[t].store(bits, Relaxed);
                        frame.set_syscall_ret(0);
                    }
                    Err(_) => T_AFF[t].store(old, Relaxed),
                }
            }
        }
        arch::SYS_SLEEP => {
            let t = CURRENT[cpu].load(Relaxed);
            let ns = frame.syscall_arg(0);
            if ns == 0 || t == NONE {
                with_core(|k| k.yield_now(cpu, now).expect(OUR_CPU));
            } else {
                let id = TaskId::from_raw(T_TASK[t].load(Relaxed));
                if let Err(e) = with_core(|k| k.block(cpu, now, id)) {
                    panic!("block of sleeping {:?} refused: {:?}", id, e);
                }
                SLEEPERS.fetch_add(1, AcqRel);
                T_SLEEP_UNTIL[t].store(now.saturating_add(ns).max(1), Release);
            }
        }
        _ => frame.set_syscall_ret(u64::MAX),
    }
}

/// If the core wants this CPU to reschedule: let it pick, store the interrupted context
/// (`frame`) as prev's, and return next's. `finish` comes after prev's frame is
/// stored, and this handler runs on the CPU's exception stack, so prev may resume on
/// another CPU from then on.
fn reschedule(cpu: usize, frame: usize) -> usize {
    with_core(|smp| reschedule_with(smp, cpu, frame))
}

/// The most pick/finish passes of one exception exit (this kernel's cap since before the
/// porter's API, whose `reschedule` makes at most `MAX_PASSES`); more waits for the next exit.
const SWITCH_PASSES: usize = 8;

fn reschedule_with(smp: &Kernel, cpu: usize, frame: usize) -> usize {
    let mut cur = frame;
    let was_idle = CURRENT[cpu].load(Relaxed) == NONE;
    for _ in 0..SWITCH_PASSES {
        // need_resched answers for every request delivered before and during it: only one
        // that comes with a later call (idle_enter, say) needs another look.
        RESCHED_LATE[cpu].store(false, Relaxed);
        if !smp.need_resched(cpu).expect(OUR_CPU) {
            break;
        }
        let now = arch::now_ns();
        let prev = CURRENT[cpu].load(Relaxed);
        // The thread is the task's payload: no map to look it up in. A new task may be picked
        // before `spawn` has recorded its id for the thread: record it here too, before the
        // thread runs (its own calls name it by this id).
        let switch = smp.pick(cpu, now).expect(OUR_CPU);
        let next = match switch.next {
            Some((id, slot)) => {
                T_TASK[slot as usize].store(id.to_raw(), Relaxed);
                slot as usize
            }
            None => NONE,
        };
        let since = SWITCH_IN[cpu].swap(now, Relaxed);
        if prev != NONE {
            T_CPU_NS[prev].fetch_add(now.saturating_sub(since), Relaxed);
        }
        if prev == NONE {
            woke(cpu, now, next != NONE);
        }
        if next != NONE && next != prev {
            started(next, now);
            T_RAN_ON[next].fetch_or(1 << cpu, Relaxed);
            if T_AFF[next].load(Relaxed) >> cpu & 1 == 0 {
                AFFINITY_VIOLATIONS.fetch_add(1, Relaxed);
                let _ = FIRST_VIOLATION.compare_exchange(
                    0,
                    ((next as u64) << 8 | cpu as u64) + 1,
                    Relaxed,
                    Relaxed,
                );
            }
        }
        if prev != NONE {
            if !arch::thread_stack_intact(prev) {
                panic!("stack overflow: thread {} (kind {})", prev, T_KIND[prev].load(Relaxed));
            }
            T_FRAME[prev].store(cur, Release);
        } else {
            IDLE_FRAME[cpu].store(cur, Relaxed);
        }
        cur = if next != NONE { T_FRAME[next].load(Acquire) } else { IDLE_FRAME[cpu].load(Relaxed) };
        CURRENT[cpu].store(next, Relaxed);
        arch::set_running(next != NONE);
        if next != prev {
            CPU[cpu].switches.fetch_add(1, Relaxed);
            if TRACE.load(Relaxed) {
                // pid = slot + 1 (0 is idle); state: R runnable, S blocked, X exited.
                // (The pick reports the state it left the switched-out task in.)
                let state = match switch.prev.map(|(_, state, _)| state) {
                    Some(sched_core::TaskState::Blocked) => b'S',
                    Some(sched_core::TaskState::Exiting) => b'X',
                    _ => b'R',
                };
                let pid = |t: usize| if t == NONE { 0 } else { t as u32 + 1 };
                defmt::info!(
                    "trace: switch cpu={=usize} t={=u64} prev={=u32} state={=u8} next={=u32}",
                    cpu,
                    now,
                    pid(prev),
                    state,
                    pid(next)
                );
            }
        }
        // A thread whose task exited is gone once the switch away from it finishes.
        if let Some((_, slot)) = smp.finish(cpu, now).expect(OUR_CPU) {
            free_thread(slot as usize);
        }
        (hooks().on_switch)(cpu, now, (next != NONE).then(|| T_KIND[next].load(Relaxed)));
    }
    if NOHZ.load(Relaxed) {
        update_tickless_with(smp, cpu);
    }
    if was_idle && CURRENT[cpu].load(Relaxed) != NONE && IDLE_EXIT_YIELD.load(Relaxed) {
        // Leaving idle for a task: hand the host CPU on once (see IDLE_EXIT_YIELD).
        arch::relax();
    }
    cur
}

/// With `nohz=on`: an idle CPU tells the core (`idle_enter`) and stops its tick when the core
/// counts it tickless (busy CPUs then kick it to balance for all tickless CPUs); a CPU with
/// work tells it `idle_exit` and ticks again.
fn update_tickless_with(smp: &Kernel, cpu: usize) {
    // A CPU keeps ticking while threads sleep: sleepers are woken from ticks.
    let idle = CURRENT[cpu].load(Relaxed) == NONE
        && smp.stats(cpu).is_ok_and(|s| s.idle)
        && SLEEPERS.load(Acquire) == 0;
    let tickless = TICKLESS[cpu].load(Relaxed);
    if idle && !tickless {
        // The core counts it tickless (it checked the same idleness).
        if smp.idle_enter(cpu).expect(OUR_CPU) {
            arch::timer_stop();
            TICKLESS[cpu].store(true, Release);
        }
    } else if !idle && tickless {
        smp.idle_exit(cpu).expect(OUR_CPU);
        arm_tick(cpu);
        // The watchdog reads TICKLESS, then the heartbeat: restart the heartbeat first.
        HEARTBEAT_NS[cpu].store(arch::now_ns(), Release);
        TICKLESS[cpu].store(false, Release);
    }
}

/// One wait of the idle loop: marks this CPU as waiting for an interrupt (for the watchdog),
/// then `wfi`. Call with IRQs enabled; the next exception clears the mark.
pub fn idle_wait() {
    WAITING[arch::cpu_id()].store(true, Release);
    arch::wfi();
}
