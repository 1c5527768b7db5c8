//! clusterset-dns: the Kubernetes Multi-Cluster Services API's DNS server
//! (`<svc>.<ns>.svc.clusterset.local`) and its controller, in one binary.
//!
//! # Layout: three wings over one base
//!
//! ```text
//!   DNS server              controller              admin's CLI
//!   source → index → zone   member clusters'        peer add|list|remove
//!   → publish → dns         exports → imports,      hub init|join|list|leave
//!   admin, metrics, config  slices, derived Services
//!        │                       │                       │
//!        └───────────────┬───────┴───────────────────────┘
//!                        ▼
//!   base: api, peering, hub, watch, ops, cluster_args, kube_http,
//!         cidr, label_selector, at_rest, error
//! ```
//!
//! Each wing imports the base and itself, never another wing, and the base
//! imports no wing (`tests/layout.rs` reads every `crate::` path and keeps
//! it so). `main.rs` is the command that wires them.
//!
//! **The base**, what more than one wing needs:
//! - [`api`]: the MCS, ClusterProperty and PublishedService types, the
//!   well-known names, the Service field rules and [`api::ServiceRef`].
//! - [`peering`]: the peer contract the controller and the CLI both keep:
//!   the peer Secret and its kubeconfig, the per-peer Lease, the identity
//!   read and the health probe, the refusal reasons.
//! - [`hub`]: the hub contract the controller and the CLI both keep: one
//!   namespace per member on the hub, what a member may write and read
//!   there, the admission policy, quota and flow schema behind it.
//! - [`watch`]: the generic watch → store layer (relists in one step,
//!   health, backoff), for the DNS source and the controller alike.
//! - [`ops`]: what every process runs on: the admin HTTP server, the
//!   metrics exposition and build info, logs, durations, rate-limited log
//!   lines, memory handed back after a large load.
//! - [`cluster_args`]: the options every subcommand that talks to a cluster
//!   shares; [`kube_http`]: the HTTP/2 client stack the long-running
//!   processes reach an apiserver with; [`cidr`]: IP prefixes; [`label_selector`]: Kubernetes label
//!   selectors; [`at_rest`]: the one interner and the one-or-many list the
//!   stores hold objects with; [`error`]: how errors and causes print.
//!
//! **The DNS server** (`clusterset-dns serve`):
//!
//! ```text
//!  source (manifest file | Kubernetes watches)
//!     │  apply / delete / reset        model: projections of API objects
//!     ▼
//!  index ──publish──▶ zone (immutable snapshot) ──ArcSwap──▶ dns (UDP fast path, hickory UDP/TCP)
//! ```
//!
//! - [`config`]: command line, environment and TOML configuration; [`app`]:
//!   starts and stops the server's tasks.
//! - [`source`]: where objects come from: a manifest file, or watches on
//!   the Kubernetes API (a pure state machine driven by an async shell).
//! - [`model`]: what DNS keeps of a ServiceImport or an EndpointSlice.
//! - [`index`]: the mutable index; rebuilds only changed services.
//! - [`zone`]: the immutable zone, the one query-name parser
//!   ([`zone::QueryName`]), lookups and precompiled wire answers.
//! - [`publish`]: the lock-free hand-off from index to server.
//! - [`dns`]: the response plan ([`dns::plan`], every protocol rule once),
//!   its two writers (the UDP fast path and the hickory handler) and the
//!   sockets.
//! - [`admin`], [`metrics`], [`explain`], [`inquiry`]: the server's admin
//!   routes, its metrics, and why a name answers the way it does.
//! - `fuzzing` (hidden): the invariant checks the fuzz targets in
//!   `tests/fuzz/` and the corpus replay in `tests/fuzz_corpus.rs` share.
//!
//! **The controller** ([`controller`], `clusterset-dns controller`): the
//! ServiceExports of every member cluster become this cluster's
//! ServiceImports, EndpointSlices and derived Services; a pull mesh over
//! the base's watch layer.
//!
//! **The admin's CLI** ([`cli`], `clusterset-dns peer add|list|remove`):
//! joining member clusters from an admin's kubeconfigs, with the
//! controller's identity rules from the peer contract.

// The base.
pub mod api;
pub mod at_rest;
pub mod cidr;
pub mod cluster_args;
pub mod error;
pub mod hub;
pub mod kube_http;
pub mod label_selector;
pub mod ops;
pub mod peering;
pub mod watch;

// The DNS server.
pub mod admin;
pub mod app;
pub mod config;
pub mod dns;
pub mod explain;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod inquiry;
pub mod metrics;
pub mod model;
pub mod publish;
pub mod source;
pub mod zone;

// The controller.
pub mod controller;

// The admin's CLI.
pub mod cli;
