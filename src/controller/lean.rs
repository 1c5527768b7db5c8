//! The controller's objects as its watches and writes decode them: only
//! the fields a decision reads or a copy to another cluster carries
//! ([`crate::api::stripped`], the same mechanism as the DNS source's, which
//! keeps less).

use crate::api::stripped::{Controller, Stripped};

/// An object of kind `K` decoded without the fields no decision reads.
pub type Lean<K> = Stripped<K, Controller>;
