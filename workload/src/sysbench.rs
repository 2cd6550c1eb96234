//! The seed's workload, sysbench's cpu test, written as a workload file: a main thread that
//! creates the workers one by one (some work before each creation), meets them at a start
//! barrier and waits for them; workers that set up, meet at the barrier, then take events
//! from one shared counter until it runs out. `workloads/sysbench.json` is [`Sysbench::SEED`]'s
//! file; the simulator runs every sysbench-like experiment from [`Sysbench::json`].

use crate::limits::MAX_LOOPS;

/// A sysbench cpu run's shape, in the units of a workload file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sysbench {
    /// Worker threads (`--threads`).
    pub threads: u32,
    /// Events shared by the workers (`--events`).
    pub events: u32,
    /// Work per event (µs).
    pub event_us: u32,
    /// How far each event's work varies either way (%), where the platform models it.
    pub jitter_pct: u32,
    /// The main thread's work before each creation (µs).
    pub create_us: u32,
    /// Each worker's set-up before the start barrier (µs).
    pub setup_us: u32,
}

impl Sysbench {
    /// The seed's run: `sysbench --test=cpu --num-threads=8 --max-requests=1000`, its event
    /// cost making 1000 events on 8 CPUs take about the seed's 158 ms.
    pub const SEED: Sysbench =
        Sysbench { threads: 8, events: 1000, event_us: 1240, jitter_pct: 2, create_us: 30, setup_us: 20 };

    /// The workload file (rt-app JSON with this project's `take` and `join`).
    ///
    /// ```
    /// use sched_workload::{rtapp, sysbench::Sysbench, Program};
    /// let bytes = rtapp::lower(&Sysbench::SEED.json()).unwrap().to_bytes();
    /// let prog = Program::parse(&bytes).unwrap();
    /// assert_eq!(prog.threads_of(1), Some(8), "eight workers");
    /// assert_eq!(prog.barriers().collect::<Vec<_>>(), [9], "the workers and the main thread");
    /// ```
    pub fn json(&self) -> String {
        let create = |fork: &str| match self.create_us {
            0 => fork.to_string(),
            us => format!(r#""run": {us}, {fork}"#),
        };
        let fork = r#""fork": "worker""#;
        let mut main_phases = Vec::new();
        if self.threads > 1 {
            main_phases.push(format!(r#""create": {{ "loop": {}, {} }}"#, self.threads - 1, create(fork)));
        }
        main_phases.push(format!(r#""last": {{ {}, "barrier": "start", "join": true }}"#, create(fork)));
        let setup = match self.setup_us {
            0 => String::new(),
            us => format!(r#""run": {us}, "#),
        };
        format!(
            r#"{{
  "global": {{ "duration": -1, "calibration": 100, "default_policy": "SCHED_OTHER" }},
  "tasks": {{
    "sysbench": {{
      "loop": 1,
      "phases": {{
        {}
      }}
    }},
    "worker": {{
      "instance": 0, "loop": 1,
      "phases": {{
        "setup": {{ {setup}"barrier": "start" }},
        "events": {{ "loop": {}, "take": {{ "ref": "events", "size": {}, "run": {}, "jitter": {} }} }}
      }}
    }}
  }}
}}
"#,
            main_phases.join(",\n        "),
            self.events.min(MAX_LOOPS),
            self.events,
            self.event_us,
            self.jitter_pct,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtapp::lower;

    /// The file in `workloads/` is the seed's.
    #[test]
    fn the_seed_file_is_the_seeds_workload() {
        let file = lower(include_str!("../../workloads/sysbench.json")).unwrap();
        assert_eq!(file, lower(&Sysbench::SEED.json()).unwrap());
    }

    /// Every shape lowers: one thread, no creation work, no set-up.
    #[test]
    fn every_shape_lowers() {
        for threads in [1, 2, 12, 1024] {
            for (create_us, setup_us) in [(0, 0), (30, 0), (0, 20), (30, 20)] {
                let s = Sysbench { threads, events: threads * 40, create_us, setup_us, ..Sysbench::SEED };
                let def = lower(&s.json()).unwrap_or_else(|e| panic!("{s:?}: {e}"));
                assert_eq!(def.barriers[0].1, threads + 1, "{s:?}");
            }
        }
    }
}
