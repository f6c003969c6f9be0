//! Round trips between the formats, and what the benchmark writer refuses to write.

use coflow_core::{Coflow, CoflowId, Flow, MIB, MachineId, Nanos, Workload};
use coflow_trace::{
    TraceError, TraceFormat, parse_benchmark, parse_jsonl, read_trace, write_benchmark, write_jsonl, write_trace,
};
use proptest::prelude::*;

use crate::flow;

/// The workload written as JSON Lines and read back.
fn via_jsonl(w: &Workload) -> Workload {
    let mut out = Vec::new();
    write_jsonl(w, &mut out).unwrap();
    parse_jsonl(std::str::from_utf8(&out).unwrap()).unwrap()
}

/// The workload written in the coflow-benchmark format and read back.
fn via_benchmark(w: &Workload) -> Workload {
    let mut out = Vec::new();
    write_benchmark(w, &mut out).unwrap();
    parse_benchmark(std::str::from_utf8(&out).unwrap()).unwrap()
}

const SAMPLE: &str = "\
6 3
1 0 1 2 1 5:1.0
2 120 3 0 1 2 2 3:1.0 2:7.5
3 120 2 4 5 3 0:0.001 1:100 5:3.25
";

#[test]
fn benchmark_to_jsonl_and_back() {
    let w = parse_benchmark(SAMPLE).unwrap();
    assert_eq!(via_jsonl(&w), w);
}

#[test]
fn benchmark_to_benchmark_and_back() {
    let w = parse_benchmark(SAMPLE).unwrap();
    assert_eq!(via_benchmark(&w), w);
}

#[test]
fn benchmark_writer_keeps_whole_megabytes_as_written() {
    let text = "150 1\n2 10833 2 104 132 1 140:48.0\n";
    let mut out = Vec::new();
    write_benchmark(&parse_benchmark(text).unwrap(), &mut out).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), text);
}

/// Asserts the benchmark writer refuses `c` (in a 4-machine workload), saying `needle`, and writes
/// nothing.
fn assert_not_representable(c: Coflow, needle: &str) {
    assert_not_representable_after(Vec::new(), c, needle);
}

/// As `assert_not_representable`, with representable coflows `before` in the workload too.
fn assert_not_representable_after(mut before: Vec<Coflow>, c: Coflow, needle: &str) {
    before.push(c);
    let w = Workload::new(4, before).unwrap();
    let mut out = Vec::new();
    match write_benchmark(&w, &mut out) {
        Err(TraceError::NotRepresentable { coflow, reason }) => {
            assert_eq!(coflow, CoflowId(1));
            assert!(reason.contains(needle), "reason {reason:?} lacks {needle:?}");
        }
        other => panic!("expected NotRepresentable, got {other:?}"),
    }
    assert!(out.is_empty(), "the writer wrote {} bytes", out.len());
}

#[test]
fn benchmark_writer_refuses_what_it_cannot_carry() {
    let base = Coflow::new(CoflowId(1), Nanos::from_millis(3), vec![flow(0, 1, MIB)]);
    assert_not_representable(Coflow { deadline: Some(Nanos::from_secs(1)), ..base.clone() }, "deadline");
    assert_not_representable(Coflow { weight: 2.0, ..base.clone() }, "weight");
    assert_not_representable(Coflow { weight: 1e300, ..base.clone() }, "its weight is 1e300, and");
    // A coflow cannot be its own parent (a cycle): the parent is a representable coflow 0.
    let parent = Coflow { id: CoflowId(0), ..base.clone() };
    assert_not_representable_after(vec![parent], Coflow { parents: vec![CoflowId(0)], ..base.clone() }, "parent");
    assert_not_representable(Coflow { sizes_known: false, ..base.clone() }, "unknown");
    assert_not_representable(Coflow { name: Some("x".into()), ..base.clone() }, "name");
    assert_not_representable(Coflow { arrival: Nanos(1_500_000), ..base.clone() }, "milliseconds");
    assert_not_representable(Coflow { flows: vec![], ..base.clone() }, "no flows");
    // Two mappers feed reducer 2 but only one feeds reducer 3.
    let partial = vec![flow(0, 2, 5), flow(1, 2, 5), flow(0, 3, 5)];
    assert_not_representable(Coflow { flows: partial, ..base.clone() }, "not a full mapper × reducer product");
    // Two sizes into one reducer.
    let uneven = vec![flow(0, 2, 5), flow(1, 2, 6)];
    assert_not_representable(Coflow { flows: uneven, ..base.clone() }, "one size per reducer");
}

