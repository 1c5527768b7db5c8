//! A DNS message through the hickory path: as a UDP datagram with the fast
//! path off (`--fast-path false`) and as a TCP message
//! (`clusterset_dns::fuzzing`).
#![no_main]

use std::sync::LazyLock;

use clusterset_dns::fuzzing::Dns;
use libfuzzer_sys::fuzz_target;

static DNS: LazyLock<Dns> = LazyLock::new(Dns::new);

fuzz_target!(|message: &[u8]| DNS.hickory_path(message));
