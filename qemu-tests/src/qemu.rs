//! Getting QEMU, building the kernel, booting it with a scenario and decoding its defmt log.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The machines the kernel is built for: QEMU `virt` on aarch64 and riscv64 (8 vCPUs unless a
/// boot asks for more), and two microcontroller boards (one Cortex-M4, two Cortex-M33).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// aarch64 `virt` with a GICv3 and Cortex-A57s; the kernel at EL1.
    Aarch64,
    /// riscv64 `virt` with OpenSBI as firmware; the kernel in S-mode.
    Riscv64,
    /// A microcontroller: one Cortex-M4F on the `mps2-an386` board, the kernel in Thread mode
    /// and its handlers, with 64 KB of RAM.
    CortexM4,
    /// Two Cortex-M33 on the `mps2-an521` board (an SSE-200, run Secure), 64 KB of RAM.
    CortexM33,
}

impl Arch {
    /// Every machine, in the order the suite runs them.
    pub const ALL: [Arch; 4] = [Arch::Aarch64, Arch::Riscv64, Arch::CortexM4, Arch::CortexM33];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Aarch64 => "aarch64",
            Arch::Riscv64 => "riscv64",
            Arch::CortexM4 => "cortex-m4",
            Arch::CortexM33 => "cortex-m33",
        }
    }

    /// Parses `--arch`'s value.
    pub fn parse(s: &str) -> Result<Arch, String> {
        Arch::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or(format!("--arch {s}: aarch64, riscv64, cortex-m4 or cortex-m33"))
    }

    /// The kernel's bare-metal target (integer-only on the 64-bit machines: no FP state to
    /// switch; the Cortex-M kernel turns its FPU off).
    pub fn target(self) -> &'static str {
        match self {
            Arch::Aarch64 => "aarch64-unknown-none-softfloat",
            Arch::Riscv64 => "riscv64imac-unknown-none-elf",
            Arch::CortexM4 => "thumbv7em-none-eabihf",
            Arch::CortexM33 => "thumbv8m.main-none-eabihf",
        }
    }

    /// The cargo profile the kernel is built with: a microcontroller's flash wants the
    /// smallest code (`mcu`: opt-level "z", LTO).
    pub fn profile(self) -> &'static str {
        match self {
            Arch::Aarch64 | Arch::Riscv64 => "release",
            Arch::CortexM4 | Arch::CortexM33 => "mcu",
        }
    }

    /// Whether it is a `virt` board (aarch64 or riscv64): NUMA nodes, clusters, big.LITTLE,
    /// task groups and the long scenarios are theirs, not a microcontroller's.
    pub fn virt(self) -> bool {
        matches!(self, Arch::Aarch64 | Arch::Riscv64)
    }

    /// How many CPUs the machine has.
    pub fn cpus(self) -> usize {
        match self {
            Arch::Aarch64 | Arch::Riscv64 => 8,
            Arch::CortexM4 => 1,
            Arch::CortexM33 => 2,
        }
    }

    /// The QEMU binary and the Debian package that has it.
    pub fn qemu(self) -> (&'static str, &'static str) {
        match self {
            Arch::Aarch64 | Arch::CortexM4 | Arch::CortexM33 => (self.qemu_binary(), "qemu-system-arm"),
            // qemu-system-misc pulls in qemu-system-data, which ships OpenSBI.
            Arch::Riscv64 => (self.qemu_binary(), "qemu-system-misc"),
        }
    }

    fn qemu_binary(self) -> &'static str {
        match self {
            Arch::Aarch64 => "qemu-system-aarch64",
            Arch::Riscv64 => "qemu-system-riscv64",
            Arch::CortexM4 | Arch::CortexM33 => "qemu-system-arm",
        }
    }

    /// The most CPUs the kernel drives on this machine: 64 on the `virt` boards (more than 8
    /// with its wide build), what the board has on a microcontroller.
    pub fn max_cpus(self) -> usize {
        match self {
            Arch::Aarch64 | Arch::Riscv64 => 64,
            Arch::CortexM4 | Arch::CortexM33 => self.cpus(),
        }
    }

    /// Where the kernel reads a workload program (its port's `PROGRAM_WINDOW`); `None`: the
    /// machine takes none.
    pub fn program_window(self) -> Option<u64> {
        match self {
            Arch::Aarch64 => Some(0x4f00_0000),
            Arch::Riscv64 => Some(0x8f00_0000),
            Arch::CortexM4 | Arch::CortexM33 => None,
        }
    }

    /// The machine: board, RAM, firmware and exit device (the CPU count is `-smp`, added by
    /// [`boot`] where the board takes one).
    fn machine_args(self) -> &'static [&'static str] {
        match self {
            Arch::Aarch64 => &[
                "-M",
                "virt,gic-version=3",
                "-cpu",
                "cortex-a57",
                "-m",
                "256M",
                "-semihosting",
                "-nic",
                "none",
            ],
            // QEMU's default firmware is OpenSBI; it boots the kernel in S-mode at 0x8020_0000.
            Arch::Riscv64 => &["-M", "virt", "-m", "256M", "-bios", "default"],
            // The boot line reaches the kernel through semihosting, as does its exit code.
            Arch::CortexM4 => &["-M", "mps2-an386", "-semihosting"],
            Arch::CortexM33 => &["-M", "mps2-an521", "-semihosting"],
        }
    }
}

