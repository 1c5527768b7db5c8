//! What a Service the apiserver accepts looks like, field by field: the
//! rules every exported service is held to before it is merged
//! (docs/controller.md, "What a peer cannot make this cluster do").
//!
//! A peer's export is input from outside: its PublishedService never went
//! through core Service validation, and a peer that controls its own
//! apiserver can serve any Service it likes. What the merge takes from it
//! ends up in a ServiceImport and a derived Service written here, so a
//! field the apiserver would refuse freezes the shared service for every
//! honest exporter. Each rule below is the apiserver's own (`ValidateService`
//! in `pkg/apis/core/validation`), except [`MAX_PORTS`] and the reserved
//! metadata prefixes, which are ours.

use std::collections::{BTreeMap, BTreeSet};

use super::ServicePort;
use super::limits::{MAX_IP_FAMILIES, MAX_LABEL_VALUE_LEN, Violation, is_dns1123_label};

/// The most ports one exported service may have: each is a kube-proxy rule
/// on every node and SRV names in every DNS pod of every member.
pub const MAX_PORTS: usize = 100;

/// The most an export's `exportedLabels` and `exportedAnnotations` may
/// hold together, keys and values: they are copied onto the import in
/// every member and held by every member's controller, so a peer may not
/// make them large (the apiserver alone would allow 256 KiB of
/// annotations).
pub const MAX_EXPORTED_METADATA_BYTES: usize = 4 * 1024;

/// Label and annotation key prefixes an exporter may not put on an import:
/// Kubernetes reserves `kubernetes.io/` and `k8s.io/` for its own
/// components, and the others are read by kube-proxy, by MCS consumers or
/// by clusterset-dns itself (a `multicluster.kubernetes.io/derived-service`
/// annotation from a peer would point an import at any Service of its
/// namespace). Matched exactly, so the recommended `app.kubernetes.io/`
/// labels still travel; [`OWN_DOMAIN`] with its subdomains.
pub const RESERVED_PREFIXES: [&str; 6] = [
    "kubernetes.io",
    "k8s.io",
    "multicluster.kubernetes.io",
    "multicluster.x-k8s.io",
    "endpointslice.kubernetes.io",
    "service.kubernetes.io",
];

/// clusterset-dns's own key domain: reserved with every subdomain.
pub const OWN_DOMAIN: &str = "clusterset-dns.io";

/// The protocols a Service port may carry.
pub const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

/// The longest session affinity timeout the apiserver accepts (a day).
pub const MAX_AFFINITY_TIMEOUT_SECS: i32 = 86_400;

fn violation(field: impl Into<String>, message: impl Into<String>) -> Violation {
    Violation {
        field: field.into(),
        message: message.into(),
    }
}

/// Checks a Service's ports as the apiserver does, plus [`MAX_PORTS`]:
/// names are DNS labels, required when there is more than one port and
/// unique; protocol TCP, UDP or SCTP (unset means TCP); port 1–65535;
/// (protocol, port) unique; appProtocol a qualified name.
pub fn ports(ports: &[ServicePort]) -> Result<(), Violation> {
    if ports.len() > MAX_PORTS {
        return Err(violation(
            "ports",
            format!("{} ports, at most {MAX_PORTS} allowed", ports.len()),
        ));
    }
    let mut names = BTreeSet::new();
    let mut numbers = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let field = |name: &str| format!("ports[{i}].{name}");
        match port.name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => {
                if !is_dns1123_label(name) {
                    return Err(violation(field("name"), "must be a DNS label"));
                }
                if !names.insert(name) {
                    return Err(violation(field("name"), format!("{name:?} is used twice")));
                }
            }
            None if ports.len() > 1 => {
                return Err(violation(
                    field("name"),
                    "required when a service has more than one port",
                ));
            }
            None => {}
        }
        let protocol = port.protocol.as_deref().unwrap_or("TCP");
        if !PROTOCOLS.contains(&protocol) {
            return Err(violation(
                field("protocol"),
                format!("{protocol:?} is not TCP, UDP or SCTP"),
            ));
        }
        if !(1..=65535).contains(&port.port) {
            return Err(violation(
                field("port"),
                format!("{} is not within 1-65535", port.port),
            ));
        }
        if !numbers.insert((protocol, port.port)) {
            return Err(violation(
                field("port"),
                format!("{protocol}/{} is used twice", port.port),
            ));
        }
        if let Some(app) = &port.app_protocol
            && !is_qualified_name(app)
        {
            return Err(violation(
                field("appProtocol"),
                "must be a qualified name (an optional DNS subdomain prefix and '/', then a name)",
            ));
        }
    }
    Ok(())
}

/// `value` of `field`, when it is one of `allowed`.
fn one_of(field: &str, value: &str, allowed: &[&str]) -> Result<(), Violation> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(violation(
            field,
            format!("{value:?} is not one of {}", allowed.join(", ")),
        ))
    }
}

/// The Service `type`s that can be exported (ExternalName cannot; the
/// caller says so in its own words).
pub fn service_type(type_: Option<&str>) -> Result<(), Violation> {
    match type_ {
        None => Ok(()),
        Some(type_) => one_of("type", type_, &["ClusterIP", "NodePort", "LoadBalancer"]),
    }
}

/// `sessionAffinity` and, with `ClientIP`, its timeout (1 s to a day).
pub fn session_affinity(affinity: &str, timeout: Option<i32>) -> Result<(), Violation> {
    one_of("sessionAffinity", affinity, &["None", "ClientIP"])?;
    if let Some(timeout) = timeout
        && !(1..=MAX_AFFINITY_TIMEOUT_SECS).contains(&timeout)
    {
        return Err(violation(
            "sessionAffinityConfig.clientIP.timeoutSeconds",
            format!("{timeout} is not within 1-{MAX_AFFINITY_TIMEOUT_SECS}"),
        ));
    }
    Ok(())
}

