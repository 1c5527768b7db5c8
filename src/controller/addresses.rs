//! Which endpoint addresses a peer may publish here (issue 31).
//!
//! An imported endpoint becomes a kube-proxy backend of a derived Service
//! in this cluster, so a peer's address is untrusted input: one that
//! points back into this cluster (a Service's ClusterIP, a Node's address,
//! a pod of its own, its apiserver) or at a host every cluster can reach
//! (a cloud metadata service) would let a peer redirect this cluster's own
//! traffic. An endpoint is refused, and the rest of its slice kept, when
//! an address of it is
//! - not a routable unicast IP of the slice's family ([`NOT_ROUTABLE`]):
//!   loopback, link-local (the `169.254.169.254` metadata address among
//!   them), unspecified, multicast or broadcast; or an IPv6 form that
//!   reaches an IPv4 address around every IPv4 check: IPv4-mapped
//!   (`::ffff:0:0/96`), IPv4-translated (`::ffff:0:0:0/96`),
//!   IPv4-compatible (`::/96`), NAT64 (`64:ff9b::/96`, `64:ff9b:1::/48`),
//!   6to4 (`2002::/16`) or Teredo (`2001::/32`);
//! - in a reserved IPv4 range ([`SPECIAL_PURPOSE`]): "this network"
//!   `0.0.0.0/8`, or `240.0.0.0/4` (reserved for future use);
//! - a cloud metadata or platform service not link-local
//!   ([`METADATA_ADDRESS`]): AWS's IPv6 IMDS `fd00:ec2::254`, Azure's
//!   WireServer `168.63.129.16`, Alibaba's `100.100.100.200`;
//! - inside one of this cluster's Service CIDRs ([`IN_SERVICE_CIDR`]);
//! - inside one of this cluster's pod CIDRs ([`IN_POD_CIDR`]);
//! - one of this cluster's Node addresses ([`NODE_ADDRESS`]);
//! - one of this cluster's apiserver endpoints ([`APISERVER_ADDRESS`]);
//! - outside the pod ranges recorded for that peer, when some are
//!   ([`OUTSIDE_PEER_RANGES`], `peer add --endpoint-cidr`).
//!
//! Documentation prefixes (`192.0.2.0/24`, `2001:db8::/32`…), shared
//! address space (`100.64.0.0/10`) and the private ranges are accepted:
//! they are ordinary unicast, and clusters do use them for pods (the
//! Kubernetes dual-stack docs' example pod range is `2001:db8:42::/56`).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::cidr::Cidr;

/// The address is not a routable unicast IP of the slice's family (or is
/// an IPv6 form that reaches an IPv4 address).
pub(super) const NOT_ROUTABLE: &str = "NotRoutable";
/// The address is in a reserved IPv4 range (`0.0.0.0/8`, `240.0.0.0/4`).
pub(super) const SPECIAL_PURPOSE: &str = "SpecialPurpose";
/// The address is a cloud metadata or platform service's.
pub(super) const METADATA_ADDRESS: &str = "MetadataAddress";
/// The address is inside one of this cluster's Service CIDRs.
pub(super) const IN_SERVICE_CIDR: &str = "InServiceCIDR";
/// The address is inside one of this cluster's pod CIDRs.
pub(super) const IN_POD_CIDR: &str = "InPodCIDR";
/// The address is one of this cluster's Node addresses.
pub(super) const NODE_ADDRESS: &str = "NodeAddress";
/// The address is one of this cluster's apiserver endpoints.
pub(super) const APISERVER_ADDRESS: &str = "APIServerAddress";
/// The address is outside the endpoint ranges recorded for the peer.
pub(super) const OUTSIDE_PEER_RANGES: &str = "OutsidePeerRanges";

/// Cloud metadata and platform services that are not link-local (the
/// link-local ones, `169.254.169.254` and the like, are [`NOT_ROUTABLE`]).
const METADATA_ADDRESSES: [IpAddr; 3] = [
    // AWS IMDS over IPv6 (Nitro).
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    // Azure WireServer.
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    // Alibaba Cloud metadata.
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
];

