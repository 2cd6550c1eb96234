//! CPU sets: affinity masks, domain spans, idle masks.
//!
//! A fixed-width bit set of [`MAX_CPUS`] bits, copied by value, with no heap. Iteration is in
//! ascending CPU order, which the balancer's tie-breaks rely on.
//!
//! The width is a build configuration, like Linux's `NR_CPUS`: 1024 with the default feature
//! `max-cpus-1024`, 256 with `max-cpus-256`, 64 with neither (a mask is then 8 bytes, which is
//! what a microcontroller wants: every task's affinity and every domain and group hold one).
//!
//! On 32-bit targets the scans (`range`, `contains`, `weight`, `next_from`) are kept out of
//! line: each is a long run of 64-bit word operations there, and a microcontroller's image
//! pays for every inlined copy. Elsewhere they inline, which the balancer's loops want.

/// The largest number of CPUs any mask can describe: 1024, 256 or 64 by the crate's
/// `max-cpus-*` features (see the module documentation).
pub const MAX_CPUS: usize = if cfg!(feature = "max-cpus-1024") {
    1024
} else if cfg!(feature = "max-cpus-256") {
    256
} else {
    64
};
const WORDS: usize = MAX_CPUS / 64;

/// A set of CPU numbers `0..MAX_CPUS`.
///
/// ```
/// use sched_core::CpuMask;
/// let m = CpuMask::range(0, 4).with(9);
/// assert_eq!(m.weight(), 5);
/// assert_eq!(m.iter().collect::<Vec<_>>(), [0, 1, 2, 3, 9]);
/// assert_eq!(m.first(), Some(0));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CpuMask {
    words: [u64; WORDS],
}

impl Default for CpuMask {
    fn default() -> Self {
        CpuMask::EMPTY
    }
}

impl core::fmt::Debug for CpuMask {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Ranges, like the kernel's cpulist format: "0-3,9".
        f.write_str("CpuMask[")?;
        let mut first = true;
        let mut it = self.iter().peekable();
        while let Some(start) = it.next() {
            let mut end = start;
            while it.peek() == Some(&(end + 1)) {
                end = it.next().unwrap_or(end);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        f.write_str("]")
    }
}

impl CpuMask {
    /// No CPU.
    pub const EMPTY: CpuMask = CpuMask { words: [0; WORDS] };

    /// Every CPU `0..MAX_CPUS`.
    pub const ALL: CpuMask = CpuMask { words: [u64::MAX; WORDS] };

    /// How many 64-bit words a mask holds.
    pub(crate) const WORDS: usize = WORDS;

    /// A mask from its words (bit `c % 64` of word `c / 64` is CPU `c`).
    pub(crate) const fn from_words(words: [u64; WORDS]) -> CpuMask {
        CpuMask { words }
    }

    /// The mask's words (see [`CpuMask::from_words`]).
    pub(crate) const fn words(&self) -> &[u64; WORDS] {
        &self.words
    }

    /// A mask with only `cpu` (empty if out of range).
    pub const fn single(cpu: usize) -> CpuMask {
        CpuMask::EMPTY.with(cpu)
    }

    /// CPUs `start..end` (clamped to `MAX_CPUS`).
    #[cfg_attr(target_pointer_width = "32", inline(never))]
    pub const fn range(start: usize, end: usize) -> CpuMask {
        let mut m = CpuMask::EMPTY;
        let end = if end < MAX_CPUS { end } else { MAX_CPUS };
        let mut c = start;
        // Whole words at a time: online masks of 1024 CPUs are built on hot paths.
        while c < end {
            let w = c / 64;
            let lo = c % 64;
            let hi = if end - w * 64 >= 64 { 64 } else { end - w * 64 };
            let bits = if hi - lo == 64 { u64::MAX } else { ((1u64 << (hi - lo)) - 1) << lo };
            m.words[w] |= bits;
            c = w * 64 + hi;
        }
        m
    }

    /// The first `n` CPUs.
    pub const fn first_n(n: usize) -> CpuMask {
        CpuMask::range(0, n)
    }

