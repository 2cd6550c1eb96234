//! riscv64 reads its machine from the device tree OpenSBI passes on, so a damaged tree can say
//! anything that parses. The board's own tree (QEMU `dumpdtb`) is booted with one property
//! rewritten in place per boot: rates the kernel must use, or refuse with exit 4 and one line
//! (`timebase-frequency`, checked against the port's counter range), a hardware id listed
//! twice, which it must refuse, and a CPU the firmware marks failed, which it must leave out.

use std::path::Path;
use std::time::Duration;

use crate::qemu::{self, Boot, Machine, Mode};

/// The kernel's exit code when the machine is not what it needs (`scenario::EXIT_MACHINE`).
const EXIT_MACHINE: i32 = 4;

/// How a boot of an altered tree must end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expect {
    /// Exit 0 with a line containing this.
    Boots(&'static str),
    /// Exit 4 with a line containing this.
    Refused(&'static str),
}

/// One alteration: what it is, the node and property it rewrites, the value it writes (of the
/// old value's length) and how the boot must end.
pub(super) struct Alteration {
    pub(super) what: &'static str,
    pub(super) node: &'static str,
    pub(super) property: &'static str,
    pub(super) value: &'static [u8],
    pub(super) expect: Expect,
}

/// The alterations booted. The first is the control: a plausible rate, which shows that the
/// rewritten tree reaches the kernel.
pub(super) const ALTERATIONS: &[Alteration] = &[
    Alteration {
        what: "timebase-frequency 12.5 MHz",
        node: "/cpus",
        property: "timebase-frequency",
        value: &12_500_000u32.to_be_bytes(),
        expect: Expect::Boots("counter 12500000 Hz"),
    },
    Alteration {
        what: "timebase-frequency 999 Hz",
        node: "/cpus",
        property: "timebase-frequency",
        value: &999u32.to_be_bytes(),
        expect: Expect::Refused("timebase-frequency out of range"),
    },
    Alteration {
        what: "timebase-frequency 2 GHz",
        node: "/cpus",
        property: "timebase-frequency",
        value: &2_000_000_000u32.to_be_bytes(),
        expect: Expect::Refused("timebase-frequency out of range"),
    },
    Alteration {
        what: "cpu@2 with cpu@1's hart id",
        node: "/cpus/cpu@2",
        property: "reg",
        value: &1u32.to_be_bytes(),
        expect: Expect::Refused("lists hardware id 0x1 twice"),
    },
    Alteration {
        what: "cpu@3 marked failed",
        node: "/cpus/cpu@3",
        property: "status",
        value: b"fail\0",
        expect: Expect::Boots("boot: OK (7 CPUs"),
    },
];

/// A property of a flattened device tree: its node's path, its name, and where its value lies.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Prop {
    pub(super) node: String,
    pub(super) name: String,
    pub(super) at: usize,
    pub(super) len: usize,
}

/// Every property of the flattened device tree `dtb`, in order; `None` if the blob is not a
/// well-formed tree.
pub(super) fn props(dtb: &[u8]) -> Option<Vec<Prop>> {
    let word = |at: usize| dtb.get(at..at + 4).map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    if word(0)? != 0xd00d_feed {
        return None;
    }
    let (structs, strings) = (word(8)? as usize, word(12)? as usize);
    let text = |from: usize| -> Option<&str> {
        let s = dtb.get(from..)?;
        std::str::from_utf8(&s[..s.iter().position(|&b| b == 0)?]).ok()
    };
    let (mut path, mut out, mut at) = (Vec::<String>::new(), Vec::new(), structs);
    loop {
        match word(at)? {
            // A node's start: its name, NUL-terminated, padded to a word.
            1 => {
                let name = text(at + 4)?;
                path.push(name.to_string());
                at += 4 + (name.len() + 1).next_multiple_of(4);
            }
            // A property: its length, its name's offset, its value padded to a word.
            3 => {
                let (len, off) = (word(at + 4)? as usize, word(at + 8)? as usize);
                dtb.get(at + 12..at + 12 + len)?;
                let node = if path.len() <= 1 {
                    "/".to_string()
                } else {
                    path[1..].iter().map(|p| format!("/{p}")).collect()
                };
                out.push(Prop { node, name: text(strings + off)?.to_string(), at: at + 12, len });
                at += 12 + len.next_multiple_of(4);
            }
            2 => {
                path.pop()?;
                at += 4;
            }
            4 => at += 4,
            9 => return path.is_empty().then_some(out),
            _ => return None,
        }
    }
}

/// `dtb` with property `name` of `node` set to `value`, which must be as long as the old one;
/// `None` if there is no such property of that length.
pub(super) fn altered(dtb: &[u8], node: &str, name: &str, value: &[u8]) -> Option<Vec<u8>> {
    let p = props(dtb)?.into_iter().find(|p| p.node == node && p.name == name && p.len == value.len())?;
    let mut out = dtb.to_vec();
    out[p.at..p.at + p.len].copy_from_slice(value);
    Some(out)
}

/// Dumps the board's device tree (QEMU `-machine dumpdtb`) into `to`.
fn dump(m: &Machine, to: &Path) -> Result<Vec<u8>, String> {
    let mut cmd = qemu::machine_command(m, Mode::Deterministic);
    cmd.arg("-machine").arg(format!("dumpdtb={}", to.display()));
    let (code, _, _) = qemu::run_limited(&mut cmd, Mode::Deterministic, Duration::from_secs(30));
    std::fs::read(to).map_err(|e| format!("QEMU dumped no device tree ({code:?}): {e}"))
}

