//! Workload statistics: counts, shares, machines, arrivals, table and JSON.

use coflow_core::{Bin, Bytes, Nanos, Workload};
use coflow_trace::stats;

#[test]
fn counts_flows_bytes_and_bins() {
    let w = crate::small_workload();
    let s = stats(&w);
    assert_eq!((s.coflows, s.flows, s.local_flows), (2, 5, 1));
    assert_eq!(s.total, Bytes(512 + 512 + 1024 + 1024 + (6 << 20)));
    assert_eq!(s.local, Bytes(1024));
    assert_eq!((s.machines, s.machines_used), (4, 4));
    assert_eq!(
        (s.first_arrival, s.last_arrival, s.arrival_span),
        (Nanos(0), Nanos::from_millis(10), Nanos::from_millis(10))
    );
    let bins: Vec<(Bin, usize)> = s.bins.iter().map(|b| (b.bin, b.coflows)).collect();
    assert_eq!(bins, [(Bin::SN, 1), (Bin::LN, 1), (Bin::SW, 0), (Bin::LW, 0)]);
    assert_eq!(s.bins[0].coflow_share, 0.5);
    assert_eq!(s.bins[1].bytes, Bytes(6 << 20));
    let shares: f64 = s.bins.iter().map(|b| b.byte_share).sum();
    assert!((shares - 1.0).abs() < 1e-12);
}

#[test]
fn empty_workload_has_zero_shares() {
    let s = stats(&Workload::default());
    assert_eq!((s.coflows, s.flows, s.machines_used), (0, 0, 0));
    assert!(s.bins.iter().all(|b| b.coflow_share == 0.0 && b.byte_share == 0.0));
    let json = serde_json::to_string(&s).unwrap();
    assert!(!json.contains("null"), "{json}");
}

#[test]
fn prints_a_table() {
    let text = stats(&crate::small_workload()).to_string();
    assert!(text.contains("flows     5 (1 local"), "{text}");
    assert!(text.contains("machines  4 (4 used)"), "{text}");
    let ln = text.lines().find(|l| l.starts_with("LN")).unwrap();
    assert!(ln.contains("50.00%"), "{ln}");
}

#[test]
fn serializes_to_json_with_units_in_names() {
    let v = serde_json::to_value(stats(&crate::small_workload())).unwrap();
    assert_eq!(v["coflows"], 2);
    assert_eq!(v["local_flows"], 1);
    assert_eq!(v["total_bytes"], 512 + 512 + 1024 + 1024 + (6 << 20));
    assert_eq!(v["arrival_span_ns"], 10_000_000);
    assert_eq!(v["bins"][1]["bin"], "LN");
    assert_eq!(v["bins"][1]["coflow_share"], 0.5);
}
