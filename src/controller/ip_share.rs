//! How many clusterset IPs one peer alone may make this cluster allocate
//! (issue 31): every ClusterSetIP import gets a derived Service, whose
//! ClusterIP comes out of this cluster's Service CIDR. A compromised peer
//! exporting thousands of services would exhaust it, and this cluster's
//! own Services would get no IP. Imports exported only by one peer count
//! against that peer's share (`--peer-clusterset-ip-share`, a percentage
//! of the primary family's Service CIDR addresses); past it, further
//! clusterset IPs for that peer alone are refused, whenever a derived
//! Service would be created, however old its import. An import another
//! cluster exports too counts against no one: the peer cannot make it
//! exist. What a peer holds is counted from what holds the addresses: the
//! derived Services of ours (`reconcile::single_peer_vips`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::IpAddr;

use super::cluster::LocalData;

/// Reason of an import refused for the share (`peer_objects_rejected_total`,
/// its Event).
pub(super) const SHARE_EXCEEDED: &str = "ClusterSetIPShareExceeded";

/// The share, and what each peer uses of it: counted from this cluster's
/// imports when first asked, then kept current as one planning round
/// admits new imports.
#[derive(Debug)]
pub(super) struct IpShare {
    percent: u8,
    used: RefCell<Option<BTreeMap<String, usize>>>,
}

impl IpShare {
    /// A share of `percent` % (100 disables the limit's purpose, not the
    /// count).
    pub(super) fn new(percent: u8) -> Self {
        Self {
            percent,
            used: RefCell::new(None),
        }
    }

    /// How many clusterset IPs one peer alone may hold here; unlimited
    /// while no Service CIDR is known (nothing could be allocated then).
    pub(super) fn limit(&self, local: &LocalData) -> u64 {
        let Some(primary) = local.ip_families.first() else {
            return u64::MAX;
        };
        let addresses: u64 = local
            .service_ranges
            .iter()
            .filter(|cidr| family_of(cidr.network()) == primary)
            .map(|cidr| cidr.size())
            .fold(0, u64::saturating_add);
        if addresses == 0 {
            return u64::MAX;
        }
        (addresses / 100).saturating_mul(u64::from(self.percent))
            + addresses % 100 * u64::from(self.percent) / 100
    }

    /// Whether `peer` may make this cluster allocate one more clusterset
    /// IP; if so, it is counted. What each peer holds is counted once per
    /// planning round, when first asked, by `held` (the derived Services
    /// of ours whose service only that peer exports), then kept current as
    /// the round admits more.
    pub(super) fn admit(
        &self,
        peer: &str,
        local: &LocalData,
        held: impl FnOnce() -> BTreeMap<String, usize>,
    ) -> bool {
        let limit = self.limit(local);
        let mut used = self.used.borrow_mut();
        let used = used.get_or_insert_with(held);
        let count = used.entry(peer.to_owned()).or_default();
        if (*count as u64) < limit {
            *count += 1;
            true
        } else {
            false
        }
    }
}

fn family_of(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(cidrs: &[&str], families: &[&str]) -> LocalData {
        let mut local = LocalData::default();
        local.service_ranges = cidrs.iter().map(|c| c.parse().unwrap()).collect();
        local.ip_families = families.iter().map(|f| (*f).to_owned()).collect();
        local
    }

    #[test]
    fn the_share_is_a_percentage_of_the_primary_familys_addresses() {
        let share = IpShare::new(25);
        assert_eq!(share.limit(&local(&["10.0.0.0/24"], &["IPv4"])), 64);
        assert_eq!(share.limit(&local(&["10.96.0.0/12"], &["IPv4"])), 262_144);
        // Dual-stack, IPv6 primary: its /112 counts, not the IPv4 /24.
        let dual = local(&["10.0.0.0/24", "fd00::/112"], &["IPv6", "IPv4"]);
        assert_eq!(share.limit(&dual), 16_384);
        assert_eq!(
            share.limit(&local(&[], &[])),
            u64::MAX,
            "no Service CIDR known yet"
        );
        assert_eq!(
            IpShare::new(100).limit(&local(&["fd00::/64"], &["IPv6"])),
            u64::MAX
        );
    }

    #[test]
    fn a_peer_is_admitted_up_to_its_share_and_no_further() {
        let local = local(&["10.0.0.0/30"], &["IPv4"]);
        let share = IpShare::new(50);
        assert_eq!(share.limit(&local), 2);
        assert!(share.admit("b", &local, BTreeMap::new));
        assert!(share.admit("b", &local, BTreeMap::new));
        assert!(!share.admit("b", &local, BTreeMap::new), "past the share");
        assert!(
            share.admit("c", &local, BTreeMap::new),
            "each peer has its own"
        );
    }
}
