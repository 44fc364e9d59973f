//! `tet-alloc`: the parts of the `.tet` toolkit that need a heap but not an operating
//! system.
//!
//! * [`writer::TetWriter`] builds layout v1 files (any dtype, regular chunk grids with
//!   clipped edge tiles, raw or pre-encoded payloads, execution settings, history footer).
//! * [`verify_owned`] runs the core verifier with scratch it allocates itself, sized by
//!   the file, never by a header value.
//!
//! ```
//! use tet_alloc::writer::TetWriter;
//! use tet_core::tet::{DType, TetFile};
//!
//! let mut w = TetWriter::new();
//! let values: Vec<u8> = (1..=6u8).collect();
//! let a = w.add_dataset("a", DType::U8, &[2, 3], &[2, 2])?;
//! w.add_array(a, &values)?;
//! let bytes = w.to_bytes()?;
//! let file = TetFile::open(&bytes)?;
//! let ds = file.dataset("a")?;
//! assert_eq!(file.chunk(&ds, &[0, 1])?.payload, &[3, 6]);
//! # Ok::<(), tet_core::Error>(())
//! ```
//!
//! # Crate features
//! None yet.
#![no_std]
#![forbid(unsafe_code)]
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

extern crate alloc;

pub mod cetrafs;
pub mod example;
pub mod writer;

use alloc::vec::Vec;
use tet_core::tet::{scratch_words, verify, Sink, Span, TetFile, VerifyOptions, VerifySummary};
use tet_core::{Error, ErrorKind};

/// Verifies `bytes` with scratch sized from the file itself. The scratch is at most
/// `16 * dataset_count + 8 * entry_count` bytes, and both counts were checked against the
/// file length before this allocates, so the memory used stays below the file size.
pub fn verify_owned(
    bytes: &[u8],
    metadata_spill: Option<Span>,
    sink: &mut dyn Sink,
) -> Result<VerifySummary, Error> {
    let mut words = 0;
    // Parse quietly just to size the scratch; `verify` reports everything itself.
    if let Some(file) = TetFile::parse(bytes, &mut |_: &tet_core::tet::Finding| {}) {
        if file.directory().is_some() && file.index().is_some() {
            words = scratch_words(&file);
        }
    }
    let mut scratch: Vec<u64> = Vec::new();
    scratch.try_reserve_exact(words).map_err(|_| {
        Error::new(
            ErrorKind::BufferTooSmall {
                needed: u64::try_from(words).unwrap_or(u64::MAX),
                available: 0,
            },
            "verify scratch",
            0,
        )
    })?;
    scratch.resize(words, 0);
    Ok(verify(
        bytes,
        VerifyOptions {
            scratch: &mut scratch,
            metadata_spill,
        },
        sink,
    ))
}
