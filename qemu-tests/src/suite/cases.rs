//! The suite's case table: every boot line, the mode it runs in and its judge, per machine,
//! and the long cases.

use super::judges::{
    affinity_ok, affinity_spread, churn_ok, every_thread_worked, exit_is, fair_shares, groups_ok, has,
    latency_ab, misfits_moved_up, nice_ok, pingpong_ok, spread_one_per_cpu, stack_overflow_caught,
    sysbench_ok, wakee_placement, wakeone_ok, EXIT_BAD_ARGS, EXIT_PANIC, EXIT_WATCHDOG, PINGPONG_MAX_MOVED,
    PINGPONG_MIN_WAKEUPS, PINGPONG_UNPARKS,
};
use crate::qemu::{Arch, Boot, Mode};

/// One case: a boot line, the mode it runs in and the judge of its boot.
pub struct Case {
    pub(crate) name: &'static str,
    pub(crate) args: &'static str,
    pub(crate) mode: Mode,
    pub(super) judge: fn(&Boot) -> Result<(), String>,
}

/// The virt boards' cases. The longest boot comes first: the pool starts boots in this order,
/// so the host's other cores take every shorter one meanwhile instead of waiting for it at
/// the end.
pub(super) const CASES: &[Case] = &[
    Case {
        name: "task groups: weights (over- and under-provisioned), nested, 40 threads against 1, cpu.max 0.1 CPU, LTP churn",
        args: "scenario=groups duration_ms=2000",
        mode: Mode::Deterministic,
        judge: groups_ok,
    },
    Case {
        name: "boot: 8 CPUs online, ticking, SGIs both ways",
        args: "scenario=boot",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "boot: OK (8 CPUs")
        },
    },
    Case {
        name: "big.LITTLE (capacities from the boot line): 4 spinners end up alone on the 4 big CPUs",
        args: "scenario=sysbench threads=4 events=2000 clusters=4 capacity=446*4,1024*4 seed=1",
        mode: Mode::Deterministic,
        judge: misfits_moved_up,
    },
    Case {
        name: "boot (parallel)",
        args: "scenario=boot watchdog=2500",
        mode: Mode::Parallel,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "boot: OK (8 CPUs")
        },
    },
    Case {
        name: "spread: 8 spinners end up one per CPU, spread time recorded",
        args: "scenario=sysbench threads=8 events=1000 seed=1",
        mode: Mode::Deterministic,
        judge: |b| {
            sysbench_ok(b)?;
            spread_one_per_cpu(b)
        },
    },
    Case {
        name: "sysbench-like on the 2x4 octo core, rule off",
        args:
            "scenario=sysbench threads=8 events=1000 clusters=4 seed=1 features=NO_UTIL_PULL_SKIPS_LONE_TASK",
        mode: Mode::Deterministic,
        // Pre-patch, the last CPU may get no spinner before the events run out: the report
        // says either "spread time ..." or "spread never reached".
        judge: |b| {
            sysbench_ok(b)?;
            has(b, "sysbench: spread")
        },
    },
    Case {
        name: "sysbench-like (parallel)",
        args: "scenario=sysbench threads=8 events=1000 watchdog=2500",
        mode: Mode::Parallel,
        judge: sysbench_ok,
    },
    Case {
        name: "oversubscription: 24 spinners, every event once",
        args: "scenario=sysbench threads=24 events=3000 watchdog=2500",
        mode: Mode::Parallel,
        judge: sysbench_ok,
    },
    // 24000 events last 2.2–3 s of guest time: many busy balance intervals (8 ms x 32), so
    // the half-way sample is taken at steady state (a 3000-event run ends before it), and the
    // steady window is long beside a time slice (see `fair_shares`).
    Case {
        name: "oversubscription: 16 spinners get fair shares, runqueues within 1 at steady state",
        args: "scenario=sysbench threads=16 events=24000",
        mode: Mode::Deterministic,
        judge: fair_shares,
    },
    Case {
        name: "oversubscription: 24 spinners get fair shares, runqueues within 1 at steady state",
        args: "scenario=sysbench threads=24 events=24000",
        mode: Mode::Deterministic,
        judge: fair_shares,
    },
    Case {
        name: "tickless idle with nohz kicks",
        args: "scenario=sysbench threads=8 events=1000 nohz=on",
        mode: Mode::Deterministic,
        judge: |b| {
            sysbench_ok(b)?;
            // Every CPU ended up running one spinner although idle CPUs only balance when kicked.
            spread_one_per_cpu(b)
        },
    },
    Case {
        name: "sleep/wake ping-pong: no lost wakeups, wakees placed on idle CPUs",
        args: "scenario=pingpong pairs=4 rounds=1000",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "pingpong: OK")?;
            // 8 threads, at most 4 runnable once started, on 8 CPUs: the wakeup fast path
            // (wake_affine, select_idle_sibling) must find every wakee an idle CPU, its
            // previous one but while the start shares a CPU (`PINGPONG_MAX_MOVED`). Of the
            // 8000 unparks a few find the partner not parked yet and leave a token instead.
            let (wakeups, idle, moved) = wakee_placement(b)?;
            if wakeups < PINGPONG_MIN_WAKEUPS {
                return Err(format!("only {wakeups} wakeups of {PINGPONG_UNPARKS} unparks"));
            }
            if idle != wakeups || moved > PINGPONG_MAX_MOVED {
                return Err(format!("{wakeups} wakeups: {idle} onto an idle CPU, {moved} moved"));
            }
            Ok(())
        },
    },
    Case {
        name: "latency A/B, CFS then EEVDF in one boot: short slices wake sooner under EEVDF only",
        args: "scenario=latency hz=1000",
        mode: Mode::Deterministic,
        judge: latency_ab,
    },
    Case {
        name: "sleep/wake ping-pong (parallel)",
        args: "scenario=pingpong pairs=12 rounds=2000 watchdog=2500",
        mode: Mode::Parallel,
        judge: pingpong_ok,
    },
    Case {
        name: "spread from one CPU: 8 spinners woken on CPU 0 end one per CPU",
        args: "scenario=wakeone threads=8 events=1000 nohz=on",
        mode: Mode::Deterministic,
        judge: wakeone_ok,
    },
    Case {
        name: "affinity: pinned threads never leave their CPUs, the rest spread",
        args: "scenario=affinity",
        mode: Mode::Deterministic,
        judge: affinity_spread,
    },
    Case {
        // Tickless: idle CPUs are balanced only through nohz kicks, and a CPU that is the
        // only tickless one must keep being kicked, or it idles for the whole run.
        name: "affinity, tickless idle: the rest spread through nohz kicks",
        args: "scenario=affinity nohz=on",
        mode: Mode::Deterministic,
        judge: affinity_spread,
    },
    Case {
        name: "affinity (parallel)",
        args: "scenario=affinity watchdog=2500",
        mode: Mode::Parallel,
        judge: affinity_ok,
    },
    Case {
        name: "affinity, tickless idle (parallel)",
        args: "scenario=affinity nohz=on watchdog=2500",
        mode: Mode::Parallel,
        judge: affinity_ok,
    },
    Case {
        name: "nice: two nice levels share one CPU in the weight ratio",
        args: "scenario=nice",
        mode: Mode::Deterministic,
        judge: nice_ok,
    },
    Case {
        name: "churn: 10000 spawn/exit/park/wake/yield operations, nothing lost",
        args: "scenario=churn ops=10000 seed=1 watchdog=2500",
        mode: Mode::Parallel,
        judge: churn_ok,
    },
    Case {
        // 200 000 operations spawn far more threads than there are serial numbers, which
        // are recycled.
        name: "churn: 200000 operations, past any fixed count of serial numbers",
        args: "scenario=churn ops=200000 seed=2",
        mode: Mode::Deterministic,
        judge: churn_ok,
    },
    Case {
        name: "a hung CPU is caught by the watchdog",
        args: "scenario=hang cpu=3",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_WATCHDOG)?;
            has(b, "watchdog: CPU 3 hung")
        },
    },
    Case {
        // One busy vCPU, the other seven idle in wfi for many watchdog periods (0.1 s here):
        // under icount their ticks wait while the busy one runs, which is not a hang.
        name: "idle CPUs whose ticks icount holds back are not taken for hung",
        args: "scenario=sysbench threads=1 events=400 maxprime=20000 watchdog=25",
        mode: Mode::Deterministic,
        judge: sysbench_ok,
    },
    Case {
        // Core calls from thread context while ticks (1000 HZ) take the same locks: each
        // must mask IRQs, or a tick on its own CPU spins on the lock it holds.
        name: "core calls from threads while ticks take the same locks",
        args: "scenario=corecalls rounds=1000000 hz=1000 watchdog=10000",
        mode: Mode::Parallel,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "calls returned -> OK")
        },
    },
    Case {
        name: "switch tracing logs every context switch on every CPU, and failed balance attempts",
        args: "scenario=affinity trace=on",
        mode: Mode::Deterministic,
        judge: |b| {
            affinity_ok(b)?;
            // (The CPUs beside the pinned threads' try to pull them and cannot: those attempts
            // fail however the run's timing falls.)
            has(b, "trace: balance-failed cpu=")?;
            let cpus: std::collections::BTreeSet<&str> = b
                .lines
                .iter()
                .filter_map(|l| l.split("trace: switch cpu=").nth(1)?.split_whitespace().next())
                .collect();
            if cpus.len() == 8 {
                Ok(())
            } else {
                Err(format!("switches traced on {} CPUs, want 8", cpus.len()))
            }
        },
    },
    Case {
        name: "panic on CPU 5 is reported and fails the run",
        args: "scenario=panic cpu=5",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_PANIC)?;
            has(b, "PANIC on CPU 5")
        },
    },
    Case {
        name: "a thread that recurses past its stack is caught by the canary check",
        args: "scenario=fault fault=stack cpu=3",
        mode: Mode::Deterministic,
        judge: stack_overflow_caught,
    },
    Case {
        name: "a bad boot parameter is one clear error and a distinct exit code",
        args: "scenario=sysbench threads=0",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_BAD_ARGS)?;
            has(b, r#"error: bad argument "threads=0""#)
        },
    },
    Case {
        name: "a key only another scenario reads is refused, not ignored",
        args: "scenario=affinity seed=1 threads=4",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_BAD_ARGS)?;
            has(b, r#"error: bad argument "threads=4": the chosen scenario does not read this key"#)
        },
    },
    Case {
        name: "a key given twice is refused, not the last one taken",
        args: "scenario=sysbench watchdog=7 scenario=boot",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_BAD_ARGS)?;
            has(b, r#"error: bad argument "scenario=boot": a key given twice (each at most once)"#)
        },
    },
    Case {
        name: "a feature switch named twice is refused, not the last one taken",
        args: "scenario=boot features=UTIL_EST,NO_UTIL_EST",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_BAD_ARGS)?;
            has(
                b,
                r#"error: bad argument "features=UTIL_EST,NO_UTIL_EST": a feature switch named twice (as X or NO_X) in the features list"#,
            )
        },
    },
];

