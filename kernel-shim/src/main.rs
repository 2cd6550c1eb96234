//! kernel-shim: an SMP kernel for QEMU `virt` (aarch64 and riscv64) and two Cortex-M boards
//! (`mps2-an386`, `mps2-an521`) that runs sched-core through its porter's API.
//!
//! CPU 0 (the boot CPU) reads the machine's description (the device tree, or on a
//! microcontroller what the port knows and the boot line from semihosting), sets up the machine
//! (`arch`), the scheduler and its tick, starts the other CPUs and creates the scenario's
//! main thread. Every CPU then idles in `wfi`; its timer tick and reschedule IPIs drive the
//! core, and the exception path switches to whatever thread the core picks.

#![no_std]
#![no_main]
#![deny(unsafe_code)]
// Every name a module uses is named where it is imported.
#![deny(clippy::wildcard_imports)]
// Per-CPU indices are clamped with `.min(MAX_CPUS - 1)`; on a one-CPU machine that is always
// 0, which clippy points out, but the clamp is what keeps the same code right on 8 CPUs.
#![cfg_attr(target_arch = "arm", allow(clippy::unnecessary_min_or_max))]

pub mod arch;
pub mod devicetree;
pub mod log;
pub mod scenario;
pub mod sched;
pub mod topology;

use arch::MAX_CPUS;
use scenario::{Config, EXIT_BAD_ARGS, EXIT_MACHINE};

