//! The kernel's topology reader (`kernel-shim/src/topology.rs`), compiled on the host for
//! its tests beside the kernel's device-tree reader: trees built here with `cpu-map`s of
//! clusters, cores and threads are read as the kernel reads them, and a map that names a CPU
//! twice is refused.
#![cfg(test)]

/// The kernel's device-tree reader, where the topology reader finds it (`super::devicetree`).
pub(crate) use crate::kernel_devicetree::devicetree;

/// What the topology reader takes from the kernel's port: the widest build's CPU count.
pub(crate) mod arch {
    pub(crate) const MAX_CPUS: usize = 64;
}

#[allow(dead_code)]
#[path = "../../kernel-shim/src/topology.rs"]
pub(crate) mod topology;

pub(crate) mod tests {
    use super::devicetree::DeviceTree;
    use super::topology::{read_cpu_map, CpuInfo, CpuMapError};
    use crate::kernel_devicetree::trees::{virt_tree, Builder};

    /// The four CPUs of [`virt_tree`], described as the kernel describes them before it
    /// reads the `cpu-map`.
    pub(crate) fn virt_cpus() -> Vec<CpuInfo> {
        (0..4).map(|i| CpuInfo { phandle: Some(0x8000 + i), ..CpuInfo::default() }).collect()
    }

    /// A four-CPU tree whose `cpu-map` is `cores`: per cluster, per core, the `cpu` phandle
    /// and the phandles of its threads.
    fn tree_with_map(cores: &[&[(Option<u32>, &[u32])]]) -> Vec<u8> {
        let mut b = Builder::default();
        b.begin("").cell("#address-cells", 2).cell("#size-cells", 2);
        b.begin("cpus").cell("#address-cells", 1).cell("#size-cells", 0);
        b.begin("cpu-map");
        for (c, cluster) in cores.iter().enumerate() {
            b.begin(&format!("cluster{c}"));
            for (k, (cpu, threads)) in cluster.iter().enumerate() {
                b.begin(&format!("core{k}"));
                if let Some(p) = cpu {
                    b.cell("cpu", *p);
                }
                for (t, p) in threads.iter().enumerate() {
                    b.begin(&format!("thread{t}")).cell("cpu", *p).end();
                }
                b.end();
            }
            b.end();
        }
        b.end();
        for i in 0..4u32 {
            b.begin(&format!("cpu@{i}")).cell("reg", i).cell("phandle", 0x8000 + i).end();
        }
        b.end().end();
        b.finish()
    }

    #[test]
    fn a_cpu_map_gives_each_cpu_its_cluster() {
        let blob = virt_tree();
        let mut cpus = virt_cpus();
        assert_eq!(read_cpu_map(&DeviceTree::new(&blob).unwrap(), &mut cpus), Ok(()));
        let clusters: Vec<_> = cpus.iter().map(|c| c.cluster).collect();
        assert_eq!(clusters, [Some(0), Some(0), Some(1), Some(1)]);
        // SMT: a core's threads share its cluster; a CPU the map leaves out keeps none.
        let blob = tree_with_map(&[&[(None, &[0x8000, 0x8001])], &[(Some(0x8002), &[])]]);
        let mut cpus = virt_cpus();
        assert_eq!(read_cpu_map(&DeviceTree::new(&blob).unwrap(), &mut cpus), Ok(()));
        let clusters: Vec<_> = cpus.iter().map(|c| c.cluster).collect();
        assert_eq!(clusters, [Some(0), Some(0), Some(1), None]);
    }

    #[test]
    fn a_cpu_map_naming_a_cpu_twice_is_refused() {
        // An extra core in the second cluster names cpu@1 again: every CPU is named, but
        // cpu@1's cluster would be whichever came last.
        let twice = tree_with_map(&[
            &[(Some(0x8000), &[]), (Some(0x8001), &[])],
            &[(Some(0x8002), &[]), (Some(0x8003), &[]), (Some(0x8001), &[])],
        ]);
        let mut cpus = virt_cpus();
        assert_eq!(
            read_cpu_map(&DeviceTree::new(&twice).unwrap(), &mut cpus),
            Err(CpuMapError::NamedTwice { cpu: 1 })
        );
        // A core named both by its `cpu` and by one of its threads.
        let core_and_thread =
            tree_with_map(&[&[(Some(0x8000), &[0x8000, 0x8001])], &[(Some(0x8002), &[0x8003])]]);
        let mut cpus = virt_cpus();
        assert_eq!(
            read_cpu_map(&DeviceTree::new(&core_and_thread).unwrap(), &mut cpus),
            Err(CpuMapError::NamedTwice { cpu: 0 })
        );
    }

    #[test]
    fn the_stub_is_the_widest_build() {
        let src = include_str!("../../kernel-shim/src/arch/mod.rs");
        let widest = crate::kernel_doc::definitions(src, "MAX_CPUS")
            .iter()
            .filter_map(|(_, v)| v.parse::<usize>().ok())
            .max();
        assert_eq!(widest, Some(super::arch::MAX_CPUS));
    }
}
