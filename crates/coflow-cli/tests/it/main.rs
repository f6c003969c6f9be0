//! End-to-end tests of the `coflow` binary, run as a user would.

mod abuse;
mod bench_live;
mod certs;
mod clock;
mod config;
mod docs;
mod jobs;
mod limits;
mod pause;
mod procs;
mod reference;
mod spark;
mod status;
mod testbed;
mod tidy;
mod wan;

use std::path::PathBuf;
use std::process::Command;

fn coflow() -> Command {
    Command::new(env!("CARGO_BIN_EXE_coflow"))
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("coflow-cli-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn facebook_trace() -> Option<PathBuf> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/FB2010-1Hr-150-0.txt"));
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipping: ../shared/traces/FB2010-1Hr-150-0.txt not found");
        None
    }
}

/// A log that cannot be written (stderr on a full disk: `/dev/full`) never panics and never
/// changes the answer: a command that fails still ends with its own exit code, 1, not a panic's.
#[test]
fn a_log_on_a_full_disk_never_changes_the_answer() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("skipping: no /dev/full");
        return;
    };
    let out = coflow()
        .args(["status", "--coordinator", "http://127.0.0.1:1"])
        .env("COFLOW_TOKEN", "a-token-for-the-full-disk-test")
        .env("RUST_LOG", "trace")
        .stderr(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// A coordinator that accepts the connection and never answers (stopped, wedged) fails
/// `coflow status` at its `--timeout`, in plaintext and over TLS alike, never later.
#[test]
fn status_of_a_coordinator_that_never_answers_ends_at_its_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let certs = tmp("status-timeout-certs");
    let _ = std::fs::remove_dir_all(&certs);
    coflow_proto::certs::init(&certs, false).unwrap();
    coflow_proto::certs::issue(&certs, &coflow_proto::certs::Subject::Admin, false).unwrap();
    let tls: Vec<String> = ["--tls-ca", "ca.crt", "--tls-cert", "admin.crt", "--tls-key", "admin.key"]
        .iter()
        .enumerate()
        .map(|(i, a)| if i % 2 == 0 { a.to_string() } else { certs.join(a).display().to_string() })
        .collect();
    for (scheme, extra) in [("http", &[][..]), ("https", &tls[..])] {
        let started = std::time::Instant::now();
        let out = coflow()
            .args(["status", "--timeout", "1s", "--coordinator", &format!("{scheme}://127.0.0.1:{port}")])
            .args(extra)
            .env("COFLOW_TOKEN", "a-token-for-the-silent-coordinator-test")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{scheme}: {err}");
        assert!(err.contains("timed out after 1s"), "{scheme}: {err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(8), "{scheme}: {:?}", started.elapsed());
    }
    drop(silent);
    let out = coflow().args(["status", "--timeout", "0s"]).env("COFLOW_TOKEN", "t".repeat(32)).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--timeout must be 0.1 to 3600 seconds, not 0"), "{out:?}");
    std::fs::remove_dir_all(&certs).unwrap();
}

#[test]
fn logs_written_to_a_file_carry_no_colour_codes() {
    let log = tmp("coordinator.log");
    let mut child = coflow()
        .args(["coordinator", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .env("COFLOW_TOKEN", "a-token-for-the-log-test")
        .env_remove("NO_COLOR")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // The coordinator logs "coordinator starting" at once; wait for it (at most 20 s), then stop it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut text = String::new();
    while std::time::Instant::now() < deadline {
        text = std::fs::read_to_string(&log).unwrap();
        if text.contains("coordinator starting") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(text.contains("coordinator starting"), "no start line in\n{text}");
    assert!(!text.contains('\u{1b}'), "escape codes in a log file:\n{text:?}");
}

#[test]
fn sim_with_no_arguments_prints_a_table_for_every_policy() {
    let json = tmp("default.json");
    let csv = tmp("default.csv");
    let out = coflow().args(["sim", "--json"]).arg(&json).arg("--csv").arg(&csv).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    for policy in coflow_sched_names() {
        assert!(table.lines().any(|l| l.starts_with(policy)), "no row for {policy} in\n{table}");
    }
    assert!(table.contains("lower bound"), "{table}");

    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), coflow_sched_names().len());
    let coflows = report["workload"]["coflows"].as_u64().unwrap();
    for r in results {
        for key in ["policy", "completed", "avg_cct_s", "p95_cct_s", "makespan_s"] {
            assert!(!r[key].is_null(), "result lacks {key}: {r}");
        }
        assert_eq!(r["completed"].as_u64().unwrap(), coflows, "every coflow completes: {r}");
    }
    // The best bound is the largest of the three, and every policy's ratio is against it.
    let best = report["best_lower_bound_avg_cct_s"].as_f64().unwrap();
    let bounds = &report["lower_bounds"];
    let iso = bounds["isolation_avg_cct_s"].as_f64().unwrap();
    let port = bounds["per_port_avg_cct_s"].as_f64().unwrap();
    let lp = bounds["lp_avg_cct_s"].as_f64().unwrap();
    assert!(iso > 0.0 && port >= iso && best == iso.max(port).max(lp), "{bounds}");
    for r in results {
        let (avg, ratio) = (r["avg_cct_s"].as_f64().unwrap(), r["bound_ratio"].as_f64().unwrap());
        assert!((ratio - avg / best).abs() < 1e-9 && ratio >= 1.0, "{r}");
    }
    let rows = std::fs::read_to_string(&csv).unwrap().lines().count();
    assert_eq!(rows as u64, 1 + coflows * results.len() as u64);

    // Per-bin figures: the four bins in order, adding up to the workload, each with a factor.
    assert!(table.contains("by bin") && table.contains("avg FCT s"), "{table}");
    for r in results {
        let bins = r["bins"].as_array().unwrap();
        let names: Vec<&str> = bins.iter().map(|b| b["bin"].as_str().unwrap()).collect();
        assert_eq!(names, ["SN", "LN", "SW", "LW"], "{r}");
        assert_eq!(bins.iter().map(|b| b["coflows"].as_u64().unwrap()).sum::<u64>(), coflows, "{r}");
        assert_eq!(bins.iter().map(|b| b["completed"].as_u64().unwrap()).sum::<u64>(), coflows, "{r}");
        for b in bins.iter().filter(|b| b["completed"].as_u64().unwrap() > 0) {
            for key in ["avg_cct_s", "p95_cct_s", "factor_vs_baseline"] {
                assert!(b[key].as_f64().is_some_and(|v| v > 0.0), "bin lacks {key}: {b}");
            }
        }
        let slower = r["slower_than_baseline_fraction"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&slower), "{r}");
        assert!(r["avg_fct_s"].as_f64().is_some(), "{r}");
    }
    let fair = results.iter().find(|r| r["policy"] == "fair").unwrap();
    assert_eq!(fair["slower_than_baseline_fraction"], 0.0, "the baseline is never slower than itself");
    assert!(fair["bins"].as_array().unwrap().iter().all(|b| b["completed"] == 0 || b["factor_vs_baseline"] == 1.0));
    // The MADD family records flow completion times, and no flow outlasts the last coflow.
    let varys = results.iter().find(|r| r["policy"] == "varys").unwrap();
    let fct = varys["avg_fct_s"].as_f64().unwrap();
    assert!(fct > 0.0 && fct <= varys["makespan_s"].as_f64().unwrap(), "{varys}");
}

#[test]
fn sim_plots_cct_distributions_and_bin_improvements_as_svg_and_png() {
    let svg = tmp("plot.svg");
    let png_path = tmp("plot.png");
    for path in [&svg, &png_path] {
        let out =
            coflow().args(["sim", "--coflows", "40", "--policies", "varys,fifo", "--plot"]).arg(path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"), "not an SVG");
    // Every policy, the baseline included, is named in the legend; the panels and bins are titled.
    for needle in [">\nvarys\n<", ">\nfifo\n<", "fair (baseline)", "CDF", "per bin", "SN (", "LW (", "all (40)"] {
        assert!(text.contains(needle), "the SVG lacks {needle:?}");
    }

    let bytes = std::fs::read(&png_path).unwrap();
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().unwrap();
    let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut rgb).unwrap();
    assert_eq!((info.width, info.height, info.color_type), (1500, 640, png::ColorType::Rgb));
    // Drawn, not blank: the first policy's colour (bars and curve), black (axes, text and the
    // baseline) and white background.
    let count = |c: [u8; 3]| rgb.chunks(3).filter(|p| *p == c).count();
    assert!(count([31, 119, 180]) > 500, "no varys-coloured pixels");
    assert!(count([0, 0, 0]) > 2000, "no black pixels");
    assert!(count([255, 255, 255]) > rgb.len() / 3 / 2, "not mostly white");
}

/// On a wide area the bars are per size bin, the bins the table and the JSON's `wide_area` give.
#[test]
fn a_wide_area_plot_shows_the_size_bins_of_its_table() {
    let svg = tmp("wan-plot.svg");
    let out = coflow().args(["sim", "--wan", "default", "--coflows", "30", "--plot"]).arg(&svg).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    for needle in ["size bin (coflows)", "&lt;10MiB (", "&gt;=1GiB (", "all (30)"] {
        assert!(text.contains(needle), "the SVG lacks {needle:?}");
    }
    assert!(!text.contains("SN (") && !text.contains("Varys bin"), "Varys's bins on a wide area");
}

#[test]
fn a_plot_must_be_svg_or_png_and_is_refused_before_simulating() {
    let out = coflow().args(["sim", "--plot"]).arg(tmp("plot.pdf")).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(".svg or .png"), "{err}");
    assert!(out.stdout.is_empty(), "printed results before refusing: {}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn sweep_prints_a_row_per_concurrency_and_writes_one_entry_per_n_and_policy() {
    let json = tmp("sweep.json");
    let out = coflow().args(["sim", "sweep", "--concurrent", "5,10", "--json"]).arg(&json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("improvement of average CCT over fair"), "{table}");
    assert!(table.contains("over the best lower bound"), "{table}");
    for n in ["5 ", "10 "] {
        // One row in the table of factors, one in the table of bound ratios.
        assert_eq!(table.lines().filter(|l| l.starts_with(n)).count(), 2, "no row per table for N = {n}in\n{table}");
    }
    let header = table.lines().find(|l| l.starts_with("N ")).unwrap();
    for policy in coflow_sched_names() {
        assert!(header.split_whitespace().any(|c| c == policy), "no column for {policy} in\n{table}");
    }

    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2 * coflow_sched_names().len());
    for n in [5, 10] {
        for policy in coflow_sched_names() {
            let r = results.iter().filter(|r| r["concurrent"] == n && r["policy"] == policy).collect::<Vec<_>>();
            assert_eq!(r.len(), 1, "{n} {policy}");
            let r = r[0];
            assert_eq!(r["windows"], 5);
            assert_eq!(r["coflows"], 5 * n, "{r}");
            assert_eq!(r["completed"], 5 * n, "every coflow completes: {r}");
            assert!(r["factor_vs_baseline"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["bound_ratio"].as_f64().unwrap() >= 1.0, "no policy beats a lower bound: {r}");
            let (lo, hi) =
                (r["factor_vs_baseline_min"].as_f64().unwrap(), r["factor_vs_baseline_max"].as_f64().unwrap());
            assert!(lo <= r["factor_vs_baseline"].as_f64().unwrap() && r["factor_vs_baseline"].as_f64().unwrap() <= hi);
        }
        let fair = results.iter().find(|r| r["concurrent"] == n && r["policy"] == "fair").unwrap();
        assert!((fair["factor_vs_baseline"].as_f64().unwrap() - 1.0).abs() < 1e-12, "{fair}");
    }
    let windows = report["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 2);
    assert_eq!(windows[1]["concurrent"], 10);
    assert_eq!(windows[1]["starts"].as_array().unwrap().len(), 5);
}

#[test]
fn sweep_with_deadlines_reports_them_and_is_byte_identical_for_a_seed() {
    let (a, b) = (tmp("sweep-a.json"), tmp("sweep-b.json"));
    let mut tables = Vec::new();
    for p in [&a, &b] {
        let out = coflow()
            .args(["sim", "sweep", "--concurrent", "8", "--windows", "3", "--policies", "varys-deadline,varys"])
            .args(["--deadlines", "--seed", "5", "--json"])
            .arg(p)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        tables.push(String::from_utf8(out.stdout).unwrap());
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(tables[0], tables[1]);
    assert!(tables[0].contains("met their deadline"), "{}", tables[0]);
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "the baseline runs but is not reported unless asked for");
    let vd = results.iter().find(|r| r["policy"] == "varys-deadline").unwrap();
    for key in ["deadline_met_fraction", "admitted_fraction", "met_among_admitted_fraction"] {
        assert!(vd[key].as_f64().is_some_and(|f| (0.0..=1.0).contains(&f)), "{key}: {vd}");
    }

    let out = coflow().args(["sim", "sweep", "--concurrent", "5,100000"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--concurrent 100000"), "{err}");
}

#[test]
fn the_same_seed_gives_byte_identical_reports() {
    let (a, b) = (tmp("a.json"), tmp("b.json"));
    for p in [&a, &b] {
        let out = coflow().args(["sim", "--seed", "7", "--coflows", "60", "--json"]).arg(p).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
}

#[test]
fn bad_arguments_are_clear_errors() {
    let out = coflow().args(["sim", "--policies", "varys,nope"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown policy \"nope\""), "{err}");

    // An empty item in a list is refused by the parser, naming the flag, not dropped.
    for (args, flag) in [
        (&["sim", "--policies", "varys,,fair"][..], "--policies"),
        (&["sim", "--policies", "varys,"], "--policies"),
        (&["sim", "sweep", "--concurrent", "5", "--policies", ",varys"], "--policies"),
        (&["bench", "--policies", "varys, ,fair"], "--policies"),
        (&["demo", "--policies", "varys,,fair"], "--policies"),
        (&["testbed", "run", "--policies", "varys,,tcp"], "--policies"),
        (&["sim", "--coflowsim-rules", "epochs,,clock"], "--coflowsim-rules"),
    ] {
        let out = coflow().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag) && err.contains("an empty item"), "{args:?}: {err}");
    }

    let out = coflow().args(["sim", "--machines", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "an error, not a panic");
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least one machine"));

    let out = coflow().args(["sim", "--port-rate", "fast"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--port-rate"));

    let bad = tmp("bad.txt");
    std::fs::write(&bad, "2 1\n1 0 1 0 1 5\n").unwrap();
    let out = coflow().args(["sim", "--trace"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2"), "{err}");
}

/// A bad value from an environment variable names the variable as well as the flag; given as
/// the flag, it does not.
#[test]
fn a_bad_value_from_the_environment_names_its_variable() {
    let out = coflow().arg("coordinator").env("COFLOW_PUSH_WINDOW_MS", "soon").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "refused by the parser");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--push-window-ms") && err.contains("environment variable COFLOW_PUSH_WINDOW_MS"), "{err}");
    let out =
        coflow().args(["coordinator", "--push-window-ms=soon"]).env("COFLOW_PUSH_WINDOW_MS", "soon").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--push-window-ms") && !err.contains("environment variable"), "{err}");
    // The program's own options, which every subcommand takes, have theirs too.
    let out = coflow().args(["sim", "--coflows", "3"]).env("COFLOW_LOG_FORMAT", "purple").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--log-format") && err.contains("environment variable COFLOW_LOG_FORMAT"), "{err}");
    // The subcommand's own are found past the program's options.
    let out = coflow().args(["--log-format", "json", "coordinator"]).env("COFLOW_PUSH_WINDOW_MS", "soon").output();
    let err = String::from_utf8_lossy(&out.unwrap().stderr).into_owned();
    assert!(err.contains("--push-window-ms") && err.contains("environment variable COFLOW_PUSH_WINDOW_MS"), "{err}");
}

/// A deadline fraction of -0 is 0% in the workload's line, not -0%.
#[test]
fn a_negative_zero_fraction_reads_as_zero() {
    let out = coflow().args(["sim", "--coflows", "5", "--policies", "varys", "--deadline-fraction", "-0"]).output();
    let text = String::from_utf8_lossy(&out.unwrap().stdout).into_owned();
    assert!(text.contains("(0% of coflows with deadlines)"), "{text}");
}

/// A reader that stops reading standard output (`| head`) ends the writing without an error,
/// and without a remark that everything was written.
#[test]
fn a_reader_that_goes_away_is_not_told_it_had_everything() {
    use std::io::Read as _;
    let mut child = coflow()
        .args(["trace", "gen", "--coflows", "2000", "--machines", "50", "-o", "-"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Far less than the 600 KB written, and than a pipe holds.
    let mut head = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("wrote"), "{err}");
    // Read whole, it says so.
    let out = coflow().args(["trace", "gen", "--coflows", "20", "--machines", "5", "-o", "-"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("wrote 20 coflows"), "{out:?}");
}

/// An output that names a file the command reads is refused before anything runs, however the
/// path is spelled, and the file is left as it was: a report written over its trace would lose
/// the trace (and a spread one could not be undone).
#[test]
fn an_output_never_writes_over_an_input() {
    let trace = tmp("own-input.jsonl");
    let text = "{\"format\":\"coflow-jsonl\",\"version\":1,\"machines\":2}\n\
                {\"id\":1,\"arrival_ns\":0,\"flows\":[{\"src\":0,\"dst\":1,\"bytes\":1000}]}\n";
    std::fs::write(&trace, text).unwrap();
    let t = trace.to_str().unwrap();
    let dir = trace.parent().unwrap();
    let respelled = dir.join("..").join(dir.file_name().unwrap()).join("own-input.jsonl");
    let r = respelled.to_str().unwrap();
    let cases: &[&[&str]] = &[
        &["sim", "--trace", t, "--policies", "varys", "--json", t],
        &["sim", "--trace", t, "--policies", "varys", "--csv", r],
        &["sim", "sweep", "--trace", t, "--policies", "varys", "--concurrent", "1", "--json", r],
        &["trace", "stats", t, "--json", r],
        &["trace", "convert", t, r],
        &["trace", "spread", t, t, "--per-rack", "2"],
        &["bench", "--trace", t, "--json", t],
        &["status", "--token-file", t, "--json", r],
    ];
    for args in cases {
        let out = coflow().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("names the file") && err.contains("it would be written over"), "{args:?}: {err}");
        assert_eq!(std::fs::read_to_string(&trace).unwrap(), text, "{args:?} left the trace as it was");
    }
    // A topology's samples file is an input too, known once the topology is read.
    let samples = tmp("own-samples.txt");
    std::fs::write(&samples, "1.0\n2.0\n").unwrap();
    let topology = tmp("own-samples-topology.json");
    let links = format!(
        r#"[{{"from": "a", "to": "b", "samples_file": {:?}}}, {{"from": "b", "to": "a", "constant_gbps": 1}}]"#,
        samples.file_name().unwrap()
    );
    std::fs::write(&topology, format!(r#"{{"datacenters": ["a", "b"], "links": {links}}}"#)).unwrap();
    for flag in ["--json", "--csv"] {
        let out = coflow()
            .args(["sim", "--coflows", "4", "--machines", "4", "--policies", "mrtf", "--wan"])
            .arg(&topology)
            .arg(flag)
            .arg(&samples)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag}: {err}");
        assert!(err.contains("names the file the topology's samples_file names"), "{flag}: {err}");
        assert_eq!(std::fs::read_to_string(&samples).unwrap(), "1.0\n2.0\n", "{flag} left the samples as they were");
    }
}

/// What a run cannot do is refused before it starts, naming the flag: a search of no round, a
/// baseline that is a list, a synthetic workload's shape (or, where it seeds nothing else, its
/// seed) beside a trace, two outputs in one place, stages over a trace that has jobs already, a
/// workload too large to hold, the reference simulator's rules under the exact model, a rate
/// that is no number, a list that names nothing or one item twice, and a count of repetitions
/// that would run for days. None panics.
#[test]
fn runs_that_cannot_be_done_are_refused_by_flag_before_they_start() {
    let jobs = tmp("jobs.jsonl");
    std::fs::write(
        &jobs,
        "{\"format\":\"coflow-jsonl\",\"version\":1,\"machines\":2}\n\
         {\"id\":1,\"arrival_ns\":0,\"flows\":[{\"src\":0,\"dst\":1,\"bytes\":1000}]}\n\
         {\"id\":2,\"arrival_ns\":0,\"flows\":[{\"src\":0,\"dst\":1,\"bytes\":1000}],\"parents\":[1]}\n",
    )
    .unwrap();
    let jobs = jobs.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["sim", "--coflows", "5", "--wan", "default", "--policies", "siphon-mc", "--mc-rounds", "0"],
            "--mc-rounds must be at least 1",
        ),
        (
            &["sim", "--coflows", "5", "--wan", "default", "--policies", "siphon-mc", "--mc-breadth", "0"],
            "--mc-breadth must be at least 1",
        ),
        (&["wan-bench", "--mc-depth", "0"], "--mc-depth must be at least 1"),
        (&["sim", "--coflows", "5", "--baseline", "all"], "--baseline names one policy"),
        (&["sim", "--coflows", "5", "--baseline", "pfp,varys"], "--baseline names one policy"),
        (&["sim", "--trace", jobs, "--coflows", "5"], "--coflows and --machines shape the synthetic workload"),
        (&["trace", "stats", jobs, "--machines", "5"], "--coflows and --machines shape the synthetic workload"),
        (&["trace", "stats", jobs, "--seed", "5"], "--seed seeds the synthetic workload"),
        (&["trace", "stats", "--trace", jobs, "--seed", "5", "--json", "-"], "--seed seeds the synthetic workload"),
        (&["sim", "--coflows", "5", "--json", "-", "--csv", "-"], "--json and --csv both write to -"),
        (&["sim", "--coflows", "5", "--json", "./same.out", "--csv", "same.out"], "--json and --csv both write to"),
        (&["sim", "--coflows", "20", "--machines", "100000"], "use fewer machines or coflows"),
        (&["demo", "--agents", "100000"], "--agents must be 1 to 200"),
        (&["demo", "--total-bytes", "0"], "total bytes must be at least 1"),
        (
            &["sim", "sweep", "--coflows", "20", "--concurrent", "5", "--windows", "99999999999"],
            "--windows 99999999999",
        ),
        (&["sim", "--trace", jobs, "--stages", "2"], "--stages 2"),
        (&["trace", "gen", "-o", "-", "--coflows", "18446744073709551615"], "at most 1000000 coflows"),
        (&["bench", "--concurrent", "1000000000000"], "--concurrent 1000000000000"),
        (&["bench", "--coflows", "5", "--concurrent", "20000"], "--concurrent 20000"),
        (&["wan-bench", "--coflows", "20000"], "--coflows 20000: too many to draw on 150 machines"),
        (&["sim", "--coflows", "5", "--model", "exact", "--coflowsim-rules", "epochs"], "--coflowsim-rules"),
        (&["sim", "--coflows", "5", "--port-rate", "NaN"], "bad number \"NaN\""),
        (&["sim", "--coflows", "5", "--port-rate", "-1"], "--port-rate \"-1\""),
        (&["sim", "--coflows", "5", "--port-rate", "1e30"], "--port-rate \"1e30\": at most 1 Pbit/s"),
        (&["sim", "--coflows", "5", "--port-rate", "1.5Pbps"], "--port-rate \"1.5Pbps\": at most 1 Pbit/s"),
        (&["sim", "--coflows", "5", "--port-rate", "1bps"], "--port-rate \"1bps\": at least 1 kbit/s\n"),
        (&["sim", "--coflows", "5", "--deadline-fraction", "0.5", "--deadline-x", "3"], "--deadline-x sets the slack"),
        (&["sim", "--coflows", "5", "--deadlines", "--deadline-x", "1e308"], "at most 1000, got 1e308\n"),
        (&["bench", "--coflows", "5", "--port-rate", "100"], "\"100\": at least 1 kbit/s (a bare number is bytes"),
        (&["trace", "gen", "-o", "-", "--stages", "0"], "--stages must be at least 1"),
        (&["bench", "--coflows", "5", "--port-rate", "1e30"], "--port-rate \"1e30\": at most 1 Pbit/s"),
        (&["demo", "--port-rate", "8bps"], "--port-rate \"8bps\": at least 1 kbit/s"),
        (&["demo", "--port-rate", "4kbps"], "--port-rate \"4kbps\": an agent's port takes at least 1000 bytes"),
        (&["demo", "--port-rate", "1e308"], "--port-rate \"1e308\": at most 1 Pbit/s"),
        (&["wan-order", "--trace", jobs, "--loads", "1,1e-300"], "--loads: \"1e-300\" is not a number from 0.001 to"),
        (&["wan-order", "--trace", jobs, "--loads", "1e300"], "--loads: \"1e300\" is not a number from 0.001 to 1000"),
        (&["wan-order", "--trace", jobs, "--skews", "uniform-2"], "uniform-2: its spread around the mean must be"),
        (&["bench", "--coflows", "5", "--policies", ""], "--policies names no policy"),
        (&["bench", "--coflows", "5", "--policies", ",,"], "--policies names no policy"),
        (&["bench", "--coflows", "5", "--concurrent", "5,5"], "--concurrent names 5 twice"),
        (&["wan-bench", "--repeat", "18446744073709551615"], "--repeat 18446744073709551615: at most 10000"),
        (&["wan-order", "--trace", jobs, "--seeds", "1,2,1"], "--seeds: \"1\" is given twice"),
        (&["wan-order", "--trace", jobs, "--loads", "1,1.0"], "--loads: \"1.0\" is given twice"),
        (&["wan-order", "--trace", jobs, "--skews", "as-is,as-is"], "--skews: \"as-is\" is given twice"),
    ];
    for (args, says) in cases {
        let out = coflow().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: an error, not a panic: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: refused before any output");
    }
}

/// A reader that stops early (`| head`) ends the writing, never in a panic.
#[test]
fn a_closed_pipe_ends_the_output_without_a_panic() {
    use std::io::Read;
    let mut child = coflow()
        .args(["sim", "--coflows", "30", "--policies", "fifo,varys"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Closed before the report is written.
    drop(child.stdout.take());
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success() && !err.contains("panicked"), "{status:?}: {err}");
}

/// A report that cannot be written to standard output (a full disk: `/dev/full`) fails the
/// command, after it wrote the files it was asked for; a shell script sees the loss.
#[test]
fn a_report_on_a_full_disk_fails_the_command() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("skipping: no /dev/full");
        return;
    }
    let json = tmp("full-disk.json");
    let _ = std::fs::remove_file(&json);
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let sim = ["sim", "--coflows", "30", "--policies", "fifo,varys", "--json"];
    let out = coflow().args(sim).arg(&json).stdout(full()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("writing standard output").count(), 1, "said once: {err}");
    assert!(std::fs::read_to_string(&json).unwrap().starts_with('{'), "the JSON is written all the same");
    let help: [&[&str]; 4] = [&["--help"], &["sim", "-h"], &["help", "sim"], &["--version"]];
    for args in [&["completions", "bash"][..], &["sim", "--coflows", "30", "--policies", "fifo", "--json", "-"]]
        .into_iter()
        .chain(help)
    {
        let out = coflow().args(args).stdout(full()).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // Written where it can be, help and the version succeed, as plain text into a pipe.
    for args in help {
        let out = coflow().args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && out.stderr.is_empty() && text.contains("coflow"), "{args:?}: {text}");
        assert!(!text.contains('\x1b'), "{args:?}: {text}");
    }
}

/// A policy that finishes no coflow has no completion-time figures: `null` in the JSON and `-` in
/// the table, never 0 s (which would read as the best result of all).
#[test]
fn a_policy_that_finishes_nothing_reports_no_figures_rather_than_zero() {
    // A coflow that arrives half a second before the clock's end and needs a second: it cannot
    // finish.
    let late = tmp("finishes-nothing.jsonl");
    std::fs::write(
        &late,
        "{\"format\":\"coflow-jsonl\",\"version\":1,\"machines\":2}\n\
         {\"id\":1,\"arrival_ns\":18446744073209551615,\"flows\":[{\"src\":0,\"dst\":1,\"bytes\":125000000}]}\n",
    )
    .unwrap();
    // The table says why a coflow is left out in the words of the library's notes.
    let out = coflow().args(["sim", "--trace", late.to_str().unwrap(), "--policies", "varys"]).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("0/1") && table.contains(&coflow_sim::replay_end()), "{table}");
    let args = ["sim", "--trace", late.to_str().unwrap(), "--policies", "varys", "--baseline", ""];
    let out = coflow().args(args).args(["--json", "-"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &report["results"][0];
    assert_eq!(r["completed"], 0, "{r}");
    for key in ["avg_cct_s", "avg_fct_s", "p50_cct_s", "p95_cct_s", "p99_cct_s", "makespan_s", "bound_ratio"] {
        assert!(r[key].is_null(), "{key}: {}", r[key]);
    }
    assert!(r["bins"].as_array().unwrap().iter().all(|b| b["avg_cct_s"].is_null()), "{}", r["bins"]);
    let out = coflow().args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text.lines().find(|l| l.starts_with("varys")).unwrap();
    assert!(!row.contains("0.000") && row.contains(" - "), "{row}");
}

/// A closed standard error (`2>&1 | head -1`) loses only the remarks on a run: the run ends
/// well and writes every file it was asked for.
#[test]
fn a_closed_standard_error_loses_no_output_file() {
    let (json, csv, sweep) = (tmp("closed-err.json"), tmp("closed-err.csv"), tmp("closed-err-sweep.json"));
    for p in [&json, &csv, &sweep] {
        let _ = std::fs::remove_file(p);
    }
    let runs = [
        (vec!["sim", "--coflows", "30", "--policies", "fifo,varys", "--json"], &json, Some(&csv)),
        (vec!["sim", "sweep", "--coflows", "30", "--concurrent", "5", "--windows", "1", "--json"], &sweep, None),
    ];
    for (args, out, csv) in runs {
        let mut cmd = coflow();
        cmd.args(&args).arg(out);
        if let Some(c) = csv {
            cmd.arg("--csv").arg(c);
        }
        let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        drop(child.stderr.take());
        let status = child.wait().unwrap();
        assert!(status.success(), "{args:?}: {status:?}");
        assert!(std::fs::read_to_string(out).unwrap().starts_with('{'), "{args:?}: the JSON");
        if let Some(c) = csv {
            assert!(std::fs::metadata(c).unwrap().len() > 0, "{args:?}: the CSV");
        }
    }
}

/// The format a trace is written in is the one its name makes readers take it for, whatever
/// the case of its extension; a format its name contradicts is refused; `-` is standard output.
#[test]
fn a_written_trace_reads_back_as_what_its_name_says() {
    let generated = tmp("small.txt");
    assert!(coflow().args(["trace", "gen", "--coflows", "5", "-o"]).arg(&generated).status().unwrap().success());
    let upper = tmp("SMALL.JSONL");
    assert!(coflow().args(["trace", "convert"]).arg(&generated).arg(&upper).status().unwrap().success());
    assert!(std::fs::read_to_string(&upper).unwrap().starts_with('{'), "JSON Lines, as its name says");
    let stats = |p: &PathBuf| coflow().args(["trace", "stats", "--json", "-"]).arg(p).output().unwrap();
    let (a, b) = (stats(&generated), stats(&upper));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    assert_eq!(a.stdout, b.stdout);
    // JSON Lines under a `.txt` name (from elsewhere) is read for what it is.
    let misnamed = tmp("jsonl-named.txt");
    std::fs::copy(&upper, &misnamed).unwrap();
    assert_eq!(stats(&misnamed).stdout, a.stdout);
    let out = coflow().args(["trace", "convert", "--to", "jsonl"]).arg(&generated).arg(tmp("x.txt")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("x.txt says benchmark"));
    assert!(!tmp("x.txt").exists(), "nothing written");
    let out = coflow().args(["trace", "convert", "--to", "jsonl"]).arg(&generated).arg("-").output().unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, std::fs::read(&upper).unwrap());
}

#[test]
fn trace_gen_stats_and_convert_round_trip() {
    let generated = tmp("gen.txt");
    let out = coflow().args(["trace", "gen", "--seed", "3", "--coflows", "40", "-o"]).arg(&generated).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let jsonl = tmp("gen.jsonl");
    let back = tmp("back.txt");
    assert!(coflow().args(["trace", "convert"]).arg(&generated).arg(&jsonl).status().unwrap().success());
    assert!(coflow().args(["trace", "convert"]).arg(&jsonl).arg(&back).status().unwrap().success());
    let stats = |p: &PathBuf| coflow().args(["trace", "stats", "--json", "-"]).arg(p).output().unwrap().stdout;
    assert_eq!(stats(&generated), stats(&back));
    // The trace is named as in every other command, too; both ways at once is refused.
    let named = coflow().args(["trace", "stats", "--json", "-", "--trace"]).arg(&generated).output().unwrap();
    assert_eq!(named.stdout, stats(&generated));
    let both = coflow().args(["trace", "stats", "--trace"]).arg(&generated).arg(&back).output().unwrap();
    assert_eq!(both.status.code(), Some(2), "{}", String::from_utf8_lossy(&both.stderr));
    // A seed beside a trace draws only the jobs of --stages: alone it is refused, as the
    // synthetic workload's shape is (the refusal is among the runs that cannot be done).
    let staged = |seed: &str| {
        let args = ["trace", "stats", "--json", "-", "--stages", "3", "--seed", seed];
        let out = coflow().args(args).arg(&generated).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    assert_ne!(staged("5"), staged("6"), "the seed draws the jobs");
    let text = String::from_utf8(coflow().args(["trace", "stats"]).arg(&generated).output().unwrap().stdout).unwrap();
    for bin in ["SN", "LN", "SW", "LW"] {
        assert!(text.contains(bin), "{text}");
    }
}

/// The acceptance figure of the foundation: on the Facebook trace at 128 MiB/s ports every coflow
/// completes under both policies and Varys improves average CCT over fair sharing by at least
/// 2.2x (the reference Java simulator gets about 2.5).
#[test]
fn facebook_trace_varys_beats_fair_by_at_least_2_2() {
    let Some(trace) = facebook_trace() else { return };
    let json = tmp("fb.json");
    let out = coflow()
        .args(["sim", "--policies", "varys,fair", "--port-rate", "128MiB/s", "--trace"])
        .arg(&trace)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let get = |p: &str| report["results"].as_array().unwrap().iter().find(|r| r["policy"] == p).unwrap().clone();
    let (varys, fair) = (get("varys"), get("fair"));
    assert_eq!(varys["completed"], 526);
    assert_eq!(fair["completed"], 526);
    let factor = fair["avg_cct_s"].as_f64().unwrap() / varys["avg_cct_s"].as_f64().unwrap();
    assert!(factor >= 2.2, "varys improves on fair by only {factor:.2}x");
}

fn coflow_sched_names() -> Vec<&'static str> {
    coflow_sched::policy::NAMES.to_vec()
}

#[test]
fn demo_replays_real_bytes_and_reports_measured_next_to_simulated() {
    let json = tmp("demo.json");
    let out = coflow()
        .args([
            "demo",
            "--agents",
            "4",
            "--coflows",
            "8",
            "--total-bytes",
            "20000000",
            "--port-rate",
            "200Mbps",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.lines().any(|l| l.starts_with("varys")) && table.lines().any(|l| l.starts_with("fair")), "{table}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        assert_eq!(r["completed"], 8, "every coflow completed with its exact bytes: {r}");
        assert_eq!(r["failed_gets"], 0);
        for key in ["measured_avg_cct_s", "measured_p95_cct_s", "simulated_avg_cct_s"] {
            assert!(r[key].as_f64().unwrap() > 0.0, "{key} in {r}");
        }
        assert!(r["policy"].is_string());
    }
}

/// `--json -` puts the report alone on standard output (the table goes to standard error), and
/// an output that cannot be written fails before the run, naming it.
#[test]
fn json_goes_to_stdout_with_a_dash_and_a_bad_path_fails_at_once() {
    let out = coflow().args(["sim", "--coflows", "20", "--policies", "varys,fair", "--json", "-"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("standard output is the JSON report");
    assert!(v.get("results").is_some() || v.get("policies").is_some(), "{v}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("varys"), "the table went to standard error");
    for cmd in [
        vec!["sim", "--coflows", "20", "--json"],
        vec!["sim", "--coflows", "20", "--csv"],
        vec!["bench", "--coflows", "20", "--json"],
        vec!["trace", "stats", "--json"],
    ] {
        let t = std::time::Instant::now();
        let out = coflow().args(&cmd).arg("/nonexistent-dir/out.json").output().unwrap();
        assert!(!out.status.success(), "{cmd:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("/nonexistent-dir/out.json"), "{cmd:?}: {err}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{cmd:?} failed only after {:?}", t.elapsed());
    }
    let stats = tmp("stats.json");
    assert!(coflow().args(["trace", "stats", "--json"]).arg(&stats).status().unwrap().success());
    assert!(std::fs::read_to_string(&stats).unwrap().contains("\"coflows\""));
}

/// A report replaces its file through a new file beside it: a file that can be opened but whose
/// directory takes no new file (`/proc/version`, even to root) is refused before the run, not
/// after it.
#[test]
fn an_output_whose_directory_takes_no_new_file_fails_before_the_run() {
    let version = std::path::Path::new("/proc/version");
    if !version.is_file() {
        eprintln!("skipping: no /proc/version");
        return;
    }
    for flag in ["--json", "--csv"] {
        let out = coflow().args(["sim", "--coflows", "20", "--policies", "varys", flag]).arg(version).output().unwrap();
        assert!(!out.status.success(), "{flag}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot write /proc/version"), "{flag}: {err}");
        assert!(out.stdout.is_empty(), "{flag}: the run went ahead: {}", String::from_utf8_lossy(&out.stdout));
    }
}

/// Runs `cmd` to its end, killed as a failure if it is still running after a minute (a guard
/// against a hang, not a measure of speed).
fn finished(mut cmd: Command, what: &str) -> std::process::Output {
    let mut child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("{what} still running after a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// An output path that is a named FIFO is written as `cat > fifo` writes it: the reader gets the
/// whole output. The path is not opened to test it first, which would give the reader its end
/// and leave the real write waiting for a reader that never comes.
#[test]
fn an_output_to_a_fifo_reaches_its_reader_whole() {
    let dir = tmp("fifo-outputs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("out");
    if !Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        eprintln!("skipping: mkfifo is not available");
        return;
    }
    let trace = dir.join("in.txt");
    assert!(coflow().args(["trace", "gen", "--coflows", "5", "-o"]).arg(&trace).output().unwrap().status.success());
    let (t, f) = (trace.to_str().unwrap(), fifo.to_str().unwrap());
    let cases: [&[&str]; 4] = [
        &["sim", "--coflows", "20", "--machines", "10", "--policies", "varys", "--json", f],
        &["sim", "--trace", t, "--policies", "varys", "--csv", f],
        &["trace", "gen", "--coflows", "5", "-o", f],
        &["trace", "convert", t, f, "--to", "jsonl"],
    ];
    for args in cases {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        let mut cmd = coflow();
        cmd.args(args);
        let out = finished(cmd, &format!("{args:?}"));
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let got = String::from_utf8(reader.join().unwrap()).unwrap();
        // The same command into a regular file writes what the reader got.
        let file = dir.join("regular");
        let regular: Vec<&str> = args.iter().map(|a| if *a == f { file.to_str().unwrap() } else { a }).collect();
        assert!(coflow().args(&regular).output().unwrap().status.success(), "{regular:?}");
        let want = std::fs::read_to_string(&file).unwrap();
        match args[0] {
            "trace" => assert_eq!(got, want, "{args:?}"),
            _ => assert_eq!(got.lines().count(), want.lines().count(), "{args:?}: {got}"),
        }
        assert!(!got.is_empty(), "{args:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An output path that names the file standard output writes (`/dev/stdout`, `/dev/fd/1`, the
/// redirected file itself) is standard output, as `-` is: the human table goes to standard
/// error. One that names standard error's file is written through standard error in order,
/// never reopened: nothing is truncated away or written over.
#[test]
fn an_output_named_for_standard_output_or_error_is_written_in_order() {
    let (o, e) = (tmp("streams-out.txt"), tmp("streams-err.txt"));
    let csv = tmp("streams.csv");
    let sim = ["sim", "--coflows", "20", "--machines", "10", "--policies", "varys"];
    assert!(coflow().args(sim).arg("--csv").arg(&csv).output().unwrap().status.success());
    let want_csv = std::fs::read_to_string(&csv).unwrap();
    let by_path = o.to_str().unwrap().to_string();
    for json in ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1", &by_path] {
        let run = |json: &str, csv: &str| {
            let mut cmd = coflow();
            cmd.args(sim).args(["--json", json, "--csv", csv]);
            cmd.stdout(std::fs::File::create(&o).unwrap()).stderr(std::fs::File::create(&e).unwrap());
            let status = cmd.status().unwrap();
            (status, std::fs::read_to_string(&o).unwrap(), std::fs::read_to_string(&e).unwrap())
        };
        let (status, out, err) = run(json, "/dev/stderr");
        assert!(status.success(), "{json}: {err}");
        let report: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{json}: {e}: {out}"));
        assert_eq!(report["results"][0]["policy"], "varys", "{json}");
        // Standard error holds the table, then the CSV whole, then the closing remark.
        let table = err.find("policy ").unwrap_or_else(|| panic!("{json}: no table in {err}"));
        let at = err.find(&want_csv).unwrap_or_else(|| panic!("{json}: the CSV is not whole in {err}"));
        let remark = err.find("simulated 2 policies").unwrap_or_else(|| panic!("{json}: {err}"));
        assert!(table < at && at + want_csv.len() <= remark, "{json}: {err}");
        // Standard output named twice is two outputs in one place.
        let (status, _, err) = run(json, "-");
        assert_eq!(status.code(), Some(1), "{json}");
        assert!(err.contains("both write to"), "{json}: {err}");
    }
    // A trace written to standard error's file comes after what was said before it, whole.
    let mut cmd = coflow();
    cmd.args(["trace", "gen", "--coflows", "3", "-o", "/dev/stderr"]).stderr(std::fs::File::create(&e).unwrap());
    assert!(cmd.status().unwrap().success());
    let err = std::fs::read_to_string(&e).unwrap();
    let trace = coflow().args(["trace", "gen", "--coflows", "3", "-o", "-"]).output().unwrap();
    assert!(err.starts_with(std::str::from_utf8(&trace.stdout).unwrap()), "{err}");
    assert!(err.ends_with("to /dev/stderr\n"), "{err}");
}

/// A count of one is printed in the singular (`1 coflow`, `1 datacenter`, `1 decision`), in
/// every report that counts; the JSON keeps its numbers.
#[test]
fn a_count_of_one_is_singular() {
    let one = tmp("one-dc.json");
    std::fs::write(&one, r#"{"datacenters": ["a"], "links": []}"#).unwrap();
    let sim = ["sim", "--coflows", "1", "--machines", "2", "--policies", "varys"];
    let runs: [(Vec<&str>, &[&str]); 4] = [
        (
            sim.to_vec(),
            &[
                "synthetic (seed 1, 1 coflow, 2 machines) — 1 coflow, 1 flow, 2 machines;",
                "SN (1 coflow) ",
                "LN (0 coflows)",
            ],
        ),
        ([&sim[..], &["--wan", one.to_str().unwrap()]].concat(), &["1 coflow, 1 flow", "wide area: 1 datacenter;"]),
        (vec!["trace", "gen", "--coflows", "1", "--machines", "2", "-o", "-"], &["wrote 1 coflow (1 flow) to"]),
        (
            vec!["bench", "--coflows", "3", "--concurrent", "1", "--decisions", "1", "--policies", "varys"],
            &["(up to 1 decision after the first;"],
        ),
    ];
    for (args, says) in runs {
        let out = coflow().args(&args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {text}");
        for s in says {
            assert!(text.contains(s), "{args:?}: no {s:?} in {text}");
        }
    }
    let out = coflow().args(sim).args(["--json", "-"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((report["workload"]["coflows"].as_u64(), report["workload"]["flows"].as_u64()), (Some(1), Some(1)));
}

/// Sizes take units, and every shell gets its completions.
#[test]
fn sizes_take_units_and_completions_are_printed() {
    // The size parses; the run then stops at the next check.
    let out = coflow().args(["demo", "--total-bytes", "600MB", "--agents", "0"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--agents"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = coflow().args(["demo", "--total-bytes", "600 furlongs"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--total-bytes"));
    // So do durations, in any unit or the flag's own; the run then stops at the policy.
    for redraw in ["100ms", "100", "0.1s"] {
        let out =
            coflow().args(["sim", "--wan", "default", "--redraw-ms", redraw, "--policies", "nope"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--policies") && !err.contains("--redraw-ms"), "{redraw}: {err}");
    }
    let out = coflow().args(["sim", "--wan", "default", "--redraw-ms", "100 parsecs"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--redraw-ms"));
    for shell in ["bash", "zsh", "fish"] {
        let out = coflow().args(["completions", shell]).output().unwrap();
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("bench-live"), "{shell}");
    }
    let help = String::from_utf8(coflow().args(["sim", "--help"]).output().unwrap().stdout).unwrap();
    for name in coflow_sched_names() {
        assert!(help.contains(name), "`coflow sim --help` does not list {name}");
    }
}

#[test]
fn demo_rejects_bad_flags_with_the_flag_named() {
    let out = coflow().args(["demo", "--port-rate", "fast"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--port-rate"));
    let out = coflow().args(["demo", "--policies", "nope"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--policies"));
}

#[test]
fn offline_releases_every_coflow_at_time_zero() {
    let csv = tmp("offline.csv");
    let out = coflow()
        .args(["sim", "--coflows", "30", "--policies", "sincronia,varys", "--offline", "--csv"])
        .arg(&csv)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("offline"), "{table}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let arrivals: Vec<&str> = text.lines().skip(1).map(|l| l.split(',').nth(2).unwrap()).collect();
    assert_eq!(arrivals.len(), 60);
    assert!(arrivals.iter().all(|a| a.parse::<f64>().unwrap() == 0.0), "{arrivals:?}");
}

#[test]
fn a_deadline_fraction_mixes_deadline_and_best_effort_coflows() {
    let json = tmp("mix.json");
    let csv = tmp("mix.csv");
    let out = coflow()
        .args(["sim", "--coflows", "60", "--policies", "edf,varys-deadline", "--deadline-fraction", "0.5", "--json"])
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("non-deadline avg CCT s"), "{table}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for r in report["results"].as_array().unwrap() {
        assert!(r["deadline_met_fraction"].as_f64().is_some(), "{r}");
        assert!(r["non_deadline_avg_cct_s"].as_f64().is_some_and(|a| a > 0.0), "{r}");
    }
    // About half the coflows carry a deadline.
    let text = std::fs::read_to_string(&csv).unwrap();
    let edf: Vec<&str> = text.lines().filter(|l| l.starts_with("edf,")).collect();
    let with = edf.iter().filter(|l| !l.split(',').nth(8).unwrap().is_empty()).count();
    assert!((15..=45).contains(&with), "{with} of 60 coflows have a deadline");

    let out = coflow().args(["sim", "--coflows", "10", "--deadline-fraction", "1.5"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--deadline-fraction"));
}

#[test]
fn the_reference_model_runs_its_policies_and_refuses_the_others_by_name() {
    let json = tmp("coflowsim.json");
    let list = "varys,fair,pfp,fifo,scf,ncf,tcf,aalo";
    let out = coflow()
        .args(["sim", "--model", "coflowsim", "--coflows", "30", "--policies", list, "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("(model: coflowsim, every rule)"), "{table}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    let names: Vec<&str> = results.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(names, list.split(',').collect::<Vec<_>>(), "rows go by the names asked for");
    assert!(results.iter().all(|r| r["completed"] == 30), "{results:?}");

    // `all` (the default) means the reference simulator's policies, in the same order.
    let all = tmp("coflowsim-all.json");
    let out = coflow().args(["sim", "--model", "coflowsim", "--coflows", "30", "--json"]).arg(&all).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&all).unwrap()).unwrap();
    let ran: Vec<&str> = report["results"].as_array().unwrap().iter().map(|r| r["policy"].as_str().unwrap()).collect();
    let mut expected: Vec<&str> = list.split(',').collect();
    expected.sort_by_key(|p| coflow_sched::policy::NAMES.iter().position(|n| n == p));
    assert_eq!(ran, expected);

    // A policy named that the reference simulator lacks is refused by name, under the option
    // that named it.
    let out = coflow()
        .args(["sim", "--model", "coflowsim", "--coflows", "30", "--policies", "varys,varys-deadline"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--policies: policy \"varys-deadline\" has no counterpart in the reference simulator"),
        "{err}"
    );
    let out =
        coflow().args(["sim", "--model", "coflowsim", "--coflows", "30", "--baseline", "sincronia"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error: --baseline: policy \"sincronia\" has no counterpart"), "{err}");

    let out = coflow().args(["sim", "--coflowsim-rules", "epochs,quanta", "--coflows", "30"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--coflowsim-rules") && err.contains("\"quanta\""), "{err}");

    let out = coflow().args(["sim", "--coflowsim-rules", ",", "--coflows", "30"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--coflowsim-rules names no rule"));

    // The help names every rule.
    let out = coflow().args(["sim", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let names = coflow_sim::coflowsim::Rules::NAMES.join(", ");
    assert!(help.contains(&format!("(implies --model coflowsim): {names}, or all")), "{help}");
}

#[test]
fn bench_json_has_every_policy_with_scratch_and_incremental_times_at_each_concurrency() {
    let json = tmp("bench.json");
    let out = coflow()
        .args(["bench", "--coflows", "30", "--machines", "10", "--policies", "pfp,fair,aalo", "--concurrent", "40,80"])
        .args(["--decisions", "3", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("scratch mean") && stdout.contains("incr mean"), "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let policies = v["policies"].as_array().expect("a policies list");
    let names: Vec<&str> = policies.iter().map(|p| p["policy"].as_str().unwrap()).collect();
    assert_eq!(names, ["pfp", "fair", "aalo"]);
    for p in policies {
        assert!(p["replay_wall_s"].as_f64().unwrap() >= 0.0, "{p}");
        assert!(p["events"].as_u64().unwrap() > 0 && p["decisions"].as_u64().unwrap() > 0, "{p}");
        let conc = p["concurrency"].as_array().expect("a concurrency list");
        let coflows: Vec<u64> = conc.iter().map(|c| c["coflows"].as_u64().unwrap()).collect();
        assert_eq!(coflows, [40, 80], "{p}");
        for c in conc {
            for field in ["scratch_mean_ms", "scratch_p99_ms", "incremental_mean_ms", "incremental_p99_ms"] {
                let x = c[field].as_f64().unwrap_or_else(|| panic!("{field} missing in {c}"));
                assert!(x >= 0.0 && x.is_finite(), "{field} = {x}");
            }
            // p99 is one of the times, never below their mean.
            let le = |a: &str, b: &str| c[a].as_f64().unwrap() <= c[b].as_f64().unwrap() + 1e-12;
            assert!(le("scratch_mean_ms", "scratch_p99_ms") && le("incremental_mean_ms", "incremental_p99_ms"), "{c}");
        }
    }
}

/// A replay that makes no decision has no decision time: the table shows `-` and the JSON
/// `null`, never a mean of zero that reads as an instant decision.
#[test]
fn bench_of_an_empty_replay_reports_no_decision_time() {
    let out = coflow()
        .args(["bench", "--coflows", "0", "--policies", "varys", "--concurrent", "40", "--decisions", "2"])
        .args(["--json", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v["policies"][0];
    assert_eq!((p["events"].as_u64(), p["decisions"].as_u64()), (Some(0), Some(0)), "{p}");
    assert!(p["decide_mean_ms"].is_null() && p["decide_p99_ms"].is_null(), "{p}");
    // The concurrency measurement does not depend on the replay: it still times its decisions.
    assert!(p["concurrency"][0]["incremental_mean_ms"].as_f64().is_some_and(|x| x > 0.0), "{p}");
    let table = String::from_utf8_lossy(&out.stderr);
    let row = table.lines().find(|l| l.starts_with("varys ")).unwrap_or_else(|| panic!("{table}"));
    assert!(row.split_whitespace().rev().take(2).all(|c| c == "-"), "{row}");
}

/// `--trace -` reads standard input, so commands compose in a pipe: a generated trace replays
/// as the same trace read from a file does, to the byte.
#[test]
fn a_trace_of_dash_is_read_from_standard_input() {
    use std::io::Write as _;
    let file = tmp("piped.txt");
    let made = coflow().args(["trace", "gen", "--coflows", "8", "--machines", "6", "-o", "-"]).output().unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    std::fs::write(&file, &made.stdout).unwrap();
    let run = |trace: &str, input: Option<&[u8]>| {
        let mut child = coflow()
            .args(["sim", "--trace", trace, "--policies", "varys", "--json", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        if let Some(bytes) = input {
            stdin.write_all(bytes).unwrap();
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // The source names where the trace came from; the figures must agree.
        report["workload"]["source"] = serde_json::Value::Null;
        report
    };
    assert_eq!(run("-", Some(&made.stdout)), run(file.to_str().unwrap(), None));
}

/// A policy that rejects coflows has its factors marked: its average is over the coflows it
/// finished, the baseline's and the bounds' over all of them.
#[test]
fn factors_over_fewer_coflows_are_marked() {
    let out = coflow()
        .args(["sim", "--coflows", "100", "--machines", "30", "--deadlines", "--policies", "varys-deadline,varys"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    let row = |p: &str| table.lines().find(|l| l.split_whitespace().next() == Some(p)).unwrap().to_string();
    let (rejecting, all) = (row("varys-deadline"), row("varys"));
    assert!(!rejecting.contains("100/100"), "the check is real: some coflow is rejected\n{table}");
    assert_eq!(rejecting.matches("x*").count(), 2, "both factors marked: {rejecting}");
    assert!(all.contains("100/100") && !all.contains('*'), "{all}");
    assert!(table.contains("\n*: the policy's figure is over the coflows it finished"), "{table}");
}
