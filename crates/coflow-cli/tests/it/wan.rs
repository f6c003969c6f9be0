//! End-to-end wide-area runs: `coflow sim --wan`, its report, and its errors.

use super::{coflow, facebook_trace, tmp};

#[test]
fn wan_runs_report_siphon_figures_against_mrtf_and_reproduce_for_a_seed() {
    let run = |name: &str| {
        let json = tmp(name);
        let out = coflow()
            .args(["sim", "--coflows", "60", "--machines", "30", "--wan", "default", "--multipath"])
            .args(["--policies", "siphon-mc,mrtf+lfgf", "--json"])
            .arg(&json)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8(out.stdout).unwrap(), std::fs::read_to_string(&json).unwrap())
    };
    let (table, json) = run("wan-a.json");
    for needle in ["siphon-mc", "mrtf+lfgf", "p90 s", "vs mrtf", "relayed GB", "by total size", "multi-path on"] {
        assert!(table.contains(needle), "no {needle:?} in\n{table}");
    }
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["baseline"], "mrtf");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        assert_eq!(r["completed"], 60, "{r}");
        assert_eq!(r["bins"].as_array().unwrap().len(), 4, "{r}");
        for key in ["avg_cct_s", "p90_cct_s", "factor_vs_baseline", "relayed_bytes"] {
            assert!(r[key].is_number(), "{key} in {r}");
        }
    }
    assert_eq!(run("wan-b.json").1, json, "same seed, same bytes");
}

/// Deadlines on the wide area are reported as on the big switch: the table's deadline section
/// and each row's deadline figures in the JSON, which a run without deadlines does not carry.
#[test]
fn wan_runs_with_deadlines_report_what_was_met_and_rejected() {
    let json = tmp("wan-deadlines.json");
    let out = coflow()
        .args(["sim", "--coflows", "60", "--machines", "30", "--wan", "default", "--deadlines"])
        .args(["--policies", "varys-deadline,vc", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("met among admitted") && table.contains("rejected"), "{table}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for r in report["results"].as_array().unwrap() {
        let met = r["deadline_met_fraction"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&met) && r["rejected"].is_u64() && r["admitted_fraction"].is_f64(), "{r}");
    }
    let out = coflow().args(["sim", "--coflows", "20", "--machines", "30", "--wan", "default", "--json", "-"]).output();
    let report: serde_json::Value = serde_json::from_slice(&out.unwrap().stdout).unwrap();
    assert!(report["results"][0].get("deadline_met_fraction").is_none(), "{}", report["results"][0]);
}

