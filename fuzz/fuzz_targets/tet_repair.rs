//! Repairs an arbitrary `.tet` file with every fix: no panic, and a plan that answers
//! every finding must leave a file that verifies clean (otherwise repair exits 4). The
//! body is `tet_std::fuzzing::repair_all`, replayed by `cargo test`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tet_std::fuzzing::repair_all(data);
});
