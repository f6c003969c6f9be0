//! `coflow testbed`: a 3-host testbed in network namespaces running the real binary, and what
//! it leaves behind (nothing). Skipped, saying why, where namespaces cannot be made.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{coflow, tmp};

/// Why the testbed cannot run here, if it cannot.
fn cannot_run() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1));
    if uid != Some("0") {
        return Some("not root: network namespaces need root".into());
    }
    for tool in ["ip", "tc"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    None
}

/// The testbed prefixes a run printed.
fn prefixes(stdout: &str) -> Vec<String> {
    stdout
        .split_whitespace()
        .filter(|w| w.starts_with("cfb") && w.len() == 9 && w[3..].chars().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_string)
        .collect()
}

/// Namespaces, links, processes and state files of `prefix` that still exist.
fn leftovers(prefix: &str) -> Vec<String> {
    let mut left = Vec::new();
    let sh = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    left.extend(sh("ip", &["netns", "list"]).lines().filter(|l| l.contains(prefix)).map(|l| format!("netns {l}")));
    left.extend(sh("ip", &["-o", "link"]).lines().filter(|l| l.contains(prefix)).map(|l| format!("link {l}")));
    left.extend(sh("pgrep", &["-af", prefix]).lines().filter(|l| !l.contains("pgrep")).map(|l| format!("process {l}")));
    for dir in ["/run/coflow-testbed".into(), std::env::temp_dir().join("coflow-testbed-state")] {
        let p = std::path::Path::new(&dir).join(format!("{prefix}.json"));
        if p.exists() {
            left.push(format!("state file {}", p.display()));
        }
    }
    left
}

/// Runs `coflow testbed ARGS --json F` and returns its stdout and the JSON it wrote, or `None`
/// (having said why) where the testbed cannot run.
fn testbed_json(args: &[&str], name: &str) -> Option<(String, serde_json::Value)> {
    if let Some(why) = cannot_run() {
        eprintln!("skipping: {why}");
        return None;
    }
    let json = tmp(name);
    let out = coflow().arg("testbed").args(args).arg("--json").arg(&json).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    Some((stdout, serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()))
}

#[test]
fn varys_and_tcp_replay_a_tiny_workload_exactly_and_leave_nothing() {
    let run = ["run", "--hosts", "3", "--link", "200Mbps", "--policies", "varys,tcp", "--coflows", "6"];
    let Some((stdout, v)) = testbed_json(&[&run[..], &["--total-bytes", "30000000"]].concat(), "testbed-run.json")
    else {
        return;
    };
    assert_eq!(v["hosts"], 3);
    assert_eq!(v["link_bps"], 2e8);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.iter().map(|r| r["policy"].as_str().unwrap()).collect::<Vec<_>>(), ["varys", "tcp"]);
    let fabric = v["fabric_bytes"].as_u64().unwrap();
    for r in results {
        assert_eq!(r["completed"], r["coflows"], "{r}");
        assert_eq!(r["coflows"], 6);
        assert_eq!(r["corrupted"], 0, "{r}");
        assert_eq!(r["failed_gets"], 0, "{r}");
        assert!(r["bytes_verified"].as_u64().unwrap() >= fabric, "{r}");
        for field in
            ["measured_avg_cct_s", "simulated_avg_cct_s", "measured_p95_cct_s", "simulated_p95_cct_s", "wall_s"]
        {
            assert!(r[field].as_f64().unwrap() > 0.0, "{field} in {r}");
        }
    }
    assert_eq!(results[1]["simulated_policy"], "fair", "tcp is compared with max-min");
    let ps = prefixes(&stdout);
    assert_eq!(ps.len(), 2, "one testbed per policy: {stdout}");
    for p in ps {
        assert_eq!(leftovers(&p), Vec::<String>::new());
    }
}

