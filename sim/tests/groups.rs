//! The group scenarios of `cargo xsim groups` on the simulated machine: every group gets
//! what cgroup v2 promises it, within 2 % of its target (a share, or CPUs' worth), the
//! capped group's periods all end throttled, and after the churn every task runs and is
//! counted (its rows count tasks: 2 % of 16 is no task lost).

use sched_sim::groups::{run_groups, Measure};
use sched_sim::machine::{Config, TopologyKind};

fn check(cpus: usize, topology: TopologyKind) {
    let cfg = Config { cpus, topology, ..Config::octo(1) };
    let rows = run_groups(&cfg, 5);
    assert!(rows.len() >= 10, "every case ran: {}", rows.len());
    for r in &rows {
        assert!(
            r.error().abs() < 0.02,
            "{cpus} CPUs, {} / {}: {} against {}",
            r.case,
            r.group,
            r.got,
            r.target
        );
        if let Some((periods, throttled)) = r.periods {
            assert_eq!(r.measure, Measure::CpusWorth);
            assert!((49..=51).contains(&periods), "{periods} periods in 5 s");
            assert_eq!(throttled, periods, "a spinner per CPU exhausts every period");
        }
    }
}

#[test]
fn groups_get_their_weights_and_limits_on_eight_cpus() {
    check(8, TopologyKind::Clusters(4));
}

#[test]
fn groups_get_their_weights_and_limits_on_four_flat_cpus() {
    check(4, TopologyKind::Flat);
}
