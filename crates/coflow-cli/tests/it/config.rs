//! The services' TOML files: durations, sizes and rates with their units, the suffixed names with
//! bare numbers, and errors that name the line and field; and the loaders as a fuzzer would try
//! them, over generated files and arbitrary text.

use coflow_agent::AgentConfig;
use coflow_coordinator::CoordinatorConfig;
use proptest::prelude::*;

#[test]
fn durations_sizes_and_rates_take_units_and_the_suffixed_names_take_numbers() {
    let with_units: CoordinatorConfig = toml::from_str(
        "agent_timeout = \"3s\"\nheartbeat_interval = \"250ms\"\nbypass_threshold = \"25MB\"\npush_window = \"2ms\"\n",
    )
    .unwrap();
    let numbers: CoordinatorConfig = toml::from_str(
        "agent_timeout_ms = 3000\nheartbeat_interval_ms = 250\nbypass_threshold_bytes = 25000000\npush_window_ms = 2\n",
    )
    .unwrap();
    assert_eq!(with_units, numbers);
    assert_eq!((numbers.agent_timeout_ms, numbers.bypass_threshold_bytes), (3000, 25_000_000));
    assert_ne!(numbers, CoordinatorConfig::default(), "the check is real: the fields changed");

    let agent: AgentConfig = toml::from_str(
        "max_stored = \"100MB\"\nchunk = \"64KiB\"\nport_rate = \"1Gbps\"\ndata_idle_timeout = \"1.5s\"\n\
         coordinator_grace = \"1m\"\nsocket_buffer_bytes = 4096\n",
    )
    .unwrap();
    assert_eq!(agent.max_stored_bytes, 100_000_000);
    assert_eq!(agent.chunk_bytes, 64 << 10);
    assert_eq!(agent.port_rate_bps, 125_000_000.0);
    assert_eq!((agent.data_idle_timeout_ms, agent.coordinator_grace_ms), (1500, 60_000));
    assert_eq!(agent.socket_buffer_bytes, 4096);
    let numeric: AgentConfig = toml::from_str("port_rate_bps = 1000.5\nmax_stored_bytes = 7\n").unwrap();
    assert_eq!((numeric.port_rate_bps, numeric.max_stored_bytes), (1000.5, 7));
}

#[test]
fn a_value_that_does_not_parse_names_its_line_field_and_what_was_expected() {
    let e = toml::from_str::<CoordinatorConfig>("policy = \"varys\"\nagent_timeout = \"3 parsecs\"\n").unwrap_err();
    let text = e.to_string();
    assert!(text.contains("line 2") && text.contains("agent_timeout"), "{text}");
    assert!(text.contains("unknown duration unit"), "{text}");
    let e = toml::from_str::<AgentConfig>("max_stored = \"lots\"\n").unwrap_err().to_string();
    assert!(e.contains("max_stored") && e.contains("bad size"), "{e}");
    let e = toml::from_str::<AgentConfig>("chunk_bytes = -4\n").unwrap_err().to_string();
    assert!(e.contains("chunk_bytes") && e.contains("is not a size"), "{e}");
    let e = toml::from_str::<AgentConfig>("heartbeat_interval = true\n").unwrap_err().to_string();
    assert!(e.contains("heartbeat_interval") && e.contains("a duration"), "{e}");
}

/// Keys a generated file may use: every field of the service's config under both its names, and
/// one that is none.
const COORDINATOR_KEYS: &[&str] = &[
    "listen",
    "metrics_listen",
    "policy",
    "push_window_ms",
    "push_window",
    "bypass_threshold_bytes",
    "bypass_threshold",
    "heartbeat_interval_ms",
    "heartbeat_interval",
    "deadline_margin_ms",
    "deadline_margin",
    "agent_timeout_ms",
    "agent_timeout",
    "max_coflows",
    "max_coflows_per_owner",
    "max_pieces_per_coflow",
    "max_pieces_per_owner",
    "max_gets_per_owner_per_source",
    "status_page",
    "status_hosts",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "no_such_field",
];

