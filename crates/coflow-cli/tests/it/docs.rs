//! The repository's documentation and sources checked as data: links that resolve, no history
//! markers, the size budgets of the front pages, a module doc atop every source file, and a
//! length budget per file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// README.md stays a front page; the rest is in the book.
const README_MAX_BYTES: usize = 12_000;
/// ARCHITECTURE.md stays a map; details live in module docs and the book.
const ARCHITECTURE_MAX_BYTES: usize = 30_000;
/// No source file grows past this many lines: a longer one holds more than one idea.
const SOURCE_MAX_LINES: usize = 1_500;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Every file under `dir` whose name ends with `ext`, skipping build output and hidden folders.
fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || ["target", "node_modules", "dist"].contains(&name.as_str()) {
            continue;
        }
        if path.is_dir() {
            files(&path, ext, out);
        } else if name.ends_with(ext) {
            out.push(path);
        }
    }
}

/// The Markdown the project publishes: the front pages, the book, the integrations' pages.
fn markdown() -> Vec<PathBuf> {
    let root = root();
    let mut out: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"].iter().map(|f| root.join(f)).collect();
    for dir in ["docs", "integrations", "python", "deploy", "examples"] {
        files(&root.join(dir), ".md", &mut out);
    }
    out.sort();
    out
}

/// The text of `md` outside fenced code blocks and inline code spans, line by line.
fn prose(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in md.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut kept = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                kept.push_str(part);
            }
        }
        out.push((n + 1, kept));
    }
    out
}

/// The targets of inline links `[text](target)` on a line of prose.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].trim().to_string());
        rest = &after[end..];
    }
    out
}

/// The anchor a heading gets (GitHub's and mdBook's rule): lower case, spaces to `-`, every
/// character but letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of `md`'s headings.
fn anchors(md: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#').replace('`', "").as_str()));
        }
    }
    out
}

/// What is wrong with one link of `from`, if anything.
fn broken(from: &Path, target: &str) -> Option<String> {
    if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() { from.to_path_buf() } else { from.parent().unwrap().join(path) };
    if !file.exists() {
        return Some(format!("{target}: no such file"));
    }
    if let Some(anchor) = anchor.filter(|_| file.extension().is_some_and(|e| e == "md")) {
        let text = std::fs::read_to_string(&file).unwrap();
        if !anchors(&text).contains(anchor) {
            return Some(format!("{target}: no heading with anchor #{anchor}"));
        }
    }
    None
}

#[test]
fn every_link_in_the_docs_resolves() {
    let root = root();
    let mut bad = Vec::new();
    for md in markdown() {
        let text = std::fs::read_to_string(&md).unwrap();
        for (n, line) in prose(&text) {
            for target in link_targets(&line) {
                if let Some(why) = broken(&md, &target) {
                    bad.push(format!("{}:{n}: {why}", md.strip_prefix(&root).unwrap().display()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

/// A commit hash: 7 to 40 hex digits, at least one a letter and one a digit, as a word.
fn commit_hashes(line: &str) -> Vec<&str> {
    line.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| (7..=40).contains(&w.len()))
        .filter(|w| w.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)))
        .filter(|w| w.chars().any(|c| c.is_ascii_digit()) && w.chars().any(|c| c.is_ascii_alphabetic()))
        .collect()
}

/// An issue number: "issue 12", "issues 3", "#12".
fn issue_numbers(line: &str) -> bool {
    let lower = line.to_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    words.windows(2).any(|w| {
        (w[0] == "issue" || w[0] == "issues")
            && w[1].trim_matches(|c: char| !c.is_alphanumeric()).parse::<u32>().is_ok()
    }) || lower.split_whitespace().any(|w| {
        w.strip_prefix('#').is_some_and(|n| !n.is_empty() && n.trim_end_matches([',', '.', ')']).parse::<u32>().is_ok())
    })
}

#[test]
fn the_docs_name_no_commits_and_no_issues() {
    let root = root();
    let mut bad = Vec::new();
    for md in markdown() {
        let text = std::fs::read_to_string(&md).unwrap();
        for (n, line) in text.lines().enumerate() {
            let at = md.strip_prefix(&root).unwrap().display();
            for hash in commit_hashes(line) {
                bad.push(format!("{at}:{}: commit hash {hash}", n + 1));
            }
            if issue_numbers(line) {
                bad.push(format!("{at}:{}: issue number in {line:?}", n + 1));
            }
        }
    }
    assert!(bad.is_empty(), "history belongs in commit messages:\n{}", bad.join("\n"));
}

#[test]
fn the_checkers_find_what_they_must() {
    assert_eq!(commit_hashes("against d38d732 and 45c3122, not 1378888837 or facade"), ["d38d732", "45c3122"]);
    assert!(issue_numbers("fixed in issue 15.") && issue_numbers("see #12") && !issue_numbers("an issue with 3 hosts"));
    assert_eq!(link_targets("a [b](c.md#d) and [e](https://f)"), ["c.md#d", "https://f"]);
    assert_eq!(slug("The reference simulator's model"), "the-reference-simulators-model");
    assert_eq!(
        slug("Where the whole `--deadlines` run goes".replace('`', "").as_str()),
        "where-the-whole---deadlines-run-goes"
    );
    assert_eq!(prose("x `[a](b)` y\n```\n[c](d)\n```\n[e](f)"), [(1, "x  y".to_string()), (5, "[e](f)".to_string())]);
}

#[test]
fn the_front_pages_stay_within_their_budgets() {
    let root = root();
    let readme = std::fs::metadata(root.join("README.md")).unwrap().len() as usize;
    let arch = std::fs::metadata(root.join("ARCHITECTURE.md")).unwrap().len() as usize;
    assert!(
        readme < README_MAX_BYTES,
        "README.md is {readme} bytes (budget {README_MAX_BYTES}): move detail to the book"
    );
    assert!(arch < ARCHITECTURE_MAX_BYTES, "ARCHITECTURE.md is {arch} bytes (budget {ARCHITECTURE_MAX_BYTES})");
}

fn rust_sources() -> Vec<PathBuf> {
    let mut out = Vec::new();
    files(&root().join("crates"), ".rs", &mut out);
    out.sort();
    out
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    let root = root();
    let missing: Vec<String> = rust_sources()
        .into_iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().trim_start().starts_with("//!"))
        .map(|f| f.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a `//!` doc:\n{}", missing.join("\n"));
}

#[test]
fn no_source_file_outgrows_its_budget() {
    let root = root();
    let long: Vec<String> = rust_sources()
        .into_iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(&f).unwrap().lines().count();
            (lines > SOURCE_MAX_LINES).then(|| format!("{}: {lines} lines", f.strip_prefix(&root).unwrap().display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {SOURCE_MAX_LINES} lines:\n{}", long.join("\n"));
}
