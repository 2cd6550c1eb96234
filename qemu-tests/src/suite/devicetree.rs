//! The virt boards' kernels read their machine from a device tree (riscv64's from OpenSBI,
//! aarch64's from QEMU), so a damaged tree can say anything that parses. The board's own tree
//! (QEMU `dumpdtb`) is booted with one property rewritten in place, or renamed, per boot. On
//! both boards: a hardware id listed twice, a `cpu-map` naming a CPU twice, a `numa-node-id`
//! that is not a number and a node with two `reg`s, which the kernel must refuse with exit 4
//! and one line. On riscv64 also rates the kernel must use or refuse
//! (`timebase-frequency`, checked against the port's counter range) and a CPU the firmware
//! marks failed, which it must leave out; on aarch64 a CPU whose Aff0 an SGI's target list
//! does not reach, which it must refuse.

use std::path::Path;
use std::time::Duration;

use super::judges::EXIT_MACHINE;
use crate::kernel_devicetree::devicetree::{DeviceTree, HEADER_LEN};
use crate::qemu::{self, Arch, Boot, Machine, Mode};

/// How a boot of an altered tree must end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Exit 0 with a line containing this.
    Boots(&'static str),
    /// Exit 4 with a line containing this.
    Refused(&'static str),
}

/// The value an alteration writes.
#[derive(Clone, Copy, Debug)]
enum Value {
    /// These bytes.
    Bytes(&'static [u8]),
    /// Another property's value in the board's tree (a phandle QEMU chose, say).
    Of { node: &'static str, property: &'static str },
    /// The property's own value under this name.
    Named(&'static str),
}

/// One alteration: what it is, the node and property it rewrites, the value it writes (of the
/// old value's length) and how the boot must end.
struct Alteration {
    what: &'static str,
    node: &'static str,
    property: &'static str,
    value: Value,
    expect: Expect,
}

/// A CPU given another's hardware id (a hart id, an affinity), which the kernel must refuse.
const ID_TWICE: Alteration = Alteration {
    what: "cpu@2 with cpu@1's hardware id",
    node: "/cpus/cpu@2",
    property: "reg",
    value: Value::Bytes(&1u32.to_be_bytes()),
    expect: Expect::Refused("lists hardware id 0x1 twice"),
};

/// `cpu-map` core `core1` naming the CPU core `core0` names (its phandle copied from the
/// board's tree), which the kernel must refuse rather than guess the CPU's cluster.
const fn map_names_twice(core0: &'static str, core1: &'static str) -> Alteration {
    Alteration {
        what: "cpu-map's core1 naming core0's CPU",
        node: core1,
        property: "cpu",
        value: Value::Of { node: core0, property: "cpu" },
        expect: Expect::Refused("cpu-map names hardware id 0x"),
    }
}

/// cpu@1's `compatible` (a string) as its `numa-node-id`, which must be one number: the
/// kernel must refuse it rather than read the CPU as one of no node.
const NODE_MALFORMED: Alteration = Alteration {
    what: "cpu@1's compatible named numa-node-id",
    node: "/cpus/cpu@1",
    property: "compatible",
    value: Value::Named("numa-node-id"),
    expect: Expect::Refused("cpu@1 has a malformed numa-node-id"),
};

/// cpu@1's `device_type` named `reg`: two `reg`s in one node, which the kernel must refuse
/// rather than use the first.
const REG_TWICE: Alteration = Alteration {
    what: "cpu@1 with two regs",
    node: "/cpus/cpu@1",
    property: "device_type",
    value: Value::Named("reg"),
    expect: Expect::Refused("two properties or two nodes of one name"),
};

/// The alterations booted on riscv64. The first is the control: a plausible rate, which shows
/// that the rewritten tree reaches the kernel.
const RISCV64: &[Alteration] = &[
    Alteration {
        what: "timebase-frequency 12.5 MHz",
        node: "/cpus",
        property: "timebase-frequency",
        value: Value::Bytes(&12_500_000u32.to_be_bytes()),
        expect: Expect::Boots("counter 12500000 Hz"),
    },
    Alteration {
        what: "timebase-frequency 999 Hz",
        node: "/cpus",
        property: "timebase-frequency",
        value: Value::Bytes(&999u32.to_be_bytes()),
        expect: Expect::Refused("timebase-frequency out of range"),
    },
    Alteration {
        what: "timebase-frequency 2 GHz",
        node: "/cpus",
        property: "timebase-frequency",
        value: Value::Bytes(&2_000_000_000u32.to_be_bytes()),
        expect: Expect::Refused("timebase-frequency out of range"),
    },
    ID_TWICE,
    map_names_twice("/cpus/cpu-map/cluster0/core0", "/cpus/cpu-map/cluster0/core1"),
    NODE_MALFORMED,
    REG_TWICE,
    Alteration {
        what: "cpu@3 marked failed",
        node: "/cpus/cpu@3",
        property: "status",
        value: Value::Bytes(b"fail\0"),
        expect: Expect::Boots("boot: OK (7 CPUs"),
    },
];

/// The alterations booted on aarch64. Each refusal names what only the rewritten tree says,
/// so each shows that the tree reached the kernel.
const AARCH64: &[Alteration] = &[
    ID_TWICE,
    map_names_twice("/cpus/cpu-map/socket0/cluster0/core0", "/cpus/cpu-map/socket0/cluster0/core1"),
    NODE_MALFORMED,
    REG_TWICE,
    Alteration {
        what: "cpu@1 at Aff0 16",
        node: "/cpus/cpu@1",
        property: "reg",
        value: Value::Bytes(&0x10u32.to_be_bytes()),
        expect: Expect::Refused("hardware id 0x10): its Aff0 is above 15"),
    },
];

/// The alterations booted on `arch` (none on the boards without a device tree).
fn alterations(arch: Arch) -> &'static [Alteration] {
    match arch {
        Arch::Riscv64 => RISCV64,
        Arch::Aarch64 => AARCH64,
        _ => &[],
    }
}

/// `dtb` with property `name` of the node at `node` set to `value`, which must be as long as
/// the old one; `None` if the blob is not a well-formed tree (the kernel's reader opens it) or
/// has no such property of that length.
fn altered(dtb: &[u8], node: &str, name: &str, value: &[u8]) -> Option<Vec<u8>> {
    let tree = DeviceTree::new(dtb).ok()?;
    let old = tree.find(node)?.property(name)?.value;
    if old.len() != value.len() {
        return None;
    }
    // The reader's value is a slice of `dtb`: its offset there.
    let at = old.as_ptr() as usize - dtb.as_ptr() as usize;
    let mut out = dtb.to_vec();
    out[at..at + value.len()].copy_from_slice(value);
    Some(out)
}

/// Word `i` of the tree's big-endian header (1 its total size, 2 the structure block's
/// offset, 3 the strings', 4 the reservation map's, 8 the strings' size, 9 the structure's
/// size), if the blob holds it.
fn header_word(dtb: &[u8], i: usize) -> Option<usize> {
    Some(u32::from_be_bytes(dtb.get(4 * i..4 * i + 4)?.try_into().ok()?) as usize)
}

/// `dtb` with property `name` of the node at `node` renamed `to`, its value kept: `to` is
/// added at the strings block's end (growing the blob if the block ends it). `None` if the blob
/// is not a well-formed tree, has no such property, or has its structure block after its
/// strings.
fn renamed(dtb: &[u8], node: &str, name: &str, to: &str) -> Option<Vec<u8>> {
    let tree = DeviceTree::new(dtb).ok()?;
    let value = tree.find(node)?.property(name)?.value;
    // A property is its length, its name's offset in the strings block, then its value.
    let name_at = (value.as_ptr() as usize - dtb.as_ptr() as usize).checked_sub(4)?;
    let word = |i: usize| header_word(dtb, i);
    let (structs_end, strings, size) = (word(2)? + word(9)?, word(3)?, word(8)?);
    let end = strings + size;
    if structs_end > strings || end > dtb.len() {
        return None;
    }
    let mut out = dtb.to_vec();
    let grown = end + to.len() + 1;
    if out.len() < grown {
        out.resize(grown, 0);
    }
    out[end..end + to.len()].copy_from_slice(to.as_bytes());
    out[end + to.len()] = 0;
    let mut put = |i: usize, v: usize| out[i..i + 4].copy_from_slice(&(v as u32).to_be_bytes());
    put(name_at, size);
    put(4 * 8, grown - strings);
    put(4, word(1)?.max(grown));
    Some(out)
}

/// `dtb` without the free space at its end (QEMU's dump keeps the 1 MiB it built the tree
/// in): QEMU places an aarch64 tree below the kernel's image, and skips, without a word, one
/// that does not fit there with room to grow. `None` unless the header is whole, the
/// reservation map lies before both blocks, and the blocks end within the blob and its total
/// size.
fn packed(dtb: &[u8]) -> Option<Vec<u8>> {
    let word = |i: usize| header_word(dtb, i);
    let (structs, strings, map) = (word(2)?, word(3)?, word(4)?);
    let end = structs.checked_add(word(9)?)?.max(strings.checked_add(word(8)?)?);
    // The map's last entry, all zeros, is 16 bytes.
    let map_fits = map >= HEADER_LEN && map.checked_add(16)? <= structs.min(strings);
    if !map_fits || end > dtb.len() || end > word(1)? {
        return None;
    }
    let mut out = dtb[..end].to_vec();
    out[4..8].copy_from_slice(&(end as u32).to_be_bytes());
    Some(out)
}

/// The value of property `name` of the node at `node` in `dtb`, if it has one.
fn property_value(dtb: &[u8], node: &str, name: &str) -> Option<Vec<u8>> {
    Some(DeviceTree::new(dtb).ok()?.find(node)?.property(name)?.value.to_vec())
}

/// Dumps the board's device tree (QEMU `-machine dumpdtb`) into `to`.
fn dump(m: &Machine, to: &Path) -> Result<Vec<u8>, String> {
    let mut cmd = qemu::machine_command(m, Mode::Deterministic);
    cmd.arg("-machine").arg(format!("dumpdtb={}", to.display()));
    let ran = qemu::run_limited(&mut cmd, Mode::Deterministic, Duration::from_secs(30));
    let code = ran.code;
    std::fs::read(to).map_err(|e| match ran.not_started {
        Some(why) => format!("QEMU dumped no device tree: {why}"),
        None => format!("QEMU dumped no device tree ({code:?}): {e}"),
    })
}

/// The board's tree `board` with `a` made.
fn rewritten(board: &[u8], a: &Alteration) -> Result<Vec<u8>, String> {
    let value = match a.value {
        Value::Bytes(v) => v.to_vec(),
        Value::Of { node, property } => property_value(board, node, property)
            .ok_or(format!("the board's device tree has no {node} {property} to copy"))?,
        Value::Named(to) => {
            return renamed(board, a.node, a.property, to)
                .ok_or(format!("the board's device tree has no {} {} to rename", a.node, a.property))
        }
    };
    altered(board, a.node, a.property, &value)
        .ok_or(format!("the board's device tree has no {} {} to rewrite", a.node, a.property))
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
            "{}: exit {:?} (timed out: {}), not exit {code} with \"{line}\" (last line: {:?})",
            a.what,
            b.code,
            b.timed_out,
            b.lines.last().map_or("", String::as_str)
        ))
    }
}

