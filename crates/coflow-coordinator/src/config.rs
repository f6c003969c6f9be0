//! The coordinator's configuration: a TOML file whose every field has a documented default,
//! overridden by command-line flags, validated before start.
//! Durations, sizes and rates take their unit under the field's name without its suffix
//! (`agent_timeout = "3s"`, `max_stored = "100MB"`, `port_rate = "1Gbps"`); a bare number keeps
//! the unit of the suffixed name (`coflow_core::config`).

use std::path::PathBuf;
use std::time::Duration;

use coflow_core::Rate;
use coflow_sched::{Fabric, WideArea};
use serde::Deserialize;

/// The name of the mode in which no policy runs ([`coflow_sched::policy::TCP`]: every flow at its
/// sender's full port rate, kernel TCP shares the links).
pub const TCP: &str = coflow_sched::policy::TCP.name;

/// The least bandwidth, in bytes per second (800 kbit/s), at which the coordinator schedules a
/// wide-area link: a topology whose link's prior (its distribution's mean, what the link is
/// scheduled at until measured) is below it is refused, and a measured estimate never falls
/// below it. An agent paces a flow in frames of at least 4 KiB, and the coordinator judges a
/// link every 400 ms period by whether it moved 85% of what it was asked; at this rate a period
/// holds about ten frames, so that one frame more or less (a tenth of the period's bytes) stays
/// inside that margin. Far below it a period holds no frame at all: the link is judged to move
/// nothing, its estimate falls to its least, and a get across it stalls with no error. (The
/// simulator, which paces nothing, takes any positive rate.)
pub(crate) const MIN_LINK_BYTES_PER_SEC: f64 = 100_000.0;

