//! The Linux guest's parts, fetched once from Debian's arm64 archive with the host's apt and
//! unpacked under `target/linux/`: Debian's kernel image, `busybox-static`, `sysbench`,
//! `rt-app` and the shared libraries the two need. A second run finds them there and needs no
//! network.
//!
//! Why apt and Debian's packages: they are the real components a user of this machine would
//! run (Debian's own 6.1 kernel, sysbench 1.0.20, rt-app 1.0), signed and versioned by the
//! archive; apt names each package's dependencies, of which the first of each alternative is
//! taken ([`closure`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The packages taken as they are, besides the library closure of [`CLOSURE_OF`].
const PACKAGES: &[&str] = &["busybox-static", "sysbench", "rt-app"];

/// Packages whose dependency closure (the shared libraries sysbench and rt-app load) is
/// fetched. rt-app's own closure is not taken: it drags in Python for its `workgen` helper;
/// its one library is `libjson-c5`.
const CLOSURE_OF: &[&str] = &["sysbench", "libjson-c5"];

/// The meta package naming the current 6.1 image.
const KERNEL_META: &str = "linux-image-arm64";

/// The kernel series the guest is measured as (Debian 12's: CFS, one flat DIE level on
/// `virt`); another is refused rather than described wrongly.
const GUEST_SERIES: &str = "6.1.";

/// The fetched and unpacked parts.
#[derive(Debug, Clone)]
pub struct Parts {
    /// Every package unpacked into one tree (`boot/`, `bin/`, `usr/`, `lib/`).
    pub tree: PathBuf,
    /// The kernel image QEMU boots (`boot/vmlinuz-*`).
    pub kernel: PathBuf,
    /// The kernel's version string (`6.1.0-NN-arm64`).
    pub version: String,
}

/// Where the parts live.
fn cache() -> PathBuf {
    crate::qemu::root().join("target").join("linux")
}

/// The parts, fetched and unpacked if they are not under `target/linux/` yet. `Err` is one
/// line naming what is missing.
pub fn parts() -> Result<Parts, String> {
    let tree = cache().join("tree");
    if let Some(p) = found(&tree) {
        return Ok(p);
    }
    fetch(&tree)?;
    found(&tree).ok_or_else(|| format!("the fetched packages hold no kernel image under {}", tree.display()))
}

/// Whether the host is Debian 12 (bookworm), by its `/etc/os-release`; `Err` names what it is.
fn debian_12() -> Result<(), String> {
    let text = std::fs::read_to_string("/etc/os-release")
        .or_else(|_| std::fs::read_to_string("/usr/lib/os-release"))
        .unwrap_or_default();
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(|v| v.trim_matches(['"', '\'']).to_string())
    };
    if field("ID").as_deref() == Some("debian") && field("VERSION_ID").as_deref() == Some("12") {
        return Ok(());
    }
    let host = field("PRETTY_NAME").unwrap_or_else(|| "a host without /etc/os-release".to_string());
    Err(format!("the Linux guest's packages come from Debian 12 (bookworm)'s archive: use a Debian 12 host, not {host}"))
}

