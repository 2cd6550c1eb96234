//! Running a program: each thread's place in it and the shared mutexes, condition
//! variables, barriers and timers, as one [`World`]. A platform (the simulator, the kernel)
//! asks [`World::step`] what a thread does next and carries the answer out: busy work, a
//! sleep, a block until another thread's step wakes it (through [`Host::wake`]), a yield, a
//! fork, the end. The semantics are rt-app's (condition variables without memory, barriers
//! counted per use, timers that catch up in absolute mode and restart in relative mode), and
//! a released mutex goes to its earliest waiter (a deterministic choice where glibc's default
//! mutex promises no order); every platform gets them from here, with
//! this project's two events besides: `take` (a shared pool of events, sysbench's counter)
//! and `join` (wait for the threads one forked).

use crate::format::{Event, Program, Timer};
use crate::limits::{MAX_RESOURCES, MAX_THREAD_TIMERS};

/// A thread of the world, by number (the order [`World::spawn`] gave them).
pub type ThreadId = u16;

const NONE: u16 = u16::MAX;

/// A shared timer no thread has reached yet.
const UNSET: u64 = u64::MAX;

/// The least an iteration of a phase takes (the loop's own overhead): one whose events take
/// less is charged the rest, so a workload always advances time.
pub const EMPTY_ITERATION_NS: u64 = 1_000;

/// The busy work of a `run` of `us` µs: `us` µs at the machine's full speed, as rt-app's run
/// is on the machine it calibrated (the file's own `calibration` describes another).
fn work_ns(us: u32) -> u64 {
    us as u64 * 1000
}

/// What a thread does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Busy work of `ns` at the machine's full speed (a `run`, or a `take`'s event).
    Work {
        /// Work (ns).
        ns: u64,
        /// How far a platform that models variation may vary it either way (%): a `take`'s
        /// pool's jitter; 0 for every other event.
        jitter_pct: u32,
    },
    /// Busy work until time `at` (a `runtime`); preemption counts.
    WorkUntil {
        /// Until (ns).
        at: u64,
    },
    /// Sleep until `at`, then step again.
    SleepUntil {
        /// Wake-up (ns).
        at: u64,
    },
    /// Block until another thread's step wakes it ([`Host::wake`]), then step again.
    Block,
    /// Give up the CPU once, then step again.
    Yield,
    /// Start a thread of task `task` ([`World::spawn`]), then step again.
    Fork {
        /// The task definition.
        task: u16,
    },
    /// The thread has finished its loops.
    Exit,
}

/// One phase iteration of one thread, as rt-app logs a row: the figures every platform
/// reports with the same definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Activation {
    /// The thread.
    pub thread: ThreadId,
    /// Its task definition.
    pub task: u16,
    /// The phase.
    pub phase: u16,
    /// When the iteration began and ended (ns).
    pub start: u64,
    /// See `start`.
    pub end: u64,
    /// Wall time spent in its `run` and `runtime` events, preemption included (ns).
    pub run_ns: u64,
    /// At its last timer: the next activation minus the time the timer was reached (ns);
    /// negative: the timer was missed. `None`: no timer in the phase.
    pub slack_ns: Option<i64>,
    /// From its last sleep's or timer's deadline, or its last wake-up by another thread
    /// (a mutex handed over, a signal, a barrier's release), to the thread running again
    /// (ns); `None` if it neither slept nor blocked.
    pub wake_latency_ns: Option<u64>,
    /// The CPU the iteration ended on: the platform sets it when the activation reaches it
    /// ([`Host::activation`]); the world does not know CPUs.
    pub cpu: u16,
}

/// What the world asks of the platform while it steps a thread.
pub trait Host {
    /// Thread `t`, blocked ([`Step::Block`]), may go on: make it runnable.
    fn wake(&mut self, t: ThreadId);
    /// A phase iteration ended.
    fn activation(&mut self, a: &Activation);
    /// Thread `t` took event `event` (numbered from 0) of pool `pool`; its work is the step
    /// returned with it.
    fn taken(&mut self, t: ThreadId, pool: u16, event: u32) {
        let _ = (t, pool, event);
    }
}

