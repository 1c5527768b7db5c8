//! Projections the index stores: only what DNS needs from a ServiceImport or
//! an EndpointSlice, already validated and normalised (lower-case names,
//! parsed addresses). Conversions from the API objects live here so that the
//! index and the zone never see a raw Kubernetes object.

use std::net::IpAddr;
use std::sync::Arc;

use crate::api::ServiceRef;

use crate::api::ServiceImportType;
use crate::api::locality::Locality;

mod endpoints;

pub use endpoints::{EndpointView, Endpoints, Packer};

/// Transport protocol of a service port, as used in SRV owner names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortProtocol {
    /// `_tcp`
    Tcp,
    /// `_udp`
    Udp,
    /// `_sctp`
    Sctp,
}

impl PortProtocol {
    /// Parses a Kubernetes protocol string; an absent protocol means TCP, as in
    /// the core Service API.
    pub fn parse(protocol: Option<&str>) -> Result<Self, ModelError> {
        match protocol.map(str::to_ascii_uppercase).as_deref() {
            None | Some("") | Some("TCP") => Ok(Self::Tcp),
            Some("UDP") => Ok(Self::Udp),
            Some("SCTP") => Ok(Self::Sctp),
            Some(other) => Err(ModelError::Protocol(other.to_string())),
        }
    }

    /// The SRV label for this protocol, with its leading underscore.
    pub fn srv_label(self) -> &'static str {
        match self {
            Self::Tcp => "_tcp",
            Self::Udp => "_udp",
            Self::Sctp => "_sctp",
        }
    }
}

/// One port of a service or of an endpoint slice.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Port {
    /// Port name, lower-case; `None` for an unnamed port (no `_name._proto` SRV).
    pub name: Option<String>,
    /// Protocol.
    pub protocol: PortProtocol,
    /// Port number.
    pub port: u16,
}

impl Port {
    /// Validates and builds a port from API fields.
    pub fn from_api(
        name: Option<&str>,
        protocol: Option<&str>,
        port: i64,
    ) -> Result<Self, ModelError> {
        let port = u16::try_from(port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or(ModelError::PortNumber(port))?;
        let name = match name {
            None | Some("") => None,
            Some(n) if is_dns_label(n) => Some(n.to_ascii_lowercase()),
            Some(n) => return Err(ModelError::PortName(n.to_string())),
        };
        Ok(Self {
            name,
            protocol: PortProtocol::parse(protocol)?,
            port,
        })
    }
}

/// What DNS needs from a ServiceImport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedService {
    /// Which service this is.
    pub service: ServiceRef,
    /// `spec.type`: ClusterSetIP or Headless.
    pub import_type: ServiceImportType,
    /// The clusterset IPs (`spec.ips`, in order) of a ClusterSetIP import,
    /// possibly none while the controller has not assigned one yet; always
    /// empty for a headless import, which answers with its endpoints.
    pub ips: Vec<IpAddr>,
    /// `spec.ports`.
    pub ports: Vec<Port>,
    /// `spec.trafficDistribution` read as a [`Locality`]: whether a headless
    /// import's service name answers with this cluster's endpoints first.
    pub locality: Locality,
}

/// Address family of an EndpointSlice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressFamily {
    /// `IPv4`
    V4,
    /// `IPv6`
    V6,
}

/// One endpoint of an imported slice that can answer: ready
/// (`conditions.ready` true or unset), or, for the opt-in serving fallback,
/// terminating but still serving (see [`SliceEndpoints::serving`]). The
/// owned form, for building and reading one endpoint; a slice holds its
/// endpoints packed ([`Endpoints`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The endpoint's `hostname`, lower-case, when set and a valid DNS label.
    pub hostname: Option<Box<str>>,
    /// Parsed addresses, one family, 1 to 100.
    pub addresses: Vec<IpAddr>,
}