/// A machine ready to boot: its architecture, the emulator and the kernel ELF.
#[derive(Debug, Clone)]
pub struct Machine {
    /// The architecture.
    pub arch: Arch,
    /// The QEMU binary.
    pub qemu: PathBuf,
    /// The kernel built for it.
    pub elf: PathBuf,
    /// vCPUs to boot with (`-smp`; the microcontroller boards have theirs fixed).
    pub cpus: usize,
    /// NUMA nodes (0 or 1: none): QEMU's `-numa node` for each, an equal share of the CPUs
    /// (in order) and of the 256 MiB each.
    pub numa: usize,
    /// Cluster size inside each node (0: one cluster per node). aarch64's `virt` describes it
    /// in the device tree's `cpu-map` (`-smp N,clusters=C,cores=K`), which the kernel reads;
    /// riscv64's `virt` cannot (its cpu-map has a cluster per socket, a socket per NUMA node)
    /// and a microcontroller has no device tree, so there [`Machine::boot_words`] puts
    /// `clusters=K` on the boot line instead.
    pub clusters: usize,
    /// A workload program's bytes (a file) for `scenario=program`: QEMU's generic loader puts
    /// it at the port's program window ([`Arch::program_window`]).
    pub program: Option<PathBuf>,
    /// A device tree to boot with instead of the board's own (QEMU `-dtb`; the virt boards).
    pub dtb: Option<PathBuf>,
}

/// How QEMU runs the vCPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Single-threaded TCG with `-icount shift=0,sleep=off`: guest time counts instructions,
    /// and the same image and boot line give byte-identical runs, with one exception: QEMU
    /// 7.2 runs an expired virtual-clock timer from whichever of its threads (the vCPUs' or
    /// the main loop's) gets there first, and from the main loop it kicks every vCPU, which
    /// changes the round-robin order from there on. So on a loaded host a boot rarely takes
    /// another course; the figures checked against a file are taken where two runs agree
    /// (`cargo xreport`) and booted again before a difference counts (`cargo xtest`).
    Deterministic,
    /// Multi-threaded TCG: real concurrency, noisy timing.
    Parallel,
}

impl Mode {
    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Deterministic => "deterministic",
            Mode::Parallel => "parallel",
        }
    }
}

/// What one boot produced.
#[derive(Debug, Clone)]
pub struct Boot {
    /// QEMU's exit status (the kernel's exit code: semihosting or `sifive_test`); None if
    /// killed.
    pub code: Option<i32>,
    /// Decoded log lines (message text, with the kernel's CPU/time prefix).
    pub lines: Vec<String>,
    /// The time limit was hit.
    pub timed_out: bool,
    /// Wall time.
    pub wall: Duration,
    /// QEMU's own last line on its standard error (an option it refused, firmware it could
    /// not find), or why it could not be started: what tells a QEMU that failed from a
    /// kernel that did.
    pub qemu_said: Option<String>,
    /// With nothing decoded, the last line the firmware printed before the kernel (OpenSBI's
    /// banner, or its error): a word on a kernel that died before its first frame.
    pub firmware_said: Option<String>,
}