const AGENT_KEYS: &[&str] = &[
    "machine",
    "coordinator",
    "listen",
    "data_listen",
    "data_advertise",
    "metrics_listen",
    "data_dir",
    "port_rate_bps",
    "port_rate",
    "cap_port",
    "heartbeat_interval_ms",
    "heartbeat_interval",
    "chunk_bytes",
    "chunk",
    "socket_buffer_bytes",
    "socket_buffer",
    "max_stored_bytes",
    "max_stored",
    "max_stored_bytes_per_client",
    "max_stored_per_client",
    "max_data_connections",
    "max_data_connections_per_peer",
    "data_idle_timeout_ms",
    "data_idle_timeout",
    "coordinator_grace_ms",
    "coordinator_grace",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "no_such_field",
];

/// A TOML value: whole numbers at the edges of every range a field checks (and past 2^53, where
/// a float would round), floats, strings with and without units, booleans, arrays.
fn value() -> impl Strategy<Value = String> {
    let whole = prop_oneof![
        0i64..=5,
        prop::sample::select(vec![
            99,
            100,
            1000,
            1024,
            4096,
            5000,
            60_000,
            65_535,
            65_536,
            3_600_000,
            3_600_001,
            86_400_000,
            (1 << 53) + 1,
            (1 << 62) + 1,
            i64::MAX,
            -1,
            i64::MIN,
        ]),
        any::<i64>(),
    ];
    let text = prop::sample::select(vec![
        "3s",
        "100ms",
        "1.5s",
        "0.5ms",
        "1m",
        "100MB",
        "64KiB",
        "1Gbps",
        "125MB/s",
        "3 parsecs",
        "",
        "lots",
        "varys",
        "fair",
        "tcp",
        "no-such-policy",
        "127.0.0.1:0",
        "http://127.0.0.1:7070",
        "https://127.0.0.1:7070",
        "/nonexistent/ca.crt",
        "99999999999999999999999s",
    ]);
    prop_oneof![
        4 => whole.prop_map(|v| v.to_string()),
        1 => prop::sample::select(vec!["1.5", "3000.0", "1e6", "1e300", "-0.0", "inf", "nan", "18446744073709551616.0"]).prop_map(String::from),
        3 => text.prop_map(|s| format!("{s:?}")),
        1 => any::<bool>().prop_map(|b| b.to_string()),
        1 => Just("[1, 2]".to_string()),
    ]
}

/// A config file of `key = value` lines over `keys`.
fn file(keys: &'static [&'static str]) -> impl Strategy<Value = Vec<(&'static str, String)>> {
    prop::collection::vec((prop::sample::select(keys), value()), 0..6)
}

/// Checks a TOML error names a line of the file and the key written on it.
fn names_line_and_key(e: &toml::de::Error, lines: &[(&str, String)]) -> Result<(), TestCaseError> {
    let text = e.to_string();
    let line: usize = text
        .split("line ")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| TestCaseError::fail(format!("no line in {text}")))?;
    prop_assert!((1..=lines.len()).contains(&line), "line {line} of {}: {text}", lines.len());
    prop_assert!(text.contains(lines[line - 1].0), "{text}");
    Ok(())
}

/// A whole number written to a field that keeps it in the same unit, and what the config holds.
fn kept(key: &str, written: &str, held: Option<u64>) -> Result<(), TestCaseError> {
    if let (Ok(n), Some(held)) = (written.parse::<u64>(), held) {
        prop_assert_eq!(held, n, "{} = {} read back as {}", key, written, held);
    }
    Ok(())
}