/// How the coordinator runs.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CoordinatorConfig {
    /// gRPC listen address. Default `127.0.0.1:7070`.
    pub listen: String,
    /// Prometheus `/metrics` listen address; none by default. Plain HTTP, with no
    /// authentication: it also serves `/healthz` and `/readyz`, and the live view if
    /// `status_page`.
    pub metrics_listen: Option<String>,
    /// Whether the metrics listener also serves the live web page (`/`) and its JSON
    /// (`/api/status`), which show every coflow's name, the agents' addresses and their rates to
    /// whoever reaches the listener. Default true; the shipped deployment configs turn it off.
    pub status_page: bool,
    /// Host names, besides IP literals and `localhost`, under which the live web page is served:
    /// a request for `/` or `/api/status` whose `Host` header names another is answered 421
    /// (Misdirected Request), so that a page of another site cannot read the live view through
    /// an operator's browser by pointing its own name at the coordinator's address (DNS
    /// rebinding). Names without a port, in any case, with or without a trailing dot; list the
    /// names by which operators reach `metrics_listen`. Default none.
    pub status_hosts: Vec<String>,
    /// The scheduling policy's short name (any name of `coflow_sched::policy::REGISTRY`), or [`TCP`]:
    /// no rates assigned, every flow at its sender's full port rate, the network shares the
    /// links. Default `varys`.
    pub policy: String,
    /// Rate changes are pushed to agents at most once per window, batched. Default 0: pushed
    /// after every decision, so that a new flow's first rate never waits; what a burst of events
    /// changes is batched anyway, since the coordinator decides once for all the events that
    /// queued while it was busy.
    #[serde(alias = "push_window", deserialize_with = "coflow_core::config::millis")]
    pub push_window_ms: u64,
    /// Coflows whose bottleneck (most bytes on one port) is under this bypass scheduling and go
    /// at full speed, those of one owner (TLS) only while its coflows bypassing with flows in
    /// flight stay under it together. Default 25,000,000 bytes (Varys's 25 MB); 0 disables the
    /// bypass.
    #[serde(alias = "bypass_threshold", deserialize_with = "coflow_core::config::bytes")]
    pub bypass_threshold_bytes: u64,
    /// How often agents report. Default 100 ms.
    #[serde(alias = "heartbeat_interval", deserialize_with = "coflow_core::config::millis")]
    pub heartbeat_interval_ms: u64,
    /// A deadline policy paces an admitted coflow to end this long before its deadline (counted
    /// from its registration), and admits it only if it can: the control path's own delays (a
    /// flow's first bytes, rates pushed and progress reported a heartbeat apart) would otherwise
    /// make a coflow paced to end exactly at its deadline end a little after it. Default 100 ms,
    /// at most an hour.
    #[serde(alias = "deadline_margin", deserialize_with = "coflow_core::config::millis")]
    pub deadline_margin_ms: u64,
    /// An agent silent for this long is declared dead and its flows fail (silence while the
    /// coordinator itself did not run does not count). Three of it after the start are the
    /// restart window, in which agents' re-announcements may be adopted. Default 3 s, at most an
    /// hour.
    #[serde(alias = "agent_timeout", deserialize_with = "coflow_core::config::millis")]
    pub agent_timeout_ms: u64,
    /// The most coflows registered at once; a register, or an adoption after a restart, beyond it
    /// fails `limit-exceeded`. Default 100,000.
    pub max_coflows: usize,
    /// The most coflows one identity (a certificate's role) may hold registered at once, so that
    /// one member cannot take every place of `max_coflows` from the others; a register or an
    /// adoption beyond it fails `limit-exceeded`. The processes that share one certificate (a
    /// framework's driver and executors) share this quota. Coflows of token mode have no owner
    /// and only `max_coflows` bounds them. Default 50,000 (half the default `max_coflows`).
    pub max_coflows_per_owner: usize,
    /// The most pieces one coflow may have; a put (also one re-announced after a restart) beyond
    /// it fails `limit-exceeded`. Default 1,000,000.
    pub max_pieces_per_coflow: usize,
    /// The most pieces the coflows of one identity may have at once, so that one member cannot
    /// take the coordinator's memory (a few hundred bytes a piece) from the others; a put (also
    /// one re-announced after a restart) beyond it fails `limit-exceeded`. Pieces of token mode
    /// have no owner. Default 10,000,000.
    pub max_pieces_per_owner: usize,
    /// The most flows of one identity's coflows that one machine serves at once over data
    /// connections (as a source, or as a relay on a wide area): a flow held at rate 0 keeps its
    /// receiver's connection to its source, so without it one member's gets, held through several
    /// agents, could take all of a source's `max_data_connections` from the others. A get beyond
    /// it is refused `limit-exceeded` naming the source (its agent asks again within the data
    /// idle timeout), and a get is split over detours only within it. Keep it at most half the
    /// agents' `max_data_connections`, raising both together for a single tenant with many gets
    /// waiting at one source. Flows of token mode have no owner. Default 512 (half the agents'
    /// default 1,024).
    pub max_gets_per_owner_per_source: usize,
    /// The cluster CA's certificate: with `tls_cert` and `tls_key`, the coordinator serves mutual
    /// TLS only (and needs no token). None by default (token mode).
    pub tls_ca: Option<PathBuf>,
    /// The coordinator's certificate (role `coflow://coordinator`), signed by `tls_ca`.
    pub tls_cert: Option<PathBuf>,
    /// The coordinator's private key.
    pub tls_key: Option<PathBuf>,
    /// A wide-area topology (a file in the format of `coflow sim --wan`, or `default`): the
    /// coordinator then schedules the links between datacenters instead of a big switch of the
    /// agents' ports, and every agent names its datacenter. None by default (a big switch). The
    /// `coflow coordinator` command reads it into [`CoordinatorConfig::wide_area`]: a relative
    /// path in the TOML file is relative to the file's directory, one given as `--topology` to
    /// the working directory; of the file it reads the datacenters and links only, and warns of
    /// the fields only the simulator reads.
    pub topology: Option<String>,
    /// On a wide area, split each get's bytes over two-hop detours through relay agents when the
    /// direct link is the bottleneck (Siphon's multi-path routing, by water-filling over the
    /// links' expected bandwidth), and reroute the flows of a link that goes down. Policies of
    /// the proportional model only (per-flow policies keep direct paths, as in the simulator).
    /// Default false.
    pub multipath: bool,
    /// The wide area read from `topology`: its datacenters and links, each link's bandwidth
    /// distribution the prior until the coordinator has measured the link. Not a TOML field.
    #[serde(skip)]
    pub wide_area: Option<WideArea>,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            listen: "127.0.0.1:7070".into(),
            metrics_listen: None,
            status_page: true,
            status_hosts: Vec::new(),
            policy: "varys".into(),
            push_window_ms: 0,
            bypass_threshold_bytes: 25_000_000,
            heartbeat_interval_ms: 100,
            deadline_margin_ms: 100,
            agent_timeout_ms: 3000,
            max_coflows: 100_000,
            max_coflows_per_owner: 50_000,
            max_pieces_per_coflow: 1_000_000,
            max_pieces_per_owner: 10_000_000,
            max_gets_per_owner_per_source: 512,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            topology: None,
            multipath: false,
            wide_area: None,
        }
    }
}

