//! A UDP datagram through the worker's per-datagram step with the fast path
//! on, answered from the example clusterset (`clusterset_dns::fuzzing`).
#![no_main]

use std::sync::LazyLock;

use clusterset_dns::fuzzing::Dns;
use libfuzzer_sys::fuzz_target;

static DNS: LazyLock<Dns> = LazyLock::new(Dns::new);

fuzz_target!(|datagram: &[u8]| DNS.udp_fast_path(datagram));
