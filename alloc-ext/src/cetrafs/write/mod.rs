//! Writing into a cetrafs image as one node, by the single-writer protocol of
//! `docs/cetrafs.md` section 15: [`Writer::join`] registers the node (row `ACTIVE`),
//! every operation is one or more journal transactions (each consistent: written into
//! the node's journal, committed, checkpointed, the journal clean again), and
//! [`Writer::leave`] releases the zone groups the node claimed and marks the row `LEFT`.
//! A writer dropped without `leave` is a crash: [`recover`] (or the same node's next
//! join) finishes it.
//!
//! Over the device traits of `tet-core`, so firmware with a flash device can write too.
//! Errors are the Unix errors the operation would give ([`Errno`]).

mod allocate;
mod dir;
mod grow;
mod join;
mod ops;
mod pending;
mod tree;
mod txn;

use alloc::vec::Vec;
use core::fmt;

use tet_core::block::BlockDeviceMut;
use tet_core::cetrafs::replay::ReplayError;
use tet_core::cetrafs::Fs;
use tet_core::Error;

pub use join::{recover, recover_all, Recovered};
pub use ops::SetAttr;
pub use pending::PendingDevice;

/// A Unix error number, as the equivalent system call would report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::upper_case_acronyms, reason = "the names of the Unix errors")]
pub enum Errno {
    /// No such file or directory.
    ENOENT,
    /// Not a directory.
    ENOTDIR,
    /// Is a directory.
    EISDIR,
    /// File exists.
    EEXIST,
    /// Directory not empty.
    ENOTEMPTY,
    /// File name too long.
    ENAMETOOLONG,
    /// No space left on device.
    ENOSPC,
    /// File too large.
    EFBIG,
    /// Invalid argument.
    EINVAL,
    /// Too many links.
    EMLINK,
    /// No data available (no such attribute).
    ENODATA,
    /// Argument list too long (an attribute value too large).
    E2BIG,
    /// Operation not permitted.
    EPERM,
    /// Read-only file system.
    EROFS,
    /// Input/output error.
    EIO,
}

impl Errno {
    /// The Linux error number.
    pub fn code(self) -> i32 {
        match self {
            Errno::EPERM => 1,
            Errno::ENOENT => 2,
            Errno::EIO => 5,
            Errno::E2BIG => 7,
            Errno::EEXIST => 17,
            Errno::ENOTDIR => 20,
            Errno::EISDIR => 21,
            Errno::EINVAL => 22,
            Errno::EFBIG => 27,
            Errno::ENOSPC => 28,
            Errno::EROFS => 30,
            Errno::EMLINK => 31,
            Errno::ENAMETOOLONG => 36,
            Errno::ENOTEMPTY => 39,
            Errno::ENODATA => 61,
        }
    }

