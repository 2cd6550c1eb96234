//! Command-line parsing shared by the project's commands (`cargo xsim` here, and the
//! runner's `cargo xtest`, `xrun`, `xsize`, `xboot`): clap's parsers, with `--help` printing
//! the usage and exiting 0 before anything runs, and a bad argument refused in one line.

use std::ffi::{OsStr, OsString};

use clap::error::ErrorKind;
use clap::Parser;

/// Exit code of a refused command line (distinct from a failed run's 1).
pub const USAGE_EXIT: u8 = 2;

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

/// The one line of clap's error message that says what is wrong (its first), without the
/// `error: ` prefix.
fn refusal(message: &str) -> &str {
    let first = message.lines().next().unwrap_or("bad arguments");
    first.strip_prefix("error: ").unwrap_or(first)
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
}
