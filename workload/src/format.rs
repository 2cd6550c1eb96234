//! The encoded program: little-endian 32-bit words, bounded in every count, read in place.
//!
//! | words | what |
//! |---|---|
//! | 0–15 | header: magic, version, length in words, checksum (FNV-1a of every word after the header), `duration` (µs, two words), a reserved zero, the counts of tasks, mutexes, condition variables, barriers, shared timers, per-thread timers and event pools, two reserved zeros |
//! | then | each barrier's parties, one word each |
//! | then | each event pool's size and jitter (%), two words each |
//! | then | each task's offset (in words), one word each |
//! | a task | instances, loops (-1: forever; 0: none), delay (µs), CPU mask (two words; 0: every CPU), nice, phase count, EEVDF slice (µs; 0: the default), name (four words), then its phases |
//! | a phase | loops (0: forever), CPU mask (two words; 0: the task's), event count, then its events, four words each: kind and three arguments |

use crate::limits::{
    MAX_DURATION_US, MAX_EVENTS, MAX_EVENT_US, MAX_INSTANCES, MAX_JITTER_PCT, MAX_LOOPS, MAX_PHASES,
    MAX_POOL_EVENTS, MAX_RESOURCES, MAX_SLICE_US, MAX_TASKS, MAX_THREAD_TIMERS, MAX_WORDS, MIN_SLICE_US,
    NAME_BYTES,
};

/// The first word of every program.
pub const MAGIC: u32 = 0x5041_5452;
/// The layout's version.
pub const VERSION: u32 = 6;
/// A phase's loop count that never ends it: it runs until the workload's duration ends.
pub const PHASE_FOREVER: u32 = 0;
const HEADER: usize = 16;
const TASK_HEADER: usize = 8 + NAME_BYTES / 4;
const PHASE_HEADER: usize = 4;
const EVENT_WORDS: usize = 4;
const POOL_WORDS: usize = 2;

/// A timer reference: a shared timer every thread naming it advances, or one of each thread's
/// own (`unique…` refs in rt-app).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Shared timer number `n`.
    Shared(u16),
    /// The thread's own timer number `n`.
    PerThread(u16),
}

/// One step of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Busy work of `us` µs at the machine's full speed (rt-app's work on the machine it
    /// calibrated): a preempted thread takes longer.
    Run {
        /// Work in µs.
        us: u32,
    },
    /// Busy work until `us` µs of wall time have passed.
    Runtime {
        /// Wall time in µs.
        us: u32,
    },
    /// Sleep `us` µs from now.
    Sleep {
        /// Sleep in µs.
        us: u32,
    },
    /// Sleep until the timer's next activation, `period_us` after its previous one.
    Timer {
        /// Which timer.
        timer: Timer,
        /// Its period in µs.
        period_us: u32,
        /// Absolute mode keeps the schedule after a miss; relative mode restarts it from now.
        absolute: bool,
    },
    /// Wait until every party of barrier `n` has arrived.
    Barrier(u16),
    /// Take mutex `n`.
    Lock(u16),
    /// Release mutex `n`.
    Unlock(u16),
    /// Release `mutex`, wait for a signal on `cond`, take `mutex` again.
    Wait {
        /// The condition variable.
        cond: u16,
        /// The mutex held around the wait.
        mutex: u16,
    },
    /// Wake one waiter of condition variable `n` (lost if none waits).
    Signal(u16),
    /// Wake every waiter of condition variable `n`.
    Broad(u16),
    /// Signal `cond`, then wait on it, holding `mutex` (a ping-pong step).
    Sync {
        /// The condition variable.
        cond: u16,
        /// The mutex held around the step.
        mutex: u16,
    },
    /// Wait for a resume on condition variable `n`.
    Suspend(u16),
    /// Wake every thread suspended on condition variable `n`.
    Resume(u16),
    /// Give up the CPU once.
    Yield,
    /// Start one new thread of task `n`.
    Fork(u16),
    /// Take the next event of pool `pool` and do its work, `us` µs at the calibrated speed
    /// (varied by the pool's jitter where the platform models it); a thread that finds the
    /// pool empty ends (sysbench's workers sharing one event counter). This project's event,
    /// not rt-app's.
    Take {
        /// The pool.
        pool: u16,
        /// Work per event in µs.
        us: u32,
    },
    /// Wait until every thread this one forked has ended (sysbench's main thread joining its
    /// workers). This project's event, not rt-app's.
    Join,
}

impl Event {
    fn kind(&self) -> u32 {
        match self {
            Event::Run { .. } => 1,
            Event::Runtime { .. } => 2,
            Event::Sleep { .. } => 3,
            Event::Timer { .. } => 4,
            Event::Barrier(_) => 5,
            Event::Lock(_) => 6,
            Event::Unlock(_) => 7,
            Event::Wait { .. } => 8,
            Event::Signal(_) => 9,
            Event::Broad(_) => 10,
            Event::Sync { .. } => 11,
            Event::Suspend(_) => 12,
            Event::Resume(_) => 13,
            Event::Yield => 14,
            Event::Fork(_) => 15,
            Event::Take { .. } => 16,
            Event::Join => 17,
        }
    }

