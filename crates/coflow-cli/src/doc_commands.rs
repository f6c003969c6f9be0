//! Every `coflow` command the documentation shows parses as this binary's command line: the
//! commands of fenced `sh` blocks (comments dropped, continuation lines joined, `&&` chains split)
//! and those quoted inline in prose, such as the command beside each figure. Synopses, which
//! carry `[`, `|` or an ellipsis, are left out.

use std::path::{Path, PathBuf};

use crate::parse_from;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && !entry.file_name().to_string_lossy().starts_with(['.', '_']) {
            if entry.file_name() != "target" && entry.file_name() != "node_modules" {
                markdown(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// The command lines a page shows, each with its line number.
fn commands(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let (mut fence, mut pending, mut start) = (None::<String>, String::new(), 0);
    for (n, line) in md.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("```") {
            fence = if fence.is_some() { None } else { Some(rest.trim().to_string()) };
            continue;
        }
        match &fence {
            Some(lang) if lang == "sh" || lang == "bash" || lang == "console" => {
                let text = line.split(" # ").next().unwrap_or_default().trim_end();
                let text = text.strip_prefix("$ ").unwrap_or(text);
                if pending.is_empty() {
                    start = n + 1;
                }
                if let Some(head) = text.strip_suffix('\\') {
                    pending.push_str(head);
                    pending.push(' ');
                    continue;
                }
                pending.push_str(text);
                for part in pending.split("&&") {
                    out.push((start, part.trim().to_string()));
                }
                pending.clear();
            }
            Some(_) => {}
            None => {
                for (i, span) in line.split('`').enumerate() {
                    if i % 2 == 1 && span.starts_with("coflow ") && !mention(span) {
                        out.push((n + 1, span.to_string()));
                    }
                }
            }
        }
    }
    out.retain(|(_, c)| c.starts_with("coflow ") || c.starts_with("cargo run --release -p coflow-cli -- "));
    out
}

/// Whether an inline `coflow …` names a command or a flag rather than showing one to run: a
/// synopsis (`[`, `|`, an ellipsis), a bare command (`coflow sim sweep`) or one that ends on a
/// flag (`coflow sim --wan`).
fn mention(span: &str) -> bool {
    let words: Vec<&str> = span.split_whitespace().collect();
    span.contains(['[', '|', '…'])
        || span.contains("...")
        || words.len() <= 3
        || words.last().is_some_and(|w| w.starts_with('-'))
}

/// A shell line's words: quotes kept together, `$(…)` and `$VAR` standing for a value.
fn words(line: &str) -> Vec<String> {
    let line =
        line.strip_prefix("cargo run --release -p coflow-cli -- ").map_or(line.to_string(), |l| format!("coflow {l}"));
    let mut out = Vec::new();
    let mut word = String::new();
    let mut chars = line.chars().peekable();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (c, quote) {
            ('"' | '\'', None) => quote = Some(c),
            (q, Some(open)) if q == open => quote = None,
            ('$', _) if chars.peek() == Some(&'(') => {
                let mut depth = 0;
                for d in chars.by_ref() {
                    depth += (d == '(') as i32 - (d == ')') as i32;
                    if depth == 0 {
                        break;
                    }
                }
                word.push_str("10.0.0.1");
            }
            ('$', _) => {
                while chars.peek().is_some_and(|d| d.is_alphanumeric() || *d == '_') {
                    chars.next();
                }
                word.push('1');
            }
            (' ', None) => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            _ => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

#[test]
fn every_command_the_docs_show_parses() {
    let root = root();
    let mut pages: Vec<PathBuf> = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    for dir in ["docs", "integrations", "deploy", "python"] {
        markdown(&root.join(dir), &mut pages);
    }
    let (mut seen, mut bad) = (0, Vec::new());
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (n, line) in commands(&text) {
            seen += 1;
            if let Err(e) = parse_from(words(&line)) {
                use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
                if !matches!(e.kind(), DisplayHelp | DisplayVersion) {
                    let first = e.to_string().lines().next().unwrap_or_default().to_string();
                    bad.push(format!("{}:{n}: {line}\n    {first}", page.strip_prefix(&root).unwrap().display()));
                }
            }
        }
    }
    assert!(seen > 20, "the extraction is real: only {seen} commands found");
    assert!(bad.is_empty(), "commands in the docs that do not parse:\n{}", bad.join("\n"));
}

#[test]
fn commands_are_found_in_blocks_and_prose_and_synopses_are_not() {
    let md = "```sh\ncoflow sim --seed 2 \\\n    --policies varys   # a comment\ncoflow a && coflow b\nls\n```\n\
              Run `coflow sim --trace t.txt` or `coflow sim [--trace PATH]`, not `coflow sim sweep` or `coflow sim --wan`.\n";
    let found: Vec<String> = commands(md).into_iter().map(|(_, c)| c).collect();
    assert_eq!(
        found,
        ["coflow sim --seed 2      --policies varys", "coflow a", "coflow b", "coflow sim --trace t.txt"]
    );
    assert_eq!(
        words("coflow agent --machine $i --data-advertise $(hostname -i):7072 --name 'a b'"),
        ["coflow", "agent", "--machine", "1", "--data-advertise", "10.0.0.1:7072", "--name", "a b"]
    );
}