/// The microcontroller's cases (one Cortex-M4 core, 8 threads of 2 KiB, SysTick at 250 and
/// 1000 HZ): what fits one core, judged as on the 8-CPU machines.
pub(super) const MCU_CASES: &[Case] = &[
    Case {
        name: "boot: the CPU online, ticking, an IPI to itself (PendSV)",
        args: "scenario=boot",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "boot: OK (1 CPUs")
        },
    },
    Case {
        name: "sysbench-like: 4 threads share one CPU, every event once",
        args: "scenario=sysbench threads=4 events=1000",
        mode: Mode::Deterministic,
        judge: sysbench_ok,
    },
    Case {
        name: "nice: two nice levels share the CPU in the weight ratio (250 HZ)",
        args: "scenario=nice threads=4",
        mode: Mode::Deterministic,
        judge: nice_ok,
    },
    Case {
        name: "nice: the same at 1000 HZ",
        args: "scenario=nice threads=4 hz=1000",
        mode: Mode::Deterministic,
        judge: nice_ok,
    },
    Case {
        name: "sleep/wake ping-pong: no lost wakeups",
        args: "scenario=pingpong pairs=3 rounds=1000",
        mode: Mode::Deterministic,
        judge: pingpong_ok,
    },
    Case {
        name: "churn: 10000 spawn/exit/park/wake/sleep/yield operations, nothing lost",
        args: "scenario=churn ops=10000 seed=1",
        mode: Mode::Deterministic,
        judge: churn_ok,
    },
    Case {
        name: "churn (parallel)",
        args: "scenario=churn ops=10000 seed=2",
        mode: Mode::Parallel,
        judge: churn_ok,
    },
    Case {
        name: "a panic is reported and fails the run",
        args: "scenario=panic",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_PANIC)?;
            has(b, "PANIC on CPU 0")
        },
    },
    Case {
        name: "a fault (undefined instruction) is reported and fails the run",
        args: "scenario=fault",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_PANIC)?;
            has(b, "unhandled synchronous exception")
        },
    },
    Case {
        name: "a thread that recurses past its stack is caught by the canary check",
        args: "scenario=fault fault=stack",
        mode: Mode::Deterministic,
        judge: stack_overflow_caught,
    },
    Case {
        name: "a bad boot parameter is one clear error and a distinct exit code",
        args: "scenario=sysbench threads=7",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_BAD_ARGS)?;
            has(b, r#"error: bad argument "threads=7""#)
        },
    },
    Case {
        name: "tickless idle is refused: SysTick is the clock",
        args: "scenario=boot nohz=on",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_BAD_ARGS)?;
            has(b, r#"error: bad argument "nohz=on""#)
        },
    },
    Case {
        name: "the latency A/B is refused: a microcontroller's core has no EEVDF",
        args: "scenario=latency",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_BAD_ARGS)?;
            has(b, "this kernel has no EEVDF")
        },
    },
    Case {
        name: "EEVDF is refused, not ignored: a microcontroller's core has no such switch",
        args: "scenario=boot features=EEVDF",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_BAD_ARGS)?;
            has(b, r#"error: bad argument "features=EEVDF""#)
        },
    },
    Case {
        name: "task groups are refused: a microcontroller's core is built without them",
        args: "scenario=groups",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_BAD_ARGS)?;
            has(b, "this kernel has no task groups")
        },
    },
    Case {
        name: "the defaults fit the thread pool: pingpong's pairs are 3 here",
        args: "scenario=pingpong rounds=200",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "pingpong: 3 pairs")
        },
    },
    Case {
        name: "affinity is refused: its 14 spinners do not fit the pool of 8 threads",
        args: "scenario=affinity",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_BAD_ARGS)?;
            has(b, r#"error: bad argument "scenario=affinity": it runs 15 threads"#)
        },
    },
];

