//! Linux's cgroup v2 CPU controller on the same QEMU machine, run in the guest as the targets
//! the core's task groups will be measured beside (docs/groups.md): the weights in the shape
//! of the kernel's own test (kselftest's `test_cpu.c`, weight_overprovisioned), and a
//! bandwidth limit of this project's choosing.

use std::time::Duration;

use super::{Guest, Job};
use crate::qemu::{Machine, Mode};

/// The weights of kselftest's `test_cpucg_weight_overprovisioned`: three sibling groups, each
/// with one spinner per CPU.
pub const WEIGHTS: [u32; 3] = [50, 100, 150];
/// `cpu.max` of the limited group: 10 ms per 100 ms, a tenth of one CPU.
pub const MAX: (u64, u64) = (10_000, 100_000);

/// One group's `cpu.stat` after the run.
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

/// What the guest measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// `uname -r`.
    pub release: String,
    /// The weighted groups' statistics, in [`WEIGHTS`]' order.
    pub weighted: Vec<Stat>,
    /// The limited group's.
    pub limited: Stat,
    /// How long each part ran (s).
    pub seconds: u32,
}

/// The guest's script: the weighted groups, then the limited one, each for `seconds`, their
/// `cpu.stat` printed as `cgroup NAME key value ...` lines.
pub fn script(cpus: usize, seconds: u32) -> String {
    let spin = |group: &str, threads: usize| {
        format!(
            "sh -c \"echo \\$\\$ > $CG/{group}/cgroup.procs && exec sysbench cpu --threads={threads} --time={seconds} --events=0 run\" > /dev/null &\n"
        )
    };
    let mut s = String::from(
        "set -e\nCG=/sys/fs/cgroup\nmount -t cgroup2 none $CG\necho +cpu > $CG/cgroup.subtree_control\n\
         mkdir $CG/w\necho +cpu > $CG/w/cgroup.subtree_control\n",
    );
    for w in WEIGHTS {
        s += &format!("mkdir $CG/w/g{w}\necho {w} > $CG/w/g{w}/cpu.weight\n");
    }
    for w in WEIGHTS {
        s += &spin(&format!("w/g{w}"), cpus);
    }
    s += "wait\n";
    s += &format!("mkdir $CG/max\necho \"{} {}\" > $CG/max/cpu.max\n", MAX.0, MAX.1);
    s += &spin("max", 1);
    s += "wait\n";
    for g in WEIGHTS.iter().map(|w| format!("w/g{w}")).chain(["max".to_string()]) {
        s += &format!("echo \"cgroup {g} $(tr '\\n' ' ' < $CG/{g}/cpu.stat)\"\n");
    }
    s
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

/// Runs the script on Linux on machine `m`, `seconds` per part. `Err` is one line.
pub fn measure(m: &Machine, mode: Mode, ticking: bool, seconds: u32) -> Result<Measured, String> {
    let guest = Guest::prepare()?.ticking(ticking);
    let text = script(m.cpus, seconds);
    let limit = Duration::from_secs(120 + 60 * u64::from(seconds));
    let console = guest.boot(m, mode, &Job::Script { script: text.as_bytes() }, 1, limit)?;
    let out = &console.runs[0].output;
    let missing =
        |g: &str| format!("the guest printed no cpu.stat of cgroup {g} (is the cpu controller there?)");
    let weighted = WEIGHTS
        .iter()
        .map(|w| {
            let g = format!("w/g{w}");
            stat(out, &g).ok_or_else(|| missing(&g))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let limited = stat(out, "max").ok_or_else(|| missing("max"))?;
    Ok(Measured { release: console.release, weighted, limited, seconds })
}

impl Measured {
    /// Each weighted group's CPU time over the lightest's.
    pub fn ratios(&self) -> Vec<f64> {
        let first = self.weighted.first().map_or(1, |s| s.usage_usec.max(1)) as f64;
        self.weighted.iter().map(|s| s.usage_usec as f64 / first).collect()
    }

    /// The limited group's CPU time as a share of one CPU over the periods its limit was
    /// active (%).
    pub fn limited_share_pct(&self) -> f64 {
        let l = &self.limited;
        100.0 * l.usage_usec as f64 / (l.nr_periods.max(1) * MAX.1) as f64
    }
}

/// kselftest's closeness: `|a − b| ≤ (a + b) × err / 100`.
pub fn values_close(a: f64, b: f64, err: f64) -> bool {
    (a - b).abs() <= (a + b) * err / 100.0
}

/// The table: each weighted group's CPU time as a multiple of the lightest's beside the
/// weights' ratio, and the limited group's share of one CPU beside its limit.
pub fn render(m: &Measured, cpus: usize, mode: Mode) -> String {
    let mut s = format!(
        "Linux {} (Debian) cgroup v2 on the same QEMU machine ({cpus} vCPUs, {} mode), {} s each\n",
        m.release,
        mode.name(),
        m.seconds
    );
    s += "cpu.weight, one spinner per CPU in each group (kselftest's weight_overprovisioned):\n";
    s += &format!("{:<12} {:>14} {:>12} {:>12}\n", "cpu.weight", "usage (ms)", "ratio", "target");
    for ((w, st), r) in WEIGHTS.iter().zip(&m.weighted).zip(m.ratios()) {
        s += &format!(
            "{w:<12} {:>14.1} {:>12.3} {:>12.3}\n",
            st.usage_usec as f64 / 1000.0,
            r,
            f64::from(*w) / f64::from(WEIGHTS[0])
        );
    }
    let l = &m.limited;
    let share = m.limited_share_pct();
    s += &format!(
        "cpu.max \"{} {}\", one spinner: usage {:.1} ms = {:.2} % of one CPU over its {} periods (target {:.1} %); nr_throttled {}, throttled {:.1} ms\n",
        MAX.0,
        MAX.1,
        l.usage_usec as f64 / 1000.0,
        share,
        l.nr_periods,
        100.0 * MAX.0 as f64 / MAX.1 as f64,
        l.nr_throttled,
        l.throttled_usec as f64 / 1000.0
    );
    s += "The kernel and the simulator: no task groups yet (docs/groups.md).\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The output lines are read back, and a group without them is missing.
    #[test]
    fn cpu_stat_lines_are_read() {
        let out = vec![
            "noise".to_string(),
            "cgroup w/g50 usage_usec 1000 user_usec 900 system_usec 100 nr_periods 0 nr_throttled 0 throttled_usec 0 ".into(),
            "cgroup max usage_usec 200 user_usec 200 system_usec 0 nr_periods 20 nr_throttled 19 throttled_usec 1800000".into(),
        ];
        assert_eq!(stat(&out, "w/g50").unwrap().usage_usec, 1000);
        assert_eq!(
            stat(&out, "max").unwrap(),
            Stat { usage_usec: 200, nr_periods: 20, nr_throttled: 19, throttled_usec: 1_800_000 }
        );
        assert_eq!(stat(&out, "w/g100"), None);
        assert!(script(8, 2).contains("echo 150 > $CG/w/g150/cpu.weight"));
    }
}
