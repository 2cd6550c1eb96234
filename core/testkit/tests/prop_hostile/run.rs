//! Running a case, shrinking a failing one to a short reproducer, and the watchdog that
//! aborts a call that never returns.

use super::*;

/// What a case is made of: generated operations, resolved against the state as they come, or
/// concrete calls (a shrunk reproducer), each with the time that passes before it.
pub(crate) trait Input: Copy {
    fn resolve(self, model: &Model, pre: &Snapshot, n: usize) -> (Call, u64);
}

impl Input for Op {
    fn resolve(self, model: &Model, pre: &Snapshot, n: usize) -> (Call, u64) {
        resolve(self, model, pre, n)
    }
}

impl Input for (Call, u64) {
    fn resolve(self, _: &Model, _: &Snapshot, _: usize) -> (Call, u64) {
        self
    }
}

/// The calls a case made, as lines to read and as concrete calls to replay.
#[derive(Default)]
pub(crate) struct Trace {
    pub(crate) lines: Vec<String>,
    pub(crate) calls: Vec<(Call, u64)>,
    /// Whether each call was refused (so changed nothing).
    pub(crate) refused: Vec<bool>,
}

/// Runs one sequence of operations on a fresh machine. Returns the failures (the case stops
/// at the first hard one, or at the first failure of kind `stop_at`) with the index of the
/// operation that failed. `trace` collects a readable log of the calls.
pub(crate) fn run_case<const T: usize, I: Input>(
    topo: &Topo,
    ops: &[I],
    stats: &mut Stats,
    stop_at: Option<&str>,
    mut trace: Option<&mut Trace>,
) -> Vec<(usize, Failure)> {
    let mut fails: Vec<(usize, Failure)> = Vec::new();
    let mut last_call = String::from("set-up");
    let mut index = 0usize;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let m: Box<M<T>> = Box::new(Smp::new(Counting::default(), Features::default(), 250));
        m.init_with(topo.build).expect("topology");
        let n = m.nr_cpus();
        let mut model = Model { tasks: T, ..Model::default() };
        let mut now = 1_000_000u64;
        stats.cases += 1;
        for (i, &op) in ops.iter().enumerate() {
            index = i;
            let pre = snapshot(&m, &model);
            let (call, dt) = op.resolve(&model, &pre, n);
            now += dt;
            last_call = call.name().to_string();
            stats.calls += 1;
            if pre.cpus.iter().any(|c| !c.has_room) {
                stats.full_rq += 1;
            }
            stats.max_live = stats.max_live.max(pre.nr_tasks);
            if pre.nr_tasks >= T {
                stats.full_table += 1;
            }
            watch_progress(|| format!("[{}] case {} op #{i}: {call:?}", topo.name, stats.cases));
            let res = execute(&m, now, call);
            // A task left in transit would make later calls on it wait forever.
            let created = match res {
                Ok(Out::Id(id)) => Some(id),
                _ => None,
            };
            if let Some(id) =
                model.live.keys().copied().chain(created).find(|&id| m.state(id) == Ok(TaskState::Waking))
            {
                let f = Failure {
                    key: format!("{}: task left in transit", label(&call, &pre)),
                    detail: format!("{id:?}"),
                    hard: true,
                };
                fails.push((i, f));
                return;
            }
            if let Err(e) = &res {
                *stats.refusals.entry(err_kind(e)).or_default() += 1;
            }
            if let Some(t) = trace.as_deref_mut() {
                t.lines.push(format!("#{i:<3} t={now:<10} {call:?} -> {res:?}"));
                t.calls.push((call, dt));
                t.refused.push(res.is_err());
            }
            let mut f = Vec::new();
            check_call(&m, n, &call, &res, &pre, &mut model, &mut f);
            if !f.iter().any(|f| f.hard) {
                if let Err(v) = m.check_invariants() {
                    let key = format!("{}: invariant: {}", label(&call, &pre), v.what);
                    f.push(Failure { key, detail: format!("{v:?}"), hard: true });
                } else if let Err(d) = check_model(&m, &model, &exited_sample(&model, i)) {
                    f.push(Failure {
                        key: format!("{}: model disagrees", label(&call, &pre)),
                        detail: d,
                        hard: true,
                    });
                }
            }
            let stop = f.iter().any(|f| f.hard || Some(f.key.as_str()) == stop_at);
            fails.extend(f.into_iter().map(|f| (i, f)));
            if stop {
                return;
            }
        }
        // Every id that ever exited is still stale.
        if let Err(d) = check_model(&m, &model, &model.exited) {
            let f = Failure { key: "end of case: model disagrees".into(), detail: d, hard: true };
            fails.push((ops.len().saturating_sub(1), f));
        }
    }));
    if let Err(p) = outcome {
        let key = format!("panic in {last_call}");
        fails.push((index, Failure { key, detail: panic_message(&*p), hard: true }));
    }
    for (_, f) in &fails {
        *stats.failures.entry(f.key.clone()).or_default() += 1;
    }
    fails
}

