//! Linux's cgroup v2 CPU controller on the same QEMU machine, run in the guest as the targets
//! the core's task groups are measured beside (docs/groups.md), in the shapes the kernel's
//! `scenario=groups` and the simulator's `cargo xsim groups` run, each for the same time, one
//! case after another in two guests ([`scripts`]):
//!
//! - `weights`: three sibling groups of `cpu.weight` 50, 100 and 150, a spinner per CPU in
//!   each (kselftest's `test_cpu.c`, weight_overprovisioned): shares 1:2:3.
//! - `under`: the same weights with one spinner each, fewer than the CPUs (kselftest's
//!   weight_underprovisioned): a CPU's worth each. Run on three CPUs or more.
//! - `nested`: A (1000) holding A1 (250) and A2 (750), beside B (1000), a spinner per CPU in
//!   each of B, A1 and A2: shares 50 %, 12.5 % and 37.5 %.
//! - `many`: 40 spinners against one in two groups of equal weight, all on CPU 0: half each.
//! - `cap`: `cpu.max` "10000 100000" on a group with a spinner per CPU: a tenth of one CPU.
//!
//! A row's **share** is its group's CPU time over all its case's groups' CPU time; its **CPUs'
//! worth** is its group's CPU time over the case's wall time (1.0 = one CPU busy throughout),
//! as the simulator defines them.

use std::time::Duration;

pub use sched_sim::groups::{GroupRow as Row, Measure};

use super::{Guest, Job};
use crate::qemu::{Machine, Mode};

/// The weights of kselftest's `test_cpucg_weight_overprovisioned`: three sibling groups, each
/// with one spinner per CPU (the `weights` case; `under` has the same with one spinner each).
pub const WEIGHTS: [u32; 3] = [50, 100, 150];
/// `cpu.max` of the limited group (the `cap` case): 10 ms per 100 ms, a tenth of one CPU.
pub const MAX: (u64, u64) = (10_000, 100_000);
/// The spinners of the larger group of the `many` case, as the kernel's scenario has them.
pub const MANY: usize = 40;

/// One group's `cpu.stat` after its case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat {
    /// CPU time of its tasks (µs).
    pub usage_usec: u64,
    /// Bandwidth periods elapsed.
    pub nr_periods: u64,
    /// Of those, periods with the group throttled.
    pub nr_throttled: u64,
    /// Time throttled (µs).
    pub throttled_usec: u64,
}

/// One measured group of one case: where it sits, what it is promised and its `cpu.stat`.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// The case: `weights`, `under`, `nested`, `many` or `cap`.
    pub case: &'static str,
    /// Its path under the cgroup v2 mount (`w/g50`, `n/A/A1`, `max`).
    pub path: String,
    /// Its name in a table, by its weight or limit (as the simulator names it).
    pub label: String,
    /// What it is measured by.
    pub measure: Measure,
    /// What cgroup v2 promises it, in `measure`'s unit (a fraction, or CPUs).
    pub target: f64,
    /// Its `cpu.max` (quota, period in µs), if it has one.
    pub max: Option<(u64, u64)>,
    /// Its `cpu.stat`.
    pub stat: Stat,
}

/// What the guest measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// `uname -r`.
    pub release: String,
    /// The `weights` case's groups' statistics, in [`WEIGHTS`]' order.
    pub weighted: Vec<Stat>,
    /// The `cap` case's group's.
    pub limited: Stat,
    /// How long each case ran (s).
    pub seconds: u32,
    /// Every case's groups, in the order the cases ran.
    pub groups: Vec<Group>,
    /// The churn: the processes that ran in the calm second after it, and those the groups
    /// count, of [`CHURN_TASKS`].
    pub churn: Churn,
}

/// What the churn case left: LTP `cfs_bandwidth01`'s shape in cgroup v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Churn {
    /// Processes whose CPU time (their threads' `/proc/PID/task/TID/schedstat`) grew in the
    /// calm second after it.
    pub ran: u32,
    /// Processes the hierarchy's `cgroup.procs` files list exactly once.
    pub counted: u32,
    /// Moves into a leaf the kernel refused (a process gone would be one).
    pub failed_moves: u32,
}

/// The churn's processes, as in the kernel's and the simulator's.
pub const CHURN_TASKS: u32 = 16;