#[test]
fn write_trace_leaves_no_file_when_not_representable() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("coflow-trace-not-representable.txt");
    let _ = std::fs::remove_file(&path);
    let c = Coflow { weight: 3.0, ..Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 1, 1)]) };
    let w = Workload::new(2, vec![c]).unwrap();
    assert!(matches!(write_trace(&w, &path, TraceFormat::Benchmark), Err(TraceError::NotRepresentable { .. })));
    assert!(!path.exists());
    // The JSON Lines format carries the weight.
    let path = dir.join("coflow-trace-weighted.jsonl");
    write_trace(&w, &path, TraceFormat::Jsonl).unwrap();
    assert_eq!(read_trace(&path).unwrap(), w);
}

/// Any valid workload: random flows (local ones included), arrivals, deadlines, weights, parents
/// (always earlier coflows, so there is no cycle), size flags and names.
pub(crate) fn arb_workload() -> impl Strategy<Value = Workload> {
    (1u32..8, prop::collection::btree_set(any::<u64>(), 0..8))
        .prop_flat_map(|(machines, ids)| {
            let ids: Vec<u64> = ids.into_iter().collect();
            let n = ids.len();
            let coflow = (
                any::<u64>(),
                prop::collection::vec((0..machines, 0..machines, 0u64..1 << 50), 0..6),
                prop::option::of(any::<u64>()),
                prop_oneof![
                    Just(1.0),
                    1e-9f64..1e9,
                    any::<f64>().prop_filter("positive", |w| w.is_finite() && *w > 0.0)
                ],
                prop::collection::vec(any::<prop::sample::Index>(), 0..3),
                any::<bool>(),
                prop::option::of(".{0,12}"),
            );
            (Just(machines), Just(ids), prop::collection::vec(coflow, n))
        })
        .prop_map(|(machines, ids, raw)| {
            let coflows = raw
                .into_iter()
                .enumerate()
                .map(|(i, (arrival, flows, deadline, weight, parents, sizes_known, name))| Coflow {
                    id: CoflowId(ids[i]),
                    arrival: Nanos(arrival),
                    flows: flows
                        .into_iter()
                        .map(|(s, d, b)| Flow { src: MachineId(s), dst: MachineId(d), size: coflow_core::Bytes(b) })
                        .collect(),
                    deadline: deadline.map(Nanos),
                    weight,
                    parents: if i == 0 { vec![] } else { parents.iter().map(|p| CoflowId(ids[p.index(i)])).collect() },
                    sizes_known,
                    name,
                })
                .collect();
            Workload::new(machines, coflows).expect("generated workloads are valid")
        })
}

/// Workloads the benchmark format can carry: mapper × reducer shuffles (repeated machines
/// allowed) with one size per reducer and whole-millisecond arrivals.
pub(crate) fn arb_shuffle_workload() -> impl Strategy<Value = Workload> {
    (1u32..8, prop::collection::btree_set(any::<u32>(), 0..8))
        .prop_flat_map(|(machines, ids)| {
            let ids: Vec<u32> = ids.into_iter().collect();
            let n = ids.len();
            let coflow = (
                0u64..1 << 40,
                prop::collection::vec(0..machines, 1..5),
                prop::collection::vec((0..machines, prop_oneof![0u64..2048, 0u64..1 << 40]), 1..5),
            );
            (Just(machines), Just(ids), prop::collection::vec(coflow, n))
        })
        .prop_map(|(machines, ids, raw)| {
            let coflows = raw
                .into_iter()
                .zip(ids)
                .map(|((arrival_ms, mappers, reducers), id)| {
                    let flows = reducers
                        .iter()
                        .flat_map(|&(dst, size)| mappers.iter().map(move |&src| flow(src, dst, size)))
                        .collect();
                    Coflow::new(CoflowId(u64::from(id)), Nanos::from_millis(arrival_ms), flows)
                })
                .collect();
            Workload::new(machines, coflows).expect("generated workloads are valid")
        })
}

proptest! {
    #[test]
    fn any_workload_survives_jsonl(w in arb_workload()) {
        prop_assert_eq!(via_jsonl(&w), w);
    }

    #[test]
    fn any_shuffle_survives_benchmark(w in arb_shuffle_workload()) {
        let back = via_benchmark(&w);
        prop_assert_eq!(&back, &w);
        prop_assert_eq!(via_jsonl(&back), w);
    }
}
