//! A manifest file's bytes through the parser and, if accepted, into a zone
//! (`clusterset_dns::fuzzing`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| clusterset_dns::fuzzing::manifest(bytes));
