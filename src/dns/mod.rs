//! The DNS side: the hickory request handler, the UDP fast path and the
//! listening sockets. Reads only the published zone; never talks to Kubernetes.

pub mod handler;
pub mod plan;
pub mod server;
pub mod udp;
pub mod wire_answer;

pub use handler::Handler;
pub use server::{DnsServer, DnsServerConfig};

#[cfg(test)]
mod tests;
