//! `coflow testbed spark`: a Spark standalone cluster on a 3-host testbed, a few jobs from the
//! synthetic workload and the named jobs, on Spark's own shuffle and through the plugin under
//! `varys`, every result identical, and nothing left behind. Skipped, saying why, without root or
//! without what `scripts/spark-dist` prepares. `scripts/test-all` runs it in its spark section,
//! after `scripts/spark-dist`, and skips it in its rust section.

use std::process::Command;

use super::{coflow, tmp};

/// Why the Spark testbed cannot run here, if it cannot.
fn cannot_run() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1));
    if uid != Some("0") {
        return Some("not root: network namespaces need root".into());
    }
    if Command::new("java").arg("-version").output().is_err() {
        return Some("no `java`".into());
    }
    let dist = coflow_testbed::spark::SparkDist::default_dir();
    if let Err(e) = coflow_testbed::spark::SparkDist::at(&dist) {
        return Some(e.to_string());
    }
    None
}

#[test]
fn jobs_through_the_plugin_on_shaped_links_match_sparks_own_shuffle() {
    if let Some(why) = cannot_run() {
        eprintln!("skipping: {why}");
        return;
    }
    let json = tmp("testbed-spark.json");
    let out = coflow()
        .args(["testbed", "spark", "--hosts", "3", "--link", "200Mbps", "--modes", "spark,varys"])
        .args(["--coflows", "5", "--total-bytes", "20000000", "--executor-cores", "2", "--sort-records", "50000"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let modes = v["modes"].as_array().unwrap();
    assert_eq!(modes.iter().map(|m| m["mode"].as_str().unwrap()).collect::<Vec<_>>(), ["spark", "varys"]);
    for m in modes {
        assert_eq!(m["jobs"], 5, "{m}");
        assert_eq!(m["completed"], 5, "{m}");
        assert_eq!(m["identical"], true, "{m}");
        for f in ["avg_jct_s", "p95_jct_s", "avg_comm_stage_s"] {
            assert!(m[f].as_f64().unwrap() > 0.0, "{f} in {m}");
        }
        assert!(m["avg_shuffle_read_s"].as_f64().is_some(), "{m}");
    }
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2 * (5 + 4), "five trace jobs and four named jobs per mode");
    let trace_bytes: u64 = jobs
        .iter()
        .filter(|j| j["mode"] == "varys" && j["kind"] == "trace")
        .map(|j| j["shuffle_bytes"].as_u64().unwrap())
        .sum();
    assert!(trace_bytes >= v["trace_bytes"].as_u64().unwrap(), "every trace byte was read: {trace_bytes}");
    for j in jobs {
        assert_eq!(j["identical"], true, "{j}");
        for f in ["name", "mode", "jct_s", "shuffle_bytes", "comm_stage_s"] {
            assert!(!j[f].is_null(), "{f} in {j}");
        }
    }
    // Nothing of the runs is left: no namespace, no process naming a testbed of this run.
    let prefixes: Vec<&str> = stdout
        .split_whitespace()
        .filter(|w| w.starts_with("cfb") && w.len() == 9 && w[3..].chars().all(|c| c.is_ascii_hexdigit()))
        .collect();
    assert_eq!(prefixes.len(), 2, "one testbed per mode: {stdout}");
    let netns =
        String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).into_owned();
    let ps = String::from_utf8_lossy(&Command::new("ps").args(["-eo", "args"]).output().unwrap().stdout).into_owned();
    for p in prefixes {
        assert!(!netns.contains(p), "namespace of {p} left: {netns}");
        assert!(!ps.lines().any(|l| l.contains(p) && !l.starts_with("ps ")), "process of {p} left");
    }
}
