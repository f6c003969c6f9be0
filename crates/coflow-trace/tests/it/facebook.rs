//! The public Facebook trace, read from `../shared/traces` when it is there.

use std::path::Path;
use std::time::Instant;

use coflow_core::Bin;
use coflow_trace::{parse_benchmark, parse_jsonl, read_benchmark, read_trace, stats, write_benchmark, write_jsonl};

const FB_TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/FB2010-1Hr-150-0.txt");

#[test]
fn facebook_trace() {
    let path = Path::new(FB_TRACE);
    if !path.exists() {
        eprintln!("skipping: ../shared/traces/FB2010-1Hr-150-0.txt not found");
        return;
    }
    let text = std::fs::read_to_string(path).unwrap();
    let start = Instant::now();
    let w = parse_benchmark(&text).unwrap();
    let elapsed = start.elapsed();
    eprintln!("parsed the Facebook trace in {:.1} ms", elapsed.as_secs_f64() * 1e3);

    assert_eq!(w.coflows.len(), 526);
    assert_eq!(w.flow_count(), 706_397);
    assert_eq!(w.machines, 150);
    let s = stats(&w);
    eprintln!("{s}");
    for b in &s.bins {
        eprintln!(
            "{}: {} coflows ({:.2}%), {:.3}% of bytes",
            b.bin,
            b.coflows,
            100.0 * b.coflow_share,
            100.0 * b.byte_share
        );
    }
    // Facts of the trace under our reading (MB = 2^20 bytes, local flows kept).
    assert_eq!(s.local_flows, 4911);
    assert_eq!(s.machines_used, 147);
    let counts: Vec<(Bin, usize)> = s.bins.iter().map(|b| (b.bin, b.coflows)).collect();
    assert_eq!(counts, [(Bin::SN, 309), (Bin::LN, 90), (Bin::SW, 59), (Bin::LW, 68)]);
    assert!(s.bins[3].byte_share > 0.99);

    // Both readers agree, and the trace survives both writers.
    assert_eq!(read_trace(path).unwrap(), w);
    assert_eq!(read_benchmark(path).unwrap(), w);
    let mut jsonl = Vec::new();
    write_jsonl(&w, &mut jsonl).unwrap();
    assert_eq!(parse_jsonl(std::str::from_utf8(&jsonl).unwrap()).unwrap(), w);
    let mut bench = Vec::new();
    write_benchmark(&w, &mut bench).unwrap();
    // Whole-megabyte reducers split over mappers that do not divide them are written back as the
    // exact bytes, so the text may differ while the workload does not.
    assert_eq!(parse_benchmark(std::str::from_utf8(&bench).unwrap()).unwrap(), w);
}
