//! Which boot-line keys each scenario reads. The machine's keys (`hz`, `nohz`, `features`,
//! `clusters`, `capacity`, `skew`, `idle_yield`, `slice_us`, `entry_race`, `watchdog`,
//! `trace`) every scenario reads; the keys below only the scenarios that name them. A key the
//! chosen scenario would not read is refused, as an unknown one is: a line that asks for
//! something either gets it or is told why not.

bitflags::bitflags! {
    /// A set of scenario keys (one flag per key of that name).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) struct Keys: u32 {
        /// `threads=`.
        const THREADS = 1 << 0;
        /// `events=`.
        const EVENTS = 1 << 1;
        /// `maxprime=`.
        const MAXPRIME = 1 << 2;
        /// `seed=`.
        const SEED = 1 << 3;
        /// `setup_us=`.
        const SETUP_US = 1 << 4;
        /// `create_us=`.
        const CREATE_US = 1 << 5;
        /// `barrier=`.
        const BARRIER = 1 << 6;
        /// `nice=`.
        const NICE = 1 << 7;
        /// `pairs=`.
        const PAIRS = 1 << 8;
        /// `rounds=`.
        const ROUNDS = 1 << 9;
        /// `ops=`.
        const OPS = 1 << 10;
        /// `cpu=`.
        const CPU = 1 << 11;
        /// `fault=`.
        const FAULT = 1 << 12;
        /// `spinners=`.
        const SPINNERS = 1 << 13;
        /// `periodic=`.
        const PERIODIC = 1 << 14;
        /// `run_us=`.
        const RUN_US = 1 << 15;
        /// `sleep_us=`.
        const SLEEP_US = 1 << 16;
        /// `short_slice_us=`.
        const SHORT_SLICE_US = 1 << 17;
        /// `duration_ms=`.
        const DURATION_MS = 1 << 18;
        /// `policy=`.
        const POLICY = 1 << 19;

        /// What every worker of the sysbench family reads.
        const WORKERS = Self::EVENTS.bits() | Self::MAXPRIME.bits() | Self::SEED.bits() | Self::SETUP_US.bits();
    }
}

/// Every scenario by its boot-line name, with the keys it reads beside the machine's.
pub(super) const SCENARIOS: [(&str, Keys); 14] = [
    ("boot", Keys::empty()),
    ("sysbench", Keys::THREADS.union(Keys::WORKERS).union(Keys::CREATE_US).union(Keys::BARRIER)),
    ("pingpong", Keys::PAIRS.union(Keys::ROUNDS)),
    ("panic", Keys::CPU),
    ("fault", Keys::FAULT.union(Keys::CPU)),
    // Its workers start without a barrier: their wakeups would spread them.
    ("wakeone", Keys::THREADS.union(Keys::WORKERS)),
    // Its thread counts are fixed.
    ("affinity", Keys::WORKERS.union(Keys::BARRIER)),
    ("nice", Keys::THREADS.union(Keys::NICE).union(Keys::WORKERS).union(Keys::BARRIER)),
    ("churn", Keys::OPS.union(Keys::SEED)),
    ("hang", Keys::CPU),
    ("corecalls", Keys::ROUNDS),
    (
        "latency",
        Keys::SPINNERS
            .union(Keys::PERIODIC)
            .union(Keys::RUN_US)
            .union(Keys::SLEEP_US)
            .union(Keys::SHORT_SLICE_US)
            .union(Keys::DURATION_MS)
            .union(Keys::POLICY),
    ),
    ("program", Keys::SEED),
    ("groups", Keys::DURATION_MS),
];

impl Keys {
    /// The keys the scenario named `scenario` reads beside the machine's; every key for a
    /// name that is no scenario (which the parser refuses as that).
    pub(super) fn read_by(scenario: &str) -> Keys {
        SCENARIOS.iter().find(|s| s.0 == scenario).map_or(Keys::all(), |s| s.1)
    }

    /// The scenario `bootargs` chooses (its last `scenario=`; `boot` without one).
    pub(super) fn scenario_of(bootargs: &str) -> &str {
        bootargs
            .split_ascii_whitespace()
            .filter_map(|w| w.strip_prefix("scenario="))
            .next_back()
            .unwrap_or("boot")
    }
}
