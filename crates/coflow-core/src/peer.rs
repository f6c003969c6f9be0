//! Peers on the network as the services' listeners count them: several addresses of one host
//! count as one group, so that a host cannot take more than its share of a listener's places by
//! using many of its addresses.

use std::net::IpAddr;

/// Where a peer's connections are counted: its IPv4 address, or its IPv6 /64 (a host on IPv6
/// may hold a whole /64, so its addresses count as one); an IPv4-mapped IPv6 address counts as
/// its IPv4 address. Many hosts may share one /64 too (a SLAAC LAN, a pod subnet), so a listener
/// that must let every host in (the HTTP listener) caps each address besides its group.
pub fn peer_group(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_peers_count_by_their_64_and_mapped_ones_as_ipv4() {
        let group = |a: &str| peer_group(a.parse().unwrap()).to_string();
        assert_eq!(group("2001:db8:1:2:aaaa::1"), group("2001:db8:1:2:bbbb::9"));
        assert_ne!(group("2001:db8:1:2::1"), group("2001:db8:1:3::1"));
        assert_eq!(group("::ffff:10.0.0.7"), "10.0.0.7");
        assert_eq!(group("10.0.0.7"), "10.0.0.7");
        assert_ne!(group("127.0.0.1"), group("127.0.0.2"));
    }
}
