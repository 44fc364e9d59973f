//! The host builds `tet-core` with hardware CRC-32C (`crc-hw`); it must agree with the
//! table implementation firmware uses, on every length and alignment.

#![allow(clippy::restriction, reason = "tests and benches fail by panicking")]

use proptest::prelude::*;
use tet_core::checksum::{crc32c, crc32c_skipping, crc32c_software};

#[test]
fn check_value() {
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c_software(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c(b""), crc32c_software(b""));
}

proptest! {
    #[test]
    fn hardware_equals_table(data in proptest::collection::vec(any::<u8>(), 0..5000), skip in 0usize..8) {
        let d = &data[skip.min(data.len())..];
        prop_assert_eq!(crc32c(d), crc32c_software(d));
    }

    #[test]
    fn skipping_equals_zeroing(mut data in proptest::collection::vec(any::<u8>(), 0..600), field in 0usize..700) {
        let with = crc32c_skipping(&data, field);
        let end = (field + 8).min(data.len());
        let start = field.min(end);
        data[start..end].fill(0);
        prop_assert_eq!(with, u64::from(crc32c_software(&data)));
    }
}
