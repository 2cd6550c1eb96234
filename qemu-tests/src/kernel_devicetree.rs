//! The kernel's device-tree reader (`kernel-shim/src/devicetree.rs`), compiled on the host
//! for its tests (the kernel is a bare-metal crate with none of its own) and for the suite,
//! which finds in a board's tree the property it alters (`suite/devicetree.rs`). The tests
//! build trees shaped like QEMU `virt`'s, read them back as the kernel does, and read
//! thousands of damaged copies, none of which may panic (the topology reader's tests,
//! `kernel_topology.rs`, read their `cpu-map`s too).

// The runner itself uses only the reader's way to a property and its header's length.
#[allow(dead_code)]
#[path = "../../kernel-shim/src/devicetree.rs"]
pub(crate) mod devicetree;

/// Trees built on the host, for the tests here and the suite's.
#[cfg(test)]
pub(crate) mod trees {
    use super::devicetree::HEADER_LEN;

    /// Builds a flattened device tree: nodes open and close, properties go into the open one.
    #[derive(Default)]
    pub(crate) struct Builder {
        structs: Vec<u8>,
        strings: Vec<u8>,
    }

    impl Builder {
        fn word(&mut self, w: u32) -> &mut Self {
            self.structs.extend_from_slice(&w.to_be_bytes());
            self
        }

        fn pad(&mut self) {
            while !self.structs.len().is_multiple_of(4) {
                self.structs.push(0);
            }
        }

        pub(crate) fn begin(&mut self, name: &str) -> &mut Self {
            self.word(1);
            self.structs.extend_from_slice(name.as_bytes());
            self.structs.push(0);
            self.pad();
            self
        }

        pub(crate) fn end(&mut self) -> &mut Self {
            self.word(2)
        }

        pub(crate) fn prop(&mut self, name: &str, value: &[u8]) -> &mut Self {
            let at = match self
                .strings
                .windows(name.len() + 1)
                .position(|w| &w[..name.len()] == name.as_bytes() && w[name.len()] == 0)
            {
                Some(at) => at,
                None => {
                    self.strings.extend_from_slice(name.as_bytes());
                    self.strings.push(0);
                    self.strings.len() - name.len() - 1
                }
            };
            self.word(3).word(value.len() as u32).word(at as u32);
            self.structs.extend_from_slice(value);
            self.pad();
            self
        }

        pub(crate) fn cell(&mut self, name: &str, v: u32) -> &mut Self {
            self.prop(name, &v.to_be_bytes())
        }

        pub(crate) fn text(&mut self, name: &str, v: &str) -> &mut Self {
            let mut b = v.as_bytes().to_vec();
            b.push(0);
            self.prop(name, &b)
        }

        /// The blob: header, an empty memory-reservation map, structure and strings blocks.
        pub(crate) fn finish(&mut self) -> Vec<u8> {
            self.word(9);
            let rsv = HEADER_LEN;
            let off_struct = rsv + 16;
            let off_strings = off_struct + self.structs.len();
            let total = off_strings + self.strings.len();
            let header = [
                0xd00d_feed,
                total,
                off_struct,
                off_strings,
                rsv,
                17,
                16,
                0,
                self.strings.len(),
                self.structs.len(),
            ];
            let mut b: Vec<u8> = header.iter().flat_map(|&w| (w as u32).to_be_bytes()).collect();
            b.extend_from_slice(&[0; 16]);
            b.extend_from_slice(&self.structs);
            b.extend_from_slice(&self.strings);
            b
        }
    }

