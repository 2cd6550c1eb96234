//! Command-line parsing shared by the project's commands (`cargo xsim` here, and the
//! runner's `cargo xtest`, `xrun`, `xsize`, `xboot`): clap's parsers, with `--help` printing
//! the usage and exiting 0 before anything runs, and a bad argument refused in one line.

use std::ffi::{OsStr, OsString};
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use clap::error::ErrorKind;
use clap::Parser;

/// Exit code of a refused command line (distinct from a failed run's 1).
pub const USAGE_EXIT: u8 = 2;

/// Exit code when a file the command was given cannot be read (missing, a directory, no
/// permission): sysexits' `EX_NOINPUT`.
pub const INPUT_EXIT: u8 = 66;

/// Exit code when the command's own output cannot be written (a full disk, a pipe whose
/// reader has gone): sysexits' `EX_IOERR`.
pub const OUTPUT_EXIT: u8 = 74;

/// Whether the command's output was lost (see [`run_guarded`]).
static OUTPUT_LOST: AtomicBool = AtomicBool::new(false);

/// Runs the command `name`'s `body` so that a failed write to its stdout or stderr ends it
/// with one line on stderr (when stderr still takes one) and [`OUTPUT_EXIT`], instead of a
/// panic's report and exit 101. `print!` and `eprint!` panic on such a failure: a panic hook
/// recognises their message and says the one line, the panic unwinds as any other (threads
/// are joined, files and child processes dropped), and the exit code is decided here. A panic
/// that follows from the lost output (a thread joined with its panic) is not reported; every
/// other panic is, as before.
///
/// ```no_run
/// use std::process::ExitCode;
/// fn main() -> ExitCode {
///     sched_sim::cli::run_guarded("demo", || {
///         println!("results");
///         ExitCode::SUCCESS
///     })
/// }
/// ```
pub fn run_guarded(name: &'static str, body: impl FnOnce() -> ExitCode) -> ExitCode {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| match info.payload_as_str() {
        Some(m) if m.starts_with("failed printing to std") => {
            if !OUTPUT_LOST.swap(true, Relaxed) {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "{name}: cannot write its output: {}",
                    sched_workload::one_line(m)
                );
            }
        }
        _ if OUTPUT_LOST.load(Relaxed) => {}
        _ => report(info),
    }));
    match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(code) => code,
        Err(_) if OUTPUT_LOST.load(Relaxed) => ExitCode::from(OUTPUT_EXIT),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Parses `args` (without the program name; as the system gave them, so a path need not be
/// UTF-8) as `T`, for the command `name`. `Err` carries the process's exit code, to exit with
/// at once: 0 after `--help` printed the usage, [`USAGE_EXIT`] after a refusal printed as one
/// line, `name: <what is wrong>`.
///
/// ```
/// use clap::Parser;
/// #[derive(Parser)]
/// struct Args {
///     /// How many.
///     #[arg(long, default_value_t = 3)]
///     count: u32,
/// }
/// let a: Args = sched_sim::cli::parse("demo", &["--count", "5"]).ok().unwrap();
/// assert_eq!(a.count, 5);
/// let (code, line) = sched_sim::cli::outcome::<Args>("demo", &["--cuont"]).err().unwrap();
/// assert_eq!((code, line.as_str()), (2, "demo: unexpected argument '--cuont' found"));
/// ```
pub fn parse<T: Parser>(name: &str, args: &[impl AsRef<OsStr>]) -> Result<T, u8> {
    outcome(name, args).map_err(|(code, text)| {
        if code == 0 {
            print!("{text}");
        } else {
            eprintln!("{text}");
        }
        code
    })
}

/// What [`parse`] does, without printing: the arguments, or the exit code with what to print
/// (the usage on stdout for code 0, the refusal on stderr otherwise).
pub fn outcome<T: Parser>(name: &str, args: &[impl AsRef<OsStr>]) -> Result<T, (u8, String)> {
    let all = std::iter::once(OsString::from(name)).chain(args.iter().map(|a| a.as_ref().to_owned()));
    match T::try_parse_from(all) {
        Ok(t) => Ok(t),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            Err((0, e.to_string()))
        }
        Err(e) => Err((USAGE_EXIT, format!("{name}: {}", refusal(&e.to_string())))),
    }
}

/// What clap's error message says is wrong, as one line: its first line without the
/// `error: ` prefix, and the indented lines right under it (the missing arguments, the
/// possible values), without the usage and the tips after them; a value it quotes goes
/// through [`sched_workload::one_line`] (escaped, and cut if it is long).
fn refusal(message: &str) -> String {
    let mut lines = message.lines();
    let first = lines.next().unwrap_or("bad arguments");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).trim_end().to_string();
    for more in lines.take_while(|l| l.starts_with(char::is_whitespace) && !l.trim().is_empty()) {
        line.push(' ');
        line.push_str(more.trim());
    }
    sched_workload::one_line(&line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser, Debug)]
    #[command(name = "demo")]
    struct Demo {
        /// A count.
        #[arg(long, default_value_t = 1)]
        n: u32,
    }

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn help_exits_zero_and_a_bad_option_is_one_line_naming_it() {
        assert_eq!(outcome::<Demo>("demo", &args("--n 4")).unwrap().n, 4);
        let (code, usage) = outcome::<Demo>("demo", &args("--help")).unwrap_err();
        assert_eq!(code, 0);
        assert!(usage.contains("Usage: demo [OPTIONS]") && usage.contains("[default: 1]"), "{usage}");
        let refused = outcome::<Demo>("demo", &args("--nope")).unwrap_err();
        assert_eq!(refused, (USAGE_EXIT, "demo: unexpected argument '--nope' found".to_string()));
    }

    #[derive(Parser, Debug)]
    #[command(name = "demo")]
    struct Needs {
        /// Required.
        #[arg(long)]
        a: u32,
        /// Required too.
        #[arg(long)]
        b: u32,
        /// One of two.
        #[arg(long, value_enum, default_value_t = Side::Left)]
        side: Side,
    }

    #[derive(clap::ValueEnum, Clone, Debug)]
    enum Side {
        Left,
        Right,
    }

    #[test]
    fn a_refusal_names_what_is_missing_and_what_is_allowed() {
        let (code, line) = outcome::<Needs>("demo", &args("--a 1")).unwrap_err();
        assert_eq!(
            (code, line.as_str()),
            (USAGE_EXIT, "demo: the following required arguments were not provided: --b <B>")
        );
        let (_, line) = outcome::<Needs>("demo", &args("--a 1 --b 2 --side up")).unwrap_err();
        assert_eq!(line, "demo: invalid value 'up' for '--side <SIDE>' [possible values: left, right]");
    }
}
