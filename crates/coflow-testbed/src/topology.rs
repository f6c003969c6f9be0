//! The topology as data: hosts and the rates of their links to one non-blocking switch (the big
//! switch of the model), or to their datacenter's switch on a wide-area testbed. A JSON file, a
//! preset by name ([`PRESETS`]) or the built-in default of N hosts at one rate.
//!
//! ```json
//! {"hosts": [{"name": "h0", "uplink": "100Mbps", "downlink": "100Mbps"}, ...]}
//! ```
//!
//! A wide-area testbed adds `wan`, a wide-area topology in the simulator's format (`coflow sim
//! --wan`, without `placement` or `machines_per_dc`), and gives every host its datacenter:
//!
//! ```json
//! {"hosts": [{"name": "v0", "dc": "victoria", "uplink": "1Gbps", "downlink": "1Gbps"}, ...],
//!  "wan": {"datacenters": ["victoria", "toronto"], "redraw_ms": 2000,
//!          "links": [{"from": "victoria", "to": "toronto", "uniform_gbps": [0.02, 0.04]}, ...]}}
//! ```
//!
//! Each link's rate is its distribution's mean until the weather redraws it
//! (see the `weather` module); every value a distribution can take must be a rate `htb` can shape.

use std::time::Duration;

use coflow_core::Rate;
use coflow_sched::{Bandwidth, Wan};
use serde_json::Value;

/// The most hosts a testbed holds (addresses `10.203.x.10` to `.209`).
pub const MAX_HOSTS: usize = 200;

/// One host: its name and the rates of its link to the switch.
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    /// A short name, for reports.
    pub name: String,
    /// What it can send per second (shaped on its side of the link).
    pub uplink: Rate,
    /// What it can receive per second (shaped on the switch's side of the link).
    pub downlink: Rate,
}

/// Hosts on one switch, or on their datacenters' switches joined by wide-area links.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// The hosts, machine `i` being `hosts[i]`.
    pub hosts: Vec<Host>,
    /// The datacenters and their links, on a wide-area testbed.
    pub wan: Option<Datacenters>,
}

/// A wide-area testbed's datacenters: each a group of hosts behind its own router, every
/// ordered pair joined by a link of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct Datacenters {
    /// The datacenters, the links' wire-rate distributions (bytes per second) and every host's
    /// datacenter, as the simulator's wide area.
    pub wan: Wan,
    /// How often the weather redraws the links' rates (`None`: they stay at their means).
    pub redraw: Option<Duration>,
}

impl Datacenters {
    /// The wide area as the testbed's coordinator schedules it: the datacenters and every link's
    /// distribution at the payload rate the agents carry ([`PAYLOAD_SHARE`] of the wire rate).
    pub fn payload_wide_area(&self) -> coflow_sched::WideArea {
        coflow_sched::WideArea {
            datacenters: (0..self.wan.dcs()).map(|d| self.wan.name(d).to_string()).collect(),
            links: self
                .wan
                .links()
                .iter()
                .map(|l| coflow_sched::Link { bandwidth: l.bandwidth.scaled(PAYLOAD_SHARE), ..l.clone() })
                .collect(),
        }
    }
}

/// The most datacenters a testbed holds (router addresses `10.203.x.1` to `.9`).
pub const MAX_DATACENTERS: usize = 9;

/// The built-in topologies, by name: Siphon's three datacenters (Victoria, Toronto, Montreal),
/// the same with one weak link (for multi-path), and five regions. Link means and spreads
/// follow `docs/wan-default.json` scaled from Gbit/s to a few Mbit/s, so that two cores can
/// push every link at once; the hosts' links inside a datacenter run at 1 Gbit/s.
pub const PRESETS: &[(&str, &str)] = &[
    ("siphon-3dc", include_str!("../presets/siphon-3dc.json")),
    ("siphon-3dc-bottleneck", include_str!("../presets/siphon-3dc-bottleneck.json")),
    ("siphon-5dc", include_str!("../presets/siphon-5dc.json")),
];

/// A topology file is wrong; `field` names where (`hosts[2].uplink`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("topology `{field}`: {reason}")]
pub struct TopologyError {
    /// The field.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> TopologyError {
    TopologyError { field: field.into(), reason: reason.into() }
}

fn rate(v: &Value, field: &str) -> Result<Rate, TopologyError> {
    let s = v.as_str().ok_or_else(|| err(field, "must be a rate such as \"100Mbps\""))?;
    let r: Rate = s.parse().map_err(|e| err(field, format!("{e}")))?;
    check_rate(r, field)?;
    Ok(r)
}

