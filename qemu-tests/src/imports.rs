//! sched-core's module graph, read from its source text: which module each module's paths
//! name (`use crate::…`, `use super::…`, `crate::x::y` in code; outside comments and test
//! modules). Two unit tests hold it: no import circle, and no decision module (the
//! balancer's, placement's and capacity's) reaching the machine (`smp`), even indirectly.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    use crate::qemu;

    /// A module's path inside the crate: `[]` for the root, `["smp", "nohz"]`.
    type Module = Vec<String>;

    /// Every module of `core/src` (files named `tests.rs` are test modules and left out),
    /// with its source text.
    fn modules(src: &Path) -> BTreeMap<Module, String> {
        let mut out = BTreeMap::new();
        let mut dirs = vec![src.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = e.path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let rel = path.strip_prefix(src).unwrap().with_extension("");
                let mut m: Module = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
                if path.extension().is_none_or(|x| x != "rs") || m.last().is_some_and(|l| l == "tests") {
                    continue;
                }
                if m.last().is_some_and(|l| l == "mod" || l == "lib") {
                    m.pop();
                }
                if m.first().is_some_and(|f| f == "bin") {
                    continue;
                }
                out.insert(m, std::fs::read_to_string(&path).unwrap());
            }
        }
        out
    }

    /// The code of a file: comments, string literals and an inline test module left out (a
    /// test module in its own file is a file of its own; what follows its declaration counts).
    fn code(text: &str) -> String {
        let text = text.split("#[cfg(test)]\nmod tests {").next().unwrap();
        let mut out = String::new();
        for line in text.lines() {
            let mut in_str = false;
            let mut prev = ' ';
            let mut kept = String::new();
            for (i, c) in line.char_indices() {
                if !in_str && c == '/' && line[i..].starts_with("//") {
                    break;
                }
                if c == '"' && prev != '\\' && prev != '\'' {
                    in_str = !in_str;
                } else if !in_str {
                    kept.push(c);
                }
                prev = c;
            }
            out.push_str(&kept);
            out.push('\n');
        }
        out
    }

    /// Tokens of a `use` tree: identifiers and the punctuation `::`, `{`, `}`, `,`, `*`.
    fn tokens(s: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_alphanumeric() || c == '_' {
                let mut id = c.to_string();
                while let Some(&d) = chars.peek().filter(|d| d.is_alphanumeric() || **d == '_') {
                    id.push(d);
                    chars.next();
                }
                out.push(id);
            } else if c == ':' && chars.peek() == Some(&':') {
                chars.next();
                out.push("::".into());
            } else if "{},*".contains(c) {
                out.push(c.to_string());
            }
        }
        out
    }

    /// The flat paths of a `use` tree's tokens, from position `i`, each prefixed by `prefix`;
    /// returns where the tree ended.
    fn flatten(t: &[String], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
        let mut path = prefix.to_vec();
        while i < t.len() {
            match t[i].as_str() {
                "::" => i += 1,
                "{" => {
                    i += 1;
                    while i < t.len() && t[i] != "}" {
                        i = flatten(t, i, &path, out);
                        if t.get(i).is_some_and(|x| x == ",") {
                            i += 1;
                        }
                    }
                    return i + 1;
                }
                "}" | "," => break,
                "*" => {
                    i += 1;
                }
                "as" => i += 2,
                id => {
                    path.push(id.to_string());
                    i += 1;
                }
            }
        }
        out.push(path);
        i
    }

    /// Every crate path a module's code names: its `use` trees flattened, and the paths in
    /// code that start with `crate::`, `super::` or `self::`.
    fn paths(code: &str) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut rest = code;
        while let Some(i) = rest.find("use ") {
            let before = rest[..i].chars().last();
            rest = &rest[i + 4..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let end = rest.find(';').unwrap_or(rest.len());
            flatten(&tokens(&rest[..end]), 0, &[], &mut out);
        }
        for start in ["crate::", "super::", "self::"] {
            for (i, _) in code.match_indices(start) {
                if code[..i].chars().last().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let end =
                    code[i..].find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(0);
                out.push(
                    code[i..i + end].split("::").filter(|s| !s.is_empty()).map(str::to_string).collect(),
                );
            }
        }
        out
    }

    /// The module a path names from module `m`: the deepest module its leading segments
    /// reach; `None` for a path outside the crate.
    fn named(m: &Module, path: &[String], all: &BTreeMap<Module, String>) -> Option<Module> {
        let (mut base, rest) = match path.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &path[1..]),
            Some("super") => {
                let mut b = m.clone();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    b.pop();
                    rest = &rest[1..];
                }
                (b, rest)
            }
            Some("self") => (m.clone(), &path[1..]),
            // A path naming a child module of `m` by its bare name (`use stats::GroupType`).
            Some(first) if all.contains_key(&[m.clone(), vec![first.to_string()]].concat()) => {
                (m.clone(), path)
            }
            _ => return None,
        };
        for seg in rest {
            let next = [base.clone(), vec![seg.clone()]].concat();
            if !all.contains_key(&next) {
                break;
            }
            base = next;
        }
        Some(base)
    }

    /// The graph: each module and the modules its paths name.
    fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
        let all = modules(&qemu::root().join("core/src"));
        let mut g = BTreeMap::new();
        for (m, text) in &all {
            let edges: BTreeSet<Module> =
                paths(&code(text)).iter().filter_map(|p| named(m, p, &all)).filter(|n| n != m).collect();
            g.insert(m.clone(), edges);
        }
        g
    }

    /// The modules reachable from `from`.
    fn reach(g: &BTreeMap<Module, BTreeSet<Module>>, from: &Module) -> BTreeSet<Module> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            for n in g.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    stack.push(n.clone());
                }
            }
        }
        seen
    }

    fn name(m: &Module) -> String {
        if m.is_empty() {
            "crate".into()
        } else {
            m.join("::")
        }
    }

    #[test]
    fn use_trees_and_paths_are_read_as_rust_writes_them() {
        let code = code("use crate::a::{b::C, d};\nuse super::e as f; // use crate::z;\nlet x = crate::g::h(\"crate::y\");\n");
        let p: BTreeSet<String> = paths(&code).iter().map(|p| p.join("::")).collect();
        for named in ["crate::a::b::C", "crate::a::d", "super::e", "crate::g::h"] {
            assert!(p.contains(named), "{named} in {p:?}");
        }
        assert!(
            !p.iter().any(|x| x.contains('y') || x.contains('z')),
            "comments and strings are not code: {p:?}"
        );
    }

    #[test]
    fn sched_core_s_modules_import_no_circle() {
        let g = graph();
        assert!(g.len() > 30, "read {} modules", g.len());
        assert!(g[&vec!["error".to_string()]].contains(&vec!["task".to_string(), "id".to_string()]));
        let circles: Vec<String> = g
            .keys()
            .filter(|m| reach(&g, m).contains(*m))
            .map(|m| {
                let back: Vec<String> = g[m].iter().filter(|n| reach(&g, n).contains(m)).map(name).collect();
                format!("{} (back through {})", name(m), back.join(", "))
            })
            .collect();
        assert!(circles.is_empty(), "modules on an import circle:\n{}", circles.join("\n"));
    }

    #[test]
    fn no_decision_module_reaches_the_machine() {
        let g = graph();
        let smp = vec!["smp".to_string()];
        let decisions = g
            .keys()
            .filter(|m| m.first().is_some_and(|f| f == "balance" || f == "placement" || f == "capacity"));
        let reaching: Vec<String> =
            decisions.filter(|m| reach(&g, m).iter().any(|n| n.starts_with(&smp))).map(name).collect();
        assert!(reaching.is_empty(), "decision modules that reach smp: {reaching:?}");
    }
}
