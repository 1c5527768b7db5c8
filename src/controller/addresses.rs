//! Which endpoint addresses a peer may publish here (issue 31).
//!
//! An imported endpoint becomes a kube-proxy backend of a derived Service
//! in this cluster, so a peer's address is untrusted input: one that
//! points back into this cluster (a Service's ClusterIP, a Node's address)
//! would let a peer redirect this cluster's own traffic. An endpoint is
//! refused, and the rest of its slice kept, when an address of it is
//! - not a routable unicast IP of the slice's family ([`NOT_ROUTABLE`]);
//! - inside one of this cluster's Service CIDRs ([`IN_SERVICE_CIDR`]);
//! - one of this cluster's Node addresses ([`NODE_ADDRESS`]);
//! - outside the pod ranges recorded for that peer, when some are
//!   ([`OUTSIDE_PEER_RANGES`], `peer add --endpoint-cidr`).

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::cidr::Cidr;

/// The address is not a routable unicast IP of the slice's family.
pub const NOT_ROUTABLE: &str = "NotRoutable";
/// The address is inside one of this cluster's Service CIDRs.
pub const IN_SERVICE_CIDR: &str = "InServiceCIDR";
/// The address is one of this cluster's Node addresses.
pub const NODE_ADDRESS: &str = "NodeAddress";
/// The address is outside the endpoint ranges recorded for the peer.
pub const OUTSIDE_PEER_RANGES: &str = "OutsidePeerRanges";

/// What this cluster's own addresses are, against which a peer's endpoint
/// addresses are checked.
#[derive(Debug, Clone, Copy)]
pub struct Screen<'a> {
    /// This cluster's Service CIDRs (its ServiceCIDR objects).
    pub service_cidrs: &'a [Cidr],
    /// This cluster's Node addresses (InternalIP and ExternalIP).
    pub node_addresses: &'a BTreeSet<IpAddr>,
    /// The peer's pod ranges, when its Secret records some.
    pub peer_ranges: Option<&'a [Cidr]>,
}

impl Screen<'_> {
    /// `Ok` when a peer may publish `address` in a slice of `family`,
    /// else the reason it is refused.
    pub fn check(&self, address: &str, family: &str) -> Result<(), &'static str> {
        let ip = routable(address, family).ok_or(NOT_ROUTABLE)?;
        if self.service_cidrs.iter().any(|cidr| cidr.contains(ip)) {
            return Err(IN_SERVICE_CIDR);
        }
        if self.node_addresses.contains(&ip) {
            return Err(NODE_ADDRESS);
        }
        if let Some(ranges) = self.peer_ranges
            && !ranges.iter().any(|cidr| cidr.contains(ip))
        {
            return Err(OUTSIDE_PEER_RANGES);
        }
        Ok(())
    }
}

/// `address` as an IP when it is one of `family` that traffic can be sent
/// to: not loopback, link-local, unspecified, multicast or broadcast.
pub fn routable(address: &str, family: &str) -> Option<IpAddr> {
    let ip: IpAddr = address.parse().ok()?;
    let usable = match ip {
        IpAddr::V4(v4) => {
            family == "IPv4"
                && !(v4.is_loopback()
                    || v4.is_link_local()
                    || v4.is_unspecified()
                    || v4.is_multicast()
                    || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            family == "IPv6"
                && !(v6.is_loopback()
                    || v6.is_unicast_link_local()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    // An IPv4-mapped address reaches the IPv4 address it
                    // maps, around every IPv4 check.
                    || v6.to_ipv4_mapped().is_some())
        }
    };
    usable.then_some(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn an_address_pointing_back_into_this_cluster_is_refused_by_name() {
        let service_cidrs = cidrs(&["10.96.0.0/12", "fd00:10:96::/108"]);
        let node_addresses: BTreeSet<IpAddr> =
            ["172.18.0.2".parse().unwrap(), "fd00:18::2".parse().unwrap()].into();
        let screen = Screen {
            service_cidrs: &service_cidrs,
            node_addresses: &node_addresses,
            peer_ranges: None,
        };
        assert_eq!(screen.check("10.244.1.5", "IPv4"), Ok(()));
        assert_eq!(screen.check("172.18.0.3", "IPv4"), Ok(()));
        assert_eq!(screen.check("10.96.0.1", "IPv4"), Err(IN_SERVICE_CIDR));
        assert_eq!(screen.check("fd00:10:96::1", "IPv6"), Err(IN_SERVICE_CIDR));
        assert_eq!(screen.check("172.18.0.2", "IPv4"), Err(NODE_ADDRESS));
        assert_eq!(screen.check("fd00:18::2", "IPv6"), Err(NODE_ADDRESS));
        for bad in [
            "127.0.0.1",
            "169.254.1.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "nonsense",
        ] {
            assert_eq!(screen.check(bad, "IPv4"), Err(NOT_ROUTABLE), "{bad}");
        }
        for bad in ["::1", "fe80::1", "::", "ff02::1", "::ffff:10.96.0.1"] {
            assert_eq!(screen.check(bad, "IPv6"), Err(NOT_ROUTABLE), "{bad}");
        }
        assert_eq!(
            screen.check("fd00::1", "IPv4"),
            Err(NOT_ROUTABLE),
            "wrong family"
        );
        assert_eq!(
            screen.check("10.244.1.5", "IPv6"),
            Err(NOT_ROUTABLE),
            "wrong family"
        );
    }

    #[test]
    fn a_peer_with_recorded_ranges_may_publish_only_inside_them() {
        let ranges = cidrs(&["10.1.0.0/16", "fd00:1::/64"]);
        let none = BTreeSet::new();
        let screen = Screen {
            service_cidrs: &[],
            node_addresses: &none,
            peer_ranges: Some(&ranges),
        };
        assert_eq!(screen.check("10.1.200.3", "IPv4"), Ok(()));
        assert_eq!(screen.check("fd00:1::9", "IPv6"), Ok(()));
        assert_eq!(screen.check("10.2.0.1", "IPv4"), Err(OUTSIDE_PEER_RANGES));
        assert_eq!(screen.check("fd00:2::9", "IPv6"), Err(OUTSIDE_PEER_RANGES));
        // Recorded but empty: nothing is inside.
        let screen = Screen {
            peer_ranges: Some(&[]),
            ..screen
        };
        assert_eq!(screen.check("10.1.0.1", "IPv4"), Err(OUTSIDE_PEER_RANGES));
    }
}
