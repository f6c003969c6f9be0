//! Namespaces, the bridge, veth links and `htb` shaping, through the `ip` and `tc` commands.
//!
//! Layout of a testbed with prefix `P`: namespace `P-sw` holds the switch (bridge `br0`,
//! address `10.203.S.1`, where the coordinator listens) and the switch-side ends `b0`..`bN` of
//! the hosts' links; namespace `P-hI` holds host `I`'s end `eth0` (`10.203.S.(10+I)`) and its
//! loopback. Host `I`'s uplink is shaped on `eth0`'s egress, its downlink on `bI`'s egress
//! (towards the host). Nothing is created outside these namespaces, so deleting them removes
//! every link.
//!
//! Every shaped link carries two classes under one at the link's rate ([`link_plan`]), as
//! datacenters mark control traffic: control (the coordinator's gRPC, acknowledgements and the
//! data plane's short messages) is served first, data takes the rest, and each waits in a short
//! queue of its own, so a control message never queues behind a burst of data.

use std::net::Ipv4Addr;
use std::process::Command;

use coflow_core::Rate;

use crate::TestbedError;
use crate::state::{CHANGES, StateFile};
use crate::topology::Topology;

/// The names and addresses of one testbed.
#[derive(Clone, Debug)]
pub struct Names {
    /// `cfb` and six hex digits: unique per run.
    pub prefix: String,
    /// The third octet of the subnet.
    pub subnet: u8,
    /// Each host's datacenter on a wide-area testbed (built by the `wide_area` module); empty on
    /// a big switch.
    pub dc_of: Vec<usize>,
}

impl Names {
    /// Fresh names (from the process id, the clock and a counter).
    pub fn fresh() -> Names {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut x = (nanos as u64) ^ (u64::from(std::process::id()) << 32) ^ COUNTER.fetch_add(1, Ordering::Relaxed);
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        Names { prefix: format!("cfb{:06x}", x & 0xff_ffff), subnet: (x >> 24) as u8, dc_of: Vec::new() }
    }

    /// The switch's namespace.
    pub fn switch_ns(&self) -> String {
        format!("{}-sw", self.prefix)
    }

    /// Datacenter `d`'s router on a wide-area testbed: datacenter 0's is the switch's
    /// namespace, where the coordinator runs.
    pub fn router_ns(&self, d: usize) -> String {
        if d == 0 { self.switch_ns() } else { format!("{}-r{d}", self.prefix) }
    }

    /// The namespace holding the switch-side end of host `i`'s link: its datacenter's router,
    /// or the switch.
    pub fn port_ns(&self, i: usize) -> String {
        self.router_ns(self.dc_of.get(i).copied().unwrap_or(0))
    }

    /// Host `i`'s namespace.
    pub fn host_ns(&self, i: usize) -> String {
        format!("{}-h{i}", self.prefix)
    }

    /// The coordinator's address (on the bridge).
    pub fn coordinator_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 203, self.subnet, 1)
    }

    /// Host `i`'s address.
    pub fn host_ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 203, self.subnet, 10 + i as u8)
    }

    /// The switch-side end of host `i`'s link.
    pub fn switch_port(i: usize) -> String {
        format!("b{i}")
    }
}