/// Refuses policy `name` on `fabric` if it cannot serve it (the registry's
/// [`coflow_sched::policy::check_serves`]): the error names the policy and the fabric.
/// [`CoordinatorConfig::validate`] checks the configured policy against the coordinator's fabric,
/// a big switch of the agents' ports.
pub fn check_policy(name: &str, fabric: &Fabric) -> Result<(), ConfigError> {
    coflow_sched::policy::check_serves(name, fabric).map_err(|e| ConfigError { field: "policy", reason: e.to_string() })
}

/// Refuses a wide area with a link whose prior's mean is below [`MIN_LINK_BYTES_PER_SEC`]; the
/// error names the link by its index and datacenters, and the field of the topology file that
/// gave its distribution, in the file's unit (Gbit/s).
fn check_link_floor(wa: &WideArea) -> Result<(), String> {
    use coflow_sched::Bandwidth;
    let gbps = Rate::GBPS.bytes_per_sec();
    for (i, l) in wa.links.iter().enumerate() {
        let mean = l.bandwidth.mean();
        if mean >= MIN_LINK_BYTES_PER_SEC {
            continue;
        }
        let field = match l.bandwidth {
            Bandwidth::Constant(_) => "constant_gbps",
            Bandwidth::Uniform(..) => "uniform_gbps",
            Bandwidth::Normal { .. } => "normal_gbps",
            Bandwidth::Empirical(_) => "samples_gbps (or samples_file)",
        };
        let name = |dc: u32| dc_name(wa, dc);
        return Err(format!(
            "links[{i}].{field} ({} -> {}): a mean of {:e} Gbit/s is below the {} Gbit/s ({}) the agents' data \
             plane can pace a link at",
            name(l.from),
            name(l.to),
            mean / gbps,
            MIN_LINK_BYTES_PER_SEC / gbps,
            Rate::from_bytes_per_sec(MIN_LINK_BYTES_PER_SEC),
        ));
    }
    Ok(())
}

/// Refuses a name of `status_hosts` that no `Host` header could match: empty, with a port, or
/// with a character a DNS name as browsers send it (ASCII, international names in their
/// `xn--` form) has not.
fn check_status_host(name: &str) -> Result<(), String> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    if bare.is_empty() {
        return Err(format!("{name:?}: an empty host name"));
    }
    if name.contains(':') {
        return Err(format!(
            "{name:?}: a host name without a port (any port is served, and IP literals need no listing)"
        ));
    }
    if !bare.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_') {
        return Err(format!(
            "{name:?}: a host name of letters, digits, `-`, `_` and `.` (an international name in its `xn--` form)"
        ));
    }
    Ok(())
}

/// A configuration value is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid coordinator config `{field}`: {reason}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// A wide-area error as the topology file names things: a missing link by its datacenters' names.
fn named(wa: &WideArea, e: coflow_sched::WanError) -> String {
    match e {
        coflow_sched::WanError::MissingLink { from, to } => {
            format!("no link from datacenter {:?} to {:?}", dc_name(wa, from), dc_name(wa, to))
        }
        e => e.to_string(),
    }
}

/// Datacenter `dc`'s name in the topology (`?` past its list).
pub(crate) fn dc_name(wa: &WideArea, dc: u32) -> &str {
    wa.datacenters.get(dc as usize).map_or("?", String::as_str)
}

