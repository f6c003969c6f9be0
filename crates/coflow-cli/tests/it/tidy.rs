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

/// The modules of `coflow-cli` that are no command: options and printing several commands share.
/// Any other module is a command's, and no module may import a command's module but its own.
const SHARED: &[&str] = &["model", "parallel", "plan", "plot", "policies", "table", "wan", "workload"];

/// Every module `text` names through a `crate::` path, `crate::{a, b::C}` groups included.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut found = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        // `coflow_crate::` or `my_crate::` are other paths.
        if text[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The first identifier of each top-level item of the group.
            let (mut depth, mut start) = (0, true);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        found.insert(ident(&group[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

#[test]
fn no_cli_module_imports_another_commands_module() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        if path.extension().is_some_and(|e| e == "rs") && name != "main" {
            modules.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    for shared in SHARED {
        assert!(modules.contains_key(*shared), "SHARED names {shared}, which is no module of src/");
    }
    // The parser is real: known imports are found.
    assert!(crate_paths(&modules["sim"]).contains("plan"), "sim.rs uses the shared plan");
    assert_eq!(
        crate_paths("use crate::{plot, table::{a, b}, wan};\nx = crate::sim::run(); my_crate::demo"),
        ["plot", "sim", "table", "wan"].iter().map(|s| s.to_string()).collect()
    );
    let mut wrong = Vec::new();
    for (name, text) in &modules {
        for used in crate_paths(text) {
            if used != *name && !SHARED.contains(&used.as_str()) && modules.contains_key(&used) {
                wrong.push(format!("src/{name}.rs uses crate::{used}, another command's module"));
            }
        }
    }
    assert!(wrong.is_empty(), "move what is shared into a module that is no command:\n{}", wrong.join("\n"));
}
