//! The subset's lowering: what it takes and every way it refuses.

use super::*;
use crate::Program;

const GLOBAL: &str = r#""global": {"duration": 2, "calibration": 100, "default_policy": "SCHED_OTHER"}"#;

fn with_tasks(tasks: &str) -> String {
    format!("{{{GLOBAL}, \"tasks\": {{{tasks}}}}}")
}

fn refused(text: &str) -> RtAppError {
    lower(text).expect_err("refused")
}

/// rt-app's classic periodic set, a ping-pong pair and a fork, as the program has them.
#[test]
fn the_subset_lowers_in_file_order() {
    let def = lower(&with_tasks(
        r#""light": {"instance": 3, "loop": -1, "priority": 5, "cpus": [0, 2],
              "phases": {"p": {"run0": 2000, "timer0": {"ref": "unique", "period": 10000},
                               "run1": 500, "sleep0": 100, "yield": 0}}},
           "ping": {"slice": 300, "phases": {"a": {"loop": 4, "cpus": [1], "lock": "m", "sync": {"ref": "c", "mutex": "m"},
                                     "unlock": "m", "runtime": 20}},
                    "delay": 300},
           "child": {"instance": 0, "loop": 1, "run": 50},
           "spawner": {"loop": 2, "phases": {"p": {"fork": "child", "timer": {"ref": "tick", "period": 5000, "mode": "absolute"}}}}"#,
    ))
    .unwrap();
    assert_eq!(def.duration_us, 2_000_000);
    let light = &def.tasks[0];
    assert_eq!((light.instances, light.loops, light.nice, light.cpus, light.slice_us), (3, -1, 5, 0b101, 0));
    assert_eq!(
        light.phases[0].events,
        [
            Event::Run { us: 2000 },
            Event::Timer { timer: Timer::PerThread(0), period_us: 10_000, absolute: false },
            Event::Run { us: 500 },
            Event::Sleep { us: 100 },
            Event::Yield,
        ]
    );
    let ping = &def.tasks[1];
    assert_eq!((ping.instances, ping.loops, ping.delay_us), (1, -1, 300));
    assert_eq!((ping.phases[0].loops, ping.phases[0].cpus), (4, 0b10));
    assert_eq!(
        ping.phases[0].events,
        [Event::Lock(0), Event::Sync { cond: 0, mutex: 0 }, Event::Unlock(0), Event::Runtime { us: 20 }]
    );
    assert_eq!(def.tasks[2].phases[0].events, [Event::Run { us: 50 }], "a phaseless task is one phase");
    assert_eq!(
        def.tasks[3].phases[0].events,
        [Event::Fork(2), Event::Timer { timer: Timer::Shared(0), period_us: 5000, absolute: true }]
    );
    assert_eq!((def.mutexes.len(), def.conds.len(), def.timers.len(), def.per_thread_timers), (1, 1, 1, 1));
    let bytes = def.to_bytes();
    let p = Program::parse(&bytes).unwrap();
    assert_eq!(p.threads(), 5);
}

