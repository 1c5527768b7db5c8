//! IP prefixes: this cluster's Service CIDRs (its ServiceCIDR objects)
//! and the endpoint ranges recorded for a peer (`peer add
//! --endpoint-cidr`).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IP prefix, as ServiceCIDRs and `--endpoint-cidr` write it
/// (`10.96.0.0/12`, `fd00:10:96::/108`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a CIDR does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a CIDR (an address, a slash and a prefix length, like 10.1.0.0/16)")]
pub struct CidrError(String);

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, CidrError> {
        let error = || CidrError(text.to_owned());
        let (address, prefix) = text.split_once('/').ok_or_else(error)?;
        let network: IpAddr = address.parse().map_err(|_| error())?;
        let prefix: u8 = prefix.parse().map_err(|_| error())?;
        // Host bits set (10.1.2.3/16) still name the network they are in.
        Self::new(network, prefix).ok_or_else(error)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl Cidr {
    /// The prefix of length `prefix` that `ip` is in; `None` when the
    /// length is past the family's width.
    pub fn new(ip: IpAddr, prefix: u8) -> Option<Self> {
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        (prefix <= bits).then(|| Self {
            network: mask(ip, prefix),
            prefix,
        })
    }

    /// Its prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }

    /// Its network address.
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// How many addresses it holds (at most `u64::MAX`: an IPv6 /64 and
    /// wider saturate).
    pub fn size(&self) -> u64 {
        let bits = match self.network {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        } - u32::from(self.prefix);
        1u64.checked_shl(bits).unwrap_or(u64::MAX)
    }

    /// Whether `ip` is inside this prefix (never across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.network.is_ipv4() && mask(ip, self.prefix) == self.network
    }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix))
            };
            IpAddr::V4((u32::from(v4) & bits).into())
        }
        IpAddr::V6(v6) => {
            let bits = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix))
            };
            IpAddr::V6((u128::from(v6) & bits).into())
        }
    }
}

/// Parses CIDRs written one per comma (a Secret's annotation), every one
/// or none.
pub fn parse_list(text: &str) -> Result<Vec<Cidr>, CidrError> {
    text.split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(str::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn cidrs_parse_normalise_and_contain_only_their_family() {
        let v4: Cidr = "10.96.7.1/12".parse().unwrap();
        assert_eq!(v4.to_string(), "10.96.0.0/12");
        assert!(v4.contains("10.111.255.255".parse().unwrap()));
        assert!(!v4.contains("10.112.0.0".parse().unwrap()));
        assert!(!v4.contains("::ffff:10.96.0.1".parse().unwrap()));
        let v6: Cidr = "fd00:10:96::/108".parse().unwrap();
        assert!(v6.contains("fd00:10:96::f:ffff".parse().unwrap()));
        assert!(!v6.contains("fd00:10:96::10:0".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        let host: Cidr = "192.0.2.1/32".parse().unwrap();
        assert!(host.contains("192.0.2.1".parse().unwrap()));
        assert!(!host.contains("192.0.2.2".parse().unwrap()));
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "fd00::/129",
            "x/8",
            "10.0.0.0/-1",
            "",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        assert_eq!(
            parse_list(" 10.1.0.0/16, fd00:1::/64 ,").unwrap(),
            cidrs(&["10.1.0.0/16", "fd00:1::/64"])
        );
        assert!(parse_list("10.1.0.0/16,nonsense").is_err());
    }
}
