//! How a query name reads: the one parser the zone lookup and `/explain`
//! share, so that the two can never disagree about what a name is.
//!
//! Names arrive as lower-case wire labels, leftmost first, without the root
//! label. [`QueryName::parse`] splits off the zone origin and classifies the
//! rest by shape only; whether the service, port or endpoint exists is the
//! zone's business. The shapes are those of the MCS DNS specification:
//!
//! | labels in front of the origin | reading |
//! |---|---|
//! | (none) | [`QueryName::Apex`] |
//! | `dns-version` | [`QueryName::SchemaVersion`] |
//! | `dns`, `ns.dns` | [`QueryName::NameserverParent`], [`QueryName::Nameserver`] |
//! | `svc` | [`QueryName::Svc`] |
//! | `<ns>.svc` | [`QueryName::Namespace`] |
//! | `<svc>.<ns>.svc` | [`QueryName::Service`] with [`Below::Nothing`] |
//! | `_<port>._<proto>.<svc>.<ns>.svc` | [`Below::NamedPort`] |
//! | `_<proto>.<svc>.<ns>.svc` | [`Below::Protocol`] |
//! | `<labels>.<svc>.<ns>.svc` | [`Below::Hosts`]: `<clusterid>` or `<hostname>.<clusterid>` (a cluster id may have dots) |
//!
//! Services and the records below them are keyed by label sequences in wire
//! form ([`LabelKey`]), never by dotted strings: a label with a dot in it
//! (`a\.b`) is a different name from `a.b`, and stays one.

use std::borrow::Borrow;

use crate::api::ServiceRef;

/// Longest name in wire bytes, root included (RFC 1035 §3.1).
const MAX_NAME_LEN: usize = 255;

/// What a query name is, by its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryName<'a> {
    /// Not at or below the zone origin.
    OutsideZone,
    /// The origin itself (SOA, NS).
    Apex,
    /// `dns-version.<zone>`.
    SchemaVersion,
    /// `dns.<zone>`: the parent of the name server's name.
    NameserverParent,
    /// `ns.dns.<zone>`: the name server named by NS and SOA.
    Nameserver,
    /// `svc.<zone>`.
    Svc,
    /// `<ns>.svc.<zone>`.
    Namespace {
        /// The namespace label.
        namespace: &'a [u8],
    },
    /// A name at or below `<svc>.<ns>.svc.<zone>`.
    Service {
        /// The service label.
        service: &'a [u8],
        /// The namespace label.
        namespace: &'a [u8],
        /// What is asked below the service name.
        below: Below<'a>,
    },
    /// Any other name in the zone: no name of this shape exists.
    Other,
}

/// The part of a service's name in front of `<svc>.<ns>.svc.<zone>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Below<'a> {
    /// The service name itself.
    Nothing,
    /// `_<port>._<proto>`: a named port's SRV name.
    NamedPort {
        /// The port name, without its underscore.
        port: &'a [u8],
        /// The protocol (`tcp`, `udp`, `sctp`), without its underscore.
        protocol: &'a [u8],
    },
    /// `_<proto>`: the empty non-terminal above named ports.
    Protocol {
        /// The protocol, without its underscore.
        protocol: &'a [u8],
    },
    /// Labels without underscores: `<clusterid>` (an empty non-terminal)
    /// or `<hostname>.<clusterid>` (a per-endpoint name). A cluster id may
    /// itself have several labels, so which one it is depends on the
    /// service's clusters: see [`Below::split_endpoint`].
    Hosts {
        /// The labels, leftmost first.
        labels: &'a [&'a [u8]],
    },
    /// Any other shape (underscores where none belong, too many labels).
    Other,
}