/// The dual Cortex-M33's cases: two CPUs with the load balancer, judged as on aarch64.
pub(super) const DUAL_MCU_CASES: &[Case] = &[
    Case {
        name: "boot: both cores online, ticking, IPIs both ways (MHU)",
        args: "scenario=boot",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "boot: OK (2 CPUs")
        },
    },
    Case {
        name: "boot (parallel)",
        args: "scenario=boot watchdog=2500",
        mode: Mode::Parallel,
        judge: |b| {
            exit_is(b, 0)?;
            has(b, "boot: OK (2 CPUs")
        },
    },
    // The spinner cases run in parallel mode: under `-icount`, once core 1 gives up its slice
    // inside a handler (a `yield` on a lock or on leaving idle) while core 0 runs a busy
    // thread, QEMU's an521 stops running core 1 until core 0 halts, so a deterministic run
    // can show a spinner switched in on core 1 that never ran (0 events), or core 1's
    // balancer frozen before the threads were widened. Each thread must have worked.
    Case {
        name: "spread: 2 spinners end up one per core, spread time recorded",
        args: "scenario=sysbench threads=2 events=1000 seed=1 watchdog=2500",
        mode: Mode::Parallel,
        judge: |b| {
            sysbench_ok(b)?;
            spread_one_per_cpu(b)?;
            every_thread_worked(b)
        },
    },
    Case {
        name: "spread from one CPU: 2 spinners woken on core 0 end one per core",
        args: "scenario=wakeone threads=2 events=1000 watchdog=2500",
        mode: Mode::Parallel,
        judge: |b| {
            wakeone_ok(b)?;
            every_thread_worked(b)
        },
    },
    Case {
        name: "oversubscription: 6 spinners on 2 cores, every event once (parallel)",
        args: "scenario=sysbench threads=6 events=2000 watchdog=2500",
        mode: Mode::Parallel,
        judge: sysbench_ok,
    },
    Case {
        name: "sleep/wake ping-pong across the cores: no lost wakeups",
        args: "scenario=pingpong pairs=3 rounds=1000",
        mode: Mode::Deterministic,
        judge: pingpong_ok,
    },
    Case {
        name: "churn: 10000 operations on two cores, nothing lost",
        args: "scenario=churn ops=10000 seed=1",
        mode: Mode::Deterministic,
        judge: churn_ok,
    },
    Case {
        name: "panic on core 1 is reported and fails the run",
        args: "scenario=panic cpu=1",
        mode: Mode::Deterministic,
        judge: |b| {
            exit_is(b, EXIT_PANIC)?;
            has(b, "PANIC on CPU 1")
        },
    },
    Case {
        name: "a thread on core 1 that recurses past its stack is caught by the canary check",
        args: "scenario=fault fault=stack cpu=1",
        mode: Mode::Deterministic,
        judge: stack_overflow_caught,
    },
];

