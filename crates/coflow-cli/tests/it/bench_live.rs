//! `coflow bench-live`: its flags are bounded up front, and a run at the most phantom agents it
//! takes completes.

use crate::coflow;

/// Each numeric flag outside its range is refused before the cluster starts, naming the flag
/// and the range.
#[test]
fn bench_live_refuses_flags_out_of_range() {
    let cases: &[(&[&str], &str)] = &[
        (&["--phantoms", "1"], "--phantoms must be in [2, 128]"),
        (&["--phantoms", "129"], "--phantoms must be in [2, 128]"),
        (&["--phantoms", "1000000"], "--phantoms must be in [2, 128]"),
        (&["--window", "0"], "--window must be in [1, 256]"),
        (&["--window", "257"], "--window must be in [1, 256]"),
        (&["--window", "1000000"], "--window must be in [1, 256]"),
        (&["--gets", "0"], "--gets must be in [1, 100000]"),
        (&["--gets", "1000000000000"], "--gets must be in [1, 100000]"),
        (&["--load-rate", "1e300"], "--load-rate must be in [1, 10000000] messages a second"),
        (&["--load-rate", "1e-300"], "--load-rate must be in [1, 10000000] messages a second"),
        (&["--load-rate", "NaN"], "--load-rate must be in [1, 10000000] messages a second"),
    ];
    for (args, says) in cases {
        let started = std::time::Instant::now();
        // The other flags as small as a run takes, should the refusal be missing.
        let rest: &[&str] =
            if args[0] == "--gets" { &["--seconds", "0.1s"] } else { &["--seconds", "0.1s", "--gets", "1"] };
        let out = coflow().arg("bench-live").args(*args).args(rest).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: an error, not a panic: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: refused before any output");
        assert!(started.elapsed().as_secs() < 5, "{args:?}: refused up front");
    }
}

/// The most phantom agents `--phantoms` takes run to the end: the phantoms that hold coflows
/// and those of the load's pairs are on machines of their own.
#[test]
fn bench_live_runs_with_the_most_phantoms() {
    let out = coflow().args(["bench-live", "--phantoms", "128", "--seconds", "0.1s", "--gets", "1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("control throughput"), "{err}");
}
