//! The A/B picture of one experiment: two traced runs of the same workload and seed, side A
//! (the seed's rule off) above side B (on), on one time axis with ticks, one lane per CPU,
//! a colour per thread with a legend, a marker where a thread starts on another CPU than it
//! last ran on (a migration), and the spread instant marked on each side.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::trace::TraceLog;

/// One side of the picture.
pub struct Side<'a> {
    /// What the side is (e.g. "rule off (pre-patch)").
    pub label: &'a str,
    /// Its trace.
    pub log: &'a TraceLog,
}

/// Which tasks count as workers for the spread instant (e.g. names starting `worker`).
pub type IsWorker = fn(&str) -> bool;

/// The first instant at which as many CPUs as there are workers (all CPUs, with more workers
/// than CPUs) each run a worker: the spread instant of the reports, read from the trace (which
/// does not say whether a worker runs alone on its CPU, so with more workers than CPUs this is
/// the first instant every CPU runs one).
pub fn spread_instant(log: &TraceLog, is_worker: IsWorker) -> Option<u64> {
    let cpus = log.cpus();
    let workers: std::collections::BTreeSet<u32> = log
        .switches
        .iter()
        .filter_map(|s| s.next.as_ref())
        .filter(|(_, name)| is_worker(name))
        .map(|(pid, _)| *pid)
        .collect();
    let want = workers.len().min(cpus);
    if want == 0 {
        return None;
    }
    let mut running: Vec<Option<u32>> = vec![None; cpus];
    for s in &log.switches {
        if s.cpu >= cpus {
            continue;
        }
        running[s.cpu] = s.next.as_ref().filter(|(_, n)| is_worker(n)).map(|(p, _)| *p);
        let mut on: Vec<u32> = running.iter().flatten().copied().collect();
        on.sort_unstable();
        on.dedup();
        if on.len() >= want {
            return Some(s.time);
        }
    }
    None
}

/// A step of 1, 2 or 5 × 10^k ms giving about 10 ticks over `span_ns`.
fn tick_step(span_ns: u64) -> u64 {
    let rough = (span_ns / 10).max(1);
    let mut step = 1_000u64; // 1 µs
    loop {
        for m in [1, 2, 5] {
            if step * m >= rough {
                return step * m;
            }
        }
        step *= 10;
    }
}

/// A thread's colour: a hue per pid (as the single-run timeline picks it), written as RGB so
/// that every SVG renderer draws it.
fn colour(pid: u32) -> String {
    let (h, s, l) = (((pid * 47) % 360) as f64 / 60.0, 0.6, 0.6);
    let c = (1.0 - (2.0 * l - 1.0f64).abs()) * s;
    let x = c * (1.0 - (h % 2.0 - 1.0).abs());
    let (r, g, b) = match h as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    format!("#{:02x}{:02x}{:02x}", byte(r), byte(g), byte(b))
}