fn coordinator_number(c: &CoordinatorConfig, key: &str) -> Option<u64> {
    Some(match key {
        "push_window_ms" | "push_window" => c.push_window_ms,
        "bypass_threshold_bytes" | "bypass_threshold" => c.bypass_threshold_bytes,
        "heartbeat_interval_ms" | "heartbeat_interval" => c.heartbeat_interval_ms,
        "deadline_margin_ms" | "deadline_margin" => c.deadline_margin_ms,
        "agent_timeout_ms" | "agent_timeout" => c.agent_timeout_ms,
        "max_coflows" => c.max_coflows as u64,
        "max_coflows_per_owner" => c.max_coflows_per_owner as u64,
        "max_pieces_per_coflow" => c.max_pieces_per_coflow as u64,
        "max_pieces_per_owner" => c.max_pieces_per_owner as u64,
        "max_gets_per_owner_per_source" => c.max_gets_per_owner_per_source as u64,
        _ => return None,
    })
}

fn agent_number(a: &AgentConfig, key: &str) -> Option<u64> {
    Some(match key {
        "machine" => u64::from(a.machine?),
        "heartbeat_interval_ms" | "heartbeat_interval" => a.heartbeat_interval_ms,
        "chunk_bytes" | "chunk" => a.chunk_bytes as u64,
        "socket_buffer_bytes" | "socket_buffer" => a.socket_buffer_bytes as u64,
        "max_stored_bytes" | "max_stored" => a.max_stored_bytes,
        "max_stored_bytes_per_client" | "max_stored_per_client" => a.max_stored_bytes_per_client,
        "max_data_connections" => a.max_data_connections as u64,
        "max_data_connections_per_peer" => a.max_data_connections_per_peer? as u64,
        "data_idle_timeout_ms" | "data_idle_timeout" => a.data_idle_timeout_ms,
        "coordinator_grace_ms" | "coordinator_grace" => a.coordinator_grace_ms,
        _ => return None,
    })
}

fn text_of(lines: &[(&str, String)]) -> String {
    lines.iter().map(|(k, v)| format!("{k} = {v}\n")).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any text at all parses or fails, never panics; what parses validates or fails naming a
    /// field.
    #[test]
    fn arbitrary_text_never_panics(text in "(.{0,30}\n?){0,4}") {
        if let Ok(c) = toml::from_str::<CoordinatorConfig>(&text) {
            let _ = c.validate();
        }
        if let Ok(a) = toml::from_str::<AgentConfig>(&text) {
            let _ = a.validate();
        }
    }

    /// The coordinator's file: an error names the line and its key; a whole number is kept as
    /// written, never rounded; a refusal names a field; and what validates runs a core whose
    /// restart window is the three agent timeouts the config says.
    #[test]
    fn a_coordinator_file_loads_exactly_or_names_the_field(lines in file(COORDINATOR_KEYS)) {
        match toml::from_str::<CoordinatorConfig>(&text_of(&lines)) {
            Err(e) => names_line_and_key(&e, &lines)?,
            Ok(c) => {
                for (k, v) in &lines {
                    kept(k, v, coordinator_number(&c, k))?;
                }
                match c.validate() {
                    Err(e) => prop_assert!(
                        COORDINATOR_KEYS.iter().any(|k| e.field.contains(k)) && e.to_string().contains(e.field),
                        "{e}"
                    ),
                    Ok(()) => {
                        let policy = coflow_sched::policy::by_name(coflow_sched::policy::simulated(&c.policy)).unwrap();
                        let timeout = coflow_core::Nanos::from_millis(c.agent_timeout_ms);
                        let mut core = coflow_coordinator::Core::new(c, policy);
                        prop_assert!(core.in_restart_window(timeout) && core.in_restart_window(timeout.saturating_add(timeout)));
                        core.handle_timeout(timeout);
                    }
                }
            }
        }
    }

    /// The agent's file, the same way.
    #[test]
    fn an_agent_file_loads_exactly_or_names_the_field(lines in file(AGENT_KEYS)) {
        match toml::from_str::<AgentConfig>(&text_of(&lines)) {
            Err(e) => names_line_and_key(&e, &lines)?,
            Ok(a) => {
                for (k, v) in &lines {
                    kept(k, v, agent_number(&a, k))?;
                }
                if let Err(e) = a.validate() {
                    prop_assert!(AGENT_KEYS.iter().any(|k| e.field.contains(k)) && e.to_string().contains(e.field), "{e}");
                }
            }
        }
    }
}

