//! The checker against hand-made traces: each rule's pass and failure, and the formats.

use super::*;
use serde_json::json;

fn switch(cpu: usize, ts: &str, prev: (&str, u32), next: (&str, u32)) -> String {
    format!(
        "{pc}-{pp} [{cpu:03}] d..2 {ts}: sched_switch: prev_comm={pc} prev_pid={pp} prev_prio=120 prev_state=R ==> next_comm={nc} next_pid={np} next_prio=120",
        pc = prev.0,
        pp = prev.1,
        nc = next.0,
        np = next.1
    )
}

/// Two CPUs, each switching from idle to a task and back, plus a waking and a counter.
fn good_lines() -> Vec<String> {
    vec![
        "# tracer: nop".to_string(),
        "a-1 [000] d..2 0.000900: sched_waking: comm=a pid=1 prio=120 target_cpu=000".to_string(),
        switch(0, "0.001000", ("swapper/0", 0), ("a", 1)),
        switch(1, "0.001000", ("swapper/1", 0), ("b", 2)),
        "<idle>-0 [001] .... 0.001500: tracing_mark_write: C|0|cpu1_util|512".to_string(),
        switch(0, "0.002000", ("a", 1), ("swapper/0", 0)),
        String::new(),
        switch(1, "0.002000", ("b", 2), ("swapper/1", 0)),
    ]
}

fn doc(lines: &[String]) -> serde_json::Value {
    json!({
        "displayTimeUnit": "ms",
        "systemTraceEvents": lines.join("\n") + "\n",
        "traceEvents": [],
        "otherData": {},
    })
}

fn check(v: &serde_json::Value, min_cpus: usize) -> TraceCheck {
    check_chrome_trace(&v.to_string(), min_cpus)
}

fn problems(v: &serde_json::Value, min_cpus: usize) -> Vec<TraceProblem> {
    check(v, min_cpus).expect_err("the checker reports a problem")
}

/// The good trace with line `i` (0-based) replaced.
fn with_line(i: usize, line: &str) -> serde_json::Value {
    let mut lines = good_lines();
    lines[i] = line.to_string();
    doc(&lines)
}

#[test]
fn a_good_minimal_trace_passes() {
    let s = check(&doc(&good_lines()), 2).expect("good trace");
    assert_eq!(s.cpus_with_switches, BTreeSet::from([0, 1]));
    let events: Vec<(&str, usize)> = s.events.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(events, [("sched_switch", 4), ("sched_waking", 1), ("tracing_mark_write", 1)]);
    assert_eq!(
        verdict(&Ok(s)),
        "OK: sched_switch on 2 CPUs; events: sched_switch=4, sched_waking=1, tracing_mark_write=1"
    );
}

#[test]
fn optional_keys_and_units_are_accepted() {
    let mut v = doc(&good_lines());
    v.as_object_mut().unwrap().remove("displayTimeUnit");
    assert!(check(&v, 2).is_ok(), "displayTimeUnit may be absent");
    v["displayTimeUnit"] = json!("ns");
    v["metadata"] = json!({});
    assert!(check(&v, 2).is_ok());
    // No minimum: any number of CPUs will do.
    assert!(check(&v, 0).is_ok());
}

#[test]
fn the_trace_writer_output_passes() {
    use sched_core::TaskId;
    let mut t = crate::trace::TraceLog::new(2);
    let (a, b) = (TaskId::new(0, 0), TaskId::new(1, 0));
    t.waking(500, 0, a, "worker 0");
    t.switch(1_000, 0, None, None, Some(a), Some("worker 0".into()), None);
    t.switch(1_000, 1, None, None, Some(b), Some("worker=1".into()), None);
    t.counter(1_500, 1, 10, 20);
    let s = check_chrome_trace(&t.chrome_json(json!({ "source": "test" })), 2).expect("writer output");
    assert_eq!(s.cpus_with_switches.len(), 2);
    assert_eq!(s.events["sched_waking"], 1);
    assert_eq!(s.events["tracing_mark_write"], 2);
}

