//! Plain values kept in atomics, read and written with `Relaxed` ordering: the storage of
//! an entity cell (see the `entities` module), whose accesses some lock already orders.
//!
//! A relaxed load or store of a word is an ordinary load or store on every target this
//! project builds for (no read-modify-write, no barrier), so a field kept here costs what a
//! plain field costs. Atomics make the shared storage safe Rust without `unsafe`; the
//! *consistency* of a cell (no two parties writing it at once) comes from the ownership
//! rules, whose locks give the happens-before order. A 64-bit value on a target without
//! 64-bit atomics is two 32-bit halves: it could tear only under an access the rules forbid.

#[cfg(target_has_atomic = "64")]
use core::sync::atomic::AtomicU64;
use core::sync::atomic::{AtomicBool, AtomicI8, AtomicU16, AtomicU32, AtomicU8, Ordering::Relaxed};

use crate::cpumask::CpuMask;
use crate::pelt::{sched_avg_fields, SchedAvg, UtilEst};
use crate::task::{Policy, TaskId};
use crate::weights::Nice;

/// A value of type `T` stored in atomics for relaxed access.
pub(crate) trait Slot<T> {
    /// The value.
    fn get(&self) -> T;
    /// Replaces the value.
    fn set(&self, v: T);
}

/// Storage that starts as zeros (what a cell holds before its task is created, so a machine
/// in a `static` needs no `.data` image).
pub(crate) trait Zeroed {
    /// The zeroed storage.
    const ZERO: Self;
}

/// `Zeroed` for the atomics a cell uses.
macro_rules! zeroed_atomics {
    ($($atomic:ty = $zero:expr;)*) => {$(
        impl Zeroed for $atomic {
            const ZERO: Self = <$atomic>::new($zero);
        }
    )*};
}

zeroed_atomics! {
    AtomicU32 = 0;
    AtomicU16 = 0;
    AtomicU8 = 0;
    AtomicI8 = 0;
    AtomicBool = false;
    Word64 = 0;
}

/// A 64-bit word: one atomic where the target has 64-bit atomics, else two halves.
pub(crate) struct Word64 {
    #[cfg(target_has_atomic = "64")]
    v: AtomicU64,
    #[cfg(not(target_has_atomic = "64"))]
    lo: AtomicU32,
    #[cfg(not(target_has_atomic = "64"))]
    hi: AtomicU32,
}

impl Word64 {
    pub(crate) const fn new(v: u64) -> Word64 {
        #[cfg(target_has_atomic = "64")]
        {
            Word64 { v: AtomicU64::new(v) }
        }
        #[cfg(not(target_has_atomic = "64"))]
        {
            Word64 { lo: AtomicU32::new(v as u32), hi: AtomicU32::new((v >> 32) as u32) }
        }
    }
}

impl Slot<u64> for Word64 {
    #[inline(always)]
    fn get(&self) -> u64 {
        #[cfg(target_has_atomic = "64")]
        {
            self.v.load(Relaxed)
        }
        #[cfg(not(target_has_atomic = "64"))]
        {
            (self.hi.load(Relaxed) as u64) << 32 | self.lo.load(Relaxed) as u64
        }
    }

    #[inline(always)]
    fn set(&self, v: u64) {
        #[cfg(target_has_atomic = "64")]
        self.v.store(v, Relaxed);
        #[cfg(not(target_has_atomic = "64"))]
        {
            self.lo.store(v as u32, Relaxed);
            self.hi.store((v >> 32) as u32, Relaxed);
        }
    }
}

impl Slot<i64> for Word64 {
    #[inline(always)]
    fn get(&self) -> i64 {
        Slot::<u64>::get(self) as i64
    }
    #[inline(always)]
    fn set(&self, v: i64) {
        Slot::<u64>::set(self, v as u64)
    }
}

impl Slot<TaskId> for Word64 {
    #[inline(always)]
    fn get(&self) -> TaskId {
        TaskId::from_raw(Slot::<u64>::get(self))
    }
    #[inline(always)]
    fn set(&self, v: TaskId) {
        Slot::<u64>::set(self, v.to_raw())
    }
}

/// `Slot<T>` for an atomic of `T`'s stored form: `from` reads the stored value `r` back as a
/// `T`, `to` turns a `T` `v` into it.
macro_rules! atomic_slots {
    ($($t:ty => $atomic:ty: |$r:ident| $from:expr, |$v:ident| $to:expr;)*) => {$(
        impl Slot<$t> for $atomic {
            #[inline(always)]
            fn get(&self) -> $t {
                let $r = self.load(Relaxed);
                $from
            }
            #[inline(always)]
            fn set(&self, $v: $t) {
                self.store($to, Relaxed)
            }
        }
    )*};
}

atomic_slots! {
    u32 => AtomicU32: |r| r, |v| v;
    // A CPU number in 16 bits (the entity's `cpu` and `recent_used_cpu`; see below).
    u32 => AtomicU16: |r| r as u32, |v| v as u16;
    // A group slot (the entity's `group`).
    u16 => AtomicU16: |r| r, |v| v;
    bool => AtomicBool: |r| r, |v| v;
    Policy => AtomicU8: |r| Policy::from_u8(r), |v| v as u8;
    Nice => AtomicI8: |r| Nice::from_stored(r), |v| v.get() as i8;
}

// The 16-bit CPU slots hold any CPU number.
const _: () = assert!(crate::cpumask::MAX_CPUS <= 1 << 16);

