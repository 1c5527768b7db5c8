//! The admin's wing: the commands a platform engineer runs from their own
//! machine with admin kubeconfigs, to join member clusters into a
//! clusterset (`clusterset-dns peer add|list|remove`), or to run a
//! large one through a hub (`clusterset-dns hub init|join|list|leave`). It keeps the peer
//! contract ([`crate::peering`]) that the controller keeps too, and imports
//! nothing of the DNS server or the controller (`tests/layout.rs`).

mod credentials;
pub mod hub;
pub mod peer;

pub use hub::{HubArgs, run as run_hub};
pub use peer::{PeerArgs, run as run_peer};
