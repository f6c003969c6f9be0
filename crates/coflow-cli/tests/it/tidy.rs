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
const SHARED: &[&str] = &["model", "output", "plan", "plot", "policies", "table", "units", "wan", "workload"];

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

/// The top-level modules of a crate's `src/` (files, or folders with a `mod.rs`) with the text
/// of each (a folder's files together), `lib.rs` and `main.rs` aside.
fn modules_of(src: &std::path::Path) -> BTreeMap<String, String> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        if path.is_dir() {
            let mut text = String::new();
            for f in std::fs::read_dir(&path).unwrap() {
                let f = f.unwrap().path();
                if f.extension().is_some_and(|e| e == "rs") {
                    text.push_str(&std::fs::read_to_string(&f).unwrap());
                }
            }
            modules.insert(name, text);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            modules.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    modules
}

/// The circles of a graph: each strongly connected component of more than one node, its members
/// sorted (Tarjan's algorithm, small graphs only).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    fn reach(edges: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(n) = stack.pop() {
            for m in edges.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    stack.push(m.clone());
                }
            }
        }
        seen
    }
    let reachable: BTreeMap<&String, BTreeSet<String>> = edges.keys().map(|n| (n, reach(edges, n))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (n, r) in &reachable {
        if !r.contains(*n) || out.iter().any(|c| c.contains(n)) {
            continue;
        }
        let mut circle: Vec<String> =
            reachable.iter().filter(|(m, rm)| r.contains(**m) && rm.contains(*n)).map(|(m, _)| (*m).clone()).collect();
        circle.sort();
        if circle.len() > 1 {
            out.push(circle);
        }
    }
    out
}

/// Circles allowed, each to be broken: the test fails when one is gone, so that the list only
/// shrinks. None is left.
const KNOWN_CIRCLES: &[&str] = &[];

#[test]
fn no_import_circles_between_modules() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let krate = dir.file_name().unwrap().to_str().unwrap().to_string();
        let modules = modules_of(&src);
        let edges: BTreeMap<String, BTreeSet<String>> = modules
            .iter()
            .map(|(name, text)| {
                let used = crate_paths(text).into_iter().filter(|m| m != name && modules.contains_key(m)).collect();
                (name.clone(), used)
            })
            .collect();
        for circle in circles(&edges) {
            found.insert(format!("{krate}: {}", circle.join(", ")));
        }
    }
    let known: BTreeSet<String> = KNOWN_CIRCLES.iter().map(|s| s.to_string()).collect();
    let new: Vec<_> = found.difference(&known).collect();
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(new.is_empty(), "modules that import each other, directly or through others: {new:?}");
    assert!(gone.is_empty(), "circles broken (take them off KNOWN_CIRCLES): {gone:?}");
}

#[test]
fn the_circle_finder_finds_circles_and_only_them() {
    let graph = |pairs: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(circles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])), [["a", "b", "c"]]);
    assert!(circles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
}

/// The crates that speak the protocol: the protocol itself, the SDK, and the two services' gRPC
/// faces. Every other crate goes through the SDK or a service's library, never through messages.
const SPEAKS_PROTOBUF: &[&str] = &["coflow-proto", "coflow-client", "coflow-coordinator", "coflow-agent"];
/// Crates that still name protobuf messages today (FIXME: `coflow status` renders the SDK's
/// `StatusResponse`, a protobuf message, because `Client::status` returns it); the test fails
/// when one no longer does.
const KNOWN_PROTOBUF_USERS: &[&str] = &["coflow-cli"];

#[test]
fn protobuf_messages_appear_only_where_the_protocol_is_spoken() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut users = BTreeSet::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let krate = dir.file_name().unwrap().to_str().unwrap().to_string();
        let texts: Vec<(std::path::PathBuf, String)> =
            ["src", "benches"].iter().flat_map(|sub| rust_sources(&dir.join(sub))).collect();
        if texts.iter().any(|(_, t)| t.contains("coflow_proto::pb") || t.contains("pb::")) {
            users.insert(krate);
        }
    }
    assert!(users.contains("coflow-client"), "the check is real: the SDK speaks protobuf");
    let allowed: BTreeSet<&str> = SPEAKS_PROTOBUF.iter().chain(KNOWN_PROTOBUF_USERS).copied().collect();
    let wrong: Vec<_> = users.iter().filter(|u| !allowed.contains(u.as_str())).collect();
    assert!(wrong.is_empty(), "crates naming protobuf messages outside the protocol's edge: {wrong:?}");
    let gone: Vec<_> = KNOWN_PROTOBUF_USERS.iter().filter(|k| !users.contains(**k)).collect();
    assert!(gone.is_empty(), "no longer naming protobuf (take them off KNOWN_PROTOBUF_USERS): {gone:?}");
}