/// Runs a command; its stderr becomes the error.
pub(crate) fn cmd(program: &str, args: &[&str]) -> Result<String, TestbedError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| TestbedError::Command { cmd: format!("{program} {}", args.join(" ")), reason: e.to_string() })?;
    if !out.status.success() {
        return Err(TestbedError::Command {
            cmd: format!("{program} {}", args.join(" ")),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a change to the topology unless the process is being torn down.
pub(crate) fn change(program: &str, args: &[&str]) -> Result<String, TestbedError> {
    let torn = CHANGES.lock().unwrap_or_else(|e| e.into_inner());
    if *torn {
        return Err(TestbedError::Interrupted);
    }
    let r = cmd(program, args);
    drop(torn);
    r
}

/// Whether this process can build testbeds: root, with `ip` and `tc`; else why not.
pub fn preflight() -> Result<(), String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .flatten();
    if uid.as_deref() != Some("0") {
        return Err("network namespaces need root".into());
    }
    for tool in ["ip", "tc", "kill"] {
        if Command::new(tool).arg("-V").output().is_err() && Command::new(tool).arg("--version").output().is_err() {
            return Err(format!("`{tool}` is not installed"));
        }
    }
    Ok(())
}

/// The port the coordinator listens on, in the switch's namespace: its gRPC traffic (the agents'
/// registrations, gets, reports and heartbeats one way, rate pushes the other) is control.
pub const COORDINATOR_PORT: u16 = 7070;

/// The control class's guaranteed share of a link. It takes what it needs first (priority 0)
/// and may borrow the whole link when data leaves it idle, but the guarantees of both classes
/// add up to the link's rate, so the class shares the link and never adds to it.
const CONTROL_SHARE: f64 = 0.05;

/// Packets whose IP datagram is shorter than this (a power of two) are control: TCP acknowledgements, the data
/// plane's requests, response heads and keepalives. Data frames travel in full segments.
const SMALL_PACKET_BYTES: u32 = 256;

/// How long the data class's queue may take to drain at the link's rate: the agents' token
/// buckets let paced flows send 50 ms of their rates at once after a late wake-up (the agent's
/// `bucket::burst_for`), and flows whose rates add up to the link's must not lose those bursts
/// to a queue that holds less...
const DATA_QUEUE_S: f64 = 0.05;

/// ...but never less than two segmentation-offload packets of 64 KiB, which the veth links
/// carry whole and `htb` queues as one packet each.
const DATA_QUEUE_MIN_BYTES: u64 = 2 * 65_536;

/// Packets the control class's queue holds (small ones: at most 100 KB).
const CONTROL_QUEUE_PACKETS: u32 = 400;

/// One `htb` class of a shaped link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkClass {
    /// Its class id (`1:1` the link, `1:10` control, `1:20` data).
    pub classid: &'static str,
    /// Its parent (`1:` for the link's class).
    pub parent: &'static str,
    /// The rate it is guaranteed, bits per second.
    pub rate_bps: u64,
    /// The rate it may reach by borrowing from its parent, bits per second.
    pub ceil_bps: u64,
    /// Which class borrows first (lower first); `None` for the link's class.
    pub prio: Option<u8>,
}

/// How a link of one rate is shaped: a class at the link's rate, and under it a control class
/// served first and a data class that takes all the rest, each with a short queue of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkPlan {
    /// The link's class and its two leaves.
    pub classes: Vec<LinkClass>,
    /// The control leaf's queue, packets.
    pub control_queue_packets: u32,
    /// The data leaf's queue, bytes.
    pub data_queue_bytes: u64,
}

/// The classes of a link shaped at `rate`.
pub fn link_plan(rate: Rate) -> LinkPlan {
    let link = rate.bits_per_sec().round() as u64;
    let control = ((link as f64 * CONTROL_SHARE).round() as u64).max(1);
    let data = link.saturating_sub(control).max(1);
    let queue = ((rate.bytes_per_sec() * DATA_QUEUE_S).round() as u64).max(DATA_QUEUE_MIN_BYTES);
    LinkPlan {
        classes: vec![
            LinkClass { classid: "1:1", parent: "1:", rate_bps: link, ceil_bps: link, prio: None },
            LinkClass { classid: "1:10", parent: "1:1", rate_bps: control, ceil_bps: link, prio: Some(0) },
            LinkClass { classid: "1:20", parent: "1:1", rate_bps: data, ceil_bps: link, prio: Some(1) },
        ],
        control_queue_packets: CONTROL_QUEUE_PACKETS,
        data_queue_bytes: queue,
    }
}