    /// Its four words (the words its kind does not use are 0).
    fn words(&self) -> [u32; EVENT_WORDS] {
        let k = self.kind();
        match *self {
            Event::Run { us } | Event::Runtime { us } | Event::Sleep { us } => [k, us, 0, 0],
            Event::Timer { timer, period_us, absolute } => {
                let (n, per_thread) = match timer {
                    Timer::Shared(n) => (n, 0),
                    Timer::PerThread(n) => (n, 2),
                };
                [k, n as u32, period_us, absolute as u32 | per_thread]
            }
            Event::Barrier(n)
            | Event::Lock(n)
            | Event::Unlock(n)
            | Event::Signal(n)
            | Event::Broad(n)
            | Event::Suspend(n)
            | Event::Resume(n)
            | Event::Fork(n) => [k, n as u32, 0, 0],
            Event::Wait { cond, mutex } | Event::Sync { cond, mutex } => [k, cond as u32, mutex as u32, 0],
            Event::Yield | Event::Join => [k, 0, 0, 0],
            Event::Take { pool, us } => [k, pool as u32, us, 0],
        }
    }

    /// The event of `w`, checked against the program's counts.
    fn from_words(w: [u32; EVENT_WORDS], c: &Counts) -> Result<Event, FormatError> {
        let index = |v: u32, n: u32| if v < n { Ok(v as u16) } else { Err(FormatError::BadIndex) };
        let us = |v: u32| if v <= MAX_EVENT_US { Ok(v) } else { Err(FormatError::BadValue) };
        Ok(match w[0] {
            1 => Event::Run { us: us(w[1])? },
            2 => Event::Runtime { us: us(w[1])? },
            3 => Event::Sleep { us: us(w[1])? },
            4 => {
                if w[3] > 3 {
                    return Err(FormatError::BadValue);
                }
                let timer = if w[3] & 2 != 0 {
                    Timer::PerThread(index(w[1], c.per_thread_timers)?)
                } else {
                    Timer::Shared(index(w[1], c.timers)?)
                };
                Event::Timer { timer, period_us: us(w[2])?, absolute: w[3] & 1 != 0 }
            }
            5 => Event::Barrier(index(w[1], c.barriers)?),
            6 => Event::Lock(index(w[1], c.mutexes)?),
            7 => Event::Unlock(index(w[1], c.mutexes)?),
            8 => Event::Wait { cond: index(w[1], c.conds)?, mutex: index(w[2], c.mutexes)? },
            9 => Event::Signal(index(w[1], c.conds)?),
            10 => Event::Broad(index(w[1], c.conds)?),
            11 => Event::Sync { cond: index(w[1], c.conds)?, mutex: index(w[2], c.mutexes)? },
            12 => Event::Suspend(index(w[1], c.conds)?),
            13 => Event::Resume(index(w[1], c.conds)?),
            14 => Event::Yield,
            15 => Event::Fork(index(w[1], c.tasks)?),
            16 => Event::Take { pool: index(w[1], c.pools)?, us: us(w[2])? },
            17 => Event::Join,
            _ => return Err(FormatError::BadEvent),
        })
    }
}

/// Why an encoded program was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatError {
    /// Shorter than its header or than the length it states, longer than
    /// [`MAX_WORDS`](crate::limits::MAX_WORDS), or not whole words.
    Length,
    /// Not a program (the first word).
    Magic,
    /// A layout version this build does not read.
    Version,
    /// The checksum does not match: the program was damaged on its way.
    Checksum,
    /// A count past its limit (tasks, phases, events, resources, instances).
    TooMany,
    /// A task's or phase's record does not fit where the program says it is.
    Layout,
    /// An event kind this build does not know.
    BadEvent,
    /// An event names a resource or task the program does not have.
    BadIndex,
    /// A duration, loop count, nice value or mask out of its range.
    BadValue,
}

impl core::fmt::Display for FormatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            FormatError::Length => "bad length",
            FormatError::Magic => "not a workload program (magic)",
            FormatError::Version => "unknown layout version",
            FormatError::Checksum => "checksum mismatch",
            FormatError::TooMany => "a count past its limit",
            FormatError::Layout => "a record outside the program",
            FormatError::BadEvent => "an unknown event kind",
            FormatError::BadIndex => "an event names a resource or task that does not exist",
            FormatError::BadValue => "a value out of its range",
        })
    }
}

/// The resource counts events are checked against.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    tasks: u32,
    mutexes: u32,
    conds: u32,
    barriers: u32,
    timers: u32,
    per_thread_timers: u32,
    pools: u32,
}

