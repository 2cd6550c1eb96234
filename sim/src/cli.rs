//! Command-line parsing shared by the project's commands (`cargo xsim` here, and the
//! runner's `cargo xtest`, `xrun`, `xsize`, `xboot`): clap's parsers, with `--help` printing
//! the usage and exiting 0 before anything runs, and a bad argument refused in one line.

use clap::error::ErrorKind;
use clap::Parser;

/// Exit code of a refused command line (distinct from a failed run's 1).
pub const USAGE_EXIT: u8 = 2;

/// Parses `args` (without the program name) as `T`, for the command `name`. `Err` carries
/// the process's exit code, to exit with at once: 0 after `--help` printed the usage, [`USAGE_EXIT`] after a
/// refusal printed as one line, `name: <what is wrong>`.
///
/// ```
/// use clap::Parser;
/// #[derive(Parser)]
/// struct Args {
///     /// How many.
///     #[arg(long, default_value_t = 3)]
///     count: u32,
/// }
/// let a: Args = sched_sim::cli::parse("demo", &["--count".into(), "5".into()]).ok().unwrap();
/// assert_eq!(a.count, 5);
/// assert!(sched_sim::cli::parse::<Args>("demo", &["--cuont".into()]).is_err());
/// ```
pub fn parse<T: Parser>(name: &str, args: &[String]) -> Result<T, u8> {
    match T::try_parse_from(std::iter::once(name.to_string()).chain(args.iter().cloned())) {
        Ok(t) => Ok(t),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            Err(0)
        }
        Err(e) => {
            eprintln!("{name}: {}", refusal(&e.to_string()));
            Err(USAGE_EXIT)
        }
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
        assert_eq!(parse::<Demo>("demo", &args("--n 4")).unwrap().n, 4);
        assert_eq!(parse::<Demo>("demo", &args("--help")).unwrap_err(), 0);
        assert_eq!(parse::<Demo>("demo", &args("--nope")).unwrap_err(), USAGE_EXIT);
        let e = Demo::try_parse_from(["demo", "--nope"]).unwrap_err().to_string();
        assert_eq!(refusal(&e), "unexpected argument '--nope' found");
    }
}
