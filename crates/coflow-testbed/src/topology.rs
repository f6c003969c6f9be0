//! The topology as data: hosts and the rates of their links to one non-blocking switch (the big
//! switch of the model). A JSON file or the built-in default of N hosts at one rate.
//!
//! ```json
//! {"hosts": [{"name": "h0", "uplink": "100Mbps", "downlink": "100Mbps"}, ...]}
//! ```
//!
//! A wide-area testbed (datacenters joined by slower links) is a new field (`switches`, `links`)
//! of this format, not a new command.

use coflow_core::Rate;
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

/// Hosts on one switch.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// The hosts, machine `i` being `hosts[i]`.
    pub hosts: Vec<Host>,
}

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
        Ok(Topology { hosts })
    }

    /// Parses and validates a topology file's text.
    pub fn from_json(text: &str) -> Result<Topology, TopologyError> {
        let v: Value = serde_json::from_str(text).map_err(|e| err("(file)", format!("not JSON: {e}")))?;
        let obj = v.as_object().ok_or_else(|| err("(file)", "must be an object with `hosts`"))?;
        if let Some(k) = obj.keys().find(|k| k.as_str() != "hosts") {
            return Err(err(k.clone(), "unknown field (known: hosts)"));
        }
        let list = obj.get("hosts").ok_or_else(|| err("hosts", "missing"))?;
        let list = list.as_array().ok_or_else(|| err("hosts", "must be a list"))?;
        if list.is_empty() || list.len() > MAX_HOSTS {
            return Err(err("hosts", format!("must hold 1 to {MAX_HOSTS} hosts")));
        }
        let mut hosts: Vec<Host> = Vec::new();
        for (i, h) in list.iter().enumerate() {
            let at = |f: &str| format!("hosts[{i}].{f}");
            let h = h.as_object().ok_or_else(|| err(format!("hosts[{i}]"), "must be an object"))?;
            if let Some(k) = h.keys().find(|k| !["name", "uplink", "downlink"].contains(&k.as_str())) {
                return Err(err(at(k), "unknown field (known: name, uplink, downlink)"));
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
        Ok(Topology { hosts })
    }

    /// The one rate of every link, if they all share one (the simulator's big switch needs it).
    pub fn uniform_rate(&self) -> Option<Rate> {
        let r = self.hosts.first()?.uplink;
        self.hosts.iter().all(|h| h.uplink == r && h.downlink == r).then_some(r)
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