    /// This mask plus `cpu` (unchanged if out of range).
    pub const fn with(mut self, cpu: usize) -> CpuMask {
        if cpu < MAX_CPUS {
            self.words[cpu / 64] |= 1 << (cpu % 64);
        }
        self
    }

    /// Adds `cpu`; out-of-range numbers are ignored.
    pub fn set(&mut self, cpu: usize) {
        if cpu < MAX_CPUS {
            self.words[cpu / 64] |= 1 << (cpu % 64);
        }
    }

    /// Removes `cpu`.
    pub fn clear(&mut self, cpu: usize) {
        if cpu < MAX_CPUS {
            self.words[cpu / 64] &= !(1 << (cpu % 64));
        }
    }

    /// Whether `cpu` is in the set.
    #[cfg_attr(target_pointer_width = "32", inline(never))]
    pub const fn contains(&self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.words[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// Number of CPUs in the set.
    #[cfg_attr(target_pointer_width = "32", inline(never))]
    pub fn weight(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Lowest CPU in the set.
    pub fn first(&self) -> Option<usize> {
        self.next_from(0)
    }

    /// Lowest CPU `>= from` in the set.
    #[cfg_attr(target_pointer_width = "32", inline(never))]
    pub fn next_from(&self, from: usize) -> Option<usize> {
        if from >= MAX_CPUS {
            return None;
        }
        let mut wi = from / 64;
        let mut w = self.words[wi] & (u64::MAX << (from % 64));
        loop {
            if w != 0 {
                return Some(wi * 64 + w.trailing_zeros() as usize);
            }
            wi += 1;
            if wi == WORDS {
                return None;
            }
            w = self.words[wi];
        }
    }

    /// Lowest CPU `>= from` in the set and not in `other`: `self.and_not(other).next_from(from)`
    /// without building the difference. Walks that skip what they have covered use it.
    ///
    /// ```
    /// use sched_core::CpuMask;
    /// let span = CpuMask::first_n(16);
    /// let covered = CpuMask::first_n(8);
    /// assert_eq!(span.next_from_and_not(&covered, 0), Some(8));
    /// assert_eq!(span.next_from_and_not(&covered, 12), Some(12));
    /// assert_eq!(span.next_from_and_not(&span, 0), None);
    /// ```
    pub fn next_from_and_not(&self, other: &CpuMask, from: usize) -> Option<usize> {
        if from >= MAX_CPUS {
            return None;
        }
        let mut wi = from / 64;
        let mut w = self.words[wi] & !other.words[wi] & (u64::MAX << (from % 64));
        while w == 0 {
            wi += 1;
            if wi == WORDS {
                return None;
            }
            w = self.words[wi] & !other.words[wi];
        }
        Some(wi * 64 + w.trailing_zeros() as usize)
    }

    /// Intersection.
    pub fn and(&self, other: &CpuMask) -> CpuMask {
        let mut m = *self;
        for (a, b) in m.words.iter_mut().zip(other.words.iter()) {
            *a &= *b;
        }
        m
    }

    /// Union.
    pub fn or(&self, other: &CpuMask) -> CpuMask {
        let mut m = *self;
        for (a, b) in m.words.iter_mut().zip(other.words.iter()) {
            *a |= *b;
        }
        m
    }

    /// `self` without the CPUs of `other`.
    pub fn and_not(&self, other: &CpuMask) -> CpuMask {
        let mut m = *self;
        for (a, b) in m.words.iter_mut().zip(other.words.iter()) {
            *a &= !*b;
        }
        m
    }

    /// Whether the two sets share a CPU.
    pub fn intersects(&self, other: &CpuMask) -> bool {
        self.words.iter().zip(other.words.iter()).any(|(a, b)| a & b != 0)
    }

    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset_of(&self, other: &CpuMask) -> bool {
        self.words.iter().zip(other.words.iter()).all(|(a, b)| a & !b == 0)
    }

    /// Ascending iterator over the CPUs of the set.
    pub fn iter(&self) -> CpuIter<'_> {
        CpuIter { mask: self, next: 0 }
    }

    /// The CPUs of the set starting at `start` and wrapping around below it, as the
    /// kernel's `for_each_cpu_wrap` visits them.
    pub fn iter_wrap(&self, start: usize) -> impl Iterator<Item = usize> + '_ {
        let start = start.min(MAX_CPUS);
        CpuIter { mask: self, next: start }.chain(self.iter().take_while(move |&c| c < start))
    }
}

/// The mask of the CPUs collected, as [`CpuMask::with`] adds each (numbers out of range are
/// ignored).
///
/// ```
/// use sched_core::CpuMask;
/// let m: CpuMask = [0, 2, 63].into_iter().collect();
/// assert_eq!(m.iter().collect::<Vec<_>>(), [0, 2, 63]);
/// ```
impl FromIterator<usize> for CpuMask {
    fn from_iter<I: IntoIterator<Item = usize>>(cpus: I) -> CpuMask {
        cpus.into_iter().fold(CpuMask::EMPTY, CpuMask::with)
    }
}

/// Iterator over a [`CpuMask`], ascending.
pub struct CpuIter<'a> {
    mask: &'a CpuMask,
    next: usize,
}

impl Iterator for CpuIter<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        let c = self.mask.next_from(self.next)?;
        self.next = c + 1;
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    proptest! {
        /// The scan without the difference finds what the difference's scan finds, across
        /// words and at the ends of the mask.
        #[test]
        fn next_from_and_not_is_the_difference_s_next_from(
            a in proptest::collection::vec(0..MAX_CPUS, 0..40),
            b in proptest::collection::vec(0..MAX_CPUS, 0..40),
            from in prop_oneof![0..MAX_CPUS + 2, Just(63usize), Just(64usize), Just(MAX_CPUS - 1), Just(MAX_CPUS)],
        ) {
            let (a, b): (CpuMask, CpuMask) = (a.into_iter().collect(), b.into_iter().collect());
            prop_assert_eq!(a.next_from_and_not(&b, from), a.and_not(&b).next_from(from));
        }
    }