/// Boots `m` with each of its [`alterations`]; one verdict for the set. Returns (passed, failed).
pub(super) fn run(m: &Machine) -> (u64, u64) {
    let alterations = alterations(m.arch);
    eprint!(
        "xtest: qemu {} altered device trees: {} boots, each used or refused with exit {EXIT_MACHINE} as it must ... ",
        m.arch.name(),
        alterations.len()
    );
    let start = std::time::Instant::now();
    let dir = std::env::temp_dir().join(format!("fairsched-dtb-{}-{}", std::process::id(), qemu::unique()));
    let result =
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display())).and_then(|()| {
            let board = dump(m, &dir.join("board.dtb"))?;
            let mut trees = Vec::new();
            for (i, a) in alterations.iter().enumerate() {
                let mut dtb = rewritten(&board, a)?;
                // (riscv64's tree is booted as dumped, as it always was; OpenSBI edits it before the kernel.)
                if m.arch == Arch::Aarch64 {
                    dtb = packed(&dtb).ok_or("the board's device tree cannot be packed (its blocks end beyond it, or its reservation map is not first)")?;
                }
                let path = dir.join(format!("altered-{i}.dtb"));
                std::fs::write(&path, &dtb).map_err(|e| format!("{}: {e}", path.display()))?;
                trees.push(path);
            }
            let mut why = Vec::new();
            crate::pool::in_order(
                Mode::Deterministic,
                alterations.len(),
                |i| {
                    let m = Machine { dtb: Some(trees[i].clone()), ..m.clone() };
                    qemu::boot(&m, "scenario=boot", Mode::Deterministic, Duration::from_secs(60))
                },
                |i, b| {
                    if let Err(e) = judge(&alterations[i], &b) {
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
    use crate::kernel_devicetree::devicetree::DtError;
    use crate::kernel_devicetree::trees::virt_tree;

    #[test]
    fn an_alteration_rewrites_that_value_only() {
        let before = virt_tree();
        let value = 9u32.to_be_bytes();
        let after = altered(&before, "/cpus/cpu@1", "reg", &value).expect("cpu@1's reg");
        let changed: Vec<usize> = (0..before.len()).filter(|&i| after[i] != before[i]).collect();
        assert_eq!(changed.len(), 1, "{changed:?}");
        let tree = DeviceTree::new(&after).expect("still a tree");
        let reg = |n: &str| tree.find(n).and_then(|c| c.property("reg")).and_then(|p| p.as_usize());
        assert_eq!((reg("/cpus/cpu@0"), reg("/cpus/cpu@1"), reg("/cpus/cpu@2")), (Some(0), Some(9), Some(2)));
        let status = altered(&before, "/psci", "method", b"smc\0").expect("psci's method");
        let method =
            DeviceTree::new(&status).ok().and_then(|t| t.find("/psci")?.property("method")?.as_str());
        assert_eq!(method, Some("smc"));
    }

    #[test]
    fn a_value_can_be_another_propertys() {
        let tree = virt_tree();
        let core0 = property_value(&tree, "/cpus/cpu-map/cluster1/core0", "cpu").expect("core0's cpu");
        assert_eq!(core0, 0x8002u32.to_be_bytes());
        let after = altered(&tree, "/cpus/cpu-map/cluster1/core1", "cpu", &core0).expect("core1's cpu");
        assert_eq!(property_value(&after, "/cpus/cpu-map/cluster1/core1", "cpu"), Some(core0));
        assert_eq!(property_value(&tree, "/cpus/cpu-map/cluster9/core0", "cpu"), None);
    }

    /// `tree` with header word `i` set to `v`.
    fn with_word(tree: &[u8], i: usize, v: usize) -> Vec<u8> {
        let mut t = tree.to_vec();
        t[4 * i..4 * i + 4].copy_from_slice(&(v as u32).to_be_bytes());
        t
    }

    #[test]
    fn a_packed_tree_ends_with_its_last_block() {
        let tree = virt_tree();
        // Room at the end, as QEMU's dump has: packing gives the tree back exactly.
        let mut roomy = tree.clone();
        roomy.resize(tree.len() + 4096, 0);
        let roomy = with_word(&roomy, 1, roomy.len());
        assert_eq!(packed(&roomy), Some(tree.clone()));
        assert_eq!(packed(&tree), Some(tree.clone()), "a packed tree stays as it is");
        // The structure block last: its end is the tree's.
        let word = |t: &[u8], i: usize| u32::from_be_bytes(t[4 * i..4 * i + 4].try_into().unwrap()) as usize;
        let (structs, strings) = ((word(&tree, 2), word(&tree, 9)), (word(&tree, 3), word(&tree, 8)));
        assert!(strings.0 == structs.0 + structs.1, "virt_tree: the strings follow the structure");
        let mut swapped = tree[..HEADER_LEN + 16].to_vec();
        swapped.extend_from_slice(&tree[strings.0..strings.0 + strings.1]);
        swapped.extend_from_slice(&tree[structs.0..structs.0 + structs.1]);
        let swapped = with_word(&swapped, 3, HEADER_LEN + 16);
        let swapped = with_word(&swapped, 2, HEADER_LEN + 16 + strings.1);
        let mut roomy = swapped.clone();
        roomy.resize(swapped.len() + 64, 0);
        let roomy = with_word(&roomy, 1, roomy.len());
        assert_eq!(packed(&roomy), Some(with_word(&swapped, 1, swapped.len())));
        // Refused: blocks beyond the blob or its total size, a header cut short or whose
        // blocks would overlap it, a reservation map after a block.
        assert_eq!(packed(&tree[..tree.len() - 1]), None, "blocks beyond the blob");
        assert_eq!(packed(&with_word(&tree, 1, tree.len() - 1)), None, "blocks beyond the total size");
        assert_eq!(packed(&tree[..12]), None, "no whole header");
        let zeros = with_word(&with_word(&with_word(&with_word(&tree, 2, 0), 3, 0), 8, 0), 9, 0);
        assert_eq!(packed(&zeros), None, "blocks inside the header");
        assert_eq!(packed(&with_word(&tree, 4, tree.len() - 16)), None, "the map after the blocks");
        assert_eq!(packed(&with_word(&tree, 9, u32::MAX as usize)), None, "a structure block past the blob");
    }

    #[test]
    fn a_renamed_property_keeps_its_value_under_the_new_name() {
        let tree = virt_tree();
        let after =
            renamed(&tree, "/cpus/cpu@1", "device_type", "capacity-dmips-mhz").expect("cpu@1's device_type");
        assert_eq!(after.len(), tree.len() + "capacity-dmips-mhz".len() + 1, "virt_tree's strings end it");
        let t = DeviceTree::new(&after).expect("still a tree");
        let cpu1 = t.find("/cpus/cpu@1").unwrap();
        let names: Vec<&str> = cpu1.properties().map(|p| p.name).collect();
        assert_eq!(names, ["reg", "phandle", "numa-node-id", "capacity-dmips-mhz"]);
        assert_eq!(cpu1.property("capacity-dmips-mhz").map(|p| p.value), Some(&b"cpu\0"[..]));
        // Renamed as one already there: two of one name, which the reader refuses.
        let twice = renamed(&tree, "/cpus/cpu@1", "device_type", "reg").expect("cpu@1's device_type");
        assert_eq!(DeviceTree::new(&twice).err(), Some(DtError::Duplicate));
        assert_eq!(property_value(&after, "/cpus/cpu@2", "device_type"), Some(b"cpu\0".to_vec()));
        // Room after the strings block is used in place; a structure block last is refused.
        let mut roomy = tree.clone();
        roomy.resize(tree.len() + 64, 0);
        let roomy = with_word(&roomy, 1, roomy.len());
        let in_place = renamed(&roomy, "/psci", "method", "x").expect("psci's method");
        assert_eq!(in_place.len(), roomy.len());
        let x = DeviceTree::new(&in_place).ok().and_then(|t| t.find("/psci")?.property("x")?.as_str());
        assert_eq!(x, Some("hvc"));
        assert_eq!(renamed(&tree, "/psci", "nothing", "x"), None);
        let strings_first = with_word(&tree, 3, HEADER_LEN + 16);
        assert_eq!(renamed(&strings_first, "/psci", "method", "x"), None);
    }

    #[test]
    fn only_a_property_there_and_of_that_length_is_altered() {
        let tree = virt_tree();
        let value = 9u32.to_be_bytes();
        assert_eq!(altered(&tree, "/cpus", "reg", &value), None, "no reg on /cpus");
        assert_eq!(altered(&tree, "/cpus/cpu@7", "reg", &value), None, "no such CPU");
        assert_eq!(altered(&tree, "/psci", "method", b"smc"), None, "a value of another length");
        let mut bad = tree.clone();
        bad[0] = 0;
        assert_eq!(altered(&bad, "/cpus/cpu@1", "reg", &value), None);
        assert_eq!(altered(&tree[..tree.len() - 8], "/cpus/cpu@1", "reg", &value), None);
        assert_eq!(altered(&[], "/cpus/cpu@1", "reg", &value), None);
    }
}