/// What a thread waits for while blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Nothing,
    Mutex(u16),
    /// A condition variable, and the mutex to take again when signalled (`NONE`: none, a
    /// `suspend`).
    Cond(u16, u16),
    Barrier(u16),
    /// The threads it forked to end.
    Join,
}

/// The event a thread is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    None,
    /// The rest of the loop's overhead after an iteration that took less (completes nothing).
    Overhead,
    Work {
        started: u64,
    },
    WorkUntil {
        started: u64,
        until: u64,
    },
    Sleep {
        deadline: u64,
    },
    Blocked,
}

/// One thread's place in the program.
#[derive(Debug, Clone, Copy)]
struct Thread {
    task: u16,
    live: bool,
    /// The thread that forked it (`NONE`: started with the workload), and its own forks
    /// still running.
    parent: u16,
    children: u32,
    /// Its timers' reference and its start (the workload's start plus the task's delay).
    start: u64,
    loops_done: u32,
    phase: u16,
    phase_iter: u32,
    event: u16,
    pending: Pending,
    wait: Wait,
    /// Arrival order among waiters (mutexes and condition variables serve the earliest).
    wait_seq: u64,
    timers: [u64; MAX_THREAD_TIMERS],
    /// The iteration in progress: open, its start, run time, slack, wake latency.
    open: bool,
    act_start: u64,
    act_run: u64,
    act_slack: Option<i64>,
    act_wake: Option<u64>,
    /// The deadline of the sleep it is waking from, until it runs.
    woke_from: Option<u64>,
}

impl Thread {
    const IDLE: Thread = Thread {
        task: 0,
        live: false,
        parent: NONE,
        children: 0,
        start: 0,
        loops_done: 0,
        phase: 0,
        phase_iter: 0,
        event: 0,
        pending: Pending::None,
        wait: Wait::Nothing,
        wait_seq: 0,
        timers: [0; MAX_THREAD_TIMERS],
        open: false,
        act_start: 0,
        act_run: 0,
        act_slack: None,
        act_wake: None,
        woke_from: None,
    };
}

/// Why a thread could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnError {
    /// The world holds `T` threads already.
    Full,
    /// No such task definition.
    NoTask,
}

/// Every thread's place and the shared resources of one run of a program. `T`: the most
/// threads (started and forked) one run may have.
#[derive(Debug, Clone)]
pub struct World<const T: usize> {
    t0: u64,
    threads: [Thread; T],
    nthreads: usize,
    owner: [u16; MAX_RESOURCES],
    arrived: [u32; MAX_RESOURCES],
    /// Each shared timer's last activation; [`UNSET`] until a thread first reaches it, which
    /// starts it from that thread's own start (rt-app's: the first user's delay counts).
    shared_timers: [u64; MAX_RESOURCES],
    /// Events taken from each pool.
    taken: [u32; MAX_RESOURCES],
    seq: u64,
}

impl<const T: usize> World<T> {
    /// An empty world whose workload starts at `t0` (ns). (`const`: a kernel keeps its world
    /// in a static.)
    pub const fn new(t0: u64) -> World<T> {
        World {
            t0,
            threads: [Thread::IDLE; T],
            nthreads: 0,
            owner: [NONE; MAX_RESOURCES],
            arrived: [0; MAX_RESOURCES],
            shared_timers: [UNSET; MAX_RESOURCES],
            taken: [0; MAX_RESOURCES],
            seq: 0,
        }
    }

    /// Moves the workload's start to `t0` (ns); only before any thread is added.
    pub fn set_start(&mut self, t0: u64) {
        if self.nthreads == 0 {
            self.t0 = t0;
        }
    }

