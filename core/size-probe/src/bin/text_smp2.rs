//! A 2-CPU `Smp` with the full balancer, as a bare-metal image whose `.text` `cargo xsize`
//! measures: every life-cycle call, the tick (with the periodic balancer), schedule and
//! finish_switch (with newidle balancing), renice, affinity and exec are reachable from the
//! entry point. Built as a small machine: no default features, so 64-CPU masks and no
//! tickless idle (`nohz`), which a machine that keeps ticking does not need.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod image {
    use sched_core::{CpuMask, Features, NoPlatform, Smp, TaskParams};

    static SMP: Smp<NoPlatform, 2, 16, 16> = Smp::new(NoPlatform, Features::DEFAULT, 250);

    /// The entry point: drives the machine so that nothing is optimised away.
    #[no_mangle]
    pub extern "C" fn _start() -> ! {
        let _ = SMP.init_with(|t| t.init_flat(2));
        let mut now = 1u64;
        let t = SMP.create(0, now, TaskParams::default());
        loop {
            now += 4_000_000;
            for cpu in 0..2 {
                if SMP.tick(cpu, now) == Ok(true) {
                    let _ = SMP.schedule(cpu, now);
                    let _ = SMP.finish_switch(cpu, now);
                }
            }
            if let Ok(t) = t {
                let _ = SMP.set_nice(now, t, (now % 40) as i32 - 20);
                let _ = SMP.set_affinity(now, t, CpuMask::single((now % 2) as usize));
                let _ = SMP.block(0, now, t);
                let _ = SMP.wake(1, now, t);
                let _ = SMP.exec(0, now, t);
            }
            let _ = SMP.yield_now(0, now);
        }
    }

    #[panic_handler]
    fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
        loop {}
    }
}

#[cfg(not(target_os = "none"))]
fn main() {}
