//! Plans and folds arbitrary selections over arbitrary small files: no panic, memory
//! within the budget, and the parallel engine equals the single-threaded one bit for bit.
//! The body is `tet_host::fuzzing::query_fold`, replayed by `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tet_host::fuzzing::query_fold(data);
});