/// What DNS needs from one imported EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceEndpoints {
    /// The ServiceImport this slice belongs to (`multicluster.kubernetes.io/service-name`).
    pub service: ServiceRef,
    /// The cluster id of the slice (`multicluster.kubernetes.io/source-cluster`),
    /// lower-case; shared, as the index interns it.
    pub cluster: Arc<str>,
    /// Slice ports (used for headless SRV; the import's ports are the
    /// fallback); shared, as the index interns them: the slices of a
    /// service nearly always list the same ports.
    pub ports: Arc<[Port]>,
    /// The ready endpoints.
    pub endpoints: Endpoints,
    /// The endpoints that are not ready but terminating and still serving
    /// (`conditions.serving` true or unset, `conditions.terminating` true:
    /// those kube-proxy falls back to when a Service has no ready endpoint,
    /// KEP-1669). They answer only with `serve_terminating` on, and the
    /// index keeps them only then (see [`SliceEndpoints::drop_serving`]);
    /// other not-ready endpoints are never kept.
    pub serving: Endpoints,
    /// How many not-ready endpoints the slice had, the serving ones
    /// included (for `/explain`).
    pub not_ready: u32,
    /// How many of the not-ready endpoints are terminating and still
    /// serving, kept or not (for `/explain`).
    pub serving_count: u32,
}

impl SliceEndpoints {
    /// Forgets the serving endpoints (the fallback is off: they would
    /// answer nothing), keeping their count.
    pub fn drop_serving(&mut self) {
        if !self.serving.is_empty() {
            self.serving = Endpoints::default();
        }
    }
}

/// What the DNS server knows of its own cluster's id: the KEP-2149
/// `ClusterProperty` `cluster.clusterset.k8s.io`, which local-first answers
/// need to tell this cluster's endpoints from the others'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnCluster {
    /// The id, lower-case (as the `source-cluster` labels are compared).
    Known(String),
    /// Not known; why, for `/explain` and the log. Local-first imports
    /// answer from every cluster meanwhile.
    Unknown(String),
}

impl OwnCluster {
    /// The state of a source that has not read the property yet.
    pub fn not_read() -> Self {
        Self::Unknown(format!(
            "the ClusterProperty {} has not been read yet",
            crate::api::well_known::CLUSTER_ID_PROPERTY
        ))
    }

    /// The id a `ClusterProperty` `cluster.clusterset.k8s.io` holds, checked
    /// as a cluster id (a DNS subdomain, as the `source-cluster` label of
    /// imported slices is checked); an invalid value is unknown, with why.
    pub fn from_property(value: &str) -> Self {
        let value = value.trim();
        if is_dns_subdomain(value) {
            Self::Known(value.to_ascii_lowercase())
        } else {
            Self::Unknown(format!(
                "the ClusterProperty {} holds {value:?}, which is not a valid cluster id \
                 (a DNS subdomain of at most 253 characters)",
                crate::api::well_known::CLUSTER_ID_PROPERTY
            ))
        }
    }

    /// The id, when known.
    pub fn id(&self) -> Option<&str> {
        match self {
            Self::Known(id) => Some(id),
            Self::Unknown(_) => None,
        }
    }
}