/// The filters that put control into `1:10` (everything else falls into the data class `1:20`,
/// the `htb` default): TCP from or to the coordinator's port, IP packets shorter than
/// [`SMALL_PACKET_BYTES`], and ARP.
fn control_filters() -> Vec<Vec<String>> {
    let port = COORDINATOR_PORT.to_string();
    let small = format!("0x{:04x}", !(SMALL_PACKET_BYTES - 1) & 0xffff);
    let tcp_port = |dir: &str| {
        [
            "protocol", "ip", "prio", "1", "u32", "match", "ip", "protocol", "6", "0xff", "match", "ip", dir, &port,
            "0xffff",
        ]
        .map(str::to_string)
        .to_vec()
    };
    vec![
        tcp_port("sport"),
        tcp_port("dport"),
        // The IP header's total length (its bytes 2 and 3) below the threshold.
        ["protocol", "ip", "prio", "2", "u32", "match", "u16", "0", &small, "at", "2"].map(str::to_string).to_vec(),
        ["protocol", "arp", "prio", "3", "u32", "match", "u32", "0", "0"].map(str::to_string).to_vec(),
    ]
}

/// Shapes `dev`'s egress in `ns` at `rate` with [`link_plan`]'s classes (`verb` `add` builds
/// them, `change` sets a new rate). The quantum is set so that `htb` does not warn at high rates.
pub(crate) fn shape(ns: &str, dev: &str, rate: Rate, verb: &str) -> Result<(), TestbedError> {
    let plan = link_plan(rate);
    let tc = |args: &[&str]| {
        let mut all = vec!["netns", "exec", ns, "tc"];
        all.extend_from_slice(args);
        change("ip", &all).map(|_| ())
    };
    if verb == "add" {
        tc(&["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "20"])?;
    }
    for c in &plan.classes {
        let (rate, ceil) = (format!("{}bit", c.rate_bps), format!("{}bit", c.ceil_bps));
        let mut args = vec![
            "class", verb, "dev", dev, "parent", c.parent, "classid", c.classid, "htb", "rate", &rate, "ceil", &ceil,
        ];
        let prio = c.prio.map(|p| p.to_string());
        if let Some(p) = &prio {
            args.extend(["prio", p.as_str()]);
        }
        args.extend(["quantum", "60000"]);
        tc(&args)?;
    }
    let (packets, bytes) = (plan.control_queue_packets.to_string(), plan.data_queue_bytes.to_string());
    tc(&["qdisc", verb, "dev", dev, "parent", "1:10", "handle", "10:", "pfifo", "limit", &packets])?;
    tc(&["qdisc", verb, "dev", dev, "parent", "1:20", "handle", "20:", "bfifo", "limit", &bytes])?;
    if verb == "add" {
        for f in control_filters() {
            let mut args = vec!["filter", "add", "dev", dev, "parent", "1:"];
            args.extend(f.iter().map(String::as_str));
            args.extend(["flowid", "1:10"]);
            tc(&args)?;
        }
    }
    Ok(())
}

/// Builds the testbed's network of one switch, recording each namespace before creating it.
pub fn up(topology: &Topology, names: &Names, state: &StateFile) -> Result<(), TestbedError> {
    let sw = names.switch_ns();
    state.add_namespace(&sw)?;
    change("ip", &["netns", "add", &sw])?;
    change("ip", &["-n", &sw, "link", "set", "lo", "up"])?;
    change("ip", &["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
    change("ip", &["-n", &sw, "addr", "add", &format!("{}/24", names.coordinator_ip()), "dev", "br0"])?;
    change("ip", &["-n", &sw, "link", "set", "br0", "up"])?;
    for (i, h) in topology.hosts.iter().enumerate() {
        let ns = names.host_ns(i);
        let port = Names::switch_port(i);
        state.add_namespace(&ns)?;
        change("ip", &["netns", "add", &ns])?;
        change("ip", &["-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
        change("ip", &["-n", &sw, "link", "set", &port, "master", "br0", "up"])?;
        change("ip", &["-n", &ns, "addr", "add", &format!("{}/24", names.host_ip(i)), "dev", "eth0"])?;
        change("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
        change("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        shape(&ns, "eth0", h.uplink, "add")?;
        shape(&sw, &port, h.downlink, "add")?;
    }
    Ok(())
}

/// Sets host `i`'s link rates (both ways) to `rate`.
pub fn set_rate(names: &Names, i: usize, rate: Rate) -> Result<(), TestbedError> {
    shape(&names.host_ns(i), "eth0", rate, "change")?;
    shape(&names.port_ns(i), &Names::switch_port(i), rate, "change")
}

/// Takes host `i`'s link down (`up` false) or brings it back, at the switch's end.
pub fn set_link(names: &Names, i: usize, up: bool) -> Result<(), TestbedError> {
    let port = Names::switch_port(i);
    change("ip", &["-n", &names.port_ns(i), "link", "set", &port, if up { "up" } else { "down" }])?;
    Ok(())
}

/// Bytes that crossed the switch-side ends so far: per host, (sent by the host, sent to it),
/// wire bytes as the links count them.
pub fn link_bytes(names: &Names, hosts: usize) -> Result<Vec<(u64, u64)>, TestbedError> {
    let mut out = vec![(0, 0); hosts];
    let routers = names.dc_of.iter().copied().max().map_or(1, |d| d + 1);
    for d in 0..routers {
        let text = cmd("ip", &["-n", &names.router_ns(d), "-s", "-j", "link", "show"])?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| TestbedError::Setup(format!("`ip -s -j link` output: {e}")))?;
        for link in v.as_array().into_iter().flatten() {
            let Some(name) = link.get("ifname").and_then(|n| n.as_str()) else { continue };
            let Some(i) = name.strip_prefix('b').and_then(|s| s.parse::<usize>().ok()) else { continue };
            if i >= hosts || names.dc_of.get(i).copied().unwrap_or(0) != d {
                continue;
            }
            let stat = |dir: &str| link.pointer(&format!("/stats64/{dir}/bytes")).and_then(|b| b.as_u64()).unwrap_or(0);
            // The switch's end receives what the host sends and sends what the host receives.
            out[i] = (stat("rx"), stat("tx"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rates a class may take from the link: what it is guaranteed, and what it may reach.
    fn leaves(p: &LinkPlan) -> Vec<&LinkClass> {
        p.classes.iter().filter(|c| c.parent == "1:1").collect()
    }

    #[test]
    fn the_classes_share_the_link_and_never_add_to_it() {
        for bps in [1e3, 8e3 + 1.0, 1e6, 1e8, 123_456_789.0, 1e9, 4e10] {
            let p = link_plan(Rate::from_bytes_per_sec(bps / 8.0));
            let link = bps.round() as u64;
            let root: Vec<_> = p.classes.iter().filter(|c| c.parent == "1:").collect();
            assert_eq!(root.len(), 1, "one class at the link's rate at {bps}");
            assert_eq!((root[0].classid, root[0].rate_bps, root[0].ceil_bps), ("1:1", link, link), "at {bps}");
            let l = leaves(&p);
            assert_eq!(l.len() + 1, p.classes.len(), "every other class is under the link's at {bps}");
            assert_eq!(l.iter().map(|c| c.rate_bps).sum::<u64>(), link, "guarantees add up to the link at {bps}");
            assert!(l.iter().all(|c| c.ceil_bps <= link && c.rate_bps >= 1), "at {bps}: {l:?}");
        }
    }

    #[test]
    fn control_is_served_first_with_a_twentieth_guaranteed_and_data_is_the_default() {
        let p = link_plan(Rate::from_bytes_per_sec(1e8 / 8.0));
        let by = |id: &str| p.classes.iter().find(|c| c.classid == id).unwrap().clone();
        assert_eq!(
            by("1:10"),
            LinkClass { classid: "1:10", parent: "1:1", rate_bps: 5_000_000, ceil_bps: 100_000_000, prio: Some(0) }
        );
        assert_eq!(by("1:20").rate_bps, 95_000_000);
        assert!(by("1:10").prio < by("1:20").prio);
        // 50 ms at 12.5 MB/s is 625,000 bytes; at 1 MB/s it would be 50,000, under two 64 KiB
        // offload packets.
        assert_eq!(p.data_queue_bytes, 625_000);
        assert_eq!(link_plan(Rate::from_bytes_per_sec(1e9 / 8.0)).data_queue_bytes, 6_250_000);
        assert_eq!(link_plan(Rate::from_bytes_per_sec(1e6)).data_queue_bytes, 131_072);
    }

    #[test]
    fn the_filters_match_the_coordinators_port_both_ways_and_short_datagrams() {
        let f: Vec<String> = control_filters().iter().map(|f| f.join(" ")).collect();
        assert!(
            f.contains(&"protocol ip prio 1 u32 match ip protocol 6 0xff match ip sport 7070 0xffff".to_string()),
            "{f:?}"
        );
        assert!(
            f.contains(&"protocol ip prio 1 u32 match ip protocol 6 0xff match ip dport 7070 0xffff".to_string()),
            "{f:?}"
        );
        // Total length & 0xff00 == 0: the datagram is at most 255 bytes.
        assert!(f.contains(&"protocol ip prio 2 u32 match u16 0 0xff00 at 2".to_string()), "{f:?}");
        assert_eq!(f.len(), 4);
    }

    /// A rate as `tc class show` prints it after `key` (`5Mbit`, `28500Kbit`, `1.5Gbit`), in
    /// bits per second.
    fn shown_rate(line: &str, key: &str) -> f64 {
        let words: Vec<&str> = line.split_whitespace().collect();
        let w = words[words.iter().position(|w| *w == key).unwrap() + 1];
        let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let scale = match &w[digits.len()..] {
            "bit" => 1.0,
            "Kbit" => 1e3,
            "Mbit" => 1e6,
            "Gbit" => 1e9,
            u => panic!("unit {u} in {line}"),
        };
        digits.parse::<f64>().unwrap() * scale
    }

    /// Applies the plan to a veth link in a scratch namespace and reads the classes back from the
    /// kernel: the rates it shapes are the plan's. Skips, saying so, without root or `tc`.
    #[test]
    fn the_kernel_shapes_what_the_plan_says_at_add_and_at_change() {
        if let Err(why) = preflight() {
            eprintln!("skipping: {why}");
            return;
        }
        let ns = format!("{}-unit", Names::fresh().prefix);
        cmd("ip", &["netns", "add", &ns]).unwrap();
        let result = std::panic::catch_unwind(|| {
            cmd("ip", &["-n", &ns, "link", "add", "va", "type", "veth", "peer", "name", "vb"]).unwrap();
            cmd("ip", &["-n", &ns, "link", "set", "va", "up"]).unwrap();
            for (bps, verb) in [(1e8, "add"), (3e7, "change")] {
                shape(&ns, "va", Rate::from_bytes_per_sec(bps / 8.0), verb).unwrap();
                let text = cmd("ip", &["netns", "exec", &ns, "tc", "class", "show", "dev", "va"]).unwrap();
                let mut seen = 0;
                for c in link_plan(Rate::from_bytes_per_sec(bps / 8.0)).classes {
                    let line = text.lines().find(|l| l.starts_with(&format!("class htb {} ", c.classid))).unwrap();
                    let (rate, ceil) = (shown_rate(line, "rate"), shown_rate(line, "ceil"));
                    // `tc` prints rates rounded to a few digits.
                    let near = |a: f64, b: u64| (a - b as f64).abs() <= b as f64 * 0.005;
                    assert!(near(rate, c.rate_bps) && near(ceil, c.ceil_bps), "{verb}: {line} against {c:?}");
                    if let Some(p) = c.prio {
                        assert!(line.contains(&format!(" prio {p} ")), "{line}");
                    }
                    seen += 1;
                }
                assert_eq!(seen, 3);
            }
        });
        let _ = cmd("ip", &["netns", "del", &ns]);
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
    }
}