fn check_rate(r: Rate, field: &str) -> Result<(), TopologyError> {
    let bits = r.bits_per_sec();
    if !(1e6..=1e11).contains(&bits) {
        return Err(err(field, "must be between 1Mbps and 100Gbps"));
    }
    Ok(())
}

impl Topology {
    /// `n` hosts, every link at `rate` both ways.
    pub fn uniform(n: usize, rate: Rate) -> Result<Topology, TopologyError> {
        if n == 0 || n > MAX_HOSTS {
            return Err(err("hosts", format!("must be 1 to {MAX_HOSTS}")));
        }
        check_rate(rate, "link")?;
        let hosts = (0..n).map(|i| Host { name: format!("h{i}"), uplink: rate, downlink: rate }).collect();
        Ok(Topology { hosts, wan: None })
    }

    /// A preset by name ([`PRESETS`]), else the topology file at path `spec`.
    pub fn load(spec: &str) -> Result<Topology, TopologyError> {
        if let Some((_, text)) = PRESETS.iter().find(|(name, _)| *name == spec) {
            return Topology::from_json(text);
        }
        let path = std::path::Path::new(spec);
        // Bounded as every file the tools read: an endless one (`/dev/zero`) is refused.
        let text = coflow_trace::read_text(path).map_err(|e| {
            let presets: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
            err("(file)", format!("{e} (and no preset of that name: {})", presets.join(", ")))
        })?;
        Topology::from_json_at(&text, path.parent())
    }

    /// Parses and validates a topology file's text.
    pub fn from_json(text: &str) -> Result<Topology, TopologyError> {
        Topology::from_json_at(text, None)
    }

    /// [`Topology::from_json`] of a file in directory `base`, against which the wide area's
    /// relative paths (`samples_file`) are read.
    pub fn from_json_at(text: &str, base: Option<&std::path::Path>) -> Result<Topology, TopologyError> {
        let v: Value = serde_json::from_str(text).map_err(|e| err("(file)", format!("not JSON: {e}")))?;
        let obj = v.as_object().ok_or_else(|| err("(file)", "must be an object with `hosts`"))?;
        if let Some(k) = obj.keys().find(|k| !["hosts", "wan"].contains(&k.as_str())) {
            return Err(err(k.clone(), "unknown field (known: hosts, wan)"));
        }
        let wan = obj.get("wan").map(|v| wide_area(v, base)).transpose()?;
        let list = obj.get("hosts").ok_or_else(|| err("hosts", "missing"))?;
        let list = list.as_array().ok_or_else(|| err("hosts", "must be a list"))?;
        if list.is_empty() || list.len() > MAX_HOSTS {
            return Err(err("hosts", format!("must hold 1 to {MAX_HOSTS} hosts")));
        }
        let mut hosts: Vec<Host> = Vec::new();
        let mut dc_of: Vec<u32> = Vec::new();
        for (i, h) in list.iter().enumerate() {
            let at = |f: &str| format!("hosts[{i}].{f}");
            let h = h.as_object().ok_or_else(|| err(format!("hosts[{i}]"), "must be an object"))?;
            if let Some(k) = h.keys().find(|k| !["name", "dc", "uplink", "downlink"].contains(&k.as_str())) {
                return Err(err(at(k), "unknown field (known: name, dc, uplink, downlink)"));
            }
            match (&wan, h.get("dc")) {
                (None, None) => {}
                (None, Some(_)) => return Err(err(at("dc"), "a datacenter needs `wan`")),
                (Some(_), None) => return Err(err(at("dc"), "missing (every host of a wide-area testbed has one)")),
                (Some(w), Some(d)) => {
                    let d = d.as_str().ok_or_else(|| err(at("dc"), "must be a datacenter's name"))?;
                    let k = w.datacenters.iter().position(|n| n == d);
                    dc_of.push(k.ok_or_else(|| err(at("dc"), format!("no datacenter {d:?} in wan.datacenters")))? as u32);
                }
            }
            let name = match h.get("name") {
                None => format!("h{i}"),
                Some(n) => n.as_str().ok_or_else(|| err(at("name"), "must be a string"))?.to_string(),
            };
            if name.is_empty()
                || name.len() > 32
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(err(at("name"), "must be 1 to 32 letters, digits, `-` or `_`"));
            }
            if hosts.iter().any(|o| o.name == name) {
                return Err(err(at("name"), format!("{name:?} is used twice")));
            }
            let uplink = rate(h.get("uplink").ok_or_else(|| err(at("uplink"), "missing"))?, &at("uplink"))?;
            let downlink = rate(h.get("downlink").ok_or_else(|| err(at("downlink"), "missing"))?, &at("downlink"))?;
            hosts.push(Host { name, uplink, downlink });
        }
        let wan = match wan {
            None => None,
            Some(w) => {
                let redraw = w.redraw_ms.filter(|&ms| ms > 0).map(Duration::from_millis);
                let held: Vec<bool> = (0..w.datacenters.len()).map(|k| dc_of.contains(&(k as u32))).collect();
                let wan = Wan::new(w.datacenters, w.links, dc_of).map_err(|e| err("wan", e.to_string()))?;
                for a in 0..wan.dcs() {
                    if let Some(b) = (0..wan.dcs()).find(|&b| b != a && wan.link(a, b).is_none()) {
                        let why =
                            format!("no link from {} to {} (every ordered pair needs one)", wan.name(a), wan.name(b));
                        return Err(err("wan.links", why));
                    }
                }
                if let Some(k) = held.iter().position(|&h| !h) {
                    // The simulation would relay through it; the live run has no agent there.
                    return Err(err(
                        "hosts",
                        format!("no host in datacenter {:?} (each needs one)", wan.name(k as u32)),
                    ));
                }
                Some(Datacenters { wan, redraw })
            }
        };
        Ok(Topology { hosts, wan })
    }

    /// The payload rate a synthetic workload's load is relative to: the links' on a big switch
    /// (the first host's uplink when they differ), the wide-area links' mean on a wide-area
    /// testbed, where they are the bottleneck.
    pub fn workload_port(&self) -> Rate {
        match &self.wan {
            Some(d) => {
                let links = d.wan.links();
                let mean = links.iter().map(|l| l.bandwidth.mean()).sum::<f64>() / links.len().max(1) as f64;
                payload_rate(Rate::from_bytes_per_sec(mean))
            }
            None => payload_rate(self.uniform_rate().unwrap_or(self.hosts[0].uplink)),
        }
    }

    /// Each host's datacenter (all in datacenter 0 on a big switch).
    pub fn dc_of(&self) -> Vec<usize> {
        match &self.wan {
            None => vec![0; self.hosts.len()],
            Some(d) => (0..self.hosts.len() as u32).map(|m| d.wan.dc_of(m) as usize).collect(),
        }
    }

    /// The one rate of every link, if they all share one (the simulator's big switch needs it).
    pub fn uniform_rate(&self) -> Option<Rate> {
        let r = self.hosts.first()?.uplink;
        self.hosts.iter().all(|h| h.uplink == r && h.downlink == r).then_some(r)
    }
}

