//! A wide-area testbed's network: datacenters, each a bridge behind a router namespace, and a
//! link of its own for every ordered pair of datacenters, shaped by `htb`.
//!
//! Layout with prefix `P` and subnet `S`: datacenter `D`'s router is namespace `P-rD` (`P-sw`
//! for datacenter 0, where the coordinator runs), holding bridge `br0` with the datacenter's
//! gateway address `10.203.S.(1+D)` (so `10.203.S.1`, the coordinator's address, is datacenter
//! 0's) and the router-side ends `bI` of its hosts' links. Host `I` has `10.203.S.(10+I)/32` on
//! `eth0`, a route to its gateway on the link and its default route through it; its link is
//! shaped as on the big switch (uplink on `eth0`, downlink on `bI`).
//! Datacenters `A < B` are joined by one veth pair, `wB` in `A`'s router and `wA` in `B`'s, with
//! addresses `10.204.S.(2k)` and `.(2k+1)` (`/31`, `k` the pair's index): `wB`'s egress is the
//! link from `A` to `B`, shaped at its rate, and `wA`'s the link back. Every router routes each
//! host of another datacenter, and the coordinator's address, over the direct link to that
//! datacenter, and forwards; so traffic between two datacenters crosses exactly the link the
//! topology names, and no detour exists at the IP layer.

use std::net::Ipv4Addr;

use coflow_core::Rate;

use crate::TestbedError;
use crate::net::{Names, change, shape};
use crate::state::StateFile;
use crate::topology::{Datacenters, Topology};

/// The index of the pair `a < b` among the unordered pairs of `n` datacenters.
fn pair(a: usize, b: usize, n: usize) -> usize {
    debug_assert!(a < b && b < n);
    // Pairs (0,1), (0,2), .., (0,n-1), (1,2), ..
    a * n - a * (a + 1) / 2 + (b - a - 1)
}

/// Datacenter `d`'s gateway address.
pub fn gateway(names: &Names, d: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 203, names.subnet, 1 + d as u8)
}

/// The address of datacenter `at`'s end of the link between `at` and `other`.
pub fn link_end(names: &Names, at: usize, other: usize, n: usize) -> Ipv4Addr {
    let (a, b) = (at.min(other), at.max(other));
    let k = pair(a, b, n) as u8;
    Ipv4Addr::new(10, 204, names.subnet, 2 * k + u8::from(at == b))
}

/// The device in datacenter `from`'s router that carries the link to datacenter `to`.
pub fn link_dev(to: usize) -> String {
    format!("w{to}")
}

/// Builds the network (see the module doc), recording each namespace before creating it.
pub fn up(topology: &Topology, dcs: &Datacenters, names: &Names, state: &StateFile) -> Result<(), TestbedError> {
    let wan = &dcs.wan;
    let n = wan.dcs() as usize;
    for d in 0..n {
        let r = names.router_ns(d);
        state.add_namespace(&r)?;
        change("ip", &["netns", "add", &r])?;
        change("ip", &["-n", &r, "link", "set", "lo", "up"])?;
        change("ip", &["netns", "exec", &r, "sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        change("ip", &["-n", &r, "link", "add", "br0", "type", "bridge"])?;
        change("ip", &["-n", &r, "addr", "add", &format!("{}/32", gateway(names, d)), "dev", "br0"])?;
        change("ip", &["-n", &r, "link", "set", "br0", "up"])?;
    }
    // The links between datacenters, each direction shaped at its distribution's mean.
    for a in 0..n {
        for b in a + 1..n {
            let (ra, rb) = (names.router_ns(a), names.router_ns(b));
            let (da, db) = (link_dev(b), link_dev(a));
            change("ip", &["-n", &ra, "link", "add", &da, "type", "veth", "peer", "name", &db, "netns", &rb])?;
            for (ns, dev, at, other) in [(&ra, &da, a, b), (&rb, &db, b, a)] {
                let addr = format!("{}/31", link_end(names, at, other, n));
                change("ip", &["-n", ns, "addr", "add", &addr, "dev", dev])?;
                change("ip", &["-n", ns, "link", "set", dev, "up"])?;
                if let Some(l) = wan.link(at as u32, other as u32) {
                    let rate = Rate::from_bytes_per_sec(wan.links()[l as usize].bandwidth.mean());
                    shape(ns, dev, rate, "add")?;
                }
            }
        }
    }
    // Every router reaches the coordinator through datacenter 0.
    for d in 1..n {
        let via = link_end(names, 0, d, n).to_string();
        let dst = format!("{}/32", gateway(names, 0));
        change("ip", &["-n", &names.router_ns(d), "route", "add", &dst, "via", &via, "dev", &link_dev(0)])?;
    }
    for (i, h) in topology.hosts.iter().enumerate() {
        let d = wan.dc_of(i as u32) as usize;
        let (ns, r, port) = (names.host_ns(i), names.router_ns(d), Names::switch_port(i));
        let ip = names.host_ip(i);
        state.add_namespace(&ns)?;
        change("ip", &["netns", "add", &ns])?;
        change("ip", &["-n", &r, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
        change("ip", &["-n", &r, "link", "set", &port, "master", "br0", "up"])?;
        change("ip", &["-n", &ns, "addr", "add", &format!("{ip}/32"), "dev", "eth0"])?;
        change("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
        change("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        let gw = gateway(names, d).to_string();
        change("ip", &["-n", &ns, "route", "add", &gw, "dev", "eth0", "scope", "link"])?;
        change("ip", &["-n", &ns, "route", "add", "default", "via", &gw, "dev", "eth0"])?;
        shape(&ns, "eth0", h.uplink, "add")?;
        shape(&r, &port, h.downlink, "add")?;
        // Its router delivers on the bridge; every other router sends it over the direct link.
        change("ip", &["-n", &r, "route", "add", &format!("{ip}/32"), "dev", "br0"])?;
        for other in (0..n).filter(|&o| o != d) {
            let via = link_end(names, d, other, n).to_string();
            let dst = format!("{ip}/32");
            change("ip", &["-n", &names.router_ns(other), "route", "add", &dst, "via", &via, "dev", &link_dev(d)])?;
        }
    }
    Ok(())
}

/// Sets the link from datacenter `from` to `to` to `rate` (its `htb` class at the sending end).
pub fn set_link_rate(names: &Names, from: usize, to: usize, rate: Rate) -> Result<(), TestbedError> {
    shape(&names.router_ns(from), &link_dev(to), rate, "change")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_and_link_ends_are_distinct() {
        let names = Names { prefix: "cfbtest".into(), subnet: 7, dc_of: vec![] };
        for n in 2..=9 {
            let mut seen = std::collections::BTreeSet::new();
            for a in 0..n {
                for b in 0..n {
                    if a != b {
                        assert!(seen.insert(link_end(&names, a, b, n)), "{a} {b} of {n}");
                    }
                }
            }
            // Every pair's two ends share a /31.
            assert_eq!(seen.len(), n * (n - 1));
            let ends: Vec<u8> = seen.iter().map(|ip| ip.octets()[3]).collect();
            assert_eq!(ends, (0..(n * (n - 1)) as u8).collect::<Vec<_>>());
        }
        assert_eq!(link_end(&names, 0, 1, 3), Ipv4Addr::new(10, 204, 7, 0));
        assert_eq!(link_end(&names, 1, 0, 3), Ipv4Addr::new(10, 204, 7, 1));
        assert_eq!(link_end(&names, 2, 1, 3), Ipv4Addr::new(10, 204, 7, 5));
        assert_eq!(gateway(&names, 2), Ipv4Addr::new(10, 203, 7, 3));
    }
}
