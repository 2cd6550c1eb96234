//! The machine set up again while another CPU ticks idle (no task is alive, as init requires):
//! init writes the topology with no other lock held, so a balance pass under way on the
//! ticking CPU, which reads the topology under its balance-state lock, finishes, and init
//! goes on.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use sched_core::{Features, NoPlatform, Smp};

type M = Smp<NoPlatform, 8, 16, 16>;

#[test]
fn init_again_while_an_idle_cpu_balances() {
    let m: Arc<M> = Arc::from(Box::new(Smp::new(NoPlatform, Features::DEFAULT, 1000)));
    m.init_with(|t| t.init_clusters(2, 4)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // CPU 4 ticks idle, 1 ms apart: its balance is due at nearly every tick.
    let ticker = {
        let (m, stop) = (m.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut now = 1_000_000_000u64;
            while !stop.load(Relaxed) {
                now += 1_000_000;
                let _ = m.tick(4, now);
            }
        })
    };
    let (done, finished) = mpsc::channel();
    let m2 = m.clone();
    std::thread::spawn(move || {
        for _ in 0..20_000 {
            m2.init_with(|t| t.init_clusters(2, 4)).unwrap();
        }
        let _ = done.send(());
    });
    // (On a deadlock both threads spin for ever: they are left behind, the test fails.)
    let ok = finished.recv_timeout(Duration::from_secs(60)).is_ok();
    stop.store(true, Relaxed);
    assert!(ok, "init and a balancing CPU deadlocked");
    ticker.join().unwrap();
}
