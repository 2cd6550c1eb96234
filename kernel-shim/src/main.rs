//! kernel-shim: an SMP aarch64 kernel for QEMU `virt` that runs sched-core through its porter's API.
//!
//! CPU 0 reads the device tree (CPU count, PSCI method, command line), sets up the
//! scheduler, the GIC and its timer, starts the other CPUs with PSCI CPU_ON and creates the
//! scenario's main thread. Every CPU then idles in `wfi`; its timer tick and reschedule SGIs
//! drive the core, and the exception path switches to whatever thread the core picks.

#![no_std]
#![no_main]
#![deny(unsafe_code)]

pub mod arch;
pub mod log;
pub mod scenario;
pub mod sched;

use arch::MAX_CPUS;
use scenario::{Config, EXIT_BAD_ARGS, EXIT_MACHINE};

/// CPU 0 after the boot code: stack, BSS and vectors are set up, IRQs masked.
pub fn kmain() -> ! {
    kprintln!("kernel-shim: CPU 0 at EL1, counter {} Hz", arch::counter_freq());
    let fdt = match arch::device_tree() {
        Ok(f) => f,
        Err(e) => {
            defmt::error!("error: no device tree at 0x4000_0000: {}", defmt::Debug2Format(&e));
            arch::exit(EXIT_MACHINE);
        }
    };
    let mut mpidrs = [0u64; MAX_CPUS];
    let mut listed = 0;
    for cpu in fdt.cpus() {
        if listed < MAX_CPUS {
            mpidrs[listed] = cpu.ids().first() as u64;
        }
        listed += 1;
    }
    let n = listed.min(MAX_CPUS);
    if n == 0 {
        defmt::error!("error: the device tree lists no CPUs");
        arch::exit(EXIT_MACHINE);
    }
    if listed > MAX_CPUS {
        defmt::warn!(
            "warning: the device tree lists {} CPUs; this kernel drives the first {}",
            listed,
            MAX_CPUS
        );
    }
    let method = fdt.find_node("/psci").and_then(|p| p.property("method")).and_then(|m| m.as_str());
    let use_smc = match method {
        Some("hvc") => false,
        Some("smc") => true,
        other if n > 1 => {
            defmt::error!("error: /psci method {:?}: cannot start secondary CPUs", other);
            arch::exit(EXIT_MACHINE);
        }
        _ => false,
    };
    // The raw property: the fdt crate's `bootargs()` answers None both when there is none and
    // when it is not UTF-8, and a malformed line must be refused, not read as empty.
    let raw = fdt.find_node("/chosen").and_then(|c| c.property("bootargs")).map_or(&[][..], |p| p.value);
    let raw = raw.strip_suffix(&[0]).unwrap_or(raw);
    let bootargs = match core::str::from_utf8(raw) {
        Ok(s) => s,
        Err(e) => {
            defmt::error!("error: the boot line is not UTF-8 (byte {} of {})", e.valid_up_to(), raw.len());
            arch::exit(EXIT_BAD_ARGS);
        }
    };
    kprintln!("dtb: {} CPUs, psci method {}, bootargs \"{}\"", n, method.unwrap_or("-"), bootargs);
    let mut bad = "";
    let cfg = match Config::parse(bootargs, &mut bad) {
        Ok(c) => c,
        Err(e) => {
            defmt::error!("error: bad argument \"{}\": {}", bad, defmt::Display2Format(&e));
            arch::exit(EXIT_BAD_ARGS);
        }
    };
    sched::select_hz(cfg.hz);
    let k = cfg.clusters as usize;
    if k != 0 && k < n && n % k != 0 {
        // Clusters of k CPUs would leave n mod k CPUs out of every domain.
        defmt::error!("error: bad argument \"clusters={}\": does not divide the {} CPUs", k, n);
        arch::exit(EXIT_BAD_ARGS);
    }
    let build = |t: &mut sched_core::Topology<{ arch::MAX_CPUS }>| {
        if k == 0 || k >= n {
            t.init_flat(n)
        } else {
            t.init_clusters(n / k, k)
        }
    };
    let topo = sched::with_core(|smp| smp.init_with(build));
    if let Err(e) = topo {
        defmt::error!("error: topology for {} CPUs: {}", n, defmt::Debug2Format(&e));
        arch::exit(EXIT_MACHINE);
    }
    sched::with_core(|smp| smp.set_features(cfg.features));
    sched::set_nohz(cfg.nohz);
    if let Err(e) = arch::gic_init_global(n).and_then(|()| arch::gic_init_cpu(0, &sched::SGIS)) {
        defmt::error!("error: GIC: {}", e);
        arch::exit(EXIT_MACHINE);
    }
    sched::set_mpidrs(&mpidrs[..n]);
    sched::set_skew(cfg.skew, n);
    sched::arm_tick(0);
    sched::cpu_online(0);
    for (i, &mpidr) in mpidrs.iter().enumerate().take(n).skip(1) {
        if let Err(e) = arch::psci_cpu_on(use_smc, mpidr, i) {
            defmt::error!(
                "error: PSCI CPU_ON of CPU {} (MPIDR {=u64:#x}): {}",
                i,
                mpidr,
                defmt::Debug2Format(&e)
            );
            arch::exit(EXIT_MACHINE);
        }
    }
    // The scheduler counts n CPUs: start work only once all of them take interrupts.
    let deadline = arch::now_ns() + 2_000_000_000;
    while sched::online() < n {
        if arch::now_ns() > deadline {
            defmt::error!("error: only {} of {} CPUs came online", sched::online(), n);
            arch::exit(EXIT_MACHINE);
        }
        arch::relax();
    }
    kprintln!("all {} CPUs online at {} us", n, arch::now_ns() / 1000);
    kprintln!(
        "scenario {}, hz={}, nohz={}, features {}",
        defmt::Debug2Format(&cfg.scenario),
        cfg.hz,
        cfg.nohz,
        defmt::Debug2Format(&cfg.features)
    );
    scenario::start(&cfg, n);
    idle()
}

/// A secondary CPU after the boot code (PSCI context id = `cpu`).
pub fn secondary_main(cpu: usize) -> ! {
    if let Err(e) = arch::gic_init_cpu(cpu, &sched::SGIS) {
        defmt::error!("error: GIC on CPU {}: {}", cpu, e);
        arch::exit(EXIT_MACHINE);
    }
    sched::arm_tick(cpu);
    sched::cpu_online(cpu);
    idle()
}

/// The idle loop: everything happens in interrupts.
fn idle() -> ! {
    arch::irq_enable();
    loop {
        sched::idle_wait();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let _irq = arch::IrqGuard::mask();
    match info.location() {
        Some(l) => {
            defmt::error!(
                "PANIC on CPU {} at {}:{}: {}",
                arch::cpu_id(),
                l.file(),
                l.line(),
                defmt::Display2Format(&info.message())
            )
        }
        None => defmt::error!("PANIC on CPU {}: {}", arch::cpu_id(), defmt::Display2Format(&info.message())),
    }
    arch::exit(101)
}