#[test]
fn a_fault_scenario_accounts_for_every_get_and_leaves_nothing() {
    let args = ["faults", "--hosts", "3", "--link", "200Mbps", "--scenarios", "agent-kill", "--coflows", "8"];
    let more = ["--total-bytes", "40000000", "--fault-at", "0.3", "--get-timeout", "20"];
    let Some((stdout, v)) = testbed_json(&[&args[..], &more[..]].concat(), "testbed-faults.json") else { return };
    let s = &v["scenarios"][0];
    assert_eq!(s["name"], "agent-kill");
    let failed: u64 = s["failed"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    let gets = s["gets"].as_u64().unwrap();
    assert!(gets > 0);
    assert_eq!(
        s["exact"].as_u64().unwrap() + failed + s["hung"].as_u64().unwrap(),
        gets,
        "every get counted once: {s}"
    );
    assert_eq!(s["corrupted"], 0, "{s}");
    assert_eq!(s["hung"], 0, "every get ends within its bound: {s}");
    assert_eq!(s["bystander_exact"], s["bystander_gets"], "gets not touching the killed agent complete: {s}");
    assert!(s["recover_s"].as_f64().is_some(), "the host serves again once its agent is back: {s}");
    for p in prefixes(&stdout) {
        assert_eq!(leftovers(&p), Vec::<String>::new());
    }
}

#[test]
fn an_interrupted_run_and_a_kept_one_leave_nothing_after_down() {
    if let Some(why) = cannot_run() {
        eprintln!("skipping: {why}");
        return;
    }
    // Ctrl-C in the middle of the map stage: the run tears down and exits non-zero.
    let mut child = coflow()
        .args(["testbed", "run", "--hosts", "3", "--link", "200Mbps", "--policies", "varys"])
        .args(["--coflows", "10", "--total-bytes", "200000000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut prefix = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains("map stage") {
            prefix = prefixes(&line).into_iter().next();
            break;
        }
    }
    let prefix = prefix.expect("the run came up");
    assert!(!leftovers(&prefix).is_empty(), "the testbed is up");
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let until = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "the interrupted run did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130), "torn down, then exit 130");
    assert_eq!(leftovers(&prefix), Vec::<String>::new());

    // A kept testbed stays up after its run; `down` removes it, and a second `down` has nothing
    // of it to remove.
    let out = coflow()
        .args(["testbed", "run", "--hosts", "3", "--link", "200Mbps", "--policies", "tcp", "--keep"])
        .args(["--coflows", "3", "--total-bytes", "5000000"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let kept = prefixes(&stdout).pop().unwrap();
    assert!(leftovers(&kept).iter().any(|l| l.starts_with("netns")), "kept: {stdout}");
    let down = coflow().args(["testbed", "down"]).output().unwrap();
    let said = String::from_utf8_lossy(&down.stdout).into_owned();
    assert!(down.status.success() && said.contains(&format!("removed testbed {kept}")), "{said}");
    assert_eq!(leftovers(&kept), Vec::<String>::new());
    let again = coflow().args(["testbed", "down"]).output().unwrap();
    let said = String::from_utf8_lossy(&again.stdout).into_owned();
    assert!(again.status.success() && !said.contains(&kept), "{said}");
}

#[test]
fn tcp_is_refused_where_nothing_shapes_the_network() {
    let out = coflow().args(["sim", "--policies", "varys,tcp"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("`fair`"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = coflow().args(["demo", "--policies", "tcp"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_bad_topology_file_names_the_field() {
    let p = tmp("bad-topology.json");
    std::fs::write(&p, r#"{"hosts":[{"name":"a","uplink":"100Mbps","downlink":"fast"}]}"#).unwrap();
    let out = coflow().args(["testbed", "run", "--topology"]).arg(&p).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hosts[0].downlink"), "{err}");
}

/// Lists that name nothing or one name twice, and workloads with nothing to measure, are refused
/// before a testbed is built (so these need no root).
#[test]
fn empty_or_repeated_lists_and_unmeasurable_workloads_are_refused_at_once() {
    let cases: [(&[&str], &str); 6] = [
        (&["run", "--policies", "tcp,tcp"], "--policies names tcp twice"),
        (&["run", "--policies", ",,"], "--policies names no policy"),
        (&["faults", "--scenarios", ","], "--scenarios names no scenario"),
        (&["spark", "--modes", "tcp,tcp"], "--modes names tcp twice"),
        (
            &["run", "--hosts", "1", "--coflows", "2", "--total-bytes", "1MB", "--policies", "tcp"],
            "moves no byte between two hosts",
        ),
        (
            &["run", "--hosts", "2", "--coflows", "2", "--total-bytes", "1TB", "--policies", "tcp"],
            "a client holds in memory",
        ),
    ];
    for (args, says) in cases {
        let out = coflow().arg("testbed").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
    }
    // The synthetic workload's shape beside a trace is refused, not ignored, as by `coflow sim`;
    // a trace whose only flow is empty has nothing to measure, said once.
    let trace = tmp("one-empty-flow.txt");
    std::fs::write(&trace, "2 1\n1 0 1 0 1 1:0\n").unwrap();
    let t = trace.to_str().unwrap();
    let seed = "--seed seeds the synthetic workload (and a wide area's weather, which this run has not)";
    let cases: [(&[&str], &str); 7] = [
        (&["demo", "--trace", t, "--load", "0.5"], "--coflows and --load shape the synthetic workload"),
        (&["testbed", "run", "--trace", t, "--coflows", "5"], "--coflows and --load shape the synthetic workload"),
        (&["demo", "--trace", t, "--seed", "3"], seed),
        (&["testbed", "run", "--trace", t, "--seed", "3"], seed),
        (&["testbed", "faults", "--trace", t, "--seed", "3"], seed),
        (&["demo", "--trace", t, "--policies", "varys"], "error: workload: it moves no byte between two hosts"),
        (&["demo", "--agents", "1", "--total-bytes", "1MB"], "error: workload: it moves no byte between two hosts"),
    ];
    for (args, says) in cases {
        let out = coflow().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says) && err.matches("workload").count() <= 2, "{args:?}: {err}");
    }
}

/// A topology file or preset has its hosts and links: `--hosts` or `--link` beside `--topology`
/// is refused by both flags before any namespace is made, rather than dropped without a word.
#[test]
fn hosts_and_links_beside_a_topology_are_refused() {
    let cases: &[&[&str]] = &[
        &["testbed", "run", "--hosts", "4", "--topology", "siphon-3dc"],
        &["testbed", "run", "--topology", "siphon-3dc", "--link", "1Gbps"],
        &["testbed", "faults", "--port-rate", "1Gbps", "--topology", "siphon-3dc"],
    ];
    for args in cases {
        let out = coflow().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: a usage error: {err}");
        assert!(err.contains("cannot be used with") && err.contains("--topology <FILE|PRESET>"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: refused before anything starts");
    }
}
