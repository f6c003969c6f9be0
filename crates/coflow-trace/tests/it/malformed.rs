//! Malformed input to both readers, as a fuzzer would make it: arbitrary text and bytes, and
//! valid traces with lines replaced, bytes deleted, inserted or cut off. The readers never panic,
//! and every error names a line of the input (the one at fault, when only one line changed).

use coflow_core::Workload;
use coflow_trace::{TraceError, TraceFormat, parse_benchmark, parse_jsonl, read_trace};
use proptest::prelude::*;

use crate::roundtrip::{arb_shuffle_workload, arb_workload};

/// Checks a parse's outcome: a workload, or an error naming a line of `text` (line 1 for an
/// empty text), in its message too.
fn names_a_line(text: &str, outcome: &Result<Workload, TraceError>) -> Result<(), TestCaseError> {
    if let Err(e) = outcome {
        let Some(line) = e.line() else { return Err(TestCaseError::fail(format!("no line in {e:?}"))) };
        prop_assert!(
            (1..=text.lines().count().max(1)).contains(&line),
            "line {line} of {} in {e}",
            text.lines().count()
        );
        prop_assert!(e.to_string().contains(&format!("line {line}")), "{e}");
    }
    Ok(())
}

/// Text made of what a coflow-benchmark line holds, and anything else now and then.
fn benchmark_like() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[0-9]{1,3} [0-9]{1,2}\n([0-9 :.e\\-]{0,30}\n){0,4}",
        2 => "[0-9 :.e\\-\n\r\t]{0,60}",
        1 => ".{0,40}",
    ]
}

/// Text made of what a coflow-jsonl line holds, and anything else now and then.
fn jsonl_like() -> impl Strategy<Value = String> {
    let header = r#"\{"format":"coflow-jsonl","version":1,"machines":[0-9]{1,2}\}"#;
    let line = r#"(\{("(id|arrival_ns|flows|src|dst|bytes|parents|weight|deadline_ns|name|sizes_known)":)?[\[\]{}0-9,:.e\-"a-z ]{0,30}\}?)"#;
    let regex = |r: &str| prop::string::string_regex(r).expect("a valid regex");
    prop_oneof![
        3 => regex(&format!("{header}\n({line}\n){{0,4}}")),
        2 => regex("[{}\\[\\]\":,0-9a-z_. \n-]{0,80}"),
        1 => regex(".{0,40}"),
    ]
}

/// One way to damage a text, applied at positions drawn as indices.
#[derive(Clone, Debug)]
enum Damage {
    /// Delete `len` bytes at a position.
    Delete(prop::sample::Index, usize),
    /// Insert text at a position.
    Insert(prop::sample::Index, String),
    /// Cut the text off at a position.
    Truncate(prop::sample::Index),
    /// Repeat a line.
    Repeat(prop::sample::Index),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<prop::sample::Index>(), 1usize..8).prop_map(|(i, n)| Damage::Delete(i, n)),
        (any::<prop::sample::Index>(), prop_oneof!["[0-9 :.\\-\n{}\",]{1,6}", ".{1,3}"])
            .prop_map(|(i, s)| Damage::Insert(i, s)),
        any::<prop::sample::Index>().prop_map(Damage::Truncate),
        any::<prop::sample::Index>().prop_map(Damage::Repeat),
    ]
}

/// The nearest character boundary at or before `at`.
fn boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &mut String, d: &Damage) {
    if text.is_empty() {
        return;
    }
    match d {
        Damage::Delete(i, n) => {
            let from = boundary(text, i.index(text.len()));
            let to = boundary(text, (from + n).min(text.len()));
            text.replace_range(from..to, "");
        }
        Damage::Insert(i, s) => {
            let at = boundary(text, i.index(text.len()));
            text.insert_str(at, s);
        }
        Damage::Truncate(i) => {
            let at = boundary(text, i.index(text.len()));
            text.truncate(at);
        }
        Damage::Repeat(i) => {
            let lines: Vec<&str> = text.lines().collect();
            let k = i.index(lines.len());
            let mut out: Vec<&str> = lines[..=k].to_vec();
            out.extend_from_slice(&lines[k..]);
            *text = out.join("\n") + "\n";
        }
    }
}

