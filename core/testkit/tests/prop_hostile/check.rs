//! What is checked after every call: the result against the oracle, an unchanged state
//! after a refusal, what a successful call did, and the model against the machine.

use super::*;

pub(crate) const SET_AFFINITY_LEFT_OUTSIDE: &str =
    "set_affinity: Ok but the queued task stays outside its new affinity";

/// Checks one call's result and effects; pushes what is wrong onto `fails`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_call<const T: usize>(
    m: &M<T>,
    n: usize,
    call: &Call,
    res: &Result<Out, SchedError>,
    pre: &Snapshot,
    model: &mut Model,
    fails: &mut Vec<Failure>,
) {
    let name = label(call, pre);
    let name = name.as_str();
    let mut fail = |key: String, detail: String, hard: bool| fails.push(Failure { key, detail, hard });
    let online = CpuMask::first_n(n);
    let expect = oracle(call, pre, model, n);
    match res {
        Err(e) => {
            if !expect.accepts(e) {
                let key = if expect.ok && expect.errs.is_empty() {
                    format!("{name}: refused a valid call with {}", err_kind(e))
                } else {
                    format!("{name}: {} instead of {}", err_kind(e), kinds(&expect.errs))
                };
                let detail = format!("got {e:?}, expected ok={} or {:?}", expect.ok, expect.errs);
                fail(key, detail, false);
            }
            if let (SchedError::CpuOutOfRange(x), Some(cpu)) = (e, call.cpu()) {
                if *x != cpu {
                    let key = format!("{name}: CpuOutOfRange payload is not the cpu passed");
                    fail(key, format!("cpu {cpu} (online {n}) refused as {e:?}"), false);
                }
            }
            let post = snapshot(m, model);
            if post != *pre {
                fail(format!("{name}: refusal {} changed state", err_kind(e)), pre.diff(&post), true);
            }
            return;
        }
        Ok(o) if !expect.ok => {
            let mut key = format!("{name}: accepted, expected {}", kinds(&expect.errs));
            let mut detail = format!("returned {o:?}, expected {:?}", expect.errs);
            if let Call::SetAffinity { id, mask } = *call {
                let cpu = m.task_cpu(id);
                if pre.busy(id) {
                    key = "set_affinity: Ok for a running task though every allowed CPU is full".into();
                    detail += &format!("; {id:?} runs on CPU {cpu:?}, new mask {mask:?}");
                } else if !cpu.is_ok_and(|c| mask.contains(c)) {
                    key = format!("{SET_AFFINITY_LEFT_OUTSIDE} (every allowed CPU full)");
                    detail += &format!(
                        "; {id:?} was queued on CPU {:?}, is now on {cpu:?}, new mask {mask:?}",
                        pre.task(id).map(|t| t.cpu)
                    );
                }
            }
            fail(key, detail, true);
            return;
        }
        Ok(_) => {}
    }
    let out = res.as_ref().copied().unwrap();
    // A call on an out-of-range CPU that cannot report it must change nothing.
    if call.cpu().is_some_and(|c| c >= n) {
        let post = snapshot(m, model);
        let bad = match out {
            Out::Pick(p) => p.is_some(),
            Out::Bool(b) => b,
            _ => false,
        };
        if bad || post != *pre {
            let detail = format!("returned {out:?}; {}", pre.diff(&post));
            fail(format!("{name}: out-of-range CPU changed state or returned work"), detail, true);
        }
        return;
    }
    let entity = |id: TaskId| entity_of(m, id);
    match (*call, out) {
        (Call::Create { params, .. }, Out::Id(id)) => {
            let allowed = params.affinity.and(&online);
            if model.issued(id) {
                fail("create: reissued an id".into(), format!("{id:?}"), true);
                return;
            }
            model.live.insert(id, Class::Active);
            let g = model.max_gen.entry(id.slot() as u32).or_insert(id.generation());
            *g = (*g).max(id.generation());
            let (state, cpu, e) = (m.state(id), m.task_cpu(id), entity(id));
            let good = matches!((state, cpu, e), (Ok(TaskState::Runnable), Ok(c), Ok(e))
                if allowed.contains(c) && e.affinity == allowed && e.nice.get() == params.nice
                    && e.policy == params.policy && e.on_rq);
            if !good {
                let detail = format!("{id:?}: state {state:?} cpu {cpu:?} entity {e:?}");
                fail("create: new task not runnable inside its affinity".into(), detail, true);
            }
        }
        (Call::Block { cpu, id }, _) => {
            model.live.insert(id, Class::Blocked);
            if m.current(cpu) != Some(id) {
                fail("block: task no longer current".into(), format!("{id:?} on {cpu}"), true);
            }
        }
        (Call::Wake { id, .. }, Out::Cpu(c)) => {
            model.live.insert(id, Class::Active);
            let in_place = pre.busy(id);
            let (cpu, e) = (m.task_cpu(id), entity(id));
            let good = match (cpu, e) {
                (Ok(at), Ok(e)) => at == c && c < n && (in_place || e.affinity.contains(c)),
                _ => false,
            };
            if !good {
                let detail = format!("{id:?} woken on {c}: task_cpu {cpu:?}, entity {e:?}");
                fail(format!("{name}: woken onto a wrong CPU"), detail, true);
            }
        }
        (Call::Exit { id }, _) => {
            if pre.busy(id) {
                model.live.insert(id, Class::Exiting);
            } else {
                model.exit(id);
            }
        }
        (Call::Exec { id, .. }, Out::Cpu(d)) => {
            let allowed = pre.task(id).map(|t| t.entity.affinity.and(&online)).unwrap_or_default();
            if !allowed.contains(d) {
                fail("exec: destination outside affinity".into(), format!("{id:?} -> {d}"), true);
            }
        }
        (Call::SetNice { id, nice }, _) => match entity(id) {
            Ok(e) if e.nice.get() == nice && e.load() == weight_for(e.policy, e.nice) => {}
            e => fail("set_nice: nice or weight not applied".into(), format!("{id:?} {nice}: {e:?}"), true),
        },
        (Call::SetAffinity { id, mask }, _) => {
            let allowed = mask.and(&online);
            let t = pre.task(id).unwrap();
            let queued = t.entity.on_rq && !pre.busy(id);
            let (cpu, e) = (m.task_cpu(id), entity(id));
            if e.as_ref().map(|e| e.affinity) != Ok(allowed) {
                fail("set_affinity: mask not applied".into(), format!("{id:?} {e:?}"), true);
            } else if queued && !cpu.is_ok_and(|c| allowed.contains(c)) {
                let full: Vec<usize> = (0..n).filter(|&c| !pre.cpus[c].has_room).collect();
                let detail = format!(
                    "{id:?} queued on CPU {} re-pinned to {allowed:?}: Ok but now on {cpu:?} (full before: {full:?})",
                    t.cpu
                );
                fail(format!("{SET_AFFINITY_LEFT_OUTSIDE} (an allowed CPU had room)"), detail, true);
            }
        }
        (Call::Schedule { cpu, .. }, Out::Pick(next)) => {
            if m.current(cpu) != next {
                let detail = format!("picked {next:?}, current {:?}", m.current(cpu));
                fail(format!("{name}: returned task is not current"), detail, true);
            }
            if let Some(t) = next {
                let e = entity(t);
                if !e.as_ref().is_ok_and(|e| e.affinity.contains(cpu)) {
                    let detail = format!("CPU {cpu} runs {t:?}, entity {e:?}");
                    fail(format!("{name}: runs a task outside its affinity"), detail, true);
                }
                if model.live.get(&t) != Some(&Class::Active) || m.state(t) != Ok(TaskState::Running) {
                    let detail = format!("{t:?}: model {:?}, state {:?}", model.live.get(&t), m.state(t));
                    fail(format!("{name}: picked a task that is not runnable"), detail, true);
                }
            }
        }
        _ => {}
    }
    // A task switched out of a CPU its affinity excludes must leave it (the invariant checker
    // finds it too; this says whether it had somewhere to go).
    if let Call::Schedule { cpu, .. } | Call::FinishSwitch { cpu } = *call {
        for (id, e) in stranded(m, cpu) {
            let room =
                (0..n).any(|c| e.affinity.contains(c) && m.with_cpu(c, |st| st.rq.has_room()) == Ok(true));
            let why = if room { "an allowed CPU has room" } else { "every allowed CPU is full" };
            let detail = format!("{id:?} stays queued on CPU {cpu}, affinity {:?}", e.affinity);
            fail(format!("{name}: switched-out task left queued outside its affinity ({why})"), detail, true);
        }
    }
    // An exiting task leaves when its CPU has finished switching away from it: the one being
    // switched out at the next schedule or finish_switch, the current one at schedule +
    // finish_switch.
    let leaving = match *call {
        Call::Schedule { cpu, finish: true } => vec![pre.cpus[cpu].switching_out, pre.cpus[cpu].curr],
        Call::Schedule { cpu, finish: false } | Call::FinishSwitch { cpu } => {
            vec![pre.cpus[cpu].switching_out]
        }
        _ => vec![],
    };
    for id in leaving.into_iter().flatten() {
        if model.live.get(&id) == Some(&Class::Exiting) {
            model.exit(id);
        }
    }
}