/// Shrinks `ops` to a short sequence that still fails with `key` (delta debugging over the
/// operations), until `deadline`.
pub(crate) fn shrink<const T: usize, I: Input>(
    topo: &Topo,
    ops: &[I],
    key: &str,
    deadline: Instant,
) -> Vec<I> {
    let fails_at = |ops: &[I]| -> Option<usize> {
        let mut scratch = Stats::default();
        run_case::<T, I>(topo, ops, &mut scratch, Some(key), None)
            .into_iter()
            .find(|(_, f)| f.key == key)
            .map(|(i, _)| i)
    };
    let mut cur = ops.to_vec();
    match fails_at(&cur) {
        Some(i) => cur.truncate(i + 1),
        None => return cur,
    }
    let mut chunk = cur.len().div_ceil(2);
    while chunk >= 1 && Instant::now() < deadline {
        let mut i = 0;
        let mut progress = false;
        while i < cur.len() && Instant::now() < deadline {
            let end = (i + chunk).min(cur.len());
            let cand: Vec<I> = cur[..i].iter().chain(&cur[end..]).copied().collect();
            match fails_at(&cand) {
                Some(j) => {
                    cur = cand;
                    cur.truncate(j + 1);
                    progress = true;
                }
                None => i += chunk,
            }
        }
        if !progress {
            chunk /= 2;
        }
    }
    cur
}

/// Progress of the topology test on this thread, for its watchdog.
pub(crate) struct Watch {
    pub(crate) calls: AtomicU64,
    pub(crate) last: Mutex<String>,
    pub(crate) done: AtomicBool,
}

thread_local! {
    static WATCH: RefCell<Option<Arc<Watch>>> = const { RefCell::new(None) };
}

/// Notes a call about to be made (described by `what`) for the watchdog.
pub(crate) fn watch_progress(what: impl FnOnce() -> String) {
    WATCH.with(|w| {
        if let Some(w) = &*w.borrow() {
            w.calls.fetch_add(1, Relaxed);
            *w.last.lock().unwrap() = what();
        }
    });
}

/// Starts a watchdog for this thread's test: a call that never returns (a core spinning on a
/// state it will not leave) aborts the run with the call, instead of hanging CI.
pub(crate) fn start_watchdog(name: &'static str) -> Arc<Watch> {
    let w = Arc::new(Watch {
        calls: AtomicU64::new(0),
        last: Mutex::new(String::new()),
        done: AtomicBool::new(false),
    });
    WATCH.with(|t| *t.borrow_mut() = Some(w.clone()));
    let dog = w.clone();
    std::thread::spawn(move || {
        let (mut seen, mut since) = (u64::MAX, Instant::now());
        while !dog.done.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let now = dog.calls.load(Relaxed);
            if now != seen {
                (seen, since) = (now, Instant::now());
            } else if since.elapsed() > Duration::from_secs(120) {
                eprintln!(
                    "prop_hostile[{name}]: a call has not returned for 120 s: {}",
                    dog.last.lock().unwrap()
                );
                std::process::abort();
            }
        }
    });
    w
}

/// Stops the watchdog when the test ends, however it ends.
pub(crate) struct StopWatch(pub(crate) Arc<Watch>);

impl Drop for StopWatch {
    fn drop(&mut self) {
        self.0.done.store(true, Relaxed);
    }
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}
