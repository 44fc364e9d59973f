//! A deterministic cetrafs 0x0006 image builder (the `mkfs` behind `tet-host mkfs` and
//! every cetrafs test).
//!
//! The same input always produces the same bytes: inodes are numbered in insertion
//! order, blocks are allocated first-fit from block group 0 upwards, nothing reads a
//! clock.
//!
//! * `geometry`: [`Params`] and the checked layout computation. Every later block number
//!   is a region start plus an index inside that region, all below the image's block
//!   count, which is why the writers below may saturate instead of failing.
//! * `allocator`: first-fit data block allocation.
//! * `extents`: a file's extents as its blocks are placed, and its extent tree.
//! * `tree`: the tree being copied in ([`ImageBuilder`]'s files, directories, symlinks,
//!   hard links and xattrs; [`Content`] read while the image is written).
//! * `emit`: serialising every structure through the `tet_core::cetrafs::raw` structs
//!   into a [`BlockSink`] ([`MemSink`] for an image in memory).

mod allocator;
mod emit;
mod extents;
mod geometry;
mod tree;

pub use emit::{BlockSink, MemSink};
pub use geometry::Params;
pub use tree::{Content, ImageBuilder, Placement, Sparse};

use tet_core::{Error, ErrorKind};

pub(super) fn invalid(what: &'static str) -> Error {
    Error::new(ErrorKind::Invalid, what, 0)
}

pub(super) fn full(what: &'static str) -> Error {
    Error::new(
        ErrorKind::BufferTooSmall {
            needed: 1,
            available: 0,
        },
        what,
        0,
    )
}

/// Copies `bytes` into `buf` at `at`; a copy that would not fit is skipped (callers
/// place fixed-size records inside a block).
pub(super) fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = buf.get_mut(at..at.saturating_add(bytes.len())) {
        dst.copy_from_slice(bytes);
    }
}

pub(super) fn usize_of(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}