/// FNV-1a over words, the program's checksum.
fn checksum(words: impl Iterator<Item = u32>) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for w in words {
        for b in w.to_le_bytes() {
            h ^= b as u32;
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// Recomputes an encoded program's checksum over its words as they are (a fuzzer's tool: a
/// damaged word behind a good checksum reaches the checks past it).
#[cfg(feature = "std")]
pub fn seal(words: &mut [u32]) {
    if words.len() > HEADER {
        words[3] = checksum(words[HEADER..].iter().copied());
    }
}

/// A validated program, read in place from its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Program<'a> {
    bytes: &'a [u8],
    counts: Counts,
}

impl<'a> Program<'a> {
    /// Checks every word of an encoded program (length, magic, version, checksum, every count
    /// against [`crate::limits`], every record's place, every event's kind, values and
    /// indices) and returns it. Nothing in a program that parses can make a reader index out
    /// of range.
    pub fn parse(bytes: &'a [u8]) -> Result<Program<'a>, FormatError> {
        if !bytes.len().is_multiple_of(4) || bytes.len() < HEADER * 4 || bytes.len() > MAX_WORDS * 4 {
            return Err(FormatError::Length);
        }
        let mut p = Program { bytes, counts: Counts::default() };
        if p.word(0) != MAGIC {
            return Err(FormatError::Magic);
        }
        if p.word(1) != VERSION {
            return Err(FormatError::Version);
        }
        let n = p.word(2) as usize;
        if n < HEADER || n * 4 > bytes.len() {
            return Err(FormatError::Length);
        }
        p.bytes = &bytes[..n * 4];
        if checksum((HEADER..n).map(|i| p.word(i))) != p.word(3) {
            return Err(FormatError::Checksum);
        }
        let c = Counts {
            tasks: p.word(7),
            mutexes: p.word(8),
            conds: p.word(9),
            barriers: p.word(10),
            timers: p.word(11),
            per_thread_timers: p.word(12),
            pools: p.word(13),
        };
        if c.tasks == 0 || c.tasks as usize > MAX_TASKS {
            return Err(FormatError::TooMany);
        }
        let resources = [c.mutexes, c.conds, c.barriers, c.timers, c.pools];
        if resources.iter().any(|&r| r as usize > MAX_RESOURCES)
            || c.per_thread_timers as usize > MAX_THREAD_TIMERS
        {
            return Err(FormatError::TooMany);
        }
        if p.duration_us() > MAX_DURATION_US || p.word(6) != 0 || (14..HEADER).any(|i| p.word(i) != 0) {
            return Err(FormatError::BadValue);
        }
        p.counts = c;
        let tables = HEADER + (c.barriers + c.tasks) as usize + c.pools as usize * POOL_WORDS;
        if tables > n {
            return Err(FormatError::Layout);
        }
        if (0..c.barriers as usize).any(|b| p.word(HEADER + b) < 2 || p.word(HEADER + b) > MAX_INSTANCES * 64)
        {
            return Err(FormatError::BadValue);
        }
        if p.pools().any(|(size, jitter)| size == 0 || jitter > MAX_JITTER_PCT)
            || p.pools().map(|(size, _)| u64::from(size)).sum::<u64>() > u64::from(MAX_POOL_EVENTS)
        {
            return Err(FormatError::BadValue);
        }
        // Tasks follow one another after the tables, the last ending the program.
        let mut at = tables;
        for t in 0..c.tasks as usize {
            if p.task_offset(t) != at {
                return Err(FormatError::Layout);
            }
            at = p.check_task(at, n)?;
        }
        if at != n {
            return Err(FormatError::Layout);
        }
        Ok(p)
    }

    /// Checks the task record at word `at` (the program has `n` words); returns where it ends.
    fn check_task(&self, at: usize, n: usize) -> Result<usize, FormatError> {
        if at + TASK_HEADER > n {
            return Err(FormatError::Layout);
        }
        let instances = self.word(at);
        let loops = self.word(at + 1) as i32;
        let nice = self.word(at + 5) as i32;
        let phases = self.word(at + 6) as usize;
        if instances > MAX_INSTANCES || phases == 0 || phases > MAX_PHASES {
            return Err(FormatError::TooMany);
        }
        let slice = self.word(at + 7);
        if !(-1..=MAX_LOOPS as i32).contains(&loops)
            || self.word(at + 2) > MAX_EVENT_US
            || !(-20..=19).contains(&nice)
            || !(slice == 0 || (MIN_SLICE_US..=MAX_SLICE_US).contains(&slice))
        {
            return Err(FormatError::BadValue);
        }
        let mut at = at + TASK_HEADER;
        for _ in 0..phases {
            if at + PHASE_HEADER > n {
                return Err(FormatError::Layout);
            }
            let (loops, events) = (self.word(at), self.word(at + 3) as usize);
            if loops > MAX_LOOPS {
                return Err(FormatError::BadValue);
            }
            if events == 0 || events > MAX_EVENTS {
                return Err(FormatError::TooMany);
            }
            let end = at + PHASE_HEADER + events * EVENT_WORDS;
            if end > n {
                return Err(FormatError::Layout);
            }
            for e in 0..events {
                let w = self.event_words(at + PHASE_HEADER + e * EVENT_WORDS);
                // Words its kind does not use must be 0: another encoder's meaning for them
                // would be ignored here.
                if Event::from_words(w, &self.counts)?.words() != w {
                    return Err(FormatError::BadValue);
                }
            }
            at = end;
        }
        Ok(at)
    }

    fn word(&self, i: usize) -> u32 {
        let b = &self.bytes[i * 4..i * 4 + 4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    fn event_words(&self, at: usize) -> [u32; EVENT_WORDS] {
        [self.word(at), self.word(at + 1), self.word(at + 2), self.word(at + 3)]
    }

    fn pools_at(&self) -> usize {
        HEADER + self.counts.barriers as usize
    }

    fn task_offset(&self, t: usize) -> usize {
        self.word(self.pools_at() + self.counts.pools as usize * POOL_WORDS + t) as usize
    }

    /// How long the workload runs (µs); 0: until every thread has finished its loops.
    pub fn duration_us(&self) -> u64 {
        self.word(4) as u64 | (self.word(5) as u64) << 32
    }

    /// Mutexes.
    pub fn mutexes(&self) -> usize {
        self.counts.mutexes as usize
    }

    /// Condition variables.
    pub fn conds(&self) -> usize {
        self.counts.conds as usize
    }

    /// Shared timers.
    pub fn timers(&self) -> usize {
        self.counts.timers as usize
    }

    /// Each thread's own timers.
    pub fn per_thread_timers(&self) -> usize {
        self.counts.per_thread_timers as usize
    }

    /// Barriers, each with its parties.
    pub fn barriers(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.counts.barriers as usize).map(|b| self.word(HEADER + b))
    }

    /// Event pools (`take`), each with its size and its jitter (%).
    pub fn pools(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let at = self.pools_at();
        (0..self.counts.pools as usize).map(move |i| (self.word(at + i * 2), self.word(at + i * 2 + 1)))
    }

    /// The task definitions, in file order.
    pub fn tasks(&self) -> impl Iterator<Item = TaskView<'a>> + '_ {
        (0..self.counts.tasks as usize).map(|t| TaskView { p: *self, at: self.task_offset(t) })
    }

    /// Task definition `t`.
    pub fn task(&self, t: usize) -> Option<TaskView<'a>> {
        (t < self.counts.tasks as usize).then(|| TaskView { p: *self, at: self.task_offset(t) })
    }

    /// The first CPU mask of a task or of one of its phases that names a CPU a machine of
    /// `cpus` CPUs lacks (a mask is a bit per CPU of the first 64; a task without one may use
    /// every CPU): that task, the mask and the first such CPU. rt-app refuses such a file
    /// ("Invalid cpu"), and so does every platform here.
    ///
    /// ```
    /// use sched_workload::rtapp;
    /// let file = r#"{"tasks": {"t": {"loop": 1, "cpus": [1, 3], "run": 10}}}"#;
    /// let bytes = rtapp::lower(file).unwrap().to_bytes();
    /// let prog = sched_workload::Program::parse(&bytes).unwrap();
    /// assert!(prog.mask_past_cpus(4).is_none());
    /// let (task, mask, cpu) = prog.mask_past_cpus(2).unwrap();
    /// assert_eq!((task.name(), mask, cpu), ("t", 0b1010, 3));
    /// ```
    pub fn mask_past_cpus(&self, cpus: usize) -> Option<(TaskView<'a>, u64, u32)> {
        let machine = if cpus >= 64 { u64::MAX } else { (1u64 << cpus) - 1 };
        self.tasks().find_map(|t| {
            let masks = t.cpus().into_iter().chain(t.phases().filter_map(|p| p.cpus()));
            masks.into_iter().find(|m| m & !machine != 0).map(|m| (t, m, (m & !machine).trailing_zeros()))
        })
    }

    /// Threads started at the beginning: every task's instances (forks add more).
    pub fn threads(&self) -> u32 {
        self.tasks().map(|t| t.instances()).sum()
    }

    /// How many threads of task `task` a whole run has: its instances and every `fork` of it,
    /// counted as if each forking thread ran all its loops. `None`: no bound (a task that
    /// loops forever forks it, or forks fork their own forker), or no such task.
    ///
    /// ```
    /// use sched_workload::rtapp;
    /// let file = r#"{"global": {"calibration": 100}, "tasks": {
    ///     "main": {"loop": 1, "phases": {"p": {"loop": 4, "run": 10, "fork": "worker"}}},
    ///     "worker": {"instance": 1, "loop": 1, "run": 100}}}"#;
    /// let bytes = rtapp::lower(file).unwrap().to_bytes();
    /// let prog = sched_workload::Program::parse(&bytes).unwrap();
    /// assert_eq!(prog.threads_of(1), Some(5));
    /// ```
    pub fn threads_of(&self, task: usize) -> Option<u64> {
        self.thread_totals().get(task).copied().flatten()
    }

    /// How many threads a whole run has, forks included ([`Program::threads_of`]); `None`:
    /// forks without bound.
    pub fn total_threads(&self) -> Option<u64> {
        let totals = self.thread_totals();
        totals[..self.counts.tasks as usize].iter().try_fold(0u64, |n, t| Some(n.saturating_add((*t)?)))
    }

    /// The threads a run has at most: [`Program::total_threads`], or those started with it
    /// when forks have no bound (a fork past a platform's table then starts no thread).
    pub fn thread_bound(&self) -> u64 {
        self.total_threads().unwrap_or(u64::from(self.threads()))
    }

    /// The run's workers, whose spread a platform measures: every thread of the tasks that
    /// take events from a pool ([`TaskView::takes`]); with such threads forked without bound,
    /// `u32::MAX` (more than any machine's CPUs, so the one-per-CPU instant is the spread's).
    pub fn workers(&self) -> u32 {
        let totals = self.thread_totals();
        let n = self
            .tasks()
            .enumerate()
            .filter(|(_, t)| t.takes())
            .try_fold(0u64, |n, (i, _)| Some(n.saturating_add(totals[i]?)));
        n.map_or(u32::MAX, |n| n.min(u64::from(u32::MAX)) as u32)
    }

    /// [`Program::threads_of`] of every task at once (`None` past the last): counting reads
    /// the whole program, so a caller that wants every task's count asks once.
    pub fn thread_totals(&self) -> [Option<u64>; MAX_TASKS] {
        let n = self.counts.tasks as usize;
        // A task's count is settled once every task forking it is: each round settles at
        // least one task of a chain of forks, so a round that settles none is the last; a task
        // on a cycle, or forked without bound, never settles.
        let mut total: [Option<u64>; MAX_TASKS] = [None; MAX_TASKS];
        loop {
            let mut progress = false;
            for t in 0..n {
                if total[t].is_some() {
                    continue;
                }
                let mut sum = self.task(t).map_or(0, |v| u64::from(v.instances()));
                let mut settled = true;
                for (f, forker) in total.iter().enumerate().take(n) {
                    match (self.forks_per_thread(f, t), *forker) {
                        (Some(0), _) => {}
                        (Some(k), Some(threads)) => sum = sum.saturating_add(k.saturating_mul(threads)),
                        _ => settled = false,
                    }
                }
                if settled {
                    total[t] = Some(sum);
                    progress = true;
                }
            }
            if !progress {
                return total;
            }
        }
    }

    /// How many threads of task `child` each thread of task `parent` forks over all its loops
    /// (`None`: without bound).
    fn forks_per_thread(&self, parent: usize, child: usize) -> Option<u64> {
        let p = self.task(parent)?;
        if p.loops() == Some(0) {
            return Some(0);
        }
        let mut per_loop = 0u64;
        for ph in p.phases() {
            let forks = ph.events().filter(|e| *e == Event::Fork(child as u16)).count() as u64;
            match ph.loops() {
                Some(n) => per_loop += forks * u64::from(n),
                // A phase that runs until the end: it forks without bound, or not at all, and
                // the thread reaches no phase after it, nor its loop's end.
                None if forks > 0 => return None,
                None => return Some(per_loop),
            }
        }
        match p.loops() {
            _ if per_loop == 0 => Some(0),
            Some(loops) => Some(per_loop * u64::from(loops)),
            None => None,
        }
    }
}

/// One task definition of a parsed [`Program`].
#[derive(Debug, Clone, Copy)]
pub struct TaskView<'a> {
    p: Program<'a>,
    at: usize,
}

impl<'a> TaskView<'a> {
    /// Threads started with the workload (0: a template only `fork` starts).
    pub fn instances(&self) -> u32 {
        self.p.word(self.at)
    }

    /// How many times its phases run in turn (`None`: until the workload's duration ends; 0:
    /// none, its threads end as they start).
    pub fn loops(&self) -> Option<u32> {
        match self.p.word(self.at + 1) as i32 {
            -1 => None,
            n => Some(n as u32),
        }
    }

    /// Start delay after the workload's start (µs).
    pub fn delay_us(&self) -> u32 {
        self.p.word(self.at + 2)
    }

    /// Allowed CPUs, a bit per CPU of the first 64; `None`: every CPU of the machine, however
    /// many it has (a list of all of CPUs 0 to 63 is not that on a larger machine).
    pub fn cpus(&self) -> Option<u64> {
        match self.p.word(self.at + 3) as u64 | (self.p.word(self.at + 4) as u64) << 32 {
            0 => None,
            m => Some(m),
        }
    }

    /// Its nice value.
    pub fn nice(&self) -> i32 {
        self.p.word(self.at + 5) as i32
    }

    /// Whether its threads take events from a pool (`take`): they are a run's workers.
    pub fn takes(&self) -> bool {
        self.phases().any(|ph| ph.events().any(|e| matches!(e, Event::Take { .. })))
    }

    /// The EEVDF slice its threads ask for (µs; 0: the machine's default).
    pub fn slice_us(&self) -> u32 {
        self.p.word(self.at + 7)
    }

    /// Its name, as rt-app's file gives it ([`NAME_BYTES`] at most: the lowering refuses a
    /// longer one; a program built otherwise has it cut at a character boundary).
    pub fn name(&self) -> &'a str {
        let start = (self.at + 8) * 4;
        let raw = &self.p.bytes[start..start + NAME_BYTES];
        let len = raw.iter().position(|&b| b == 0).unwrap_or(NAME_BYTES);
        match core::str::from_utf8(&raw[..len]) {
            Ok(s) => s,
            Err(e) => core::str::from_utf8(&raw[..e.valid_up_to()]).unwrap_or(""),
        }
    }

    /// Its phases, in order.
    pub fn phases(&self) -> impl Iterator<Item = PhaseView<'a>> + '_ {
        let n = self.p.word(self.at + 6) as usize;
        let mut at = self.at + TASK_HEADER;
        (0..n).map(move |_| {
            let ph = PhaseView { p: self.p, at };
            at += PHASE_HEADER + ph.len() * EVENT_WORDS;
            ph
        })
    }

    /// Phase `i`.
    pub fn phase(&self, i: usize) -> Option<PhaseView<'a>> {
        self.phases().nth(i)
    }

    /// How many phases it has.
    pub fn nr_phases(&self) -> usize {
        self.p.word(self.at + 6) as usize
    }
}

