//! Multi-stage jobs end to end: a JSON Lines trace with parents, generated multi-stage jobs, and
//! the errors of a bad dependency graph.

use crate::{coflow, tmp};

/// A chain and an independent coflow on 1 MiB/s ports (1,048,576 B/s):
/// - 1: 4 MiB from 0 to 1, from 0 s to 4 s;
/// - 2: a child of 1 arriving at 1 s, 2 MiB from 1 to 2: released at 4 s, done at 6 s;
/// - 3: 1 MiB from 2 to 3 at 0 s, done at 1 s.
///
/// Jobs {1, 2}: 6 s, and {3}: 1 s; average 3.5 s, p95 6 s. Offline (every arrival at 0) the same.
const CHAIN: &str = r#"{"format":"coflow-jsonl","version":1,"machines":4}
{"id":1,"arrival_ns":0,"flows":[{"src":0,"dst":1,"bytes":4194304}]}
{"id":2,"arrival_ns":1000000000,"flows":[{"src":1,"dst":2,"bytes":2097152}],"parents":[1]}
{"id":3,"arrival_ns":0,"flows":[{"src":2,"dst":3,"bytes":1048576}]}
"#;

#[test]
fn a_jsonl_trace_with_parents_reports_job_completion_times() {
    let trace = tmp("chain.jsonl");
    std::fs::write(&trace, CHAIN).unwrap();
    for offline in [false, true] {
        let json = tmp(&format!("chain-{offline}.json"));
        let mut cmd = coflow();
        cmd.args(["sim", "--policies", "varys,fair,aalo,aalo-job", "--port-rate", "1MiB/s", "--trace"]).arg(&trace);
        let csv = tmp(&format!("chain-{offline}.csv"));
        cmd.arg("--json").arg(&json).arg("--csv").arg(&csv);
        if offline {
            cmd.arg("--offline");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let table = String::from_utf8(out.stdout).unwrap();
        assert!(table.contains("avg JCT s"), "a jobs table: {table}");
        // Only the isolation bound holds with dependencies: the others show no figure.
        let bound = |name: &str| table.lines().find(|l| l.trim_start().starts_with(name)).unwrap().to_string();
        assert!(bound("per-port (not with dependencies)").trim_end().ends_with(" - s"), "{table}");
        assert!(bound("LP relaxation").contains(" - s  ("), "{table}");
        let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        for r in report["results"].as_array().unwrap() {
            assert_eq!(r["completed"], 3, "{r}");
            assert_eq!((r["jobs"].as_u64(), r["jobs_completed"].as_u64()), (Some(2), Some(2)), "{r}");
            let (avg, p95) = (r["job_avg_jct_s"].as_f64().unwrap(), r["job_p95_jct_s"].as_f64().unwrap());
            assert!((avg - 3.5).abs() < 1e-6 && (p95 - 6.0).abs() < 1e-6, "offline {offline}: {r}");
            // CCTs count from release: 4, 2 and 1 s.
            assert!((r["avg_cct_s"].as_f64().unwrap() - 7.0 / 3.0).abs() < 1e-6, "{r}");
        }
        // Coflow 2 waited for its parent: released at 4 s, its CCT counting from there.
        let rows = std::fs::read_to_string(&csv).unwrap();
        let row = rows.lines().find(|l| l.starts_with("varys,2,")).unwrap();
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!((cells[6], cells[10]), ("2.000000000", "4.000000000"), "{rows}");
        // Only the isolation bound holds when coflows wait for parents.
        assert!(report["lower_bounds"]["lp_status"].as_str().unwrap().starts_with("skipped"), "{report}");
    }
}

#[test]
fn generated_multi_stage_jobs_run_with_their_dependencies() {
    let trace = tmp("stages.jsonl");
    let out = coflow()
        .args(["trace", "gen", "--coflows", "30", "--machines", "12", "--stages", "3", "--seed", "4", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&trace).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.contains("\"parents\":[") && !l.contains("\"parents\":[]")).count(),
        20,
        "{text}"
    );
    let json = tmp("stages.json");
    let out = coflow()
        .args(["sim", "--policies", "varys,aalo-job", "--json"])
        .arg(&json)
        .arg("--trace")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for r in report["results"].as_array().unwrap() {
        assert_eq!((r["completed"].as_u64(), r["jobs"].as_u64()), (Some(30), Some(10)), "{r}");
        assert!(r["job_avg_jct_s"].as_f64().unwrap() >= r["avg_cct_s"].as_f64().unwrap(), "{r}");
    }
    // The same from `--stages` on `coflow sim` directly, seeded alike.
    let direct = tmp("stages-direct.json");
    let out = coflow()
        .args([
            "sim",
            "--policies",
            "varys,aalo-job",
            "--coflows",
            "30",
            "--machines",
            "12",
            "--stages",
            "3",
            "--seed",
            "4",
            "--json",
        ])
        .arg(&direct)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let again: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&direct).unwrap()).unwrap();
    assert_eq!(again["results"], report["results"]);
}

#[test]
fn cycles_and_unknown_parents_are_errors_naming_the_coflow() {
    let header = r#"{"format":"coflow-jsonl","version":1,"machines":2}"#;
    let flow = r#""flows":[{"src":0,"dst":1,"bytes":10}]"#;
    for (body, expect) in [
        (
            format!(
                "{{\"id\":1,\"arrival_ns\":0,{flow},\"parents\":[2]}}\n{{\"id\":2,\"arrival_ns\":0,{flow},\"parents\":[1]}}"
            ),
            "coflow 1",
        ),
        (format!("{{\"id\":1,\"arrival_ns\":0,{flow},\"parents\":[7]}}"), "7"),
    ] {
        let trace = tmp("bad-deps.jsonl");
        std::fs::write(&trace, format!("{header}\n{body}\n")).unwrap();
        let out = coflow().args(["sim", "--policies", "varys", "--trace"]).arg(&trace).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect) && err.contains("line"), "{err}");
    }
}