/// Removes the half-unpacked trees of fetches that did not finish (their process is gone).
fn forget_unfinished() {
    let Ok(dir) = std::fs::read_dir(cache()) else { return };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("tree.tmp-") else { continue };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The unpacked tree's kernel, if the fetch finished (its stamp is written last).
fn found(tree: &Path) -> Option<Parts> {
    let version = std::fs::read_to_string(tree.join(".fetched")).ok()?.trim().to_string();
    let kernel = tree.join("boot").join(format!("vmlinuz-{version}"));
    kernel.is_file().then_some(Parts { tree: tree.to_path_buf(), kernel, version })
}

/// Runs `cmd`, returning its standard output, or one line saying which step failed.
fn run(what: &str, cmd: &mut Command) -> Result<String, String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("failed");
        return Err(format!("{what}: {last}"));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The fetch: arm64 known to dpkg, the kernel's versioned image resolved, the closure listed,
/// every package downloaded and unpacked, and the stamp written.
fn fetch(tree: &Path) -> Result<(), String> {
    forget_unfinished();
    let tools = ["apt-get", "apt-cache", "dpkg", "dpkg-deb"];
    if let Some(t) = tools.iter().find(|t| run("", Command::new(t).arg("--version")).is_err()) {
        return Err(format!("the Linux guest needs Debian's {t} (a Debian 12 host) to fetch its packages"));
    }
    // Debian 12's archive is the one measured: any other host is refused before its package
    // setup is touched (an arm64 architecture added to an Ubuntu host breaks its apt-get).
    debian_12()?;
    if !crate::qemu::as_root() {
        return Err("the Linux guest's packages are fetched with apt-get as root: run `cargo xrun --linux` once as root".into());
    }
    eprintln!("linux: fetching Debian's arm64 kernel, busybox-static, sysbench and rt-app (once, into target/linux)");
    let arches = run("dpkg", Command::new("dpkg").arg("--print-foreign-architectures"))?;
    if !arches.lines().any(|l| l.trim() == "arm64") {
        run("dpkg --add-architecture arm64", Command::new("dpkg").args(["--add-architecture", "arm64"]))?;
    }
    // The lists may be stale or lack arm64: refresh them once per fetch.
    run("apt-get update", Command::new("apt-get").args(["update", "-qq"]))?;
    let meta = run(
        "apt-cache depends",
        Command::new("apt-cache").args(["depends", &format!("{KERNEL_META}:arm64")]),
    )?;
    let image = meta
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .ok_or_else(|| {
            format!("{KERNEL_META}:arm64 names no kernel image (is Debian's arm64 archive reachable?)")
        })?
        .to_string();
    let version = image.trim_start_matches("linux-image-").trim_end_matches(":arm64").to_string();
    if !version.starts_with(GUEST_SERIES) {
        return Err(format!(
            "Debian's archive serves Linux {version}; the guest is measured as Debian 12's {GUEST_SERIES} (CFS): use a Debian 12 (bookworm) host"
        ));
    }
    let mut wanted = closure(CLOSURE_OF)?;
    wanted.extend(PACKAGES.iter().map(|p| format!("{p}:arm64")));
    wanted.push(image);
    wanted.sort();
    wanted.dedup();
    // Fresh folders, so that nothing of an earlier fetch mixes in; the tree is unpacked
    // beside its place and moved there whole.
    let (debs, tmp) = (cache().join("debs"), cache().join(format!("tree.tmp-{}", std::process::id())));
    for dir in [&debs, &tmp] {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    run(
        "apt-get download",
        Command::new("apt-get")
            .args(["download", "-q", "-o", "APT::Sandbox::User=root"])
            .args(&wanted)
            .current_dir(&debs),
    )?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&debs)
        .map_err(|e| format!("{}: {e}", debs.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    files.sort();
    for deb in &files {
        run(
            &format!("dpkg-deb -x {}", deb.display()),
            Command::new("dpkg-deb").arg("-x").arg(deb).arg(&tmp),
        )?;
    }
    // The stamp last: a tree without it is a fetch that did not finish.
    std::fs::write(tmp.join(".fetched"), format!("{version}\n"))
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    let _ = std::fs::remove_dir_all(tree);
    std::fs::rename(&tmp, tree).map_err(|e| format!("{}: {e}", tree.display()))?;
    eprintln!("linux: {} packages unpacked into {}", files.len(), tree.display());
    Ok(())
}

/// The packages `roots` need (`Depends` and `PreDepends`, followed to the end; of
/// alternatives the first real package), each as `name:arm64`.
fn closure(roots: &[&str]) -> Result<Vec<String>, String> {
    let mut have: Vec<String> = roots.iter().map(|r| format!("{r}:arm64")).collect();
    let mut todo = have.clone();
    while !todo.is_empty() {
        let mut cmd = Command::new("apt-cache");
        cmd.args(["depends", "--no-recommends", "--no-suggests", "--no-conflicts"]);
        cmd.args(["--no-breaks", "--no-replaces", "--no-enhances"]).args(&todo);
        let out = run("apt-cache depends", &mut cmd)?;
        todo.clear();
        for dep in first_alternatives(&out) {
            if !have.contains(&dep) {
                have.push(dep.clone());
                todo.push(dep);
            }
        }
    }
    Ok(have)
}

/// The dependencies `apt-cache depends` lists, the first real package of each alternative
/// group (` |Depends: A` then `  Depends: B`: A), virtual ones (`<name>`) and the providers
/// listed under them left out.
fn first_alternatives(out: &str) -> Vec<String> {
    let mut deps = Vec::new();
    let mut chosen = false;
    for line in out.lines() {
        if !line.starts_with(' ') || line.starts_with("    ") {
            continue;
        }
        let t = line.trim_start();
        let (more, t) = match t.strip_prefix('|') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let Some(name) = t.strip_prefix("Depends: ").or_else(|| t.strip_prefix("PreDepends: ")) else {
            continue;
        };
        if !chosen && !name.starts_with('<') {
            deps.push(name.trim().to_string());
            chosen = true;
        }
        // A line without `|` ends its group.
        if !more {
            chosen = false;
        }
    }
    deps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_real_alternative_is_taken() {
        let out = "sysbench:arm64\n  Depends: libaio1:arm64\n |Depends: libluajit2-5.1-2:arm64\n  Depends: libluajit-5.1-2:arm64\n \
                   |Depends: <debconf-2.0>\n    cdebconf:arm64\n  Depends: debconf:arm64\n  PreDepends: libc6:arm64\n";
        assert_eq!(
            first_alternatives(out),
            ["libaio1:arm64", "libluajit2-5.1-2:arm64", "debconf:arm64", "libc6:arm64"]
        );
    }
}