/// The `wan` object: the simulator's wide-area file, without what the hosts say.
fn wide_area(v: &Value, base: Option<&std::path::Path>) -> Result<coflow_sim::topology::Topology, TopologyError> {
    let t = coflow_sim::topology::Topology::from_value(v.clone(), base).map_err(|e| err("wan", e.to_string()))?;
    if t.placement.is_some() || t.machines_per_dc.is_some() {
        return Err(err("wan", "hosts say their datacenter (`dc`): no placement or machines_per_dc"));
    }
    if t.per_connection {
        return Err(err("wan.per_connection", "a testbed's connections are real"));
    }
    if t.datacenters.len() > MAX_DATACENTERS {
        return Err(err("wan.datacenters", format!("at most {MAX_DATACENTERS}")));
    }
    for (i, l) in t.links.iter().enumerate() {
        let (lo, hi) = range(&l.bandwidth);
        for v in [lo, hi] {
            check_rate(Rate::from_bytes_per_sec(v), &format!("wan.links[{i}]"))?;
        }
    }
    Ok(t)
}

/// The least and greatest value a distribution takes (a normal's greatest: five deviations up).
fn range(b: &Bandwidth) -> (f64, f64) {
    match b {
        Bandwidth::Constant(v) => (*v, *v),
        Bandwidth::Uniform(lo, hi) => (*lo, *hi),
        Bandwidth::Normal { mean, sd, min } => (*min, mean + 5.0 * sd),
        Bandwidth::Empirical(s) => {
            (s.iter().copied().fold(f64::INFINITY, f64::min), s.iter().copied().fold(0.0, f64::max))
        }
    }
}