/// One phase of a task.
#[derive(Debug, Clone, Copy)]
pub struct PhaseView<'a> {
    p: Program<'a>,
    at: usize,
}

impl PhaseView<'_> {
    /// How many times its events run in turn (`None`: until the workload's duration ends).
    pub fn loops(&self) -> Option<u32> {
        match self.p.word(self.at) {
            PHASE_FOREVER => None,
            n => Some(n),
        }
    }

    /// Allowed CPUs in this phase (`None`: the task's).
    pub fn cpus(&self) -> Option<u64> {
        match self.p.word(self.at + 1) as u64 | (self.p.word(self.at + 2) as u64) << 32 {
            0 => None,
            m => Some(m),
        }
    }

    /// How many events it has.
    pub fn len(&self) -> usize {
        self.p.word(self.at + 3) as usize
    }

    /// Whether it has no events (never, in a parsed program).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Event `i` (`None` past the end).
    pub fn event(&self, i: usize) -> Option<Event> {
        if i >= self.len() {
            return None;
        }
        // Checked when the program was parsed.
        Event::from_words(self.p.event_words(self.at + PHASE_HEADER + i * EVENT_WORDS), &self.p.counts).ok()
    }

    /// Its events, in order.
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        (0..self.len()).filter_map(|i| self.event(i))
    }
}

