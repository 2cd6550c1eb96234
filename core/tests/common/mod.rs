//! A deterministic one-CPU driver for the integration tests.
#![allow(dead_code)]

use std::cell::RefCell;

use sched_core::{Event, EventKind, Features, Platform, Scheduler, TaskId, TaskParams, Tunables};

/// Records events and resched requests.
#[derive(Default)]
pub struct Recorder {
    pub events: RefCell<Vec<Event>>,
    pub resched: RefCell<u64>,
}

impl Platform for Recorder {
    fn resched_cpu(&self, _cpu: u32) {
        *self.resched.borrow_mut() += 1;
    }
    fn event(&self, event: &Event) {
        self.events.borrow_mut().push(*event);
    }
}

pub type Sched = Scheduler<Recorder, 64, 64>;

pub const MS: u64 = 1_000_000;

/// A CPU whose tasks all spin: every tick charges the current task, and a requested
/// reschedule is honoured at once.
pub struct Driver {
    pub s: Box<Sched>,
    pub now: u64,
    pub tick: u64,
}

impl Driver {
    pub fn new(cpus_for_tunables: usize, tick: u64) -> Driver {
        Driver::with(Tunables::for_cpus(cpus_for_tunables), Features::default(), tick)
    }

    pub fn with(t: Tunables, f: Features, tick: u64) -> Driver {
        Driver { s: Box::new(Scheduler::new(Recorder::default(), 1024, t, f)), now: 0, tick }
    }

    pub fn spawn(&mut self, nice: i32) -> TaskId {
        let id = self.s.create(self.now, TaskParams { nice, ..TaskParams::default() }).unwrap();
        self.resched_if_needed();
        id
    }

    pub fn resched_if_needed(&mut self) {
        if self.s.need_resched() || self.s.current().is_none() {
            self.s.schedule(self.now);
        }
    }

    /// Runs `duration` of ticks.
    pub fn run(&mut self, duration: u64) {
        let end = self.now + duration;
        while self.now < end {
            self.now += self.tick;
            self.s.tick(self.now);
            self.resched_if_needed();
        }
    }

    /// Runs `step` at a time until `id` is the current task; panics if it is not picked
    /// within `max`, so a task that is never scheduled fails the test instead of hanging.
    pub fn run_until_current(&mut self, id: TaskId, step: u64, max: u64) {
        let start = self.now;
        while self.s.current() != Some(id) {
            assert!(
                self.now - start < max,
                "{id:?} not picked within {max} ns (from {start} to {}; current {:?})",
                self.now,
                self.s.current()
            );
            self.run(step);
        }
    }

    pub fn runtime(&self, id: TaskId) -> u64 {
        self.s.entity(id).unwrap().sum_exec_runtime
    }

    /// (time, next) of every context switch so far.
    pub fn switches(&self) -> Vec<(u64, Option<TaskId>)> {
        self.s
            .platform()
            .events
            .borrow()
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Switch { next, .. } => Some((e.time, next)),
                _ => None,
            })
            .collect()
    }
}