/// Every place outside coflow-sched where code behaves by a policy's name: a string literal that
/// is a registry name compared with `==` or matched (`"fair" =>`), as `file:line name`, test
/// modules and comments aside.
fn name_keyed_behaviour(names: &[&str], file: &str, src: &str) -> Vec<String> {
    let code = src.split("#[cfg(test)]").next().unwrap_or(src);
    let mut found = Vec::new();
    for (i, line) in code.lines().enumerate() {
        let line = line.split("//").next().unwrap_or("");
        for name in names {
            let lit = format!("\"{name}\"");
            for (at, _) in line.match_indices(&lit) {
                let before = line[..at].trim_end();
                let after = line[at + lit.len()..].trim_start();
                let matched = after.starts_with("=>") || (after.starts_with('|') && line.contains("=>"));
                if before.ends_with("==") || before.ends_with("!=") || after.starts_with("==") || matched {
                    found.push(format!("{file}:{} {name}", i + 1));
                }
            }
        }
    }
    found
}

/// Files that still behave by a policy's name today (FIXME: the reference model's counterparts
/// of each policy belong in the registry's entries; `coflow demo`'s headline compares `varys`
/// with `fair`); the test fails when one no longer does.
const KNOWN_NAME_KEYED: &[&str] = &["coflow-cli/src/demo.rs", "coflow-sim/src/coflowsim.rs"];

#[test]
fn policy_names_decide_behaviour_only_in_the_registry() {
    let names: Vec<&str> = coflow_sched::policy::NAMES
        .iter()
        .chain(coflow_sched::policy::WAN_NAMES)
        .chain(coflow_sched::policy::JOB_NAMES)
        .copied()
        .collect();
    // The checker is real.
    let probe = "fn f(p: &str) { if p == \"fair\" {} match p { \"varys\" | \"aalo\" => {} _ => {} } }\n\
                 // p == \"fair\"\nconst D: &str = \"fair\";\n#[cfg(test)]\nfn t() { p == \"fair\"; }";
    assert_eq!(
        name_keyed_behaviour(&names, "x.rs", probe),
        ["x.rs:1 varys", "x.rs:1 fair", "x.rs:1 aalo"].map(String::from)
    );
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let krate = dir.file_name().unwrap().to_str().unwrap().to_string();
        if krate == "coflow-sched" {
            continue;
        }
        for (path, text) in rust_sources(&dir.join("src")) {
            let rel = path.strip_prefix(&crates).unwrap().to_string_lossy().into_owned();
            let hits = name_keyed_behaviour(&names, &rel, &text);
            if !hits.is_empty() {
                found.insert(rel, hits);
            }
        }
    }
    let wrong: Vec<&String> =
        found.iter().filter(|(f, _)| !KNOWN_NAME_KEYED.contains(&f.as_str())).flat_map(|(_, h)| h).collect();
    assert!(wrong.is_empty(), "behaviour keyed by a policy's name belongs in the registry's entry: {wrong:?}");
    let gone: Vec<_> = KNOWN_NAME_KEYED.iter().filter(|k| !found.contains_key(**k)).collect();
    assert!(gone.is_empty(), "no longer keyed by name (take them off KNOWN_NAME_KEYED): {gone:?}");
}