/// The churn case's script, `seconds` of churn then a calm second: the kernel's shape (a
/// top group capped at 2.5 CPUs, a middle one at half a CPU, four leaves, one capped at a fifth,
/// 10 ms periods; 16 processes, half `sysbench cpu` spinners and half shell loops that run
/// and sleep 2 ms; every 5 ms a process moved, every 100 ms the leaf's cap switched, every
/// 200 ms a middle group's weight changed, every 250 ms a spare group made or removed), with
/// one change cgroup v2 requires: processes move between leaves only, since a group that
/// hands the `cpu` controller to children may hold no process itself.
///
/// The control loop steps 5 ms at a time, every event's period being a multiple of it. Each
/// step forks busybox's `usleep` and moves a process, and deterministic QEMU counts every busy
/// vCPU's instructions in the one guest clock, so with the spinners running a step costs
/// several milliseconds of guest time beyond its sleep: a step per millisecond would stretch
/// the churn's seconds many times over in guest time, and its moves far apart.
fn churn_script(seconds: u32) -> String {
    let steps = seconds * 1000;
    let (n, last) = (CHURN_TASKS, CHURN_TASKS - 1);
    format!(
        r#"# churn
C=$CG/c
mkdir $C $C/m0 $C/m1
echo +cpu > $C/cgroup.subtree_control
echo "25000 10000" > $C/cpu.max
echo 200 > $C/m0/cpu.weight
echo "5000 10000" > $C/m0/cpu.max
echo +cpu > $C/m0/cgroup.subtree_control
echo +cpu > $C/m1/cgroup.subtree_control
L0=$C/m0/l0; L1=$C/m0/l1; L2=$C/m1/l2; L3=$C/m1/l3
mkdir $L0 $L1 $L2 $L3
echo 50 > $L0/cpu.weight; echo 300 > $L1/cpu.weight; echo 50 > $L2/cpu.weight; echo 300 > $L3/cpu.weight
echo "2000 10000" > $L3/cpu.max
leaf() {{ case $(($1 % 4)) in 0) L=$L0;; 1) L=$L1;; 2) L=$L2;; *) L=$L3;; esac; }}
P=""
for i in $(seq 0 {last}); do
  leaf $i
  if [ $((i % 2)) -eq 0 ]; then
    sh -c "echo \$\$ > $L/cgroup.procs && exec sysbench cpu --threads=1 --time=1000 --events=0 run" > /dev/null &
  else
    sh -c "echo \$\$ > $L/cgroup.procs; while :; do j=0; while [ \$j -lt 300 ]; do j=\$((j+1)); done; usleep 2000; done" > /dev/null &
  fi
  P="$P $!"
done
set -- $P
step=0; fails=0
while [ $step -lt {steps} ]; do
  usleep 5000
  k=$((step * 3 % {n} + 1)); eval pid=\${{$k}}; leaf $((step / 5))
  echo $pid > $L/cgroup.procs || fails=$((fails + 1))
  if [ $((step % 100)) -eq 0 ]; then
    if [ $((step / 100 % 2)) -eq 0 ]; then echo max > $L3/cpu.max; else echo "2000 10000" > $L3/cpu.max; fi
  fi
  if [ $((step % 200)) -eq 0 ]; then echo $((50 + step / 200 % 10 * 40)) > $C/m0/cpu.weight; fi
  if [ $((step % 250)) -eq 0 ]; then
    if [ -d $C/m1/spare ]; then rmdir $C/m1/spare; else mkdir $C/m1/spare; echo 10 > $C/m1/spare/cpu.weight; fi
  fi
  step=$((step + 5))
