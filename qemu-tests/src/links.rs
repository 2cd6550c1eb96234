//! The documentation's relative links: every `[text](path#anchor)` in the project's markdown
//! names a file that exists and, with an anchor, a heading of that file, so a renamed page or
//! section cannot leave a reader at a dead link; and the two READMEs stay front pages of at
//! most 200 lines. Checked by unit tests in `cargo xtest`.

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::qemu;

    /// The project's markdown files: the root's and those under the crates and `docs/`.
    fn pages(root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let (path, name) = (e.path(), e.file_name().to_string_lossy().into_owned());
                if path.is_dir() {
                    if !name.starts_with('.') && name != "target" {
                        dirs.push(path);
                    }
                } else if name.ends_with(".md") {
                    out.push(path);
                }
            }
        }
        out.sort();
        out
    }

    /// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes.
    fn slug(heading: &str) -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    }

    /// The anchors of a page's headings (outside code blocks).
    fn anchors(text: &str) -> Vec<String> {
        let mut fenced = false;
        let mut out = Vec::new();
        for l in text.lines() {
            if l.starts_with("```") {
                fenced = !fenced;
            } else if !fenced && l.starts_with('#') {
                out.push(slug(l.trim_start_matches('#')));
            }
        }
        out
    }

    /// Every relative link target in `text`: what follows `](` up to `)`.
    fn links(text: &str) -> Vec<&str> {
        text.split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
            .filter(|t| !t.contains("://") && !t.starts_with("mailto:") && !t.contains(' '))
            .collect()
    }

    #[test]
    fn headings_become_github_s_anchors() {
        assert_eq!(slug(" The seed's experiment on QEMU"), "the-seeds-experiment-on-qemu");
        assert_eq!(
            slug("Slices: how soon a CPU handed a thread runs it"),
            "slices-how-soon-a-cpu-handed-a-thread-runs-it"
        );
        assert_eq!(links("see [a](b.md#c) and [d](https://e/f) and [g](#h)"), ["b.md#c", "#h"]);
    }

    #[test]
    fn the_readmes_are_front_pages_of_at_most_200_lines() {
        let root = qemu::root();
        for page in ["README.md", "kernel-shim/README.md"] {
            let lines = std::fs::read_to_string(root.join(page)).unwrap().lines().count();
            assert!(lines <= 200, "{page} has {lines} lines: the depth belongs in docs/");
        }
    }

    #[test]
    fn every_relative_link_in_the_docs_reaches_a_file_and_a_heading() {
        let root = qemu::root();
        let mut dead = Vec::new();
        for page in pages(&root) {
            let text = std::fs::read_to_string(&page).unwrap();
            for target in links(&text) {
                let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
                let path = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
                let ok = path.exists()
                    && (anchor.is_empty()
                        || std::fs::read_to_string(&path)
                            .is_ok_and(|t| anchors(&t).iter().any(|a| a == anchor)));
                if !ok {
                    dead.push(format!("{}: ({target})", page.strip_prefix(&root).unwrap().display()));
                }
            }
        }
        assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
    }
}
