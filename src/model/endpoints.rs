//! The endpoints of one imported slice, packed into one heap block
//! (issue 35).
//!
//! A DNS replica holds every endpoint of every imported slice (~10^5 at
//! 10,000 services): the headless ones answer with them, and `/explain`
//! lists all of them. As a vector of structs an endpoint took 40 bytes
//! (an optional boxed hostname, a hostname block of its own when set, and
//! its addresses inline) and the vector a block per slice. Packed, an IPv4
//! endpoint without a hostname takes 6 bytes, and a slice's endpoints one
//! block whatever their number.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::Endpoint;

/// Set in an endpoint's first byte when its addresses are IPv6.
const V6: u8 = 0x80;
/// The address count in an endpoint's first byte (1 to 100, as the API
/// validates: [`crate::api::limits::MAX_ENDPOINT_ADDRESSES`]).
const COUNT: u8 = 0x7f;

/// The endpoints of one slice, in order, in one block. Each endpoint is:
/// one byte with its address count and family ([`V6`]), one byte with its
/// hostname's length (0 for none; a hostname is a DNS label, at most 63
/// bytes), the hostname, then its addresses (4 or 16 bytes each).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Endpoints {
    bytes: Box<[u8]>,
    len: u32,
}

impl Endpoints {
    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The endpoints in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { rest: &self.bytes }
    }

    /// Bytes of its heap block.
    pub fn heap_bytes(&self) -> usize {
        self.bytes.len()
    }
}

impl fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Builds [`Endpoints`] one endpoint at a time.
#[derive(Default)]
pub struct Packer {
    bytes: Vec<u8>,
    len: u32,
}

impl Packer {
    /// A packer with room for `endpoints` IPv4 endpoints without hostname.
    pub fn with_capacity(endpoints: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(endpoints * 6),
            len: 0,
        }
    }

    /// Adds an endpoint. `hostname` is a DNS label (at most 63 bytes) and
    /// `addresses` 1 to 100 addresses of one family, as the projection
    /// validated them; an endpoint outside those bounds is a bug of the
    /// caller and is left out rather than stored unreadable.
    pub fn push(&mut self, hostname: Option<&str>, addresses: &[IpAddr]) {
        let hostname = hostname.unwrap_or_default().as_bytes();
        let v6 = matches!(addresses.first(), Some(IpAddr::V6(_)));
        let one_family = addresses.iter().all(|ip| ip.is_ipv6() == v6);
        let (Ok(count), Ok(hostname_len)) =
            (u8::try_from(addresses.len()), u8::try_from(hostname.len()))
        else {
            debug_assert!(false, "endpoint out of bounds");
            return;
        };
        if count == 0 || count > COUNT || hostname_len > 63 || !one_family {
            debug_assert!(false, "endpoint out of bounds");
            return;
        }
        self.bytes.push(count | if v6 { V6 } else { 0 });
        self.bytes.push(hostname_len);
        self.bytes.extend_from_slice(hostname);
        for ip in addresses {
            match ip {
                IpAddr::V4(ip) => self.bytes.extend_from_slice(&ip.octets()),
                IpAddr::V6(ip) => self.bytes.extend_from_slice(&ip.octets()),
            }
        }
        self.len += 1;
    }

    /// The packed endpoints, in a block of their exact size.
    pub fn finish(self) -> Endpoints {
        Endpoints {
            bytes: self.bytes.into_boxed_slice(),
            len: self.len,
        }
    }
}

impl FromIterator<Endpoint> for Endpoints {
    fn from_iter<I: IntoIterator<Item = Endpoint>>(endpoints: I) -> Self {
        let mut packer = Packer::default();
        for endpoint in endpoints {
            packer.push(endpoint.hostname.as_deref(), &endpoint.addresses);
        }
        packer.finish()
    }
}

impl From<Vec<Endpoint>> for Endpoints {
    fn from(endpoints: Vec<Endpoint>) -> Self {
        endpoints.into_iter().collect()
    }
}

/// One packed endpoint, read in place.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EndpointView<'a> {
    hostname: &'a [u8],
    addresses: &'a [u8],
    v6: bool,
}

