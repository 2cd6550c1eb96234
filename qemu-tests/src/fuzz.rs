//! Boot-line fuzzing: malformed kernel command lines — junk words, keys with values out of
//! range or of the wrong kind, invalid UTF-8, control bytes, very long words — each of which
//! the kernel must refuse by itself with exit 3 and one clear error line, never a panic (101),
//! a watchdog exit (5), a hang or a run (exit 0). The fixed list also holds the two lines it
//! must accept (exit 0, the short default scenario, no error line): the empty line and an
//! empty `features=` list.
//!
//! The lines are a fixed list of known-hard cases plus seeded random ones, so a run is
//! reproducible; `FUZZ_LINES` and `FUZZ_SEED` choose more or other random lines.

use sched_sim::rng::Rng;

/// The keys the kernel's parser knows, for words that are nearly right: all of them but
/// `watchdog`, which could end a run with the watchdog's exit (5) that no fuzz line may. (The kernel is a bare-metal crate this
/// host crate cannot depend on; a test holds this list to the kernel's own.)
const KEYS: &[&str] = &[
    "scenario",
    "threads",
    "events",
    "maxprime",
    "cpu",
    "hz",
    "pairs",
    "rounds",
    "seed",
    "clusters",
    "capacity",
    "slice_us",
    "entry_race",
    "spinners",
    "periodic",
    "run_us",
    "sleep_us",
    "short_slice_us",
    "duration_ms",
    "policy",
    "create_us",
    "setup_us",
    "nice",
    "ops",
    "fault",
    "trace",
    "barrier",
    "nohz",
    "idle_yield",
    "skew",
    "features",
];

/// Values that no key accepts, or that are out of every key's range.
const BAD_VALUES: &[&str] = &[
    "",
    "-1",
    "abc",
    "1.5",
    "0x10",
    "99999999999999999999",
    "4294967296",
    "on=off",
    "=",
    " ",
    "nosuch",
    "3x",
];

/// Whether the kernel must accept a line (exit 0) or refuse it (exit 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Runs the default scenario: exit 0, no error line.
    Accepted,
    /// Exit 3 with one error line.
    Refused,
}

/// Known-hard lines, each a regression case, with how each must end: every one is refused but
/// the empty line and an empty `features=` list (the defaults). Invalid UTF-8 must be refused,
/// not read as an empty line; `clusters=3` on 8 CPUs must be refused, not leave 2 CPUs out;
/// a key the boot scenario does not read (`seed`, `threads`, `cpu`) is refused, not ignored.
pub fn fixed_lines() -> Vec<(Vec<u8>, Verdict)> {
    let accepted = ["", "features=,,"];
    let mut v: Vec<(Vec<u8>, Verdict)> =
        accepted.iter().map(|s| (s.as_bytes().to_vec(), Verdict::Accepted)).collect();
    let refused: Vec<Vec<u8>> = [
        "=",
        "scenario",
        "scenario=",
        "=boot",
        "scenario=nosuch",
        "threads=abc",
        "threads=-1",
        "threads=99999999999999999999",
        "events=0",
        "hz=251",
        "nohz=maybe",
        "features=nosuch",
        "features=EEVDF,EEVDF",
        "clusters=3",
        "clusters=5",
        "capacity=446*4,1024*3",
        "capacity=1025",
        "capacity=512*0",
        "capacity=1*65",
        "capacity=,",
        "slice_us=10001",
        "entry_race=maybe",
        "scenario=latency short_slice_us=50",
        "scenario=latency policy=sometimes",
        "scenario=sysbench threads=0",
        "threads==8",
        "threads=8=8",
        "scenario=boot\tthreads=2x",
        "cpu=8",
        "fault=stack scenario=nosuch",
        "scenario=boot threads=8",
        "seed=1",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .chain([
        b"scenario=panic \xc3\x28".to_vec(),
        b"\xff\xfe".to_vec(),
        b"scenario=boot \x80".to_vec(),
        b"\x01\x02 scenario=boot".to_vec(),
        vec![b'a'; 2000],
        "x=1 ".repeat(300).into_bytes(),
    ])
    .collect();
    v.extend(refused.into_iter().map(|l| (l, Verdict::Refused)));
    v
}

/// Uniform in `0..n`, from the simulator's seeded generator (SplitMix64), so runs repeat.
fn pick(rng: &mut Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

/// `n` random malformed lines from `seed`. Every line has at least one word the parser must
/// refuse (each is [`Verdict::Refused`]), so none selects a scenario that ends by design with
/// a panic or a watchdog exit.
pub fn random_lines(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let words = 1 + pick(&mut rng, 5);
            let bad_at = pick(&mut rng, words);
            let mut line = Vec::new();
            for w in 0..words {
                if w > 0 {
                    line.push(b' ');
                }
                let word: Vec<u8> = if w == bad_at { bad_word(&mut rng) } else { harmless_word(&mut rng) };
                line.extend(word);
            }
            line
        })
        .collect()
}

