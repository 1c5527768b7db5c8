//! clusterset-dns: an authoritative DNS server for the Kubernetes
//! Multi-Cluster Services API (`<svc>.<ns>.svc.clusterset.local`).
//!
//! # Layout
//!
//! ```text
//!  source (manifest file | Kubernetes watches)
//!     │  apply / delete / reset        model: projections of API objects
//!     ▼
//!  index ──publish──▶ zone (immutable snapshot) ──ArcSwap──▶ dns (UDP fast path, hickory UDP/TCP)
//! ```
//!
//! - [`api`]: the MCS and ClusterProperty CRD types and well-known names.
//! - [`model`]: what DNS keeps of a ServiceImport or an EndpointSlice.
//! - [`index`]: the mutable index; rebuilds only changed services.
//! - [`zone`]: the immutable zone, the one query-name parser
//!   ([`zone::QueryName`]), lookups and precompiled wire answers.
//! - [`publish`]: the lock-free hand-off from index to server.
//! - [`dns`]: the response plan ([`dns::plan`], every protocol rule once),
//!   its two writers (the UDP fast path and the hickory handler) and the
//!   sockets.
//! - [`source`]: where objects come from: a manifest file, or watches on
//!   the Kubernetes API (a pure state machine driven by an async shell).
//! - [`watch`]: the generic watch → store layer (relists in one step,
//!   health, backoff), for the DNS source and the controller alike.
//! - [`controller`]: the MCS controller (ServiceExports of every member
//!   cluster → this cluster's ServiceImports, EndpointSlices, derived
//!   Services), a pull mesh over the same watch layer.
//! - [`peer`]: `clusterset-dns peer add|list|remove`, joining member
//!   clusters from an admin's kubeconfigs (the controller's identity rules).
//! - [`peering`]: the peer contract both of them keep: the peer Secret and
//!   its kubeconfig, the per-peer Lease, the identity read and the health
//!   probe, the refusal reasons.
//! - [`cidr`]: IP prefixes (Service CIDRs, a peer's endpoint ranges).
//! - [`label_selector`]: Kubernetes label selectors, parsed and evaluated.
//! - [`config`]: command line, environment and TOML configuration;
//!   [`cluster_args`]: the options every subcommand that talks to a
//!   cluster shares (`--kubeconfig`, `--namespace`, `--peer-selector`).
//! - [`error`]: how errors and their causes are printed.
//! - [`metrics`], [`admin`], [`explain`], [`telemetry`], [`log_limit`]:
//!   operations; [`inquiry`]: what `/explain` asks a source and what it
//!   answers.
//! - [`memory`]: freed heap handed back to the kernel after a large load;
//!   [`at_rest`]: the one interner both the index and the controller's
//!   stores hold objects with, and the controller's one-or-many list.
//! - [`build_info`]: version, commit and toolchain the binary was built from.
//! - `fuzzing` (hidden): the invariant checks the fuzz targets in
//!   `tests/fuzz/` and the corpus replay in `tests/fuzz_corpus.rs` share.

pub mod admin;
pub mod api;
pub mod app;
pub mod at_rest;
pub mod build_info;
pub mod cidr;
pub mod cluster_args;
pub mod config;
pub mod controller;
pub mod dns;
pub mod error;
pub mod explain;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod inquiry;
pub mod label_selector;
pub mod log_limit;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod peer;
pub mod peering;
pub mod publish;
pub mod source;
pub mod telemetry;
pub mod watch;
pub mod zone;
