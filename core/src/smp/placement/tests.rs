//! Placement on a 2×4 machine: wake_affine, select_idle_sibling, and affinity.

extern crate std;
use std::boxed::Box;

use super::*;
use crate::{Features, Nice, NoPlatform, Policy, TaskParams};

type M = Smp<NoPlatform, 8, 32, 32>;
const NOW: u64 = 1_000_000_000;

fn machine() -> Box<M> {
    let m: Box<M> = Box::new(Smp::new(NoPlatform, Features::default(), 250));
    m.init_with(|t| t.init_clusters(2, 4)).unwrap();
    for cpu in 0..8 {
        m.schedule(cpu, NOW - 100_000_000 + cpu as u64).unwrap();
    }
    m
}

fn busy(m: &M, cpu: usize) {
    let t =
        m.create(cpu, NOW, TaskParams { affinity: CpuMask::single(cpu), ..TaskParams::default() }).unwrap();
    m.set_affinity(NOW, t, CpuMask::ALL).unwrap();
    m.schedule(cpu, NOW).unwrap();
    m.finish_switch(cpu, NOW).unwrap();
}

fn task(load: u64) -> Entity {
    let mut e = Entity::new(Nice::ZERO, Policy::Normal, CpuMask::ALL, 4);
    e.avg.load_avg = load;
    e
}

#[test]
fn s16_wake_affine_idle() {
    let m = machine();
    busy(&m, 0);
    assert_eq!(m.wake_affine_idle(0, 4, true), Some(0), "sync, waker alone on this CPU");
    assert_eq!(m.wake_affine_idle(0, 4, false), None);
    // This CPU idle and sharing the LLC with prev: prev if idle, else this.
    assert_eq!(m.wake_affine_idle(1, 2, false), Some(2));
    busy(&m, 2);
    assert_eq!(m.wake_affine_idle(1, 2, false), Some(1));
    assert_eq!(m.wake_affine_idle(1, 5, false), None, "no shared cache");
}

#[test]
fn s16_wake_affine_weight() {
    let m = machine();
    busy(&m, 0);
    busy(&m, 4);
    m.inject_rq_pelt(0, 1024, 1024, 1024).unwrap();
    m.inject_rq_pelt(4, 1024, 2048, 2048).unwrap();
    // this_eff = 1536·100·1024 < prev_eff = 1536·112·1024 → this.
    assert_eq!(m.wake_affine_weight(125, 512, 0, 4, false, 0), Some(0));
    m.inject_rq_pelt(0, 1024, 2048, 2048).unwrap();
    m.inject_rq_pelt(4, 1024, 1024, 1024).unwrap();
    assert_eq!(m.wake_affine_weight(125, 512, 0, 4, false, 0), None);
    // Sync: the waker's own load is discounted (or decides outright when heavier).
    assert_eq!(m.wake_affine_weight(125, 512, 0, 4, true, 4096), Some(0));
}

#[test]
fn s16_select_idle_sibling() {
    let m = machine();
    let mut e = task(512);
    e.recent_used_cpu = 0;
    assert_eq!(m.select_idle_sibling(0, &mut e, 4, 5), 5, "idle target");
    busy(&m, 5);
    let got = m.select_idle_sibling(0, &mut e, 5, 5);
    assert!(got != 5 && (4..8).contains(&got), "an idle CPU of the target's LLC: {got}");
    for cpu in [4, 6, 7] {
        busy(&m, cpu);
    }
    assert_eq!(m.select_idle_sibling(0, &mut e, 5, 5), 5, "LLC full: stack on target, A is not looked at");
}

#[test]
fn placement_honours_affinity_when_target_is_elsewhere() {
    let m = machine();
    let mut e = task(0);
    e.affinity = CpuMask::single(6);
    let (cpu, _) =
        m.select_task_rq(0, &mut e, SelectFor::Wake(1), WakeFlags::empty(), Waker::default()).unwrap();
    assert_eq!(cpu, 6);
    let (cpu, _) = m.select_task_rq(0, &mut e, SelectFor::Fork, WakeFlags::FORK, Waker::default()).unwrap();
    assert_eq!(cpu, 6);
}