done
ran_ns() {{ cat /proc/$1/task/*/schedstat | awk '{{s += $1}} END {{print s}}'; }}
before=""
for p in $P; do before="$before $(ran_ns $p)"; done
sleep 1
ran=0; set -- $before
for p in $P; do
  if [ $(ran_ns $p) -gt $1 ]; then
    ran=$((ran + 1))
  else
    echo "churn: process $p did not run: in $(cut -d: -f3 /proc/$p/cgroup), last on CPU $(cut -d' ' -f39 /proc/$p/stat), $(cat /proc/$p/comm)"
  fi
  shift
done
counted=0
for p in $P; do
  n=$(cat $C/cgroup.procs $C/m0/cgroup.procs $C/m1/cgroup.procs $L0/cgroup.procs $L1/cgroup.procs $L2/cgroup.procs $L3/cgroup.procs | grep -cx $p || true)
  if [ $n -eq 1 ]; then counted=$((counted + 1)); fi
done
echo "churn ran $ran counted $counted failed $fails"
kill $P
wait || true
"#
    )
}

/// A group of a case that holds spinners.
struct Leaf {
    path: String,
    label: String,
    weight: Option<u32>,
    threads: usize,
    target: f64,
}

/// One case of the script.
struct Case {
    name: &'static str,
    measure: Measure,
    /// Groups holding the leaves, parents first, with their weight (`None`: the default).
    parents: Vec<(&'static str, Option<u32>)>,
    leaves: Vec<Leaf>,
    /// Every spinner on CPU 0 only.
    on_cpu0: bool,
    /// Each leaf's `cpu.max`.
    max: Option<(u64, u64)>,
}

/// The cases on `cpus` CPUs, in the order they run (`under` needs three CPUs or more, as in
/// the kernel and the simulator).
fn cases(cpus: usize) -> Vec<Case> {
    let leaf = |path: &str, label: &str, weight: Option<u32>, threads: usize, target: f64| Leaf {
        path: path.to_string(),
        label: label.to_string(),
        weight,
        threads,
        target,
    };
    let weighted = |dir: &'static str, name: &'static str, threads: usize, measure: Measure| Case {
        name,
        measure,
        parents: vec![(dir, None)],
        leaves: WEIGHTS
            .iter()
            .map(|&w| {
                // (A share, or else each group's CPUs' worth.)
                let target = if measure == Measure::Share {
                    f64::from(w) / f64::from(WEIGHTS.iter().sum::<u32>())
                } else {
                    1.0
                };
                leaf(&format!("{dir}/g{w}"), &format!("cpu.weight {w}"), Some(w), threads, target)
            })
            .collect(),
        on_cpu0: false,
        max: None,
    };
    let mut all = vec![weighted("w", "weights", cpus, Measure::Share)];
    if cpus >= 3 {
        all.push(weighted("u", "under", 1, Measure::CpusWorth));
    }
    all.push(Case {
        name: "nested",
        measure: Measure::Share,
        parents: vec![("n", None), ("n/A", Some(1000))],
        leaves: vec![
            leaf("n/B", "B (1000)", Some(1000), cpus, 0.5),
            leaf("n/A/A1", "A (1000) / A1 (250)", Some(250), cpus, 0.125),
            leaf("n/A/A2", "A (1000) / A2 (750)", Some(750), cpus, 0.375),
        ],
        on_cpu0: false,
        max: None,
    });
    all.push(Case {
        name: "many",
        measure: Measure::Share,
        parents: vec![("m", None)],
        leaves: vec![
            leaf("m/many", &format!("{MANY} threads"), Some(100), MANY, 0.5),
            leaf("m/one", "1 thread", Some(100), 1, 0.5),
        ],
        on_cpu0: true,
        max: None,
    });
    all.push(Case {
        name: "cap",
        measure: Measure::CpusWorth,
        parents: Vec::new(),
        leaves: vec![leaf("max", "capped", None, cpus, MAX.0 as f64 / MAX.1 as f64)],
        on_cpu0: false,
        max: Some(MAX),
    });
    all
}

/// The cases the second guest runs, before the churn: the first runs the others. A case
/// costs QEMU its busy vCPUs' time: `weights` and `nested` keep every CPU busy, `under` three,
/// `many` one, `cap` a tenth of one and the churn about two and a half. Split so, the two
/// take about the same time, and side by side about half of one guest running all.
const SECOND: [&str; 3] = ["nested", "many", "cap"];

/// The guests' two scripts (POSIX sh), every case in one of them and the churn last in the
/// second: each case's groups made, its spinners (`sysbench cpu` processes, on CPU 0 by
/// busybox's `taskset` where the case pins them) run for `seconds` and waited for, then its
/// groups' `cpu.stat` printed as `cgroup PATH key value ...` lines.
pub fn scripts(cpus: usize, seconds: u32) -> [String; 2] {
    let mut parts = [(); 2].map(|()| {
        String::from(
            "set -e\nCG=/sys/fs/cgroup\nmount -t cgroup2 none $CG\necho +cpu > $CG/cgroup.subtree_control\n",
        )
    });
    for case in cases(cpus) {
        let s = &mut parts[usize::from(SECOND.contains(&case.name))];
        *s += &format!("# {}\n", case.name);
        for (p, w) in &case.parents {
            *s += &format!("mkdir $CG/{p}\n");
            if let Some(w) = w {
                *s += &format!("echo {w} > $CG/{p}/cpu.weight\n");
            }
            *s += &format!("echo +cpu > $CG/{p}/cgroup.subtree_control\n");
        }
        for l in &case.leaves {
            *s += &format!("mkdir $CG/{}\n", l.path);
            if let Some(w) = l.weight {
                *s += &format!("echo {w} > $CG/{}/cpu.weight\n", l.path);
            }
            if let Some((quota, period)) = case.max {
                *s += &format!("echo \"{quota} {period}\" > $CG/{}/cpu.max\n", l.path);
            }
        }
        let pin = if case.on_cpu0 { "taskset 1 " } else { "" };
        for l in &case.leaves {
            *s += &format!(
                "sh -c \"echo \\$\\$ > $CG/{}/cgroup.procs && exec {pin}sysbench cpu --threads={} --time={seconds} --events=0 run\" > /dev/null &\n",
                l.path, l.threads
            );
        }
        *s += "wait\n";
        for l in &case.leaves {
            *s += &format!("echo \"cgroup {0} $(tr '\\n' ' ' < $CG/{0}/cpu.stat)\"\n", l.path);
        }
    }
    parts[1] += &churn_script(seconds);
    parts
}

/// The `cpu.stat` of group `name` in the run's output.
fn stat(output: &[String], name: &str) -> Option<Stat> {
    let line = output.iter().find_map(|l| l.strip_prefix(&format!("cgroup {name} ")))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let get = |k: &str| words.windows(2).find(|w| w[0] == k).and_then(|w| w[1].parse().ok());
    Some(Stat {
        usage_usec: get("usage_usec")?,
        nr_periods: get("nr_periods")?,
        nr_throttled: get("nr_throttled")?,
        throttled_usec: get("throttled_usec")?,
    })
}

/// The measurement in the joined output of [`scripts`]`(cpus, seconds)`; `Err` (one line)
/// names the first group whose `cpu.stat` is missing.
fn parse(output: &[String], release: String, cpus: usize, seconds: u32) -> Result<Measured, String> {
    let mut groups = Vec::new();
    for case in cases(cpus) {
        for l in case.leaves {
            let stat = stat(output, &l.path).ok_or_else(|| {
                format!("the guest printed no cpu.stat of cgroup {} (is the cpu controller there?)", l.path)
            })?;
            groups.push(Group {
                case: case.name,
                path: l.path,
                label: l.label,
                measure: case.measure,
                target: l.target,
                max: case.max,
                stat,
            });
        }
    }
    let of = |case: &'static str| groups.iter().filter(move |g| g.case == case).map(|g| g.stat);
    let weighted = of("weights").collect();
    let limited = of("cap").next().unwrap_or_default();
    let line =
        output.iter().find_map(|l| l.strip_prefix("churn ran ")).ok_or("the guest printed no churn line")?;
    let words: Vec<u32> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let [ran, counted, failed_moves] = words[..] else {
        return Err(format!("a churn line of other figures: {line:?}"));
    };
    let churn = Churn { ran, counted, failed_moves };
    Ok(Measured { release, weighted, limited, seconds, groups, churn })
}

/// Runs the scripts on Linux on machine `m`, `seconds` per case. `Err` is one line. In
/// deterministic mode the two guests boot side by side ([`crate::pool`]); in parallel mode,
/// which needs the whole host, one after the other.
pub fn measure(m: &Machine, mode: Mode, ticking: bool, seconds: u32) -> Result<Measured, String> {
    let guest = Guest::prepare()?.ticking(ticking);
    let parts = scripts(m.cpus, seconds);
    let run = |i: usize| -> Result<(String, Vec<String>), String> {
        // Each case and the churn's calm second, with room for the boot.
        let n = parts[i].matches("\nwait\n").count() as u64 + 1;
        let limit = Duration::from_secs(120 + 60 * n * u64::from(seconds));
        let console = guest.boot(m, mode, &Job::Script { script: parts[i].as_bytes() }, 1, limit)?;
        let run = console.runs.into_iter().next().ok_or("the guest ran no script")?;
        Ok((console.release, run.output))
    };
    let outputs = crate::pool::map(mode, parts.len(), run);
    let mut release = String::new();
    let mut output = Vec::new();
    for o in outputs {
        let (r, out) = o?;
        release = r;
        output.extend(out);
    }
    parse(&output, release, m.cpus, seconds)
}

impl Measured {
    /// Each weighted group's CPU time over the lightest's (the `weights` case).
    pub fn ratios(&self) -> Vec<f64> {
        let first = self.weighted.first().map_or(1, |s| s.usage_usec.max(1)) as f64;
        self.weighted.iter().map(|s| s.usage_usec as f64 / first).collect()
    }

    /// The limited group's CPU time as a share of one CPU over the periods its limit was
    /// active (%): its quota is the whole group's, however many CPUs its spinners run on.
    pub fn limited_share_pct(&self) -> f64 {
        let l = &self.limited;
        100.0 * l.usage_usec as f64 / (l.nr_periods.max(1) * MAX.1) as f64
    }

    /// Every case's groups as rows, in the order the cases ran (weights, under, nested,
    /// many, cap): a share over its case's CPU time, or CPUs' worth over `seconds`.
    pub fn rows(&self) -> Vec<Row> {
        let wall_us = f64::from(self.seconds) * 1e6;
        self.groups
            .iter()
            .map(|g| {
                let usage = g.stat.usage_usec as f64;
                let got = match g.measure {
                    Measure::Share => {
                        let total: u64 =
                            self.groups.iter().filter(|o| o.case == g.case).map(|o| o.stat.usage_usec).sum();
                        usage / total.max(1) as f64
                    }
                    // A capped group's over its periods (its spinners outlive the case's
                    // seconds by their start and exit); any other over the case's seconds.
                    // (No Linux group is counted in tasks: the churn is not a group row.)
                    Measure::CpusWorth | Measure::Tasks => match g.max {
                        Some((_, period)) if g.stat.nr_periods > 0 => {
                            usage / (g.stat.nr_periods * period) as f64
                        }
                        _ => usage / wall_us.max(1.0),
                    },
                };
                Row {
                    case: g.case,
                    group: g.label.clone(),
                    measure: g.measure,
                    target: g.target,
                    got,
                    periods: g.max.map(|_| (g.stat.nr_periods, g.stat.nr_throttled)),
                }
            })
            .collect()
    }
}

/// kselftest's closeness: `|a − b| ≤ (a + b) × err / 100`.
pub fn values_close(a: f64, b: f64, err: f64) -> bool {
    (a - b).abs() <= (a + b) * err / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `cpu.stat` line of the guest's.
    fn line(path: &str, usage: u64, periods: u64, throttled: u64) -> String {
        format!(
            "cgroup {path} usage_usec {usage} user_usec {usage} system_usec 0 nr_periods {periods} nr_throttled {throttled} throttled_usec {} ",
            throttled * 90_000
        )
    }

    /// Output of a 4-CPU, 2 s run: every case's groups.
    fn sample() -> Vec<String> {
        vec![
            "noise".to_string(),
            line("w/g50", 1_000_000, 0, 0),
            line("w/g100", 2_000_000, 0, 0),
            line("w/g150", 3_000_000, 0, 0),
            line("u/g50", 1_900_000, 0, 0),
            line("u/g100", 2_000_000, 0, 0),
            line("u/g150", 2_100_000, 0, 0),
            line("n/B", 4_000_000, 0, 0),
            line("n/A/A1", 1_000_000, 0, 0),
            line("n/A/A2", 3_000_000, 0, 0),
            line("m/many", 1_200_000, 0, 0),
            line("m/one", 800_000, 0, 0),
            line("max", 200_000, 20, 19),
            "churn ran 16 counted 16 failed 0".into(),
        ]
    }

    /// The output lines are read back, and a group without them is missing.
    #[test]
    fn cpu_stat_lines_are_read() {
        let out = sample();
        assert_eq!(stat(&out, "w/g50").unwrap().usage_usec, 1_000_000);
        assert_eq!(
            stat(&out, "max").unwrap(),
            Stat { usage_usec: 200_000, nr_periods: 20, nr_throttled: 19, throttled_usec: 1_710_000 }
        );
        assert_eq!(stat(&out, "w/g200"), None);
    }

    /// Every case's rows, in order, with shares over the case and CPUs' worth over the wall.
    #[test]
    fn rows_of_every_case() {
        let m = parse(&sample(), "6.1.0".into(), 4, 2).unwrap();
        assert_eq!(
            m.weighted.iter().map(|s| s.usage_usec).collect::<Vec<_>>(),
            [1_000_000, 2_000_000, 3_000_000]
        );
        assert_eq!(m.limited.nr_throttled, 19);
        assert!((m.limited_share_pct() - 10.0).abs() < 1e-9);
        assert_eq!(m.ratios(), [1.0, 2.0, 3.0]);
        let rows = m.rows();
        let cases: Vec<&str> = rows.iter().map(|r| r.case).collect();
        assert_eq!(
            cases,
            [
                "weights", "weights", "weights", "under", "under", "under", "nested", "nested", "nested",
                "many", "many", "cap"
            ]
        );
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let got: Vec<f64> = rows.iter().map(|r| r.got).collect();
        let want = [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0, 0.95, 1.0, 1.05, 0.5, 0.125, 0.375, 0.6, 0.4, 0.1];
        assert!(got.iter().zip(want).all(|(&g, w)| close(g, w)), "{got:?}");
        let target: Vec<f64> = rows.iter().map(|r| r.target).collect();
        let want = [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0, 1.0, 1.0, 1.0, 0.5, 0.125, 0.375, 0.5, 0.5, 0.1];
        assert!(target.iter().zip(want).all(|(&g, w)| close(g, w)), "{target:?}");
        assert_eq!(rows[3].measure, Measure::CpusWorth);
        assert_eq!(rows[9].group, "40 threads");
        assert_eq!(rows[11].periods, Some((20, 19)));
        assert!(rows[..11].iter().all(|r| r.periods.is_none()));
        assert_eq!(m.churn, Churn { ran: 16, counted: 16, failed_moves: 0 });
        let out: Vec<String> = sample().into_iter().filter(|l| !l.starts_with("churn")).collect();
        assert!(parse(&out, "6.1.0".into(), 4, 2).is_err(), "no churn line");
    }

    /// A group the guest did not print is an error naming it.
    #[test]
    fn missing_group_is_an_error() {
        let out: Vec<String> = sample().into_iter().filter(|l| !l.starts_with("cgroup n/A/A1 ")).collect();
        let e = parse(&out, "6.1.0".into(), 4, 2).unwrap_err();
        assert!(e.contains("cgroup n/A/A1"), "{e}");
    }

    /// Under three CPUs the `under` case is not run, nor looked for.
    #[test]
    fn under_needs_three_cpus() {
        let out: Vec<String> = sample().into_iter().filter(|l| !l.starts_with("cgroup u/")).collect();
        let m = parse(&out, "6.1.0".into(), 2, 2).unwrap();
        assert!(m.rows().iter().all(|r| r.case != "under"));
        assert!(!scripts(2, 2).concat().contains("$CG/u"));
    }

    /// The script makes each case's groups and spinners, and waits after each case.
    #[test]
    fn script_shapes() {
        let [first, second] = scripts(8, 2);
        for s in [&first, &second] {
            assert!(s.starts_with("set -e\nCG=/sys/fs/cgroup\nmount -t cgroup2 none $CG\n"));
        }
        // The cases split between the two, the churn last in the second.
        let names =
            |s: &str| s.lines().filter_map(|l| l.strip_prefix("# ")).map(String::from).collect::<Vec<_>>();
        assert_eq!(names(&first), ["weights", "under"]);
        assert_eq!(names(&second), ["nested", "many", "cap", "churn"]);
        let s = first + &second;
        assert!(s.contains("echo 150 > $CG/w/g150/cpu.weight"));
        assert!(s.contains("$CG/u/g50/cgroup.procs && exec sysbench cpu --threads=1 --time=2 --events=0 run"));
        assert!(s.contains("echo 1000 > $CG/n/A/cpu.weight\necho +cpu > $CG/n/A/cgroup.subtree_control"));
        assert!(s.contains("echo 250 > $CG/n/A/A1/cpu.weight"));
        assert!(s.contains("$CG/m/many/cgroup.procs && exec taskset 1 sysbench cpu --threads=40 "));
        assert!(s.contains("$CG/m/one/cgroup.procs && exec taskset 1 sysbench cpu --threads=1 "));
        assert!(s.contains("echo \"10000 100000\" > $CG/max/cpu.max"));
        assert!(s.contains("$CG/max/cgroup.procs && exec sysbench cpu --threads=8 "));
        assert!(s.contains("while [ $step -lt 2000 ]; do") && s.contains("echo \"churn ran $ran counted"));
        assert_eq!(s.matches("wait\n").count(), 5);
        assert_eq!(s.matches("echo \"cgroup ").count(), 12);
        // Each case's statistics follow its wait.
        assert!(s.find("echo \"cgroup w/g50").unwrap() < s.find("mkdir $CG/u\n").unwrap());
    }
}
