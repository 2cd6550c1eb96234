//! The oracle: what each call may return, given its input, the state before it and the
//! model.

use super::*;

/// What a call may return.
pub(crate) struct Expect {
    /// Success is acceptable.
    pub(crate) ok: bool,
    /// Errors that are acceptable (`CpuOutOfRange` is matched by kind; its payload is
    /// checked separately).
    pub(crate) errs: Vec<SchedError>,
}

impl Expect {
    pub(crate) fn ok() -> Expect {
        Expect { ok: true, errs: Vec::new() }
    }
    pub(crate) fn err(errs: Vec<SchedError>) -> Expect {
        Expect { ok: false, errs }
    }
    pub(crate) fn accepts(&self, e: &SchedError) -> bool {
        self.errs.iter().any(|x| match (x, e) {
            (SchedError::CpuOutOfRange(_), SchedError::CpuOutOfRange(_)) => true,
            _ => x == e,
        })
    }
}

pub(crate) fn nice_ok(nice: i32) -> bool {
    (-20..=19).contains(&nice)
}

/// Predicts what `call` may return, from the input, the state before it and the model.
pub(crate) fn oracle(call: &Call, pre: &Snapshot, model: &Model, n: usize) -> Expect {
    let online = CpuMask::first_n(n);
    let mut input: Vec<SchedError> = Vec::new();
    if let Some(cpu) = call.cpu().filter(|&c| c >= n) {
        input.push(SchedError::CpuOutOfRange(cpu));
    }
    match *call {
        Call::Create { params, .. } => {
            if !nice_ok(params.nice) {
                input.push(SchedError::InvalidNice(params.nice));
            }
            if params.affinity.is_empty() {
                input.push(SchedError::EmptyAffinity);
            } else if !params.affinity.intersects(&online) {
                input.push(SchedError::AffinityNotOnline);
            }
        }
        Call::SetNice { nice, .. } if !nice_ok(nice) => input.push(SchedError::InvalidNice(nice)),
        Call::SetAffinity { mask, .. } if mask.is_empty() => input.push(SchedError::EmptyAffinity),
        Call::SetAffinity { mask, .. } if !mask.intersects(&online) => {
            input.push(SchedError::AffinityNotOnline)
        }
        _ => {}
    }
    if let Some(e) = call.id().and_then(|id| model.id_error(id)) {
        input.push(e);
    }
    if !input.is_empty() {
        return Expect::err(input);
    }
    // The input is well formed and names a live task (if any): what the task's state and
    // the room left allow.
    let task = call.id().map(|id| pre.task(id).expect("a live task is in the snapshot"));
    let invalid_state = |t: &TaskSnap| SchedError::InvalidState { task: t.id, state: t.state };
    match *call {
        Call::Create { params, .. } => {
            let room = pre.room_in(&params.affinity.and(&online));
            match (pre.nr_tasks >= model.tasks, room) {
                (true, true) => Expect::err(vec![SchedError::TaskTableFull]),
                (true, false) => Expect::err(vec![SchedError::TaskTableFull, SchedError::RunQueueFull]),
                (false, false) => Expect::err(vec![SchedError::RunQueueFull]),
                (false, true) => Expect::ok(),
            }
        }
        Call::Block { cpu, .. } => {
            let t = task.unwrap();
            if t.state == TaskState::Running && t.cpu == cpu {
                Expect::ok()
            } else {
                Expect::err(vec![invalid_state(t)])
            }
        }
        Call::Wake { .. } => {
            let t = task.unwrap();
            let allowed = t.entity.affinity.and(&online);
            if t.state != TaskState::Blocked {
                Expect::err(vec![invalid_state(t)])
            } else if pre.busy(t.id) && allowed.contains(t.cpu) {
                // Still on its CPU: it is requeued there.
                Expect::ok()
            } else if pre.room_for(t.id, &allowed) {
                Expect::ok()
            } else {
                // Asleep with no allowed CPU with room, or still on a CPU its affinity
                // excludes with nowhere to be pushed to.
                Expect::err(vec![SchedError::RunQueueFull])
            }
        }
        Call::Exit { .. } => {
            let t = task.unwrap();
            if t.state == TaskState::Exiting {
                Expect::err(vec![invalid_state(t)])
            } else {
                Expect::ok()
            }
        }
        Call::Exec { cpu, id } => {
            let t = task.unwrap();
            if pre.cpus[cpu].curr == Some(id) && t.entity.on_rq {
                Expect::ok()
            } else {
                Expect::err(vec![invalid_state(t)])
            }
        }
        Call::SetNice { .. } => {
            let t = task.unwrap();
            if t.state == TaskState::Exiting {
                Expect { ok: true, errs: vec![invalid_state(t)] }
            } else {
                Expect::ok()
            }
        }
        Call::SetAffinity { mask, id } => {
            let t = task.unwrap();
            let allowed = mask.and(&online);
            let room = pre.room_for(id, &allowed);
            if t.state == TaskState::Exiting {
                Expect { ok: true, errs: vec![invalid_state(t)] }
            } else if allowed.contains(t.cpu) || !pre.cpus.iter().any(|c| c.attached_id(id)) {
                // Stays where it is, or sleeps parked (it is placed when it wakes).
                Expect::ok()
            } else if pre.busy(id) && !t.entity.on_rq {
                // Blocked, its CPU still switching away from it: it is placed when it wakes,
                // so it needs no room now; refusing when there is none is conservative (a
                // wakeup before the switch would need it).
                Expect { ok: true, errs: if room { vec![] } else { vec![SchedError::RunQueueFull] } }
            } else if room {
                // Queued on a CPU it may no longer use: it must move now; running there: it
                // moves once switched out.
                Expect::ok()
            } else {
                Expect::err(vec![SchedError::RunQueueFull])
            }
        }
        Call::Yield { .. } | Call::Tick { .. } | Call::Schedule { .. } | Call::FinishSwitch { .. } => {
            Expect::ok()
        }
    }
}

impl CpuSnap {
    pub(crate) fn attached_id(&self, id: TaskId) -> bool {
        self.attached.iter().any(|&(_, t)| t == id)
    }
}

pub(crate) fn err_kind(e: &SchedError) -> &'static str {
    match e {
        SchedError::InvalidNice(_) => "InvalidNice",
        SchedError::EmptyAffinity => "EmptyAffinity",
        SchedError::AffinityNotOnline => "AffinityNotOnline",
        SchedError::TaskTableFull => "TaskTableFull",
        SchedError::RunQueueFull => "RunQueueFull",
        SchedError::UnknownTask(_) => "UnknownTask",
        SchedError::StaleTask(_) => "StaleTask",
        SchedError::InvalidState { .. } => "InvalidState",
        SchedError::CpuOutOfRange(_) => "CpuOutOfRange",
        SchedError::InvalidTunable(_) => "InvalidTunable",
        SchedError::CpuNotUp(_) => "CpuNotUp",
        SchedError::Reentered(_) => "Reentered",
        SchedError::ZeroTime => "ZeroTime",
        SchedError::SwitchPending(_) => "SwitchPending",
        SchedError::NoSwitchPicked(_) => "NoSwitchPicked",
        SchedError::NotInitialised => "NotInitialised",
        SchedError::Group(_) => "Group",
        #[cfg(feature = "eevdf")]
        SchedError::InvalidSlice(_) => "InvalidSlice",
        _ => "another error",
    }
}

pub(crate) fn kinds(errs: &[SchedError]) -> String {
    let v: Vec<&str> = errs.iter().map(err_kind).collect();
    v.join("|")
}