/// The traits `src` declares (`pub trait Name`).
fn declared_traits(src: &str) -> BTreeSet<String> {
    src.match_indices("pub trait ")
        .map(|(i, _)| src[i + "pub trait ".len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
        .collect()
}

/// The traits `src` implements, by the last segment of their path (`impl<T> a::B<T> for C`: `B`).
fn implemented_traits(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in src.match_indices("impl") {
        let boundary = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if !boundary(src[..i].chars().next_back()) || !boundary(src[i + 4..].chars().next()) {
            continue;
        }
        let Some(head) = src[i + 4..].split(['{', ';']).next() else { continue };
        let Some((tr, _)) = head.split_once(" for ") else { continue };
        // Generic parameters of the impl, then the trait's path without its own parameters.
        let tr = tr.trim();
        let tr = if tr.starts_with('<') { tr.split_once('>').map_or(tr, |(_, rest)| rest.trim()) } else { tr };
        let path = tr.split('<').next().unwrap_or(tr);
        out.insert(path.rsplit("::").next().unwrap_or(path).trim().to_string());
    }
    out
}

#[test]
fn the_cli_implements_no_library_trait() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut library = BTreeSet::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        if dir.ends_with("coflow-cli") {
            continue;
        }
        for (_, text) in rust_sources(&dir.join("src")) {
            library.extend(declared_traits(&text));
        }
    }
    assert!(library.contains("Scheduler") && library.contains("Hooks"), "the check is real: {library:?}");
    assert_eq!(
        implemented_traits(
            "impl Scheduler for P {}\nimpl<H: Hooks> coflow_sched::Hooks for Q<H> {}\nimpl Drop for B {}"
        ),
        ["Drop", "Hooks", "Scheduler"].map(String::from).into_iter().collect()
    );
    let mut wrong = Vec::new();
    for (path, text) in rust_sources(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")) {
        for t in implemented_traits(&text) {
            if library.contains(&t) {
                wrong.push(format!("{} implements {t}", path.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the CLI parses and prints; what implements a library's trait is the library's: {wrong:?}"
    );
}

/// The Rust sources under `dir`, recursively, with their text.
fn rust_sources(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(files) = std::fs::read_dir(&d) else { continue };
        for f in files.flatten() {
            let path = f.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    out
}

#[test]
fn the_simulator_and_the_coordinator_take_their_fabric_as_a_value_and_downcast_no_topology() {
    // The fabric's dynamics come built from a `FabricSpec`, and the coordinator keeps the wide
    // area it schedules as a value of its own: no code of either asks which topology it runs on.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sources = rust_sources(&root.join("coflow-sim/src"));
    sources.extend(rust_sources(&root.join("coflow-coordinator/src")));
    for file in ["engine.rs", "core.rs"] {
        assert!(sources.iter().any(|(p, _)| p.ends_with(file)), "the check reads {file}");
    }
    let mut wrong = Vec::new();
    for (path, text) in &sources {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("topology::<") || code.contains("Option<WanConfig>") {
                wrong.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "a topology downcast, or the wide area as a mode: {wrong:#?}");
}

#[test]
fn unsafe_code_is_only_the_row_update_s_choice_of_vector_width_each_with_its_reason() {
    // The workspace denies `unsafe_code`; the one place that allows it calls the copies of the
    // max-min fill's row update compiled for the processor's vector features, and says why each
    // call is sound right above it.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut allowed = 0;
    let mut wrong = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap().flatten() {
        for (path, text) in rust_sources(&dir.path().join("src")) {
            let lines: Vec<&str> = text.lines().collect();
            for (n, line) in lines.iter().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if !(code.contains("allow(unsafe_code)") || code.contains("unsafe_code = \"allow\"")) {
                    continue;
                }
                let reasoned = n > 0
                    && lines[..n]
                        .iter()
                        .rev()
                        .take_while(|l| l.trim().starts_with("//"))
                        .any(|l| l.contains("SAFETY:"));
                if path.ends_with("coflow-sched/src/maxmin.rs") && reasoned {
                    allowed += 1;
                } else {
                    wrong.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(allowed > 0, "the check finds the row update's dispatch");
    assert!(wrong.is_empty(), "unsafe code outside the row update's dispatch, or with no SAFETY comment: {wrong:#?}");
    let manifest = std::fs::read_to_string(root.join("../Cargo.toml")).unwrap();
    assert!(manifest.contains("unsafe_code = \"deny\""), "the workspace denies unsafe code");
}

/// Each package `cargo tree` shows with its features, one line per package (`name vX.Y.Z [f,g]`),
/// for `args` (normal dependencies and those `args` add, this platform only).
fn feature_lines(args: &[&str]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--prefix", "none", "--format", "{p} [{f}]"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l.trim_end_matches(" (*)").to_string()).collect()
}

#[test]
fn one_feature_set_for_every_build() {
    // After the rust section's `cargo test --workspace --release`, the other sections build the
    // CLI alone (`cargo build --release -p coflow-cli`) and maturin builds the Python extension
    // alone; a dependency they build with other features than the workspace's is compiled again,
    // and so is everything above it. Unused dependencies in the CLI's and the extension's
    // manifests give them the workspace's features.
    let workspace = feature_lines(&["--workspace", "--edges", "normal,dev"]);
    let cli = feature_lines(&["--package", "coflow-cli", "--edges", "normal"]);
    let py = feature_lines(&["--package", "coflow-py", "--features", "extension-module", "--edges", "normal"]);
    // The check is real: the extension's own feature is not the workspace's.
    assert!(py.iter().any(|l| l.starts_with("pyo3 ") && l.contains("extension-module")));
    assert!(!workspace.iter().any(|l| l.starts_with("pyo3 ") && l.contains("extension-module")));
    let apart = |tree: &BTreeSet<String>| -> Vec<String> {
        tree.difference(&workspace)
            .filter(|l| !l.starts_with("pyo3") && !l.starts_with("coflow-py "))
            .cloned()
            .collect()
    };
    assert!(apart(&cli).is_empty(), "the CLI alone builds these with other features: {:#?}", apart(&cli));
    assert!(apart(&py).is_empty(), "the Python extension builds these with other features: {:#?}", apart(&py));
}