/// The share of a link's rate that carries TCP payload when both its directions carry data, as a
/// shuffle's links do: each full frame at MTU 1500 (IPv4, TCP with timestamps) is 1514 bytes that
/// `htb` counts for 1448 of payload, and the link also carries the acknowledgements of the data
/// flowing the other way (a 66-byte frame for every two segments with delayed acknowledgements,
/// 33 bytes a frame). The agents' port capacity, and the simulator's, is what a link carries of
/// payload.
pub const PAYLOAD_SHARE: f64 = 1448.0 / (1514.0 + 33.0);

/// The payload capacity of a link shaped at `link`: what the agents register and the simulator
/// assumes.
pub fn payload_rate(link: Rate) -> Rate {
    Rate::from_bytes_per_sec(link.bytes_per_sec() * PAYLOAD_SHARE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_parses_and_errors_name_the_field() {
        let t = Topology::from_json(r#"{"hosts":[{"name":"a","uplink":"100Mbps","downlink":"1Gbps"}]}"#).unwrap();
        assert_eq!(t.hosts[0].uplink.bits_per_sec(), 1e8);
        assert_eq!(t.hosts[0].downlink.bits_per_sec(), 1e9);
        assert_eq!(t.uniform_rate(), None);
        let cases = [
            (r#"{"hosts":[]}"#, "hosts"),
            (r#"{"hosts":[{"uplink":"100Mbps"}]}"#, "hosts[0].downlink"),
            (r#"{"hosts":[{"uplink":"fast","downlink":"1Gbps"}]}"#, "hosts[0].uplink"),
            (r#"{"hosts":[{"uplink":"1Kbps","downlink":"1Gbps"}]}"#, "hosts[0].uplink"),
            (r#"{"hosts":[{"uplink":"1Gbps","downlink":"1Gbps","mtu":9000}]}"#, "hosts[0].mtu"),
            (
                r#"{"hosts":[{"name":"a","uplink":"1Gbps","downlink":"1Gbps"},{"name":"a","uplink":"1Gbps","downlink":"1Gbps"}]}"#,
                "hosts[1].name",
            ),
            (r#"{"hosts":[{"name":"a b","uplink":"1Gbps","downlink":"1Gbps"}]}"#, "hosts[0].name"),
            (r#"{"links":[]}"#, "links"),
            (r#"[1]"#, "(file)"),
        ];
        for (text, field) in cases {
            let e = Topology::from_json(text).unwrap_err();
            assert_eq!(e.field, field, "{text}: {e}");
        }
    }

    #[test]
    fn presets_are_wide_area_testbeds_with_a_link_per_ordered_pair() {
        for (name, dcs, hosts) in [("siphon-3dc", 3, 6), ("siphon-3dc-bottleneck", 3, 6), ("siphon-5dc", 5, 5)] {
            let t = Topology::load(name).unwrap();
            let d = t.wan.as_ref().unwrap();
            assert_eq!((d.wan.dcs(), t.hosts.len(), d.wan.links().len()), (dcs, hosts, (dcs * (dcs - 1)) as usize));
            assert_eq!(d.redraw, Some(Duration::from_secs(2)), "{name}");
            // Every datacenter holds a host.
            let mut held = t.dc_of();
            held.dedup();
            assert_eq!(held, (0..dcs as usize).collect::<Vec<_>>(), "{name}");
        }
        // The bottleneck preset's weak link is victoria -> toronto, a quarter of the other's mean.
        let mean = |name: &str| {
            let t = Topology::load(name).unwrap();
            let w = &t.wan.unwrap().wan;
            w.links()[w.link(0, 1).unwrap() as usize].bandwidth.mean()
        };
        assert!((mean("siphon-3dc") / mean("siphon-3dc-bottleneck") - 4.0).abs() < 1e-9);
        let e = Topology::load("no-such-preset").unwrap_err();
        assert!(e.reason.contains("siphon-3dc"), "{e}");
    }

    #[test]
    fn wide_area_errors_name_the_field() {
        let wan = r#""wan":{"datacenters":["a","b"],"links":[{"from":"a","to":"b","constant_gbps":0.01},{"from":"b","to":"a","constant_gbps":0.01}]}"#;
        let host = |dc: &str| format!(r#"{{"uplink":"1Gbps","downlink":"1Gbps"{dc}}}"#);
        let file = |hosts: &[String], wan: &str| format!(r#"{{"hosts":[{}]{wan}}}"#, hosts.join(","));
        let ok = file(&[host(r#","dc":"a""#), host(r#","dc":"b""#)], &format!(",{wan}"));
        let t = Topology::from_json(&ok).unwrap();
        assert_eq!(t.dc_of(), vec![0, 1]);
        assert!((t.workload_port().bytes_per_sec() - 1.25e6 * PAYLOAD_SHARE).abs() < 1e-6);
        let cases = [
            (file(&[host(r#","dc":"a""#)], ""), "hosts[0].dc"),
            (file(&[host(""), host(r#","dc":"b""#)], &format!(",{wan}")), "hosts[0].dc"),
            (file(&[host(r#","dc":"c""#)], &format!(",{wan}")), "hosts[0].dc"),
            (file(&[host(r#","dc":"a""#)], r#","wan":{"datacenters":["a","b"],"links":[]}"#), "wan.links"),
            (
                file(&[host(r#","dc":"a""#), host(r#","dc":"b""#)], r#","wan":{"datacenters":["a","b"],"links":[]}"#),
                "wan",
            ),
            (
                file(
                    &[host(r#","dc":"a""#), host(r#","dc":"b""#)],
                    r#","wan":{"datacenters":["a","b"],"links":[{"from":"a","to":"b","constant_gbps":0.0001},{"from":"b","to":"a","constant_gbps":0.01}]}"#,
                ),
                "wan.links[0]",
            ),
            (
                file(
                    &[host(r#","dc":"a""#)],
                    r#","wan":{"datacenters":["a","b"],"placement":["a"],"links":[{"from":"a","to":"b","constant_gbps":0.01}]}"#,
                ),
                "wan",
            ),
        ];
        for (text, field) in cases {
            let e = Topology::from_json(&text).unwrap_err();
            assert_eq!(e.field, field, "{text}: {e}");
        }
        // A datacenter with no host, through which the simulation alone could relay.
        let e = Topology::from_json(&file(&[host(r#","dc":"a""#)], &format!(",{wan}"))).unwrap_err();
        assert_eq!((e.field.as_str(), e.reason.as_str()), ("hosts", "no host in datacenter \"b\" (each needs one)"));
    }

    #[test]
    fn an_endless_file_is_refused_not_read_until_memory_runs_out() {
        let e = Topology::load("/dev/zero").unwrap_err();
        assert_eq!(e.field, "(file)");
        assert!(e.reason.contains("/dev/zero") && e.reason.contains("no preset of that name"), "{e}");
    }

    #[test]
    fn a_wide_area_error_names_its_field_not_a_position_in_a_copy() {
        // Positions would count in a re-serialized copy of `wan`, not in the user's file.
        let text = "{\n  \"hosts\": [{\"uplink\": \"1Gbps\", \"downlink\": \"1Gbps\", \"dc\": \"a\"}],\n  \"wan\": {\"datacenters\": [\"a\"], \"linkz\": []}\n}";
        let e = Topology::from_json(text).unwrap_err();
        assert_eq!(e.field, "wan");
        assert!(e.reason.contains("unknown field `linkz`"), "{e}");
        assert!(!e.reason.contains("line"), "{e}");
    }

    #[test]
    fn a_samples_file_is_read_beside_the_topology_file() {
        let guard = tempfile::Builder::new().prefix("coflow-tb-samples-").tempdir().unwrap();
        let dir = guard.path();
        std::fs::write(dir.join("s.txt"), "0.01\n0.02\n").unwrap();
        let text = r#"{"hosts":[{"uplink":"1Gbps","downlink":"1Gbps","dc":"a"},{"uplink":"1Gbps","downlink":"1Gbps","dc":"b"}],
            "wan":{"datacenters":["a","b"],"links":[{"from":"a","to":"b","samples_file":"s.txt"},{"from":"b","to":"a","constant_gbps":0.01}]}}"#;
        let file = dir.join("t.json");
        std::fs::write(&file, text).unwrap();
        // Loaded from another working directory, the relative path is still the file's neighbour.
        let t = Topology::load(file.to_str().unwrap()).unwrap();
        assert_eq!(t.dc_of(), vec![0, 1]);
    }

    #[test]
    fn the_default_is_uniform() {
        let r: Rate = "100Mbps".parse().unwrap();
        let t = Topology::uniform(3, r).unwrap();
        assert_eq!(t.uniform_rate(), Some(r));
        assert_eq!(t.hosts[2].name, "h2");
        assert!(Topology::uniform(0, r).is_err());
        // 1448 bytes of payload for each 1514-byte frame and half a 66-byte acknowledgement.
        assert!((payload_rate(r).bytes_per_sec() - 12.5e6 * 1448.0 / 1547.0).abs() < 1e-6);
    }
}
