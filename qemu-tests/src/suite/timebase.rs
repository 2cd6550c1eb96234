//! riscv64's timebase comes from the device tree, so a damaged tree can name any frequency.
//! The board's own tree (QEMU `dumpdtb`) is booted with its `timebase-frequency` rewritten:
//! a plausible value the kernel must use (the control: the rewrite reaches the kernel), and
//! one below and one above the port's range, which it must refuse with exit 4 and one line.

use std::path::Path;
use std::time::Duration;

use crate::qemu::{self, Boot, Machine, Mode};

/// The kernel's exit code when the machine is not what it needs (`scenario::EXIT_MACHINE`).
const EXIT_MACHINE: i32 = 4;

/// The frequencies booted, and whether the kernel must take each: a control, then one below
/// and one above `TIMEBASE_HZ_RANGE` (1 kHz to 1 GHz).
pub(super) const TIMEBASES: [(u32, bool); 3] = [(12_500_000, true), (999, false), (2_000_000_000, false)];

/// Sets every `name` property of the flattened device tree `dtb` whose value is one cell to
/// `value`; returns how many it set (0 if the blob is not a tree or has none).
pub(super) fn set_cell(dtb: &mut [u8], name: &str, value: u32) -> usize {
    let word = |b: &[u8], at: usize| b.get(at..at + 4).map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    if word(dtb, 0) != Some(0xd00d_feed) {
        return 0;
    }
    let (Some(structs), Some(strings)) = (word(dtb, 8), word(dtb, 12)) else { return 0 };
    let (structs, strings) = (structs as usize, strings as usize);
    let name_at = |off: usize| -> Option<&[u8]> {
        let s = dtb.get(strings + off..)?;
        Some(&s[..s.iter().position(|&b| b == 0)?])
    };
    let mut at = structs;
    let mut found = Vec::new();
    loop {
        match word(dtb, at) {
            // A node's start: its name, NUL-terminated, padded to a word.
            Some(1) => {
                let Some(len) = dtb.get(at + 4..).and_then(|s| s.iter().position(|&b| b == 0)) else {
                    return 0;
                };
                at += 4 + (len + 1).next_multiple_of(4);
            }
            // A property: its length, its name's offset, its value padded to a word.
            Some(3) => {
                let (Some(len), Some(off)) = (word(dtb, at + 4), word(dtb, at + 8)) else { return 0 };
                if len == 4 && name_at(off as usize) == Some(name.as_bytes()) {
                    found.push(at + 12);
                }
                at += 12 + (len as usize).next_multiple_of(4);
            }
            // A node's end, a no-op.
            Some(2) | Some(4) => at += 4,
            // The end of the structure block.
            Some(9) => break,
            _ => return 0,
        }
    }
    for &v in &found {
        dtb[v..v + 4].copy_from_slice(&value.to_be_bytes());
    }
    found.len()
}

/// Dumps the board's device tree (QEMU `-machine dumpdtb`) into `to`.
fn dump(m: &Machine, to: &Path) -> Result<Vec<u8>, String> {
    let mut cmd = qemu::machine_command(m, Mode::Deterministic);
    cmd.arg("-machine").arg(format!("dumpdtb={}", to.display()));
    let (code, _, _) = qemu::run_limited(&mut cmd, Mode::Deterministic, Duration::from_secs(30));
    let dtb = std::fs::read(to).map_err(|e| format!("QEMU dumped no device tree ({code:?}): {e}"))?;
    Ok(dtb)
}

/// Whether the boot with `hz` as its timebase ended as it must.
fn judge(hz: u32, taken: bool, b: &Boot) -> Result<(), String> {
    if taken {
        let line = format!("counter {hz} Hz");
        match b.code {
            Some(0) if b.lines.iter().any(|l| l.contains(&line)) => Ok(()),
            _ => Err(format!("timebase {hz} Hz: exit {:?}, no \"{line}\"", b.code)),
        }
    } else {
        match b.code {
            Some(EXIT_MACHINE) if b.lines.iter().any(|l| l.contains("timebase-frequency out of range")) => {
                Ok(())
            }
            _ => {
                Err(format!("timebase {hz} Hz: exit {:?} (timed out: {}), not refused", b.code, b.timed_out))
            }
        }
    }
}