    /// `strerror` of the error, as the Unix tools print it.
    pub fn message(self) -> &'static str {
        match self {
            Errno::EPERM => "Operation not permitted",
            Errno::ENOENT => "No such file or directory",
            Errno::EIO => "Input/output error",
            Errno::E2BIG => "Argument list too long",
            Errno::EEXIST => "File exists",
            Errno::ENOTDIR => "Not a directory",
            Errno::EISDIR => "Is a directory",
            Errno::EINVAL => "Invalid argument",
            Errno::EFBIG => "File too large",
            Errno::ENOSPC => "No space left on device",
            Errno::EROFS => "Read-only file system",
            Errno::EMLINK => "Too many links",
            Errno::ENAMETOOLONG => "File name too long",
            Errno::ENOTEMPTY => "Directory not empty",
            Errno::ENODATA => "No data available",
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

/// Why an operation or a join failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// The operation's own error (nothing was written).
    Errno(Errno),
    /// The device failed or a structure does not read (`EIO`); the error names the
    /// field and byte offset.
    Device(Error),
    /// The join was refused: another registry row is `ACTIVE`.
    NodeActive {
        /// Its registry row.
        row: u32,
        /// Its node id.
        node_id: u64,
        /// Its hostname (UTF-8 up to the first NUL).
        hostname: Vec<u8>,
    },
    /// The join was refused: another row's journal is `DIRTY`, or a row is `FENCED`.
    NeedsReplay {
        /// Its registry row.
        row: u32,
        /// Its node id (0 for a free row).
        node_id: u64,
    },
    /// The join was refused: a zone group is owned by a row that is not live.
    ZoneOwned {
        /// The zone group.
        zone_group: u32,
        /// Its owner row.
        owner: u16,
    },
    /// Replay during recovery failed.
    Replay(ReplayError),
}

impl WriteError {
    /// The Unix error this stands for.
    pub fn errno(&self) -> Errno {
        match self {
            WriteError::Errno(e) => *e,
            WriteError::Device(_) | WriteError::Replay(_) => Errno::EIO,
            WriteError::NodeActive { .. }
            | WriteError::NeedsReplay { .. }
            | WriteError::ZoneOwned { .. } => Errno::EROFS,
        }
    }
}

impl From<Error> for WriteError {
    fn from(e: Error) -> Self {
        WriteError::Device(e)
    }
}

impl From<Errno> for WriteError {
    fn from(e: Errno) -> Self {
        WriteError::Errno(e)
    }
}

impl From<ReplayError> for WriteError {
    fn from(e: ReplayError) -> Self {
        WriteError::Replay(e)
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Errno(e) => write!(f, "{e}"),
            WriteError::Device(e) => write!(f, "{e}"),
            WriteError::NodeActive {
                row,
                node_id,
                hostname,
            } => write!(
                f,
                "node {node_id:#x} ({}) is ACTIVE in registry row {row}: the filesystem may be \
                 mounted; unmount it, or if that node crashed, recover it with `tet-host \
                 replay IMAGE`",
                alloc::string::String::from_utf8_lossy(hostname)
            ),
            WriteError::NeedsReplay { row, node_id } => write!(
                f,
                "the journal of registry row {row} (node {node_id:#x}) needs replay or its \
                 node is FENCED: run `tet-host replay IMAGE` first"
            ),
            WriteError::ZoneOwned { zone_group, owner } => write!(
                f,
                "zone group {zone_group} is owned by registry row {owner}, which is not live: \
                 run `tet-host repair IMAGE` first"
            ),
            WriteError::Replay(e) => write!(f, "journal replay failed: {e:?}"),
        }
    }
}

/// Who joins.
#[derive(Clone, Debug)]
pub struct JoinOptions {
    /// The node's id (nonzero).
    pub node_id: u64,
    /// Its hostname, at most 64 bytes.
    pub hostname: Vec<u8>,
    /// The clock, in seconds since 1970, for the row's `last_heartbeat` (0: none).
    pub now_secs: u64,
}

/// The free count of a block group in a zone group the node owns.
#[derive(Clone, Copy, Debug)]
struct GroupCount {
    free: u64,
    reconcile_seq: u64,
}

/// A node joined to a filesystem, writing through its journal. See the module docs.
pub struct Writer<D> {
    fs: Fs<D>,
    node_id: u64,
    row: u32,
    next_txn: u64,
    /// Slot headers `0 .. stale` of the node's journal may be nonzero.
    stale: u64,
    /// Whether the join cleared `SB_CLEAN` (the leave sets it again).
    was_clean: bool,
    /// Zone groups claimed, in claim order.
    owned: Vec<u32>,
    /// Zone group → (first block group, block group count), from the cold parts.
    zones: Vec<(u32, u32)>,
    /// Block group id → its count, for the groups of owned zone groups.
    counts: alloc::collections::BTreeMap<u32, GroupCount>,
    /// Where the inode search starts.
    inode_hint: u64,
    /// Nanoseconds since 1970 stamped on the inodes changed.
    now_ns: u64,
    left: bool,
    /// `COMPAT_XATTR` is known to be set.
    xattrs_enabled: bool,
    /// Batch mode, and its transaction not committed yet.
    batch: bool,
    pending: txn::Txn,
}

impl<D: BlockDeviceMut> Writer<D> {
    /// The filesystem, for reading (its device holds every checkpointed transaction).
    pub fn fs(&self) -> &Fs<D> {
        &self.fs
    }

    /// The registry row the node joined in.
    pub fn row(&self) -> u32 {
        self.row
    }

    /// The node's id.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// Sets the time stamped on inodes the next operations change (ns since 1970).
    pub fn set_time(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
    }

    /// The transaction id the next transaction takes.
    pub fn next_txn_id(&self) -> u64 {
        self.next_txn
    }

    /// The zone group holding block group `bg`.
    fn zone_of(&self, bg: u32) -> Option<u32> {
        self.zones
            .iter()
            .position(|(first, n)| bg >= *first && bg < first.saturating_add(*n))
            .and_then(|z| u32::try_from(z).ok())
    }

    /// Slots per transaction (the journal's slots).
    fn slots(&self) -> u64 {
        self.fs.journal_slots()
    }
}