/// A program as the host builds it, before it is encoded.
#[cfg(feature = "std")]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProgramDef {
    /// `duration` (µs); 0: until every thread has finished.
    pub duration_us: u64,
    /// Mutexes, by number (their names, for reports).
    pub mutexes: Vec<String>,
    /// Condition variables, by number.
    pub conds: Vec<String>,
    /// Barriers, by number: name and parties.
    pub barriers: Vec<(String, u32)>,
    /// Shared timers, by number.
    pub timers: Vec<String>,
    /// Per-thread timers (`unique…` refs): the most one task has. Each task numbers its own
    /// from 0, and each of its threads has a timer of every number.
    pub per_thread_timers: u32,
    /// Event pools, by number.
    pub pools: Vec<PoolDef>,
    /// The tasks, in file order.
    pub tasks: Vec<TaskDef>,
}

/// One event pool as the host builds it.
#[cfg(feature = "std")]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolDef {
    /// Its name in the file (the `take` events' `ref`).
    pub name: String,
    /// Events it holds.
    pub size: u32,
    /// How far each event's work varies either way (%), where the platform models it.
    pub jitter_pct: u32,
}

/// One task as the host builds it.
#[cfg(feature = "std")]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskDef {
    /// Its name in the file.
    pub name: String,
    /// Threads started with the workload.
    pub instances: u32,
    /// Loops over its phases; -1: until the workload's duration ends; 0: none (its threads
    /// end as they start).
    pub loops: i32,
    /// Start delay (µs).
    pub delay_us: u32,
    /// Allowed CPUs (0: every CPU).
    pub cpus: u64,
    /// Nice value.
    pub nice: i32,
    /// The EEVDF slice its threads ask for (µs; 0: the default).
    pub slice_us: u32,
    /// Its phases.
    pub phases: Vec<PhaseDef>,
}