    /// Adds a thread of task `task` that starts at `start` (ns; for the threads started with
    /// the workload, its start plus the task's delay).
    pub fn spawn(&mut self, prog: &Program<'_>, task: u16, start: u64) -> Result<ThreadId, SpawnError> {
        prog.task(task as usize).ok_or(SpawnError::NoTask)?;
        if self.nthreads >= T.min(NONE as usize) {
            return Err(SpawnError::Full);
        }
        let id = self.nthreads;
        self.threads[id] =
            Thread { task, live: true, start, timers: [start; MAX_THREAD_TIMERS], ..Thread::IDLE };
        self.nthreads += 1;
        Ok(id as ThreadId)
    }

    /// Adds a thread of task `task` that thread `parent` forks at `now` ([`Step::Fork`]):
    /// `parent`'s `join` waits for it.
    pub fn fork(
        &mut self,
        prog: &Program<'_>,
        parent: ThreadId,
        task: u16,
        now: u64,
    ) -> Result<ThreadId, SpawnError> {
        let child = self.spawn(prog, task, now)?;
        if let Some(p) = self.threads.get_mut(parent as usize).filter(|_| (parent as usize) < self.nthreads) {
            p.children += 1;
            self.threads[child as usize].parent = parent;
        }
        Ok(child)
    }

    /// Thread `t`, just forked ([`World::fork`]), cannot start: the platform has no room for
    /// it. It ends before its first event, and its parent's `join` does not wait for it. (As
    /// a fork past the thread table, it is a refused fork.)
    pub fn abandon(&mut self, t: ThreadId, now: u64, host: &mut impl Host) {
        if (t as usize) < self.nthreads && self.threads[t as usize].live {
            self.end(t, now, host);
        }
    }

    /// Adds every task's instances, each starting at the workload's start plus its delay.
    pub fn spawn_all(&mut self, prog: &Program<'_>) -> Result<(), SpawnError> {
        for (i, t) in prog.tasks().enumerate() {
            for _ in 0..t.instances() {
                self.spawn(prog, i as u16, self.t0 + t.delay_us() as u64 * 1000)?;
            }
        }
        Ok(())
    }

    /// Threads added so far.
    pub fn len(&self) -> usize {
        self.nthreads
    }

    /// Whether no thread was added.
    pub fn is_empty(&self) -> bool {
        self.nthreads == 0
    }

    /// Thread `t`'s task definition.
    pub fn task_of(&self, t: ThreadId) -> Option<u16> {
        self.threads.get(t as usize).filter(|_| (t as usize) < self.nthreads).map(|th| th.task)
    }

    /// When thread `t` starts (ns).
    pub fn start_of(&self, t: ThreadId) -> u64 {
        self.threads.get(t as usize).map_or(0, |th| th.start)
    }

    /// The CPUs thread `t` may use now: its phase's, else its task's (a bit per CPU of the
    /// first 64; `None`: every CPU of the machine).
    pub fn cpus_of(&self, prog: &Program<'_>, t: ThreadId) -> Option<u64> {
        let th = self.threads.get(t as usize)?;
        let task = prog.task(th.task as usize)?;
        task.phase(th.phase as usize).and_then(|p| p.cpus()).or(task.cpus())
    }

    /// Threads blocked on a mutex, condition variable or barrier, or joining their forks.
    pub fn blocked(&self) -> usize {
        self.threads[..self.nthreads].iter().filter(|t| t.live && t.wait != Wait::Nothing).count()
    }

    /// Whether the workload is deadlocked: threads live, and every one waits for another (a
    /// mutex, a condition, a barrier, its forks), so none can go on. (A thread that works,
    /// sleeps, or has not started yet does not wait.)
    pub fn stuck(&self) -> bool {
        let mut live = self.threads[..self.nthreads].iter().filter(|t| t.live).peekable();
        live.peek().is_some() && live.all(|t| t.wait != Wait::Nothing)
    }