impl<'a> Below<'a> {
    /// Reads `labels` (leftmost first) as what stands in front of a service name.
    fn parse(labels: &'a [&'a [u8]]) -> Self {
        let underscored = |label: &[u8]| label.first() == Some(&b'_') && label.len() > 1;
        match labels {
            [] => Self::Nothing,
            [port, protocol] if underscored(port) && underscored(protocol) => Self::NamedPort {
                port: &port[1..],
                protocol: &protocol[1..],
            },
            [protocol] if underscored(protocol) => Self::Protocol {
                protocol: &protocol[1..],
            },
            labels if !labels.iter().any(|l| l.first() == Some(&b'_')) => Self::Hosts { labels },
            _ => Self::Other,
        }
    }

    /// For [`Below::Hosts`]: the per-endpoint reading `(hostname, cluster
    /// labels)` unless `is_cluster` says all labels together are a cluster
    /// id (then the name is that cluster's empty non-terminal, `None`).
    pub fn split_endpoint(
        labels: &'a [&'a [u8]],
        is_cluster: impl Fn(&[&[u8]]) -> bool,
    ) -> Option<(&'a [u8], &'a [&'a [u8]])> {
        match labels {
            [host, cluster @ ..] if !cluster.is_empty() && !is_cluster(labels) => {
                Some((host, cluster))
            }
            _ => None,
        }
    }
}

impl<'a> QueryName<'a> {
    /// Reads `labels` (lower-case, leftmost first, no root label) against
    /// the zone's `origin` labels (lower-case, leftmost first).
    pub fn parse<O: AsRef<[u8]>>(labels: &'a [&'a [u8]], origin: &[O]) -> Self {
        if labels.len() < origin.len() {
            return Self::OutsideZone;
        }
        let (relative, suffix) = labels.split_at(labels.len() - origin.len());
        if suffix.iter().zip(origin).any(|(a, b)| *a != b.as_ref()) {
            return Self::OutsideZone;
        }
        // Our names are made of labels without dots; a label with an
        // escaped dot in it (`a\.b`) names nothing we serve.
        if relative.iter().any(|label| label.contains(&b'.')) {
            return Self::Other;
        }
        match relative {
            [] => Self::Apex,
            [b"dns-version"] => Self::SchemaVersion,
            [b"dns"] => Self::NameserverParent,
            [b"ns", b"dns"] => Self::Nameserver,
            [b"svc"] => Self::Svc,
            [namespace, b"svc"] => Self::Namespace { namespace },
            [front @ .., service, namespace, b"svc"] => Self::Service {
                service,
                namespace,
                below: Below::parse(front),
            },
            _ => Self::Other,
        }
    }

    /// The service this name belongs to, if it is at or below a service name.
    pub fn service(&self) -> Option<ServiceRef> {
        match self {
            Self::Service {
                service, namespace, ..
            } => Some(ServiceRef::new(
                &String::from_utf8_lossy(namespace),
                &String::from_utf8_lossy(service),
            )),
            _ => None,
        }
    }
}

/// A sequence of labels in wire form: each label preceded by its length,
/// no root label. The key of services (`<svc>` then `<ns>`) and of the names
/// below a service (`_http._tcp`, `web-0.cluster-a`, the empty sequence for
/// the service name itself).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelKey(Box<[u8]>);

impl LabelKey {
    /// The key of `labels`; `None` if a label is empty or longer than 63
    /// bytes, or all of them are longer than a name can be.
    pub fn new<L: AsRef<[u8]>>(labels: &[L]) -> Option<Self> {
        let mut buf = [0u8; MAX_NAME_LEN];
        let len = encode_labels(&mut buf, labels)?;
        Some(Self(buf[..len].into()))
    }

    /// The key of the service `<svc>.<ns>`; `None` when either is not a
    /// label (the model validates both, but a reference may come from
    /// elsewhere).
    pub fn service(service: &ServiceRef) -> Option<Self> {
        Self::new(&[service.name.as_bytes(), service.namespace.as_bytes()])
    }

    /// The empty sequence: the service name itself, relative to itself.
    pub fn root() -> Self {
        Self(Box::default())
    }