#[test]
fn bad_topologies_are_clear_errors() {
    let path = tmp("bad-topology.json");
    std::fs::write(&path, r#"{"datacenters": ["a", "b"], "links": [{"from": "a", "to": "b", "constant_gbps": 1}]}"#)
        .unwrap();
    let out = coflow().args(["sim", "--coflows", "5", "--machines", "4", "--wan"]).arg(&path).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"no link from "b" to "a""#), "{err}");
    let out = coflow().args(["sim", "--coflows", "5", "--wan", "default", "--policies", "mrtf,pfp"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("skipping pfp: they assume the big switch"));
    let out = coflow().args(["sim", "--coflows", "5", "--wan", "default", "--policies", "edf"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("no policy left"));
    let out = coflow().args(["sim", "--wan", "/nonexistent/topology.json"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("reading topology"));
}

#[test]
fn the_facebook_trace_runs_on_the_default_wide_area() {
    let Some(trace) = facebook_trace() else { return };
    let json = tmp("fb-wan.json");
    let out = coflow()
        .args(["sim", "--wan", "default", "--policies", "siphon-mc,mrtf", "--trace"])
        .arg(&trace)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for r in report["results"].as_array().unwrap() {
        assert_eq!(r["completed"], 526, "{r}");
    }
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn wan_runs_write_one_csv_row_per_coflow_and_policy_matching_the_json() {
    let (csv, json) = (tmp("wan-rows.csv"), tmp("wan-rows.json"));
    let out = coflow()
        .args(["sim", "--coflows", "20", "--machines", "12", "--wan", "default", "--policies", "varys", "--csv"])
        .arg(&csv)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(coflow_sim::experiment::CSV_HEADER.trim_end()));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // Only the policies asked for, as on the big switch: the baseline `mrtf` runs but is not shown.
    assert_eq!(rows.len(), 20, "{text}");
    assert!(rows.iter().all(|r| r[0] == "varys" && r.len() == 11), "{text}");
    let ccts: Vec<f64> = rows.iter().map(|r| r[6].parse().unwrap()).collect();
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let avg = report["results"][0]["avg_cct_s"].as_f64().unwrap();
    assert!((ccts.iter().sum::<f64>() / 20.0 - avg).abs() < 1e-6, "{avg} against {ccts:?}");
}

/// What the wide area sets itself (the rates, the baseline) is said when a flag asks otherwise,
/// rather than dropped unsaid; the run goes on.
#[test]
fn flags_the_wide_area_does_not_use_are_named() {
    let out = coflow()
        .args(["sim", "--coflows", "5", "--machines", "6", "--wan", "default", "--policies", "mrtf"])
        .args(["--port-rate", "5Gbps", "--baseline", "pfp"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("--port-rate is not used on the wide area"), "{err}");
    assert!(err.contains("--baseline pfp is not used: the wide area compares with mrtf"), "{err}");
    // The default rate, however it is spelled, is no flag the wide area ignores.
    let quiet = coflow()
        .args(["sim", "--coflows", "5", "--machines", "6", "--wan", "default", "--policies", "mrtf"])
        .args(["--port-rate", "1000Mbps"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("is not used"), "no note without the flags");
    // Nor is no baseline at all.
    let none = coflow()
        .args(["sim", "--coflows", "5", "--machines", "6", "--wan", "default", "--policies", "mrtf", "--baseline", ""])
        .output()
        .unwrap();
    assert!(none.status.success());
    assert!(!String::from_utf8_lossy(&none.stderr).contains("is not used"), "no note for no baseline");
}

/// An empty `--wan` names no topology: refused by the flag in every command that takes one, as an
/// empty `--trace` is, rather than read as a topology file of no name.
#[test]
fn an_empty_wan_is_refused_by_its_flag_in_every_command() {
    let cases: &[&[&str]] = &[
        &["sim", "--coflows", "5", "--wan", ""],
        &["wan-bench", "--wan", ""],
        // Refused as the flags are parsed, before the trace is looked for.
        &["wan-order", "--trace", "never-read.jsonl", "--wan", ""],
    ];
    for args in cases {
        let out = coflow().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: a usage error: {err}");
        assert!(err.contains("a value is required for '--wan <FILE|default>'"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: refused before any output");
    }
}

/// `coflow wan-order --json -` writes its rows to standard output as JSON, each with the figures
/// its table row shows (the table then goes to standard error), and a second run gives the same
/// bytes.
#[test]
fn wan_order_writes_its_rows_as_json() {
    let trace = tmp("wan-order.txt");
    let out =
        coflow().args(["trace", "gen", "--coflows", "20", "--machines", "12", "-o"]).arg(&trace).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = || {
        let out = coflow()
            .args(["wan-order", "--trace"])
            .arg(&trace)
            .args(["--seeds", "1,2", "--skews", "constant,dips-0.1", "--loads", "1,4", "--json", "-"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    let (json, table) = run();
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["seeds"], serde_json::json!([1, 2]));
    let rows = report["rows"].as_array().unwrap();
    let shown: Vec<(&str, f64)> =
        rows.iter().map(|r| (r["skew"].as_str().unwrap(), r["load"].as_f64().unwrap())).collect();
    assert_eq!(shown, [("constant", 1.0), ("constant", 4.0), ("dips-0.1", 1.0), ("dips-0.1", 4.0)]);
    let lines: Vec<&str> = table.lines().filter(|l| !l.starts_with("skew")).collect();
    assert_eq!(lines.len(), 4, "{table}");
    for (r, line) in rows.iter().zip(lines) {
        assert_eq!(r["coflows"], 40, "20 coflows on each of 2 seeds: {r}");
        let cells: Vec<&str> = line.split_whitespace().collect();
        let ratio = r["ratio"].as_f64().unwrap();
        assert_eq!(cells[4], format!("{ratio:.3}x"), "{line} against {r}");
        assert_eq!(cells[5], r["decisions"].to_string(), "{line} against {r}");
        assert_eq!(cells[7], r["differing"].to_string(), "{line} against {r}");
    }
    assert_eq!(run().0, json, "same seeds, same bytes");
}
