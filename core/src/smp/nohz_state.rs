//! The tickless idle CPUs' shared bookkeeping (Linux's `struct nohz`, with the per-CPU kick
//! flags and per-LLC busy counts): data only; the balancing that reads it is `nohz.rs`.

use portable_atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// Kick for a full balance on behalf of the idle CPUs.
pub const NOHZ_BALANCE_KICK: u8 = 1;
/// Kick to refresh the idle CPUs' blocked load only.
pub const NOHZ_STATS_KICK: u8 = 2;
pub(super) const NOHZ_KICK_MASK: u8 = NOHZ_BALANCE_KICK | NOHZ_STATS_KICK;

/// Whether tickless idle is built in (the `nohz` feature). Without it no CPU can become
/// tickless, so the nohz paths would find nothing to do; testing this constant first lets
/// the compiler leave them out.
pub(super) const NOHZ: bool = cfg!(feature = "nohz");

/// Shared nohz state (`struct nohz`, plus the per-CPU kick flags and per-LLC busy counts).
pub struct Nohz<const CPUS: usize> {
    pub(super) idle: [AtomicBool; CPUS],
    pub(super) nr_tickless: AtomicU32,
    /// Jiffy at which some tickless CPU is next due to balance.
    pub(super) next_balance: AtomicU64,
    pub(super) has_blocked: AtomicBool,
    pub(super) next_blocked: AtomicU64,
    pub(super) flags: [AtomicU8; CPUS],
    /// Per LLC (indexed by its first CPU): CPUs not in tickless idle.
    pub(super) nr_busy: [AtomicU32; CPUS],
    /// The CPU left its LLC's busy count (it entered tickless idle). Kept inverted so a new
    /// machine is all zeros.
    pub(super) not_busy: [AtomicBool; CPUS],
    pub(super) initialised: AtomicBool,
}

impl<const CPUS: usize> Nohz<CPUS> {
    /// Nobody tickless.
    pub const fn new() -> Self {
        Nohz {
            idle: [const { AtomicBool::new(false) }; CPUS],
            nr_tickless: AtomicU32::new(0),
            next_balance: AtomicU64::new(0),
            has_blocked: AtomicBool::new(false),
            next_blocked: AtomicU64::new(0),
            flags: [const { AtomicU8::new(0) }; CPUS],
            nr_busy: [const { AtomicU32::new(0) }; CPUS],
            not_busy: [const { AtomicBool::new(false) }; CPUS],
            initialised: AtomicBool::new(false),
        }
    }

    /// Nobody tickless again, as [`Nohz::new`] (a machine set up anew: its CPUs and LLCs are
    /// new).
    pub(super) fn reset(&self) {
        for cpu in 0..CPUS {
            self.idle[cpu].store(false, Relaxed);
            self.flags[cpu].store(0, Relaxed);
            self.nr_busy[cpu].store(0, Relaxed);
            self.not_busy[cpu].store(false, Relaxed);
        }
        self.nr_tickless.store(0, Relaxed);
        self.next_balance.store(0, Relaxed);
        self.has_blocked.store(false, Relaxed);
        self.next_blocked.store(0, Relaxed);
        self.initialised.store(false, Relaxed);
    }

    /// Whether `cpu` is in tickless idle.
    pub fn is_tickless(&self, cpu: usize) -> bool {
        self.idle.get(cpu).is_some_and(|b| b.load(Relaxed))
    }

    internal! {
        /// Number of CPUs in tickless idle.
        pub fn nr_tickless(&self) -> u32 {
            self.nr_tickless.load(Relaxed)
        }
    }

    internal! {
        /// Pending kick flags of `cpu`.
        pub fn kick_flags(&self, cpu: usize) -> u8 {
            self.flags.get(cpu).map_or(0, |f| f.load(Relaxed))
        }
    }
}

impl<const CPUS: usize> Default for Nohz<CPUS> {
    fn default() -> Self {
        Self::new()
    }
}
