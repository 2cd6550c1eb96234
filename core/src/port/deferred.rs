//! Callbacks delivered after the locks drop.
//!
//! The machine ([`crate::Smp`]) asks its platform for a reschedule, a stopper or a nohz kick,
//! and reports events, at the moment it decides them, with runqueue or balance locks held.
//! A callback that called the scheduler from there could spin on a lock its own CPU holds.
//! [`Deferred`] is the platform the porter's [`super::Scheduler`] gives the machine: while
//! locked it only records what the port must be told — a bit per CPU for each request, and
//! the events in a bounded queue — and the `Scheduler` hands that to the port's platform at
//! the end of the call, with no lock held (as Linux queues wakeups and IPIs under the
//! runqueue lock and sends them after it is released). The clock is the one callback made
//! at once: it answers a question, and runs with no lock held (a newly-idle pass lets go of
//! its CPU's balance state around each reading).
//!
//! Who delivers: each call, on its way out, delivers its own CPU's requests, those of every
//! CPU that is not inside a call, and the queued events. A CPU inside a call is left its
//! requests and takes them itself when it leaves (so a request for a CPU on its way out of an
//! interrupt is a flag it reads, not an interrupt from another CPU); the inside flag and the
//! request bits are sequentially consistent, so a request posted as that CPU leaves is seen
//! by one of the two sides and delivered once.
//!
//! The event queue's lock is a leaf: taken last, with or without the machine's locks, and
//! nothing is called or locked while it is held. It relaxes as the machine's locks do (`R`):
//! a CPU that waits for it hands its host CPU on.

use portable_atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use spin::mutex::Mutex;
use spin::{RelaxStrategy, Spin};

use crate::platform::{Event, Platform};

/// A reschedule request for the CPU.
const RESCHED: u8 = 1;
/// A request to run the CPU's active-balance stopper.
const STOPPER: u8 = 2;
/// A nohz kick of the CPU.
const KICK: u8 = 4;

/// The port's platform behind a recorder of the machine's requests and events (see the
/// module documentation). `CPUS` bounds the CPUs named; `EVENTS` is how many events wait
/// between two deliveries before more are counted lost ([`super::Scheduler::events_lost`]).
pub struct Deferred<P, const CPUS: usize, const EVENTS: usize, R = Spin> {
    inner: P,
    notices: [AtomicU8; CPUS],
    /// Some CPU's notice bits may be set (set after the bits, cleared before a scan).
    pending: AtomicBool,
    events: Mutex<heapless::Deque<Event, EVENTS>, R>,
    /// Events may be queued (set after a push, cleared before the queue is drained).
    queued: AtomicBool,
    lost: AtomicU32,
}

impl<P: Platform, const CPUS: usize, const EVENTS: usize, R: RelaxStrategy> Deferred<P, CPUS, EVENTS, R> {
    pub(crate) const fn new(inner: P) -> Self {
        Deferred {
            inner,
            notices: [const { AtomicU8::new(0) }; CPUS],
            pending: AtomicBool::new(false),
            events: Mutex::new(heapless::Deque::new()),
            queued: AtomicBool::new(false),
            lost: AtomicU32::new(0),
        }
    }

    pub(crate) fn inner(&self) -> &P {
        &self.inner
    }

    /// Events that found the queue full since the machine was built.
    pub(crate) fn events_lost(&self) -> u32 {
        self.lost.load(Ordering::Relaxed)
    }

    fn post(&self, cpu: usize, bit: u8) {
        if let Some(n) = self.notices.get(cpu) {
            n.fetch_or(bit, Ordering::SeqCst);
            self.pending.store(true, Ordering::SeqCst);
        }
    }

    /// Hands the port what is recorded, at the end of a call on `me` with no lock of the
    /// machine held (`me` still counts as inside it): `me`'s own requests, the requests for
    /// every CPU that is not inside a call (`inside` tells), then every queued event.
    ///
    /// A CPU inside a call is left its requests: it takes them itself on its way out
    /// ([`Deferred::deliver_requests`] after it clears its inside flag), where a reschedule is a flag its exit path reads rather
    /// than an interrupt from another CPU.
    pub(crate) fn deliver(&self, me: usize, inside: impl Fn(usize) -> bool) -> bool {
        let own = self.deliver_requests(me);
        // (Loads first: a call with nothing to hand over writes no shared line.)
        if self.pending.load(Ordering::SeqCst) && self.pending.swap(false, Ordering::SeqCst) {
            let mut left = false;
            for cpu in (0..CPUS).filter(|&c| c != me) {
                if self.notices[cpu].load(Ordering::Relaxed) == 0 {
                    continue;
                }
                if inside(cpu) {
                    left = true;
                } else {
                    self.deliver_requests(cpu);
                }
            }
            if left {
                self.pending.store(true, Ordering::SeqCst);
            }
        }
        if self.queued.load(Ordering::Acquire) && self.queued.swap(false, Ordering::AcqRel) {
            // One event at a time: the queue's lock is never held while the port runs.
            loop {
                // (A `while let` would keep the guard, a temporary, across the callback.)
                let next = self.events.lock().pop_front();
                let Some(e) = next else { break };
                self.inner.event(&e);
            }
        }
        own
    }

    /// Takes and delivers `cpu`'s request bits (whoever swaps them out delivers them);
    /// whether there were any.
    pub(crate) fn deliver_requests(&self, cpu: usize) -> bool {
        let Some(n) = self.notices.get(cpu) else { return false };
        // (A load first: a CPU with nothing posted leaves the line shared.)
        if n.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let bits = n.swap(0, Ordering::SeqCst);
        if bits & RESCHED != 0 {
            self.inner.resched_cpu(cpu);
        }
        if bits & STOPPER != 0 {
            self.inner.run_stopper(cpu);
        }
        if bits & KICK != 0 {
            self.inner.kick_nohz(cpu);
        }
        bits != 0
    }
}

impl<P: Platform, const CPUS: usize, const EVENTS: usize, R: RelaxStrategy> Platform
    for Deferred<P, CPUS, EVENTS, R>
{
    type Payload = P::Payload;

    fn resched_cpu(&self, cpu: usize) {
        self.post(cpu, RESCHED);
    }

    fn run_stopper(&self, cpu: usize) {
        self.post(cpu, STOPPER);
    }

    fn kick_nohz(&self, cpu: usize) {
        self.post(cpu, KICK);
    }

    fn clock_ns(&self) -> Option<u64> {
        self.inner.clock_ns()
    }

    fn event(&self, event: &Event) {
        if self.events.lock().push_back(*event).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        self.queued.store(true, Ordering::Release);
    }
}
