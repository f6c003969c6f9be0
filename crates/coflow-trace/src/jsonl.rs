//! The `coflow-jsonl` format of our own: one JSON object per line, carrying everything the model has.
//!
//! Line 1 is a header, `{"format":"coflow-jsonl","version":1,"machines":N}`; every following
//! non-blank line is one coflow.
//! The serde structs here mirror the coflow-core types, which stay free of serde.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::Path;

use coflow_core::{Bytes, Coflow, CoflowId, Flow, MachineId, Nanos, Workload};
use serde::{Deserialize, Serialize};

use crate::error::TraceError;
use crate::object::{Object, objects};
use crate::synth::MAX_MACHINES;

/// The value of the header's `format` field.
pub const JSONL_FORMAT: &str = "coflow-jsonl";
/// The version of the format this crate reads and writes.
pub const JSONL_VERSION: u32 = 1;

/// The header line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    version: u32,
    machines: u32,
}

/// One coflow line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CoflowRecord {
    id: u64,
    arrival_ns: u64,
    #[serde(deserialize_with = "objects")]
    flows: Vec<FlowRecord>,
    #[serde(default)]
    deadline_ns: Option<u64>,
    #[serde(default = "default_weight")]
    weight: f64,
    #[serde(default)]
    parents: Vec<u64>,
    #[serde(default = "default_sizes_known")]
    sizes_known: bool,
    #[serde(default)]
    name: Option<String>,
}

/// One flow of a coflow line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowRecord {
    src: u32,
    dst: u32,
    bytes: u64,
}

/// The weight of a coflow line that does not give one.
fn default_weight() -> f64 {
    1.0
}

/// Whether sizes are known when a coflow line does not say.
fn default_sizes_known() -> bool {
    true
}

/// Reads a `coflow-jsonl` trace from a file.
pub fn read_jsonl(path: &Path) -> Result<Workload, TraceError> {
    let text = crate::error::read_text(path)?;
    parse_jsonl(&text)
}

/// Parses a `coflow-jsonl` trace.
///
/// Blank lines are skipped, and so is a leading byte order mark.
/// Every error is a [`TraceError::Json`] naming the 1-based line (with the column for JSON syntax
/// errors), except a repeated id, which is a [`TraceError::DuplicateId`], and a coflow that breaks
/// a rule of the model checked once the file is read (the bytes of all flows past 2^64, an
/// arrival at the end of time), which is a [`TraceError::InvalidAt`] naming its line.
/// Besides the JSON shape, each line is checked against the model: endpoints below the header's
/// machine count, a positive finite weight, parents that exist and form no cycle.
pub fn parse_jsonl(text: &str) -> Result<Workload, TraceError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| !l.trim().is_empty());
    let Some((line, header)) = lines.next() else {
        return Err(json_error(1, format!("empty trace: expected a header line like {}", example_header())));
    };
    let Object(header): Object<Header> =
        serde_json::from_str(header).map_err(|e| serde_error(line, &e, "the header"))?;
    if header.format != JSONL_FORMAT {
        return Err(json_error(
            line,
            format!("format is {}, expected {JSONL_FORMAT:?}", crate::error::quoted(&header.format)),
        ));
    }
    if header.version != JSONL_VERSION {
        return Err(json_error(
            line,
            format!("version {} is not supported; this reader knows version {JSONL_VERSION}", header.version),
        ));
    }

    if header.machines > MAX_MACHINES {
        return Err(json_error(line, format!("at most {MAX_MACHINES} machines, got {}", header.machines)));
    }
    let mut coflows = Vec::new();
    let mut line_of: BTreeMap<CoflowId, usize> = BTreeMap::new();
    for (line, text) in lines {
        let Object(record): Object<CoflowRecord> =
            serde_json::from_str(text).map_err(|e| serde_error(line, &e, "a coflow"))?;
        let coflow = to_coflow(line, record, header.machines)?;
        if let Some(&first_line) = line_of.get(&coflow.id) {
            return Err(TraceError::DuplicateId { line, id: coflow.id, first_line });
        }
        line_of.insert(coflow.id, line);
        coflows.push(coflow);
    }
    check_parents(&coflows, &line_of)?;
    Workload::new(header.machines, coflows).map_err(|e| crate::error::invalid_at(e, &line_of))
}

/// Converts one record, checking what the model requires of a single coflow.
fn to_coflow(line: usize, r: CoflowRecord, machines: u32) -> Result<Coflow, TraceError> {
    let mut flows = Vec::with_capacity(r.flows.len());
    for (i, f) in r.flows.iter().enumerate() {
        for (end, m) in [("src", f.src), ("dst", f.dst)] {
            if m >= machines {
                return Err(json_error(
                    line,
                    format!("flow {i}: {end} {m} is out of range: the header declares {machines} machines"),
                ));
            }
        }
        flows.push(Flow { src: MachineId(f.src), dst: MachineId(f.dst), size: Bytes(f.bytes) });
    }
    if !(r.weight.is_finite() && r.weight > 0.0) {
        return Err(json_error(
            line,
            format!("weight must be positive and finite, got {}", coflow_core::shown(r.weight)),
        ));
    }
    Ok(Coflow {
        id: CoflowId(r.id),
        arrival: Nanos(r.arrival_ns),
        flows,
        deadline: r.deadline_ns.map(Nanos),
        weight: r.weight,
        parents: r.parents.into_iter().map(CoflowId).collect(),
        sizes_known: r.sizes_known,
        name: r.name,
    })
}