/// Whether the boot of `a`'s tree ended as it must.
fn judge(a: &Alteration, b: &Boot) -> Result<(), String> {
    let (code, line) = match a.expect {
        Expect::Boots(line) => (0, line),
        Expect::Refused(line) => (EXIT_MACHINE, line),
    };
    if b.code == Some(code) && b.lines.iter().any(|l| l.contains(line)) {
        Ok(())
    } else {
        Err(format!(
            "{}: exit {:?} (timed out: {}), not exit {code} with \"{line}\"",
            a.what, b.code, b.timed_out
        ))
    }
}

/// Boots riscv64 with each of [`ALTERATIONS`]; one verdict for the set. Returns (passed, failed).
pub(super) fn run(m: &Machine) -> (u64, u64) {
    eprint!(
        "xtest: qemu {} altered device trees: {} boots, each used or refused with exit {EXIT_MACHINE} as it must ... ",
        m.arch.name(),
        ALTERATIONS.len()
    );
    let start = std::time::Instant::now();
    let dir = std::env::temp_dir().join(format!("fairsched-dtb-{}-{}", std::process::id(), qemu::unique()));
    let result =
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display())).and_then(|()| {
            let board = dump(m, &dir.join("board.dtb"))?;
            let mut trees = Vec::new();
            for (i, a) in ALTERATIONS.iter().enumerate() {
                let dtb = altered(&board, a.node, a.property, a.value)
                    .ok_or(format!("the board's device tree has no {} {} to rewrite", a.node, a.property))?;
                let path = dir.join(format!("altered-{i}.dtb"));
                std::fs::write(&path, &dtb).map_err(|e| format!("{}: {e}", path.display()))?;
                trees.push(path);
            }
            let mut why = Vec::new();
            crate::pool::in_order(
                Mode::Deterministic,
                ALTERATIONS.len(),
                |i| {
                    let m = Machine { dtb: Some(trees[i].clone()), ..m.clone() };
                    qemu::boot(&m, "scenario=boot", Mode::Deterministic, Duration::from_secs(60))
                },
                |i, b| {
                    if let Err(e) = judge(&ALTERATIONS[i], &b) {
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

    /// A tree: the root with a 3-byte property, and `cpus` holding the timebase cell and a
    /// `cpu@0` node with its `reg`.
    fn tree() -> Vec<u8> {
        let strings = b"model\0timebase-frequency\0reg\0".to_vec();
        let mut s = Vec::new();
        let w = |s: &mut Vec<u8>, v: u32| s.extend_from_slice(&v.to_be_bytes());
        w(&mut s, 1);
        s.extend_from_slice(&[0; 4]);
        for v in [3, 3, 0] {
            w(&mut s, v);
        }
        s.extend_from_slice(b"ab\0\0");
        w(&mut s, 1);
        s.extend_from_slice(b"cpus\0\0\0\0");
        for v in [3, 4, 6, 10_000_000, 4, 1] {
            w(&mut s, v);
        }
        s.extend_from_slice(b"cpu@0\0\0\0");
        for v in [3, 4, 25, 7, 2, 2, 2, 9] {
            w(&mut s, v);
        }
        let mut dtb = vec![0u8; 40];
        dtb[0..4].copy_from_slice(&0xd00d_feedu32.to_be_bytes());
        dtb[8..12].copy_from_slice(&40u32.to_be_bytes());
        dtb[12..16].copy_from_slice(&(40 + s.len() as u32).to_be_bytes());
        dtb.extend_from_slice(&s);
        dtb.extend_from_slice(&strings);
        dtb
    }

    #[test]
    fn properties_are_read_with_their_nodes_paths() {
        let names: Vec<(String, String)> =
            props(&tree()).expect("a tree").into_iter().map(|p| (p.node, p.name)).collect();
        let want = [("/", "model"), ("/cpus", "timebase-frequency"), ("/cpus/cpu@0", "reg")];
        assert_eq!(names, want.map(|(n, p)| (n.to_string(), p.to_string())));
    }

    #[test]
    fn an_alteration_rewrites_that_value_only() {
        let before = tree();
        let after = altered(&before, "/cpus/cpu@0", "reg", &9u32.to_be_bytes()).expect("cpu@0's reg");
        let changed: Vec<usize> = (0..before.len()).filter(|&i| after[i] != before[i]).collect();
        let at = before.windows(4).position(|w| w == 7u32.to_be_bytes()).expect("the reg value");
        assert_eq!(changed, [at + 3]);
        assert_eq!(&after[at..at + 4], &9u32.to_be_bytes());
        assert!(altered(&before, "/cpus", "reg", &9u32.to_be_bytes()).is_none(), "no reg on /cpus");
        assert!(altered(&before, "/", "model", &9u32.to_be_bytes()).is_none(), "a value of another length");
    }

    #[test]
    fn what_is_not_a_tree_has_no_properties() {
        let mut bad = tree();
        bad[0] = 0;
        assert_eq!(props(&bad), None);
        let mut cut = tree();
        cut.truncate(70);
        assert_eq!(props(&cut), None);
        assert_eq!(props(&[]), None);
        // A node left open.
        let mut open = tree();
        let end = open.windows(4).rposition(|w| w == 2u32.to_be_bytes()).expect("an end");
        open[end + 3] = 4;
        assert_eq!(props(&open), None);
    }
}