/// `internalTrafficPolicy`.
pub fn internal_traffic_policy(policy: &str) -> Result<(), Violation> {
    one_of("internalTrafficPolicy", policy, &["Cluster", "Local"])
}

/// `trafficDistribution`, when set.
pub fn traffic_distribution(distribution: Option<&str>) -> Result<(), Violation> {
    match distribution {
        None => Ok(()),
        Some(value) => one_of(
            "trafficDistribution",
            value,
            &["PreferClose", "PreferSameZone", "PreferSameNode"],
        ),
    }
}

/// `ipFamilies`: IPv4 or IPv6, each at most once, at most two.
pub fn ip_families(families: &[String]) -> Result<(), Violation> {
    if families.len() > MAX_IP_FAMILIES {
        return Err(violation(
            "ipFamilies",
            format!(
                "{} items, at most {MAX_IP_FAMILIES} allowed",
                families.len()
            ),
        ));
    }
    for (i, family) in families.iter().enumerate() {
        one_of(&format!("ipFamilies[{i}]"), family, &["IPv4", "IPv6"])?;
        if families[..i].contains(family) {
            return Err(violation(
                format!("ipFamilies[{i}]"),
                format!("{family} is listed twice"),
            ));
        }
    }
    Ok(())
}

/// An export's `exportedLabels` and `exportedAnnotations`, which are put on
/// the ServiceImport of every member: keys are qualified names outside the
/// [`RESERVED_PREFIXES`], label values valid label values, both at most
/// [`MAX_EXPORTED_METADATA_BYTES`] together.
pub fn exported_metadata(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<(), Violation> {
    for (field, map) in [
        ("exportedLabels", labels),
        ("exportedAnnotations", annotations),
    ] {
        for key in map.keys() {
            if !is_qualified_name(key) {
                return Err(violation(
                    format!("{field}[{key:?}]"),
                    "the key is not a qualified name",
                ));
            }
            if is_reserved(key) {
                return Err(violation(
                    format!("{field}[{key:?}]"),
                    "the key's prefix is reserved",
                ));
            }
        }
    }
    for (key, value) in labels {
        if !is_label_value(value) {
            return Err(violation(
                format!("exportedLabels[{key:?}]"),
                "the value is not a label value (at most 63 characters of [A-Za-z0-9-_.], alphanumeric at each end)",
            ));
        }
    }
    let bytes: usize = labels
        .iter()
        .chain(annotations)
        .map(|(k, v)| k.len() + v.len())
        .sum();
    if bytes > MAX_EXPORTED_METADATA_BYTES {
        return Err(violation(
            "exportedAnnotations",
            format!(
                "labels and annotations hold {bytes} bytes, at most {MAX_EXPORTED_METADATA_BYTES} allowed"
            ),
        ));
    }
    Ok(())
}

/// The fields of a Service an export carries into the merge, borrowed:
/// what [`fields`] checks, for an export and for the merged import alike.
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    /// The ports.
    pub ports: &'a [ServicePort],
    /// `None` or `ClientIP`.
    pub session_affinity: &'a str,
    /// The `ClientIP` timeout, when set.
    pub affinity_timeout: Option<i32>,
    /// `Cluster` or `Local`.
    pub internal_traffic_policy: &'a str,
    /// `trafficDistribution`, when set.
    pub traffic_distribution: Option<&'a str>,
    /// The IP families.
    pub ip_families: &'a [String],
    /// The exported labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The exported annotations.
    pub annotations: &'a BTreeMap<String, String>,
}

/// Checks every field of `service` by the rules above: the first that
/// breaks one, if any.
pub fn fields(service: &Fields<'_>) -> Result<(), Violation> {
    ports(service.ports)?;
    session_affinity(service.session_affinity, service.affinity_timeout)?;
    internal_traffic_policy(service.internal_traffic_policy)?;
    traffic_distribution(service.traffic_distribution)?;
    ip_families(service.ip_families)?;
    exported_metadata(service.labels, service.annotations)
}

/// Whether `key`'s prefix is one of the [`RESERVED_PREFIXES`], or
/// [`OWN_DOMAIN`] or a subdomain of it.
pub fn is_reserved(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    RESERVED_PREFIXES.contains(&prefix)
        || prefix == OWN_DOMAIN
        || prefix
            .strip_suffix(OWN_DOMAIN)
            .is_some_and(|sub| sub.ends_with('.'))
}

/// A qualified name (`IsQualifiedName`): an optional DNS subdomain prefix
/// and `/`, then 1–63 characters of `[A-Za-z0-9-_.]`, alphanumeric at each
/// end.
pub fn is_qualified_name(s: &str) -> bool {
    let name = match s.split_once('/') {
        Some((prefix, name)) => {
            if !is_dns1123_subdomain(prefix) {
                return false;
            }
            name
        }
        None => s,
    };
    !name.is_empty() && is_label_value(name)
}

/// A label value (`IsValidLabelValue`): empty, or at most 63 characters of
/// `[A-Za-z0-9-_.]`, alphanumeric at each end.
pub fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() {
        return true;
    }
    b.len() <= MAX_LABEL_VALUE_LEN
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// A DNS subdomain (`IsDNS1123Subdomain`): at most 253 characters of
/// dot-separated lower-case labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests;