    /// Whether `prog`'s run ends here, at a deadlock: it is [`World::stuck`] and has no
    /// `duration` (one with a duration runs it out, as rt-app does). Every platform ends its
    /// run by this rule.
    pub fn ends_stuck(&self, prog: &Program<'_>) -> bool {
        prog.duration_us() == 0 && self.stuck()
    }

    /// Thread `t` runs again at `now` after a sleep or timer: its wake-up latency is measured.
    pub fn running(&mut self, t: ThreadId, now: u64) {
        if let Some(th) = self.threads.get_mut(t as usize) {
            if let Some(deadline) = th.woke_from.take() {
                th.act_wake = Some(now.saturating_sub(deadline));
            }
        }
    }

    /// What thread `t` does next, at `now`: the event it was in is complete (its work done,
    /// its sleep over, or what it blocked for given to it), and it goes on through its
    /// events until one takes time or blocks.
    pub fn step(&mut self, prog: &Program<'_>, t: ThreadId, now: u64, host: &mut impl Host) -> Step {
        if (t as usize) >= self.nthreads || !self.threads[t as usize].live {
            return Step::Exit;
        }
        let Some(task) = prog.task(self.threads[t as usize].task as usize) else { return Step::Exit };
        if task.loops() == Some(0) {
            // rt-app runs no phase of a task with no loops: the thread ends after its delay.
            self.end(t, now, host);
            return Step::Exit;
        }
        loop {
            let th = &mut self.threads[t as usize];
            let done = match th.pending {
                Pending::None => false,
                Pending::Overhead => {
                    th.pending = Pending::None;
                    false
                }
                Pending::WorkUntil { until, .. } if now < until => return Step::WorkUntil { at: until },
                Pending::Work { started } | Pending::WorkUntil { started, .. } => {
                    th.act_run += now.saturating_sub(started);
                    true
                }
                Pending::Sleep { .. } | Pending::Blocked => true,
            };
            if done {
                self.threads[t as usize].pending = Pending::None;
                let began = self.threads[t as usize].act_start;
                if self.advance(prog, t, now, host) {
                    // An iteration takes at least the loop's own overhead: one that took less
                    // (events done at once, a yield, a fork, a tiny `run`) is charged the
                    // rest, so that a thread's time always moves.
                    let took = now.saturating_sub(began);
                    let th = &mut self.threads[t as usize];
                    if th.live && took < EMPTY_ITERATION_NS {
                        th.pending = Pending::Overhead;
                        return Step::Work { ns: EMPTY_ITERATION_NS - took, jitter_pct: 0 };
                    }
                }
            }
            let th = &mut self.threads[t as usize];
            if !th.live {
                return Step::Exit;
            }
            if !th.open {
                th.open = true;
                th.act_start = now;
                th.act_run = 0;
                th.act_slack = None;
                th.act_wake = None;
            }
            let Some(event) = task.phase(th.phase as usize).and_then(|p| p.event(th.event as usize)) else {
                return Step::Exit;
            };
            if let Some(step) = self.begin(prog, t, event, now, host) {
                return step;
            }
            // Done at once: completed like any other event on the next turn of the loop.
            self.threads[t as usize].pending = Pending::Blocked;
        }
    }