/// CPU 0 (the boot CPU) after the boot code: stack, BSS and trap vectors are set up,
/// interrupts masked.
pub fn kmain() -> ! {
    let firmware = match arch::firmware() {
        Ok(f) => f,
        Err(e) => {
            defmt::error!("error: no machine description: {}", e);
            arch::exit(EXIT_MACHINE);
        }
    };
    let fdt = match &firmware {
        arch::Firmware::DeviceTree(fdt) => Some(fdt),
        arch::Firmware::Fixed { .. } => None,
    };
    // The CPUs' hardware ids, the boot CPU's first: it is CPU 0 whatever its id (OpenSBI
    // boots a riscv64 machine on any hart). What the device tree says of each CPU too: its
    // NUMA node (`-numa node,...`), capacity and phandle (which the cpu-map names).
    let me = arch::hw_id(0);
    let mut ids = [me; MAX_CPUS];
    let mut info = [topology::CpuInfo::default(); MAX_CPUS];
    let (mut n, mut listed, mut found) = (1, 0, false);
    // `false`: the id was listed before (a damaged description), and nothing is added.
    let mut add = |id: u64, cpu: topology::CpuInfo| {
        if (id == me && found) || ids[1..n].contains(&id) {
            return false;
        }
        listed += 1;
        if id == me {
            found = true;
            info[0] = cpu;
        } else if n < MAX_CPUS {
            ids[n] = id;
            info[n] = cpu;
            n += 1;
        }
        true
    };
    match &firmware {
        arch::Firmware::DeviceTree(fdt) => {
            let Some(cpus) = fdt.find("/cpus") else {
                defmt::error!("error: the device tree has no /cpus node");
                arch::exit(EXIT_MACHINE);
            };
            // A CPU's id is its `reg`, #address-cells of /cpus wide (2 where unsaid).
            let cells = cpus.property("#address-cells").and_then(|p| p.as_usize()).unwrap_or(2);
            for cpu in cpus.children().filter(|c| c.base_name() == "cpu") {
                let Some(id) = cpu.property("reg").and_then(|p| p.cells(cells)) else {
                    defmt::error!("error: the device tree's {=str} has no usable reg", cpu.name);
                    arch::exit(EXIT_MACHINE);
                };
                // A CPU whose status is not "okay" is not there to run (firmware marks a
                // hart it could not bring up "fail"), unless it is the one running this.
                let status = cpu.property("status").map(|p| p.as_str().unwrap_or("?"));
                if status.is_some_and(|s| s != "okay" && s != "ok") {
                    if id == me {
                        defmt::error!(
                            "error: the device tree marks the boot CPU {=str} unavailable",
                            cpu.name
                        );
                        arch::exit(EXIT_MACHINE);
                    }
                    continue;
                }
                // Absent is allowed; present, each is one number (a capacity above 0), and a
                // value that is not is refused rather than read as absent.
                let prop = |name: &str| match cpu.property(name) {
                    None => None,
                    Some(p) => match p.as_usize() {
                        Some(v) if v > 0 || name != "capacity-dmips-mhz" => Some(v),
                        _ => {
                            defmt::error!(
                                "error: the device tree's {=str} has a malformed {=str}",
                                cpu.name,
                                name
                            );
                            arch::exit(EXIT_MACHINE);
                        }
                    },
                };
                let described = topology::CpuInfo {
                    node: prop("numa-node-id"),
                    dmips: prop("capacity-dmips-mhz"),
                    phandle: prop("phandle"),
                    cluster: None,
                };
                if !add(id, described) {
                    defmt::error!(
                        "error: the device tree lists hardware id {=u64:#x} twice (again as {=str})",
                        id,
                        cpu.name
                    );
                    arch::exit(EXIT_MACHINE);
                }
            }
        }
        arch::Firmware::Fixed { cpus, .. } => {
            // A board's own fixed list: no id twice.
            cpus.iter().for_each(|&id| {
                add(id, topology::CpuInfo::default());
            })
        }
    }
    if !found {
        defmt::error!("error: the machine description does not list the boot CPU ({=u64:#x})", me);
        arch::exit(EXIT_MACHINE);
    }
    if listed > MAX_CPUS {
        defmt::warn!("warning: the machine has {} CPUs; this kernel drives the first {}", listed, MAX_CPUS);
    }
    if let Err(e) = arch::machine_init(fdt, n) {
        defmt::error!("error: machine set-up: {}", e);
        arch::exit(EXIT_MACHINE);
    }
    kprintln!("kernel-shim: {} on CPU {=u64:#x}, counter {} Hz", arch::NAME, me, arch::counter_freq());
    // The raw property: the fdt crate's `bootargs()` answers None both when there is none and
    // when it is not UTF-8, and a malformed line must be refused, not read as empty.
    let raw = match &firmware {
        arch::Firmware::DeviceTree(fdt) => {
            fdt.find("/chosen").and_then(|c| c.property("bootargs")).map_or(&[][..], |p| p.value)
        }
        arch::Firmware::Fixed { bootargs: Some(bootargs), .. } => bootargs,
        arch::Firmware::Fixed { bootargs: None, .. } => {
            defmt::error!(
                "error: the boot line could not be read (the semihosting call refused it: too long?)"
            );
            arch::exit(EXIT_BAD_ARGS);
        }
    };
    let raw = raw.strip_suffix(&[0]).unwrap_or(raw);
    let bootargs = match core::str::from_utf8(raw) {
        Ok(s) => s,
        Err(e) => {
            defmt::error!("error: the boot line is not UTF-8 (byte {} of {})", e.valid_up_to(), raw.len());
            arch::exit(EXIT_BAD_ARGS);
        }
    };
    kprintln!("machine: {} CPUs, bootargs \"{}\"", n, bootargs);
    let mut bad = "";
    let cfg = match Config::parse(bootargs, &mut bad) {
        Ok(c) => c,
        Err(e) => {
            defmt::error!("error: bad argument \"{}\": {}", bad, defmt::Display2Format(&e));
            arch::exit(EXIT_BAD_ARGS);
        }
    };
    sched::select_hz(cfg.hz);
    // The runner loads a program into the port's window; on a machine whose memory ends
    // before it, reading the window would fault.
    if let (scenario::Scenario::Program, Some(fdt), Some(base)) = (cfg.scenario, fdt, arch::PROGRAM_WINDOW) {
        let len = arch::PROGRAM_BYTES as u64;
        if !fdt.ram_holds(base as u64, len) {
            defmt::error!(
                "error: the machine's memory (/memory) does not hold the program window {=u64:#x}..{=u64:#x} (QEMU: -m 256M or more)",
                base as u64,
                base as u64 + len
            );
            arch::exit(EXIT_MACHINE);
        }
    }
    if cfg.nohz && !arch::TICKLESS {
        // A port whose tick is periodic (Cortex-M's SysTick) does not stop it.
        defmt::error!("error: bad argument \"nohz=on\": this machine's tick cannot stop");
        arch::exit(EXIT_BAD_ARGS);
    }
    if let arch::Firmware::DeviceTree(fdt) = &firmware {
        // (Refused even with `clusters=`, which overrides the map: the tree is wrong.)
        match topology::read_cpu_map(fdt, &mut info[..n]) {
            Ok(()) => {}
            Err(topology::CpuMapError::NamedTwice { cpu }) => {
                defmt::error!("error: the device tree's cpu-map names hardware id {=u64:#x} twice", ids[cpu]);
                arch::exit(EXIT_MACHINE);
            }
        }
    }
    let layout = match topology::Layout::new(&info[..n], cfg.clusters as usize, &cfg.capacity) {
        Ok(layout) => layout,
        Err(topology::LayoutError::Clusters { k, per }) => {
            // Clusters of k CPUs would leave CPUs out of every domain.
            defmt::error!(
                "error: bad argument \"clusters={}\": does not divide the {} CPUs of a node",
                k,
                per
            );
            arch::exit(EXIT_BAD_ARGS);
        }
        Err(topology::LayoutError::Capacities { given, cpus }) => {
            defmt::error!("error: bad argument \"capacity=\": {} values for {} CPUs", given, cpus);
            arch::exit(EXIT_BAD_ARGS);
        }
        Err(topology::LayoutError::Nodes) => {
            defmt::error!("error: the device tree's NUMA nodes are uneven or miss CPUs");
            arch::exit(EXIT_MACHINE);
        }
        Err(topology::LayoutError::CpuMap) => {
            defmt::error!("error: the device tree's cpu-map leaves some CPUs out of every cluster");
            arch::exit(EXIT_MACHINE);
        }
    };
    if layout.nodes() > 1 {
        kprintln!("machine: {} NUMA nodes of {} CPUs", layout.nodes(), n / layout.nodes());
    }
    if layout.cluster_source == topology::ClusterSource::CpuMap && layout.clusters() > 0 {
        match layout.cluster_size() {
            0 => kprintln!(
                "machine: {} clusters of unequal sizes from the device tree's cpu-map",
                layout.clusters()
            ),
            k => kprintln!(
                "machine: {} clusters of {} CPUs from the device tree's cpu-map",
                layout.clusters(),
                k
            ),
        }
    }
    if layout.asymmetric() {
        let from = match layout.capacity_source {
            topology::CapacitySource::BootLine => "the boot line",
            _ => "the device tree's capacity-dmips-mhz",
        };
        kprintln!("machine: CPU capacities {=[?]} from {=str}", layout.capacities(), from);
    }
    // The virt boards take the general description; a microcontroller the presets, which it
    // links without the core's topology planner (and without asymmetric capacities).
    #[cfg(not(target_arch = "arm"))]
    let topo = sched::with_core(|smp| smp.init(&layout.desc()));
    #[cfg(target_arch = "arm")]
    let topo = {
        if layout.asymmetric() {
            defmt::error!("error: bad argument \"capacity=\": this build has equal CPUs only");
            arch::exit(EXIT_BAD_ARGS);
        }
        let (c, k) = (layout.clusters(), layout.cluster_size());
        sched::with_core(|smp| smp.init_with(|t| if c == 0 { t.init_flat(n) } else { t.init_clusters(c, k) }))
    };
    if let Err(e) = topo {
        defmt::error!("error: topology for {} CPUs: {}", n, defmt::Debug2Format(&e));
        arch::exit(EXIT_MACHINE);
    }
    sched::with_core(|smp| smp.set_features(cfg.features));
    sched::set_nohz(cfg.nohz);
    if let Err(e) = arch::cpu_init(0, &sched::IPIS) {
        defmt::error!("error: interrupts of CPU 0: {}", e);
        arch::exit(EXIT_MACHINE);
    }
    sched::set_skew(cfg.skew, n);
    sched::arm_tick(0);
    sched::cpu_online(0);
    for (i, &id) in ids.iter().enumerate().take(n).skip(1) {
        if let Err(e) = arch::start_cpu(i, id) {
            defmt::error!("error: starting CPU {} (hardware id {=u64:#x}): {}", i, id, e);
            arch::exit(EXIT_MACHINE);
        }
    }
    // The scheduler counts n CPUs: start work only once all of them take interrupts.
    let deadline = arch::now_ns() + 2_000_000_000;
    while sched::online() < n {
        #[cfg(target_arch = "riscv64")]
        arch::release_parked_cpus(n);
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

/// A secondary CPU after the boot code (`cpu` is the index CPU 0 started it as).
pub fn secondary_main(cpu: usize) -> ! {
    if let Err(e) = arch::cpu_init(cpu, &sched::IPIS) {
        defmt::error!("error: interrupts of CPU {}: {}", cpu, e);
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
