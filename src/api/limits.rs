//! The limits the apiserver enforces on the objects DNS reads, checked again
//! here so that a manifest file is held to what `kubectl apply` would
//! accept: the ServiceImport CRD's `maxItems` (and the "one address per IP
//! family" its `spec.ips` documents), and the built-in validation of
//! `discovery.k8s.io/v1` EndpointSlices (list sizes, name and label
//! lengths). Both sources call these through the `from_api` projections in
//! [`crate::model`]; objects from the apiserver pass them already, except
//! where this is stricter than the CRD (one address per family).
//!
//! Enums and required fields are enforced by the types' deserialization;
//! address syntax, port and DNS-name rules by the projections.

use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::ServiceImport;

/// ServiceImport `spec.ips` and `spec.ipFamilies`: `maxItems: 2`.
pub const MAX_IP_FAMILIES: usize = 2;
/// EndpointSlice `endpoints`: at most 1000.
pub const MAX_SLICE_ENDPOINTS: usize = 1000;
/// EndpointSlice `endpoints[].addresses`: 1 to 100.
pub const MAX_ENDPOINT_ADDRESSES: usize = 100;
/// EndpointSlice `ports`: at most 100.
pub const MAX_SLICE_PORTS: usize = 100;
/// An object name (`metadata.name`, a DNS subdomain): at most 253 bytes.
pub const MAX_NAME_LEN: usize = 253;
/// A label value: at most 63 bytes.
pub const MAX_LABEL_VALUE_LEN: usize = 63;

/// True for an RFC 1123 label as Kubernetes checks it (`IsDNS1123Label`):
/// 1–63 characters of `[a-z0-9-]`, starting and ending alphanumeric.
///
/// Stricter than [`crate::model::is_dns_label`] (a DNS name's label), which accepts upper case
/// because DNS matching is case-insensitive; a cluster id goes into label
/// values and object names, where upper case is rejected.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| ok(c) || *c == b'-')
        && ok(&b[0])
        && ok(&b[b.len() - 1])
}

/// A limit an object breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Violation {
    /// JSON path of the field, e.g. `spec.ips`.
    pub field: String,
    /// The limit.
    pub message: String,
}

fn violation(field: impl Into<String>, message: impl Into<String>) -> Violation {
    Violation {
        field: field.into(),
        message: message.into(),
    }
}

fn at_most<T>(items: &[T], max: usize, field: &str) -> Result<(), Violation> {
    if items.len() > max {
        return Err(violation(
            field,
            format!("{} items, at most {max} allowed", items.len()),
        ));
    }
    Ok(())
}

/// `metadata`: name length and label value lengths.
fn metadata(meta: &ObjectMeta) -> Result<(), Violation> {
    if let Some(name) = &meta.name
        && name.len() > MAX_NAME_LEN
    {
        return Err(violation(
            "metadata.name",
            format!("{} bytes, at most {MAX_NAME_LEN} allowed", name.len()),
        ));
    }
    for (key, value) in meta.labels.iter().flatten() {
        if value.len() > MAX_LABEL_VALUE_LEN {
            return Err(violation(
                format!("metadata.labels[{key:?}]"),
                format!(
                    "{} bytes, at most {MAX_LABEL_VALUE_LEN} allowed in a label value",
                    value.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Checks a ServiceImport (either API version: the schemas are identical).
pub fn service_import(import: &ServiceImport) -> Result<(), Violation> {
    metadata(&import.metadata)?;
    let spec = &import.spec;
    at_most(&spec.ips, MAX_IP_FAMILIES, "spec.ips")?;
    at_most(&spec.ip_families, MAX_IP_FAMILIES, "spec.ipFamilies")?;
    // Unparseable addresses are for the projection to name.
    let families: Vec<bool> = spec
        .ips
        .iter()
        .filter_map(|ip| ip.trim().parse::<IpAddr>().ok())
        .map(|ip| ip.is_ipv4())
        .collect();
    if families.len() == 2 && families[0] == families[1] {
        return Err(violation(
            "spec.ips",
            "at most one address per IP family (one IPv4, one IPv6)",
        ));
    }
    Ok(())
}

/// Checks an EndpointSlice against the apiserver's validation of
/// `discovery.k8s.io/v1`.
pub fn endpoint_slice(slice: &EndpointSlice) -> Result<(), Violation> {
    metadata(&slice.metadata)?;
    at_most(&slice.endpoints, MAX_SLICE_ENDPOINTS, "endpoints")?;
    at_most(
        slice.ports.as_deref().unwrap_or_default(),
        MAX_SLICE_PORTS,
        "ports",
    )?;
    for (i, endpoint) in slice.endpoints.iter().enumerate() {
        let field = format!("endpoints[{i}].addresses");
        if endpoint.addresses.is_empty() {
            return Err(violation(field, "at least one address is required"));
        }
        at_most(&endpoint.addresses, MAX_ENDPOINT_ADDRESSES, &field)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_are_lower_case_alnum_and_dashes_inside() {
        for ok in ["a", "cluster-1", "0", &"a".repeat(63)] {
            assert!(is_dns1123_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "Cluster", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
    }

    fn import(ips: &[&str]) -> ServiceImport {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"type": "ClusterSetIP", "ports": [], "ips": ips},
        }))
        .unwrap()
    }

    #[test]
    fn service_import_ips_are_at_most_one_per_family() {
        assert_eq!(service_import(&import(&["10.0.0.1", "fd00::1"])), Ok(()));
        assert_eq!(service_import(&import(&["10.0.0.1"])), Ok(()));
        let error = service_import(&import(&["10.0.0.1", "10.0.0.2"])).unwrap_err();
        assert_eq!(error.field, "spec.ips");
        let error = service_import(&import(&["10.0.0.1", "fd00::1", "fd00::2"])).unwrap_err();
        assert_eq!(error.to_string(), "spec.ips: 3 items, at most 2 allowed");
    }

    fn slice(endpoints: usize, addresses: usize) -> EndpointSlice {
        let endpoint = serde_json::json!({
            "addresses": vec!["10.0.0.1"; addresses],
        });
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "labels": {"a": "b"}},
            "addressType": "IPv4",
            "endpoints": vec![endpoint; endpoints],
        }))
        .unwrap()
    }

    #[test]
    fn endpoint_slices_keep_the_apiserver_limits() {
        assert_eq!(endpoint_slice(&slice(1000, 100)), Ok(()));
        assert_eq!(
            endpoint_slice(&slice(1001, 1)).unwrap_err().field,
            "endpoints"
        );
        assert_eq!(
            endpoint_slice(&slice(1, 101)).unwrap_err().field,
            "endpoints[0].addresses"
        );
        assert_eq!(
            endpoint_slice(&slice(1, 0)).unwrap_err().to_string(),
            "endpoints[0].addresses: at least one address is required"
        );
        let mut long_label = slice(1, 1);
        long_label.metadata.labels = Some([("a".to_string(), "x".repeat(64))].into());
        assert_eq!(
            endpoint_slice(&long_label).unwrap_err().field,
            "metadata.labels[\"a\"]"
        );
    }
}