/// The call's name for failure kinds; a `schedule` while the previous switch on that CPU is
/// not finished says so.
pub(crate) fn label(call: &Call, pre: &Snapshot) -> String {
    match *call {
        Call::Schedule { cpu, .. } if pre.cpus.get(cpu).is_some_and(|c| c.switching_out.is_some()) => {
            format!("{} after an unfinished switch", call.name())
        }
        _ => call.name().to_string(),
    }
}

/// Tasks queued (not running) on `cpu` that their affinity excludes.
pub(crate) fn stranded<const T: usize>(m: &M<T>, cpu: usize) -> Vec<(TaskId, Entity)> {
    m.with_cpu_entities(cpu, |_, ents| {
        ents.filter(|(_, e)| e.on_rq && !e.on_cpu && !e.affinity.contains(cpu)).collect()
    })
    .unwrap_or_default()
}

/// The model and the machine agree on every live task and on `exited` (all exited ids, or
/// the newest few and a rotating sample).
pub(crate) fn check_model<const T: usize>(m: &M<T>, model: &Model, exited: &[TaskId]) -> Result<(), String> {
    if m.nr_tasks() != model.live.len() {
        return Err(format!("nr_tasks {} but the model has {} live", m.nr_tasks(), model.live.len()));
    }
    for (&id, &class) in &model.live {
        let s = m.state(id);
        let good = matches!(
            (class, s),
            (Class::Active, Ok(TaskState::Runnable | TaskState::Running))
                | (Class::Blocked, Ok(TaskState::Blocked))
                | (Class::Exiting, Ok(TaskState::Exiting))
        );
        if !good {
            return Err(format!("{id:?}: model {class:?}, state {s:?}"));
        }
    }
    for &id in exited {
        if m.state(id) != Err(SchedError::StaleTask(id)) {
            return Err(format!("exited {id:?}: state {:?}", m.state(id)));
        }
    }
    for c in 0..m.nr_cpus() {
        let unknown = m.with_cpu(c, |st| st.rq.attached().find(|(_, id)| !model.live.contains_key(id)));
        if let Ok(Some((_, id))) = unknown {
            return Err(format!("CPU {c} holds {id:?}, which the model does not know as live"));
        }
    }
    Ok(())
}

/// The newest exited ids and a few more, rotating with `i`.
pub(crate) fn exited_sample(model: &Model, i: usize) -> Vec<TaskId> {
    let e = &model.exited;
    let mut v: Vec<TaskId> = e.iter().rev().take(4).copied().collect();
    if !e.is_empty() {
        v.extend((0..4).map(|k| e[(i * 4 + k) % e.len()]));
    }
    v
}
