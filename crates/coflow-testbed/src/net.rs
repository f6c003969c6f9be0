//! Namespaces, the bridge, veth links and `htb` shaping, through the `ip` and `tc` commands.
//!
//! Layout of a testbed with prefix `P`: namespace `P-sw` holds the switch (bridge `br0`,
//! address `10.203.S.1`, where the coordinator listens) and the switch-side ends `b0`..`bN` of
//! the hosts' links; namespace `P-hI` holds host `I`'s end `eth0` (`10.203.S.(10+I)`) and its
//! loopback. Host `I`'s uplink is shaped on `eth0`'s egress, its downlink on `bI`'s egress
//! (towards the host). Nothing is created outside these namespaces, so deleting them removes
//! every link.

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

/// `htb` at `rate` on `dev`'s egress in `ns`: one class that all traffic falls into. The quantum
/// is set so that htb does not warn at high rates.
pub(crate) fn shape(ns: &str, dev: &str, rate: Rate, verb: &str) -> Result<(), TestbedError> {
    let bits = format!("{}bit", rate.bits_per_sec().round() as u64);
    if verb == "add" {
        change(
            "ip",
            &["netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
        )?;
    }
    change(
        "ip",
        &[
            "netns", "exec", ns, "tc", "class", verb, "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate",
            &bits, "ceil", &bits, "quantum", "60000",
        ],
    )?;
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
