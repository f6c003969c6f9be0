//! The synthetic generator: bin mix, byte shares, determinism, validity and load.

use coflow_core::{Bin, Bytes, NARROW_MAX_FLOWS, Nanos, Rate};
use coflow_trace::synth::{MAX_COFLOWS, SynthConfig, SynthError, generate};
use coflow_trace::{parse_benchmark, stats, write_benchmark};

/// The average port load a workload puts on a fabric of `port`-rate ports, over its arrival span.
fn realized_load(w: &coflow_core::Workload, port: Rate) -> f64 {
    let s = stats(w);
    let crossing = (s.total.get() - s.local.get()) as f64;
    crossing / (w.machines as f64 * port.bytes_per_sec() * s.arrival_span.as_secs_f64())
}

#[test]
fn bin_mix_follows_varys_table_4() {
    let cfg = SynthConfig { coflows: 2000, ..SynthConfig::default() };
    let s = stats(&generate(&cfg));
    eprintln!("2000 coflows on 50 machines:\n{s}");
    eprintln!("expected byte shares (SN, LN, SW, LW): {:?}", cfg.expected_byte_shares());
    for (b, target) in s.bins.iter().zip([0.52, 0.16, 0.15, 0.17]) {
        assert!((b.coflow_share - target).abs() < 0.03, "{}: {:.3} of coflows, want {target}", b.bin, b.coflow_share);
    }
    assert!(s.bins[3].byte_share > 0.90, "LW holds {:.3} of bytes", s.bins[3].byte_share);
    assert!(s.bins[0].byte_share < 0.001, "SN holds {:.4} of bytes", s.bins[0].byte_share);
}

#[test]
fn byte_shares_approach_table_4_on_150_machines() {
    let cfg = SynthConfig { coflows: 2000, machines: 150, ..SynthConfig::default() };
    let s = stats(&generate(&cfg));
    let expected = cfg.expected_byte_shares();
    for (b, e) in s.bins.iter().zip(expected) {
        eprintln!("{}: {:.3}% of bytes (expected {:.3}%)", b.bin, 100.0 * b.byte_share, 100.0 * e);
    }
    assert!(expected[3] > 0.99);
    assert!(s.bins[3].byte_share > 0.97, "LW holds {:.3} of bytes", s.bins[3].byte_share);
}

#[test]
fn default_workload() {
    let cfg = SynthConfig::default();
    let w = generate(&cfg);
    let s = stats(&w);
    eprintln!("the default workload:\n{s}");
    let expected = cfg.expected_load(Rate::GBPS);
    let realized = realized_load(&w, Rate::GBPS);
    eprintln!(
        "{:.2} GiB per coflow expected; port load at 1 Gbit/s: {expected:.3} expected, {realized:.3} realized",
        cfg.expected_bytes_per_coflow() / (1u64 << 30) as f64
    );
    assert!((0.5..=0.7).contains(&expected), "expected load {expected}");
    assert_eq!((s.coflows, s.machines), (200, 50));
    assert_eq!(w.coflows[0].arrival, Nanos::ZERO);
}

#[test]
fn interarrival_for_load_inverts_expected_load() {
    let cfg = SynthConfig::default();
    let port: Rate = "10Gbps".parse().unwrap();
    let ia = cfg.interarrival_for_load(0.8, port);
    let load = SynthConfig { mean_interarrival: ia, ..cfg }.expected_load(port);
    assert!((load - 0.8).abs() < 1e-6, "{load}");
}

#[test]
fn same_seed_same_workload() {
    let cfg = SynthConfig { seed: 42, ..SynthConfig::default() };
    assert_eq!(generate(&cfg), generate(&cfg.clone()));
}

#[test]
fn different_seed_different_workload() {
    let a = generate(&SynthConfig { seed: 1, ..SynthConfig::default() });
    let b = generate(&SynthConfig { seed: 2, ..SynthConfig::default() });
    assert_ne!(a, b);
}

#[test]
fn coflows_are_valid_shuffles_in_their_bins() {
    for machines in [1, 3, 8, 50, 200] {
        let cfg = SynthConfig { machines, coflows: 300, seed: u64::from(machines), ..SynthConfig::default() };
        let w = generate(&cfg);
        w.validate().unwrap();
        assert_eq!(w.coflows.len(), 300);
        for c in &w.coflows {
            assert!(c.flows.iter().all(|f| f.src.0 < machines && f.dst.0 < machines));
            assert!(!c.flows.is_empty());
            assert!(c.flows.iter().all(|f| f.size.get() >= 1));
            assert!(c.longest_flow() >= cfg.length_min && c.longest_flow() <= cfg.length_max);
            assert_eq!(c.arrival.get() % 1_000_000, 0, "arrivals are whole milliseconds");
            if machines <= 7 {
                assert!(c.width() <= NARROW_MAX_FLOWS, "a {machines}-machine fabric cannot host a wide coflow");
            }
        }
        // Every generated workload is a set of shuffles the benchmark format can carry.
        let mut out = Vec::new();
        write_benchmark(&w, &mut out).unwrap();
        assert_eq!(parse_benchmark(std::str::from_utf8(&out).unwrap()).unwrap(), w);
    }
}