/// Cases on other machines than 8 flat vCPUs (aarch64): (vCPUs, NUMA nodes, case). The kernel
/// takes 1..=64 CPUs from `-smp` (the wide build above 8) and NUMA nodes from the device tree.
pub(crate) const VCPU_CASES: &[(usize, usize, usize, Case)] = &[
    (
        2,
        0,
        0,
        Case {
            name: "2 vCPUs: 2 spinners end up one per CPU, spread time recorded",
            args: "scenario=sysbench threads=2 events=1000 seed=1",
            mode: Mode::Deterministic,
            judge: |b| {
                sysbench_ok(b)?;
                spread_one_per_cpu(b)?;
                has(b, "machine: 2 CPUs")
            },
        },
    ),
    (
        2,
        0,
        0,
        Case {
            name: "2 vCPUs: clusters larger than the machine are refused",
            args: "scenario=boot clusters=4",
            mode: Mode::Deterministic,
            judge: |b| {
                exit_is(b, EXIT_BAD_ARGS)?;
                has(b, r#"error: bad argument "clusters=4": does not divide the 2 CPUs of a node"#)
            },
        },
    ),
    (
        16,
        0,
        0,
        Case {
            name: "16 vCPUs in 4x4 clusters: 16 spinners end up one per CPU",
            args: "scenario=sysbench threads=16 events=1000 clusters=4 seed=1",
            mode: Mode::Deterministic,
            judge: |b| {
                sysbench_ok(b)?;
                spread_one_per_cpu(b)?;
                has(b, "machine: 16 CPUs")
            },
        },
    ),
    (
        16,
        0,
        0,
        Case {
            name: "16 vCPUs: 24 spinners, every event once",
            args: "scenario=sysbench threads=24 events=2000 watchdog=2500",
            mode: Mode::Parallel,
            judge: sysbench_ok,
        },
    ),
    (
        8,
        2,
        0,
        Case {
            name: "NUMA: 2 nodes of 4 vCPUs from the device tree, 8 spinners end up one per CPU",
            args: "scenario=sysbench threads=8 events=1000 seed=1",
            mode: Mode::Deterministic,
            judge: |b| {
                sysbench_ok(b)?;
                has(b, "machine: 2 NUMA nodes of 4 CPUs")?;
                spread_one_per_cpu(b)
            },
        },
    ),
    (
        8,
        0,
        4,
        Case {
            name: "clusters from the device tree's cpu-map (-smp 8,clusters=2,cores=4): 8 spinners end up one per CPU",
            args: "scenario=sysbench threads=8 events=1000 seed=1",
            mode: Mode::Deterministic,
            judge: |b| {
                sysbench_ok(b)?;
                has(b, "machine: 2 clusters of 4 CPUs from the device tree's cpu-map")?;
                spread_one_per_cpu(b)
            },
        },
    ),
    (
        8,
        2,
        2,
        Case {
            name: "NUMA with clusters: 2 nodes, cpu-map clusters of 2 inside them, 8 spinners end up one per CPU",
            args: "scenario=sysbench threads=8 events=1000 seed=1",
            mode: Mode::Deterministic,
            judge: |b| {
                sysbench_ok(b)?;
                has(b, "machine: 2 NUMA nodes of 4 CPUs")?;
                has(b, "machine: 4 clusters of 2 CPUs from the device tree's cpu-map")?;
                spread_one_per_cpu(b)
            },
        },
    ),
];

/// Cases of riscv64 alone, after the shared ones.
pub(super) const RISCV_CASES: &[Case] = &[Case {
    name:
        "a hart sent to the kernel's boot entry (OpenSBI's race under parallel mode) is released as its CPU",
    args: "scenario=boot entry_race=on",
    mode: Mode::Deterministic,
    judge: |b| {
        exit_is(b, 0)?;
        has(b, "hart 1 came to the kernel's entry by itself; it runs as CPU 1")?;
        has(b, "boot: OK (8 CPUs")
    },
}];

/// The suite's cases for `arch`.
pub(crate) fn cases(arch: Arch) -> Vec<&'static Case> {
    let (shared, own): (&[Case], &[Case]) = match arch {
        Arch::Aarch64 => (CASES, &[]),
        Arch::Riscv64 => (CASES, RISCV_CASES),
        Arch::CortexM4 => (MCU_CASES, &[]),
        Arch::CortexM33 => (DUAL_MCU_CASES, &[]),
    };
    shared.iter().chain(own).collect()
}

/// Long runs (`cargo xtest --long`): the churn and ping-pong scenarios at sizes that take
/// minutes, in both modes, with nothing lost.
pub const LONG_CASES: &[Case] = &[
    Case {
        name: "churn: 10^6 operations, nothing lost",
        args: "scenario=churn ops=1000000 seed=3",
        mode: Mode::Deterministic,
        judge: churn_ok,
    },
    Case {
        name: "churn: 10^6 operations, nothing lost",
        args: "scenario=churn ops=1000000 seed=4 watchdog=2500",
        mode: Mode::Parallel,
        judge: churn_ok,
    },
    Case {
        name: "ping-pong: 28 pairs x 10^5 round trips, no lost wakeup",
        args: "scenario=pingpong pairs=28 rounds=100000",
        mode: Mode::Deterministic,
        judge: pingpong_ok,
    },
    Case {
        name: "ping-pong: 28 pairs x 10^5 round trips, no lost wakeup",
        args: "scenario=pingpong pairs=28 rounds=100000 watchdog=2500",
        mode: Mode::Parallel,
        judge: pingpong_ok,
    },
];