/// The picture, over `[from, to)` ns, titled `title`.
pub fn ab_svg(title: &str, a: &Side<'_>, b: &Side<'_>, from: u64, to: u64, is_worker: IsWorker) -> String {
    let (width, left, lane) = (1200.0, 70.0, 16.0);
    let span = to.saturating_sub(from).max(1);
    let x = |t: u64| left + t.saturating_sub(from).min(span) as f64 / span as f64 * (width - left - 20.0);
    let cpus = a.log.cpus().max(b.log.cpus());
    let panel = 22.0 + lane * cpus as f64;
    let top = 44.0;
    // Every thread of either side, for the legend.
    let mut names: BTreeMap<u32, String> = BTreeMap::new();
    for side in [a, b] {
        for s in &side.log.switches {
            if let Some((p, n)) = &s.next {
                names.entry(*p).or_insert_with(|| n.clone());
            }
        }
    }
    let per_row = 8;
    let legend_rows = names.len().div_ceil(per_row).min(6);
    let axis_y = top + 2.0 * panel + 8.0;
    let height = axis_y + 36.0 + 18.0 * (legend_rows + 1) as f64 + 6.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/><text x="10" y="22" font-size="15">{}</text>"#,
        escape(title)
    );
    for (i, side) in [a, b].into_iter().enumerate() {
        let y0 = top + panel * i as f64;
        let _ = write!(
            s,
            r#"<text x="10" y="{:.1}" font-weight="bold">{}</text>"#,
            y0 + 13.0,
            escape(side.label)
        );
        let lanes_y = y0 + 20.0;
        for cpu in 0..cpus {
            let y = lanes_y + lane * cpu as f64;
            let _ = write!(
                s,
                r##"<text x="10" y="{:.1}" fill="#555">CPU{cpu}</text><line x1="{left}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#ccc" stroke-width="0.5"/>"##,
                y + 11.0,
                width - 20.0,
                y + lane,
                y + lane
            );
        }
        // Runs from each switch-in to the next switch on that CPU, and a marker where a thread
        // starts on another CPU than it last ran on.
        let mut open: Vec<Option<(u64, u32)>> = vec![None; cpus];
        let mut last_cpu: BTreeMap<u32, usize> = BTreeMap::new();
        let bar = |s: &mut String, cpu: usize, t0: u64, t1: u64, p: u32| {
            if t1 <= from || t0 >= to {
                return;
            }
            let (x0, x1) = (x(t0.max(from)), x(t1.min(to)));
            let _ = write!(
                s,
                r#"<rect x="{x0:.2}" y="{:.1}" width="{:.2}" height="{:.1}" fill="{}"/>"#,
                lanes_y + lane * cpu as f64 + 2.0,
                (x1 - x0).max(0.5),
                lane - 4.0,
                colour(p)
            );
        };
        for sw in side.log.switches.iter().filter(|sw| sw.cpu < cpus) {
            if let Some((t0, p)) = open[sw.cpu].take() {
                bar(&mut s, sw.cpu, t0, sw.time, p);
            }
            if let Some((p, _)) = &sw.next {
                open[sw.cpu] = Some((sw.time, *p));
                if last_cpu.insert(*p, sw.cpu).is_some_and(|c| c != sw.cpu) && (from..to).contains(&sw.time) {
                    let (mx, my) = (x(sw.time), lanes_y + lane * sw.cpu as f64 + 1.0);
                    let _ = write!(
                        s,
                        r#"<path d="M{mx:.1},{my:.1} l4,-5 l-8,0 z" fill="black"><title>migration</title></path>"#
                    );
                }
            }
        }
        for (cpu, o) in open.into_iter().enumerate() {
            if let Some((t0, p)) = o {
                bar(&mut s, cpu, t0, to, p);
            }
        }
        // A failed balance attempt: an orange triangle pointing up at the bottom of the lane
        // of the CPU that tried.
        for &(t, cpu) in side.log.balance_failures.iter().filter(|(t, c)| *c < cpus && (from..to).contains(t))
        {
            let (fx, fy) = (x(t), lanes_y + lane * (cpu + 1) as f64 - 1.0);
            let _ = write!(
                s,
                r##"<path d="M{fx:.1},{fy:.1} l4,-5 l-8,0 z" transform="rotate(180 {fx:.1} {:.1})" fill="#e08000"><title>failed balance attempt</title></path>"##,
                fy - 2.5
            );
        }
        if let Some(t) = spread_instant(side.log, is_worker).filter(|t| (from..to).contains(t)) {
            let _ = write!(
                s,
                r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="#d00" stroke-width="1.5" stroke-dasharray="4,3"/><text x="{3:.1}" y="{4:.1}" fill="#d00" text-anchor="end">spread instant at {5:.2} ms</text>"##,
                x(t),
                lanes_y - 2.0,
                lanes_y + lane * cpus as f64,
                width - 20.0,
                y0 + 13.0,
                (t - from) as f64 / 1e6
            );
        }
    }
    // The shared time axis, in ms from `from`.
    let step = tick_step(span);
    let _ = write!(
        s,
        r##"<line x1="{left}" x2="{:.1}" y1="{axis_y:.1}" y2="{axis_y:.1}" stroke="#333"/>"##,
        width - 20.0
    );
    let mut t = 0;
    while t <= span {
        let tx = x(from + t);
        let _ = write!(
            s,
            r##"<line x1="{tx:.1}" x2="{tx:.1}" y1="{axis_y:.1}" y2="{:.1}" stroke="#333"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            axis_y + 4.0,
            axis_y + 16.0,
            format_ms(t)
        );
        t += step;
    }
    let _ =
        write!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">ms</text>"#, width - 20.0, axis_y + 28.0);
    // The legend: the markers, then thread → colour.
    let ly = axis_y + 36.0;
    let _ = write!(
        s,
        r##"<path d="M{0:.1},{1:.1} l4,-5 l-8,0 z" fill="black"/><text x="{2:.1}" y="{1:.1}">migration</text><line x1="{3:.1}" x2="{3:.1}" y1="{4:.1}" y2="{1:.1}" stroke="#d00" stroke-dasharray="4,3"/><text x="{5:.1}" y="{1:.1}" fill="#d00">spread instant</text>"##,
        left + 4.0,
        ly,
        left + 12.0,
        left + 80.0,
        ly - 10.0,
        left + 86.0
    );
    let fx = left + 190.0;
    let _ = write!(
        s,
        r##"<path d="M{fx:.1},{0:.1} l4,-5 l-8,0 z" transform="rotate(180 {fx:.1} {1:.1})" fill="#e08000"/><text x="{2:.1}" y="{0:.1}">failed balance attempt</text>"##,
        ly - 6.0,
        ly - 8.5,
        fx + 8.0
    );
    for (i, (p, n)) in names.iter().take(per_row * 6).enumerate() {
        let (col, row) = (i % per_row, i / per_row + 1);
        let (lx, y) = (left + col as f64 * 140.0, ly + row as f64 * 18.0);
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="10" fill="{}"/><text x="{:.1}" y="{y:.1}">{}</text>"#,
            y - 9.0,
            colour(*p),
            lx + 16.0,
            escape(n)
        );
    }
    s.push_str("</svg>");
    s
}

