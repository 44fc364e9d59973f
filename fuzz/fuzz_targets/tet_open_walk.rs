//! Open, verify and walk an arbitrary `.tet` file: never panic, and whatever opens can be
//! walked. The body is `tet_std::fuzzing::open_walk`, which `cargo test` also replays
//! over `fuzz/seeds` and `fuzz/regressions`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tet_std::fuzzing::open_walk(data);
});
