//! A platform clock whose readings jump by years (a broken counter) times a newly idle balance
//! pass at ages. The pass's cost is capped, so the decay of the costs a second later and the sums of
//! them cannot overflow (in a debug build, a panic).

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use sched_core::{CpuMask, Features, Platform, Smp, TaskParams};
use sched_testkit::{run_cpu, MS};

/// How far the clock runs from one reading to the next: 2^59 ns, 18 years.
const JUMP_NS: u64 = 1 << 59;

/// Runs [`JUMP_NS`] a reading (wrapping around every 32).
struct Jumpy {
    readings: AtomicU64,
}

impl Platform for Jumpy {
    type Payload = ();
    fn resched_cpu(&self, _cpu: usize) {}
    fn clock_ns(&self) -> Option<u64> {
        Some(self.readings.fetch_add(1, SeqCst).wrapping_mul(JUMP_NS))
    }
}

#[test]
fn a_clock_that_jumps_while_a_pass_is_timed_overflows_nothing() {
    let m: Box<Smp<Jumpy, 2, 8, 8>> =
        Box::new(Smp::new(Jumpy { readings: AtomicU64::new(0) }, Features::default(), 250));
    m.init_with(|t| t.init_flat(2)).unwrap();
    let mut now = MS;
    // Two spinners on CPU 0 (an overloaded CPU, so CPU 1 balances as it goes idle), a sleeper
    // on CPU 1.
    let on = |cpu| TaskParams { affinity: CpuMask::single(cpu), ..TaskParams::default() };
    let busy: Vec<_> = (0..2).map(|_| m.create(0, now, on(0)).unwrap()).collect();
    let sleeper = m.create(1, now, on(1)).unwrap();
    for cpu in 0..2 {
        run_cpu(&m, cpu, now);
    }
    // CPU 1's task blocks and wakes every 4 ms, so CPU 1 goes newly idle and balances, timed
    // by the jumping clock. Three seconds of it: the costs decay each second.
    for step in 0..750 {
        now += 4 * MS;
        for cpu in 0..2 {
            m.tick(cpu, now).unwrap();
            if m.need_resched(cpu) {
                run_cpu(&m, cpu, now);
            }
        }
        if m.current(1) == Some(sleeper) {
            m.block(1, now, sleeper).unwrap();
            run_cpu(&m, 1, now);
        } else if step % 2 == 0 && m.task_cpu(sleeper).is_ok() {
            let _ = m.wake(1, now, sleeper);
        }
    }
    assert!(
        m.platform().readings.load(SeqCst) >= 2,
        "the clock was read (the cost below tells a newly idle pass)"
    );
    // Capped at a second, and decayed since.
    let cost = m.balance_state(1).unwrap().domains[0].max_newidle_lb_cost;
    assert!((1..=1_000_000_000).contains(&cost), "cost {cost} ns");
    assert!(busy.iter().all(|&t| m.state(t).is_ok()));
    m.check_invariants().unwrap();
}
