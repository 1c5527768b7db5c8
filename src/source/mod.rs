//! Where the index's objects come from. Each source owns an
//! [`Index`](crate::index::Index), feeds it, and publishes zones to the
//! [`ZoneHandle`](crate::publish::ZoneHandle) the DNS server reads.

pub mod file;
pub mod kubernetes;
pub mod manifest;

pub use file::FileSource;