impl<'a> EndpointView<'a> {
    /// Its hostname, when set.
    pub fn hostname(&self) -> Option<&'a str> {
        // Written from a `&str` by `Packer::push`: always UTF-8.
        match self.hostname {
            [] => None,
            bytes => std::str::from_utf8(bytes).ok(),
        }
    }

    /// Its addresses, in order.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + Clone + 'a {
        let width = if self.v6 { 16 } else { 4 };
        let v6 = self.v6;
        self.addresses.chunks_exact(width).map(move |bytes| {
            if v6 {
                let octets: [u8; 16] = bytes.try_into().unwrap_or_default();
                IpAddr::V6(Ipv6Addr::from(octets))
            } else {
                let octets: [u8; 4] = bytes.try_into().unwrap_or_default();
                IpAddr::V4(Ipv4Addr::from(octets))
            }
        })
    }

    /// Its first address (every stored endpoint has one).
    pub fn first(&self) -> Option<IpAddr> {
        self.addresses().next()
    }

    /// The endpoint as an owned value.
    pub fn to_endpoint(&self) -> Endpoint {
        Endpoint {
            hostname: self.hostname().map(Into::into),
            addresses: self.addresses().collect(),
        }
    }
}

impl fmt::Debug for EndpointView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_endpoint(), f)
    }
}

/// The endpoints of an [`Endpoints`], in order.
pub struct Iter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Iter<'a> {
    type Item = EndpointView<'a>;

    fn next(&mut self) -> Option<EndpointView<'a>> {
        let (&head, rest) = self.rest.split_first()?;
        let (&hostname_len, rest) = rest.split_first()?;
        let v6 = head & V6 != 0;
        let width = if v6 { 16 } else { 4 };
        let addresses_len = usize::from(head & COUNT) * width;
        let hostname_len = usize::from(hostname_len);
        if rest.len() < hostname_len + addresses_len {
            // Only `Packer` writes these bytes; a short tail cannot occur.
            self.rest = &[];
            return None;
        }
        let (hostname, rest) = rest.split_at(hostname_len);
        let (addresses, rest) = rest.split_at(addresses_len);
        self.rest = rest;
        Some(EndpointView {
            hostname,
            addresses,
            v6,
        })
    }
}

impl<'a> IntoIterator for &'a Endpoints {
    type Item = EndpointView<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(hostname: Option<&str>, addresses: &[&str]) -> Endpoint {
        Endpoint {
            hostname: hostname.map(Into::into),
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn endpoints_read_back_in_order_as_they_were_packed() {
        let given = vec![
            endpoint(None, &["10.0.0.1"]),
            endpoint(Some("db-0"), &["10.0.0.2", "10.0.0.3"]),
            endpoint(Some(&"a".repeat(63)), &["10.0.0.4"]),
        ];
        let packed: Endpoints = given.clone().into();
        assert_eq!(packed.len(), 3);
        assert_eq!(
            packed.iter().map(|e| e.to_endpoint()).collect::<Vec<_>>(),
            given
        );
        assert_eq!(packed.iter().nth(1).unwrap().hostname(), Some("db-0"));
        assert_eq!(packed.iter().next().unwrap().hostname(), None);
    }

    #[test]
    fn ipv6_endpoints_read_back_whole() {
        let given = vec![
            endpoint(Some("web-1"), &["fd00::1", "fd00::2"]),
            endpoint(None, &["2001:db8::ff"]),
        ];
        let packed: Endpoints = given.clone().into();
        assert_eq!(
            packed.iter().map(|e| e.to_endpoint()).collect::<Vec<_>>(),
            given
        );
        assert_eq!(
            packed.iter().next().unwrap().first(),
            Some("fd00::1".parse().unwrap())
        );
    }

    #[test]
    fn an_ipv4_endpoint_without_hostname_takes_six_bytes() {
        let packed: Endpoints = (1..=10)
            .map(|i| endpoint(None, &[&format!("10.0.0.{i}")]))
            .collect();
        assert_eq!(packed.len(), 10);
        assert_eq!(packed.heap_bytes(), 60);
    }

    #[test]
    fn the_largest_endpoint_the_api_allows_fits() {
        let addresses: Vec<String> = (0..100).map(|i| format!("fd00::{i:x}")).collect();
        let addresses: Vec<&str> = addresses.iter().map(String::as_str).collect();
        let given = vec![endpoint(Some(&"h".repeat(63)), &addresses)];
        let packed: Endpoints = given.clone().into();
        assert_eq!(
            packed.iter().map(|e| e.to_endpoint()).collect::<Vec<_>>(),
            given
        );
    }

    #[test]
    fn no_endpoints_hold_no_heap_block() {
        let packed = Endpoints::default();
        assert!(packed.is_empty());
        assert_eq!(packed.iter().count(), 0);
        assert_eq!(packed.heap_bytes(), 0);
    }
}
