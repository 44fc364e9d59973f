//! The one error type of the core: a small `Copy` value with a kind, the field it is about
//! and the absolute byte offset of that field.

use core::fmt;

/// Result alias used throughout the core.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// What went wrong, with the values needed to explain it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ErrorKind {
    /// The structure needs bytes up to `needed` (exclusive end offset) but only
    /// `available` exist.
    Truncated {
        /// End offset the structure needs.
        needed: u64,
        /// Bytes actually present.
        available: u64,
    },
    /// A 4-byte magic did not match.
    BadMagic {
        /// The magic the field must hold.
        expected: [u8; 4],
        /// What the file holds.
        found: [u8; 4],
    },
    /// A version we do not implement.
    Unsupported {
        /// The version found.
        version: u64,
    },
    /// A value outside its legal range `min ..= max`.
    OutOfRange {
        /// The value found.
        value: u64,
        /// Largest legal value.
        max: u64,
    },
    /// A value that must equal a derived one.
    Mismatch {
        /// The value the rest of the file implies.
        expected: u64,
        /// The value stored.
        found: u64,
    },
    /// A value that must be nonzero is zero.
    Zero,
    /// A value that must be odd and at least `min` is not.
    OddAtLeast {
        /// The value found.
        value: u64,
        /// Smallest legal value.
        min: u64,
    },
    /// A reserved field or padding that must be zero.
    NonZero {
        /// The value found.
        value: u64,
    },
    /// Undefined bits set in a flags field.
    UnknownFlags {
        /// The undefined bits that are set.
        bits: u64,
    },
    /// Required bits of a flags field (feature bits, bitmap padding) are clear.
    MissingFlags {
        /// The required bits that are clear.
        bits: u64,
    },
    /// Arithmetic on file values overflowed `u64` (or `usize` on this target).
    Overflow,
    /// A name that is not UTF-8.
    InvalidUtf8 {
        /// Length of the valid prefix.
        valid_up_to: u64,
    },
    /// A byte span overlapping another span that starts at `other`.
    Overlap {
        /// Absolute byte offset of the span this one overlaps, or, when that span is not
        /// bytes of the image (a file's logical blocks, a queue's block range), of the
        /// entry that describes it.
        other: u64,
    },
    /// A grid cell that no index row covers.
    Missing,
    /// Something that must be unique (a grid cell's index row, a name, a key, a node or
    /// transaction id) appears again; `first` locates the earlier occurrence.
    Duplicate {
        /// Absolute byte offset of the earlier row or entry.
        first: u64,
    },
    /// A looked-up name or coordinate that does not exist.
    NotFound,
    /// A stored checksum differs from the computed one.
    ChecksumMismatch {
        /// Checksum stored in the file.
        stored: u64,
        /// Checksum computed over the bytes.
        computed: u64,
    },
    /// A walk over linked or variable data stopped after `budget` steps (block reads):
    /// a valid image never needs more, so the image is corrupt (overlapping extents, a
    /// loop).
    Exhausted {
        /// The steps the walk may take.
        budget: u64,
    },
    /// The memory the caller granted (a scratch table, a memory limit, or an allocation
    /// that failed) is too small for the work: the file may be fine, the run could not
    /// finish. Units as the `what` of the error says (bytes, words or table entries).
    Budget {
        /// Units required.
        needed: u64,
        /// Units granted.
        available: u64,
    },
    /// A caller-owned output buffer is too small for the value asked for.
    BufferTooSmall {
        /// Units (bytes or words, see the function) required.
        needed: u64,
        /// Units supplied.
        available: u64,
    },
    /// `len` bytes that no structure references.
    Unreferenced {
        /// How many bytes.
        len: u64,
    },
    /// `count` blocks the field is wrong about, the first at the error's offset (a
    /// bitmap's bits set for blocks nothing owns, or clear for owned ones).
    Blocks {
        /// How many blocks.
        count: u64,
    },
    /// The device is shorter than the filesystem on it: `device_blocks` blocks hold a
    /// filesystem of `total_blocks` (an image file cut short). A mount refuses it
    /// (`docs/cetrafs.md` section 2, check 3); read-only tools may open it anyway and
    /// then meet [`ErrorKind::PastEnd`] for what is missing.
    ShortDevice {
        /// Blocks the device holds.
        device_blocks: u64,
        /// Blocks the filesystem needs (`superblock.total_blocks`).
        total_blocks: u64,
    },
    /// A read of block `block`, which lies at or past the end of a device of `blocks`
    /// blocks.
    PastEnd {
        /// The block asked for.
        block: u64,
        /// Blocks the device holds.
        blocks: u64,
    },
    /// The data is valid but describes something this build cannot represent.
    Invalid,
    /// The underlying device or reader failed.
    Io,
}

