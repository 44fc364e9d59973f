//! `tet-host` as a library: the command implementations behind the `tet-host` binary,
//! so integration tests and other tools can run the same checks.
//!
//! Exit codes follow the fsck convention: 0 clean, 1 problems found and all corrected,
//! 4 problems found and left, 8 operational error (cannot open or read), 16 usage error.
//!
//! One folder per format, as in the libraries: `tet/` and `cetrafs/` hold one module per
//! command, and neither imports from the other; what both use sits beside them once
//! ([`cli`] with the command line, [`report`] rendering findings, [`Exit`] from an
//! error's category, [`input`], [`atomic`] output, [`budget`], [`progress`],
//! [`repair_mode`]).
//!
//! # Crate features
//! * `testing`: the fuzz targets' bodies (`fuzzing`) and the test tools they need
//!   (resealing images, writing journal transactions). Off by default and not part of
//!   the supported API; the fuzz crate and the tests crate turn it on.

#![cfg_attr(
    test,
    allow(clippy::restriction, reason = "unit tests fail by panicking")
)]

pub mod atomic;
pub mod budget;
pub mod cetrafs;
pub mod cli;
pub mod input;
pub mod progress;
pub mod repair_mode;
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
    clippy::expect_used
)]
pub mod fuzzing;

/// Process exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: nothing found.
    Clean = 0,
    /// 1: problems found and all corrected.
    Fixed = 1,
    /// 4: problems found and left in place.
    Problems = 4,
    /// 8: the file could not be opened or read.
    Operational = 8,
    /// 16: bad command line.
    Usage = 16,
}

impl Exit {
    /// The exit status for an error of `category`, the one mapping every command uses
    /// (the README's table): the input's own damage, whatever its form, is 4; what the
    /// machine could not do (read, write, memory, a refusal) is 8; what the user typed
    /// wrong is 16.
    pub fn of(category: tet_core::Category) -> Exit {
        use tet_core::Category;
        match category {
            Category::Truncated | Category::Corrupt | Category::Incompatible => Exit::Problems,
            Category::Unsatisfiable | Category::Resource | Category::Io => Exit::Operational,
            Category::Usage => Exit::Usage,
        }
    }

    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Clean => 0,
            Exit::Fixed => 1,
            Exit::Problems => 4,
            Exit::Operational => 8,
            Exit::Usage => 16,
        }
    }
}

/// Output style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Lines for a person.
    Human,
    /// One JSON document.
    Json,
    /// One line.
    Quiet,
}

/// Formats `tet-host` recognises by their leading magic.
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
fn index_offset(head: &[u8]) -> Option<u64> {
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

/// Whether the search of docs/cetrafs.md section 3.1 finds a superblock copy on `dev`.
fn cetrafs_by_copy(dev: &cetrafs::device::FileDevice) -> bool {
    let mut buf = [0u8; tet_core::block::BLOCK_SIZE];
    tet_core::cetrafs::copies::locate(dev, &mut buf, tet_core::cetrafs::ANY_DEVICE, None).is_ok()
}

/// Opens `path` as a cetrafs image (`Ok(Some)`) or a `.tet` file (`Ok(None)`), damaged
/// or not (see [`classify`]); a file of neither format is named as what it looks like
/// and refused with exit 8 ("not ours" is not damage).
pub fn sniff(path: &std::path::Path) -> Result<Option<cetrafs::device::FileDevice>, Exit> {
    let cannot = |e: std::io::Error| {
        crate::say!("cannot read {}: {e}", path.display());
        Exit::Operational
    };
    let dev = cetrafs::device::FileDevice::open(path).map_err(cannot)?;
    let file = std::fs::File::open(path).map_err(cannot)?;
    let head = signature::head(&file).map_err(cannot)?;
    let index_magic = index_offset(&head).and_then(|at| {
        let mut m = [0u8; 4];
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut m, at).ok().map(|()| m)
    });
    match classify(&head, index_magic) {
        Ok(Format::Cetrafs) => Ok(Some(dev)),
        Ok(Format::Tet) => Ok(None),
        // A cetrafs image whose first blocks are gone, tables and all, still has its
        // superblock copies further on (docs/cetrafs.md section 3.1). Searched only when
        // the start holds nothing at all: a file that looks like something else is
        // named at once, without a scan of its first GiB.
        Err(_) if head.iter().all(|b| *b == 0) && cetrafs_by_copy(&dev) => Ok(Some(dev)),
        Err(what) => {
            crate::say!(
                "{}: not a .tet file or a cetrafs image: {what}",
                path.display()
            );
            Err(Exit::Operational)
        }
    }
}
