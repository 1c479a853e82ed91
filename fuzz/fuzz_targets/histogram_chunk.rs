#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| saltdb_fuzz::histogram_chunk(data));