#[test]
fn an_unknown_top_level_key_is_reported() {
    let mut v = doc(&good_lines());
    v["traceEventz"] = json!([]);
    assert_eq!(problems(&v, 2), [TraceProblem::UnknownTopLevelKeys(vec!["traceEventz".into()])]);
}

#[test]
fn a_bad_display_time_unit_is_reported() {
    for unit in [json!("us"), json!(""), json!(1)] {
        let mut v = doc(&good_lines());
        v["displayTimeUnit"] = unit.clone();
        assert_eq!(problems(&v, 2), [TraceProblem::BadDisplayTimeUnit(unit.to_string())]);
    }
}

#[test]
fn empty_or_missing_text_is_reported() {
    for text in [Some(json!("")), Some(json!("  \n\n")), Some(json!(["x"])), None] {
        let mut v = doc(&good_lines());
        match text {
            Some(t) => v["systemTraceEvents"] = t,
            None => {
                v.as_object_mut().unwrap().remove("systemTraceEvents");
            }
        }
        assert_eq!(problems(&v, 2), [TraceProblem::NoSystemTraceEvents], "{v}");
    }
}

#[test]
fn other_documents_are_reported() {
    assert!(matches!(check_chrome_trace("{", 0).unwrap_err()[..], [TraceProblem::NotJson(_)]));
    assert_eq!(check_chrome_trace("[]", 0).unwrap_err(), [TraceProblem::NotAnObject]);
}

#[test]
fn untokenizable_lines_are_reported() {
    let bad = [
        // No `-pid` after the comm.
        "swapper/0 [000] d..2 0.001000: sched_switch: prev_comm=x",
        // Five flag characters.
        "a-1 [000] d..2x 0.001000: sched_waking: comm=a pid=1",
        // Timestamp without a fraction.
        "a-1 [000] d..2 1: sched_waking: comm=a pid=1",
        // No CPU in brackets.
        "a-1 000 d..2 0.001000: sched_waking: comm=a pid=1",
        // No `event:`.
        "a-1 [000] d..2 0.001000 sched_waking comm=a pid=1",
    ];
    for line in bad {
        let p = problems(&with_line(1, line), 2);
        assert_eq!(p, [TraceProblem::Untokenizable { line: 2, text: line.to_string() }], "{line}");
    }
    // Flags may be absent, and a tgid may be given.
    assert!(check(&with_line(1, "a-1 [000] 0.000900: sched_waking: comm=a pid=1"), 2).is_ok());
    assert!(check(&with_line(1, "a-1 (  1) [000] .N.. 0.000900: sched_waking: comm=a pid=1"), 2).is_ok());
    assert!(check(&with_line(1, "a-1 (-----) [000] 0.000900: sched_waking: comm=a pid=1"), 2).is_ok());
}

#[test]
fn a_timestamp_going_back_on_a_cpu_is_reported() {
    // CPU 0 goes from 0.001 to 0.0005 on line 6.
    let p = problems(&with_line(5, &switch(0, "0.000500", ("a", 1), ("swapper/0", 0))), 2);
    assert_eq!(
        p,
        [TraceProblem::TimestampWentBack {
            line: 6,
            cpu: 0,
            previous: "0.001000".into(),
            now: "0.000500".into()
        }]
    );
    // Going back across CPUs is fine (CPU 1 at 0.0015, then CPU 0 at 0.0012), and so is
    // the same time written differently.
    assert!(check(&with_line(5, &switch(0, "0.0012", ("a", 1), ("swapper/0", 0))), 2).is_ok());
    assert!(check(&with_line(5, &switch(0, "00.001", ("a", 1), ("swapper/0", 0))), 2).is_ok());
}

#[test]
fn timestamps_compare_exactly() {
    let t = Timestamp::new;
    assert!(t("0.5") < t("0.51"));
    assert!(t("0.05") < t("0.5"));
    assert!(t("9.999999") < t("10.0"));
    assert!(t("100000000000000000000000.000001") > t("99999999999999999999999.999999"));
    assert!(t("000012.500") == t("12.5"));
    assert!(t("1.0") == t("1.000000"));
    assert!(t("0.000000") < t("0.000001"));
}