/// Checks every parent exists and the parent relation has no cycle, naming the line of a coflow
/// at fault.
fn check_parents(coflows: &[Coflow], line_of: &BTreeMap<CoflowId, usize>) -> Result<(), TraceError> {
    let index: BTreeMap<CoflowId, usize> = coflows.iter().enumerate().map(|(i, c)| (c.id, i)).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); coflows.len()];
    let mut waiting_on: Vec<usize> = vec![0; coflows.len()];
    for (i, c) in coflows.iter().enumerate() {
        for p in &c.parents {
            let Some(&pi) = index.get(p) else {
                return Err(json_error(line_of[&c.id], format!("parent {p} is not a coflow of this trace")));
            };
            children[pi].push(i);
            waiting_on[i] += 1;
        }
    }
    // Kahn's algorithm: whatever cannot be released lies on or behind a cycle.
    let mut ready: Vec<usize> = (0..coflows.len()).filter(|&i| waiting_on[i] == 0).collect();
    while let Some(i) = ready.pop() {
        for &child in &children[i] {
            waiting_on[child] -= 1;
            if waiting_on[child] == 0 {
                ready.push(child);
            }
        }
    }
    match coflows.iter().enumerate().filter(|&(i, _)| waiting_on[i] > 0).min_by_key(|(_, c)| line_of[&c.id]) {
        None => Ok(()),
        Some((_, c)) => Err(json_error(
            line_of[&c.id],
            format!("coflow {} depends on itself through its parents (a dependency cycle)", c.id),
        )),
    }
}

/// Writes a workload as `coflow-jsonl`, one coflow per line with every field spelled out.
///
/// An invalid workload gives [`TraceError::Invalid`], and a failing writer [`TraceError::Write`].
pub fn write_jsonl(w: &Workload, out: &mut impl Write) -> Result<(), TraceError> {
    w.validate()?;
    let mut out = BufWriter::new(out);
    let header = Header { format: JSONL_FORMAT.to_string(), version: JSONL_VERSION, machines: w.machines };
    write_line(&mut out, &header)?;
    for c in &w.coflows {
        let record = CoflowRecord {
            id: c.id.get(),
            arrival_ns: c.arrival.get(),
            flows: c.flows.iter().map(|f| FlowRecord { src: f.src.0, dst: f.dst.0, bytes: f.size.get() }).collect(),
            deadline_ns: c.deadline.map(Nanos::get),
            weight: c.weight,
            parents: c.parents.iter().map(|p| p.get()).collect(),
            sizes_known: c.sizes_known,
            name: c.name.clone(),
        };
        write_line(&mut out, &record)?;
    }
    out.flush().map_err(TraceError::Write)
}

/// Writes one value as a line of JSON.
fn write_line(out: &mut impl Write, value: &impl Serialize) -> Result<(), TraceError> {
    serde_json::to_writer(&mut *out, value).map_err(|e| TraceError::Write(e.into()))?;
    out.write_all(b"\n").map_err(TraceError::Write)
}

/// A [`TraceError::Json`].
fn json_error(line: usize, message: String) -> TraceError {
    TraceError::Json { line, column: None, message }
}

/// A serde error on line `line`, where the line was expected to hold `what`.
///
/// Each line is parsed on its own, so serde's position is always "line 1"; keep only the column.
fn serde_error(line: usize, e: &serde_json::Error, what: &str) -> TraceError {
    let text = e.to_string();
    let message = text.rsplit_once(" at line ").map_or(text.as_str(), |(m, _)| m);
    let column = Some(e.column()).filter(|&c| c > 0);
    TraceError::Json { line, column, message: format!("{message} (expected {what} object)") }
}

/// An example header, for error messages.
fn example_header() -> String {
    format!(r#"{{"format":"{JSONL_FORMAT}","version":{JSONL_VERSION},"machines":150}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_fields_take_defaults() {
        let text = r#"{"format":"coflow-jsonl","version":1,"machines":2}
{"id":1,"arrival_ns":5,"flows":[{"src":0,"dst":1,"bytes":10}]}
"#;
        let w = parse_jsonl(text).unwrap();
        let c = &w.coflows[0];
        assert_eq!(c, &Coflow::new(CoflowId(1), Nanos(5), c.flows.clone()));
        assert_eq!(c.flows, [Flow { src: MachineId(0), dst: MachineId(1), size: Bytes(10) }]);
    }

    #[test]
    fn serde_errors_keep_the_column_not_the_inner_line() {
        let text = "{\"format\":\"coflow-jsonl\",\"version\":1,\"machines\":2}\n{\"id\":1,\"nope\":3}\n";
        let Err(TraceError::Json { line, column, message }) = parse_jsonl(text) else {
            panic!("expected a JSON error")
        };
        assert_eq!((line, column), (2, Some(14)));
        assert!(message.contains("unknown field `nope`"), "{message}");
        assert!(!message.contains("at line"), "{message}");
    }

    /// A header, a coflow or a flow written as an array of its fields in order is refused, naming
    /// its line: the format is objects with named fields.
    #[test]
    fn arrays_in_place_of_objects_are_refused() {
        let header = r#"{"format":"coflow-jsonl","version":1,"machines":4}"#;
        for (text, at) in [
            (r#"["coflow-jsonl",1,4]"#.to_string(), 1),
            (format!("{header}\n[1,0,[{{\"src\":0,\"dst\":1,\"bytes\":100}}]]"), 2),
            (format!("{header}\n\n{{\"id\":1,\"arrival_ns\":0,\"flows\":[[0,1,100]]}}"), 3),
        ] {
            let Err(TraceError::Json { line, message, .. }) = parse_jsonl(&text) else {
                panic!("{text}: expected a JSON error")
            };
            assert_eq!(line, at, "{text}");
            assert!(message.contains("invalid type: sequence, expected a JSON object"), "{text}: {message}");
        }
    }
}
