//! The multi-cluster services controller: ServiceExports of every cluster
//! in, ServiceImports, derived Services and MCS EndpointSlices out.
//!
//! This module holds only the decision core, with no I/O: every cluster runs
//! its own controller against the same peer data and no shared store, so
//! each decision must be a deterministic function of its inputs, and pure
//! functions are the easiest way to test that.
//!
//! - [`naming`]: names of derived Services and mirrored slices, and the
//!   labels and field manager the controller writes with.
//! - [`merge`]: the exports of one service → the ServiceImport spec and its
//!   conflicts (oldest export wins, cluster id breaks ties).
//! - [`conditions`]: the ServiceExport and ServiceImport status conditions,
//!   with `meta.SetStatusCondition` semantics so idle reconciles write
//!   nothing.

pub mod conditions;
pub mod merge;
pub mod naming;
