//! `cargo xsim` refuses what it cannot run in one line and a distinct exit code, before any
//! simulation starts: CPU counts, task counts, a workload too large for the machine, `--out`
//! where nothing is written.

use std::process::Command;

/// Runs the `cargo xsim` binary with `args`: (exit code, stdout, stderr).
fn xsim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sched-sim")).args(args).output().expect("run sched-sim");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts a refusal: `code`, nothing on stdout, one line on stderr containing `says`.
fn refused(args: &[&str], code: i32, says: &str) {
    let (got, stdout, stderr) = xsim(args);
    assert_eq!(got, Some(code), "{args:?}: {stderr}");
    assert!(stdout.is_empty(), "{args:?} printed {stdout:?}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr:?}");
    assert!(stderr.contains(says), "{args:?}: {stderr:?} does not say {says:?}");
}

#[test]
fn spread_refuses_cpu_counts_it_cannot_build() {
    refused(&["spread", "--cpu-counts", "8,2000"], 2, "--cpu-counts 2000: must be 1..=1024");
    refused(&["spread", "--cpu-counts", "0"], 2, "--cpu-counts 0");
    refused(&["spread", "--cpu-counts", "6"], 2, "4 does not divide the 6 CPUs");
    refused(&["spread", "--topology", "nodes:16", "--cpu-counts", "8"], 2, "16 nodes do not divide the 8");
}

