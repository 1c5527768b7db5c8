//! The admin's wing: the commands a platform engineer runs from their own
//! machine with admin kubeconfigs, to join member clusters into a
//! clusterset (`clusterset-dns peer add|list|remove`). It keeps the peer
//! contract ([`crate::peering`]) that the controller keeps too, and imports
//! nothing of the DNS server or the controller (`tests/layout.rs`).

pub mod peer;

pub use peer::{PeerArgs, run as run_peer};