/// One phase as the host builds it.
#[cfg(feature = "std")]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PhaseDef {
    /// Its name in the file.
    pub name: String,
    /// Loops over its events; [`PHASE_FOREVER`]: until the workload's duration ends (the
    /// phases after it are never reached).
    pub loops: u32,
    /// Allowed CPUs (0: the task's).
    pub cpus: u64,
    /// Its events.
    pub events: Vec<Event>,
}

#[cfg(feature = "std")]
impl ProgramDef {
    /// The program's words (to be stored little-endian).
    pub fn encode(&self) -> Vec<u32> {
        let mut w = vec![0u32; HEADER];
        w[0] = MAGIC;
        w[1] = VERSION;
        w[4] = self.duration_us as u32;
        w[5] = (self.duration_us >> 32) as u32;
        w[7] = self.tasks.len() as u32;
        w[8] = self.mutexes.len() as u32;
        w[9] = self.conds.len() as u32;
        w[10] = self.barriers.len() as u32;
        w[11] = self.timers.len() as u32;
        w[12] = self.per_thread_timers;
        w[13] = self.pools.len() as u32;
        w.extend(self.barriers.iter().map(|(_, parties)| *parties));
        w.extend(self.pools.iter().flat_map(|p| [p.size, p.jitter_pct]));
        let offsets = w.len();
        w.extend(std::iter::repeat_n(0, self.tasks.len()));
        for (i, t) in self.tasks.iter().enumerate() {
            w[offsets + i] = w.len() as u32;
            w.extend([t.instances, t.loops as u32, t.delay_us, t.cpus as u32, (t.cpus >> 32) as u32]);
            w.extend([t.nice as u32, t.phases.len() as u32, t.slice_us]);
            let mut name = [0u8; NAME_BYTES];
            let mut len = t.name.len().min(NAME_BYTES);
            while !t.name.is_char_boundary(len) {
                len -= 1;
            }
            name[..len].copy_from_slice(&t.name.as_bytes()[..len]);
            w.extend(name.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
            for ph in &t.phases {
                w.extend([ph.loops, ph.cpus as u32, (ph.cpus >> 32) as u32, ph.events.len() as u32]);
                w.extend(ph.events.iter().flat_map(|e| e.words()));
            }
        }
        w[2] = w.len() as u32;
        w[3] = checksum(w[HEADER..].iter().copied());
        w
    }

    /// The encoded program as bytes, as the kernel receives it.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode().iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ProgramDef {
        ProgramDef {
            duration_us: 2_000_000,
            mutexes: vec!["m".into()],
            conds: vec!["c".into()],
            barriers: vec![("b".into(), 2)],
            timers: vec![],
            per_thread_timers: 1,
            pools: vec![PoolDef { name: "events".into(), size: 10, jitter_pct: 2 }],
            tasks: vec![
                TaskDef {
                    name: "ping".into(),
                    instances: 1,
                    loops: -1,
                    delay_us: 0,
                    cpus: 0b11,
                    nice: -5,
                    slice_us: 500,
                    phases: vec![PhaseDef {
                        name: "p".into(),
                        loops: 3,
                        cpus: 0,
                        events: vec![
                            Event::Lock(0),
                            Event::Sync { cond: 0, mutex: 0 },
                            Event::Unlock(0),
                            Event::Run { us: 20 },
                        ],
                    }],
                },
                TaskDef {
                    name: format!("{}é-long", "a".repeat(63)),
                    instances: 2,
                    loops: 10,
                    delay_us: 500,
                    cpus: 0,
                    nice: 0,
                    slice_us: 0,
                    phases: vec![PhaseDef {
                        name: "p".into(),
                        loops: 1,
                        cpus: 1 << 40,
                        events: vec![
                            Event::Run { us: 1000 },
                            Event::Timer { timer: Timer::PerThread(0), period_us: 10_000, absolute: true },
                            Event::Barrier(0),
                            Event::Fork(0),
                            Event::Take { pool: 0, us: 5 },
                            Event::Join,
                        ],
                    }],
                },
            ],
        }
    }

