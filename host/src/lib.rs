//! `tet-host` as a library: the command implementations behind the `tet-host` binary,
//! so integration tests can run the same commands. It is the binary's half of the split:
//! command-line types, rendering for a person or a script, progress bars, exit statuses
//! from the error's category ([`Exit::of`]), the FUSE adapter. What returns values (input,
//! atomic output, budgets, `.tet` open, verify and query) is `tet_std`, which the Python
//! binding and the fuzz targets link instead of this crate; its modules are re-exported
//! here under the paths the commands use.
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
//! * `testing`: re-exports the fuzz targets' bodies (`tet_std::fuzzing`) as `fuzzing`
//!   and turns on the libraries' test tools. Off by default and not part of the
//!   supported API; the tests crate turns it on.

#![cfg_attr(
    test,
    allow(clippy::restriction, reason = "unit tests fail by panicking")
)]

pub mod atomic;
pub mod cetrafs;
pub mod cli;
pub mod input;
pub mod progress;
pub mod repair_mode;
pub mod report;
pub mod tet;

pub use tet_std::{budget, signature, time};
pub use tet_std::{classify, classify_bytes, Exit, Format};

/// The fuzz targets' bodies (`tet_std::fuzzing`), where the tests crate has always
/// found them.
#[cfg(feature = "testing")]
pub use tet_std::fuzzing;

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
    let index_magic = tet_std::index_offset(&head).and_then(|at| {
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