    #[test]
    fn basic_ops() {
        let mut m = CpuMask::EMPTY;
        assert!(m.is_empty());
        let last = MAX_CPUS - 1;
        m.set(0);
        m.set(last);
        m.set(MAX_CPUS); // ignored
        assert_eq!(m.weight(), 2);
        assert!(m.contains(last) && !m.contains(MAX_CPUS));
        assert_eq!(m.iter().collect::<Vec<_>>(), [0, last]);
        m.clear(0);
        assert_eq!(m.first(), Some(last));
        assert_eq!(CpuMask::ALL.weight(), MAX_CPUS);
    }

    #[test]
    fn set_algebra() {
        let a = CpuMask::range(0, 8);
        let b = CpuMask::range(4, 12);
        assert_eq!(a.and(&b), CpuMask::range(4, 8));
        assert_eq!(a.or(&b), CpuMask::range(0, 12));
        assert_eq!(a.and_not(&b), CpuMask::range(0, 4));
        assert!(CpuMask::range(1, 3).is_subset_of(&a));
        assert!(!b.is_subset_of(&a));
        assert!(a.intersects(&b));
    }

    #[test]
    fn ranges_match_bitwise_construction() {
        for (a, b) in
            [(0, 0), (0, 1), (3, 64), (0, 64), (63, 65), (5, 1000), (0, 1024), (1000, 2000), (70, 69)]
        {
            let mut m = CpuMask::EMPTY;
            for c in a..b.min(MAX_CPUS) {
                m.set(c);
            }
            assert_eq!(CpuMask::range(a, b), m, "{a}..{b}");
        }
    }

    #[test]
    fn wrap_iteration() {
        let m = CpuMask::range(0, 8);
        assert_eq!(m.iter_wrap(5).collect::<Vec<_>>(), [5, 6, 7, 0, 1, 2, 3, 4]);
        assert_eq!(
            CpuMask::range(60, 70).iter_wrap(65).collect::<Vec<_>>(),
            [65, 66, 67, 68, 69, 60, 61, 62, 63, 64]
        );
    }

    #[test]
    fn debug_is_cpulist() {
        let m = CpuMask::range(0, 4).with(9).with(11).with(12);
        assert_eq!(std::format!("{m:?}"), "CpuMask[0-3,9,11-12]");
    }
}
