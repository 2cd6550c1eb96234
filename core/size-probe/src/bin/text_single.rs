//! The one-CPU machine with 8 tasks, as a bare-metal image whose `.text` `cargo xsize`
//! measures: create, block, wake, tick, schedule, yield, renice and exit. The machine is a
//! `static` set up in place, as a microcontroller port keeps it.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod image {
    use sched_core::{Features, NoPlatform, SingleCpu, TaskParams, Tunables};

    static CPU: SingleCpu<NoPlatform, 8, 8> = SingleCpu::empty(NoPlatform);

    /// The entry point: drives the machine so that nothing is optimised away.
    #[no_mangle]
    pub extern "C" fn _start() -> ! {
        let _ = CPU.init(1024, Tunables::for_cpus(1), Features::DEFAULT);
        let mut now = 1u64;
        loop {
            now += 4_000_000;
            let t = CPU.create(now, TaskParams::default());
            if CPU.tick(now) {
                CPU.schedule(now);
            }
            if let Ok(t) = t {
                let _ = CPU.set_nice(now, t, (now % 40) as i32 - 20);
                let _ = CPU.block(now, t);
                let _ = CPU.wake(now, t);
                CPU.yield_now(now);
                let _ = CPU.exit(now, t);
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
