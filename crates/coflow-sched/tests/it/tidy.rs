//! Source-level tidy checks: the pure cores read no clock, touch no file or socket, spawn no
//! thread and speak no tokio, checked in their source, not only in their dependency edges.
//!
//! The checked sources are every file of `coflow-sched` and every file of `coflow-coordinator`
//! but its I/O shell ([`COORDINATOR_SHELL`]), so a module split out of the core is checked the
//! day it appears. Comments, string literals and character literals are not code and are
//! skipped. The one documented exception (ARCHITECTURE.md, "coflow-sched does no I/O") is
//! `siphon-mc`'s Monte Carlo rounds on rayon's pool, in `siphon.rs` alone.

use std::path::{Path, PathBuf};

/// What the pure cores must not name: a clock, the file system, sockets, threads, tokio.
const FORBIDDEN: &[&str] = &["Instant", "SystemTime", "std::net", "std::fs", "tokio", "thread::sleep", "std::thread"];

/// Names forbidden but for the files listed with them: rayon, for data parallelism in
/// `siphon-mc` alone (seeded per round, winners counted in round order, so any number of threads
/// gives the same result).
const EXCEPTIONS: &[(&str, &[&str])] = &[("rayon", &["siphon.rs"])];

/// The coordinator's I/O shell, not checked: `service.rs` (the tonic service, the task that owns
/// the core), `events.rs` (the channel to that task and what it is told), `lib.rs` (`run`: listeners, tokio tasks, the id base from the
/// clock), `identity.rs` (the tonic interceptor's session checks, keyed with the clock) and
/// `membership.rs` (machine ids handed out under a tokio lock, held back after a start by the
/// clock) and `telemetry.rs` (the HTTP listener's routes, whose metrics scrapes share one ask of
/// the core under a tokio lock, timed by the clock).
const COORDINATOR_SHELL: &[&str] =
    &["service.rs", "events.rs", "lib.rs", "identity.rs", "membership.rs", "telemetry.rs"];

/// A forbidden name in a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Violation {
    file: String,
    line: usize,
    name: &'static str,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: names `{}`", self.file, self.line, self.name)
    }
}