/// Coarse grouping of kinds, for exit codes and repair decisions. The CLI exits with 4
/// for [`Category::Truncated`], [`Category::Corrupt`] and [`Category::Incompatible`],
/// with 8 for [`Category::Unsatisfiable`] and the operational [`Category::Resource`] and
/// [`Category::Io`], and with 16 for [`Category::Usage`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Category {
    /// The input ends before a structure does.
    Truncated,
    /// The bytes contradict the format.
    Corrupt,
    /// Valid, but a version or feature this build does not implement.
    Incompatible,
    /// The caller's request or buffers, not the file, are at fault.
    Usage,
    /// The input is sound and the request well formed, but the data cannot satisfy it:
    /// a name or path that does not exist, a reduction with no element, a result that
    /// does not fit its type.
    Unsatisfiable,
    /// The memory granted to the run ([`ErrorKind::Budget`]) is too small: an
    /// operational condition like [`Category::Io`] (the CLI exits with 8 for both), not a
    /// fault of the file or of the request.
    Resource,
    /// Reading or writing failed, or the operation was refused for a reason outside the
    /// data (a live node's journal, another replayer's claim).
    Io,
}

impl ErrorKind {
    /// The category this kind belongs to.
    pub fn category(&self) -> Category {
        match self {
            ErrorKind::Truncated { .. }
            | ErrorKind::ShortDevice { .. }
            | ErrorKind::PastEnd { .. } => Category::Truncated,
            ErrorKind::Unsupported { .. } => Category::Incompatible,
            ErrorKind::BufferTooSmall { .. } => Category::Usage,
            ErrorKind::NotFound => Category::Unsatisfiable,
            ErrorKind::Budget { .. } => Category::Resource,
            ErrorKind::Io => Category::Io,
            _ => Category::Corrupt,
        }
    }
}

/// An error: its kind, the spec field it concerns (`"tidx.entry.payload_offset"`), and
/// the absolute byte offset of that field in the file or image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Error {
    /// What went wrong.
    pub kind: ErrorKind,
    /// The field, named as in `docs/`.
    pub what: &'static str,
    /// Absolute byte offset of the field.
    pub offset: u64,
}

impl Error {
    /// Builds an error.
    pub const fn new(kind: ErrorKind, what: &'static str, offset: u64) -> Self {
        Error { kind, what, offset }
    }
}

impl Category {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Category::Truncated => "truncated",
            Category::Corrupt => "corrupt",
            Category::Incompatible => "incompatible",
            Category::Usage => "usage",
            Category::Unsatisfiable => "unsatisfiable",
            Category::Resource => "resource",
            Category::Io => "io",
        }
    }
}

/// The smallest error: only the [`Category`] of what went wrong, in one byte.
///
/// The cetrafs read path is generic over its error type (`Fs<D, E = Error>`): with
/// `Fs<D, Fault>` every check still runs, but a failure reports only whether the image
/// is truncated, corrupt, incompatible, misused, short of memory or unreadable. A bootloader that can
/// only refuse to boot does not need more, and building and passing on the field name,
/// offset and values of [`Error`] is most of its code: on a Cortex-M3, `boot_cetrafs`
/// is 22 KB with `Error` and 15 KB with `Fault` (`docs/firmware.md`). Host tools, and
/// firmware that logs, keep `Error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Fault(pub Category);

