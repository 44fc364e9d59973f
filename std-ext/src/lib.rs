//! `tet-std`: the std library under the `tet-host` command line, the Python binding
//! (`python/`) and the fuzz targets (`fuzz/`). It opens, checks and queries `.tet` files
//! and returns values: findings, reports as JSON values, query answers, and one
//! [`Error`] that carries its [`Category`], the path it concerns and the message. It never
//! prints and never ends the process; the binary decides what a person sees and which
//! status it exits with ([`Exit::of`], the one mapping from a category to a status).
//!
//! ```
//! use std::path::Path;
//!
//! // Bytes that are not a `.tet` file: the error says what they look like instead, and
//! // the category says "the machine could not do it" (not "the file is damaged").
//! let bytes = vec![0u8; 8192];
//! let err = tet_std::tet::open_tet(Path::new("zeros.bin"), &bytes).unwrap_err();
//! assert_eq!(err.category(), tet_std::Category::Io);
//! assert_eq!(tet_std::Exit::of(err.category()).code(), 8);
//! assert!(err.message().starts_with("zeros.bin: not a .tet file or a cetrafs image"));
//! assert_eq!(err.path(), Some(Path::new("zeros.bin")));
//! ```
//!
//! What lives where: [`input`] gets a file's bytes (mapped, or read), [`atomic`] replaces
//! a file crash-safely, [`budget`] parses and sizes memory budgets, [`signature`] and
//! [`classify`] tell the formats apart, and [`tet`] holds the `.tet` operations (open,
//! verify, query, the C zstd codec). A long pass reports how far it has come through
//! [`Progress`], which the binary draws as a bar.
//!
//! # Crate features
//! * `testing`: the fuzz targets' bodies (`fuzzing`) and the test tools they need
//!   (resealing images, writing journal transactions). Off by default and not part of
//!   the supported API; the fuzz crate and the tests crate turn it on.
//!
//! # Unsafe code
//! Two functions, both in [`input`], each with its `# Safety` contract: mapping a file
//! read-only (`map_readonly`) and letting the kernel drop the mapped pages a streaming
//! reader has passed (`drop_pages`). Everything else is safe code under the workspace's
//! lint wall.

#![cfg_attr(
    test,
    allow(clippy::restriction, reason = "unit tests fail by panicking")
)]

pub mod atomic;
pub mod budget;
mod error;
mod exit;
pub mod input;
mod progress;
pub mod report;
pub mod signature;
pub mod tet;
pub mod time;

// Panicking on a broken invariant is how a fuzz target reports it: the one module
// outside the lint wall of `Cargo.toml`.
#[cfg(feature = "testing")]
#[allow(
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::unreachable,
    missing_docs
)]
pub mod fuzzing;

pub use error::Error;
pub use exit::Exit;
pub use progress::Progress;
pub use tet_core::Category;

/// Formats recognised by their leading magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.tet` (`TETR`).
    Tet,
    /// cetrafs image (`CTFS`).
    Cetrafs,
}

/// Which format `head` (a file's first [`signature::PROBE_LEN`] bytes) is in: by its
/// primary magic, or, when that is damaged, by the other structures of a format where
/// that format puts them (`index_magic`: the 4 bytes at the chunk index offset its
/// `.tet` superblock would name; cetrafs: a group, registry, journal or inode block in
/// its first blocks). `Err` says what the file looks like instead.
pub fn classify(head: &[u8], index_magic: Option<[u8; 4]>) -> Result<Format, String> {
    if head.starts_with(&tet_core::cetrafs::SB_MAGIC) {
        return Ok(Format::Cetrafs);
    }
    if head.starts_with(&tet_core::tet::SUPERBLOCK_MAGIC)
        || index_magic == Some(tet_core::tet::INDEX_MAGIC)
    {
        return Ok(Format::Tet);
    }
    use tet_core::cetrafs::{BG_MAGIC, INODE_MAGIC, JF_MAGIC, NODE_MAGIC, RH_MAGIC, ZG_MAGIC};
    let cetrafs_block = head.chunks(4096).skip(1).any(|b| {
        [
            ZG_MAGIC,
            BG_MAGIC,
            RH_MAGIC,
            NODE_MAGIC,
            JF_MAGIC,
            INODE_MAGIC,
        ]
        .iter()
        .any(|m| b.starts_with(m))
    });
    if cetrafs_block {
        return Ok(Format::Cetrafs);
    }
    Err(match signature::describe(head) {
        _ if head.is_empty() => "it is empty".to_string(),
        None => format!(
            "its first {} KiB hold only zeros",
            head.len().div_ceil(1024)
        ),
        Some(what) => format!("it looks like {what}"),
    })
}

/// The chunk index offset a `.tet` superblock at the start of `head` names (bytes
/// 16..24), whatever its magic says.
pub fn index_offset(head: &[u8]) -> Option<u64> {
    head.get(16..24)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
}

/// [`classify`] for a whole file in memory.
pub fn classify_bytes(bytes: &[u8]) -> Result<Format, String> {
    let head = bytes.get(..signature::PROBE_LEN).unwrap_or(bytes);
    let index_magic = index_offset(bytes)
        .and_then(|at| usize::try_from(at).ok())
        .and_then(|at| bytes.get(at..at.checked_add(4)?))
        .and_then(|m| <[u8; 4]>::try_from(m).ok());
    classify(head, index_magic)
}
