//! Who is on the other end of a connection: the peer address ([`PeerAddr`]), the client a
//! request or connection counts against ([`Client`]: an IPv4 address or an IPv6 /64, shared
//! by the rate limit and the connection caps), the network it belongs to ([`Network`]: the
//! RSA pool's fair share weighs a client by its network's use too) and the proxies whose
//! forwarding headers are believed ([`TrustedProxies`]). A leaf: it imports nothing from the
//! crate.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

/// Whom a request or a connection is counted against: the rate limit and the connection
/// caps share this one type, so they cannot disagree on who a client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    /// An IPv4 client (IPv4-mapped IPv6 addresses included).
    V4(Ipv4Addr),
    /// An IPv6 client's /64: the first 64 bits of its address.
    V6Net(u64),
    /// No connection information.
    Unknown,
}

impl Client {
    /// The client `ip` belongs to: itself for IPv4 (or IPv4-mapped IPv6), its /64 for IPv6.
    pub fn from_ip(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Self::V4(v4),
            IpAddr::V6(v6) => Self::V6Net((u128::from(v6) >> 64) as u64),
        }
    }

    /// The network this client belongs to ([`Network`]): its IPv4 /16 or IPv6 /32.
    pub fn network(self) -> Network {
        match self {
            Self::V4(ip) => Network::V4((u32::from(ip) >> 16) as u16),
            Self::V6Net(net) => Network::V6((net >> 32) as u32),
            Self::Unknown => Network::Unknown,
        }
    }
}

/// The network a [`Client`] belongs to, for the RSA pool's fair share: its IPv4 /16 or IPv6
/// /32, a provider's block. Whoever holds many addresses usually holds them in a few such
/// blocks, so the pool (`crate::serve::rsapool`) weighs a client by its network's recent use
/// as well as its own: fresh addresses of a few networks weigh what those networks used.
/// (Smaller networks were tried: with a /24 at full weight and a /16 at a sixteenth, fresh
/// addresses spread over 8 /16s took a served client's place again; attack review of
/// issue 40, round 3.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Network {
    /// An IPv4 /16: the address's first 16 bits.
    V4(u16),
    /// An IPv6 /32: the address's first 32 bits.
    V6(u32),
    /// No connection information.
    Unknown,
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V4(ip) => write!(f, "{ip}"),
            Self::V6Net(net) => write!(f, "{}/64", Ipv6Addr::from(u128::from(*net) << 64)),
            Self::Unknown => f.write_str("unknown"),
        }
    }
}

/// The proxies whose `X-Forwarded-For` entries the rate limiter believes
/// (`--trusted-proxies`): CIDRs or single addresses, IPv4 and IPv6. Empty (the default): no
/// forwarding header is believed, every client is its peer address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses a comma-separated list of CIDRs (`10.0.0.0/8`, `fd00::/8`) and single addresses
    /// (`192.0.2.1`); empty items are skipped. The error names the bad item.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let mut nets = Vec::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let net = if item.contains('/') {
                item.parse::<IpNet>().map(|n| n.trunc()).map_err(|_| {
                    format!(
                        "{item:?}: not a CIDR (an IPv4 or IPv6 address, '/', a prefix length of at most 32 or 128)"
                    )
                })?
            } else {
                let ip = item
                    .parse::<IpAddr>()
                    .map_err(|_| format!("{item:?}: not an IP address or CIDR"))?;
                IpNet::from(ip)
            };
            nets.push(net);
        }
        Ok(Self(nets))
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `ip` is a trusted proxy; an IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, how a
    /// dual-stack socket reports an IPv4 peer) counts as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let canonical = ip.to_canonical();
        self.0
            .iter()
            .any(|net| net.contains(&canonical) || net.contains(&ip))
    }
}

/// The peer address of a connection accepted by [`crate::serve::http::serve_listeners`] (axum's `ConnectInfo`,
/// which every request carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_network_is_its_ipv4_16_or_ipv6_32() {
        let net = |s: &str| Client::from_ip(s.parse().unwrap()).network();
        assert_eq!(net("192.0.2.1"), net("192.0.255.254"));
        assert_ne!(net("192.0.2.1"), net("192.1.2.1"));
        assert_eq!(net("::ffff:192.0.2.7"), net("192.0.3.8"));
        assert_eq!(net("2001:db8:1:2::1"), net("2001:db8:ffff:ffff::1"));
        assert_ne!(net("2001:db8:1:2::1"), net("2001:db9:1:2::1"));
        assert_eq!(Client::Unknown.network(), Network::Unknown);
        assert_eq!(net("192.0.2.1"), Network::V4(0xc000));
        assert_eq!(net("2001:db8:1:2::1"), Network::V6(0x2001_0db8));
    }
}
