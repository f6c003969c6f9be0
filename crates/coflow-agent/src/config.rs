//! The agent's configuration: TOML with documented defaults, overridden by flags, validated.
//! Durations, sizes and rates take their unit under the field's name without its suffix
//! (`heartbeat_interval = "100ms"`, `max_stored = "100MB"`, `port_rate = "1Gbps"`); a bare number keeps
//! the unit of the suffixed name (`coflow_core::config`).

use std::path::PathBuf;

use serde::Deserialize;

/// How an agent runs.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// This machine's id in the cluster. None by default: the id the agent's certificate names
    /// (TLS), else the one kept in `data_dir/machine-id`, else one the coordinator assigns (kept
    /// there for the next start): never a fixed default. Set, it must agree with the certificate.
    pub machine: Option<u32>,
    /// The coordinator's gRPC address, e.g. `http://127.0.0.1:7070`. Default that.
    pub coordinator: String,
    /// The datacenter this machine lives in, by the name the coordinator's wide-area topology
    /// gives it; a coordinator that schedules a wide area refuses an agent without one. None by
    /// default (a big switch).
    pub datacenter: Option<String>,
    /// gRPC listen address for local clients. Default `127.0.0.1:7071`.
    pub listen: String,
    /// Data-plane (TCP) listen address other agents fetch from. Default `127.0.0.1:7072`.
    pub data_listen: String,
    /// The address other agents should use to reach the data listener; default: its bound address.
    pub data_advertise: Option<String>,
    /// Prometheus `/metrics` listen address; none by default.
    pub metrics_listen: Option<String>,
    /// The only directory file-segment puts may read from. Default `./coflow-data`.
    pub data_dir: PathBuf,
    /// This machine's port capacity in bytes per second, for sending and for receiving, so that a
    /// cluster can be emulated on one machine's loopback: 1,000 to 10^15 (8 kbit/s to 8 Pbit/s).
    /// Default 125,000,000 (1 Gbit/s).
    #[serde(alias = "port_rate", deserialize_with = "coflow_core::config::bytes_per_sec")]
    pub port_rate_bps: f64,
    /// Whether the agent enforces `port_rate_bps` itself (token buckets on its port). Default
    /// true. False on a real or shaped network: the capacity is still registered with the
    /// coordinator and the network enforces it. Either way each scheduled flow is paced at its
    /// assigned rate (so that the flows a policy gives a link never queue on it); flows served
    /// outside the policy go as fast as the port (or the network) lets them.
    pub cap_port: bool,
    /// How often to report to the coordinator until it says its own interval, which each
    /// registration's answer carries and the agent then follows; twenty of it (from 0.5 to 2 s)
    /// also bound the wait between registrations. Default 100 ms.
    #[serde(alias = "heartbeat_interval", deserialize_with = "coflow_core::config::millis")]
    pub heartbeat_interval_ms: u64,
    /// Bytes moved per write on the data plane. Default 32 KiB.
    #[serde(alias = "chunk", deserialize_with = "coflow_core::config::bytes_usize")]
    pub chunk_bytes: usize,
    /// Kernel send and receive buffer of each data connection. Small, so that bytes already
    /// handed to the kernel cannot outlive a rate change by long (on loopback the kernel would
    /// otherwise buffer megabytes: hundreds of milliseconds at emulated NIC rates). Default 64 KiB.
    #[serde(alias = "socket_buffer", deserialize_with = "coflow_core::config::bytes_usize")]
    pub socket_buffer_bytes: usize,
    /// The most bytes of in-memory pieces the agent holds; a put beyond it fails
    /// `limit-exceeded` (file segments stay on disk and do not count). Default 4 GiB.
    #[serde(alias = "max_stored", deserialize_with = "coflow_core::config::bytes")]
    pub max_stored_bytes: u64,
    /// The most bytes of in-memory pieces one client identity may hold here (with TLS a client
    /// certificate's name, which the processes of a framework share; in token mode every holder
    /// of the token is one identity), so that one tenant's puts cannot take the memory the
    /// others need: beyond it a put fails `limit-exceeded`. 0 (the default): no bound but
    /// `max_stored_bytes`.
    #[serde(alias = "max_stored_per_client", deserialize_with = "coflow_core::config::bytes")]
    pub max_stored_bytes_per_client: u64,
    /// The most data connections served at once, 1 to 1,000,000; one more is refused, and the get
    /// that opened it fails `limit-exceeded`. Default 1024.
    pub max_data_connections: usize,
    /// The most of `max_data_connections` one peer may hold at once: with TLS one agent (by the
    /// machine its certificate names), in token mode one IP address. One more from
    /// that peer is refused, and the get that opened it fails `limit-exceeded` naming this bound,
    /// while other peers are still served. None (the default): half of `max_data_connections`,
    /// but at least 4 (all of them when there are fewer). At most `max_data_connections`.
    pub max_data_connections_per_peer: Option<usize>,
    /// A data connection on which nothing moves for this long is closed: a peer that does not
    /// send its request, a receiver that stops reading, a source that sends neither bytes nor
    /// keepalives (frozen: the get fails `agent-unreachable`). Sources paused at rate zero send a
    /// keepalive every fifth of it. Default 5000 ms.
    #[serde(alias = "data_idle_timeout", deserialize_with = "coflow_core::config::millis")]
    pub data_idle_timeout_ms: u64,
    /// A get whose bytes stopped while the coordinator has been unreachable this long fails
    /// `agent-unreachable` (a restarted coordinator schedules it again well before). Default
    /// 30000 ms.
    #[serde(alias = "coordinator_grace", deserialize_with = "coflow_core::config::millis")]
    pub coordinator_grace_ms: u64,
    /// The cluster CA's certificate: with `tls_cert` and `tls_key`, every connection of this agent
    /// (gRPC served and made, data plane both ways) is mutual TLS, and no token is needed. The
    /// coordinator URL is then `https://`. None by default (token mode).
    pub tls_ca: Option<PathBuf>,
    /// This agent's certificate (role `coflow://agent/N` for its machine `N`).
    pub tls_cert: Option<PathBuf>,
    /// This agent's private key.
    pub tls_key: Option<PathBuf>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            machine: None,
            coordinator: "http://127.0.0.1:7070".into(),
            datacenter: None,
            listen: "127.0.0.1:7071".into(),
            data_listen: "127.0.0.1:7072".into(),
            data_advertise: None,
            metrics_listen: None,
            data_dir: PathBuf::from("coflow-data"),
            port_rate_bps: 125_000_000.0,
            cap_port: true,
            heartbeat_interval_ms: 100,
            chunk_bytes: 32 << 10,
            socket_buffer_bytes: 64 << 10,
            max_stored_bytes: 4 << 30,
            max_stored_bytes_per_client: 0,
            max_data_connections: 1024,
            max_data_connections_per_peer: None,
            data_idle_timeout_ms: 5000,
            coordinator_grace_ms: 30_000,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// A configuration value is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid agent config `{field}`: {reason}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// The most data connections an agent may be configured to serve at once: each is a socket, far