#[test]
fn widths_reach_thousands_of_flows() {
    let cfg = SynthConfig { coflows: 500, machines: 150, ..SynthConfig::default() };
    let w = generate(&cfg);
    let widest = w.coflows.iter().map(|c| c.width()).max().unwrap_or(0);
    let narrowest = w.coflows.iter().map(|c| c.width()).min().unwrap_or(0);
    eprintln!("widths from {narrowest} to {widest} flows on 150 machines");
    assert_eq!(narrowest, 1);
    assert!(widest >= 5000, "widest coflow has {widest} flows");
}

#[test]
fn small_fabrics_fold_wide_shares_into_narrow_ones() {
    let cfg = SynthConfig { machines: 4, coflows: 1000, ..SynthConfig::default() };
    let s = stats(&generate(&cfg));
    assert_eq!(s.bins[2].coflows + s.bins[3].coflows, 0);
    // SN takes SW's share (0.52 + 0.15) and LN takes LW's (0.16 + 0.17).
    assert!((s.bins[0].coflow_share - 0.67).abs() < 0.05, "{}", s.bins[0].coflow_share);
}

#[test]
fn invalid_configs_are_rejected() {
    let d = SynthConfig::default();
    assert_eq!(SynthConfig { machines: 0, ..d.clone() }.validate(), Err(SynthError::NoMachines));
    assert!(matches!(SynthConfig { bin_mix: [0.0; 4], ..d.clone() }.validate(), Err(SynthError::BadMix(_))));
    assert!(matches!(
        SynthConfig { bin_mix: [1.0, -1.0, 0.0, 0.0], ..d.clone() }.validate(),
        Err(SynthError::BadMix(_))
    ));
    assert!(matches!(
        SynthConfig { length_min: Bytes(6 << 20), ..d.clone() }.validate(),
        Err(SynthError::BadLengths { .. })
    ));
    assert!(matches!(
        SynthConfig { length_max: Bytes(1 << 20), ..d.clone() }.validate(),
        Err(SynthError::BadLengths { .. })
    ));
    assert!(matches!(SynthConfig { length_tail: f64::NAN, ..d.clone() }.validate(), Err(SynthError::BadTail(_))));
    assert_eq!(SynthConfig { reducer_skew: 0.0, ..d.clone() }.validate(), Err(SynthError::BadSkew(0.0)));
    assert_eq!(d.validate(), Ok(()));
    // Wide coflows grow with the square of the machines: 20 coflows on 100,000 machines would
    // be billions of flows, refused before a byte is drawn.
    let huge = SynthConfig { coflows: 20, machines: 100_000, ..d.clone() };
    assert!(matches!(huge.validate(), Err(SynthError::TooManyFlows { coflows: 20, machines: 100_000, .. })));
    assert!(huge.validate().unwrap_err().to_string().contains("use fewer machines or coflows"));
    // On one machine every coflow has one flow (one mapper, one reducer): as many coflows as a
    // workload may have are taken.
    assert_eq!(SynthConfig { coflows: MAX_COFLOWS, machines: 1, ..d.clone() }.validate(), Ok(()));
}

/// The flow estimate that guards memory is about what the generator makes.
#[test]
fn expected_flows_are_about_what_is_generated() {
    for (coflows, machines) in [(150, 300), (200, 50), (400, 200)] {
        let cfg = SynthConfig { coflows, machines, ..SynthConfig::default() };
        assert_eq!(cfg.validate(), Ok(()));
        let (expected, made) = (cfg.expected_flows(), generate(&cfg).flow_count() as f64);
        assert!(made > 0.5 * expected && made < 1.5 * expected, "{coflows} on {machines}: {made} vs {expected}");
    }
    // On a fabric of a machine or two, it is a bound: at most the machines squared per coflow.
    for machines in [1, 2] {
        let cfg = SynthConfig { coflows: 2_000, machines, ..SynthConfig::default() };
        let (expected, made) = (cfg.expected_flows(), generate(&cfg).flow_count() as f64);
        assert!(made <= expected && expected <= 2_000.0 * f64::from(machines * machines), "{made} vs {expected}");
    }
}

#[test]
fn a_single_bin_can_be_asked_for() {
    let cfg = SynthConfig { bin_mix: [0.0, 0.0, 0.0, 1.0], coflows: 50, ..SynthConfig::default() };
    assert!(generate(&cfg).coflows.iter().all(|c| c.bin() == Bin::LW));
}
