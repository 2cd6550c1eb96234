//! The guest's root file system: a gzip-compressed "newc" cpio archive (the initramfs format
//! Linux unpacks into its rootfs), written here so that no `cpio` tool is needed. It holds
//! busybox, sysbench and rt-app with exactly the shared libraries their ELF files name as
//! `DT_NEEDED` (followed transitively), the dynamic loader, `/init`, and the workload files.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use object::read::elf::{Dyn as _, FileHeader as _};

/// The guest's init: mounts, tracing set-up, the runs and the trace dumps (see the script).
const INIT: &str = include_str!("init.sh");

/// Where shared libraries are found in the unpacked tree (Debian's multiarch folders).
const LIB_DIRS: &[&str] = &["lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu"];

/// The programs the guest runs: (path in the tree, path in the guest).
const PROGRAMS: &[(&str, &str)] =
    &[("bin/busybox", "bin/busybox"), ("usr/bin/sysbench", "bin/sysbench"), ("usr/bin/rt-app", "bin/rt-app")];

/// The dynamic loader the programs name as their interpreter.
const LOADER: &str = "ld-linux-aarch64.so.1";

/// One archive: files by guest path (folders implied), written out by [`Archive::gzip`].
#[derive(Default)]
pub struct Archive {
    files: BTreeMap<String, (u32, Vec<u8>)>,
}

impl Archive {
    /// Adds a file with its mode bits (e.g. `0o755`).
    pub fn file(&mut self, path: &str, mode: u32, data: Vec<u8>) {
        self.files.insert(path.trim_start_matches('/').to_string(), (mode, data));
    }

    /// The archive: every folder on the way to a file, then the files, then the trailer,
    /// gzip-compressed.
    pub fn gzip(&self) -> Vec<u8> {
        let mut dirs: Vec<String> = vec!["dev".into(), "proc".into(), "sys".into(), "tmp".into()];
        for path in self.files.keys() {
            let mut at = path.as_str();
            while let Some((parent, _)) = at.rsplit_once('/') {
                dirs.push(parent.to_string());
                at = parent;
            }
        }
        dirs.sort();
        dirs.dedup();
        let mut out = Vec::new();
        let mut ino = 1;
        for d in &dirs {
            entry(&mut out, ino, 0o040_755, d, &[]);
            ino += 1;
        }
        for (path, (mode, data)) in &self.files {
            entry(&mut out, ino, 0o100_000 | mode, path, data);
            ino += 1;
        }
        entry(&mut out, 0, 0, "TRAILER!!!", &[]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        // Writing into a Vec cannot fail.
        let _ = gz.write_all(&out);
        gz.finish().unwrap_or_default()
    }
}

/// One newc entry: the 110-byte ASCII header, the name (NUL-terminated) and the data, each
/// padded to 4 bytes.
fn entry(out: &mut Vec<u8>, ino: u32, mode: u32, name: &str, data: &[u8]) {
    let fields = [ino, mode, 0, 0, 1, 0, data.len() as u32, 0, 0, 0, 0, name.len() as u32 + 1, 0];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad(out);
    out.extend_from_slice(data);
    pad(out);
}

fn pad(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// The `DT_NEEDED` names of an ELF file (none for a static one or a non-ELF file).
fn needed(data: &[u8]) -> Vec<String> {
    let Ok(elf) = object::elf::FileHeader64::<object::Endianness>::parse(data) else { return Vec::new() };
    let Ok(endian) = elf.endian() else { return Vec::new() };
    let Ok(sections) = elf.sections(endian, data) else { return Vec::new() };
    let Ok(Some((dyns, link))) = sections.dynamic(endian, data) else { return Vec::new() };
    let Ok(strings) = sections.strings(endian, data, link) else { return Vec::new() };
    dyns.iter()
        .filter(|d| d.tag32(endian) == Some(object::elf::DT_NEEDED))
        .filter_map(|d| d.string(endian, strings).ok())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// A path in the unpacked tree with its symbolic links followed inside the tree (Debian's
/// links are relative or absolute to the guest's root, never the host's).
fn resolve(tree: &Path, rel: &Path) -> Option<PathBuf> {
    let mut at = tree.join(rel);
    for _ in 0..16 {
        let Ok(meta) = std::fs::symlink_metadata(&at) else { return None };
        if !meta.file_type().is_symlink() {
            return Some(at);
        }
        let target = std::fs::read_link(&at).ok()?;
        at = if target.is_absolute() {
            tree.join(target.strip_prefix("/").ok()?)
        } else {
            at.parent()?.join(target)
        };
    }
    None
}

/// The archive for `tree` (the unpacked packages) with `extra` files (guest path, bytes):
/// the programs, their library closure in `/lib`, the loader, and `/init`. `Err` names a
/// library no package provides.
pub fn build(tree: &Path, extra: &[(String, Vec<u8>)]) -> Result<Vec<u8>, String> {
    let mut a = Archive::default();
    let mut todo: Vec<String> = Vec::new();
    for (from, to) in PROGRAMS {
        let path = resolve(tree, Path::new(from))
            .ok_or_else(|| format!("the guest's {from} is missing from {}", tree.display()))?;
        let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        todo.extend(needed(&data));
        a.file(to, 0o755, data);
    }
    todo.push(LOADER.into());
    let mut done = std::collections::BTreeSet::new();
    while let Some(lib) = todo.pop() {
        if !done.insert(lib.clone()) {
            continue;
        }
        let path = LIB_DIRS
            .iter()
            .find_map(|d| resolve(tree, &Path::new(d).join(&lib)))
            .ok_or_else(|| format!("no fetched package provides {lib} (needed by the guest's programs)"))?;
        let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        todo.extend(needed(&data));
        a.file(&format!("lib/{lib}"), 0o755, data);
    }
    a.file("init", 0o755, INIT.as_bytes().to_vec());
    for (path, data) in extra {
        a.file(path, 0o644, data.clone());
    }
    Ok(a.gzip())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newc layout: magic, 13 hex fields, name padded to 4, data padded to 4, trailer.
    #[test]
    fn newc_entries_are_aligned_and_end_with_the_trailer() {
        let mut out = Vec::new();
        entry(&mut out, 7, 0o100_644, "init", b"hello");
        assert_eq!(&out[..6], b"070701");
        assert_eq!(&out[6..14], b"00000007");
        assert_eq!(&out[14..22], format!("{:08x}", 0o100_644).as_bytes());
        // Header 110 + "init\0" 5 = 115, padded to 116; data 5 padded to 8.
        assert_eq!(out.len(), 116 + 8);
        assert_eq!(&out[110..115], b"init\0");
        assert_eq!(&out[116..121], b"hello");
        let mut a = Archive::default();
        a.file("/etc/x", 0o644, vec![1, 2, 3]);
        let mut raw = Vec::new();
        let _ = std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&a.gzip()[..]), &mut raw);
        let text = String::from_utf8_lossy(&raw);
        assert!(text.contains("etc\0") && text.contains("etc/x\0") && text.contains("dev\0"));
        assert!(raw.len().is_multiple_of(4));
        assert!(text.contains("TRAILER!!!"), "the trailer ends the archive");
    }

    /// A static or non-ELF file names no library.
    #[test]
    fn needed_of_a_non_elf_file_is_empty() {
        assert!(needed(b"#!/bin/sh\n").is_empty());
    }
}
