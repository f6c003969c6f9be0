//! The coflow-benchmark reader: what it builds from good input, and one test per kind of bad input.

use coflow_core::{CoflowId, MIB, Nanos};
use coflow_trace::{Field, TraceError, parse_benchmark};

use crate::flow;

/// The line, field and message of the syntax error `text` must give.
fn syntax_error(text: &str) -> (usize, Field, String) {
    match parse_benchmark(text) {
        Err(TraceError::Syntax { line, field, message }) => (line, field, message),
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

/// Asserts `text` fails at `line` on `field` with a message containing `needle`.
fn assert_syntax(text: &str, line: usize, field: Field, needle: &str) {
    let (l, f, message) = syntax_error(text);
    assert_eq!((l, f), (line, field), "message: {message}");
    assert!(message.contains(needle), "message {message:?} lacks {needle:?}");
}

#[test]
fn builds_one_flow_per_mapper_and_reducer_pair() {
    let w = parse_benchmark("4 2\n1 0 1 2 1 3:1.0\n2 25 2 0 1 2 1:2.0 2:4.0\n").unwrap();
    assert_eq!(w.machines, 4);
    assert_eq!(w.coflows.len(), 2);
    let c = &w.coflows[1];
    assert_eq!((c.id, c.arrival), (CoflowId(2), Nanos::from_millis(25)));
    // Reducer by reducer, mapper by mapper; each reducer's MB split over the 2 mappers; the flow
    // from machine 1 to reducer 1 is local and kept.
    assert_eq!(c.flows, [flow(0, 1, MIB), flow(1, 1, MIB), flow(0, 2, 2 * MIB), flow(1, 2, 2 * MIB)]);
    assert!(c.flows[1].is_local());
}

#[test]
fn rounds_each_flow_to_the_nearest_byte() {
    // 1 MB over 3 mappers is 349525.33 bytes, 2 MB over 3 is 699050.67.
    let w = parse_benchmark("3 1\n1 0 3 0 1 2 2 0:1 1:2\n").unwrap();
    let sizes: Vec<u64> = w.coflows[0].flows.iter().map(|f| f.size.get()).collect();
    assert_eq!(sizes, [349525, 349525, 349525, 699051, 699051, 699051]);
}

#[test]
fn sorts_coflows_by_arrival_then_id() {
    let w = parse_benchmark("2 3\n5 10 1 0 1 1:1\n3 10 1 0 1 1:1\n9 0 1 0 1 1:1\n").unwrap();
    let ids: Vec<u64> = w.coflows.iter().map(|c| c.id.get()).collect();
    assert_eq!(ids, [9, 3, 5]);
}

#[test]
fn blank_lines_and_crlf_are_fine() {
    let w = parse_benchmark("2 2\r\n1 0 1 0 1 1:1.0\r\n\r\n2 5 1 1 1 0:0.5\r\n\r\n\n  \n").unwrap();
    assert_eq!(w.coflows.len(), 2);
    assert_eq!(w.coflows[1].flows, [flow(1, 0, MIB / 2)]);
}

/// Blank lines before the header are skipped as they are anywhere else, and errors after them
/// name the file's own line numbers.
#[test]
fn leading_blank_lines_are_skipped_and_lines_keep_their_numbers() {
    let w = parse_benchmark("\n\n6 2\n1 0 1 2 1 5:1.0\n2 120 2 0 1 2 1:2.0 3:7.5\n").unwrap();
    assert_eq!(w, parse_benchmark("6 2\n1 0 1 2 1 5:1.0\n2 120 2 0 1 2 1:2.0 3:7.5\n").unwrap());
    assert_syntax("\n \r\n150 many\n", 3, Field::CoflowCount, "got \"many\"");
    assert_syntax("\n\n4 1\n\nx1 0 1 0 1 1:1\n", 5, Field::Id, "got \"x1\"");
    let Err(TraceError::CoflowCount { line, declared, found }) = parse_benchmark("\n\n4 3\n1 0 1 0 1 1:1\n") else {
        panic!("expected a coflow count error");
    };
    assert_eq!((line, declared, found), (3, 3, 1), "at the header's line");
}

#[test]
fn a_byte_order_mark_is_skipped() {
    assert_eq!(parse_benchmark("\u{feff}2 1\n1 0 1 0 1 1:1\n").unwrap().coflows.len(), 1);
}

#[test]
fn zero_megabytes_give_zero_byte_flows() {
    let w = parse_benchmark("2 1\n1 0 1 0 1 1:0\n").unwrap();
    assert_eq!(w.coflows[0].flows, [flow(0, 1, 0)]);
}

#[test]
fn empty_file() {
    assert_syntax("", 1, Field::Header, "empty trace");
    assert_syntax("\n \n\t\n", 1, Field::Header, "empty trace");
}

#[test]
fn header_not_two_numbers() {
    assert_syntax("ports 2\n", 1, Field::Ports, "got \"ports\"");
    assert_syntax("150 many\n", 1, Field::CoflowCount, "got \"many\"");
    assert_syntax("150\n", 1, Field::CoflowCount, "missing");
    assert_syntax("150 1 7\n1 0 1 0 1 1:1\n", 1, Field::Trailing, "\"7\"");
    assert_syntax("-4 1\n", 1, Field::Ports, "got \"-4\"");
}

#[test]
fn more_coflow_lines_than_the_header_says() {
    let text = "4 2\n1 0 1 0 1 1:1\n2 0 1 0 1 1:1\n3 0 1 0 1 1:1\n\n4 0 1 0 1 1:1\n";
    let Err(TraceError::CoflowCount { line, declared, found }) = parse_benchmark(text) else {
        panic!("expected a coflow count error");
    };
    assert_eq!((line, declared, found), (4, 2, 4));
    let message = parse_benchmark(text).unwrap_err().to_string();
    assert!(message.contains("declares 2 coflows but the file has 4"), "{message}");
}

#[test]
fn truncated_file() {
    let text = "4 3\n1 0 1 0 1 1:1\n2 0 1 0 1 1:1\n";
    let Err(TraceError::CoflowCount { line, declared, found }) = parse_benchmark(text) else {
        panic!("expected a coflow count error");
    };
    assert_eq!((line, declared, found), (1, 3, 2));
    assert!(parse_benchmark(text).unwrap_err().to_string().contains("truncated"));
}

#[test]
fn bad_id() {
    assert_syntax("4 1\nx1 0 1 0 1 1:1\n", 2, Field::Id, "got \"x1\"");
    assert_syntax("4 1\n-1 0 1 0 1 1:1\n", 2, Field::Id, "got \"-1\"");
}

#[test]
fn bad_arrival() {
    assert_syntax("4 1\n1 1.5 1 0 1 1:1\n", 2, Field::Arrival, "got \"1.5\"");
    assert_syntax("4 1\n1 -3 1 0 1 1:1\n", 2, Field::Arrival, "got \"-3\"");
    assert_syntax("4 1\n1 18446744073709551615 1 0 1 1:1\n", 2, Field::Arrival, "too large");
}

#[test]
fn bad_mapper_count() {
    assert_syntax("4 1\n1 0 one 0 1 1:1\n", 2, Field::MapperCount, "got \"one\"");
    assert_syntax("4 1\n1 0 0 1 1:1\n", 2, Field::MapperCount, "at least one mapper");
}

#[test]
fn bad_mapper() {
    assert_syntax("4 1\n1 0 2 0 m1 1 1:1\n", 2, Field::Mapper(2), "got \"m1\"");
}

#[test]
fn mapper_port_out_of_range() {
    assert_syntax("4 2\n1 0 1 0 1 1:1\n2 0 2 3 4 1 1:1\n", 3, Field::Mapper(2), "port 4 is out of range");
}

#[test]
fn bad_reducer_count() {
    assert_syntax("4 1\n1 0 1 0 1.5 1:1\n", 2, Field::ReducerCount, "got \"1.5\"");
    assert_syntax("4 1\n1 0 1 0 0\n", 2, Field::ReducerCount, "at least one reducer");
}

#[test]
fn reducer_without_colon() {
    let (line, field, message) = syntax_error("4 1\n1 0 1 0 3 1:1 2:1 12\n");
    assert_eq!((line, field), (2, Field::Reducer(3)));
    let e = TraceError::Syntax { line, field, message };
    assert_eq!(e.to_string(), "line 2, field reducer 3: expected <port>:<MB>, got \"12\"");
}

#[test]
fn bad_reducer_port() {
    assert_syntax("4 1\n1 0 1 0 1 r1:1\n", 2, Field::ReducerPort(1), "got \"r1\"");
}

#[test]
fn reducer_port_out_of_range() {
    assert_syntax(
        "4 1\n1 0 1 0 2 3:1 4:1\n",
        2,
        Field::ReducerPort(2),
        "port 4 is out of range: the header declares 4",
    );
}

#[test]
fn bad_megabytes() {
    assert_syntax("4 1\n1 0 1 0 1 1:lots\n", 2, Field::ReducerMb(1), "got \"lots\"");
    assert_syntax("4 1\n1 0 1 0 1 1:\n", 2, Field::ReducerMb(1), "got \"\"");
}

#[test]
fn negative_megabytes() {
    assert_syntax("4 1\n1 0 1 0 2 1:1 2:-0.5\n", 2, Field::ReducerMb(2), "must not be negative");
}

#[test]
fn non_finite_megabytes() {
    assert_syntax("4 1\n1 0 1 0 1 1:NaN\n", 2, Field::ReducerMb(1), "finite");
    assert_syntax("4 1\n1 0 1 0 1 1:inf\n", 2, Field::ReducerMb(1), "finite");
    assert_syntax("4 1\n1 0 1 0 1 1:1e300\n", 2, Field::ReducerMb(1), "too large");
}

#[test]
fn truncated_line_in_the_mappers() {
    assert_syntax("4 1\n1 0 3 0 1\n", 2, Field::Mapper(3), "missing");
}

#[test]
fn truncated_line_in_the_reducers() {
    assert_syntax("4 1\n1 0 2 0 1 3 1:1 2:1\n", 2, Field::Reducer(3), "truncated line");
    assert_syntax("4 1\n1 0\n", 2, Field::MapperCount, "missing");
}

#[test]
fn too_many_tokens_on_a_line() {
    assert_syntax("4 1\n1 0 1 0 1 1:1 2:1\n", 2, Field::Trailing, "\"2:1\"");
}

#[test]
fn duplicate_coflow_id() {
    let text = "4 3\n1 0 1 0 1 1:1\n2 5 1 0 1 1:1\n\n1 9 1 0 1 1:1\n";
    let Err(TraceError::DuplicateId { line, id, first_line }) = parse_benchmark(text) else {
        panic!("expected a duplicate id error");
    };
    assert_eq!((line, id, first_line), (5, CoflowId(1), 2));
}

#[test]
fn errors_report_the_first_bad_line() {
    // Line 3 is bad and so is the count; the reader stops at line 3.
    assert_syntax("4 9\n1 0 1 0 1 1:1\n2 0 1 0 1 1;1\n", 3, Field::Reducer(1), "expected <port>:<MB>");
}

#[test]
fn the_documented_example() {
    // The example of docs/src/guide/traces.md.
    let w = parse_benchmark("6 2\n1 0 1 2 1 5:1.0\n2 120 2 0 1 2 1:2.0 3:7.5\n").unwrap();
    assert_eq!(w.machines, 6);
    assert_eq!(w.coflows[0].flows, [flow(2, 5, 1_048_576)]);
    assert_eq!(w.coflows[1].arrival, Nanos::from_millis(120));
    assert_eq!(
        w.coflows[1].flows,
        [flow(0, 1, 1_048_576), flow(1, 1, 1_048_576), flow(0, 3, 3_932_160), flow(1, 3, 3_932_160)]
    );
}

/// A header may not declare more machines than a workload may have: their tables alone would
/// not fit in memory.
#[test]
fn a_header_with_too_many_machines_is_refused() {
    assert_syntax("4000000000 1\n1 0 1 2 1 5:1.0\n", 1, Field::Ports, "at most 1000000 machines");
}

/// A line stands for mappers × reducers flows: past what a trace may have in all, it is refused
/// before a flow is made, however short it is.
#[test]
fn a_line_that_stands_for_too_many_flows_is_refused_before_they_are_made() {
    let mappers = vec!["0"; 8000].join(" ");
    let line = format!("1 0 8000 {mappers} 8000 0:1.0\n");
    assert_syntax(&format!("1 1\n{line}"), 2, Field::ReducerCount, "8000 mappers × 8000 reducers take the trace past");
    // 5,000 × 10,000 flows are the most a trace may have in all, so after one flow they are
    // one too many (refused at the count, before its 10,000 reducers are read).
    let most = format!("2 0 5000 {} 10000 0:1.0\n", vec!["0"; 5000].join(" "));
    assert_syntax(&format!("1 2\n1 0 1 0 1 0:1.0\n{most}"), 3, Field::ReducerCount, "past the 50000000 flows");
}