/// `spread` runs the CPU counts it is given: `--cpus` (8 unless given), which it does not
/// use, is not held to a topology that only its counts fit.
#[test]
fn spread_checks_its_own_cpu_counts_only() {
    let (code, stdout, stderr) =
        xsim(&["spread", "--topology", "nodes:16", "--cpu-counts", "16", "--iterations", "1"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.lines().any(|l| l.trim_start().starts_with("16 ")), "{stdout}");
}

#[test]
fn a_topology_is_spelled_exactly_and_fits_the_cpus() {
    refused(&["sysbench", "--topology", "biglittle:abc"], 2, "--topology biglittle:abc: not one of");
    refused(&["sysbench", "--topology", "flat:2"], 2, "--topology flat:2: not one of");
    refused(&["sysbench", "--cpus", "3", "--topology", "biglittle"], 2, "3 CPUs do not split");
}

#[test]
fn experiments_without_pictures_refuse_out() {
    let dir = std::env::temp_dir().join("xsim-cli-no-pictures");
    let dir = dir.to_str().expect("a UTF-8 temporary folder");
    refused(&["spread", "--out", dir], 2, "spread writes no pictures");
    refused(&["groups", "--out", dir], 2, "groups writes no pictures");
}

#[test]
fn the_latency_workload_refuses_more_tasks_than_the_machine_holds() {
    // 8 CPUs of 64 runnable tasks each.
    refused(
        &["ab", "--workload", "latency", "--a", "", "--b", "EEVDF", "--spinners", "505", "--periodic", "8"],
        2,
        "at most 512 tasks in all on 8 CPUs",
    );
}

#[test]
fn a_workload_file_larger_than_the_machine_is_too_large() {
    let path = std::env::temp_dir().join(format!("xsim-cli-{}.json", std::process::id()));
    let json = r#"{ "global": { "duration": 1, "calibration": 100 },
                    "tasks": { "many": { "instance": 600, "loop": 1, "run": 1000 } } }"#;
    std::fs::write(&path, json).expect("write the workload");
    let p = path.to_str().expect("a UTF-8 temporary path");
    // 600 threads: more than 8 CPUs hold (exit 13, rt-app's "too large"), fewer than 16 do.
    // (63 a CPU: one slot of each is kept for a thread on its way between two of them.)
    refused(
        &["--workload", p, "--iterations", "1"],
        13,
        "600 threads, the simulator runs at most 504 on 8 CPUs (63 per CPU, 2048 in all)",
    );
    let (code, _, stderr) = xsim(&["--workload", p, "--iterations", "1", "--cpus", "16"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_workload_file_whose_masks_the_machine_cannot_hold_is_refused() {
    let file = |name: &str, json: &str| {
        let path = std::env::temp_dir().join(format!("xsim-cli-{}-{name}.json", std::process::id()));
        std::fs::write(&path, json).expect("write the workload");
        path
    };
    // 65 threads pinned to CPU 0, whose runqueue holds 64: too large (13).
    let pinned = file(
        "pinned",
        r#"{ "global": { "duration": 1, "calibration": 100 },
             "tasks": { "t": { "instance": 65, "loop": 1, "run": 1000, "cpus": [0] } } }"#,
    );
    // 64 threads pinned to CPU 0 beside 64 free ones, which placement may put there too:
    // CPU 0 could fill before every pinned thread has its slot (13).
    let beside = file(
        "beside",
        r#"{ "global": { "duration": 1, "calibration": 100 },
             "tasks": { "free": { "instance": 64, "loop": -1, "run": 1000 },
                        "pinned": { "instance": 64, "loop": -1, "run": 1000, "cpus": [0] } } }"#,
    );
    // 127 threads on CPUs 0 and 1, which hold 126 with a slot kept for a push between them.
    let pair = file(
        "pair",
        r#"{ "global": { "duration": 1, "calibration": 100 },
             "tasks": { "t": { "instance": 127, "loop": 1, "run": 1000, "cpus": [0, 1] } } }"#,
    );
    // A mask naming CPU 12 of an 8-CPU machine (besides CPU 0): cannot run (14), as rt-app
    // refuses a CPU the machine lacks; also in a phase.
    let absent = file(
        "absent",
        r#"{ "global": { "duration": 1, "calibration": 100 },
             "tasks": { "t": { "loop": 1, "run": 1000, "cpus": [0, 12] } } }"#,
    );
    let phase = file(
        "phase",
        r#"{ "global": { "duration": 1, "calibration": 100 },
             "tasks": { "t": { "loop": 1, "phases": {
                 "a": { "run": 1000 }, "b": { "run": 1000, "cpus": [9] } } } } }"#,
    );
    let arg = |p: &std::path::Path| p.to_str().expect("a UTF-8 temporary path").to_string();
    let (pinned_s, absent_s, phase_s) = (arg(&pinned), arg(&absent), arg(&phase));
    refused(
        &["--workload", &pinned_s, "--iterations", "1"],
        13,
        "task t: 65 threads may run on the CPUs of its mask 0x1, which hold 64",
    );
    refused(
        &["--workload", &arg(&pair), "--iterations", "1"],
        13,
        "task t: 127 threads may run on the CPUs of its mask 0x3, which hold 126",
    );
    refused(
        &["--workload", &arg(&beside), "--iterations", "1"],
        13,
        "task pinned: 128 threads may run on the CPUs of its mask 0x1, which hold 64",
    );
    refused(&["--workload", &absent_s, "--iterations", "1"], 14, "names CPU 12, past the machine's 8 CPUs");
    refused(&["--workload", &phase_s, "--iterations", "1"], 14, "names CPU 9, past the machine's 8 CPUs");
    // The same files fit a machine that has the CPUs (16 CPUs: CPU 12 and 9 exist).
    for p in [&absent_s, &phase_s] {
        let (code, _, stderr) = xsim(&["--workload", p, "--iterations", "1", "--cpus", "16"]);
        assert_eq!(code, Some(0), "{p}: {stderr}");
    }
    for p in [pinned, pair, beside, absent, phase] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn no_subcommand_names_every_one() {
    refused(&[], 2, "give a subcommand (sysbench, spread, groups, ab) or --workload FILE");
}

/// The sysbench model's creation and set-up times are bounded as the kernel's are: a longer
/// one made a workload the lowering refused, and the simulator panicked.
#[test]
fn model_times_beyond_their_bound_are_refused() {
    refused(&["sysbench", "--create-us", "100001"], 2, "--create-us 100001: must be 0..=100000");
    refused(&["sysbench", "--setup-us", "10000001"], 2, "--setup-us 10000001: must be 0..=100000");
}

