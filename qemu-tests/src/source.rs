//! The kernel's constants, read from its source text: the kernel is a bare-metal crate and
//! cannot be a dependency of this host crate, so the runner's figures that must match it (its
//! limits, stack sizes, the READMEs' numbers) are checked against the text.

/// The value of the `nth` (0-based) definition `const NAME: T = VALUE;` (`pub` or not) in
/// Rust source, as written; machines that differ define a constant more than once under `cfg`
/// (the 8-CPU build first, then the wide one, then the microcontrollers').
pub fn rust_const_nth<'a>(src: &'a str, name: &str, nth: usize) -> Option<&'a str> {
    let decl = format!("const {name}:");
    let line = src
        .lines()
        .map(str::trim_start)
        .filter(|l| l.strip_prefix("pub ").unwrap_or(l).starts_with(&decl))
        .nth(nth)?;
    let (_, value) = line.split_once('=')?;
    Some(value.trim().trim_end_matches(';').trim())
}

/// A numeric value as the kernel writes them: an integer literal (with `_`s) or a product of
/// them (`16 * 1024`).
pub fn number(value: &str) -> Option<u64> {
    value.split('*').map(|f| f.trim().replace('_', "").parse::<u64>().ok()).product()
}

/// The `nth` definition of numeric constant `name` in `src`; panics (naming it) if there is
/// none or it is not a number: a check that reads the kernel must not pass on a misread.
pub fn const_u64(src: &str, name: &str, nth: usize) -> u64 {
    let value =
        rust_const_nth(src, name, nth).unwrap_or_else(|| panic!("no definition {nth} of `const {name}`"));
    number(value).unwrap_or_else(|| panic!("`const {name}` = {value} is not a number"))
}