/// What this cluster's own addresses are, against which a peer's endpoint
/// addresses are checked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Screen<'a> {
    /// This cluster's Service CIDRs (its ServiceCIDR objects).
    pub service_cidrs: &'a [Cidr],
    /// This cluster's pod CIDRs (its Nodes' `spec.podCIDRs`).
    pub own_pod_cidrs: &'a [Cidr],
    /// This cluster's Node addresses (InternalIP and ExternalIP).
    pub node_addresses: &'a BTreeSet<IpAddr>,
    /// This cluster's apiserver endpoints (the `default/kubernetes`
    /// Service's EndpointSlices).
    pub apiserver_addresses: &'a BTreeSet<IpAddr>,
    /// The peer's pod ranges, when its Secret records some.
    pub peer_ranges: Option<&'a [Cidr]>,
}

impl Screen<'_> {
    /// `Ok` when a peer may publish `address` in a slice of `family`,
    /// else the reason it is refused.
    pub(super) fn check(&self, address: &str, family: &str) -> Result<(), &'static str> {
        let ip = routable(address, family).ok_or(NOT_ROUTABLE)?;
        if special_purpose(ip) {
            return Err(SPECIAL_PURPOSE);
        }
        if METADATA_ADDRESSES.contains(&ip) {
            return Err(METADATA_ADDRESS);
        }
        if self.service_cidrs.iter().any(|cidr| cidr.contains(ip)) {
            return Err(IN_SERVICE_CIDR);
        }
        if self.own_pod_cidrs.iter().any(|cidr| cidr.contains(ip)) {
            return Err(IN_POD_CIDR);
        }
        if self.node_addresses.contains(&ip) {
            return Err(NODE_ADDRESS);
        }
        if self.apiserver_addresses.contains(&ip) {
            return Err(APISERVER_ADDRESS);
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
/// to: not loopback, link-local, unspecified, multicast or broadcast, and
/// not an IPv6 form that reaches IPv4 ([`reaches_ipv4`]).
pub(super) fn routable(address: &str, family: &str) -> Option<IpAddr> {
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
                    || reaches_ipv4(v6))
        }
    };
    usable.then_some(ip)
}

/// Whether `v6` is one of the forms a host, a translator or a relay turns
/// into an IPv4 address: each would reach that address around every IPv4
/// check (the Service CIDRs, the Node addresses…).
fn reaches_ipv4(v6: Ipv6Addr) -> bool {
    let s = v6.segments();
    // IPv4-compatible ::a.b.c.d (::/96, deprecated but still mapped by
    // some stacks) and IPv4-mapped ::ffff:a.b.c.d.
    let compatible_or_mapped = s[..5] == [0; 5] && (s[5] == 0 || s[5] == 0xffff);
    // IPv4-translated ::ffff:0:a.b.c.d (SIIT).
    let translated = s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0;
    // NAT64: the well-known prefix 64:ff9b::/96, the local-use 64:ff9b:1::/48.
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || s[..3] == [0x64, 0xff9b, 1];
    // 6to4 2002::/16; Teredo 2001::/32 (2001:0::, not the documentation
    // prefix 2001:db8::).
    let tunnelled = s[0] == 0x2002 || (s[0] == 0x2001 && s[1] == 0);
    compatible_or_mapped || translated || nat64 || tunnelled
}