/// `w` written in `format`.
fn written(w: &Workload, format: TraceFormat) -> String {
    let mut out = Vec::new();
    format.write(w, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// Replaces line `k` (1-based) of `text` with `with`.
fn replace_line(text: &str, k: usize, with: &str) -> String {
    text.lines().enumerate().map(|(i, l)| if i + 1 == k { with } else { l }).collect::<Vec<_>>().join("\n") + "\n"
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics_and_errors_name_a_line(b in benchmark_like(), j in jsonl_like()) {
        for text in [&b, &j] {
            names_a_line(text, &parse_benchmark(text))?;
            names_a_line(text, &parse_jsonl(text))?;
        }
    }

    #[test]
    fn damaged_traces_never_panic_and_errors_name_a_line(
        w in arb_workload(),
        s in arb_shuffle_workload(),
        damages in prop::collection::vec(damage(), 1..4),
    ) {
        for (text, format) in [(written(&w, TraceFormat::Jsonl), TraceFormat::Jsonl), (written(&s, TraceFormat::Benchmark), TraceFormat::Benchmark)] {
            let mut text = text;
            for d in &damages {
                apply(&mut text, d);
            }
            names_a_line(&text, &format.parse(&text))?;
        }
    }

    /// With only coflow line `k` changed, an error is about line `k`; or, for what involves other lines
    /// too, about a line the change made inconsistent: the header's count (line 1), a duplicate
    /// id, or (JSON Lines) a parent that is gone.
    #[test]
    fn an_error_in_one_line_names_that_line(
        w in arb_workload(),
        s in arb_shuffle_workload(),
        k in any::<prop::sample::Index>(),
        garbage in prop_oneof!["[0-9 :.\\-]{0,20}", r#"\{"id":[0-9]{1,3}[,}a-z":0-9\[\]]{0,20}"#, ".{0,12}"],
    ) {
        for (text, format) in [(written(&w, TraceFormat::Jsonl), TraceFormat::Jsonl), (written(&s, TraceFormat::Benchmark), TraceFormat::Benchmark)] {
            // A coflow line: a header changed changes how every line reads.
            let coflows = text.lines().count() - 1;
            if coflows == 0 {
                continue;
            }
            let line = 2 + k.index(coflows);
            let damaged = replace_line(&text, line, &garbage);
            let outcome = format.parse(&damaged);
            names_a_line(&damaged, &outcome)?;
            match outcome {
                Ok(_) => {}
                Err(TraceError::DuplicateId { line: at, first_line, .. }) => prop_assert!(at == line || first_line == line),
                Err(TraceError::CoflowCount { .. }) => {}
                Err(TraceError::Json { message, .. }) if message.contains("parent") || message.contains("cycle") => {}
                Err(e) => prop_assert_eq!(e.line(), Some(line), "{}", e),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A file of arbitrary bytes (mostly trace-like text with bytes that are not UTF-8 mixed in)
    /// reads as a trace or fails naming a line.
    #[test]
    fn arbitrary_bytes_in_a_file_name_a_line(
        text in benchmark_like(),
        bytes in prop::collection::vec(any::<u8>(), 0..8),
        at in any::<prop::sample::Index>(),
        ext in prop::sample::select(vec!["txt", "jsonl", "trace"]),
    ) {
        let mut raw = text.into_bytes();
        let at = at.index(raw.len() + 1);
        raw.splice(at..at, bytes);
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("coflow-trace-fuzz-{}.{ext}", std::process::id()));
        std::fs::write(&path, &raw).unwrap();
        let outcome = read_trace(&path);
        let lines = raw.split(|&b| b == b'\n').count();
        if let Err(e) = &outcome {
            let line = e.line();
            prop_assert!(line.is_some_and(|l| l >= 1 && l <= lines), "{e:?}");
        }
        if let Err(TraceError::NotText { line, column, .. }) = &outcome {
            // The first byte that is not UTF-8 is at that line and column.
            let start: usize = raw.split(|&b| b == b'\n').take(line - 1).map(|l| l.len() + 1).sum();
            prop_assert_eq!(std::str::from_utf8(&raw).unwrap_err().valid_up_to(), start + column - 1);
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// A byte that is not UTF-8 names its line and column.
#[test]
fn a_byte_that_is_not_utf8_names_its_line() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("coflow-trace-not-text.txt");
    std::fs::write(&path, b"2 1\n1 0 1 0 1 1:\xff\n").unwrap();
    let e = read_trace(&path).unwrap_err();
    assert!(matches!(e, TraceError::NotText { line: 2, column: 13, .. }), "{e:?}");
    assert_eq!(e.to_string(), "line 2, column 13: not UTF-8 text");
}
