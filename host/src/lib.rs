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

/// The format of `bytes`: cetrafs when it starts with `CTFS`, otherwise `.tet` (whose
/// checks then report a bad magic if it is neither).
pub fn detect(bytes: &[u8]) -> Format {
    if bytes.starts_with(&tet_core::cetrafs::SB_MAGIC) {
        Format::Cetrafs
    } else {
        Format::Tet
    }
}

/// Opens `path` as a cetrafs image when it starts with `CTFS` (`Ok(Some)`), or says it
/// is something else (`Ok(None)`: a `.tet` file, or garbage its checks will name).
pub fn sniff(path: &std::path::Path) -> Result<Option<cetrafs::device::FileDevice>, Exit> {
    let dev = cetrafs::device::FileDevice::open(path).map_err(|e| {
        eprintln!("tet-host: cannot read {}: {e}", path.display());
        Exit::Operational
    })?;
    let mut head = [0u8; 4];
    let n = dev.read_head(&mut head).map_err(|e| {
        eprintln!("tet-host: cannot read {}: {e}", path.display());
        Exit::Operational
    })?;
    let head = head.get(..n).unwrap_or(&[]);
    Ok((detect(head) == Format::Cetrafs).then_some(dev))
}