    /// Every field survives the round trip through the encoding.
    #[test]
    fn a_program_reads_back_as_it_was_built() {
        let def = sample();
        let bytes = def.to_bytes();
        let p = Program::parse(&bytes).unwrap();
        assert_eq!((p.duration_us(), p.mutexes(), p.conds()), (2_000_000, 1, 1));
        assert_eq!((p.timers(), p.per_thread_timers(), p.barriers().collect::<Vec<_>>()), (0, 1, vec![2]));
        assert_eq!(p.pools().collect::<Vec<_>>(), [(10, 2)]);
        assert_eq!(p.threads(), 3);
        let tasks: Vec<_> = p.tasks().collect();
        assert_eq!(tasks.len(), 2);
        for (view, t) in tasks.iter().zip(&def.tasks) {
            assert_eq!(view.instances(), t.instances);
            assert_eq!(view.loops(), (t.loops >= 0).then_some(t.loops as u32));
            assert_eq!(
                (view.delay_us(), view.nice(), view.nr_phases(), view.slice_us()),
                (t.delay_us, t.nice, t.phases.len(), t.slice_us)
            );
            assert_eq!(view.cpus(), (t.cpus != 0).then_some(t.cpus));
            for (ph, d) in view.phases().zip(&t.phases) {
                assert_eq!(
                    (ph.loops(), ph.cpus()),
                    ((d.loops != PHASE_FOREVER).then_some(d.loops), (d.cpus != 0).then_some(d.cpus))
                );
                assert_eq!(ph.events().collect::<Vec<_>>(), d.events);
            }
        }
        assert_eq!(tasks[0].name(), "ping");
        assert_eq!(tasks[1].name(), "a".repeat(63), "cut at 64 bytes, on a character boundary");
    }