    /// Starts `event` for thread `t`: the step it takes, or `None` if it completed at once.
    fn begin(
        &mut self,
        prog: &Program<'_>,
        t: ThreadId,
        event: Event,
        now: u64,
        host: &mut impl Host,
    ) -> Option<Step> {
        let me = t as usize;
        match event {
            Event::Run { us } => {
                self.threads[me].pending = Pending::Work { started: now };
                Some(Step::Work { ns: work_ns(us), jitter_pct: 0 })
            }
            Event::Take { pool, us } => {
                let (size, jitter_pct) = prog.pools().nth(pool as usize).unwrap_or((0, 0));
                let n = self.taken[pool as usize];
                if n >= size {
                    // The pool is empty: the thread ends, its iteration unfinished.
                    self.threads[me].open = false;
                    self.end(t, now, host);
                    return Some(Step::Exit);
                }
                self.taken[pool as usize] = n + 1;
                host.taken(t, pool, n);
                self.threads[me].pending = Pending::Work { started: now };
                Some(Step::Work { ns: work_ns(us), jitter_pct })
            }
            Event::Join => {
                if self.threads[me].children == 0 {
                    None
                } else {
                    Some(self.block(t, Wait::Join))
                }
            }
            Event::Runtime { us } => {
                let until = now + us as u64 * 1000;
                self.threads[me].pending = Pending::WorkUntil { started: now, until };
                Some(Step::WorkUntil { at: until })
            }
            Event::Sleep { us } => Some(self.sleep(t, now + us as u64 * 1000)),
            Event::Timer { timer, period_us, absolute } => {
                let period = period_us as u64 * 1000;
                let start = self.threads[me].start;
                let next = match timer {
                    Timer::Shared(n) => &mut self.shared_timers[n as usize],
                    Timer::PerThread(n) => &mut self.threads[me].timers[n as usize],
                };
                if *next == UNSET {
                    *next = start;
                }
                *next += period;
                let deadline = *next;
                let slack = deadline as i64 - now as i64;
                if now >= deadline && !absolute {
                    *next = now;
                }
                self.threads[me].act_slack = Some(slack);
                if now < deadline {
                    Some(self.sleep(t, deadline))
                } else {
                    None
                }
            }
            Event::Lock(m) => {
                if self.owner[m as usize] == NONE {
                    self.owner[m as usize] = t;
                    None
                } else {
                    Some(self.block(t, Wait::Mutex(m)))
                }
            }
            Event::Unlock(m) => {
                self.release(m, now, host);
                None
            }
            Event::Wait { cond, mutex } => {
                self.release(mutex, now, host);
                Some(self.block(t, Wait::Cond(cond, mutex)))
            }
            Event::Sync { cond, mutex } => {
                self.signal(cond, false, now, host);
                self.release(mutex, now, host);
                Some(self.block(t, Wait::Cond(cond, mutex)))
            }
            Event::Signal(c) => {
                self.signal(c, false, now, host);
                None
            }
            Event::Broad(c) | Event::Resume(c) => {
                self.signal(c, true, now, host);
                None
            }
            Event::Suspend(c) => Some(self.block(t, Wait::Cond(c, NONE))),
            Event::Barrier(b) => {
                let parties = prog.barriers().nth(b as usize).unwrap_or(1);
                self.arrived[b as usize] += 1;
                if self.arrived[b as usize] < parties {
                    return Some(self.block(t, Wait::Barrier(b)));
                }
                self.arrived[b as usize] = 0;
                // In the order they arrived.
                while let Some(w) = self.first_waiter(|x| x == Wait::Barrier(b)) {
                    self.wake(w, now, host);
                }
                None
            }
            Event::Yield => {
                self.threads[me].pending = Pending::Blocked;
                Some(Step::Yield)
            }
            Event::Fork(task) => {
                self.threads[me].pending = Pending::Blocked;
                Some(Step::Fork { task })
            }
        }
    }

    fn sleep(&mut self, t: ThreadId, at: u64) -> Step {
        let th = &mut self.threads[t as usize];
        th.pending = Pending::Sleep { deadline: at };
        th.woke_from = Some(at);
        Step::SleepUntil { at }
    }

    fn block(&mut self, t: ThreadId, wait: Wait) -> Step {
        self.seq += 1;
        let th = &mut self.threads[t as usize];
        th.pending = Pending::Blocked;
        th.wait = wait;
        th.wait_seq = self.seq;
        Step::Block
    }

