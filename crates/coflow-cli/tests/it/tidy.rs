//! Architecture invariants checked from `cargo metadata`, so that breaking one fails a test.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Every crate each workspace crate depends on, directly or not (normal dependencies only).
fn closure() -> BTreeMap<String, BTreeSet<String>> {
    // Only this platform's dependencies: others (e.g. Windows-only crates) need not be downloaded.
    let rustc = Command::new("rustc").arg("-vV").output().expect("rustc runs");
    let host = String::from_utf8(rustc.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc -vV names the host");
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--filter-platform", &host])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: BTreeMap<String, String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap().to_string(), p["name"].as_str().unwrap().to_string()))
        .collect();
    let mut direct: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let me = names[node["id"].as_str().unwrap()].clone();
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null()))
            .map(|d| names[d["pkg"].as_str().unwrap()].clone())
            .collect();
        direct.insert(me, deps);
    }
    let mut all = BTreeMap::new();
    for krate in direct.keys() {
        let mut seen = BTreeSet::new();
        let mut stack = vec![krate.clone()];
        while let Some(k) = stack.pop() {
            for d in direct.get(&k).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    stack.push(d.clone());
                }
            }
        }
        all.insert(krate.clone(), seen);
    }
    all
}

#[test]
fn the_pure_crates_never_depend_on_async_or_protobuf() {
    let all = closure();
    for krate in ["coflow-core", "coflow-sched", "coflow-sim"] {
        let deps = &all[krate];
        for banned in ["tokio", "tonic", "prost", "mio", "async-trait", "futures"] {
            assert!(!deps.contains(banned), "{krate} depends on {banned}: the scheduling core must stay pure");
        }
    }
}

#[test]
fn dependencies_point_inward() {
    let all = closure();
    // The closure is real: known edges are in it.
    assert!(all["coflow-sim"].contains("coflow-sched") && all["coflow-cli"].contains("clap"));
    assert!(!all["coflow-core"].iter().any(|d| d.starts_with("coflow-")), "coflow-core depends on nothing of ours");
    assert!(!all["coflow-sched"].contains("coflow-sim"), "policies must not know the simulator");
    assert!(!all["coflow-sched"].contains("coflow-trace"), "policies must not know trace formats");
    assert!(all["coflow-py"].contains("coflow-sim"), "the check is real: the Python extension uses the simulator");
    assert!(!all["coflow-py"].contains("coflow-cli"), "the Python extension shares libraries, not the CLI");
}

/// Each workspace crate's direct normal dependencies.
fn direct() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn only_the_proto_crate_knows_protobuf() {
    let direct = direct();
    assert!(direct["coflow-proto"].contains("prost"), "the check is real: coflow-proto uses prost");
    for (krate, deps) in &direct {
        if krate != "coflow-proto" {
            for banned in ["prost", "prost-types", "tonic-prost", "protox"] {
                assert!(!deps.contains(banned), "{krate} depends on {banned}: only coflow-proto knows protobuf");
            }
        }
    }
    // The services reach each other only through the protocol, never through each other's crates.
    for (a, b) in [
        ("coflow-agent", "coflow-coordinator"),
        ("coflow-coordinator", "coflow-agent"),
        ("coflow-client", "coflow-coordinator"),
        ("coflow-client", "coflow-agent"),
    ] {
        assert!(!direct[a].contains(b), "{a} depends on {b}");
    }
}
