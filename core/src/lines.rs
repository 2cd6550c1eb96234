//! Cache-line addresses for prefetch hints (see `Smp::cpu_lines`): computed from a
//! structure's address and its layout, never read through, so they need no lock and no
//! `unsafe`.

/// The cache-line size the hints assume: 64 bytes, the line of the x86-64 and Arm cores a
/// simulator runs on, and the alignment of the structures they list.
pub(crate) const LINE: usize = 64;

/// Calls `each` with the start of every line that overlaps the `len` bytes at `at`.
pub(crate) fn each_line(at: *const u8, len: usize, each: &mut impl FnMut(*const u8)) {
    if len == 0 {
        return;
    }
    let end = (at as usize).saturating_add(len);
    let mut line = at.wrapping_sub(at as usize % LINE);
    while (line as usize) < end {
        each(line);
        line = line.wrapping_add(LINE);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec::Vec;

    use super::*;

    fn lines_of(at: usize, len: usize) -> Vec<usize> {
        let mut out = Vec::new();
        each_line(at as *const u8, len, &mut |p| out.push(p as usize));
        out
    }

    #[test]
    fn every_overlapped_line_once() {
        assert_eq!(lines_of(128, 64), [128]);
        assert_eq!(lines_of(130, 64), [128, 192]);
        assert_eq!(lines_of(191, 2), [128, 192]);
        assert_eq!(lines_of(64, 0), [] as [usize; 0]);
        assert_eq!(lines_of(0, 200), [0, 64, 128, 192]);
    }
}
