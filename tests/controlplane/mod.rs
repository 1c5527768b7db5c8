//! A real control plane for tests: one etcd and one or more kube-apiservers
//! (one "cluster" each, separated by `--etcd-prefix`) on loopback ports,
//! built by `scripts/testenv-build.sh` and cached outside the repository.
//!
//! [`ControlPlane::start`] runs only apiservers (objects are stored, nothing
//! acts on them). [`ControlPlane::start_members`] runs *member clusters* that
//! behave like real ones without a kubelet: each also gets
//! kube-controller-manager, kube-scheduler and kwok with a few fake Nodes, so
//! Deployments get Running+Ready pods with IPs, the in-tree EndpointSlice
//! controller writes slices, namespaces finish deleting and owner references
//! are garbage-collected. See `tests/testenv/README.md` for the flags and why.
//!
//! Everything is torn down on drop — also when a test panics, in which case
//! the tail of every process's log is printed — and every child gets
//! `PR_SET_PDEATHSIG`, so even a killed test run leaks no processes.
//!
//! By part: `process` (binaries, spawning, stopping, logs, CoreDNS),
//! `cluster` (etcd, apiservers, member clusters, [`ControlPlane`]),
//! `apply` (CRDs and manifests), `controller` (the controller's install,
//! identity, peers, its process and `serve`'s). Everything is re-exported
//! here, so users name `controlplane::…` whatever the part.
#![allow(dead_code)]

use crate::support;
#[allow(unused_imports)] // each test crate uses a different subset
pub(crate) use crate::support::{
    create_namespace, free_port, free_udp_and_tcp_port, poll_until, wait_for,
};

// Only the `testenv` tier may start a control plane: a test target that
// uses this module needs `required-features = ["testenv"]` in Cargo.toml,
// so that plain `cargo test` neither compiles it nor needs the binaries.
#[cfg(not(feature = "testenv"))]
compile_error!(
    "tests/controlplane needs the Go-built testenv binaries: give the test target \
     `required-features = [\"testenv\"]` in Cargo.toml (README.md, \"Tests\")"
);

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Token of the `system:masters` admin user.
pub(crate) const ADMIN_TOKEN: &str = "admin-token";

/// Token of the unprivileged user `clusterset-dns` (no groups).
pub(crate) const DNS_TOKEN: &str = "clusterset-dns-token";

/// User name behind [`DNS_TOKEN`].
pub(crate) const DNS_USER: &str = "clusterset-dns";

mod apply;
mod cluster;
mod controller;
mod process;

#[allow(unused_imports)] // each test crate uses a different subset
pub(crate) use apply::*;
#[allow(unused_imports)] // each test crate uses a different subset
pub(crate) use cluster::*;
#[allow(unused_imports)] // each test crate uses a different subset
pub(crate) use controller::*;
#[allow(unused_imports)] // each test crate uses a different subset
pub(crate) use process::*;