impl From<Error> for Fault {
    fn from(e: Error) -> Fault {
        Fault(e.kind.category())
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

impl core::error::Error for Fault {}

struct Magic<'a>(&'a [u8; 4]);

impl fmt::Display for Magic<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
            for b in self.0 {
                write!(f, "{}", char::from(*b))?;
            }
            Ok(())
        } else {
            write!(
                f,
                "{:02x} {:02x} {:02x} {:02x}",
                self.0[0], self.0[1], self.0[2], self.0[3]
            )
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ErrorKind::Truncated { needed, available } => write!(
                f,
                "needs bytes up to offset {needed} but only {available} are present"
            ),
            ErrorKind::BadMagic { expected, found } => write!(
                f,
                "magic is '{}', expected '{}'",
                Magic(&found),
                Magic(&expected)
            ),
            ErrorKind::Unsupported { version } => write!(f, "version {version} is not supported"),
            ErrorKind::OutOfRange { value, max } => {
                write!(f, "value {value} is out of range (maximum {max})")
            }
            ErrorKind::Mismatch { expected, found } => {
                write!(f, "is {found}, expected {expected}")
            }
            ErrorKind::Zero => write!(f, "must be nonzero, is 0"),
            ErrorKind::OddAtLeast { value, min } => {
                write!(f, "must be odd and at least {min}, is {value}")
            }
            ErrorKind::NonZero { value } => write!(f, "must be zero, is {value:#x}"),
            ErrorKind::UnknownFlags { bits } => write!(f, "has undefined bits {bits:#x} set"),
            ErrorKind::MissingFlags { bits } => write!(f, "has required bits {bits:#x} clear"),
            ErrorKind::Overflow => write!(f, "arithmetic on this value overflows"),
            ErrorKind::InvalidUtf8 { valid_up_to } => {
                write!(f, "is not UTF-8 (valid for the first {valid_up_to} bytes)")
            }
            ErrorKind::Overlap { other } => {
                write!(f, "overlaps the span starting at byte {other:#x}")
            }
            ErrorKind::Missing => write!(f, "is missing"),
            ErrorKind::Duplicate { first } => {
                write!(f, "is already covered by the row at byte {first:#x}")
            }
            ErrorKind::NotFound => write!(f, "not found"),
            ErrorKind::ChecksumMismatch { stored, computed } => write!(
                f,
                "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            ErrorKind::Exhausted { budget } => {
                write!(f, "walk stopped after its budget of {budget} steps")
            }
            ErrorKind::Budget { needed, available } => write!(
                f,
                "memory budget too small: {needed} units needed, {available} granted"
            ),
            ErrorKind::BufferTooSmall { needed, available } => write!(
                f,
                "buffer too small: {needed} units needed, {available} supplied"
            ),
            ErrorKind::Unreferenced { len } => {
                write!(f, "starts {len} bytes that no structure references")
            }
            ErrorKind::Blocks { count } => write!(
                f,
                "{count} block{} of this group, the first one's bit here",
                if count == 1 { "" } else { "s" }
            ),
            ErrorKind::ShortDevice {
                device_blocks,
                total_blocks,
            } => write!(
                f,
                "the image is {device_blocks} blocks but the filesystem is {total_blocks}: \
                 was it truncated?"
            ),
            ErrorKind::PastEnd { block, blocks } => write!(
                f,
                "block {block} lies past the device's end (the device has {blocks} blocks)"
            ),
            ErrorKind::Invalid => write!(f, "is invalid"),
            ErrorKind::Io => write!(f, "could not be read"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (byte {:#x}) {}", self.what, self.offset, self.kind)
    }
}

impl core::error::Error for Error {}