    /// The labels, borrowed.
    pub fn as_labels(&self) -> Labels<'_> {
        Labels(&self.0)
    }

    /// The labels, leftmost first.
    pub fn labels(&self) -> impl Iterator<Item = &[u8]> {
        self.as_labels().labels()
    }

    /// The labels joined with dots (for logs, master files and reports).
    pub fn dotted(&self) -> String {
        self.as_labels().dotted()
    }

    /// The service of a service key.
    pub fn service_ref(&self) -> Option<ServiceRef> {
        let mut labels = self.labels();
        let (name, namespace) = (labels.next()?, labels.next()?);
        Some(ServiceRef::new(
            &String::from_utf8_lossy(namespace),
            &String::from_utf8_lossy(name),
        ))
    }
}

/// A [`LabelKey`]'s labels where they are stored (in a service's packed
/// names, [`super::packed_names`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Labels<'a>(&'a [u8]);

impl<'a> Labels<'a> {
    /// Labels in wire form, as [`encode_labels`] writes them.
    pub fn from_wire(wire: &'a [u8]) -> Self {
        Self(wire)
    }

    /// The wire form: each label preceded by its length, no root label.
    pub fn wire(self) -> &'a [u8] {
        self.0
    }

    /// The labels, leftmost first.
    pub fn labels(self) -> impl Iterator<Item = &'a [u8]> {
        let mut rest = self.0;
        std::iter::from_fn(move || {
            let (&len, tail) = rest.split_first()?;
            let (label, tail) = tail.split_at(usize::from(len));
            rest = tail;
            Some(label)
        })
    }

    /// The labels joined with dots (for logs, master files and reports).
    pub fn dotted(self) -> String {
        self.labels()
            .map(String::from_utf8_lossy)
            .collect::<Vec<_>>()
            .join(".")
    }
}

