//! What every process of ours runs on, whichever wing it serves: the admin
//! HTTP server, the metrics exposition and build info, logs, durations as
//! people write them, rate-limited log lines and memory handed back after
//! a large load. Imports no wing (`tests/layout.rs`).

pub mod admin_server;
pub mod build_info;
pub mod duration;
pub mod exposition;
pub mod log_limit;
pub mod memory;
pub mod telemetry;
