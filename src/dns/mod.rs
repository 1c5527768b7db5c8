//! The DNS side: the response plan and the writer both paths render it
//! with, the hickory request handler, the UDP fast path, the structural
//! check every query passes, the UDP workers and their response rate
//! limiting, the TCP listener and the sockets. Reads only the published
//! zone; never talks to Kubernetes.

pub mod fast_path;
mod handler;
pub mod plan;
mod render;
pub(crate) mod request;
pub mod rrl;
mod server;
mod tcp;
pub(crate) mod udp;
pub mod wire;
mod wire_check;

pub use handler::Handler;
pub use server::{DnsServer, DnsServerConfig};

#[cfg(test)]
mod tests;