/// A word the parser must refuse.
fn bad_word(rng: &mut Rng) -> Vec<u8> {
    match pick(rng, 4) {
        0 => {
            let (key, value) = (KEYS[pick(rng, KEYS.len())], BAD_VALUES[pick(rng, BAD_VALUES.len())]);
            // (An empty features list is the defaults, which the kernel takes.)
            let value = if key == "features" && value.trim().is_empty() { "nosuch" } else { value };
            format!("{key}={value}").into_bytes()
        }
        1 => format!("no_such_key{}={}", pick(rng, 100), pick(rng, 1000)).into_bytes(),
        2 => KEYS[pick(rng, KEYS.len())].as_bytes().to_vec(),
        // Random bytes, non-ASCII included (mostly invalid UTF-8); no spaces or NULs, so
        // the word stays one word.
        _ => (0..1 + pick(rng, 12)).map(|_| [0x80u8, 0xC3, 0xFF, b'=', b'a', 0x01][pick(rng, 6)]).collect(),
    }
}

/// A word the parser accepts and that keeps the run short: the default scenario stays `boot`.
fn harmless_word(rng: &mut Rng) -> Vec<u8> {
    let w = match pick(rng, 6) {
        0 => "scenario=boot".to_string(),
        1 => format!("hz={}", [100, 250, 300, 1000][pick(rng, 4)]),
        2 => format!("idle_yield={}", ["on", "off"][pick(rng, 2)]),
        3 => format!("trace={}", ["on", "off"][pick(rng, 2)]),
        4 => format!("skew={}", ["on", "off"][pick(rng, 2)]),
        _ => format!("nohz={}", ["on", "off"][pick(rng, 2)]),
    };
    w.into_bytes()
}

/// A line as readable text: bytes outside printable ASCII as `\xNN`.
pub fn show(line: &[u8]) -> String {
    let mut s = String::new();
    for &b in line.iter().take(120) {
        if (0x20..0x7f).contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    if line.len() > 120 {
        s.push_str(&format!("... ({} bytes)", line.len()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_lines_are_reproducible_and_malformed() {
        let a = random_lines(7, 200);
        assert_eq!(a, random_lines(7, 200));
        assert_ne!(a, random_lines(8, 200));
        assert!(a.iter().any(|l| std::str::from_utf8(l).is_err()), "invalid UTF-8 occurs");
        assert!(a.iter().all(|l| !l.is_empty() && !l.contains(&0)));
        // None names a scenario that ends by design with a panic, a fault or a hang, and none
        // gives an empty features list (the defaults, which the kernel takes).
        for l in &a {
            let text = String::from_utf8_lossy(l);
            assert!(!text.split(' ').any(|w| w == "features="), "{text}");
            for bad in ["scenario=panic", "scenario=fault", "scenario=hang", "watchdog="] {
                assert!(!text.contains(bad), "{text}");
            }
        }
    }

    /// The fuzz knows every key the kernel's parser does (as its unknown-key message lists
    /// them), `watchdog` aside, and no other.
    #[test]
    fn keys_are_the_kernels() {
        const BOOTLINE: &str = include_str!("../../kernel-shim/src/scenario/bootline.rs");
        let start = BOOTLINE.find("unknown key (known: ").expect("the kernel's unknown-key message");
        let list = &BOOTLINE[start + "unknown key (known: ".len()..];
        let list = &list[..list.find(')').expect("the list's end")];
        let mut kernel: Vec<&str> = list.split_whitespace().filter(|k| *k != "watchdog").collect();
        let mut ours = KEYS.to_vec();
        kernel.sort_unstable();
        ours.sort_unstable();
        assert_eq!(ours, kernel);
    }

    #[test]
    fn fixed_lines_cover_the_known_cases() {
        let f = fixed_lines();
        assert!(f.contains(&(b"clusters=3".to_vec(), Verdict::Refused)));
        assert!(f.contains(&(b"seed=1".to_vec(), Verdict::Refused)), "boot reads no seed");
        assert!(f.iter().any(|(l, v)| l.ends_with(b"\xc3\x28") && *v == Verdict::Refused));
        let accepted: Vec<&[u8]> =
            f.iter().filter(|(_, v)| *v == Verdict::Accepted).map(|(l, _)| l.as_slice()).collect();
        assert_eq!(accepted, [&b""[..], b"features=,,"]);
        assert_eq!(show(b"a\xffb"), "a\\xffb");
    }
}