/// The source with comments, string literals and character literals blanked out (newlines
/// kept, so that line numbers hold).
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '/' if c.get(i + 1) == Some(&'/') => {
                while i < c.len() && c[i] != '\n' {
                    out.push(' ');
                    i += 1;
                }
            }
            '/' if c.get(i + 1) == Some(&'*') => {
                // Block comments nest in Rust.
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                        depth += 1;
                        out.push_str("  ");
                        i += 2;
                    } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        out.push_str("  ");
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        out.push(blank(c[i]));
                        i += 1;
                    }
                }
            }
            'r' if matches!(c.get(i + 1), Some('"') | Some('#'))
                && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_')) =>
            {
                // A raw string: r"…", r#"…"#, with as many hashes at the end as at the start.
                let mut j = i + 1;
                while c.get(j) == Some(&'#') {
                    j += 1;
                }
                if c.get(j) != Some(&'"') {
                    out.push(c[i]);
                    i += 1;
                    continue;
                }
                let hashes = j - i - 1;
                out.extend(std::iter::repeat_n(' ', j + 1 - i));
                i = j + 1;
                while i < c.len() {
                    if c[i] == '"' && (1..=hashes).all(|h| c.get(i + h) == Some(&'#')) {
                        out.extend(std::iter::repeat_n(' ', hashes + 1));
                        i += hashes + 1;
                        break;
                    }
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
            '"' => {
                out.push(' ');
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' {
                        out.push(' ');
                        i += 1;
                    }
                    if i < c.len() {
                        out.push(blank(c[i]));
                        i += 1;
                    }
                }
                out.push(' ');
                i += 1;
            }
            '\'' => {
                // A character literal ('x', '\n', '\'', '\u{1F600}'), or else a lifetime.
                let end = if c.get(i + 1) == Some(&'\\') {
                    (i + 3..c.len().min(i + 12)).find(|&j| c[j] == '\'')
                } else if c.get(i + 2) == Some(&'\'') {
                    Some(i + 2)
                } else {
                    None
                };
                match end {
                    Some(end) => {
                        out.extend(std::iter::repeat_n(' ', end + 1 - i));
                        i = end + 1;
                    }
                    None => {
                        out.push('\'');
                        i += 1;
                    }
                }
            }
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
    out
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// Whether `code` names `name` as a whole path or identifier, and where (byte offsets).
fn occurrences<'a>(code: &'a str, name: &'a str) -> impl Iterator<Item = usize> + 'a {
    code.match_indices(name).map(|(at, _)| at).filter(move |&at| {
        let before = code[..at].chars().next_back();
        let after = code[at + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// The forbidden names `src` (file `file`, whose name alone decides the exceptions) uses in code,
/// including `std::{fs, net, thread}` in a grouped import.
fn violations(file: &str, src: &str) -> Vec<Violation> {
    let code = code_only(src);
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let base = Path::new(file).file_name().and_then(|n| n.to_str()).unwrap_or(file);
    let mut found = Vec::new();
    let mut names: Vec<&'static str> = FORBIDDEN.to_vec();
    names.extend(EXCEPTIONS.iter().filter(|(_, allowed)| !allowed.contains(&base)).map(|(name, _)| *name));
    for &name in &names {
        for at in occurrences(&code, name) {
            found.push(Violation { file: file.to_string(), line: line_of(at), name });
        }
    }
    // `use std::{fs, net::TcpStream}` names them without the full path.
    for at in occurrences(&code, "std").filter(|&at| code[at..].starts_with("std::{")) {
        let group = &code[at + 5..];
        let mut depth = 0;
        let end = group
            .char_indices()
            .find(|&(_, ch)| {
                depth += match ch {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map_or(group.len(), |(j, _)| j);
        for (inner, name) in [("fs", "std::fs"), ("net", "std::net"), ("thread", "std::thread")] {
            if occurrences(&group[..end], inner).any(|j| !group[..j].ends_with("::")) {
                found.push(Violation { file: file.to_string(), line: line_of(at), name });
            }
        }
    }
    found.sort_by(|a, b| (a.line, a.name).cmp(&(b.line, b.name)));
    found.dedup();
    found
}

/// Every `.rs` file under `dir`, sorted, skipping the names in `skip` at its top level.
fn sources(dir: &Path, skip: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("a directory entry").path();
            let top = d == dir && path.file_name().and_then(|n| n.to_str()).is_some_and(|n| skip.contains(&n));
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !top {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The violations of every source under `dir` (but `skip`), with paths relative to the crates.
fn check_dir(dir: &Path, skip: &[&str]) -> Vec<Violation> {
    let crates = dir.ancestors().nth(2).expect("crates/NAME/src");
    let files = sources(dir, skip);
    assert!(!files.is_empty(), "no sources under {}", dir.display());
    files
        .iter()
        .flat_map(|p| {
            let src = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let name = p.strip_prefix(crates).unwrap_or(p).display().to_string();
            violations(&name, &src)
        })
        .collect()
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src")
}

fn listing(v: &[Violation]) -> String {
    v.iter().map(|v| format!("\n  {v}")).collect()
}

#[test]
fn coflow_sched_reads_no_clock_and_does_no_io() {
    let found = check_dir(&crate_src("coflow-sched"), &[]);
    assert!(found.is_empty(), "coflow-sched must stay pure:{}", listing(&found));
}

#[test]
fn the_coordinators_core_reads_no_clock_and_does_no_io() {
    let found = check_dir(&crate_src("coflow-coordinator"), COORDINATOR_SHELL);
    assert!(found.is_empty(), "the coordinator's core must stay sans-I/O:{}", listing(&found));
}

#[test]
fn the_checker_finds_what_it_must_and_nothing_in_comments_or_strings() {
    let bad = "use std::time::Instant;\n\
               fn f() {\n    let t = std::time::SystemTime::now();\n    std::thread::sleep(d);\n}\n\
               use std::{fs, net::TcpStream};\n\
               use tokio::sync::mpsc;\n\
               let c = '\"'; let i = Instant::now();\n";
    let found: Vec<(usize, &str)> = violations("x.rs", bad).iter().map(|v| (v.line, v.name)).collect();
    assert_eq!(
        found,
        vec![
            (1, "Instant"),
            (3, "SystemTime"),
            (4, "std::thread"),
            (4, "thread::sleep"),
            (6, "std::fs"),
            (6, "std::net"),
            (7, "tokio"),
            (8, "Instant"),
        ]
    );
    let fine = "// Instant, SystemTime, tokio in a comment\n\
                /* a block: std::fs /* nested: std::net */ thread::sleep */\n\
                /// docs may say tokio\n\
                let s = \"tokio::spawn and Instant in a string\";\n\
                let r = r#\"std::fs in a \"raw\" string\"#;\n\
                struct InstantNoodles<'a>(&'a str); let mytokio = 1;\n\
                use std::{collections::BTreeMap, cmp::Reverse};\n\
                use rayon::prelude::*;\n";
    assert_eq!(violations("siphon.rs", fine), vec![], "rayon is allowed in siphon.rs");
    assert_eq!(
        violations("varys.rs", fine),
        vec![Violation { file: "varys.rs".into(), line: 8, name: "rayon" }],
        "and nowhere else"
    );
    let shown = violations("crates/x/src/a.rs", "fn f() { tokio::spawn(g()); }")[0].to_string();
    assert_eq!(shown, "crates/x/src/a.rs:1: names `tokio`");
}
