//! The services' TOML files: durations, sizes and rates with their units, the suffixed names with
//! bare numbers, and errors that name the line and field.

use coflow_agent::AgentConfig;
use coflow_coordinator::CoordinatorConfig;

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
