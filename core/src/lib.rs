//! `tet-core`: `no_std`, allocation-free parsing and validation of the `.tet` layout v1
//! container (`docs/tet-v1.md`) and of cetrafs 0x0006 filesystem images (`docs/cetrafs.md`).
//!
//! Everything here borrows the caller's bytes; nothing allocates, nothing panics (the
//! workspace lint wall denies indexing, unchecked arithmetic, `as` casts and unwraps), and
//! every error names the field and the absolute byte offset where it was found.
//!
//! ```
//! use tet_core::tet::TetFile;
//!
//! // The smallest legal file: an empty superblock.
//! let mut bytes = [0u8; 32];
//! bytes[0..4].copy_from_slice(b"TETR");
//! bytes[4] = 1; // layout_version
//! bytes[16] = 32; // chunk_index_offset
//! let file = TetFile::open(&bytes)?;
//! assert_eq!(file.superblock().dataset_count(), 0);
//! assert!(file.dataset("temperature").is_err());
//! # Ok::<(), tet_core::Error>(())
//! ```
//!
//! # Crate features
//! The crate is always `no_std` and never allocates. Three features pick how cetrafs
//! checksums (CRC-32C) are computed, one adds logging:
//! * default: a 1 KiB lookup table;
//! * `crc-no-table`: bitwise, no table (smallest flash);
//! * `crc-table-16k`: a 16 KiB slice-by-16 table (fastest in software);
//! * `crc-hw`: the CPU's CRC instructions where it has them, detected at run time:
//!   the `crc-fast` crate on x86-64 CPUs with AVX-512 VPCLMULQDQ (its folding kernel,
//!   about twice as fast from 2 KiB up), the `crc32c` crate (x86-64 SSE 4.2, AArch64)
//!   elsewhere and for appends of under 256 bytes. Both need `std`, so this is for host
//!   builds only; results are identical (tests cross-check them);
//! * `defmt`: `defmt::Format` for errors, findings and views, for firmware that logs
//!   with defmt (without it nothing of defmt is compiled or linked).
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
// Findings carry their coordinates inline (160 bytes) because there is no allocator to box
// them; returning them by value is the point.
#![allow(clippy::result_large_err)]
#![cfg_attr(
    test,
    allow(
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects,
        clippy::as_conversions,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

pub mod arith;
pub mod block;
pub mod cetrafs;
pub mod checksum;
#[cfg(feature = "defmt")]
mod defmt_impls;
pub mod error;
pub mod finding;
pub mod tet;

pub use error::{Category, Error, ErrorKind, Fault, Result};