/// A configuration, token, TLS or topology file that is a FIFO with no writer, a device with no
/// end or a directory fails the service at start, naming the file and what it is, rather than
/// waiting for a writer or filling memory.
#[test]
fn a_config_token_or_tls_path_that_is_no_regular_file_fails_at_once() {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("coflow-config-kinds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    if !std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        eprintln!("skipped: mkfifo is not available");
        return;
    }
    let f = fifo.display().to_string();
    let d = dir.display().to_string();
    let cases: [(&[&str], &str, &str); 7] = [
        (
            &["coordinator", "--listen", "127.0.0.1:0", "--config", &f, "--token-file", &f],
            &f,
            "a FIFO, not a regular file",
        ),
        (&["coordinator", "--listen", "127.0.0.1:0", "--token-file", &f], &f, "a FIFO, not a regular file"),
        (
            &["coordinator", "--listen", "127.0.0.1:0", "--token-file", "/dev/zero"],
            "/dev/zero",
            "a device, not a regular file",
        ),
        (
            &["coordinator", "--listen", "127.0.0.1:0", "--tls-ca", &d, "--tls-cert", &d, "--tls-key", &d],
            &d,
            "a directory, not a regular file",
        ),
        (&["coordinator", "--listen", "127.0.0.1:0", "--topology", &f], &f, "a FIFO, not a regular file"),
        (
            &["agent", "--coordinator", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--data-dir", "/dev/null"],
            "/dev/null",
            "not a directory",
        ),
        (
            &["coordinator", "--listen", "127.0.0.1:0", "--topology", "/dev/zero"],
            "/dev/zero",
            "a device, not a regular file",
        ),
    ];
    for (args, path, what) in cases {
        let started = std::time::Instant::now();
        let mut child = crate::coflow()
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = loop {
            if child.try_wait().unwrap().is_some() {
                break child.wait_with_output().unwrap();
            }
            if started.elapsed() > std::time::Duration::from_secs(20) {
                child.kill().unwrap();
                panic!("{args:?} still running after 20 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(path) && err.contains(what), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A service that cannot start says why in the format of its logs: with `--log-format json`,
/// every line on stderr is a JSON object, the error among them at level `ERROR` naming the file;
/// with text logs, a plain `error:` line.
#[test]
fn a_startup_error_is_written_in_the_format_of_the_logs() {
    let missing = crate::tmp("no-such-dir").join("agent.toml");
    for json in [true, false] {
        let mut cmd = crate::coflow();
        cmd.args(["agent", "--config"]).arg(&missing).env_remove("RUST_LOG").env_remove("COFLOW_LOG_FORMAT");
        if json {
            cmd.args(["--log-format", "json"]);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8(out.stderr).unwrap();
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(!lines.is_empty(), "nothing on stderr");
        if json {
            let objects: Vec<serde_json::Value> = lines
                .iter()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
                .collect();
            let error = objects.iter().find(|o| o["level"] == "ERROR").unwrap_or_else(|| panic!("{stderr}"));
            let message = error["fields"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("agent.toml"), "{message}");
        } else {
            let last = lines.last().unwrap();
            assert!(last.starts_with("error: ") && last.contains("agent.toml"), "{stderr}");
        }
    }
}

/// A topology the coordinator's TOML file names is read from the file's directory, wherever the
/// coordinator starts, and `--topology` from the working directory; the coordinator warns, in one
/// line, of the fields of a topology that only the simulator reads, and refuses a link slower than
/// the agents can pace, naming it. (No run gets past validation: each topology has such a link,
/// and the token file does not exist.)
#[test]
fn a_topology_named_in_the_config_file_is_relative_to_the_file() {
    let dir = crate::tmp("topology-relative");
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    let slow = |from: &str, to: &str, extra: &str| {
        format!(
            r#"{{"datacenters": ["{from}", "{to}"], {extra}"links": [{{"from": "{from}", "to": "{to}", "constant_gbps": 1e-5}},
            {{"from": "{to}", "to": "{from}", "constant_gbps": 1}}]}}"#
        )
    };
    std::fs::write(conf.join("wan.json"), slow("a", "b", r#""placement": ["a"], "redraw_ms": 100, "#)).unwrap();
    std::fs::write(dir.join("wan.json"), slow("x", "y", "")).unwrap();
    std::fs::write(conf.join("coordinator.toml"), "topology = \"wan.json\"\n").unwrap();
    let run = |cwd: &std::path::Path, config: &std::path::Path, extra: &[&str]| {
        let out = crate::coflow()
            .current_dir(cwd)
            .args(["coordinator", "--listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .arg("--token-file")
            .arg(dir.join("no-token"))
            .args(extra)
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .env_remove("COFLOW_LOG_FORMAT")
            .env_remove("COFLOW_TOPOLOGY")
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8(out.stderr).unwrap()
    };
    let refused = |link: &str| format!("links[0].constant_gbps ({link}): a mean of 1e-5 Gbit/s is below");
    let warned = "ignored by the coordinator: placement, redraw_ms (";
    for (cwd, config) in
        [(std::path::Path::new("/"), conf.join("coordinator.toml")), (&dir, "conf/coordinator.toml".into())]
    {
        let err = run(cwd, &config, &[]);
        assert!(err.contains(&refused("a -> b")), "the file's directory, from {}: {err}", cwd.display());
        assert_eq!(err.matches(warned).count(), 1, "{err}");
    }
    let err = run(&dir, &std::path::PathBuf::from("conf/coordinator.toml"), &["--topology", "wan.json"]);
    assert!(err.contains(&refused("x -> y")) && !err.contains("ignored"), "the working directory: {err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An agent's `data_dir` named in its TOML file is relative to the file's directory, as the
/// file's author sees it, and `--data-dir` to the working directory. (Each run stops at the
/// check that the data directory is a directory: each path names a regular file.)
#[test]
fn a_data_dir_named_in_the_config_file_is_relative_to_the_file() {
    let dir = crate::tmp("data-dir-relative");
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("agent.toml"), "machine = 3\ndata_dir = \"data\"\n").unwrap();
    std::fs::write(conf.join("data"), "not a directory").unwrap();
    std::fs::write(dir.join("data"), "not a directory either").unwrap();
    let run = |cwd: &std::path::Path, extra: &[&str]| {
        let out = crate::coflow()
            .current_dir(cwd)
            .args(["agent", "--config", "conf/agent.toml"])
            .args(extra)
            .env("NO_COLOR", "1")
            .env_remove("COFLOW_DATA_DIR")
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8(out.stderr).unwrap()
    };
    let err = run(&dir, &[]);
    assert!(err.contains("data_dir conf/data: not a directory"), "the file's directory: {err}");
    let err = run(&dir, &["--data-dir", "data"]);
    assert!(err.contains("data_dir data: not a directory"), "the working directory: {err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An agent without a machine id whose cluster token the coordinator refuses says so at warn at
/// once, then asks again at waits that double up to 2 s (at debug), not every half second; the
/// coordinator warns of the refusals once (an hour, per address).
#[test]
fn an_agent_refused_its_machine_id_warns_at_once_and_backs_off() {
    use std::os::unix::fs::PermissionsExt;
    let dir = crate::tmp("wrong-token");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, token) in
        [("good", "a-good-token-of-the-cluster-0123456789"), ("bad", "a-wrong-token-from-elsewhere-987654321")]
    {
        std::fs::write(dir.join(name), token).unwrap();
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let (coord_addr, grpc, data) = (free(), free(), free());
    // A service whose plain-text log at `level` is read from its stderr.
    let logged = |args: &[&str], token: &str, level: &str| {
        crate::coflow()
            .args(args)
            .arg("--token-file")
            .arg(dir.join(token))
            .env("RUST_LOG", level)
            .env("NO_COLOR", "1")
            .env_remove("COFLOW_LOG_FORMAT")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut coordinator = logged(&["coordinator", "--listen", &coord_addr], "good", "warn");
    let data_dir = dir.join("data").display().to_string();
    let url = format!("http://{coord_addr}");
    let agent_args =
        ["agent", "--coordinator", &url, "--listen", &grpc, "--data-listen", &data, "--data-dir", &data_dir];
    let mut agent = logged(&agent_args, "bad", "coflow_agent=debug");
    std::thread::sleep(std::time::Duration::from_secs(6));
    agent.kill().unwrap();
    coordinator.kill().unwrap();
    let said = String::from_utf8_lossy(&coordinator.wait_with_output().unwrap().stderr).into_owned();
    let refused: Vec<&str> = said.lines().filter(|l| l.contains("not this cluster's token")).collect();
    assert!(refused.len() == 1 && refused[0].contains("WARN") && refused[0].contains("wrong cluster token"), "{said}");
    let out = agent.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let asks: Vec<&str> = err.lines().filter(|l| l.contains("assigns no machine id")).collect();
    assert!(asks.first().is_some_and(|l| l.contains("WARN") && l.contains("wrong cluster token")), "{err}");
    assert!(asks[1..].iter().all(|l| l.contains("DEBUG")), "one warning, then debug: {err}");
    // Waits of 0.5, 1, 2, 2... s (less up to a quarter): at most 6 asks in 6 s, not 12.
    assert!((2..=6).contains(&asks.len()), "{} asks: {err}", asks.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A field set twice in a TOML file under its two spellings (with and without its unit) is
/// refused naming both lines, not the file's first line, which the parser points at.
#[test]
fn a_field_set_twice_under_two_spellings_names_both_lines() {
    let dir = crate::tmp("twice-set");
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "coordinator",
            "listen = \"127.0.0.1:0\"\nagent_timeout_ms = 3000\nagent_timeout = \"3s\"\n",
            "line 2 (agent_timeout_ms) and line 3 (agent_timeout) set agent_timeout_ms twice",
        ),
        (
            "agent",
            "\n\"chunk\" = \"1MiB\"\nport_rate = \"1Gbps\"\nchunk_bytes = 65536\n",
            "line 2 (chunk) and line 4 (chunk_bytes) set chunk_bytes twice",
        ),
    ];
    for (service, text, says) in cases {
        let file = dir.join(format!("{service}.toml"));
        std::fs::write(&file, text).unwrap();
        let out =
            crate::coflow().args([service, "--config"]).arg(&file).env_remove("COFLOW_LOG_FORMAT").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(says) && !err.contains("line 1, column 1"), "{service}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An empty path in a TOML file names nothing: it is refused naming the file and the field,
/// rather than joined to the file's directory (an agent's `data_dir = ""` would make the
/// directory of its configuration and keys the one file-segment puts may read from) or read as
/// no file at all.
#[test]
fn an_empty_path_in_the_config_file_is_refused_naming_the_file_and_the_field() {
    let dir = crate::tmp("empty-path");
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    let tls = |empty: &str| {
        ["tls_ca", "tls_cert", "tls_key"]
            .iter()
            .map(|f| format!("{f} = \"{}\"\n", if *f == empty { "" } else { "x.pem" }))
            .collect::<String>()
    };
    let cases = [
        ("agent", "data_dir = \"\"\n".to_string(), "data_dir"),
        ("agent", tls("tls_key"), "tls_key"),
        ("coordinator", tls("tls_ca"), "tls_ca"),
        ("coordinator", "topology = \"\"\n".to_string(), "topology"),
    ];
    for (service, text, field) in cases {
        std::fs::write(conf.join(format!("{service}.toml")), &text).unwrap();
        let out = crate::coflow()
            .current_dir(&dir)
            .args([service, "--listen", "127.0.0.1:0", "--config", &format!("conf/{service}.toml")])
            .args(["--token-file", "no-token"])
            .env("NO_COLOR", "1")
            .env_remove("COFLOW_LOG_FORMAT")
            .env_remove("COFLOW_DATA_DIR")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{service} {text}: {err}");
        assert!(err.contains(&format!("conf/{service}.toml: `{field}` is empty")), "{service} {text}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
