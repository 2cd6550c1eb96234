//! The seed-style table of a sysbench run: its figures and its rows, one definition for the
//! kernel's runs under QEMU (`xrun.rs`) and Linux's (`linux/measure.rs`).

/// One sysbench run's figures, as the seed-style table's rows (ms unless said); Linux's runs
/// have them too, but for the failed balance attempts (NaN), which are the kernel's own count.
pub(crate) struct Figures {
    pub(crate) total_ms: f64,
    pub(crate) avg_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) spread_ms: f64,
    pub(crate) one_per_cpu_ms: f64,
    pub(crate) migrations: f64,
    pub(crate) failed: f64,
}

/// A row of the seed-style table.
pub(crate) type Row = (&'static str, fn(&Figures) -> f64);

/// The seed-style table's rows, one definition for the kernel's and Linux's runs.
pub(crate) const ROWS: [Row; 7] = [
    ("total time (ms)", |f| f.total_ms),
    ("per-request avg (ms)", |f| f.avg_ms),
    ("per-request max (ms)", |f| f.max_ms),
    ("spread time (ms)", |f| f.spread_ms),
    ("one-per-CPU time (ms)", |f| f.one_per_cpu_ms),
    ("migrations to spread", |f| f.migrations),
    ("failed balance attempts", |f| f.failed),
];
