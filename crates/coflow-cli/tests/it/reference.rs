//! Every coflow's CCT under every policy stays within 1e-9 relative of reference figures the
//! simulator gave (`tests/data/reference-ccts.txt`), on the synthetic workload, the wide area
//! (with multi-path routing, with per-connection bandwidth), the reference model, the Facebook
//! trace (with and without deadlines, in jobs of three stages) and 300 machines.
//!
//! The file holds one line per run and policy: the run's key, the policy, then each coflow's CCT
//! in nanoseconds in workload order (`-`: unfinished or rejected; `=`: the same as on the line
//! above, the previous policy of the same run). The figures are the simulator's own, from
//! `coflow sim ARGS --threads 1 --csv F` with the arguments of [`RUNS`]; the trace itself is not
//! in the repository, and the runs that need it skip when it is absent.

use std::collections::BTreeMap;
use std::path::Path;

use super::{coflow, facebook_trace, tmp};

/// Each run's key and its `coflow sim` arguments; `TRACE` stands for the Facebook trace's path.
const RUNS: &[(&str, &[&str])] = &[
    ("synth-all", &["--policies", "all"]),
    ("wan", &["--policies", "all", "--wan", "default"]),
    ("wan-multipath", &["--policies", "all", "--wan", "default", "--multipath"]),
    ("wan-per-connection", &["--policies", "all", "--wan", "default", "--per-connection"]),
    ("coflowsim-synth", &["--model", "coflowsim", "--policies", "varys,fair,pfp,fifo,scf,ncf,tcf,aalo"]),
    ("trace-all", &["--trace", "TRACE", "--policies", "all"]),
    ("trace-deadlines", &["--trace", "TRACE", "--policies", "all", "--deadlines"]),
    ("trace-stages", &["--trace", "TRACE", "--policies", "all", "--stages", "3"]),
    ("m300-all", &["--coflows", "150", "--machines", "300", "--policies", "all"]),
];

/// How far a CCT may move, relative to the reference.
const RELATIVE: f64 = 1e-9;

/// Per run key, per policy, each coflow's CCT in nanoseconds (`None`: unfinished or rejected).
type Ccts = BTreeMap<String, Vec<(String, Vec<Option<u64>>)>>;

fn reference() -> Ccts {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference-ccts.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut runs = Ccts::new();
    let mut above: Option<(String, Vec<Option<u64>>)> = None;
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut words = line.split(' ');
        let (run, policy) = (words.next().unwrap().to_string(), words.next().unwrap().to_string());
        let before = above.as_ref().filter(|(r, _)| *r == run).map(|(_, v)| v);
        let ccts: Vec<Option<u64>> = words
            .enumerate()
            .map(|(k, w)| match w {
                "-" => None,
                "=" => before.unwrap_or_else(|| panic!("line {}: `=` with no line above", n + 1))[k],
                _ => Some(w.parse().unwrap_or_else(|e| panic!("line {}: {w:?}: {e}", n + 1))),
            })
            .collect();
        above = Some((run.clone(), ccts.clone()));
        runs.entry(run).or_default().push((policy, ccts));
    }
    runs
}

/// Each policy's CCTs from a `coflow sim --csv` file, in workload order.
fn read_csv(path: &Path) -> BTreeMap<String, Vec<Option<u64>>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name}"));
    let (policy, cct) = (col("policy"), col("cct_s"));
    let mut out: BTreeMap<String, Vec<Option<u64>>> = BTreeMap::new();
    for line in lines {
        let cells: Vec<&str> = line.split(',').collect();
        let ns = (!cells[cct].is_empty()).then(|| {
            // Nine decimals: whole nanoseconds, read without a float's rounding.
            let (s, frac) = cells[cct].split_once('.').unwrap();
            assert_eq!(frac.len(), 9, "{}", cells[cct]);
            s.parse::<u64>().unwrap() * 1_000_000_000 + frac.parse::<u64>().unwrap()
        });
        out.entry(cells[policy].to_string()).or_default().push(ns);
    }
    out
}

/// Runs `key` and compares every coflow's CCT with the reference.
fn check(key: &str, trace: Option<&Path>) {
    let refs = reference();
    let expected = &refs[key];
    let args = RUNS.iter().find(|(k, _)| *k == key).unwrap().1;
    let csv = tmp(&format!("reference-{key}.csv"));
    let trace = trace.map(|p| p.to_str().unwrap().to_string());
    let args: Vec<&str> = args.iter().map(|&a| if a == "TRACE" { trace.as_deref().unwrap() } else { a }).collect();
    let out = coflow().arg("sim").args(&args).arg("--csv").arg(&csv).output().unwrap();
    assert!(out.status.success(), "coflow sim {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let got = read_csv(&csv);
    let mut wrong = Vec::new();
    for (policy, want) in expected {
        let have = got.get(policy).unwrap_or_else(|| panic!("{key}: no {policy} in the run"));
        assert_eq!(have.len(), want.len(), "{key} {policy}: coflows");
        for (k, (h, w)) in have.iter().zip(want).enumerate() {
            let close = match (h, w) {
                (Some(h), Some(w)) => (*h as f64 - *w as f64).abs() <= RELATIVE * *w as f64,
                (None, None) => true,
                _ => false,
            };
            if !close {
                wrong.push(format!("{policy} coflow #{k}: {h:?} ns, reference {w:?} ns"));
            }
        }
    }
    assert_eq!(got.len(), expected.len(), "{key}: policies");
    assert!(wrong.is_empty(), "{key}: {} CCTs off the reference: {:?}", wrong.len(), &wrong[..wrong.len().min(10)]);
}

#[test]
fn the_reference_file_covers_every_run() {
    let refs = reference();
    for (key, _) in RUNS {
        let lines = refs.get(*key).unwrap_or_else(|| panic!("no reference for {key}"));
        assert!(lines.len() >= 8 && lines.iter().all(|(_, v)| v.len() == lines[0].1.len()), "{key}");
    }
    assert_eq!(refs.len(), RUNS.len());
}

#[test]
fn synthetic_ccts_stay_at_the_reference() {
    check("synth-all", None);
    check("wan", None);
    check("wan-multipath", None);
    check("wan-per-connection", None);
    check("coflowsim-synth", None);
}

#[test]
fn trace_ccts_stay_at_the_reference() {
    let Some(trace) = facebook_trace() else { return };
    check("trace-all", Some(&trace));
    check("trace-deadlines", Some(&trace));
    check("trace-stages", Some(&trace));
}

#[test]
fn ccts_on_300_machines_stay_at_the_reference() {
    check("m300-all", None);
}