    /// The earliest waiter for which `is` holds.
    fn first_waiter(&self, is: impl Fn(Wait) -> bool) -> Option<usize> {
        (0..self.nthreads)
            .filter(|&w| self.threads[w].live && is(self.threads[w].wait))
            .min_by_key(|&w| self.threads[w].wait_seq)
    }

    /// Thread `t` ends at `now`: a parent joining its last fork is woken.
    fn end(&mut self, t: ThreadId, now: u64, host: &mut impl Host) {
        let th = &mut self.threads[t as usize];
        th.live = false;
        let parent = th.parent as usize;
        if parent < self.nthreads {
            let p = &mut self.threads[parent];
            p.children = p.children.saturating_sub(1);
            if p.children == 0 && p.live && p.wait == Wait::Join {
                self.wake(parent, now, host);
            }
        }
    }

    /// Wakes blocked thread `w` at `now`: its wake-to-run latency starts.
    fn wake(&mut self, w: usize, now: u64, host: &mut impl Host) {
        self.threads[w].wait = Wait::Nothing;
        self.threads[w].woke_from = Some(now);
        host.wake(w as ThreadId);
    }

    /// Releases mutex `m`: its earliest waiter takes it and is woken.
    fn release(&mut self, m: u16, now: u64, host: &mut impl Host) {
        self.owner[m as usize] = NONE;
        if let Some(w) = self.first_waiter(|x| x == Wait::Mutex(m)) {
            self.owner[m as usize] = w as u16;
            self.wake(w, now, host);
        }
    }

    /// Signals condition variable `c` (one waiter, or every one): each takes its mutex again
    /// (waking if it is free, else queueing for it). No waiter: nothing happens.
    fn signal(&mut self, c: u16, all: bool, now: u64, host: &mut impl Host) {
        while let Some(w) = self.first_waiter(|x| matches!(x, Wait::Cond(cc, _) if cc == c)) {
            let Wait::Cond(_, m) = self.threads[w].wait else { break };
            if m == NONE || self.owner[m as usize] == NONE {
                if m != NONE {
                    self.owner[m as usize] = w as u16;
                }
                self.wake(w, now, host);
            } else {
                // Queued for the mutex, behind those already waiting.
                self.seq += 1;
                self.threads[w].wait = Wait::Mutex(m);
                self.threads[w].wait_seq = self.seq;
            }
            if !all {
                break;
            }
        }
    }

    /// Thread `t` completed its current event: on to the next, closing the iteration, the
    /// phase and the loop as they end. Returns whether an iteration ended.
    fn advance(&mut self, prog: &Program<'_>, t: ThreadId, now: u64, host: &mut impl Host) -> bool {
        let th = &mut self.threads[t as usize];
        let Some(task) = prog.task(th.task as usize) else {
            th.live = false;
            return false;
        };
        let Some(phase) = task.phase(th.phase as usize) else {
            th.live = false;
            return false;
        };
        th.event += 1;
        if (th.event as usize) < phase.len() {
            return false;
        }
        th.event = 0;
        th.open = false;
        let a = Activation {
            thread: t,
            task: th.task,
            phase: th.phase,
            start: th.act_start,
            end: now,
            run_ns: th.act_run,
            slack_ns: th.act_slack,
            wake_latency_ns: th.act_wake,
            cpu: 0,
        };
        th.phase_iter = th.phase_iter.saturating_add(1);
        let mut ends = false;
        if phase.loops().is_some_and(|n| th.phase_iter >= n) {
            th.phase_iter = 0;
            th.phase += 1;
            if th.phase as usize >= task.nr_phases() {
                th.phase = 0;
                th.loops_done += 1;
                ends = task.loops().is_some_and(|n| th.loops_done >= n);
            }
        }
        host.activation(&a);
        if ends {
            self.end(t, now, host);
        }
        true
    }
}

#[cfg(test)]
mod tests;
