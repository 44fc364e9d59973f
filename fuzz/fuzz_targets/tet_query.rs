//! Plans and folds arbitrary selections over arbitrary small files: no panic, memory
//! within the budget, and the parallel engine equals the single-threaded one bit for bit;
//! then queries by axis name, by coordinate label or value and `null_count` against the
//! file's axis metadata, whatever it holds.
//! The body is `tet_std::fuzzing::query_fold`, replayed by `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tet_std::fuzzing::query_fold(data);
});