/// A phase may be named `""`: it is a phase like any other, with its own `loop` and `cpus`.
#[test]
fn a_phase_named_empty_takes_loop_and_cpus() {
    let def =
        lower(&with_tasks(r#""t": {"phases": {"": {"loop": 3, "cpus": [1], "run": 10}, "b": {"run": 5}}}"#))
            .unwrap();
    let p = &def.tasks[0].phases;
    assert_eq!((p[0].name.as_str(), p[0].loops, p[0].cpus, p.len()), ("", 3, 0b10, 2));
}

/// A barrier's parties are every thread that names it.
#[test]
fn barrier_parties_count_every_thread() {
    let def = lower(&with_tasks(
        r#""a": {"instance": 2, "phases": {"p": {"run": 10, "barrier": "b"}}},
           "b": {"phases": {"p": {"barrier0": "b", "sleep": 10}}}"#,
    ))
    .unwrap();
    assert_eq!(def.barriers, [("b".to_string(), 3)]);
}

/// Forked threads are parties of the barriers they name: a main thread forking four workers
/// in a loop of two phases meets them at a barrier of five.
#[test]
fn barrier_parties_count_forked_threads() {
    let def = lower(&with_tasks(
        r#""m": {"loop": 1, "phases": {"f": {"loop": 2, "fork0": "w", "fork1": "w"}, "b": {"barrier": "b"}}},
           "w": {"instance": 0, "loop": 1, "phases": {"p": {"run": 10, "barrier": "b"}}}"#,
    ))
    .unwrap();
    assert_eq!(def.barriers, [("b".to_string(), 5)]);
}

/// Each refusal names its JSON path and has its own exit code.
#[test]
fn every_refusal_names_its_path() {
    let cases: &[(&str, &str, u8)] = &[
        // Not JSON: line and column.
        ("{\n \"tasks\": {,}\n}", "line 2 column 12: not valid JSON", 10),
        ("{\"tasks\": {}, \"tasks\": {}}", "given twice", 10),
        // Outside the subset.
        (
            &with_tasks(r#""t": {"phases": {"p": {"spin": 1}}}"#),
            "tasks.t.phases.p.spin: not supported: unknown event",
            11,
        ),
        (
            &with_tasks(r#""t": {"phases": {"p": {"xrun": 1}}}"#),
            "tasks.t.phases.p.xrun: not supported: unknown event",
            11,
        ),
        (
            &with_tasks(r#""t": {"policy": "SCHED_FIFO", "run": 1}"#),
            "tasks.t.policy: not supported: policy SCHED_FIFO",
            11,
        ),
        (
            &with_tasks(r#""t": {"slice": 50, "run": 1}"#),
            "tasks.t.slice: 50: 0 (the default) or 100..=100000 µs",
            12,
        ),
        (&with_tasks(r#""t": {"slice": 100001, "run": 1}"#), "tasks.t.slice", 12),
        (&with_tasks(r#""t": {"slice": "short", "run": 1}"#), "tasks.t.slice", 12),
        (
            &with_tasks(r#""t": {"taskgroup": "/a", "run": 1}"#),
            "tasks.t.taskgroup: not supported: unknown task key",
            11,
        ),
        (
            &with_tasks(r#""t": {"run": 1, "phases": {"p": {"run": 1}}}"#),
            "tasks.t.run: not supported: events beside phases",
            11,
        ),
        (
            "{\"global\": {\"calibration\": \"CPUx\"}, \"tasks\": {}}",
            "global.calibration: \"CPUx\": ns per loop",
            12,
        ),
        ("{\"global\": {\"calibration\": -1}, \"tasks\": {}}", "global.calibration", 12),
        ("{\"global\": {\"pi_enabled\": true}, \"tasks\": {}}", "global.pi_enabled: not supported", 11),
        (
            "{\"global\": {\"cumulative_slack\": true}, \"tasks\": {}}",
            "global.cumulative_slack: not supported",
            11,
        ),
        ("{\"global\": {\"ftrace\": 1}, \"tasks\": {}}", "global.ftrace: expected true or false", 12),
        (
            "{\"global\": {\"ftrace\": \"main,tasks\"}, \"tasks\": {}}",
            "global.ftrace: \"tasks\": a comma list of main, task, loop, event, stats, none",
            12,
        ),
        ("{\"global\": {\"log_size\": \"big\"}, \"tasks\": {}}", "global.log_size", 12),
        (
            "{\"global\": {\"calibration\": 1, \"io_device\": \"/tmp\"}, \"tasks\": {}}",
            "global.io_device: not supported",
            11,
        ),
        ("{\"global\": {\"calibration\": 1}, \"resources\": {}}", "resources: not supported", 11),
        (
            &with_tasks(r#""t": {"phases": {"p": {"timer": {"ref": "u", "period": 5, "jitter": 1}}}}"#),
            "tasks.t.phases.p.timer.jitter: not supported",
            11,
        ),
        // Values.
        (
            &with_tasks(r#""t": {"phases": {"p": {"run": -5}}}"#),
            "tasks.t.phases.p.run: -5 is out of range",
            12,
        ),
        (
            &with_tasks(r#""t": {"phases": {"p": {"sleep": 99999999999}}}"#),
            "tasks.t.phases.p.sleep: 99999999999 is out of range",
            12,
        ),
        (
            &with_tasks(r#""t": {"phases": {"p": {"sleep": 18446744073709551615}}}"#),
            "tasks.t.phases.p.sleep: 18446744073709551615 is out of range",
            12,
        ),
        (&with_tasks(r#""t": {"phases": {"p": {"run": 1.5}}}"#), "expected a whole number, found 1.5", 12),
        (
            &with_tasks(r#""t": {"phases": {"p": {"run": 18446744073709551616}}}"#),
            "tasks.t.phases.p.run: 1.8446744073709552e19 is out of range (0 to",
            12,
        ),
        (&with_tasks(r#""t": {"priority": -1e300, "run": 1}"#), "-1e300 is out of range (-20 to 19)", 12),
        // Beyond f64: out of range too, not invalid JSON (as it was where serde_json parsed
        // numbers into f64).
        (&with_tasks(r#""t": {"run": 1e400}"#), "tasks.t.run: 1e+400 is out of range (0 to", 12),
        (&with_tasks(r#""t": {"priority": -1e400, "run": 1}"#), "-1e+400 is out of range (-20 to 19)", 12),
        (&with_tasks(r#""t": {"phases": {"p": {"run": 1e2}}}"#), "expected an integer, found 100.0", 12),
        (&with_tasks(r#""t": {"loop": 2.0, "run": 1}"#), "tasks.t.loop: expected an integer, found 2.0", 12),
        (&with_tasks(r#""t": {"priority": -0, "run": 1}"#), "tasks.t.priority: expected an integer, found -0 (write 0)", 12),
        (
            &with_tasks(r#""t": {"instance": 100000, "run": 1}"#),
            "tasks.t.instance: 100000 is out of range",
            12,
        ),
        (
            &with_tasks(r#""t": {"priority": 20, "run": 1}"#),
            "tasks.t.priority: 20 is out of range (-20 to 19)",
            12,
        ),
        (&with_tasks(r#""t": {"cpus": [64], "run": 1}"#), "tasks.t.cpus[0]: 64 is out of range", 12),
        (
            &with_tasks(r#""t": {"phases": {"p": {"loop": 2}}}"#),
            "tasks.t.phases.p: a phase with no events",
            12,
        ),
        (
            &with_tasks(r#""t": {"phases": {"p": {"fork": "nobody"}}}"#),
            "tasks.t.phases.p.fork: no task \"nobody\"",
            12,
        ),
        (
            &with_tasks(r#""t": {"phases": {"p": {"timer": {"ref": "u"}}}}"#),
            "tasks.t.phases.p.timer: missing: period",
            12,
        ),
        ("{\"tasks\": {\"t\": {\"run\": 1}}}", "tasks.t.loop: cannot run: it loops forever", 14),
        (
            "{\"tasks\": {\"t\": {\"loop\": 1, \"phases\": {\"a\": {\"run\": 1}, \"b\": {\"loop\": -1, \"run\": 1}}}}}",
            "tasks.t.phases.b.loop: cannot run: the phase loops forever",
            14,
        ),
        ("{\"global\": {\"calibration\": 1}}", "tasks: missing", 12),
        // Cannot run as written.
        (
            &with_tasks(r#""t": {"phases": {"p": {"run": 1, "barrier": "b"}}}"#),
            "tasks.t: cannot run: barrier \"b\" has one thread only",
            14,
        ),
        // A name longer than the program keeps, or one the program would cut at a NUL.
        (
            &with_tasks(&format!(r#""{}": {{"run": 1}}"#, "n".repeat(65))),
            "a name of 65 bytes, at most 64",
            13,
        ),
        (&with_tasks(r#""a\u0000b": {"run": 1}"#), "holds no NUL", 12),
        (&with_tasks(r#""a/b": {"loop": 1, "run": 1}"#), "tasks.a/b: a task's name holds no '/'", 12),
        (
            &with_tasks(
                r#""a": {"loop": 1, "phases": {"p": {"timer0": {"ref": "unique0", "period": 5}, "timer1": {"ref": "unique1", "period": 5}, "timer2": {"ref": "unique2", "period": 5}, "timer3": {"ref": "unique3", "period": 5}, "timer4": {"ref": "unique4", "period": 5}, "timer5": {"ref": "unique5", "period": 5}, "timer6": {"ref": "unique6", "period": 5}, "timer7": {"ref": "unique7", "period": 5}, "timer8": {"ref": "unique8", "period": 5}}}}"#,
            ),
            "more than 8 per-thread timers in one task",
            13,
        ),
        // Named twice by each of two threads: four parties, two threads that can wait.
        (
            &with_tasks(r#""t": {"instance": 2, "loop": 1, "barrier0": "b", "run": 5, "barrier1": "b"}"#),
            "tasks.t: cannot run: barrier \"b\" counts 4 parties (one per naming) but 2 threads can wait",
            14,
        ),
        (
            &with_tasks(r#""t": {"phases": {"p": {"wait": {"ref": "c", "mutex": "m"}}}}"#),
            "cannot run: waits under mutex \"m\" without holding it",
            14,
        ),
        (
            &with_tasks(r#""t": {"phases": {"p": {"lock": "m", "run": 1}}}"#),
            "tasks.t.phases.p: cannot run: mutex \"m\" is still held",
            14,
        ),
        // rt-app 1.0 would wait on "x", later rt-app on "a": one file, two meanings.
        (
            &with_tasks(r#""a": {"loop": 3, "run": 5000, "suspend": "x"}, "b": {"loop": 3, "sleep": 20000, "resume": "a"}"#),
            "tasks.a.suspend: cannot run: suspend names its own task (\"a\"), not \"x\"",
            14,
        ),
        (
            &with_tasks(r#""t": {"phases": {"p": {"lock": "m", "sleep": 1, "unlock": "m"}}}"#),
            "blocks while holding mutex \"m\"",
            14,
        ),
        (
            &with_tasks(r#""t": {"instance": 0, "run": 1}"#),
            "tasks.t.instance: cannot run: 0 instances and no task that runs forks it",
            14,
        ),
        // Forked only by itself, or in a cycle no running task enters: it never starts either.
        (
            &with_tasks(
                r#""m": {"loop": 1, "run": 10}, "a": {"instance": 0, "loop": 1, "run": 10, "fork": "a"}"#,
            ),
            "tasks.a.instance: cannot run: 0 instances and no task that runs forks it",
            14,
        ),
        (
            &with_tasks(
                r#""m": {"loop": 1, "run": 10}, "a": {"instance": 0, "loop": 1, "fork": "b"}, "b": {"instance": 0, "loop": 1, "fork": "a"}"#,
            ),
            "tasks.a.instance: cannot run: 0 instances and no task that runs forks it",
            14,
        ),
        // Forks of forks, each a million times, name a barrier: more parties than any machine.
        (
            &with_tasks(
                r#""a": {"loop": 1000000, "phases": {"p": {"loop": 1000000, "fork": "b"}}},
                   "b": {"instance": 0, "loop": 1000000, "phases": {"p": {"loop": 1000000, "fork": "c"}}},
                   "c": {"instance": 0, "loop": 1, "barrier0": "x", "barrier1": "x"}"#,
            ),
            "too large",
            13,
        ),
        // This project's events: a pool named twice differently, a take without its size,
        // a barrier whose forked parties have no bound.
        (
            &with_tasks(
                r#""a": {"loop": 1, "take": {"ref": "e", "size": 10, "run": 5}}, "b": {"loop": 1, "take": {"ref": "e", "size": 20, "run": 5}}"#,
            ),
            "tasks.b.take: cannot run: pool \"e\" was given size 10 and jitter 0 before, here 20 and 0",
            14,
        ),
        (
            &with_tasks(r#""a": {"loop": 1, "take": {"ref": "e", "run": 5}}"#),
            "tasks.a.take: missing: size",
            12,
        ),
        (
            &with_tasks(r#""a": {"loop": 1, "take": {"ref": "e", "size": 10, "run": 5, "jitter": 51}}"#),
            "tasks.a.take.jitter",
            12,
        ),
        (
            &with_tasks(r#""a": {"loop": 1, "take": {"ref": "e", "size": 10, "run": 5, "cost": 1}}"#),
            "tasks.a.take.cost: not supported: unknown key (known: ref size run jitter)",
            11,
        ),
        (
            &with_tasks(
                r#""a": {"loop": 1, "lock": "m", "take": {"ref": "e", "size": 10, "run": 5}, "unlock": "m"}"#,
            ),
            "blocks while holding mutex \"m\"",
            14,
        ),
        (&with_tasks(r#""a": {"loop": 1, "join": false}"#), "tasks.a.join: expected true", 12),
        (
            &with_tasks(
                r#""a": {"instance": 2, "loop": 1, "phases": {"p": {"take": {"ref": "e", "size": 10, "run": 5}}, "q": {"barrier": "b"}}}"#,
            ),
            "tasks.a.phases.q: cannot run: a barrier or fork after a take",
            14,
        ),
        (
            &with_tasks(
                r#""a": {"instance": 2, "loop": 2, "phases": {"q": {"barrier": "b"}, "p": {"take": {"ref": "e", "size": 10, "run": 5}}}}"#,
            ),
            "tasks.a.phases.q: cannot run: a barrier or fork after a take",
            14,
        ),
        (
            &with_tasks(
                r#""a": {"instance": 2, "loop": 1, "phases": {"p": {"loop": 3, "barrier": "b", "take": {"ref": "e", "size": 10, "run": 5}}}}"#,
            ),
            "tasks.a.phases.p: cannot run: a barrier or fork after a take",
            14,
        ),
        (
            &with_tasks(r#""a": {"loop": 1, "take": {"ref": "e", "size": 1000001, "run": 5}}"#),
            "tasks.a.take.size",
            12,
        ),
        (
            &with_tasks(
                r#""a": {"loop": 1, "take": {"ref": "e", "size": 600000, "run": 5}}, "b": {"loop": 1, "take": {"ref": "f", "size": 600000, "run": 5}}"#,
            ),
            "tasks: too large: 1200000 pool events in all, at most 1000000",
            13,
        ),
        (
            &with_tasks(
                r#""m": {"loop": -1, "phases": {"p": {"run": 10, "fork": "w", "barrier": "b"}}}, "w": {"instance": 0, "loop": 1, "barrier": "b"}"#,
            ),
            "tasks.w: cannot run: its threads take part in a barrier but are forked without bound",
            14,
        ),
        (
            "{\"global\": {\"calibration\": 1}, \"tasks\": {\"t\": {\"run\": 1}}}",
            "tasks.t.loop: cannot run: it loops forever",
            14,
        ),
    ];
    for (text, says, code) in cases {
        let e = refused(text);
        assert!(e.to_string().contains(says), "{text}\n  gave {e}\n  not {says}");
        assert_eq!(e.exit_code(), *code, "{e}");
    }
}

/// More than the format holds is refused before anything is encoded.
#[test]
fn limits_are_refused() {
    let many: Vec<String> = (0..=MAX_EVENTS).map(|i| format!("\"run{i}\": 1")).collect();
    let e = refused(&with_tasks(&format!("\"t\": {{\"phases\": {{\"p\": {{{}}}}}}}", many.join(","))));
    assert_eq!((e.exit_code(), e.to_string().contains("more than 64 events")), (13, true), "{e}");
    let tasks: Vec<String> = (0..=MAX_TASKS).map(|i| format!("\"t{i}\": {{\"run\": 1}}")).collect();
    assert_eq!(refused(&with_tasks(&tasks.join(","))).exit_code(), 13);
}

/// A timer's mode is the timer's, as rt-app keeps it: one `absolute` use makes every use of
/// that shared timer absolute, in any task, and of a thread's own timer, in its task.
#[test]
fn a_timer_is_absolute_for_every_use_once_one_says_so() {
    let def = lower(&with_tasks(
        r#""a": {"phases": {"p": {"timer": {"ref": "tick", "period": 1000, "mode": "absolute"}, "run": 10}}},
           "b": {"phases": {"p": {"timer": {"ref": "tick", "period": 1000}, "run": 10}}},
           "c": {"phases": {"p": {"timer": {"ref": "unique", "period": 1000}, "run": 10},
                            "q": {"timer": {"ref": "unique", "period": 1000, "mode": "absolute"}}}},
           "d": {"phases": {"p": {"timer": {"ref": "unique", "period": 1000}, "run": 10}}}"#,
    ))
    .unwrap();
    let mode = |t: usize, p: usize| match def.tasks[t].phases[p].events[0] {
        Event::Timer { absolute, .. } => absolute,
        e => panic!("{e:?}"),
    };
    assert_eq!([mode(0, 0), mode(1, 0), mode(2, 0), mode(2, 1), mode(3, 0)], [true, true, true, true, false]);
}

/// `calibration` is checked as rt-app reads it and changes nothing: a `run` of N µs is N µs
/// of work on every platform here; `global` may be left out (rt-app's defaults).
#[test]
fn calibration_and_global_are_optional_and_change_nothing() {
    let tasks = r#""tasks": {"t": {"loop": 2, "run": 999}}"#;
    let with = |global: &str| lower(&format!("{{{global}{tasks}}}")).unwrap();
    let base = with(r#""global": {"calibration": 100}, "#);
    for g in [
        r#""global": {"calibration": 1000000}, "#,
        r#""global": {"calibration": "CPU3"}, "#,
        r#""global": {}, "#,
        "",
    ] {
        assert_eq!(with(g), base, "{g}");
    }
    let bytes = base.to_bytes();
    let prog = Program::parse(&bytes).unwrap();
    let mut w = crate::interp::World::<4>::new(0);
    w.spawn_all(&prog).unwrap();
    struct NoHost;
    impl crate::interp::Host for NoHost {
        fn wake(&mut self, _: crate::interp::ThreadId) {}
        fn activation(&mut self, _: &crate::interp::Activation) {}
    }
    let step = w.step(&prog, 0, 0, &mut NoHost);
    assert_eq!(
        step,
        crate::interp::Step::Work { ns: 999_000, jitter_pct: 0 },
        "a run of 999 µs is 999 µs of work"
    );
}

/// Each task numbers its threads' own timers from 0: the limit is per task, so nine tasks of
/// one `unique` timer each fit, each numbered 0.
#[test]
fn per_thread_timers_are_counted_per_task() {
    let tasks: Vec<String> = (0..9)
        .map(|i| format!(r#""t{i}": {{"loop": 1, "timer": {{"ref": "unique{i}", "period": 10}}}}"#))
        .collect();
    let def = lower(&with_tasks(&tasks.join(", "))).unwrap();
    assert_eq!(def.per_thread_timers, 1);
    for t in &def.tasks {
        assert_eq!(
            t.phases[0].events,
            [Event::Timer { timer: Timer::PerThread(0), period_us: 10, absolute: false }]
        );
    }
    Program::parse(&def.to_bytes()).unwrap();
}

/// A file written as rt-app's own examples are: comments, a trailing comma, the global log
/// settings (which change nothing here), a measured calibration. It lowers to the same
/// program as its plain form.
#[test]
fn a_file_in_rtapp_examples_style_lowers() {
    let styled = r#"{
        /* A thread that runs 2 ms, then sleeps 8 ms. */
        "tasks": {
            "thread0": { "loop": 5, "run": 2000, "sleep": 8000, },   // trailing comma
        },
        "global": {
            "duration": 2, "calibration": "CPU0", "default_policy": "SCHED_OTHER",
            "pi_enabled": false, "lock_pages": false, "logdir": "./", "log_basename": "ex",
            "ftrace": true, "gnuplot": true, "log_size": "file", "cumulative_slack": false,
        }
    }"#;
    let plain =
        r#"{"global": {"duration": 2}, "tasks": {"thread0": {"loop": 5, "run": 2000, "sleep": 8000}}}"#;
    assert_eq!(lower(styled).unwrap(), lower(plain).unwrap());
    // rt-app's tutorial names its trace categories in a string, and events by any suffix.
    let tutorial = plain
        .replace(r#""duration": 2"#, r#""duration": 2, "ftrace": "main,TASK,loop,event""#)
        .replace(r#""run":"#, r#""run_busy":"#)
        .replace(r#""sleep":"#, r#""sleep_a":"#);
    assert_eq!(lower(&tutorial).unwrap(), lower(plain).unwrap());
    let guest = crate::rtapp::linux::guest_json(styled).unwrap();
    assert_eq!(
        guest.json,
        r#"{"tasks":{"thread0":{"loop":5,"phases":{"p":{"run":2000,"sleep":8000}}}},"global":{"duration":2,"calibration":"CPU0","default_policy":"SCHED_OTHER","pi_enabled":false,"lock_pages":false,"cumulative_slack":false,"logdir":"/tmp","log_basename":"rt-app"}}"#
    );
}

/// Values rt-app takes that look odd: a negative `delay` is none, and a timer of period 0
/// waits for nothing (it restarts from now, as rt-app's tutorial uses it).
#[test]
fn a_negative_delay_is_none_and_a_timer_may_have_period_0() {
    let def =
        lower(&with_tasks(r#""t": {"delay": -5, "loop": 1, "run": 10, "timer": {"ref": "t", "period": 0}}"#))
            .unwrap();
    assert_eq!(def.tasks[0].delay_us, 0);
    assert_eq!(
        def.tasks[0].phases[0].events[1],
        Event::Timer { timer: Timer::Shared(0), period_us: 0, absolute: false }
    );
    Program::parse(&def.to_bytes()).unwrap();
}

/// Forks counted past a phase that runs until the end: one in it has no bound, one before it
/// happens once, and one after it never.
#[test]
fn forks_around_a_phase_that_never_ends_are_counted_as_reached() {
    let count = |phases: &str| {
        let json = format!(
            r#"{{{GLOBAL}, "tasks": {{"m": {{"loop": 5, "phases": {{{phases}}}}}, "w": {{"instance": 0, "loop": 1, "run": 1}}}}}}"#
        );
        let bytes = lower(&json).unwrap().to_bytes();
        crate::Program::parse(&bytes).unwrap().threads_of(1)
    };
    let forever = r#""f": {"loop": -1, "run": 10}"#;
    assert_eq!(count(&format!(r#""a": {{"fork": "w"}}, {forever}"#)), Some(1), "before: once");
    assert_eq!(count(&format!(r#"{forever}, "b": {{"fork": "w"}}"#)), Some(0), "after: never");
    assert_eq!(count(r#""f": {"loop": 0, "fork": "w"}"#), None, "in it: no bound");
    assert_eq!(count(r#""a": {"loop": 2, "fork": "w"}"#), Some(10), "every loop of the task");
}

/// `suspend` on the task's own name, which every rt-app reads alike, lowers to a wait on that
/// name's condition, the one a `resume` of the task signals.
#[test]
fn a_suspend_on_its_own_name_is_resumed_by_name() {
    let def = lower(&with_tasks(
        r#""a": {"loop": 3, "run": 5000, "suspend": "a"}, "b": {"loop": 3, "sleep": 20000, "resume": "a"}"#,
    ))
    .expect("its own name");
    let suspend = def.tasks[0].phases[0].events.iter().find_map(|e| match e {
        Event::Suspend(c) => Some(*c),
        _ => None,
    });
    let resume = def.tasks[1].phases[0].events.iter().find_map(|e| match e {
        Event::Resume(c) => Some(*c),
        _ => None,
    });
    assert!(suspend.is_some() && suspend == resume, "{suspend:?} {resume:?}");
}
