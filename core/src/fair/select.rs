//! Which policy a runqueue runs: the `policy!` macro, which calls a [`FairPolicy`] hook of
//! EEVDF or CFS by the run-time switch [`crate::Features::EEVDF`] ([`RunQueue::eevdf`]);
//! without the `eevdf` feature EEVDF is not built and every call goes to CFS. And the few
//! things the feature keeps whichever policy runs: an entity's deadline on the timeline, the
//! deadline a pick serves, its lag through a fork or a reweight.
//!
//! [`FairPolicy`]: super::policy::FairPolicy

use crate::entities::EntityCell;
use crate::runqueue::{RunQueue, SlotId};
use crate::task::Entity;

/// Calls `hook` of the policy `f` (a [`Fair`]) runs: `policy!(self.pick())`.
#[cfg(feature = "eevdf")]
macro_rules! policy {
    ($f:ident . $hook:ident ( $($arg:expr),* )) => {
        if $f.eevdf() {
            <$crate::fair::eevdf::Eevdf as $crate::fair::policy::FairPolicy>::$hook($f, $($arg),*)
        } else {
            <$crate::fair::cfs::Cfs as $crate::fair::policy::FairPolicy>::$hook($f, $($arg),*)
        }
    };
}

/// Calls `hook` of CFS, the only policy built.
#[cfg(not(feature = "eevdf"))]
macro_rules! policy {
    ($f:ident . $hook:ident ( $($arg:expr),* )) => {
        <$crate::fair::cfs::Cfs as $crate::fair::policy::FairPolicy>::$hook($f, $($arg),*)
    };
}

// ---- what the `eevdf` feature keeps under either policy -------------------------------

impl<const Q: usize> RunQueue<Q> {
    /// Puts `slot` on the timeline at `vr`, with its entity's deadline where EEVDF is built
    /// (the augmentation is ready the moment the switch turns on). Cannot fail: `slot < Q`
    /// and it is not queued.
    #[inline(always)]
    pub(super) fn timeline_insert(&mut self, slot: SlotId, vr: u64, se: &EntityCell) {
        #[cfg(feature = "eevdf")]
        let _ = self.timeline.insert_with_deadline(slot as usize, vr, se.deadline());
        #[cfg(not(feature = "eevdf"))]
        {
            let _ = se;
            let _ = self.timeline.insert(slot as usize, vr);
        }
    }

    /// Notes the deadline of the request the entity just picked serves (RUN_TO_PARITY's
    /// mark).
    #[inline(always)]
    pub(super) fn note_picked(&mut self, se: &EntityCell) {
        #[cfg(feature = "eevdf")]
        {
            self.cfs.picked_deadline = se.deadline();
        }
        #[cfg(not(feature = "eevdf"))]
        let _ = se;
    }
}

impl Entity {
    /// A new task starts with no lag (EEVDF places it at the average).
    #[inline(always)]
    pub(super) fn forget_lag(&mut self) {
        #[cfg(feature = "eevdf")]
        {
            self.vlag = 0;
        }
    }

    /// The same virtual service owed after a weight change from `old_weight`, in the new
    /// weight's virtual time. Under EEVDF (`eevdf`), an entity off the runqueue also moves
    /// its vruntime by as much, so that it still marks where the average stood when it left
    /// (a sleeper's debt is paid off from there).
    #[inline(always)]
    pub(super) fn rescale_lag(&mut self, old_weight: u64, eevdf: bool) {
        #[cfg(feature = "eevdf")]
        {
            let vlag = crate::eevdf::reweighted(self.vlag, old_weight, self.weight());
            if eevdf && !self.on_rq {
                self.vruntime = self.vruntime.wrapping_add(self.vlag.wrapping_sub(vlag) as u64);
            }
            self.vlag = vlag;
        }
        #[cfg(not(feature = "eevdf"))]
        let _ = (old_weight, eevdf);
    }
}