    /// A tree shaped like QEMU virt's on aarch64: four CPUs in two clusters, PSCI, a boot line.
    pub(crate) fn virt_tree() -> Vec<u8> {
        let mut b = Builder::default();
        b.begin("").cell("#address-cells", 2).cell("#size-cells", 2).text("compatible", "linux,dummy-virt");
        b.begin("psci").text("compatible", "arm,psci-1.0").text("method", "hvc").end();
        b.begin("cpus").cell("#address-cells", 1).cell("#size-cells", 0);
        b.begin("cpu-map");
        for c in 0..2 {
            b.begin(&format!("cluster{c}"));
            for k in 0..2 {
                b.begin(&format!("core{k}")).cell("cpu", 0x8000 + 2 * c + k).end();
            }
            b.end();
        }
        b.end();
        for i in 0..4u32 {
            b.begin(&format!("cpu@{i}"))
                .cell("reg", i)
                .cell("phandle", 0x8000 + i)
                .cell("numa-node-id", i / 2)
                .text("device_type", "cpu")
                .end();
        }
        b.end();
        b.begin("chosen").text("bootargs", "scenario=boot hz=250").end();
        b.end();
        b.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::devicetree::{total_len, DeviceTree, DtError, HEADER_LEN, MAX_ENTRIES, MAX_LEN};
    use super::trees::{virt_tree, Builder};
    use crate::kernel_topology::tests::virt_cpus;
    use crate::kernel_topology::topology::read_cpu_map;
    use sched_sim::rng::Rng;

    /// Everything the kernel reads from a tree, as it reads it (`kmain`, the ports'
    /// `machine_init`, `topology::read_cpu_map`), folded into one value.
    fn read_all(t: &DeviceTree<'_>) -> u64 {
        let mut sum = 0u64;
        if let Some(cpus) = t.find("/cpus") {
            let cells = cpus.property("#address-cells").and_then(|p| p.as_usize()).unwrap_or(2);
            for cpu in cpus.children().filter(|c| c.base_name() == "cpu") {
                sum += cpu.property("reg").and_then(|p| p.cells(cells)).unwrap_or(0);
                for p in ["numa-node-id", "capacity-dmips-mhz", "phandle", "timebase-frequency"] {
                    sum += cpu.property(p).and_then(|p| p.as_usize()).unwrap_or(0) as u64;
                }
                sum += cpu.property("riscv,isa").and_then(|p| p.as_str()).map_or(0, str::len) as u64;
            }
        }
        if let Some(map) = t.find("/cpus/cpu-map") {
            let mut stack = vec![(map, 0)];
            while let Some((node, depth)) = stack.pop() {
                for c in node.children() {
                    sum += c.property("cpu").and_then(|p| p.as_usize()).unwrap_or(0) as u64;
                    if depth < 6 {
                        stack.push((c, depth + 1));
                    }
                }
            }
        }
        sum += t.find("/psci").and_then(|p| p.property("method")).and_then(|m| m.as_str()).map_or(0, str::len)
            as u64;
        sum += t.find("/chosen").and_then(|c| c.property("bootargs")).map_or(0, |p| p.value.len()) as u64;
        sum += t.ram_holds(0x4f00_0000, 64 * 1024) as u64;
        sum
    }

    #[test]
    fn a_virt_tree_reads_as_the_kernel_reads_it() {
        let blob = virt_tree();
        let t = DeviceTree::new(&blob).unwrap();
        let cpus = t.find("/cpus").unwrap();
        let ids: Vec<u64> = cpus
            .children()
            .filter(|c| c.base_name() == "cpu")
            .map(|c| c.property("reg").and_then(|p| p.cells(1)).unwrap())
            .collect();
        assert_eq!(ids, [0, 1, 2, 3]);
        // `cpu` finds the first `cpu@…`; a child's properties are not its parent's.
        assert_eq!(t.find("/cpus/cpu").unwrap().name, "cpu@0");
        assert!(cpus.property("reg").is_none());
        assert_eq!(
            t.find("/cpus/cpu@3").and_then(|c| c.property("numa-node-id")).and_then(|p| p.as_usize()),
            Some(1)
        );
        assert_eq!(t.find("/psci").and_then(|p| p.property("method")).and_then(|m| m.as_str()), Some("hvc"));
        assert_eq!(
            t.find("/chosen").and_then(|c| c.property("bootargs")).and_then(|p| p.as_str()),
            Some("scenario=boot hz=250")
        );
        let cores: Vec<(String, usize)> = t
            .find("/cpus/cpu-map/cluster1")
            .unwrap()
            .children()
            .map(|c| (c.name.to_string(), c.property("cpu").and_then(|p| p.as_usize()).unwrap()))
            .collect();
        assert_eq!(cores, [("core0".to_string(), 0x8002), ("core1".to_string(), 0x8003)]);
        assert!(t.find("/memory").is_none() && t.find("/cpus/cpu@9").is_none());
    }

    /// The program window must lie in a `/memory` range (QEMU virt's `-m`), whatever the
    /// cells' widths; a tree without memory, or with a range it cannot read, holds nothing.
    #[test]
    fn the_program_window_is_in_ram_only_where_memory_says_so() {
        let tree = |cells: (u32, u32), regs: &[u64]| {
            let mut b = Builder::default();
            b.begin("").cell("#address-cells", cells.0).cell("#size-cells", cells.1);
            let mut reg = Vec::new();
            for pair in regs.chunks(2) {
                for (v, c) in pair.iter().zip([cells.0, cells.1]) {
                    if c == 2 {
                        reg.extend_from_slice(&(*v >> 32).to_be_bytes()[4..]);
                    }
                    reg.extend_from_slice(&(*v as u32).to_be_bytes());
                }
            }
            b.begin("memory@40000000").prop("reg", &reg).end();
            b.end();
            b.finish()
        };
        let (window, len) = (0x4f00_0000, 64 * 1024);
        let holds = |blob: Vec<u8>| DeviceTree::new(&blob).unwrap().ram_holds(window, len);
        // -m 256M: 0x40000000..0x50000000 holds it; -m 128M ends at 0x48000000.
        assert!(holds(tree((2, 2), &[0x4000_0000, 256 << 20])));
        assert!(!holds(tree((2, 2), &[0x4000_0000, 128 << 20])));
        assert!(holds(tree((1, 1), &[0x4000_0000, 256 << 20])));
        // A second range may hold it; one that ends inside the window does not.
        assert!(holds(tree((2, 1), &[0x4000_0000, 16 << 20, 0x4f00_0000, 1 << 20])));
        assert!(!holds(tree((2, 2), &[0x4f00_0000, 32 * 1024])));
        assert!(!holds(tree((3, 2), &[0x4000_0000, 256 << 20])), "3 cells are not read");
        assert!(!DeviceTree::new(&virt_tree()).unwrap().ram_holds(window, len), "no /memory");
    }

    #[test]
    fn broken_headers_and_blocks_are_refused_by_kind() {
        let good = virt_tree();
        let with = |at: usize, v: u32| {
            let mut b = good.clone();
            b[at..at + 4].copy_from_slice(&v.to_be_bytes());
            b
        };
        let open = |b: &[u8]| DeviceTree::new(b).err();
        assert_eq!(open(&with(0, 0)), Some(DtError::Header));
        assert_eq!(open(&good[..6]), Some(DtError::Header));
        assert_eq!(open(&with(4, MAX_LEN as u32 + 1)), Some(DtError::Size));
        assert_eq!(open(&with(4, good.len() as u32 + 4)), Some(DtError::Size));
        assert_eq!(open(&with(36, good.len() as u32)), Some(DtError::Blocks));
        assert_eq!(open(&with(12, u32::MAX)), Some(DtError::Blocks));
        assert_eq!(open(&with(36, 0)), Some(DtError::Structure));
        assert_eq!(total_len(&good), Ok(good.len()));
        // The root left open: its END_NODE (the word before END) made a NOP.
        let end = good.len() - word(&good, 32) as usize - 8;
        assert_eq!(open(&with(end, 4)), Some(DtError::Structure));
        // A property whose name lies past the strings block.
        let mut b = Builder::default();
        b.begin("").prop("x", &[]).end();
        let mut blob = b.finish();
        let name_at = HEADER_LEN + 16 + 8 + 8;
        blob[name_at..name_at + 4].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(open(&blob), Some(DtError::Structure));
    }

    /// The specification forbids two properties, or two child nodes, of one name in a node:
    /// which one counts would be a guess, so such a tree is refused. A property and a node
    /// may share a name, and so may nodes under different parents.
    #[test]
    fn a_name_twice_in_one_node_is_refused() {
        let tree = |body: &dyn Fn(&mut Builder)| {
            let mut b = Builder::default();
            b.begin("");
            body(&mut b);
            b.end();
            b.finish()
        };
        let open = |b: Vec<u8>| DeviceTree::new(&b).err();
        assert_eq!(
            open(tree(&|b| {
                b.begin("cpus")
                    .begin("cpu@0")
                    .cell("reg", 0)
                    .cell("numa-node-id", 0)
                    .cell("reg", 1)
                    .end()
                    .end();
            })),
            Some(DtError::Duplicate)
        );
        assert_eq!(
            open(tree(&|b| {
                b.begin("cpus").begin("cpu@0").end().begin("cpu@1").end().begin("cpu@0").end().end();
            })),
            Some(DtError::Duplicate)
        );
        assert_eq!(
            open(tree(&|b| {
                b.cell("x", 1).begin("a").end().cell("x", 2);
            })),
            Some(DtError::Duplicate)
        );
        assert_eq!(
            open(tree(&|b| {
                b.cell("a", 1).begin("a").cell("a", 2).begin("b").cell("a", 3).end().end().begin("b").end();
            })),
            None
        );
        assert_eq!(open(virt_tree()), None);
        // A node of more entries than the check compares pairwise is refused as malformed.
        let props = |n: usize| {
            tree(&|b| {
                b.begin("many");
                for i in 0..n {
                    b.prop(&format!("p{i}"), &[]);
                }
                b.end();
            })
        };
        assert_eq!(open(props(MAX_ENTRIES)), None);
        assert_eq!(open(props(MAX_ENTRIES + 1)), Some(DtError::Structure));
    }

    fn word(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    #[test]
    fn damaged_trees_never_panic() {
        // Seeded random damage to the header and the blocks: a byte, or a word set to a
        // token, an edge value or a random one; one to four per tree. Each tree is opened
        // and, if accepted, read in full as the kernel reads it.
        let good = virt_tree();
        let (mut accepted, mut refused) = (0, 0);
        let mut rng = Rng::new(24301);
        for _ in 0..20_000 {
            let mut b = good.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(b.len() as u64) as usize & !3;
                let v = match rng.below(4) {
                    0 => [1, 2, 3, 4, 9][rng.below(5) as usize],
                    1 => 0,
                    2 => u32::MAX,
                    _ => rng.next_u64() as u32,
                };
                if rng.below(2) == 0 {
                    if let Some(w) = b.get_mut(at..at + 4) {
                        w.copy_from_slice(&v.to_be_bytes());
                    }
                } else if let Some(byte) = b.get_mut(at + rng.below(4) as usize) {
                    *byte = v as u8;
                }
            }
            if rng.below(8) == 0 {
                b.truncate(rng.below(b.len() as u64) as usize);
            }
            match DeviceTree::new(&b) {
                Ok(t) => {
                    accepted += 1;
                    let _ = read_all(&t);
                    let _ = read_cpu_map(&t, &mut virt_cpus());
                }
                Err(_) => refused += 1,
            }
        }
        // Both outcomes happen: the damage reaches names and structure, and values.
        assert!(accepted > 1000 && refused > 1000, "{accepted} accepted, {refused} refused");
    }
}