impl CoordinatorConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        coflow_sched::policy::check_live(&self.policy)
            .map_err(|e| ConfigError { field: "policy", reason: e.to_string() })?;
        if let Some(wa) = &self.wide_area {
            let bad = |reason: String| ConfigError { field: "topology", reason };
            wa.validate().map_err(|e| bad(e.to_string()))?;
            // Agents may join in any datacenter: every ordered pair needs its direct link.
            let dcs = wa.datacenters.len() as u32;
            let dc_of: Vec<u32> = (0..dcs).collect();
            wa.place(dc_of, &[]).map_err(|e| bad(format!("{} (agents may join in any datacenter)", named(wa, e))))?;
            check_link_floor(wa).map_err(bad)?;
        } else if self.topology.is_some() {
            return Err(ConfigError {
                field: "topology",
                reason: "named but not read: `coflow coordinator` reads it into `wide_area`".into(),
            });
        }
        if self.multipath && self.wide_area.is_none() {
            return Err(ConfigError {
                field: "multipath",
                reason: "needs a wide-area topology: a big switch has one path between two agents".into(),
            });
        }
        if coflow_sched::policy::unscheduled(&self.policy).is_none() {
            // The coordinator schedules a big switch of its agents' ports, or the wide area.
            let fabric = match &self.wide_area {
                None => Fabric::big_switch(1, Rate::from_bytes_per_sec(1.0)),
                Some(wa) => Fabric::new(
                    wa.place(Vec::new(), &[]).map_err(|e| ConfigError { field: "topology", reason: e.to_string() })?,
                ),
            };
            check_policy(&self.policy, &fabric)?;
        }
        if self.heartbeat_interval_ms == 0 || self.heartbeat_interval_ms > 60_000 {
            return Err(ConfigError { field: "heartbeat_interval_ms", reason: "must be 1 to 60000".into() });
        }
        if self.agent_timeout_ms < 2 * self.heartbeat_interval_ms || self.agent_timeout_ms > 3_600_000 {
            return Err(ConfigError {
                field: "agent_timeout_ms",
                reason: "must be at least twice heartbeat_interval_ms and at most 3600000 (an hour)".into(),
            });
        }
        if self.max_coflows == 0 {
            return Err(ConfigError { field: "max_coflows", reason: "must be at least 1".into() });
        }
        if self.max_coflows_per_owner == 0 {
            return Err(ConfigError { field: "max_coflows_per_owner", reason: "must be at least 1".into() });
        }
        if self.max_pieces_per_coflow == 0 {
            return Err(ConfigError { field: "max_pieces_per_coflow", reason: "must be at least 1".into() });
        }
        if self.max_pieces_per_owner == 0 {
            return Err(ConfigError { field: "max_pieces_per_owner", reason: "must be at least 1".into() });
        }
        if self.max_gets_per_owner_per_source == 0 {
            return Err(ConfigError { field: "max_gets_per_owner_per_source", reason: "must be at least 1".into() });
        }
        if self.deadline_margin_ms > 3_600_000 {
            return Err(ConfigError {
                field: "deadline_margin_ms",
                reason: "must be at most 3600000 (an hour)".into(),
            });
        }
        if self.push_window_ms > 10_000 {
            return Err(ConfigError { field: "push_window_ms", reason: "must be at most 10000".into() });
        }
        for name in &self.status_hosts {
            check_status_host(name).map_err(|reason| ConfigError { field: "status_hosts", reason })?;
        }
        self.tls_files()?;
        Ok(())
    }

    /// The TLS files, if TLS is configured; an error names the one missing, or one empty.
    pub fn tls_files(&self) -> Result<Option<coflow_proto::TlsFiles>, ConfigError> {
        coflow_proto::TlsFiles::from_fields(&self.tls_ca, &self.tls_cert, &self.tls_key)
            .map_err(|(field, reason)| ConfigError { field, reason })
    }

    /// The push window.
    pub fn push_window(&self) -> Duration {
        Duration::from_millis(self.push_window_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `status_hosts` takes names, with or without a trailing dot, and refuses an empty name, a
    /// port, and a name no `Host` header could carry, naming the field.
    #[test]
    fn status_hosts_are_names_without_ports() {
        let with = |names: &[&str]| CoordinatorConfig {
            status_hosts: names.iter().map(|n| n.to_string()).collect(),
            ..CoordinatorConfig::default()
        };
        assert_eq!(with(&["coflow.example", "Ops-1.example.", "xn--bcher-kva.example"]).validate(), Ok(()));
        for (bad, why) in [
            ("", "an empty host name"),
            (".", "an empty host name"),
            ("coflow.example:9070", "without a port"),
            ("[::1]", "without a port"),
            ("bücher.example", "xn--"),
            ("coflow.example/", "letters, digits"),
            (" coflow.example", "letters, digits"),
        ] {
            let e = with(&["ok.example", bad]).validate().unwrap_err();
            assert_eq!(e.field, "status_hosts", "{bad:?}");
            assert!(e.reason.contains(why), "{bad:?}: {}", e.reason);
        }
    }
}
