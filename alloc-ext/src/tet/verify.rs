//! The core verifier with scratch owned here, sized by the file.

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
            ErrorKind::Budget {
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
