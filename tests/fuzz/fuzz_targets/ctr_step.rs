#![no_main]
// The property checks live in the crate (src/fuzzing.rs) so that plain `cargo test` replays
// the seeds and every input kept in tests/fuzz/regressions/ctr_step/.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_ctr::fuzzing::ctr_step(data));