impl Borrow<[u8]> for LabelKey {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

/// Writes `labels` in wire form into `buf`; the length written, or `None`
/// when a label is empty or over 63 bytes or they do not fit.
pub fn encode_labels<L: AsRef<[u8]>>(buf: &mut [u8; MAX_NAME_LEN], labels: &[L]) -> Option<usize> {
    let mut at = 0;
    for label in labels {
        let label = label.as_ref();
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        *buf.get_mut(at)? = label.len() as u8;
        buf.get_mut(at + 1..at + 1 + label.len())?
            .copy_from_slice(label);
        at += 1 + label.len();
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: [&[u8]; 2] = [b"clusterset", b"local"];

    /// Renders a reading the way CoreDNS's `parse_test.go` prints its
    /// `recordRequest`: one line per field that is set.
    fn read(name: &str) -> String {
        let labels: Vec<&[u8]> = name
            .trim_end_matches('.')
            .split('.')
            .filter(|l| !l.is_empty())
            .map(str::as_bytes)
            .collect();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match QueryName::parse(&labels, &ORIGIN) {
            QueryName::OutsideZone => "outside".into(),
            QueryName::Apex => "apex".into(),
            QueryName::SchemaVersion => "dns-version".into(),
            QueryName::NameserverParent => "ns-parent".into(),
            QueryName::Nameserver => "ns".into(),
            QueryName::Svc => "svc".into(),
            QueryName::Namespace { namespace } => format!("namespace={}", text(namespace)),
            QueryName::Service {
                service,
                namespace,
                below,
            } => {
                let head = format!("service={}/{}", text(namespace), text(service));
                match below {
                    Below::Nothing => head,
                    Below::NamedPort { port, protocol } => {
                        format!("{head} port={} proto={}", text(port), text(protocol))
                    }
                    Below::Protocol { protocol } => format!("{head} proto={}", text(protocol)),
                    Below::Hosts { labels } => {
                        let labels: Vec<String> = labels.iter().map(|l| text(l)).collect();
                        format!("{head} hosts={}", labels.join("."))
                    }
                    Below::Other => format!("{head} other"),
                }
            }
            QueryName::Other => "other".into(),
        }
    }

    #[test]
    fn names_read_by_shape() {
        let cases = [
            ("clusterset.local.", "apex"),
            ("local.", "outside"),
            ("example.com.", "outside"),
            ("web.shop.svc.cluster.local.", "outside"),
            ("dns-version.clusterset.local.", "dns-version"),
            ("dns.clusterset.local.", "ns-parent"),
            ("ns.dns.clusterset.local.", "ns"),
            ("x.ns.dns.clusterset.local.", "other"),
            ("svc.clusterset.local.", "svc"),
            ("shop.svc.clusterset.local.", "namespace=shop"),
            ("web.shop.svc.clusterset.local.", "service=shop/web"),
            (
                "_http._tcp.web.shop.svc.clusterset.local.",
                "service=shop/web port=http proto=tcp",
            ),
            (
                "_tcp.web.shop.svc.clusterset.local.",
                "service=shop/web proto=tcp",
            ),
            (
                "cluster-a.db.shop.svc.clusterset.local.",
                "service=shop/db hosts=cluster-a",
            ),
            (
                "db-0.cluster-a.db.shop.svc.clusterset.local.",
                "service=shop/db hosts=db-0.cluster-a",
            ),
            (
                "db-0.east.registry1.db.shop.svc.clusterset.local.",
                "service=shop/db hosts=db-0.east.registry1",
            ),
            (
                "_http.web.shop.svc.clusterset.local.",
                "service=shop/web proto=http",
            ),
            (
                "_._tcp.web.shop.svc.clusterset.local.",
                "service=shop/web other",
            ),
            (
                "a._tcp.web.shop.svc.clusterset.local.",
                "service=shop/web other",
            ),
            (
                "_a._b._c.web.shop.svc.clusterset.local.",
                "service=shop/web other",
            ),
            ("web.shop.pod.clusterset.local.", "other"),
            ("foo.clusterset.local.", "other"),
        ];
        for (name, want) in cases {
            assert_eq!(read(name), want, "{name}");
        }
    }

    #[test]
    fn a_label_with_a_dot_in_it_is_no_name_of_ours() {
        let labels: [&[u8]; 5] = [b"web.shop", b"svc", b"x", b"clusterset", b"local"];
        assert_eq!(QueryName::parse(&labels, &ORIGIN), QueryName::Other);
    }

    #[test]
    fn a_single_label_or_a_whole_cluster_id_is_a_cluster() {
        let known = |labels: &[&[u8]]| labels == [&b"east"[..], b"registry1"];
        let one: [&[u8]; 1] = [b"cluster-a"];
        assert_eq!(Below::split_endpoint(&one, known), None);
        let cluster: [&[u8]; 2] = [b"east", b"registry1"];
        assert_eq!(Below::split_endpoint(&cluster, known), None);
        let endpoint: [&[u8]; 3] = [b"db-0", b"east", b"registry1"];
        assert_eq!(
            Below::split_endpoint(&endpoint, known),
            Some((&b"db-0"[..], &endpoint[1..]))
        );
    }

    #[test]
    fn label_keys_round_trip() {
        let key = LabelKey::new(&["_http", "_tcp"]).unwrap();
        assert_eq!(key.dotted(), "_http._tcp");
        assert_eq!(Borrow::<[u8]>::borrow(&key), b"\x05_http\x04_tcp");
        let service = LabelKey::service(&ServiceRef::new("shop", "web")).unwrap();
        assert_eq!(service.service_ref(), Some(ServiceRef::new("shop", "web")));
        assert!(LabelKey::new(&[""]).is_none());
        assert!(LabelKey::new(&["a".repeat(64)]).is_none());
        assert_eq!(LabelKey::new::<&str>(&[]).unwrap().dotted(), "");
    }
}