impl Boot {
    /// A boot that exited 0 with these log lines and nothing said by QEMU or the firmware
    /// (the judges' and readers' tests).
    #[cfg(test)]
    pub(crate) fn of_lines(lines: &[&str]) -> Boot {
        Boot {
            code: Some(0),
            lines: lines.iter().map(|l| l.to_string()).collect(),
            timed_out: false,
            wall: Duration::from_secs(1),
            qemu_said: None,
            firmware_said: None,
        }
    }

    /// Whether QEMU failed before the kernel said anything: it could not start, or it ended
    /// with nothing decoded and a complaint of its own.
    pub fn qemu_failed(&self) -> bool {
        self.lines.is_empty() && !self.timed_out && (self.code.is_none() || self.qemu_said.is_some())
    }

    /// The first line containing `needle`.
    pub fn line(&self, needle: &str) -> Option<&str> {
        self.lines.iter().map(String::as_str).find(|l| l.contains(needle))
    }

    /// The number right after `key` in the first line containing it.
    pub fn number_after(&self, key: &str) -> Option<f64> {
        number_after_in(self.line(key)?, key)
    }
}

/// The number right after the first `key` in `line`.
pub fn number_after_in(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    let num: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    num.parse().ok()
}

/// Finds the architecture's QEMU, installing its Debian package with apt-get when running as
/// root. Otherwise one clear line says what to install.
pub fn find_or_install(arch: Arch) -> Result<PathBuf, String> {
    let (bin, package) = arch.qemu();
    find_or_install_tool(bin, package)
}

/// Finds the program `bin` on the PATH, installing the Debian package `package` with apt-get
/// when running as root. Otherwise one clear line says what to install.
pub fn find_or_install_tool(bin: &str, package: &str) -> Result<PathBuf, String> {
    if let Some(p) = which(bin) {
        return Ok(p);
    }
    if !as_root() {
        return Err(format!(
            "{bin} is missing: install the Debian package {package} (apt-get install {package})"
        ));
    }
    eprintln!("qemu-tests: {bin} not found; installing the Debian package {package}");
    let apt = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("apt-get: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        Err(last_line(&err).unwrap_or_else(|| format!("exited with {}", out.status)))
    };
    apt(&["update", "-qq"])
        .and_then(|()| apt(&["install", "-y", "-qq", "--no-install-recommends", package]))
        .map_err(|why| {
            format!("{bin} is missing and installing the Debian package {package} with apt-get failed: {why}")
        })?;
    which(bin).ok_or(format!("{bin} is still missing after installing the Debian package {package}"))
}

/// Whether this process runs as root, which apt-get needs.
pub fn as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"0")
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(bin)).find(|p| p.is_file()))
}

/// The workspace root (parent of this crate).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Everything a QEMU run on `arch` needs: the emulator (found or installed) and the kernel
/// ELF (built). The error is one line for the user.
pub fn prepare(arch: Arch) -> Result<Machine, String> {
    Ok(Machine {
        arch,
        qemu: find_or_install(arch)?,
        elf: build_kernel(arch)?,
        cpus: arch.cpus(),
        numa: 0,
        clusters: 0,
        program: None,
        dtb: None,
    })
}

/// Builds the kernel for `arch` (release) from its folder, installing the target if needed,
/// and returns the ELF.
pub fn build_kernel(arch: Arch) -> Result<PathBuf, String> {
    build_kernel_as(arch, false)
}

