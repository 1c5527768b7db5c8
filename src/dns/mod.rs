//! The DNS side: the response plan and the writer both paths render it
//! with, the hickory request handler, the UDP fast path, the structural
//! check every query passes, the UDP workers and their response rate
//! limiting, the TCP listener and the sockets. Reads only the published
//! zone; never talks to Kubernetes.

pub mod fast_path;
pub mod handler;
pub mod plan;
pub mod render;
pub(crate) mod request;
pub mod rrl;
pub mod server;
pub mod tcp;
pub mod udp;
pub mod wire;
pub mod wire_check;

pub use handler::Handler;
pub use server::{DnsServer, DnsServerConfig};

#[cfg(test)]
mod tests;
