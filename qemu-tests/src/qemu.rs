//! Getting QEMU, building the kernel, booting it with a scenario and decoding its defmt log.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The bare-metal target of the kernel.
pub const KERNEL_TARGET: &str = "aarch64-unknown-none-softfloat";

/// How QEMU runs the vCPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Single-threaded TCG with `-icount shift=0,sleep=off`: byte-identical runs.
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
    /// QEMU's exit status (the kernel's semihosting exit code); None if killed.
    pub code: Option<i32>,
    /// Decoded log lines (message text, with the kernel's CPU/time prefix).
    pub lines: Vec<String>,
    /// The time limit was hit.
    pub timed_out: bool,
    /// Wall time.
    pub wall: Duration,
}

impl Boot {
    /// The first line containing `needle`.
    pub fn line(&self, needle: &str) -> Option<&str> {
        self.lines.iter().map(String::as_str).find(|l| l.contains(needle))
    }

    /// The number right after `key` in the first line containing it.
    pub fn number_after(&self, key: &str) -> Option<f64> {
        let l = self.line(key)?;
        let rest = &l[l.find(key)? + key.len()..];
        let num: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        num.parse().ok()
    }
}

/// Finds `qemu-system-aarch64`, installing Debian's `qemu-system-arm` with apt-get when
/// running as root. Otherwise one clear line says what to install.
pub fn find_or_install() -> Result<PathBuf, String> {
    if let Some(p) = which("qemu-system-aarch64") {
        return Ok(p);
    }
    let root = Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false);
    if root {
        eprintln!("xtest: qemu-system-aarch64 not found; installing the Debian package qemu-system-arm");
        let ok = Command::new("apt-get").args(["update", "-qq"]).status().is_ok_and(|s| s.success())
            && Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends", "qemu-system-arm"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .is_ok_and(|s| s.success());
        if ok {
            if let Some(p) = which("qemu-system-aarch64") {
                return Ok(p);
            }
        }
    }
    Err("qemu-system-aarch64 is missing: install the Debian package qemu-system-arm (apt-get install qemu-system-arm)".into())
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(bin)).find(|p| p.is_file()))
}

/// The workspace root (parent of this crate).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Everything a QEMU run needs: the emulator (found or installed) and the kernel ELF
/// (built). The error is one line for the user.
pub fn prepare() -> Result<(PathBuf, PathBuf), String> {
    Ok((find_or_install()?, build_kernel()?))
}

/// Builds the kernel (release) from its folder, installing the target if needed, and
/// returns the ELF.
pub fn build_kernel() -> Result<PathBuf, String> {
    crate::ensure_target(KERNEL_TARGET);
    let dir = root().join("kernel-shim");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = Command::new(cargo)
        .args(["build", "--release", "--quiet"])
        .current_dir(&dir)
        .status()
        .is_ok_and(|s| s.success());
    let elf = root().join("target").join(KERNEL_TARGET).join("release").join("kernel-shim");
    if ok && elf.is_file() {
        Ok(elf)
    } else {
        Err("building kernel-shim failed".into())
    }
}

/// Boots `elf` on 8 vCPUs with `args` on the command line.
pub fn boot(qemu: &Path, elf: &Path, args: impl AsRef<OsStr>, mode: Mode, limit: Duration) -> Boot {
    let log = std::env::temp_dir().join(format!("fairsched-{}-{}.bin", std::process::id(), unique()));
    let mut cmd = Command::new(qemu);
    cmd.args(["-M", "virt,gic-version=3", "-cpu", "cortex-a57", "-smp", "8", "-m", "256M"])
        .args(["-nographic", "-monitor", "none", "-semihosting", "-nic", "none"])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(elf)
        .arg("-append")
        .arg(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if mode == Mode::Deterministic {
        cmd.args(["-accel", "tcg,thread=single", "-icount", "shift=0,sleep=off"]);
    }
    let start = Instant::now();
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
        Err(_) => (None, false),
    };
    let bytes = std::fs::read(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    Boot { code, lines: decode(elf, &bytes), timed_out, wall: start.elapsed() }
}

fn unique() -> u64 {
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
