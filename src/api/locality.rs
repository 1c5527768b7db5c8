//! Which imports are local-first: the one reading of `trafficDistribution`
//! that the controller's EndpointSlice hints (the clusterset IP) and the DNS
//! server's headless answers share.
//!
//! The switch is the upstream field, not an annotation of ours: a Service's
//! `trafficDistribution` already means "prefer endpoints close to the
//! client" inside one cluster, the controller merges it into the
//! ServiceImport (KEP-1645, mcs-api v1beta1) and raises
//! `TrafficDistributionConflict` when exporters disagree, so every cluster
//! reads the same value. Across a clusterset, the closest endpoints are this
//! cluster's own.

/// How an import's traffic is spread over the clusterset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Locality {
    /// Over every exporting cluster's ready endpoints: no
    /// `trafficDistribution`, or a value this version does not know.
    #[default]
    Spread,
    /// This cluster's ready endpoints while it has one, else every
    /// cluster's; inside this cluster, the client's zone first
    /// (`PreferSameZone`, or its older spelling `PreferClose`).
    PreferSameZone,
    /// As [`Locality::PreferSameZone`], and the client's own node before its
    /// zone (`PreferSameNode`).
    PreferSameNode,
}

impl Locality {
    /// The locality a `trafficDistribution` value asks for. Values are
    /// case-sensitive, as in the Kubernetes API; an unknown one spreads, as
    /// kube-proxy treats a value it does not know.
    pub fn of(traffic_distribution: Option<&str>) -> Self {
        match traffic_distribution {
            Some("PreferSameZone" | "PreferClose") => Self::PreferSameZone,
            Some("PreferSameNode") => Self::PreferSameNode,
            _ => Self::Spread,
        }
    }

    /// Whether this cluster's endpoints come before the other clusters'.
    pub fn local_first(self) -> bool {
        self != Self::Spread
    }

    /// The name used in `/explain`, metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spread => "Spread",
            Self::PreferSameZone => "PreferSameZone",
            Self::PreferSameNode => "PreferSameNode",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Locality;

    #[test]
    fn the_upstream_values_and_their_alias() {
        assert_eq!(Locality::of(None), Locality::Spread);
        assert_eq!(Locality::of(Some("PreferClose")), Locality::PreferSameZone);
        assert_eq!(
            Locality::of(Some("PreferSameZone")),
            Locality::PreferSameZone
        );
        assert_eq!(
            Locality::of(Some("PreferSameNode")),
            Locality::PreferSameNode
        );
        // Case-sensitive, unknown values spread.
        assert_eq!(Locality::of(Some("preferclose")), Locality::Spread);
        assert_eq!(Locality::of(Some("")), Locality::Spread);
        assert_eq!(Locality::of(Some("PreferSameRegion")), Locality::Spread);
        assert!(!Locality::Spread.local_first());
        assert!(Locality::PreferSameNode.local_first());
    }
}
