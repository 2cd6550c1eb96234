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

/// The seed-style table's rows for runs `a` and `b` (median [min–max] and the
/// Mann–Whitney p), under a header naming the sides.
pub(crate) fn render(a_label: &str, b_label: &str, a: &[Figures], b: &[Figures]) -> String {
    use sched_sim::stats::{mann_whitney, summary};
    let mut s = format!("{:<26} {:>28} {:>28} {:>9}\n", "", a_label, b_label, "p (M-W U)");
    for (name, get) in ROWS {
        let va: Vec<f64> = a.iter().map(get).collect();
        let vb: Vec<f64> = b.iter().map(get).collect();
        let (_, p) = mann_whitney(&va, &vb);
        s.push_str(&format!("{name:<26} {:>28} {:>28} {p:>9.4}\n", summary(&va), summary(&vb)));
    }
    s
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