    /// Damage anywhere is refused with its reason, never a panic.
    #[test]
    fn damaged_programs_are_refused() {
        let bytes = sample().to_bytes();
        assert_eq!(Program::parse(&bytes[..bytes.len() - 1]).unwrap_err(), FormatError::Length);
        assert_eq!(Program::parse(&bytes[..40]).unwrap_err(), FormatError::Length);
        assert_eq!(Program::parse(&[]).unwrap_err(), FormatError::Length);
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert_eq!(Program::parse(&bad).unwrap_err(), FormatError::Magic);
        let mut bad = bytes.clone();
        *bad.last_mut().unwrap() ^= 0x10;
        assert_eq!(Program::parse(&bad).unwrap_err(), FormatError::Checksum);
        // A well-formed checksum over bad content: each reason in turn.
        let refuse = |edit: &dyn Fn(&mut ProgramDef)| {
            let mut d = sample();
            edit(&mut d);
            Program::parse(&d.to_bytes()).unwrap_err()
        };
        assert_eq!(refuse(&|d| d.tasks[0].phases[0].events[0] = Event::Lock(7)), FormatError::BadIndex);
        assert_eq!(
            refuse(&|d| d.tasks[0].phases[0].events[3] = Event::Run { us: u32::MAX }),
            FormatError::BadValue
        );
        assert_eq!(refuse(&|d| d.tasks[1].phases[0].events[3] = Event::Fork(2)), FormatError::BadIndex);
        assert_eq!(refuse(&|d| d.tasks[0].nice = 20), FormatError::BadValue);
        assert_eq!(refuse(&|d| d.tasks[0].slice_us = MIN_SLICE_US - 1), FormatError::BadValue);
        assert_eq!(refuse(&|d| d.tasks[0].slice_us = MAX_SLICE_US + 1), FormatError::BadValue);
        assert_eq!(refuse(&|d| d.tasks[0].loops = -2), FormatError::BadValue);
        assert_eq!(refuse(&|d| d.tasks[0].phases[0].loops = MAX_LOOPS + 1), FormatError::BadValue);
        assert_eq!(refuse(&|d| d.tasks[0].phases.clear()), FormatError::TooMany);
        assert_eq!(refuse(&|d| d.tasks[0].phases[0].events.clear()), FormatError::TooMany);
        assert_eq!(refuse(&|d| d.barriers[0].1 = 1), FormatError::BadValue);
        assert_eq!(refuse(&|d| d.pools[0].size = 0), FormatError::BadValue);
        assert_eq!(refuse(&|d| d.pools[0].jitter_pct = MAX_JITTER_PCT + 1), FormatError::BadValue);
        assert_eq!(refuse(&|d| d.pools.clear()), FormatError::BadIndex);
        assert_eq!(refuse(&|d| d.tasks.clear()), FormatError::TooMany);
        // A word an event's kind does not use, set (behind a good checksum).
        let mut words: Vec<u32> =
            bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        let run = words.windows(4).position(|w| w == [1, 20, 0, 0]).expect("the Run of 20 µs");
        words[run + 3] = 7;
        seal(&mut words);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(Program::parse(&bytes).unwrap_err(), FormatError::BadValue);
    }

    proptest::proptest! {
        /// Any bytes at all, and any single damaged word of a real program, parse or are
        /// refused; a program that parses reads back without a panic.
        #[test]
        fn any_bytes_parse_or_are_refused(
            noise in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
            at in 0usize..400,
            word in proptest::num::u32::ANY,
        ) {
            let read = |p: Program<'_>| {
                for t in p.tasks() {
                    let _ = (t.name(), t.cpus(), t.loops());
                    for ph in t.phases() {
                        let _ = ph.events().count();
                    }
                }
            };
            if let Ok(p) = Program::parse(&noise) {
                read(p);
            }
            let mut words = sample().encode();
            let i = at % words.len();
            words[i] = word;
            // Re-sealed, so the damage reaches the checks behind the checksum.
            words[3] = checksum(words[HEADER..].iter().copied());
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            if let Ok(p) = Program::parse(&bytes) {
                read(p);
            }
        }
    }
}