/// A [`CpuMask`], word by word.
pub(crate) struct MaskCell {
    words: [Word64; CpuMask::WORDS],
}

impl Zeroed for MaskCell {
    const ZERO: Self = MaskCell { words: [const { Word64::new(0) }; CpuMask::WORDS] };
}

impl MaskCell {
    /// Whether `cpu` is in the mask (one word read).
    #[inline]
    pub(crate) fn contains(&self, cpu: usize) -> bool {
        self.words.get(cpu / 64).is_some_and(|w| Slot::<u64>::get(w) & (1 << (cpu % 64)) != 0)
    }
}

impl Slot<CpuMask> for MaskCell {
    fn get(&self) -> CpuMask {
        let mut words = [0; CpuMask::WORDS];
        for (w, c) in words.iter_mut().zip(&self.words) {
            *w = c.get();
        }
        CpuMask::from_words(words)
    }
    fn set(&self, v: CpuMask) {
        for (c, w) in self.words.iter().zip(v.words()) {
            c.set(*w);
        }
    }
}

/// A [`UtilEst`], its two halves.
pub(crate) struct UtilEstCell {
    enqueued: AtomicU32,
    ewma: AtomicU32,
}

impl Zeroed for UtilEstCell {
    const ZERO: Self = UtilEstCell { enqueued: AtomicU32::ZERO, ewma: AtomicU32::ZERO };
}

impl Slot<UtilEst> for UtilEstCell {
    #[inline(always)]
    fn get(&self) -> UtilEst {
        UtilEst { enqueued: self.enqueued.get(), ewma: self.ewma.get() }
    }
    #[inline(always)]
    fn set(&self, v: UtilEst) {
        self.enqueued.set(v.enqueued);
        self.ewma.set(v.ewma);
    }
}

/// Makes [`AvgCell`] from the rows of `sched_avg_fields!`: a slot per field of [`SchedAvg`].
macro_rules! avg_cell {
    ($($(#[doc = $doc:literal])* $field:ident: $ty:ty = $widest:expr; $store:ident;)*) => {
        /// A task's [`SchedAvg`], field by field.
        pub(crate) struct AvgCell {
            $($field: $store,)*
        }

        impl Zeroed for AvgCell {
            const ZERO: Self = AvgCell { $($field: <$store as Zeroed>::ZERO,)* };
        }

        impl Slot<SchedAvg> for AvgCell {
            #[cfg_attr(target_pointer_width = "64", inline)]
            fn get(&self) -> SchedAvg {
                SchedAvg { $($field: Slot::<$ty>::get(&self.$field),)* }
            }
            #[cfg_attr(target_pointer_width = "64", inline)]
            fn set(&self, v: SchedAvg) {
                $(Slot::<$ty>::set(&self.$field, v.$field);)*
            }
        }

        /// Each field of a [`SchedAvg`] stored alone, at its widest, comes back whole and
        /// changes no other field.
        #[cfg(test)]
        fn assert_each_avg_field_round_trips_alone() {
            let w = SchedAvg::WIDEST;
            $(
                let cell = AvgCell::ZERO;
                let mut want = SchedAvg::ZERO;
                want.$field = w.$field;
                cell.set(want);
                assert_eq!(cell.get(), want, concat!("`", stringify!($field), "` alone at its widest"));
            )*
        }
    };
}

sched_avg_fields!(avg_cell);

impl AvgCell {
    #[inline]
    pub(crate) fn last_update_time(&self) -> u64 {
        self.last_update_time.get()
    }

    #[inline]
    pub(crate) fn load_avg(&self) -> u64 {
        self.load_avg.get()
    }

    #[inline]
    pub(crate) fn util_avg(&self) -> u64 {
        self.util_avg.get()
    }

    #[inline]
    pub(crate) fn util_est(&self) -> UtilEst {
        self.util_est.get()
    }

    #[inline]
    pub(crate) fn set_util_est(&self, v: UtilEst) {
        self.util_est.set(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let w = Word64::new(0);
        for v in [0u64, 1, u32::MAX as u64, 1 << 32, u64::MAX - 5] {
            w.set(v);
            assert_eq!(Slot::<u64>::get(&w), v);
        }
        Slot::<i64>::set(&w, -7);
        assert_eq!(Slot::<i64>::get(&w), -7);
        let id = TaskId::new(9, 4);
        w.set(id);
        assert_eq!(Slot::<TaskId>::get(&w), id);
        let m = MaskCell::ZERO;
        let mask = CpuMask::single(3).with(crate::MAX_CPUS - 1);
        m.set(mask);
        assert_eq!(Slot::<CpuMask>::get(&m), mask);
        assert!(m.contains(3) && !m.contains(4) && !m.contains(crate::MAX_CPUS));
        let p = AtomicU8::new(0);
        for pol in [Policy::Normal, Policy::Batch, Policy::Idle] {
            p.set(pol);
            assert_eq!(Slot::<Policy>::get(&p), pol);
        }
        let n = AtomicI8::new(0);
        n.set(Nice::MIN);
        assert_eq!(Slot::<Nice>::get(&n), Nice::MIN);
    }

    /// A task's PELT signals survive their cell at every field's full width.
    #[test]
    fn averages_round_trip_at_full_width() {
        let cell = AvgCell::ZERO;
        cell.set(SchedAvg::WIDEST);
        assert_eq!(cell.get(), SchedAvg::WIDEST);
        assert_each_avg_field_round_trips_alone();
    }
}
