//! The coflow-jsonl reader and writer: defaults, every option, and errors that name the line.

use coflow_core::{Coflow, CoflowId, Nanos};
use coflow_trace::{TraceError, parse_jsonl, write_jsonl};

use crate::flow;

const HEADER: &str = r#"{"format":"coflow-jsonl","version":1,"machines":4}"#;

/// The line and message of the JSON error `text` must give.
fn json_error(text: &str) -> (usize, String) {
    match parse_jsonl(text) {
        Err(TraceError::Json { line, message, .. }) => (line, message),
        other => panic!("expected a JSON error, got {other:?}"),
    }
}

/// Asserts `text` fails at `line` with a message containing `needle`.
fn assert_json(text: &str, line: usize, needle: &str) {
    let (l, message) = json_error(text);
    assert_eq!(l, line, "message: {message}");
    assert!(message.contains(needle), "message {message:?} lacks {needle:?}");
}

#[test]
fn reads_every_field() {
    let text = format!(
        "{HEADER}\n\
         {{\"id\":7,\"arrival_ns\":1500,\"flows\":[{{\"src\":0,\"dst\":1,\"bytes\":10}},{{\"src\":2,\"dst\":2,\"bytes\":3}}],\
         \"deadline_ns\":2000000,\"weight\":2.5,\"parents\":[3],\"sizes_known\":false,\"name\":\"join \\\"a\\\"\"}}\n\
         {{\"id\":3,\"arrival_ns\":0,\"flows\":[]}}\n"
    );
    let w = parse_jsonl(&text).unwrap();
    assert_eq!(w.machines, 4);
    let parent = Coflow::new(CoflowId(3), Nanos(0), vec![]);
    let child = Coflow {
        id: CoflowId(7),
        arrival: Nanos(1500),
        flows: vec![flow(0, 1, 10), flow(2, 2, 3)],
        deadline: Some(Nanos(2_000_000)),
        weight: 2.5,
        parents: vec![CoflowId(3)],
        sizes_known: false,
        name: Some("join \"a\"".to_string()),
    };
    assert_eq!(w.coflows, [parent, child]);
}

#[test]
fn writes_a_header_and_one_line_per_coflow() {
    let w = crate::small_workload();
    let mut out = Vec::new();
    write_jsonl(&w, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], HEADER);
    assert_eq!(
        lines[2],
        r#"{"id":2,"arrival_ns":10000000,"flows":[{"src":3,"dst":1,"bytes":6291456}],"deadline_ns":null,"weight":1.0,"parents":[],"sizes_known":true,"name":null}"#
    );
}

#[test]
fn blank_lines_are_skipped() {
    let text = format!("\n{HEADER}\n\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[]}}\n\n");
    assert_eq!(parse_jsonl(&text).unwrap().coflows.len(), 1);
}

#[test]
fn empty_file() {
    assert_json("", 1, "expected a header");
}

