//! The margins the QEMU suite's judges measure: the deterministic fair-shares, ping-pong,
//! latency and task-group cases booted on both `virt` machines, each figure beside the bound its judge holds
//! it to (docs/measurements.md; `cargo xtest` checks it like every section there).

use std::time::Duration;

use crate::qemu::{self, Arch, Boot, Mode};
use crate::suite::{self, Case};

/// One measured figure: what it is, its bound, and how a boot reports it.
struct Margin {
    what: &'static str,
    bound: String,
    read: fn(&Boot) -> Option<String>,
}

/// The markdown table: per case, each figure on aarch64 and riscv64 beside its bound.
pub fn section() -> Result<String, String> {
    let machines: Vec<qemu::Machine> =
        [Arch::Aarch64, Arch::Riscv64].into_iter().map(qemu::prepare).collect::<Result<_, _>>()?;
    let mut out = String::from("| case | figure | bound | aarch64 | riscv64 |\n|---|---|---:|---:|---:|\n");
    for (case, margins) in measured_cases() {
        let boots: Vec<Boot> = crate::pool::map(Mode::Deterministic, machines.len(), |i| {
            qemu::remembered(&machines[i], case.args, Duration::from_secs(120))
        });
        for m in margins {
            let values: Vec<String> = boots
                .iter()
                .map(|b| (m.read)(b).ok_or(format!("`{}`: no figure for {:?}", case.args, m.what)))
                .collect::<Result<_, _>>()?;
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                case.args, m.what, m.bound, values[0], values[1]
            ));
        }
    }
    Ok(out)
}

/// The suite's deterministic cases whose judges measure a margin, with those margins.
fn measured_cases() -> Vec<(&'static Case, Vec<Margin>)> {
    let b = suite::bounds();
    let fair = || {
        vec![
            Margin {
                what: "CPU time per thread at steady state, max/min",
                bound: format!("≤ {:.2}", b.fair_max_min),
                read: |b| b.number_after("steady max/min x1000 =").map(|r| format!("{:.3}", r / 1000.0)),
            },
            Margin {
                what: "runqueue lengths at half-way, max − min",
                bound: format!("≤ {}", b.fair_runqueue_spread),
                read: |b| b.number_after("max-min =").map(|r| format!("{r}")),
            },
        ]
    };
    let pingpong = vec![
        Margin {
            what: "wakeups of a parked partner",
            bound: format!("≥ {}", b.pingpong_min_wakeups),
            read: |b| suite::wakee_placement(b).ok().map(|(w, _, _)| w.to_string()),
        },
        Margin {
            what: "of which onto an idle CPU",
            bound: "all".to_string(),
            read: |b| suite::wakee_placement(b).ok().map(|(_, i, _)| i.to_string()),
        },
        Margin {
            what: "wakees moved off their previous CPU",
            bound: format!("≤ {}", b.pingpong_max_moved),
            read: |b| suite::wakee_placement(b).ok().map(|(_, _, m)| m.to_string()),
        },
    ];
    let latency = vec![
        Margin {
            what: "EEVDF: default-slice mean wake-to-run / short-slice mean",
            bound: format!("≥ {}", b.latency_mean_ratio),
            read: |b| ratio(b, ("eevdf", "default slice"), ("eevdf", "short slice"), |f| f.mean),
        },
        Margin {
            what: "EEVDF: default-slice p99 / short-slice p99",
            bound: format!("≥ {}", b.latency_p99_ratio),
            read: |b| ratio(b, ("eevdf", "default slice"), ("eevdf", "short slice"), |f| f.p99),
        },
        Margin {
            what: "CFS: short-slice mean / default-slice mean",
            bound: format!("within × {}", b.latency_cfs_same),
            read: |b| ratio(b, ("cfs", "short slice"), ("cfs", "default slice"), |f| f.mean),
        },
        Margin {
            what: "default-slice mean, EEVDF / CFS",
            bound: format!("≥ {}", b.latency_cfs_faster),
            read: |b| ratio(b, ("eevdf", "default slice"), ("cfs", "default slice"), |f| f.mean),
        },
        Margin {
            what: "default-slice CPU share, CFS / EEVDF",
            bound: format!("≥ {}", b.latency_cfs_share),
            read: |b| ratio(b, ("cfs", "default slice"), ("eevdf", "default slice"), |f| f.share),
        },
    ];
    let share = |what: &'static str, read: fn(&Boot) -> Option<String>| Margin {
        what,
        bound: format!("± {} %", b.groups_share_error * 100.0),
        read,
    };
    fn pct(v: f64) -> String {
        format!("{v:.2} %")
    }
    let groups = vec![
        share("weights, cpu.weight 50: share (target 16.67 %)", |b| {
            suite::group_share(b, "weights", "cpu.weight 50").ok().map(pct)
        }),
        share("weights, cpu.weight 100: share (target 33.33 %)", |b| {
            suite::group_share(b, "weights", "cpu.weight 100").ok().map(pct)
        }),
        share("weights, cpu.weight 150: share (target 50.00 %)", |b| {
            suite::group_share(b, "weights", "cpu.weight 150").ok().map(pct)
        }),
        share("nested, A/A1: share (target 12.50 %)", |b| {
            suite::group_share(b, "nested", "A/A1").ok().map(pct)
        }),
        share("40 threads against 1, the 1 thread: share (target 50.00 %)", |b| {
            suite::group_share(b, "many", "1 thread").ok().map(pct)
        }),
        Margin {
            what: "cpu.max 10000 100000: CPUs' worth (target 0.100)",
            bound: format!("± {}", b.groups_cap_error),
            read: |b| suite::group_cap(b).ok().map(|c| format!("{:.3}", c.0)),
        },
    ];
    let deterministic = suite::cases(Arch::Aarch64).into_iter().filter(|c| c.mode == Mode::Deterministic);
    let mut out = Vec::new();
    let (mut pingpong, mut latency, mut groups) = (Some(pingpong), Some(latency), Some(groups));
    for c in deterministic {
        if c.args.starts_with("scenario=sysbench") && c.args.contains("events=24000") {
            out.push((c, fair()));
        } else if c.args.starts_with("scenario=pingpong") {
            out.extend(pingpong.take().map(|m| (c, m)));
        } else if c.args.starts_with("scenario=latency") {
            out.extend(latency.take().map(|m| (c, m)));
        } else if c.args.starts_with("scenario=groups") {
            out.extend(groups.take().map(|m| (c, m)));
        }
    }
    out
}

/// The ratio of one latency figure between two (policy, group)s of the A/B, to 2 decimals.
fn ratio(
    b: &Boot,
    a: (&str, &str),
    c: (&str, &str),
    figure: fn(&suite::LatencyFigures) -> f64,
) -> Option<String> {
    let (x, y) = (suite::latency_figures(b, a.0, a.1).ok()?, suite::latency_figures(b, c.0, c.1).ok()?);
    Some(format!("{:.2}", figure(&x) / figure(&y).max(1e-9)))
}
