//! `tet-alloc`: the parts of the `.tet` and cetrafs toolkits that need a heap but not an
//! operating system. One folder per format, as in `tet-core`:
//!
//! * [`tet`]: [`tet::writer::Writer`] streams layout v1 files out (chunks in any order,
//!   raw or zstd per chunk, clipped edge tiles, execution settings, the history footer
//!   with metadata spill); [`tet::decode::ChunkDecoder`] decodes chunk payloads under a
//!   memory budget, with every zstd rule checked the same way whatever the backend;
//!   [`tet::query`] is the fold engine; [`tet::verify_owned`] runs the core verifier with
//!   scratch it allocates itself, sized by the file, never by a header value;
//!   [`tet::history`] checks the footer JSON; [`tet::repair`] plans named fixes (lossless
//!   or lossy) and streams the repaired file.
//! * [`cetrafs`]: [`cetrafs::mkfs`] builds images deterministically, [`cetrafs::fsck`]
//!   runs the full check with its ownership maps, [`cetrafs::repair`] fixes through the
//!   journal.
//!
//! ```
//! use tet_alloc::tet::decode::{ChunkDecoder, Ruzstd};
//! use tet_alloc::tet::writer::{DatasetSpec, Writer};
//! use tet_core::tet::{Codec, DType, DatasetId};
//!
//! let spec = DatasetSpec { name: "a", dtype: DType::U8, shape: &[2, 3], chunk_shape: &[2, 2] };
//! let mut w = Writer::new(Vec::new(), &[spec])?;
//! w.write_array(DatasetId(0), &[1, 2, 3, 4, 5, 6], Codec::Zstd)?;
//! let bytes = w.finish(None)?;
//! // Opened for reading data: the footer's chunk checksum table is attached, so every
//! // chunk is checked against it as it is decoded.
//! let file = tet_alloc::tet::history::open_for_reading(&bytes)?.file;
//! assert!(file.checksums().is_some());
//! let ds = file.dataset("a")?;
//! let mut dec = ChunkDecoder::new(Ruzstd::new(), 1 << 20);
//! assert_eq!(dec.decode(&file.chunk(&ds, &[0, 1])?)?, &[3, 6]);
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```
//!
//! # Crate features
//! * `testing`: test fixtures (a row-level `.tet` layout builder for files that break
//!   rules on purpose; cetrafs journal transactions, registry rows and resealing). Off by
//!   default and not part of the supported API.
//! * `defmt`: `defmt::Format` for the errors (and tet-core's types), for firmware that
//!   logs with defmt.
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
pub mod tet;