/// past what a process may open, and a count of permits a semaphore holds.
const MAX_DATA_CONNECTIONS: usize = 1_000_000;

/// The port rates an agent takes, in bytes per second: those the coordinator registers.
pub use coflow_proto::{MAX_PORT_RATE_BPS, MIN_PORT_RATE_BPS};

impl AgentConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, reason: &str| Err(ConfigError { field, reason: reason.into() });
        if let Some(dc) = &self.datacenter
            && (dc.is_empty() || dc.len() > 256 || dc.chars().any(char::is_control))
        {
            return err("datacenter", "must be a name of 1 to 256 bytes without control characters");
        }
        if self.machine.is_some_and(|m| m >= coflow_proto::MACHINE_ID_LIMIT) {
            return err("machine", "must be below 65536");
        }
        if !(MIN_PORT_RATE_BPS..=MAX_PORT_RATE_BPS).contains(&self.port_rate_bps) {
            return err("port_rate_bps", "must be 1000 to 1e15 bytes per second (8 kbit/s to 8 Pbit/s)");
        }
        if self.data_dir.as_os_str().is_empty() {
            return err("data_dir", "is empty: name a directory, or leave the field out");
        }
        if self.heartbeat_interval_ms == 0 || self.heartbeat_interval_ms > 60_000 {
            return err("heartbeat_interval_ms", "must be 1 to 60000");
        }
        if !(1024..=(4 << 20)).contains(&self.chunk_bytes) {
            return err("chunk_bytes", "must be 1 KiB to 4 MiB");
        }
        if !(4096..=(64 << 20)).contains(&self.socket_buffer_bytes) {
            return err("socket_buffer_bytes", "must be 4 KiB to 64 MiB");
        }
        if !(1..=MAX_DATA_CONNECTIONS).contains(&self.max_data_connections) {
            return err("max_data_connections", "must be 1 to 1000000");
        }
        if self.max_data_connections_per_peer.is_some_and(|n| n == 0 || n > self.max_data_connections) {
            return err("max_data_connections_per_peer", "must be 1 to max_data_connections");
        }
        if !(100..=3_600_000).contains(&self.data_idle_timeout_ms) {
            return err("data_idle_timeout_ms", "must be 100 to 3600000");
        }
        if !(100..=86_400_000).contains(&self.coordinator_grace_ms) {
            return err("coordinator_grace_ms", "must be 100 to 86400000");
        }
        if let Some(a) = &self.data_advertise {
            let addr = match a.parse::<std::net::SocketAddr>() {
                Ok(addr) if reachable(addr) => addr,
                _ => {
                    return err(
                        "data_advertise",
                        "must be an IP address and port other agents can reach, such as 10.0.0.1:7072",
                    );
                }
            };
            // An address of another family than the one listened on reaches nothing: 0.0.0.0 and
            // an IPv4 address take IPv4 only, an IPv6 address IPv6 only, and [::] both.
            if let Ok(listen) = self.data_listen.parse::<std::net::SocketAddr>()
                && listen.is_ipv4() != addr.is_ipv4()
                && !(listen.is_ipv6() && listen.ip().is_unspecified())
            {
                return err(
                    "data_advertise",
                    &format!(
                        "{addr} is an {} address, and data_listen {listen} takes {} only (listen on [::]:{} for both)",
                        if addr.is_ipv4() { "IPv4" } else { "IPv6" },
                        if listen.is_ipv4() { "IPv4" } else { "IPv6" },
                        listen.port()
                    ),
                );
            }
        }
        // A URL (https:// with TLS files; the security a caller of `run` hands over is checked
        // when the agent connects), or a bare host:port, which takes the mode's scheme.
        let tls = self.tls_files()?.is_some();
        match self.coordinator.split_once("://") {
            Some(("https", _)) => {}
            Some(("http", _)) if !tls => {}
            Some(_) if tls => {
                return err(
                    "coordinator",
                    "must be an https:// URL with TLS (or a bare host:port), such as 127.0.0.1:7070",
                );
            }
            Some(_) => {
                return err(
                    "coordinator",
                    "must be an http:// or https:// URL, or a bare host:port, such as 127.0.0.1:7070",
                );
            }
            None if self.coordinator.contains(':') && !self.coordinator.contains(['/', ' ']) => {}
            None => return err("coordinator", "must be a host:port or a URL, such as 127.0.0.1:7070"),
        }
        // The URL's host and port, which the agent would otherwise dial in vain at every retry.
        let https = tls || self.coordinator.starts_with("https://");
        coflow_proto::endpoint_url(&self.coordinator, https)
            .map_err(|reason| ConfigError { field: "coordinator", reason })?;
        Ok(())
    }

    /// This machine's id, once [`crate::run`] has resolved it.
    pub(crate) fn machine_id(&self) -> u32 {
        self.machine.expect("the machine id is resolved before the agent runs")
    }

    /// The most data connections one peer may hold at once (`max_data_connections_per_peer`,
    /// resolved).
    pub fn data_connections_per_peer(&self) -> usize {
        self.max_data_connections_per_peer
            .unwrap_or_else(|| (self.max_data_connections / 2).max(self.max_data_connections.min(4)))
    }

    /// The TLS files, if TLS is configured; an error names the one missing, or one empty.
    pub fn tls_files(&self) -> Result<Option<coflow_proto::TlsFiles>, ConfigError> {
        coflow_proto::TlsFiles::from_fields(&self.tls_ca, &self.tls_cert, &self.tls_key)
            .map_err(|(field, reason)| ConfigError { field, reason })
    }
}

