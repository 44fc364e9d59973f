//! `tet-host` as a library: the command implementations behind the `tet-host` binary,
//! so integration tests and other tools can run the same checks.
//!
//! Exit codes follow the fsck convention: 0 clean, 1 problems found and all corrected,
//! 4 problems found and left, 8 operational error (cannot open or read), 16 usage error.

/// Declares modules held to the libraries' lint wall: no `as`, no unchecked arithmetic,
/// indexing, unwraps or panics. Every module is declared here except the fuzz target
/// bodies (feature `testing`).
macro_rules! walled {
    ($($(#[$doc:meta])* $m:ident;)*) => {
        $(
            $(#[$doc])*
            #[deny(
                clippy::arithmetic_side_effects,
                clippy::as_conversions,
                clippy::indexing_slicing,
                clippy::unwrap_used,
                clippy::expect_used,
                clippy::panic
            )]
            pub mod $m;
        )*
    };
}

walled! {
    atomic;
    cetrafs_cmd;
    codec;
    convert;
    device;
    input;
    mkfs;
    npy;
    query_cmd;
    report;
    tet_cmd;
    tet_repair;
    write;
}

#[cfg(feature = "testing")]
pub mod fuzzing;
pub use tet_alloc::tet::history;

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