#[test]
fn rates_iterations_and_latency_times_out_of_range_are_refused() {
    refused(&["sysbench", "--hz", "2000000"], 2, "'--hz <HZ>': 2000000 is not in 1..=1000000");
    // (0 is no rate: the core would take its default and the header would say HZ=0.)
    refused(&["sysbench", "--hz", "0"], 2, "'--hz <HZ>': 0 is not in 1..=1000000");
    refused(&["sysbench", "--iterations", "0"], 2, "--iterations 0: must be 1..=10000");
    refused(&["spread", "--iterations", "0"], 2, "--iterations 0: must be 1..=10000");
    refused(&["sysbench", "--iterations", "18446744073709551615"], 2, "must be 1..=10000");
    let latency = ["ab", "--workload", "latency", "--a", "", "--b", "EEVDF"];
    for (flag, v, says) in [
        ("--duration-ms", "18446744073710", "--duration-ms 18446744073710: must be 1..=60000"),
        ("--sleep-us", "18446744073709552", "--sleep-us 18446744073709552: must be 1..=1000000"),
        ("--run-us", "0", "--run-us 0: must be 1..=100000"),
    ] {
        let args: Vec<&str> = latency.iter().copied().chain([flag, v]).collect();
        refused(&args, 2, says);
    }
}

