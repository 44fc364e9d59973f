//! `tet-alloc`: the parts of the `.tet` toolkit that need a heap but not an operating
//! system.
//!
//! * [`writer::Writer`] streams layout v1 files out (chunks in any order, raw or zstd per
//!   chunk, clipped edge tiles, execution settings, the history footer with metadata spill).
//! * [`decode::ChunkDecoder`] decodes chunk payloads under a memory budget, with every
//!   zstd rule checked the same way whatever the backend.
//! * [`verify_owned`] runs the core verifier with scratch it allocates itself, sized by
//!   the file, never by a header value; [`history`] checks the footer JSON.
//! * [`repair`] plans named fixes (lossless or lossy) and streams the repaired file.
//! * [`repair`] plans and applies fixes.
//!
//! ```
//! use tet_alloc::decode::{ChunkDecoder, Ruzstd};
//! use tet_alloc::writer::{DatasetSpec, Writer};
//! use tet_core::tet::{Codec, DType, DatasetId, TetFile};
//!
//! let spec = DatasetSpec { name: "a", dtype: DType::U8, shape: &[2, 3], chunk_shape: &[2, 2] };
//! let mut w = Writer::new(Vec::new(), &[spec])?;
//! w.write_array(DatasetId(0), &[1, 2, 3, 4, 5, 6], Codec::Zstd)?;
//! let bytes = w.finish(None)?;
//! let file = TetFile::open(&bytes)?;
//! let ds = file.dataset("a")?;
//! let mut dec = ChunkDecoder::new(Ruzstd::new(), 1 << 20);
//! assert_eq!(dec.decode(&file.chunk(&ds, &[0, 1])?)?, &[3, 6]);
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```
//!
//! # Crate features
//! * `testing`: test fixtures (a row-level layout builder for files that break rules on
//!   purpose). Off by default and not part of the supported API.
#![no_std]
#![forbid(unsafe_code)]
// Errors carry chunk coordinates inline (as the core's findings do); returning them by
// value keeps decoding allocation-free on the error path.
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

extern crate alloc;

pub mod cetrafs;
pub mod cetrafs_repair;
pub mod decode;
pub mod example;
pub mod fsck;
pub mod history;
pub mod query;
pub mod repair;
pub mod scan;
#[cfg(feature = "testing")]
pub mod testing;
pub mod writer;

use alloc::vec::Vec;
use tet_core::tet::{
    scratch_words, verify, Finding, Sink, Span, TetFile, VerifyOptions, VerifySummary,
};
use tet_core::{Error, ErrorKind};

/// Verifies `bytes` with scratch sized from the file itself. The scratch is at most
/// `16 * dataset_count + 8 * entry_count` bytes, and both counts were checked against the
/// file length before this allocates, so the memory used stays below the file size.
pub fn verify_owned(
    bytes: &[u8],
    metadata_spill: Option<Span>,
    sink: &mut dyn Sink<Finding>,
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