/// Builds the kernel for `arch`, `wide` with the wide build's feature (`cpus-64`), and returns
/// its ELF. Both builds of a board use its profile, so the wide one compiles only the kernel
/// crate again, not its dependencies; but cargo writes both to one path. So each is copied to
/// a path of its own (`kernel-shim-base`, `kernel-shim-wide`), which no later build replaces,
/// under a lock that every runner process takes for the build and the copy.
fn build_kernel_as(arch: Arch, wide: bool) -> Result<PathBuf, String> {
    if !crate::ensure_target(arch.target()) {
        return Err(format!(
            "the {t} target is missing and rustup could not add it: rustup target add {t}",
            t = arch.target()
        ));
    }
    let failed = |why: String| format!("building kernel-shim for {} failed: {why}", arch.name());
    let out = root().join("target").join(arch.target()).join(arch.profile());
    std::fs::create_dir_all(&out).map_err(|e| failed(format!("{}: {e}", out.display())))?;
    // Released when dropped, at the end of this function.
    let lock = std::fs::File::create(out.join("kernel-shim.lock"))
        .and_then(|f| f.lock().map(|()| f))
        .map_err(|e| failed(format!("the build lock: {e}")))?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let features: &[&str] = if wide { &["--features", "cpus-64"] } else { &[] };
    let ok = Command::new(cargo)
        .args(["build", "--profile", arch.profile(), "--quiet", "--target", arch.target()])
        .args(features)
        .current_dir(root().join("kernel-shim"))
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Err(failed("cargo build".into()));
    }
    let elf = out.join(if wide { "kernel-shim-wide" } else { "kernel-shim-base" });
    copy_if_changed(&out.join("kernel-shim"), &elf).map_err(failed)?;
    drop(lock);
    Ok(elf)
}

/// Copies `from` to `to` unless `to` already holds the same bytes: through a file beside it
/// and a rename, so a QEMU that has the old file open keeps reading the old one.
fn copy_if_changed(from: &Path, to: &Path) -> Result<(), String> {
    let bytes = std::fs::read(from).map_err(|e| format!("{}: {e}", from.display()))?;
    if std::fs::read(to).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let part = to.with_extension("part");
    std::fs::write(&part, &bytes)
        .and_then(|()| std::fs::rename(&part, to))
        .map_err(|e| format!("{}: {e}", to.display()))
}

impl Machine {
    /// The same machine with `cpus` vCPUs: more than the default kernel drives (8) takes its
    /// wide build (feature `cpus-64`), built here if needed.
    pub fn with_cpus(&self, cpus: usize) -> Result<Machine, String> {
        let elf = if cpus > self.arch.cpus() { build_kernel_as(self.arch, true)? } else { self.elf.clone() };
        Ok(Machine { elf, cpus, ..self.clone() })
    }

    /// What the boot line must add for the topology QEMU cannot describe on this board: the
    /// clusters anywhere but aarch64 (see [`Machine::clusters`]); empty there.
    pub fn boot_words(&self) -> String {
        let per = self.cpus / self.numa.max(1);
        if self.arch != Arch::Aarch64 && self.clusters != 0 && self.clusters < per {
            format!(" clusters={}", self.clusters)
        } else {
            String::new()
        }
    }

    /// QEMU's `-smp` value: the vCPUs and, on aarch64, how they group into clusters.
    fn smp(&self) -> String {
        let per = self.cpus / self.numa.max(1);
        let k = self.clusters;
        if self.arch == Arch::Aarch64 && k != 0 && k < per && self.cpus.is_multiple_of(k) {
            format!("{},sockets=1,clusters={},cores={k},threads=1", self.cpus, self.cpus / k)
        } else {
            self.cpus.to_string()
        }
    }

    /// Whether it runs the kernel's wide (64-CPU) build.
    pub fn wide(&self) -> bool {
        self.cpus > self.arch.cpus()
    }
}

