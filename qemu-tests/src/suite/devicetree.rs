//! riscv64 reads its machine from the device tree OpenSBI passes on, so a damaged tree can say
//! anything that parses. The board's own tree (QEMU `dumpdtb`) is booted with one property
//! rewritten in place per boot: rates the kernel must use, or refuse with exit 4 and one line
//! (`timebase-frequency`, checked against the port's counter range), a hardware id listed
//! twice and a `cpu-map` naming a CPU twice, which it must refuse, and a CPU the firmware
//! marks failed, which it must leave out.

use std::path::Path;
use std::time::Duration;

use super::judges::EXIT_MACHINE;
use crate::kernel_devicetree::devicetree::DeviceTree;
use crate::qemu::{self, Boot, Machine, Mode};

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

/// The alterations booted. The first is the control: a plausible rate, which shows that the
/// rewritten tree reaches the kernel.
const ALTERATIONS: &[Alteration] = &[
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
    Alteration {
        what: "cpu@2 with cpu@1's hart id",
        node: "/cpus/cpu@2",
        property: "reg",
        value: Value::Bytes(&1u32.to_be_bytes()),
        expect: Expect::Refused("lists hardware id 0x1 twice"),
    },
    Alteration {
        what: "cpu-map's core1 naming core0's CPU",
        node: "/cpus/cpu-map/cluster0/core1",
        property: "cpu",
        value: Value::Of { node: "/cpus/cpu-map/cluster0/core0", property: "cpu" },
        expect: Expect::Refused("cpu-map names hardware id 0x"),
    },
    Alteration {
        what: "cpu@3 marked failed",
        node: "/cpus/cpu@3",
        property: "status",
        value: Value::Bytes(b"fail\0"),
        expect: Expect::Boots("boot: OK (7 CPUs"),
    },
];

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

/// The value of property `name` of the node at `node` in `dtb`, if it has one.
fn property_value(dtb: &[u8], node: &str, name: &str) -> Option<Vec<u8>> {
    Some(DeviceTree::new(dtb).ok()?.find(node)?.property(name)?.value.to_vec())
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
                let value = match a.value {
                    Value::Bytes(v) => v.to_vec(),
                    Value::Of { node, property } => property_value(&board, node, property)
                        .ok_or(format!("the board's device tree has no {node} {property} to copy"))?,
                };
                let dtb = altered(&board, a.node, a.property, &value)
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