#[test]
fn header_errors() {
    assert_json(r#"{"format":"csv","version":1,"machines":4}"#, 1, "format is \"csv\"");
    assert_json(r#"{"format":"coflow-jsonl","version":2,"machines":4}"#, 1, "version 2 is not supported");
    assert_json(r#"{"format":"coflow-jsonl","version":1}"#, 1, "missing field `machines`");
    assert_json(r#"{"format":"coflow-jsonl","version":1,"machines":4,"x":0}"#, 1, "unknown field `x`");
    // A coflow where the header should be.
    assert_json(r#"{"id":1,"arrival_ns":0,"flows":[]}"#, 1, "unknown field `id`");
}

#[test]
fn unknown_field_names_the_line() {
    let text = format!(
        "{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[]}}\n{{\"id\":2,\"arrival_ns\":0,\"flows\":[],\"deadline\":5}}\n"
    );
    assert_json(&text, 3, "unknown field `deadline`");
    let text = format!("{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[{{\"src\":0,\"dst\":1,\"size\":5}}]}}\n");
    assert_json(&text, 2, "unknown field `size`");
}

#[test]
fn missing_required_field() {
    let text = format!("{HEADER}\n{{\"id\":1,\"flows\":[]}}\n");
    assert_json(&text, 2, "missing field `arrival_ns`");
}

#[test]
fn bad_json_syntax_names_line_and_column() {
    let text = format!("{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[}}\n");
    let Err(TraceError::Json { line, column, .. }) = parse_jsonl(&text) else { panic!("expected a JSON error") };
    // Column 33 is the `}` where a flow or `]` should be.
    assert_eq!((line, column), (2, Some(33)));
}

#[test]
fn wrong_types() {
    let text = format!("{HEADER}\n{{\"id\":-1,\"arrival_ns\":0,\"flows\":[]}}\n");
    assert_json(&text, 2, "invalid value");
    let text = format!("{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[],\"weight\":\"heavy\"}}\n");
    assert_json(&text, 2, "invalid type");
}

#[test]
fn machine_out_of_range() {
    let text = format!("{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[{{\"src\":0,\"dst\":4,\"bytes\":1}}]}}\n");
    assert_json(&text, 2, "flow 0: dst 4 is out of range");
}

#[test]
fn bad_weight() {
    let text = format!("{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[],\"weight\":0}}\n");
    assert_json(&text, 2, "weight must be positive");
    let text = format!("{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[],\"weight\":-2}}\n");
    assert_json(&text, 2, "weight must be positive");
    // Quoted short, not in 301 digits.
    let text = format!("{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[],\"weight\":-1e300}}\n");
    assert_json(&text, 2, "weight must be positive and finite, got -1e300");
}

#[test]
fn unknown_parent() {
    let text = format!(
        "{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[]}}\n{{\"id\":2,\"arrival_ns\":0,\"flows\":[],\"parents\":[1,9]}}\n"
    );
    assert_json(&text, 3, "parent 9 is not a coflow");
}

#[test]
fn dependency_cycle() {
    let text = format!(
        "{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[]}}\n\
         {{\"id\":2,\"arrival_ns\":0,\"flows\":[],\"parents\":[3]}}\n\
         {{\"id\":3,\"arrival_ns\":0,\"flows\":[],\"parents\":[2]}}\n"
    );
    assert_json(&text, 3, "dependency cycle");
    let text = format!("{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[],\"parents\":[1]}}\n");
    assert_json(&text, 2, "depends on itself");
}

#[test]
fn duplicate_coflow_id() {
    let text =
        format!("{HEADER}\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[]}}\n\n{{\"id\":1,\"arrival_ns\":5,\"flows\":[]}}\n");
    let Err(TraceError::DuplicateId { line, id, first_line }) = parse_jsonl(&text) else {
        panic!("expected a duplicate id error");
    };
    assert_eq!((line, id, first_line), (4, CoflowId(1), 2));
}

#[test]
fn the_documented_example() {
    // The example of docs/src/guide/traces.md.
    let text = r#"{"format":"coflow-jsonl","version":1,"machines":4}
{"id":1,"arrival_ns":0,"flows":[{"src":0,"dst":2,"bytes":524288},{"src":1,"dst":2,"bytes":524288}]}
{"id":2,"arrival_ns":10000000,"flows":[{"src":3,"dst":1,"bytes":6291456}],"deadline_ns":500000000,"weight":2.0,"parents":[1],"sizes_known":false,"name":"reduce stage"}
"#;
    let w = parse_jsonl(text).unwrap();
    assert_eq!(w.coflows[0], Coflow::new(CoflowId(1), Nanos(0), vec![flow(0, 2, 524288), flow(1, 2, 524288)]));
    let c = &w.coflows[1];
    assert_eq!((c.deadline, c.weight, c.sizes_known), (Some(Nanos::from_millis(500)), 2.0, false));
    assert_eq!((c.parents.as_slice(), c.name.as_deref()), ([CoflowId(1)].as_slice(), Some("reduce stage")));

    // The documented error message.
    let bad = text.replace("\"deadline_ns\"", "\"deadline\"");
    let err = parse_jsonl(&bad).unwrap_err().to_string();
    assert!(err.starts_with("line 3, column 84: unknown field `deadline`, expected one of `id`,"), "{err}");
}

/// A rule of the model checked once the whole file is read still names the coflow's line.
#[test]
fn a_coflow_that_never_arrives_names_its_line() {
    let text = format!(
        "{HEADER}\n{{\"id\":2,\"arrival_ns\":5,\"flows\":[{{\"src\":0,\"dst\":1,\"bytes\":1}}]}}\n\n\
         {{\"id\":1,\"arrival_ns\":18446744073709551615,\"flows\":[{{\"src\":0,\"dst\":1,\"bytes\":1}}]}}\n"
    );
    let e = parse_jsonl(&text).unwrap_err();
    assert!(matches!(e, TraceError::InvalidAt { line: 4, .. }), "{e:?}");
    assert_eq!(e.line(), Some(4));
    assert!(e.to_string().starts_with("line 4: coflow 1: arrival must be before the end of time"), "{e}");
    let big = r#"{"format":"coflow-jsonl","version":1,"machines":4000000000}"#;
    assert_json(big, 1, "at most 1000000 machines");
}