/// QEMU for the machine `m` in `mode`: the board, its vCPUs, clusters and NUMA nodes, and the
/// accelerator's flags; the caller adds what it boots. The Linux guest runs on exactly this.
pub fn machine_command(m: &Machine, mode: Mode) -> Command {
    let mut cmd = Command::new(&m.qemu);
    cmd.args(m.arch.machine_args());
    if m.arch.virt() {
        cmd.arg("-smp").arg(m.smp());
        if m.numa > 1 {
            let (per, mem) = (m.cpus / m.numa, 256 / m.numa);
            for node in 0..m.numa {
                // The nodes' memory adds up to the machine's 256 MiB (QEMU refuses any other
                // sum): the last node takes what an uneven split leaves.
                let mem = if node + 1 == m.numa { 256 - mem * (m.numa - 1) } else { mem };
                cmd.arg("-object").arg(format!("memory-backend-ram,id=mem{node},size={mem}M"));
                cmd.arg("-numa").arg(format!(
                    "node,nodeid={node},memdev=mem{node},cpus={}-{}",
                    node * per,
                    node * per + per - 1
                ));
            }
        }
    }
    cmd.args(["-nographic", "-monitor", "none"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if mode == Mode::Deterministic {
        cmd.args(["-accel", "tcg,thread=single", "-icount", "shift=0,sleep=off"]);
    }
    cmd
}

/// How a QEMU run ended.
#[derive(Debug, Clone)]
pub struct Ran {
    /// Its exit code; None if killed or not started.
    pub code: Option<i32>,
    /// The time limit was hit (and it was killed).
    pub timed_out: bool,
    /// Wall time, from its start (not from the wait for a place on the host).
    pub wall: Duration,
    /// Why it could not be started, if it could not.
    pub not_started: Option<String>,
}

/// Runs `cmd` (a QEMU in `mode`) to its end or for at most `limit`, once it has its place
/// on the host ([`crate::pool::host_slot`]).
pub fn run_limited(cmd: &mut Command, mode: Mode, limit: Duration) -> Ran {
    let _slot = crate::pool::host_slot(mode);
    let start = Instant::now();
    let mut not_started = None;
    let (code, timed_out) = match cmd.spawn() {
        Ok(mut child) => loop {
            if let Ok(Some(st)) = child.try_wait() {
                break (st.code(), false);
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                break (None, true);
            }
            std::thread::sleep(Duration::from_millis(20));
        },
        Err(e) => {
            not_started = Some(format!("cannot start {}: {e}", cmd.get_program().to_string_lossy()));
            (None, false)
        }
    };
    Ran { code, timed_out, wall: start.elapsed(), not_started }
}

/// Boots the machine's kernel on its vCPUs with `args` on the command line.
pub fn boot(m: &Machine, args: impl AsRef<OsStr>, mode: Mode, limit: Duration) -> Boot {
    let mut args = args.as_ref().to_os_string();
    args.push(m.boot_words());
    let log = std::env::temp_dir().join(format!("fairsched-{}-{}.bin", std::process::id(), unique()));
    let mut cmd = machine_command(m, mode);
    if let (Some(p), Some(at)) = (&m.program, m.arch.program_window()) {
        cmd.arg("-device").arg(format!("loader,file={},addr={at:#x},force-raw=on", p.display()));
    }
    if let Some(dtb) = &m.dtb {
        cmd.arg("-dtb").arg(dtb);
    }
    cmd.arg("-serial")
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(&m.elf)
        .arg("-append")
        .arg(args);
    // QEMU's own complaints go to a file of their own, for a boot that ends before the kernel
    // speaks (without one, they are dropped as before).
    let said = log.with_extension("stderr");
    if let Ok(f) = std::fs::File::create(&said) {
        cmd.stderr(f);
    }
    let ran = run_limited(&mut cmd, mode, limit);
    let bytes = std::fs::read(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let complaint = std::fs::read(&said).ok().and_then(|t| last_line(&String::from_utf8_lossy(&t)));
    let _ = std::fs::remove_file(&said);
    let lines = decode(&m.elf, kernel_stream(&bytes));
    let firmware =
        if lines.is_empty() { last_line(&String::from_utf8_lossy(firmware_text(&bytes))) } else { None };
    Boot {
        code: ran.code,
        lines,
        timed_out: ran.timed_out,
        wall: ran.wall,
        qemu_said: ran.not_started.or(complaint),
        firmware_said: firmware,
    }
}

/// The last line of `text` that is not blank, trimmed and cut to 300 characters.
fn last_line(text: &str) -> Option<String> {
    let l = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    Some(l.chars().take(300).collect())
}

/// What identifies a deterministic boot's run: the machine (its kernel image as built, its
/// program and device tree), the boot line.
type BootKey = (
    Arch,
    usize,
    usize,
    usize,
    Option<PathBuf>,
    Option<PathBuf>,
    PathBuf,
    Option<std::time::SystemTime>,
    String,
);

fn boot_key(m: &Machine, args: &str) -> BootKey {
    let built = std::fs::metadata(&m.elf).and_then(|md| md.modified()).ok();
    (
        m.arch,
        m.cpus,
        m.numa,
        m.clusters,
        m.program.clone(),
        m.dtb.clone(),
        m.elf.clone(),
        built,
        args.to_string(),
    )
}

/// The deterministic boots [`remember`] kept in this process.
static REMEMBERED: std::sync::Mutex<Option<std::collections::HashMap<BootKey, Boot>>> =
    std::sync::Mutex::new(None);

/// Keeps a deterministic-mode boot of `args` on `m` that ran to its end, so that a later
/// reader of the same run ([`remembered`]) need not boot it again: with `-icount
/// shift=0,sleep=off` the same kernel image and boot line give the same run (but for the
/// race [`Mode::Deterministic`] describes).
pub fn remember(m: &Machine, args: &str, b: &Boot) {
    if !b.timed_out && b.code.is_some() {
        let mut map = REMEMBERED.lock().unwrap_or_else(|e| e.into_inner());
        map.get_or_insert_default().insert(boot_key(m, args), b.clone());
    }
}

/// Drops every boot [`remember`] kept: the next [`remembered`] boots again. A figure checked
/// against a file is taken afresh this way when the kept run may be one that QEMU's rare
/// host-timing race sent another way (see [`Mode::Deterministic`]).
pub fn forget_boots() {
    REMEMBERED.lock().unwrap_or_else(|e| e.into_inner()).take();
}

/// The deterministic boot of `args` on `m`: the one [`remember`] kept, or a new one.
pub fn remembered(m: &Machine, args: &str, limit: Duration) -> Boot {
    let kept = REMEMBERED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|map| map.get(&boot_key(m, args)).cloned());
    kept.unwrap_or_else(|| boot(m, args, Mode::Deterministic, limit))
}

/// The kernel's defmt stream in what the serial port captured: everything after the first
/// zero byte, which the kernel writes before its first frame. Before it comes the firmware's
/// text (OpenSBI's banner on riscv64), which has no zero bytes.
fn kernel_stream(serial: &[u8]) -> &[u8] {
    serial.iter().position(|&b| b == 0).map_or(&[][..], |i| &serial[i + 1..])
}

/// What the serial port captured before the kernel's stream (all of it, if the kernel wrote
/// nothing).
fn firmware_text(serial: &[u8]) -> &[u8] {
    &serial[..serial.iter().position(|&b| b == 0).unwrap_or(serial.len())]
}

pub(crate) fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Decodes a defmt stream against the kernel ELF into text lines.
pub fn decode(elf: &Path, bytes: &[u8]) -> Vec<String> {
    let Ok(elf_bytes) = std::fs::read(elf) else { return vec!["(cannot read the kernel ELF)".into()] };
    let table = match defmt_decoder::Table::parse(&elf_bytes) {
        Ok(Some(t)) => t,
        _ => return vec!["(the kernel ELF has no defmt table)".into()],
    };
    let mut out = Vec::new();
    let mut dec = table.new_stream_decoder();
    dec.received(bytes);
    loop {
        match dec.decode() {
            Ok(frame) => {
                let ts = frame.display_timestamp().map(|t| t.to_string()).unwrap_or_default();
                out.push(format!("{ts} {}", frame.display_message()));
            }
            Err(defmt_decoder::DecodeError::UnexpectedEof) => break,
            Err(defmt_decoder::DecodeError::Malformed) => {
                out.push("(malformed defmt frame)".into());
                if !table.encoding().can_recover() {
                    break;
                }
            }
        }
    }
    out
}