/// Boots riscv64 with each of [`TIMEBASES`]; one verdict for the set. Returns (passed, failed).
pub(super) fn run(m: &Machine) -> (u64, u64) {
    eprint!(
        "xtest: qemu {} device tree's timebase: {} Hz used, {} Hz and {} Hz refused with exit {EXIT_MACHINE} ... ",
        m.arch.name(),
        TIMEBASES[0].0,
        TIMEBASES[1].0,
        TIMEBASES[2].0
    );
    let start = std::time::Instant::now();
    let dir = std::env::temp_dir().join(format!("fairsched-dtb-{}-{}", std::process::id(), qemu::unique()));
    let result =
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display())).and_then(|()| {
            let board = dump(m, &dir.join("board.dtb"))?;
            let mut why = Vec::new();
            let mut trees = Vec::new();
            for (i, &(hz, _)) in TIMEBASES.iter().enumerate() {
                let mut dtb = board.clone();
                if set_cell(&mut dtb, "timebase-frequency", hz) == 0 {
                    return Err("the board's device tree has no timebase-frequency cell".into());
                }
                let path = dir.join(format!("timebase-{i}.dtb"));
                std::fs::write(&path, &dtb).map_err(|e| format!("{}: {e}", path.display()))?;
                trees.push(path);
            }
            crate::pool::in_order(
                Mode::Deterministic,
                TIMEBASES.len(),
                |i| {
                    let m = Machine { dtb: Some(trees[i].clone()), ..m.clone() };
                    qemu::boot(&m, "scenario=boot", Mode::Deterministic, Duration::from_secs(60))
                },
                |i, b| {
                    if let Err(e) = judge(TIMEBASES[i].0, TIMEBASES[i].1, &b) {
                        why.push(e);
                    }
                },
            );
            if why.is_empty() {
                Ok(())
            } else {
                Err(why.join("; "))
            }
        });
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(()) => {
            eprintln!("ok ({:.1} s)", start.elapsed().as_secs_f64());
            (1, 0)
        }
        Err(why) => {
            eprintln!("FAILED: {why}");
            (0, 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree of a root with one property and a `cpus` node holding the timebase cell and a
    /// longer property of the same name, which must stay as it is.
    fn tree() -> Vec<u8> {
        let strings = b"model\0timebase-frequency\0".to_vec();
        let mut s = Vec::new();
        let w = |s: &mut Vec<u8>, v: u32| s.extend_from_slice(&v.to_be_bytes());
        w(&mut s, 1);
        s.extend_from_slice(&[0, 0, 0, 0]);
        w(&mut s, 3);
        w(&mut s, 3);
        w(&mut s, 0);
        s.extend_from_slice(b"ab\0\0");
        w(&mut s, 1);
        s.extend_from_slice(b"cpus\0\0\0\0");
        w(&mut s, 3);
        w(&mut s, 4);
        w(&mut s, 6);
        w(&mut s, 10_000_000);
        w(&mut s, 4);
        w(&mut s, 3);
        w(&mut s, 8);
        w(&mut s, 6);
        w(&mut s, 0);
        w(&mut s, 7);
        w(&mut s, 2);
        w(&mut s, 2);
        w(&mut s, 9);
        let mut dtb = vec![0u8; 40];
        dtb[0..4].copy_from_slice(&0xd00d_feedu32.to_be_bytes());
        dtb[8..12].copy_from_slice(&40u32.to_be_bytes());
        dtb[12..16].copy_from_slice(&(40 + s.len() as u32).to_be_bytes());
        dtb.extend_from_slice(&s);
        dtb.extend_from_slice(&strings);
        dtb
    }

    #[test]
    fn set_cell_rewrites_only_one_cell_values_of_the_name() {
        let mut dtb = tree();
        let before = dtb.clone();
        assert_eq!(set_cell(&mut dtb, "timebase-frequency", 999), 1);
        let changed: Vec<usize> = (0..dtb.len()).filter(|&i| dtb[i] != before[i]).collect();
        let at = before.windows(4).position(|w| w == 10_000_000u32.to_be_bytes()).expect("the cell");
        assert!(changed.iter().all(|&i| (at..at + 4).contains(&i)), "{changed:?}");
        assert_eq!(&dtb[at..at + 4], &999u32.to_be_bytes());
        assert_eq!(set_cell(&mut dtb, "model", 1), 0, "a 3-byte value is no cell");
    }

    #[test]
    fn set_cell_refuses_what_is_not_a_tree() {
        let mut dtb = tree();
        dtb[0] = 0;
        assert_eq!(set_cell(&mut dtb, "timebase-frequency", 999), 0);
        let mut cut = tree();
        cut.truncate(60);
        assert_eq!(set_cell(&mut cut, "timebase-frequency", 999), 0);
        assert_eq!(set_cell(&mut [], "timebase-frequency", 999), 0);
    }
}