/// Whether `ip` is in a reserved IPv4 range a peer's pod cannot have:
/// `0.0.0.0/8` ("this network") and `240.0.0.0/4` (reserved). The
/// unspecified and broadcast addresses in them are [`NOT_ROUTABLE`] first.
fn special_purpose(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let first = v4.octets()[0];
            first == 0 || first >= 240
        }
        IpAddr::V6(_) => false,
    }
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
        let none = BTreeSet::new();
        let screen = Screen {
            service_cidrs: &service_cidrs,
            own_pod_cidrs: &[],
            node_addresses: &node_addresses,
            apiserver_addresses: &none,
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
            own_pod_cidrs: &[],
            node_addresses: &none,
            apiserver_addresses: &none,
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

    /// Security review M4: every address that reaches this cluster's own
    /// pods or apiserver, IPv4 through an IPv6 form, a reserved range or a
    /// cloud metadata service is refused with its reason; ordinary pod
    /// addresses (documentation prefixes included) are not.
    #[test]
    fn special_metadata_own_pod_and_apiserver_addresses_are_refused_each_with_its_reason() {
        let own_pod_cidrs = cidrs(&["10.100.0.0/16", "fd00:100::/56"]);
        let none = BTreeSet::new();
        let apiserver_addresses: BTreeSet<IpAddr> = [
            "203.0.113.10".parse().unwrap(),
            "2600:1f18::10".parse().unwrap(),
        ]
        .into();
        let screen = Screen {
            service_cidrs: &[],
            own_pod_cidrs: &own_pod_cidrs,
            node_addresses: &none,
            apiserver_addresses: &apiserver_addresses,
            peer_ranges: None,
        };
        let table: &[(&str, &str, Result<(), &str>)] = &[
            // IPv6 forms that reach IPv4.
            ("::10.96.0.1", "IPv6", Err(NOT_ROUTABLE)),
            ("::a00:1", "IPv6", Err(NOT_ROUTABLE)),
            ("::ffff:10.96.0.1", "IPv6", Err(NOT_ROUTABLE)),
            ("::ffff:0:10.96.0.1", "IPv6", Err(NOT_ROUTABLE)),
            ("64:ff9b::10.96.0.1", "IPv6", Err(NOT_ROUTABLE)),
            ("64:ff9b::a9fe:a9fe", "IPv6", Err(NOT_ROUTABLE)),
            ("64:ff9b:1::a00:1", "IPv6", Err(NOT_ROUTABLE)),
            ("64:ff9b:1:ffff::1", "IPv6", Err(NOT_ROUTABLE)),
            ("2002:a60:1::1", "IPv6", Err(NOT_ROUTABLE)),
            (
                "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                "IPv6",
                Err(NOT_ROUTABLE),
            ),
            // Reserved IPv4.
            ("0.0.0.1", "IPv4", Err(SPECIAL_PURPOSE)),
            ("0.255.255.255", "IPv4", Err(SPECIAL_PURPOSE)),
            ("240.0.0.1", "IPv4", Err(SPECIAL_PURPOSE)),
            ("255.255.255.254", "IPv4", Err(SPECIAL_PURPOSE)),
            ("0.0.0.0", "IPv4", Err(NOT_ROUTABLE)),
            ("255.255.255.255", "IPv4", Err(NOT_ROUTABLE)),
            // Cloud metadata.
            ("169.254.169.254", "IPv4", Err(NOT_ROUTABLE)),
            ("fd00:ec2::254", "IPv6", Err(METADATA_ADDRESS)),
            ("168.63.129.16", "IPv4", Err(METADATA_ADDRESS)),
            ("100.100.100.200", "IPv4", Err(METADATA_ADDRESS)),
            // This cluster's pods and apiserver.
            ("10.100.3.7", "IPv4", Err(IN_POD_CIDR)),
            ("fd00:100:0:3::7", "IPv6", Err(IN_POD_CIDR)),
            ("203.0.113.10", "IPv4", Err(APISERVER_ADDRESS)),
            ("2600:1f18::10", "IPv6", Err(APISERVER_ADDRESS)),
            // Ordinary pod addresses of a peer.
            ("10.244.1.5", "IPv4", Ok(())),
            ("fd00:10:244::5", "IPv6", Ok(())),
            ("100.64.0.5", "IPv4", Ok(())),
            ("203.0.113.11", "IPv4", Ok(())),
            ("2600:1f18::11", "IPv6", Ok(())),
            ("fd00:ec2::253", "IPv6", Ok(())),
            ("64:ff9b:2::1", "IPv6", Ok(())),
            ("2001:1::1", "IPv6", Ok(())),
            ("2003::1", "IPv6", Ok(())),
            // Documentation prefixes: ordinary unicast, used as pod ranges
            // (the Kubernetes dual-stack docs' example).
            ("2001:db8::1", "IPv6", Ok(())),
            ("2001:db8:42::5", "IPv6", Ok(())),
            ("192.0.2.1", "IPv4", Ok(())),
            ("239.255.255.255", "IPv4", Err(NOT_ROUTABLE)),
            ("223.255.255.254", "IPv4", Ok(())),
        ];
        for (address, family, expected) in table {
            assert_eq!(screen.check(address, family), *expected, "{address}");
        }
    }

    /// The screen's own-cluster inputs as the controller reads them: pod
    /// CIDRs from the Nodes' `spec.podCIDRs`, apiserver endpoints from the
    /// `default/kubernetes` slices; each change replans every service.
    #[test]
    fn this_clusters_pod_cidrs_and_apiserver_endpoints_are_read_from_its_nodes_and_slices() {
        use k8s_openapi::api::core::v1::{Node, NodeSpec};
        use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

        use crate::api::well_known::LABEL_KUBERNETES_SERVICE_NAME;
        use crate::controller::cluster::LocalData;
        use crate::controller::lean::Lean;
        use crate::watch::IndexResource;

        let mut local = LocalData::default();
        let node = |name: &str, cidrs: &[&str]| {
            Lean::new(Node {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..ObjectMeta::default()
                },
                spec: Some(NodeSpec {
                    pod_cidr: cidrs.first().map(|c| (*c).to_owned()),
                    pod_cidrs: Some(cidrs.iter().map(|c| (*c).to_owned()).collect()),
                    ..NodeSpec::default()
                }),
                status: None,
            })
        };
        local.apply(node("n1", &["10.100.1.0/24", "fd00:100:0:1::/64"]));
        local.apply(node("n2", &["10.100.2.0/24"]));
        assert!(local.take_all_touched());
        assert_eq!(
            local.pod_ranges,
            cidrs(&["10.100.1.0/24", "10.100.2.0/24", "fd00:100:0:1::/64"])
        );

        let apiserver = EndpointSlice {
            metadata: ObjectMeta {
                name: Some("kubernetes".into()),
                namespace: Some("default".into()),
                labels: Some(
                    [(
                        LABEL_KUBERNETES_SERVICE_NAME.to_owned(),
                        "kubernetes".to_owned(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            endpoints: vec![Endpoint {
                addresses: vec!["203.0.113.10".into()],
                ..Endpoint::default()
            }],
            ports: None,
        };
        local.kubernetes_slices.apply(apiserver);
        assert!(local.take_all_touched());
        assert_eq!(
            local.apiserver_addresses,
            BTreeSet::from(["203.0.113.10".parse().unwrap()])
        );
        assert!(!local.take_all_touched(), "unchanged: nothing to replan");

        let screen = Screen {
            service_cidrs: &local.service_ranges,
            own_pod_cidrs: &local.pod_ranges,
            node_addresses: &local.node_addresses,
            apiserver_addresses: &local.apiserver_addresses,
            peer_ranges: None,
        };
        assert_eq!(screen.check("10.100.2.9", "IPv4"), Err(IN_POD_CIDR));
        assert_eq!(screen.check("203.0.113.10", "IPv4"), Err(APISERVER_ADDRESS));
        assert_eq!(screen.check("10.244.1.5", "IPv4"), Ok(()));

        IndexResource::<Lean<Node>>::delete(&mut local, node("n2", &[]));
        assert!(local.take_all_touched());
        assert_eq!(
            local.pod_ranges,
            cidrs(&["10.100.1.0/24", "fd00:100:0:1::/64"])
        );
    }
}
