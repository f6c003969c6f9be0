//! `coflow status` against a real coordinator at its `max_coflows` (100,000 live coflows, 250-byte
//! names, some carrying characters that reorder or hide text): `--json` returns every coflow with
//! its exact name, the table prints every name with those characters escaped, a name with terminal
//! escapes is refused, and one coflow more is refused.

use std::time::{Duration, Instant};

use coflow_client::{ClientError, CoflowOptions};

use crate::coflow;
use crate::procs::{Procs, Spec};

/// The coordinator's default `max_coflows`.
const N: usize = 100_000;

/// Coflow `i`'s name: 250 bytes, every 1,000th with a right-to-left override and a zero-width
/// space, which a terminal would act on (reversing what follows) or hide.
fn name(i: usize) -> String {
    if i.is_multiple_of(1000) { format!("\u{202e}\u{200b}pwned{i:0>239}") } else { format!("{i:0>250}") }
}

#[test]
fn status_shows_100_000_live_coflows_with_names_made_safe() {
    // One client registers them all: its share of the places is lifted to the whole.
    let spec = Spec { coordinator_toml: format!("max_coflows_per_owner = {N}\n"), ..Spec::new(1) };
    let procs = Procs::start("status-100k", spec);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let took = rt.block_on(async {
        procs.ready().await;
        let c = procs.client(0).await;
        // Registered concurrently on one connection: tasks take names by stride.
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        const TASKS: usize = 64;
        for t in 0..TASKS {
            let c = c.clone();
            tasks.spawn(async move {
                for i in (t..N).step_by(TASKS) {
                    c.register(1, CoflowOptions { name: name(i), ..Default::default() }).await?;
                }
                Ok::<_, ClientError>(())
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap().unwrap();
        }
        let took = started.elapsed();
        // A name that would clear the screen, ring the bell and set the window title is refused.
        let escapes = CoflowOptions { name: "\u{1b}[2J\u{7}\u{1b}]0;pwned\u{7}".into(), ..Default::default() };
        let refused = c.register(1, escapes).await;
        assert!(
            matches!(&refused, Err(ClientError::Invalid(m)) if m.contains("options.name")),
            "a name with terminal escapes: {refused:?}"
        );
        let more = c.register(1, CoflowOptions::default()).await;
        assert!(matches!(more, Err(ClientError::LimitExceeded(_))), "coflow {} of max_coflows {N}: {more:?}", N + 1);
        took
    });
    eprintln!("{N} coflows registered in {took:.2?}");
    let certs = procs.dir.join("certs");
    let f = |name: &str| certs.join(name).display().to_string();
    let status = |json: bool| {
        let mut cmd = coflow();
        cmd.args(["status", "--coordinator", &procs.coordinator_url]).args([
            "--tls-ca",
            &f("ca.crt"),
            "--tls-cert",
            &f("client-testkit.crt"),
            "--tls-key",
            &f("client-testkit.key"),
        ]);
        if json {
            cmd.arg("--json");
        }
        let started = Instant::now();
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        eprintln!(
            "coflow status{}: {} bytes in {:.2?}",
            if json { " --json" } else { "" },
            out.stdout.len(),
            started.elapsed()
        );
        out.stdout
    };
    let out = status(true);
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let coflows = report["coflows"].as_array().unwrap();
    assert_eq!(coflows.len(), N, "every live coflow");
    let mut names: Vec<&str> = coflows.iter().map(|c| c["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    let mut want: Vec<String> = (0..N).map(name).collect();
    want.sort_unstable();
    assert!(names == want, "each coflow once, with its exact name");
    let mut ids: Vec<u64> = coflows.iter().map(|c| c["id"].as_u64().unwrap()).collect();
    ids.dedup();
    assert_eq!(ids.len(), N, "each id once, in order");

    let table = String::from_utf8(status(false)).unwrap();
    for c in ['\u{202e}', '\u{200b}'] {
        assert!(!table.contains(c), "a raw {c:?} reached the terminal");
    }
    assert!(table.contains(&format!("coflows: {N}\n")), "the table's count");
    assert_eq!(
        table.matches("\\u{202e}\\u{200b}pwned").count(),
        N / 1000,
        "every name with hidden characters, escaped"
    );
}

/// A watch rides out a coordinator that goes away and comes back: it says so once (however many
/// refreshes fail) and shows the cluster again; a refused token ends it at once.
#[test]
fn a_watch_outlives_a_coordinator_restart_and_ends_on_a_refused_token() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;
    let mut procs = Procs::start("status-watch", Spec { tls: false, ..Spec::new(0) });
    let url = procs.coordinator_url.clone();
    let watch = |token: &str| {
        let mut c = coflow();
        c.args(["status", "--coordinator", &url, "--watch", "0.1", "--json", "-"]);
        c.env("COFLOW_TOKEN", token).env_remove("COFLOW_TOKEN_FILE").env_remove("RUST_LOG").env("NO_COLOR", "1");
        c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    };
    let mut child = crate::procs::Proc(watch(crate::procs::TOKEN));
    let (tx, rx) = mpsc::channel();
    let stdout = BufReader::new(child.0.stdout.take().unwrap());
    std::thread::spawn(move || stdout.lines().map_while(Result::ok).for_each(|l| drop(tx.send(l))));
    let line = rx.recv_timeout(Duration::from_secs(30)).expect("a first answer");
    assert!(line.contains("\"coflows\""), "{line}");

    procs.coordinator.signal("KILL");
    let _ = procs.coordinator.0.wait();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.0.try_wait().unwrap().is_none(), "the watch goes on while the coordinator is away");
    while rx.try_recv().is_ok() {}
    procs.start_coordinator();
    let line = rx.recv_timeout(Duration::from_secs(30)).expect("an answer once the coordinator is back");
    assert!(line.contains("\"coflows\""), "{line}");
    child.signal("INT");
    let status = child.0.wait().unwrap();
    assert!(status.success(), "Ctrl-C ends a watch cleanly: {status:?}");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err).unwrap();
    let said: Vec<&str> = err.lines().filter(|l| l.contains("asking again every 0.1 s")).collect();
    // About 15 refreshes failed; the error is said again only when it changes (the call cut by
    // the kill, then refused).
    assert!((1..8).contains(&said.len()), "{err}");
    assert!(said[0].contains("coordinator unreachable") && said[0].contains(&url), "{err}");

    // A token the coordinator refuses ends the watch, whatever the refresh.
    let out = watch("a-token-it-does-not-know").wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused"), "{}", String::from_utf8_lossy(&out.stderr));
}