#[test]
fn an_out_folder_that_cannot_be_made_is_refused_before_running() {
    // A folder below a file cannot be created.
    let file = std::env::temp_dir().join(format!("xsim-cli-{}-file", std::process::id()));
    std::fs::write(&file, "").expect("write a file");
    let dir = file.join("pictures");
    refused(&["sysbench", "--out", dir.to_str().expect("a UTF-8 temporary path")], 2, "cannot create it");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn a_workload_file_that_is_not_utf8_is_refused_as_not_json() {
    let path = std::env::temp_dir().join(format!("xsim-cli-{}-bytes.json", std::process::id()));
    std::fs::write(&path, b"{ \"global\": \xff }").expect("write the workload");
    let p = path.to_str().expect("a UTF-8 temporary path").to_string();
    refused(&["--workload", &p], 10, "line 1 column 13: not valid JSON: not UTF-8 text");
    let _ = std::fs::remove_file(&path);
}

/// A path that is not UTF-8 reaches the file system as given (here: a file that is not there).
#[cfg(unix)]
#[test]
fn a_path_that_is_not_utf8_is_taken_as_given() {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::OsStr::from_bytes(b"/nonexistent/\xff.json");
    let out = Command::new(env!("CARGO_BIN_EXE_sched-sim"))
        .arg("--workload")
        .arg(name)
        .output()
        .expect("run sched-sim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(66), "{stderr}");
    assert!(stderr.starts_with("xsim: cannot read /nonexistent/"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// Clusters as large as the machine or larger are one cluster of all its CPUs, as the table's
/// description says (the default `clusters:4` on fewer than 4 CPUs).
#[test]
fn clusters_larger_than_the_machine_run_as_one() {
    let (code, stdout, stderr) =
        xsim(&["sysbench", "--cpus", "2", "--threads", "2", "--events", "20", "--iterations", "1"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("2 CPUs"), "{stdout}");
    let (code, _, stderr) = xsim(&[
        "sysbench",
        "--cpus",
        "8",
        "--topology",
        "numa:8",
        "--threads",
        "2",
        "--events",
        "20",
        "--iterations",
        "1",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
}

/// Names from a workload file and values from the command line are quoted with their control
/// characters escaped: a refusal stays one line, and a file cannot print a line of its own.
#[test]
fn refusals_quoting_input_stay_one_line() {
    let path = std::env::temp_dir().join(format!("xsim-cli-{}-lines.json", std::process::id()));
    let p = path.to_str().expect("a UTF-8 temporary path").to_string();
    for (json, code, says) in [
        (r#"{"glo\nbal": 1}"#, 11, r"glo\nbal"),
        (
            r#"{"global": {"calibration": 100}, "tasks": {"a\nb": {"loop": 1, "run": 1}}}"#,
            12,
            r"tasks.a\nb: a task's name holds no control character",
        ),
        (
            r#"{"global": {"calibration": 100}, "tasks": {"t": {"phases": {"p\nq": {"spin": 1}}}}}"#,
            11,
            r"p\nq",
        ),
        (
            r#"{"global": {"calibration": 100}, "tasks": {"": {"loop": 1, "run": 1}}}"#,
            12,
            "name is not empty",
        ),
    ] {
        std::fs::write(&path, json).expect("write the workload");
        refused(&["--workload", &p, "--cpus", "2", "--topology", "flat"], code, says);
    }
    let _ = std::fs::remove_file(&path);
    refused(&["sysbench", "--topology", "flat\nxsim: ok"], 2, r"flat\nxsim: ok");
}

/// A run to its end that reaches the simulator's bound of simulated time prints its table,
/// then says in one line that it was cut, and ends as a failed run.
#[test]
fn a_run_cut_at_the_bound_says_so_and_fails() {
    let (code, stdout, stderr) =
        xsim(&["sysbench", "--events", "1000", "--event-us", "10000000", "--iterations", "1"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stdout.contains("every event done exactly once: false"), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(stderr.contains("2 of 2 runs reached a bound (600 s of simulated time"), "{stderr:?}");
    // A run that ends in time is not cut.
    let (code, _, stderr) = xsim(&["sysbench", "--iterations", "1"]);
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
}

/// Output that cannot be written (here a full disk) ends the command with one line on stderr
/// and its own exit code, not a panic's report.
#[cfg(target_os = "linux")]
#[test]
fn output_that_cannot_be_written_is_one_line_and_exit_74() {
    for args in [&["--help"][..], &["sysbench", "--iterations", "1", "--events", "50"][..]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
        let out =
            Command::new(env!("CARGO_BIN_EXE_sched-sim")).args(args).stdout(full).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{args:?}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("xsim: cannot write its output: failed printing to stdout"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// A workload file that cannot be read has its own exit code, apart from a bad command line.
#[test]
fn a_file_that_cannot_be_read_is_exit_66() {
    let dir = std::env::temp_dir();
    let (code, stdout, stderr) = xsim(&["--workload", dir.to_str().expect("a UTF-8 temp dir")]);
    assert_eq!(code, Some(66), "{stderr}");
    assert!(stdout.is_empty() && stderr.lines().count() == 1, "{stderr}");
    assert!(stderr.starts_with("xsim: cannot read "), "{stderr}");
}

/// A side's feature list is read once: an unknown name or a switch named twice (which would
/// leave the last word to decide) is refused in one line.
#[test]
fn a_feature_list_names_each_switch_once() {
    refused(&["ab", "--a", "EEVDF,NO_EEVDF", "--b", ""], 2, "a feature switch named twice (as X or NO_X)");
    refused(&["ab", "--a", "", "--b", "NO_SUCH"], 2, "unknown feature in \"NO_SUCH\"");
}

/// An A/B runs one workload: an option of the other one, given another value than its
/// default, is refused in one line rather than ignored.
#[test]
fn an_option_of_the_workload_not_run_is_refused() {
    refused(
        &["ab", "--a", "", "--b", "EEVDF", "--spinners", "5"],
        2,
        "--spinners is an option of --workload latency; this A/B runs sysbench",
    );
    refused(
        &["ab", "--a", "", "--b", "EEVDF", "--workload", "latency", "--threads", "4"],
        2,
        "--threads is an option of --workload sysbench; this A/B runs latency",
    );
    refused(
        &["ab", "--a", "", "--b", "EEVDF", "--workload", "latency", "--create-us", "5000"],
        2,
        "--create-us is an option of --workload sysbench; this A/B runs latency",
    );
}