fn format_ms(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms >= 10.0 || ms == ms.trunc() {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The stretch of time a picture shows: from `from` to four times the later side's spread
/// instant (at least 5 ms), so the spreading fills the picture; to `to` if neither side
/// spread.
pub fn window(spreads: [Option<u64>; 2], from: u64, to: u64) -> u64 {
    let last = spreads.iter().flatten().max().map_or(to, |&t| t);
    to.min(from + 4 * last.saturating_sub(from).max(5_000_000))
}

/// The workers of a simulated sysbench-like run (its main thread is `main`).
pub fn sim_worker(name: &str) -> bool {
    name.starts_with("worker")
}

/// The simulator's A/B picture of one experiment: side A (`a`: features and label) above
/// side B, one traced run each of `w` on the machine `cfg` (its seed), titled `title`.
/// Returns the picture and side B's traced run (`None` if the machine is refused).
pub fn sim_ab(
    cfg: &crate::Config,
    w: &crate::Workload,
    a: (sched_core::Features, &str),
    b: (sched_core::Features, &str),
    title: &str,
) -> Option<(String, crate::experiments::Traced)> {
    let run = |f| crate::experiments::traced_run(&crate::Config { features: f, ..cfg.clone() }, w);
    let (ta, tb) = (run(a.0)?, run(b.0)?);
    let spreads = [&ta.log, &tb.log].map(|l| spread_instant(l, sim_worker));
    let (from, end) = (ta.window.0, ta.window.1.max(tb.window.1));
    let svg = ab_svg(
        title,
        &Side { label: a.1, log: &ta.log },
        &Side { label: b.1, log: &tb.log },
        from,
        window(spreads, from, end),
        sim_worker,
    );
    Some((svg, tb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sched_core::TaskId;

    fn log() -> TraceLog {
        let mut l = TraceLog::new(2);
        let id = |p| Some(TaskId::new(p, 0));
        let name = |n: &str| Some(n.to_string());
        l.switch(1_000_000, 0, None, None, id(1), name("main"), None);
        l.switch(2_000_000, 0, id(1), name("main"), id(2), name("worker0"), None);
        l.switch(3_000_000, 1, None, None, id(3), name("worker1"), None);
        // worker1 moves to CPU 0 later: a migration.
        l.switch(5_000_000, 0, id(2), name("worker0"), id(3), name("worker1"), None);
        l.balance_failed(4_000_000, 1);
        l
    }

    #[test]
    fn the_spread_is_the_first_instant_every_cpu_runs_a_worker() {
        assert_eq!(spread_instant(&log(), |n| n.starts_with("worker")), Some(3_000_000));
        assert_eq!(spread_instant(&log(), |n| n == "nobody"), None);
    }

    #[test]
    fn the_picture_has_both_sides_a_legend_ticks_and_the_markers() {
        let (a, b) = (log(), log());
        let svg = ab_svg(
            "t",
            &Side { label: "rule off", log: &a },
            &Side { label: "rule on", log: &b },
            0,
            10_000_000,
            |n| n.starts_with("worker"),
        );
        for needle in [
            "rule off",
            "rule on",
            "worker0",
            "worker1",
            "main",
            "<title>migration</title>",
            "<title>failed balance attempt</title>",
            "spread instant at 3.00 ms",
            ">10<",
        ] {
            assert!(svg.contains(needle), "no {needle:?} in the picture");
        }
        assert_eq!(tick_step(10_000_000), 1_000_000);
        // hsl(0, 60%, 60%).
        assert_eq!(colour(0), "#d65c5c");
    }
}
