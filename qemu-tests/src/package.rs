//! `cargo xtest`'s check of sched-core as crates.io would ship it: `cargo package` (which
//! builds the packed crate alone), then `cargo test` in the unpacked package, outside the
//! workspace, so the tests run with nothing but what the package holds.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Packs sched-core, unpacks it outside the workspace and runs its tests there. Returns
/// whether both passed and the output of `cargo test` (for the summary's tally). The build
/// shares the workspace's `target`: the package resolves its dependencies on its own, and
/// those that come out the same as the host tests' are not compiled again.
pub fn check(
    cargo: impl Fn() -> Command,
    run_capture: impl Fn(&mut Command) -> (bool, String),
) -> (bool, String) {
    let root = crate::qemu::root();
    let packed = cargo()
        .args(["package", "-p", "sched-core", "--allow-dirty", "--quiet"])
        .current_dir(&root)
        .status()
        .is_ok_and(|s| s.success());
    if !packed {
        eprintln!("xtest: cargo package -p sched-core failed");
        return (false, String::new());
    }
    let dir = match unpack(&root) {
        Ok(d) => d,
        Err(line) => {
            eprintln!("xtest: sched-core package: {line}");
            return (false, String::new());
        }
    };
    let (ok, text) = run_capture(
        cargo()
            .args(["test", "--no-fail-fast"])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", root.join("target")),
    );
    if !ok {
        eprintln!("xtest: cargo test in the unpacked sched-core package ({}) failed", dir.display());
    }
    (ok, text)
}

/// Unpacks `target/package/sched-core-<version>.crate` into a fixed folder of the system's
/// temporary directory (outside any workspace) and returns the package's folder.
fn unpack(root: &Path) -> Result<PathBuf, String> {
    let manifest =
        std::fs::read_to_string(root.join("core/Cargo.toml")).map_err(|e| format!("core/Cargo.toml: {e}"))?;
    let version = package_version(&manifest).ok_or("core/Cargo.toml names no version")?;
    let name = format!("sched-core-{version}");
    let crate_file = root.join("target/package").join(format!("{name}.crate"));
    let into = std::env::temp_dir().join("fairsched-package");
    let _ = std::fs::remove_dir_all(&into);
    std::fs::create_dir_all(&into).map_err(|e| format!("{}: {e}", into.display()))?;
    let file = std::fs::File::open(&crate_file).map_err(|e| format!("{}: {e}", crate_file.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    // A .crate stamps every file with one old time; unpacked as now, cargo sees the sources
    // newer than the build cache of the last check, instead of testing a stale build.
    archive.set_preserve_mtime(false);
    archive.unpack(&into).map_err(|e| format!("unpacking {}: {e}", crate_file.display()))?;
    Ok(into.join(name))
}

/// The `version` of a manifest's `[package]` table.
fn package_version(manifest: &str) -> Option<&str> {
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[package]")
        .take_while(|l| !l.starts_with('[') || l.trim() == "[package]")
        .find_map(|l| l.trim().strip_prefix("version = \"")?.strip_suffix('"'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_package_version_comes_from_its_table() {
        let m = "[package]\nname = \"x\"\nversion = \"0.3.1\"\n\n[dependencies]\nversion = \"9\"\n";
        assert_eq!(package_version(m), Some("0.3.1"));
        assert_eq!(package_version("[dependencies]\nversion = \"9\"\n"), None);
    }
}
