//! The one-CPU machine with 8 tasks, as a bare-metal image whose `.text` `cargo xsize`
//! measures: create, block, wake, tick, schedule, yield, renice and exit.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod image {
    use sched_core::{Features, NoPlatform, SingleCpu, TaskParams, Tunables};
    use spin::Once;

    static CPU: Once<spin::Mutex<SingleCpu<NoPlatform, 8, 8>>> = Once::new();

    /// The entry point: drives the machine so that nothing is optimised away.
    #[no_mangle]
    pub extern "C" fn _start() -> ! {
        let cpu = CPU.call_once(|| {
            let s = SingleCpu::new(NoPlatform, 1024, Tunables::for_cpus(1), Features::DEFAULT);
            spin::Mutex::new(s.unwrap_or_else(|_| loop {}))
        });
        let mut now = 1u64;
        loop {
            let mut s = cpu.lock();
            now += 4_000_000;
            let t = s.create(now, TaskParams::default());
            if s.tick(now) {
                s.schedule(now);
            }
            if let Ok(t) = t {
                let _ = s.set_nice(now, t, (now % 40) as i32 - 20);
                let _ = s.block(now, t);
                let _ = s.wake(now, t);
                s.yield_now(now);
                let _ = s.exit(now, t);
            }
        }
    }

    #[panic_handler]
    fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
        loop {}
    }
}

#[cfg(not(target_os = "none"))]
fn main() {}