#[test]
fn a_sched_switch_missing_a_field_is_reported() {
    let line = switch(1, "0.001000", ("swapper/1", 0), ("b", 2));
    let cut = line.replace(" next_prio=120", "").replace("prev_state=R ", "");
    // CPU 1's other switch is fine, so there is no CPU shortage.
    let p = problems(&with_line(3, &cut), 2);
    assert_eq!(p, [TraceProblem::SwitchMissingFields { line: 4, missing: vec!["prev_state", "next_prio"] }]);
    // Without the separator the fields are still all there.
    assert!(check(&with_line(3, &line.replace(" ==> ", " ")), 2).is_ok());
    assert!(check(&with_line(3, &line.replace(" ==> ", "==>")), 2).is_ok());
}

#[test]
fn a_comm_with_a_space_or_equals_sign_is_reported() {
    let line = switch(0, "0.002000", ("a", 1), ("swapper/0", 0));
    let p = problems(&with_line(5, &line.replace("prev_comm=a", "prev_comm=a b")), 2);
    assert_eq!(p, [TraceProblem::BadSwitchArgument { line: 6, arg: "b".into() }]);
    let p = problems(&with_line(5, &line.replace("next_comm=swapper/0", "next_comm=x=y")), 2);
    assert_eq!(p, [TraceProblem::BadSwitchArgument { line: 6, arg: "next_comm=x=y".into() }]);
}

#[test]
fn a_non_integer_pid_or_prio_is_reported() {
    let line = switch(0, "0.002000", ("a", 1), ("swapper/0", 0));
    let p = problems(&with_line(5, &line.replace("prev_pid=1", "prev_pid=x1")), 2);
    assert_eq!(p, [TraceProblem::NotAnInteger { line: 6, field: "prev_pid", value: "x1".into() }]);
    let p = problems(&with_line(5, &line.replace("next_prio=120", "next_prio=12.0")), 2);
    assert_eq!(p, [TraceProblem::NotAnInteger { line: 6, field: "next_prio", value: "12.0".into() }]);
    // Negative numbers are integers.
    assert!(check(&with_line(5, &line.replace("prev_prio=120", "prev_prio=-1")), 2).is_ok());
}

#[test]
fn too_few_cpus_are_reported() {
    assert_eq!(problems(&doc(&good_lines()), 3), [TraceProblem::TooFewCpus { seen: 2, want: 3 }]);
    // A CPU whose only switches are malformed does not count.
    let mut lines = good_lines();
    lines[3] = lines[3].replace("next_pid=2", "next_pid=two");
    lines[7] = lines[7].replace("prev_pid=2", "prev_pid=two");
    let p = problems(&doc(&lines), 2);
    assert_eq!(p.len(), 3);
    assert_eq!(p[2], TraceProblem::TooFewCpus { seen: 1, want: 2 });
}

#[test]
fn every_problem_is_reported_and_the_verdict_is_one_line() {
    let mut lines = good_lines();
    lines[1] = "garbage".into();
    lines[5] = switch(0, "0.000100", ("a", 1), ("swapper/0", 0));
    let mut v = doc(&lines);
    v["displayTimeUnit"] = json!("s");
    v["extra"] = json!(1);
    let p = problems(&v, 4);
    assert_eq!(p.len(), 5, "{p:?}");
    assert!(matches!(p[0], TraceProblem::UnknownTopLevelKeys(_)));
    assert!(matches!(p[1], TraceProblem::BadDisplayTimeUnit(_)));
    assert!(matches!(p[2], TraceProblem::Untokenizable { line: 2, .. }));
    assert!(matches!(p[3], TraceProblem::TimestampWentBack { line: 6, cpu: 0, .. }));
    assert_eq!(p[4], TraceProblem::TooFewCpus { seen: 2, want: 4 });
    let v = verdict(&Err(p));
    assert!(v.starts_with("FAIL: 5 problems: unknown top-level keys"), "{v}");
    assert!(v.ends_with("; and 2 more"), "{v}");
    assert!(!v.contains('\n'));
}