/// Whether other agents could connect to `addr`: neither its IP (`0.0.0.0`, `[::]`) nor its port
/// is unspecified.
pub(crate) fn reachable(addr: std::net::SocketAddr) -> bool {
    !addr.ip().is_unspecified() && addr.port() != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The address other agents fetch from is checked at start, not found wrong at registration
    /// (which an agent retries forever): an IP and a port, neither unspecified.
    #[test]
    fn the_advertised_data_address_must_be_reachable() {
        let with = |a: &str| AgentConfig { data_advertise: Some(a.into()), ..AgentConfig::default() }.validate();
        for bad in ["garbage", "host.example:7072", "0.0.0.0:7072", "[::]:7072", "10.0.0.1:0", "10.0.0.1", ""] {
            let e = with(bad).expect_err(bad);
            assert_eq!(e.field, "data_advertise", "{bad}: {}", e.reason);
        }
        for good in ["10.0.0.1:7072", "127.0.0.1:7072"] {
            assert!(with(good).is_ok(), "{good}");
        }
    }

    /// An advertised address of the other family than the one `data_listen` takes would be
    /// dialled in vain: refused at start, naming both. `[::]` takes both families.
    #[test]
    fn the_advertised_data_address_is_of_a_family_listened_on() {
        let with = |listen: &str, advertise: &str| {
            AgentConfig { data_listen: listen.into(), data_advertise: Some(advertise.into()), ..AgentConfig::default() }
                .validate()
        };
        for (listen, advertise) in [("0.0.0.0:7072", "[fd00::1]:7072"), ("[fd00::2]:7072", "10.0.0.1:7072")] {
            let e = with(listen, advertise).expect_err(advertise);
            assert_eq!(e.field, "data_advertise");
            assert!(e.reason.contains(listen) && e.reason.contains("[::]:7072"), "{}", e.reason);
        }
        for (listen, advertise) in
            [("[::]:7072", "[fd00::1]:7072"), ("[::]:7072", "10.0.0.1:7072"), ("0.0.0.0:7072", "10.0.0.1:7072")]
        {
            assert!(with(listen, advertise).is_ok(), "{listen} {advertise}");
        }
    }

    /// The coordinator is an http:// or https:// URL, or a bare host:port (without TLS files
    /// here; with them, an http:// URL is refused too).
    #[test]
    fn the_coordinator_is_a_url_of_the_modes_scheme_or_a_host_and_port() {
        let with = |c: &str| AgentConfig { coordinator: c.into(), ..AgentConfig::default() }.validate();
        for good in [
            "http://10.0.0.1:7070",
            "https://10.0.0.1:7070",
            "10.0.0.1:7070",
            "coordinator.example:7070",
            "[fd00::1]:7070",
        ] {
            assert!(with(good).is_ok(), "{good}");
        }
        for bad in ["ftp://h:1", "", "coordinator", "h:1/path", "h :1"] {
            let e = with(bad).expect_err(bad);
            assert_eq!(e.field, "coordinator", "{bad}: {}", e.reason);
        }
    }

    /// A coordinator whose port is no TCP port is refused at start, naming the field, rather than
    /// dialled at the scheme's default port (80) at every retry, for ever.
    #[test]
    fn a_coordinator_port_that_is_no_port_is_refused() {
        let with = |c: &str| AgentConfig { coordinator: c.into(), ..AgentConfig::default() }.validate();
        for bad in ["http://10.0.0.1:65536", "10.0.0.1:99999", "coordinator:abc", "https://10.0.0.1:0"] {
            let e = with(bad).expect_err(bad);
            assert_eq!(e.field, "coordinator", "{bad}: {}", e.reason);
            assert!(e.reason.contains("no TCP port"), "{bad}: {}", e.reason);
        }
    }

    /// A port rate past any NIC (up to the largest float, near which the agents' flows fail) is
    /// refused naming the field, as one below the least is.
    #[test]
    fn the_port_rate_is_bounded_above_and_below() {
        let with = |r: f64| AgentConfig { port_rate_bps: r, ..AgentConfig::default() }.validate();
        for bad in [1e300, f64::MAX, 1.0000001e15, f64::INFINITY, f64::NAN, 999.0, 0.0, -1.0] {
            assert_eq!(with(bad).expect_err(&bad.to_string()).field, "port_rate_bps", "{bad}");
        }
        for good in [MIN_PORT_RATE_BPS, 125e6, MAX_PORT_RATE_BPS] {
            assert!(with(good).is_ok(), "{good}");
        }
    }

    /// An empty data directory or TLS file names nothing: refused naming its field, not taken as
    /// the working directory (or, in a TOML file, the file's own directory).
    #[test]
    fn an_empty_path_is_refused_naming_its_field() {
        let e = AgentConfig { data_dir: PathBuf::new(), ..AgentConfig::default() }.validate().unwrap_err();
        assert_eq!(e.field, "data_dir", "{e}");
        let files = |ca: &str| AgentConfig {
            tls_ca: Some(ca.into()),
            tls_cert: Some("agent.crt".into()),
            tls_key: Some("agent.key".into()),
            coordinator: "https://10.0.0.1:7070".into(),
            ..AgentConfig::default()
        };
        assert!(files("ca.crt").validate().is_ok());
        let e = files("").validate().unwrap_err();
        assert_eq!(e.field, "tls_ca", "{e}");
    }

    /// A bound on data connections past what a semaphore holds (which would end the agent's data
    /// listener in a panic at start) is refused naming the field.
    #[test]
    fn the_data_connections_are_bounded() {
        let with = |n| AgentConfig { max_data_connections: n, ..AgentConfig::default() }.validate();
        for bad in [0, MAX_DATA_CONNECTIONS + 1, usize::MAX >> 3, usize::MAX] {
            assert_eq!(with(bad).unwrap_err().field, "max_data_connections", "{bad}");
        }
        assert!(with(MAX_DATA_CONNECTIONS).is_ok());
    }

    /// A peer's share of the data connections is half of them by default (at least 4, or
    /// all when fewer), and a share set must be 1 to `max_data_connections`.
    #[test]
    fn a_peers_share_of_the_data_connections_is_bounded() {
        let with = |max, per_peer| AgentConfig {
            max_data_connections: max,
            max_data_connections_per_peer: per_peer,
            ..AgentConfig::default()
        };
        assert_eq!(AgentConfig::default().data_connections_per_peer(), 512);
        assert_eq!(with(100, None).data_connections_per_peer(), 50);
        assert_eq!(with(8, None).data_connections_per_peer(), 4);
        assert_eq!(with(2, None).data_connections_per_peer(), 2);
        assert_eq!(with(100, Some(7)).data_connections_per_peer(), 7);
        for bad in [Some(0), Some(101)] {
            assert_eq!(with(100, bad).validate().unwrap_err().field, "max_data_connections_per_peer");
        }
        assert!(with(100, Some(100)).validate().is_ok());
    }
}