/// Why an object could not be projected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    /// A port number outside 1..=65535.
    #[error("port number {0} is outside 1..65535")]
    PortNumber(i64),
    /// A port name that is not an RFC 1123 label.
    #[error("port name {0:?} is not a DNS label")]
    PortName(String),
    /// A protocol other than TCP, UDP or SCTP.
    #[error("protocol {0:?} is not TCP, UDP or SCTP")]
    Protocol(String),
    /// An unparseable IP address.
    #[error("{0:?} is not an IP address")]
    Address(String),
    /// A required label is missing.
    #[error("missing label {0}")]
    MissingLabel(&'static str),
    /// A name that cannot be used in DNS.
    #[error("{what} {value:?} is not a valid DNS name")]
    Name {
        /// Which field.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// A limit of the CRD or of the apiserver's validation.
    #[error("{0}")]
    Limit(String),
    /// A field with a value outside its enum.
    #[error("{field}: unsupported value {value:?}")]
    Unsupported {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: String,
    },
}

/// True for an RFC 1123 label: 1–63 of `[a-z0-9-]`, not starting or ending with `-`.
/// Upper case is accepted because DNS matching is case-insensitive.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// True for an RFC 1123 subdomain made of [`is_dns_label`] labels (a cluster id
/// may be `<name>.<registry>`).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The per-endpoint host label of an endpoint without a `hostname`: its address
/// with `.` or `:` replaced by `-`, made a valid label (`fd00::` → `fd00--0`).
pub fn dashed_address(ip: &IpAddr) -> String {
    let mut s: String = ip
        .to_string()
        .chars()
        .map(|c| if c == '.' || c == ':' { '-' } else { c })
        .collect();
    if s.ends_with('-') {
        s.push('0');
    }
    if s.starts_with('-') {
        s.insert(0, '0');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dashed_addresses_are_valid_labels() {
        let cases = [
            ("10.1.2.3", "10-1-2-3"),
            ("fd00::1", "fd00--1"),
            ("fd00::", "fd00--0"),
            ("::1", "0--1"),
        ];
        for (ip, want) in cases {
            let got = dashed_address(&ip.parse().unwrap());
            assert_eq!(got, want, "{ip}");
            assert!(is_dns_label(&got), "{got}");
        }
    }

    #[test]
    fn protocol_defaults_to_tcp_and_rejects_unknown() {
        assert_eq!(PortProtocol::parse(None), Ok(PortProtocol::Tcp));
        assert_eq!(PortProtocol::parse(Some("udp")), Ok(PortProtocol::Udp));
        assert!(PortProtocol::parse(Some("QUIC")).is_err());
    }

    #[test]
    fn ports_are_validated() {
        assert!(Port::from_api(Some("http"), None, 80).is_ok());
        assert!(Port::from_api(Some("http"), None, 0).is_err());
        assert!(Port::from_api(Some("http"), None, 70000).is_err());
        assert!(Port::from_api(Some("bad_name"), None, 80).is_err());
        assert_eq!(
            Port::from_api(Some("HTTP"), None, 80)
                .unwrap()
                .name
                .as_deref(),
            Some("http")
        );
    }

    #[test]
    fn labels_and_subdomains() {
        assert!(is_dns_label("cluster-a"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("east.registry1"));
        assert!(!is_dns_subdomain("east..x"));
    }
}

/// A projection failure, with the path of the offending field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {error}")]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.ips[1]`.
    pub field: String,
    /// What is wrong with it.
    pub error: ModelError,
}

impl FieldError {
    fn limit(violation: crate::api::limits::Violation) -> Self {
        Self {
            field: violation.field,
            error: ModelError::Limit(violation.message),
        }
    }
}

fn at(field: impl Into<String>) -> impl FnOnce(ModelError) -> FieldError {
    let field = field.into();
    move |error| FieldError { field, error }
}

impl ImportedService {
    /// Projects a ServiceImport (either API version; the schemas are identical).
    pub fn from_api(import: &crate::api::ServiceImport) -> Result<Self, FieldError> {
        crate::api::limits::service_import(import).map_err(FieldError::limit)?;
        let namespace = import.metadata.namespace.as_deref().unwrap_or("default");
        let name = import.metadata.name.as_deref().unwrap_or_default();
        if !is_dns_label(name) {
            return Err(at("metadata.name")(ModelError::Name {
                what: "service name",
                value: name.into(),
            }));
        }
        if !is_dns_label(namespace) {
            return Err(at("metadata.namespace")(ModelError::Name {
                what: "namespace",
                value: namespace.into(),
            }));
        }
        let spec = &import.spec;
        let ports = spec
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Port::from_api(p.name.as_deref(), p.protocol.as_deref(), p.port.into())
                    .map_err(at(format!("spec.ports[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ips = match spec.type_ {
            ServiceImportType::Headless => Vec::new(),
            ServiceImportType::ClusterSetIp => spec
                .ips
                .iter()
                .enumerate()
                .map(|(i, ip)| {
                    ip.trim()
                        .parse()
                        .map_err(|_| at(format!("spec.ips[{i}]"))(ModelError::Address(ip.clone())))
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        // Collected through `Result`, the vectors grew from a capacity of
        // four: the index keeps them for as long as the import lives.
        Ok(Self {
            service: ServiceRef::new(namespace, name),
            import_type: spec.type_,
            ips: tight(ips),
            ports: tight(ports),
            locality: Locality::of(spec.traffic_distribution.as_deref()),
        })
    }
}

/// `items` without spare capacity.
fn tight<T>(mut items: Vec<T>) -> Vec<T> {
    items.shrink_to_fit();
    items
}

/// Labels and fields of an EndpointSlice that make it an imported MCS slice.
impl SliceEndpoints {
    /// Projects an imported EndpointSlice. `Ok(None)` for slices that are not
    /// MCS slices (no `multicluster.kubernetes.io/service-name` label) or that
    /// carry FQDN addresses, which have no place in DNS answers.
    pub fn from_api(
        slice: &k8s_openapi::api::discovery::v1::EndpointSlice,
    ) -> Result<Option<Self>, FieldError> {
        use crate::api::well_known::{LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER};
        let labels = slice.metadata.labels.as_ref();
        let Some(service) = labels.and_then(|l| l.get(LABEL_SERVICE_NAME)) else {
            return Ok(None);
        };
        crate::api::limits::endpoint_slice(slice).map_err(FieldError::limit)?;
        let namespace = slice.metadata.namespace.as_deref().unwrap_or("default");
        let label_field = |key: &str| format!("metadata.labels[{key:?}]");
        if !is_dns_label(service) {
            return Err(at(label_field(LABEL_SERVICE_NAME))(ModelError::Name {
                what: "service name",
                value: service.clone(),
            }));
        }
        let cluster = labels
            .and_then(|l| l.get(LABEL_SOURCE_CLUSTER))
            .ok_or_else(|| {
                at(label_field(LABEL_SOURCE_CLUSTER))(ModelError::MissingLabel(
                    LABEL_SOURCE_CLUSTER,
                ))
            })?;
        if !is_dns_subdomain(cluster) {
            return Err(at(label_field(LABEL_SOURCE_CLUSTER))(ModelError::Name {
                what: "cluster id",
                value: cluster.clone(),
            }));
        }
        let family = match slice.address_type.as_str() {
            "IPv4" => AddressFamily::V4,
            "IPv6" => AddressFamily::V6,
            "FQDN" => return Ok(None),
            other => {
                return Err(at("addressType")(ModelError::Unsupported {
                    field: "addressType",
                    value: other.into(),
                }));
            }
        };
        let ports = slice
            .ports
            .iter()
            .flatten()
            .enumerate()
            // A port without a number means "all ports": nothing to put in SRV.
            .filter_map(|(i, p)| p.port.map(|n| (i, p, n)))
            .map(|(i, p, n)| {
                Port::from_api(p.name.as_deref(), p.protocol.as_deref(), n.into())
                    .map_err(at(format!("ports[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut endpoints = Packer::with_capacity(slice.endpoints.len());
        let mut serving = Packer::default();
        let mut serving_count = 0;
        let mut not_ready = 0;
        for (i, e) in slice.endpoints.iter().enumerate() {
            let mut addresses = Vec::with_capacity(e.addresses.len());
            for (j, a) in e.addresses.iter().enumerate() {
                let ip: IpAddr = a.parse().map_err(|_| {
                    at(format!("endpoints[{i}].addresses[{j}]"))(ModelError::Address(a.clone()))
                })?;
                let matches = matches!(
                    (family, ip),
                    (AddressFamily::V4, IpAddr::V4(_)) | (AddressFamily::V6, IpAddr::V6(_))
                );
                if !matches {
                    return Err(at(format!("endpoints[{i}].addresses[{j}]"))(
                        ModelError::Unsupported {
                            field: "address family",
                            value: a.clone(),
                        },
                    ));
                }
                addresses.push(ip);
            }
            let hostname = match e.hostname.as_deref() {
                None | Some("") => None,
                Some(h) if is_dns_label(h) => Some(h.to_ascii_lowercase()),
                Some(h) => {
                    return Err(at(format!("endpoints[{i}].hostname"))(ModelError::Name {
                        what: "hostname",
                        value: h.into(),
                    }));
                }
            };
            let conditions = e.conditions.as_ref();
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            // As kube-proxy reads them: serving unset means true,
            // terminating unset means false.
            let terminating_but_serving = conditions
                .is_some_and(|c| c.serving.unwrap_or(true) && c.terminating.unwrap_or(false));
            // A not-ready endpoint is in no answer (spec §2.4) unless the
            // serving fallback takes it: keep nothing of the others.
            if ready {
                endpoints.push(hostname.as_deref(), &addresses);
            } else {
                not_ready += 1;
                if terminating_but_serving {
                    serving.push(hostname.as_deref(), &addresses);
                    serving_count += 1;
                }
            }
        }
        let (endpoints, serving) = (endpoints.finish(), serving.finish());
        Ok(Some(Self {
            service: ServiceRef::new(namespace, service),
            cluster: cluster.to_ascii_lowercase().into(),
            ports: ports.into(),
            endpoints,
            serving,
            not_ready,
            serving_count,
        }))
    }
}
