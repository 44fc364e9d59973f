//! Bounded decoding of chunk payloads.
//!
//! [`ChunkDecoder`] turns a checked [`Chunk`] into its `raw_byte_len` decoded bytes. Every
//! rule that does not depend on the zstd implementation is applied here, once, whatever the
//! backend: the memory budget (checked before anything is allocated), the frame header
//! (magic, reserved bit, window cap, declared content size, no dictionary), the exact
//! decoded length, bytes after the frame and the content checksum. A [`FrameBackend`]
//! only turns one validated frame into bytes; [`Ruzstd`] is the pure-Rust one that builds
//! for microcontrollers, and `tet-host` plugs in the reference C decoder.
//!
//! The output buffer lives in the decoder and is reused, so decoding many chunks allocates
//! only when a chunk is larger than every chunk before it.

use alloc::vec::Vec;
use core::fmt;

use tet_core::arith::u64_of;
use tet_core::tet::zstd::{parse_frame_header, FrameHeader, FRAME_MAGIC};
use tet_core::tet::{Chunk, Code, Codec, Coords, DType, DatasetId, ExecutionSettings, Finding};
use tet_core::{Category, Error, ErrorKind};

/// The memory budget a file's `TIDX` execution settings ask for on a host with
/// `host_ram` bytes of memory: `memory_budget_bytes` when nonzero, else
/// `memory_budget_percent_bps` (or the 25 % default when it is 0) of `host_ram`.
pub fn budget_from_settings(settings: ExecutionSettings, host_ram: u64) -> u64 {
    if settings.memory_budget_bytes != 0 {
        return u64::from(settings.memory_budget_bytes);
    }
    let bps = match settings.memory_budget_percent_bps {
        0 => ExecutionSettings::DEFAULT_PERCENT_BPS,
        b => b,
    };
    let scaled = u128::from(host_ram)
        .saturating_mul(u128::from(bps))
        .checked_div(10_000)
        .unwrap_or(0);
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

/// What went wrong decoding one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DecodeErrorKind {
    /// Decoding needs more memory than the budget allows. Operational, not corruption.
    OverBudget {
        /// Bytes the chunk needs (output plus the backend's working memory).
        needed: u64,
        /// The budget in force.
        budget: u64,
    },
    /// The allocator refused memory within the budget. Operational.
    OutOfMemory {
        /// Bytes asked for.
        needed: u64,
    },
    /// The frame header is malformed (`error` names the field) or the frame is
    /// truncated or corrupt.
    Frame(Error),
    /// The window the frame declares exceeds the cap.
    Window(Error),
    /// The frame declares a content size other than `raw_byte_len`.
    ContentSize {
        /// `Frame_Content_Size`.
        declared: u64,
    },
    /// The frame decodes to more than `raw_byte_len` bytes.
    TooLong,
    /// The frame decodes to fewer bytes than `raw_byte_len`.
    TooShort {
        /// Bytes the frame produced.
        decoded: u64,
    },
    /// The content checksum does not match.
    Checksum {
        /// The 4 bytes stored after the last block.
        stored: u32,
        /// The low 32 bits of XXH64 over the decoded bytes.
        computed: u32,
    },
    /// `len` bytes follow the frame inside the stored span.
    Trailing {
        /// How many.
        len: u64,
    },
    /// The stored bytes do not match the CRC-32C the file's chunk checksum table records
    /// for the row ([`Chunk::checksum`]): raw payloads, and frames without a content
    /// checksum of their own.
    ChunkChecksum {
        /// The CRC-32C in the table (widened, as [`ErrorKind::ChecksumMismatch`] holds it).
        stored: u64,
        /// The CRC-32C of the stored bytes.
        computed: u64,
    },
}

/// A decode failure, located.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DecodeError {
    /// What failed.
    pub kind: DecodeErrorKind,
    /// The chunk's dataset.
    pub dataset: DatasetId,
    /// The chunk's grid coordinates.
    pub coords: Coords,
    /// The chunk's index row.
    pub row: u64,
    /// Absolute offset of the payload's first byte.
    pub payload_offset: u64,
    /// `raw_byte_len` of the row.
    pub raw_byte_len: u64,
}

impl DecodeError {
    /// The category, for exit codes: a budget or allocator failure is operational
    /// ([`Category::Resource`]), everything else is the file's corruption.
    pub fn category(&self) -> Category {
        if self.is_operational() {
            Category::Resource
        } else {
            Category::Corrupt
        }
    }

    /// Whether the failure says nothing about the file (budget or allocator): report it
    /// as an operational error, never as a finding, and never repair the chunk.
    pub fn is_operational(&self) -> bool {
        matches!(
            self.kind,
            DecodeErrorKind::OverBudget { .. } | DecodeErrorKind::OutOfMemory { .. }
        )
    }

    /// The finding code, for failures that are corruption.
    pub fn code(&self) -> Option<Code> {
        Some(match self.kind {
            DecodeErrorKind::OverBudget { .. } | DecodeErrorKind::OutOfMemory { .. } => {
                return None
            }
            DecodeErrorKind::Frame(_) => Code::ZstdFrame,
            DecodeErrorKind::Window(_) => Code::ZstdWindow,
            DecodeErrorKind::ContentSize { .. }
            | DecodeErrorKind::TooLong
            | DecodeErrorKind::TooShort { .. } => Code::DecodedLength,
            DecodeErrorKind::Checksum { .. } => Code::ContentChecksum,
            DecodeErrorKind::Trailing { .. } => Code::ZstdTrailing,
            DecodeErrorKind::ChunkChecksum { .. } => Code::ChunkChecksum,
        })
    }

    /// The finding for a corruption failure (with dataset, row and coordinates).
    pub fn finding(&self) -> Option<Finding> {
        let code = self.code()?;
        let at = self.payload_offset;
        let raw = self.raw_byte_len;
        let error = match self.kind {
            DecodeErrorKind::Frame(e) | DecodeErrorKind::Window(e) => e,
            DecodeErrorKind::ContentSize { declared } => Error::new(
                ErrorKind::Mismatch {
                    expected: raw,
                    found: declared,
                },
                "zstd.frame_content_size",
                at,
            ),
            DecodeErrorKind::TooLong => Error::new(
                ErrorKind::OutOfRange {
                    value: raw.saturating_add(1),
                    max: raw,
                },
                "zstd decoded length",
                at,
            ),
            DecodeErrorKind::TooShort { decoded } => Error::new(
                ErrorKind::Mismatch {
                    expected: raw,
                    found: decoded,
                },
                "zstd decoded length",
                at,
            ),
            DecodeErrorKind::Checksum { stored, computed } => Error::new(
                ErrorKind::ChecksumMismatch {
                    stored: stored.into(),
                    computed: computed.into(),
                },
                "zstd.content_checksum",
                at,
            ),
            DecodeErrorKind::Trailing { len } => {
                Error::new(ErrorKind::Unreferenced { len }, "zstd trailing bytes", at)
            }
            DecodeErrorKind::ChunkChecksum { stored, computed } => Error::new(
                ErrorKind::ChecksumMismatch { stored, computed },
                "chunk payload",
                at,
            ),
            DecodeErrorKind::OverBudget { .. } | DecodeErrorKind::OutOfMemory { .. } => {
                return None
            }
        };
        Some(
            Finding::new(code, error)
                .in_dataset(self.dataset.0)
                .at_row(self.row)
                .at_coords(self.coords),
        )
    }
}

/// A [`DecodeError`] shown with its dataset's name ([`DecodeError::named`]).
pub struct Named<'e> {
    error: &'e DecodeError,
    name: &'e str,
}

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.write(f, Some(self.name))
    }
}

impl DecodeError {
    /// The error's text with the dataset named: `dataset 0 'temperature' chunk (1, 0)
    /// (tidx row 1, payload at byte 0x540): ...`.
    pub fn named<'e>(&'e self, name: &'e str) -> Named<'e> {
        Named { error: self, name }
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, name: Option<&str>) -> fmt::Result {
        write!(f, "dataset {}", self.dataset.0)?;
        if let Some(n) = name {
            write!(f, " '{n}'")?;
        }
        write!(
            f,
            " chunk {} (tidx row {}, payload at byte {:#x}): ",
            self.coords, self.row, self.payload_offset
        )?;
        match self.kind {
            DecodeErrorKind::OverBudget { needed, budget } => write!(
                f,
                "decoding needs {needed} bytes, over the memory budget of {budget} bytes"
            ),
            DecodeErrorKind::OutOfMemory { needed } => {
                write!(f, "could not allocate {needed} bytes to decode")
            }
            DecodeErrorKind::Frame(e) | DecodeErrorKind::Window(e) => write!(f, "{e}"),
            DecodeErrorKind::ContentSize { declared } => write!(
                f,
                "frame declares {declared} bytes, raw_byte_len is {}",
                self.raw_byte_len
            ),
            DecodeErrorKind::TooLong => write!(
                f,
                "frame decodes to more than raw_byte_len = {} bytes",
                self.raw_byte_len
            ),
            DecodeErrorKind::TooShort { decoded } => write!(
                f,
                "frame decodes to {decoded} bytes, raw_byte_len is {}",
                self.raw_byte_len
            ),
            DecodeErrorKind::Checksum { stored, computed } => write!(
                f,
                "content checksum stored {stored:#010x}, computed {computed:#010x}"
            ),
            DecodeErrorKind::Trailing { len } => {
                write!(f, "{len} bytes follow the frame inside the stored span")
            }
            DecodeErrorKind::ChunkChecksum { stored, computed } => write!(
                f,
                "the stored bytes do not match their checksum: the file's chunk checksum \
                 table records CRC-32C {stored:#010x}, the bytes give {computed:#010x}"
            ),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, None)
    }
}

/// How a backend's decode of one frame ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Decoded {
    /// Bytes of the span the frame occupied (header, blocks, checksum).
    pub consumed: u64,
    /// Bytes written to the output.
    pub written: u64,
}

/// Why a backend could not decode a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BackendError {
    /// Corrupt or truncated; `at` is the offset inside the span where it was noticed
    /// (0 when the backend cannot tell).
    Corrupt {
        /// Offset inside the stored span.
        at: u64,
    },
    /// The output would exceed the buffer (`raw_byte_len`).
    TooLong,
}

/// One zstd implementation. The caller has checked the header (magic, no dictionary,
/// window within the cap, content size equal to the output length when declared).
pub trait FrameBackend {
    /// Memory beyond the output buffer the backend may hold while decoding a frame into
    /// `raw_len` bytes, for the budget check.
    fn working_memory(&self, raw_len: u64) -> u64;

    /// Decodes the frame at the start of `span` into `out` (exactly `raw_byte_len` long)
    /// without verifying the content checksum (the caller does, the same way for every
    /// backend). Bytes after the frame are the caller's to judge: report how many were
    /// consumed.
    fn decode_frame(
        &mut self,
        span: &[u8],
        header: &FrameHeader,
        out: &mut [u8],
    ) -> Result<Decoded, BackendError>;

    /// A stricter backend to classify frames this one fails on (see
    /// [`ChunkDecoder::decode`]); `None` when this backend is the strict one.
    fn strict(&mut self) -> Option<&mut dyn FrameBackend> {
        None
    }
}

/// Decodes chunk payloads under a memory budget, reusing one output buffer.
pub struct ChunkDecoder<B: FrameBackend = Ruzstd> {
    backend: B,
    budget: u64,
    buf: Vec<u8>,
    /// The masked copy of a tile ([`ChunkDecoder::decode_masked`]).
    masked: Vec<u8>,
}

/// How a dataset's missing-value markers (`_FillValue`, `missing_value`) change the
/// elements a reduction sees.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Mask {
    /// Elements equal to a marker become NaN, so the `nan_*` reductions skip them. An
    /// integer tile is first widened to `f64` ([`Mask::tile_dtype`]), as CF readers
    /// (xarray's `mask_and_scale`) decode a masked integer variable to floats.
    Missing(Markers),
    /// Every element becomes an indicator of the markers: NaN (floats) or 1 (integers)
    /// where the element is a marker, 0 elsewhere, so `nan_count` (floats) or `sum`
    /// (integers) counts the missing elements (`null_count`).
    Indicator(Markers),
    /// CF decoding of a packed dataset (xarray's `mask_and_scale`): every element
    /// widened to `f64`, NaN where it is a marker (compared in the stored precision,
    /// before scaling: CF markers are packed values), else `v * scale_factor +
    /// add_offset`.
    Unpack(Unpack),
}

/// What [`Mask::Unpack`] applies.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Unpack {
    /// The missing-value markers, if any.
    pub markers: Option<Markers>,
    /// `scale_factor` (1 when absent).
    pub scale: f64,
    /// `add_offset` (0 when absent).
    pub offset: f64,
}

impl Mask {
    /// The element type of a masked tile of a `stored` dataset: `f64` for an integer
    /// dataset under [`Mask::Missing`] and for every dataset under [`Mask::Unpack`],
    /// else `stored`.
    pub fn tile_dtype(self, stored: DType) -> DType {
        match self {
            Mask::Missing(_) if !stored.is_float() => DType::F64,
            Mask::Unpack(_) => DType::F64,
            _ => stored,
        }
    }
}

/// A missing-value marker: its value as a float and, when its text is an integer, exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Marker {
    /// The value (NaN: NaN elements are the missing ones).
    pub float: f64,
    /// The value as an exact integer, for integer elements.
    pub int: Option<i128>,
}

impl Marker {
    /// The marker written as `text` (decimal, `nan`, `inf`).
    pub fn parse(text: &str) -> Option<Marker> {
        let float = crate::tet::meta::parse_number(text)?;
        Some(Marker {
            float,
            int: text.trim().parse::<i128>().ok(),
        })
    }

    /// Whether `m` marks the same elements (NaN is one marker, however written).
    fn same(&self, m: Marker) -> bool {
        let float = self.float == m.float || (self.float.is_nan() && m.float.is_nan());
        float && self.int == m.int
    }

    fn is_float(&self, v: f64) -> bool {
        if self.float.is_nan() {
            v.is_nan()
        } else {
            v == self.float
        }
    }

    fn is_int(&self, v: i128) -> bool {
        match self.int {
            Some(i) => i == v,
            None => crate::tet::meta::int_f64(v) == self.float,
        }
    }

    /// The marker as an element of a float dataset stores it: rounded to the element
    /// type, as NumPy compares `a == 1e20` for a float32 `a` (1e20 is not a float32; the
    /// float32 nearest it is what a fill of 1e20 stores).
    fn in_precision(self, dtype: DType) -> Marker {
        let float = match dtype {
            DType::F16 => half::f16::from_f64(self.float).to_f64(),
            DType::F32 => f64::from(nearest_f32(self.float)),
            _ => self.float,
        };
        Marker { float, int: None }
    }
}

/// The most values a `missing_value` list may hold (CF allows a list; xarray masks with
/// every value of it). With `_FillValue`, a dataset marks with at most [`MAX_MARKERS`]
/// values.
pub const MAX_MISSING_VALUES: usize = 8;

/// The most markers [`Markers`] holds: `_FillValue` and a `missing_value` list of
/// [`MAX_MISSING_VALUES`].
pub const MAX_MARKERS: usize = MAX_MISSING_VALUES + 1;

/// The slot value of an unused [`Markers`] entry.
const NO_MARKER: Marker = Marker {
    float: 0.0,
    int: None,
};

/// The missing-value markers of a dataset: `_FillValue`, `missing_value` and every value
/// of a `missing_value` list (CF: each marks an element missing), at most
/// [`MAX_MARKERS`], each once. A small fixed array, so it is `Copy` and the fold loops
/// look through a few values in place.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Markers {
    /// The markers, the first `len` in use, in the order the attrs give them.
    slots: [Marker; MAX_MARKERS],
    /// How many slots are in use (at least 1).
    len: u8,
}

impl PartialEq for Markers {
    fn eq(&self, other: &Markers) -> bool {
        self.live() == other.live()
    }
}

impl From<Marker> for Markers {
    fn from(m: Marker) -> Markers {
        let mut slots = [NO_MARKER; MAX_MARKERS];
        if let Some(s) = slots.first_mut() {
            *s = m;
        }
        Markers { slots, len: 1 }
    }
}

impl Markers {
    /// These markers and `m` (unchanged when `m` is one of them already); `None` when
    /// [`MAX_MARKERS`] are held and `m` is another.
    pub fn with(mut self, m: Marker) -> Option<Markers> {
        if self.iter().any(|have| have.same(m)) {
            return Some(self);
        }
        let slot = self.slots.get_mut(usize::from(self.len))?;
        *slot = m;
        self.len = self.len.saturating_add(1);
        Some(self)
    }

    /// The markers in use.
    fn live(&self) -> &[Marker] {
        self.slots.get(..usize::from(self.len)).unwrap_or_default()
    }

    /// How many markers there are (1 to [`MAX_MARKERS`]).
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there are none (never, as built: kept for the `len` convention).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The markers, first first.
    pub fn iter(&self) -> impl Iterator<Item = Marker> + '_ {
        self.live().iter().copied()
    }

    /// Whether every marker is NaN (a float dataset's NaNs are missing already).
    pub fn only_nan(&self) -> bool {
        self.iter().all(|m| m.float.is_nan())
    }

    fn in_precision(mut self, dtype: DType) -> Markers {
        for m in self.slots.iter_mut() {
            *m = m.in_precision(dtype);
        }
        self
    }

    fn hit_float(&self, v: f64) -> bool {
        self.live().iter().any(|m| m.is_float(v))
    }

    fn hit_int(&self, v: i128) -> bool {
        self.live().iter().any(|m| m.is_int(v))
    }
}

/// The `f32` nearest `v` (ties to even; beyond the range, ±infinity): one rounding of an
/// `f64` value, as a float32 array stores a value written in decimal or computed in `f64`.
#[allow(
    clippy::as_conversions,
    reason = "f64 to f32 with `as` rounds to nearest, which is the rounding wanted"
)]
pub(crate) fn nearest_f32(v: f64) -> f32 {
    v as f32
}

/// An integer as the nearest `f64` (exact up to 2^53), as NumPy's `astype(float64)`.
#[allow(
    clippy::as_conversions,
    clippy::cast_precision_loss,
    reason = "integer to f64 with `as` rounds to nearest, which is the rounding wanted"
)]
fn int_to_f64(v: i128) -> f64 {
    v as f64
}

/// Calls `f` with each element of an integer `tile` of `dtype` as an `i128`, in order.
fn each_int(tile: &[u8], dtype: DType, mut f: impl FnMut(i128)) {
    macro_rules! ints {
        ($t:ty, $n:literal) => {
            for e in tile.chunks_exact($n) {
                if let Ok(b) = <[u8; $n]>::try_from(e) {
                    f(i128::from(<$t>::from_le_bytes(b)));
                }
            }
        };
    }
    match dtype {
        DType::U8 => ints!(u8, 1),
        DType::U16 => ints!(u16, 2),
        DType::U32 => ints!(u32, 4),
        DType::U64 => ints!(u64, 8),
        DType::I16 => ints!(i16, 2),
        DType::I32 => ints!(i32, 4),
        DType::I64 => ints!(i64, 8),
        DType::F16 | DType::F32 | DType::F64 => {}
    }
}

/// Writes the masked copy of `tile` (of `dtype`) into `out` (cleared first): the
/// elements as [`Mask`] describes them, in the [`Mask::tile_dtype`] element type.
fn apply_mask(tile: &[u8], dtype: DType, mask: Mask, out: &mut Vec<u8>) {
    out.clear();
    let (markers, indicator) = match mask {
        Mask::Missing(m) => (m, false),
        Mask::Indicator(m) => (m, true),
        Mask::Unpack(u) => return unpack(tile, dtype, u, out),
    };
    if !dtype.is_float() {
        if indicator {
            out.extend_from_slice(tile);
            let n = usize::try_from(dtype.size()).unwrap_or(1);
            let mut k = 0usize;
            each_int(tile, dtype, |v| {
                let hit = u8::from(markers.hit_int(v));
                if let Some(e) = out.get_mut(k..k.saturating_add(n)) {
                    e.fill(0);
                    // Little-endian: the low byte first.
                    if let Some(low) = e.first_mut() {
                        *low = hit;
                    }
                }
                k = k.saturating_add(n);
            });
        } else {
            each_int(tile, dtype, |v| {
                let x = if markers.hit_int(v) {
                    f64::NAN
                } else {
                    int_to_f64(v)
                };
                out.extend_from_slice(&x.to_le_bytes());
            });
        }
        return;
    }
    out.extend_from_slice(tile);
    let targets = markers.in_precision(dtype);
    macro_rules! floats {
        ($t:ty, $n:literal, $to:expr, $nan:expr, $zero:expr) => {{
            for e in out.chunks_exact_mut($n) {
                let Ok(b) = <[u8; $n]>::try_from(&*e) else {
                    continue;
                };
                let v = <$t>::from_le_bytes(b);
                let hit = targets.hit_float($to(v));
                let o = match (hit, indicator) {
                    (true, _) => Some($nan),
                    (false, true) => Some($zero),
                    (false, false) => None,
                };
                if let Some(o) = o {
                    e.copy_from_slice(&<$t>::to_le_bytes(o));
                }
            }
        }};
    }
    match dtype {
        DType::F16 => floats!(
            half::f16,
            2,
            |v: half::f16| v.to_f64(),
            half::f16::NAN,
            half::f16::ZERO
        ),
        DType::F32 => floats!(f32, 4, f64::from, f32::NAN, 0.0f32),
        _ => floats!(f64, 8, |v: f64| v, f64::NAN, 0.0f64),
    }
}

/// An attribute of CF decoding (`_FillValue`, `missing_value`, `scale_factor`,
/// `add_offset`) whose text is not the number it must be.
#[derive(Clone, Debug, PartialEq)]
pub struct CfError {
    /// The attribute.
    pub key: &'static str,
    /// Its text.
    pub text: alloc::string::String,
    /// What it must be ("a number", "a finite number").
    pub must_be: &'static str,
}

impl fmt::Display for CfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "attr {} = {:?} is not {}",
            self.key, self.text, self.must_be
        )
    }
}

/// The attrs whose values mark missing elements, in the order [`cf_markers`] reads them:
/// `_FillValue` (one number), `missing_value` (one number, or a list, as a Zarr store's
/// attributes give it) and `missing_value_list` (the list a NetCDF or HDF5
/// `missing_value` held, which `convert` keeps beside its first value).
pub const MARKER_KEYS: [&str; 3] = ["_FillValue", "missing_value", "missing_value_list"];

/// What [`CfError::must_be`] says of a list longer than [`Markers`] holds.
const TOO_MANY: &str =
    "a list .tet can mark with (at most 9 distinct markers, _FillValue and missing_value together)";

/// The values a marker attr's `text` holds: each item of a list (`[-1, -2]`), else the
/// text itself. Only `missing_value` and `missing_value_list` may be lists.
pub fn marker_texts<'a>(key: &str, text: &'a str) -> impl Iterator<Item = &'a str> {
    let t = text.trim();
    let inner = t
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .filter(|_| key != "_FillValue");
    let one = match inner {
        Some(_) => None,
        None => Some(t),
    };
    inner
        .into_iter()
        .flat_map(|i| i.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .chain(one)
}

/// The missing-value markers of a dataset whose attrs are `attr`: every value of
/// [`MARKER_KEYS`] marks (CF: `_FillValue` and each `missing_value`), each once; `None`
/// when it has none. A list of more values than [`Markers`] holds is refused, naming the
/// attr.
pub fn cf_markers<'a>(attr: impl Fn(&str) -> Option<&'a str>) -> Result<Option<Markers>, CfError> {
    let mut markers: Option<Markers> = None;
    each_cf_marker(attr, |key, text, m| {
        markers = Some(match markers {
            None => Markers::from(m),
            Some(have) => have.with(m).ok_or_else(|| CfError {
                key,
                text: text.into(),
                must_be: TOO_MANY,
            })?,
        });
        Ok(())
    })?;
    Ok(markers)
}

/// Every missing-value marker of a dataset whose attrs are `attr`, as [`cf_markers`]
/// finds them, each once, without its limit: `convert --unpack` masks a longer
/// `missing_value` list with [`CfDecode::extra`].
pub fn cf_marker_list<'a>(attr: impl Fn(&str) -> Option<&'a str>) -> Result<Vec<Marker>, CfError> {
    let mut all: Vec<Marker> = Vec::new();
    each_cf_marker(attr, |_, _, m| {
        if !all.iter().any(|have| have.same(m)) {
            all.push(m);
        }
        Ok(())
    })?;
    Ok(all)
}

/// Calls `f(key, text, marker)` for each value of each [`MARKER_KEYS`] attr in turn; a
/// value that is not a number is refused, naming the attr.
fn each_cf_marker<'a>(
    attr: impl Fn(&str) -> Option<&'a str>,
    mut f: impl FnMut(&'static str, &str, Marker) -> Result<(), CfError>,
) -> Result<(), CfError> {
    for key in MARKER_KEYS {
        let Some(text) = attr(key) else { continue };
        for item in marker_texts(key, text) {
            let m = Marker::parse(item).ok_or_else(|| CfError {
                key,
                text: text.into(),
                must_be: if key == "_FillValue" {
                    "a number"
                } else {
                    "a number or a list of numbers"
                },
            })?;
            f(key, text, m)?;
        }
    }
    Ok(())
}

/// Calls `hit(i)` for each element `i` of `tile` (little-endian elements of `dtype`)
/// equal to one of `markers`, compared as [`Markers`] compares them: an integer marker
/// exactly, a float one in the element type's precision, NaN with every NaN.
pub fn each_marked(tile: &[u8], dtype: DType, markers: &[Marker], mut hit: impl FnMut(usize)) {
    let mut i = 0usize;
    if !dtype.is_float() {
        each_int(tile, dtype, |v| {
            if markers.iter().any(|m| m.is_int(v)) {
                hit(i);
            }
            i = i.saturating_add(1);
        });
        return;
    }
    let targets: Vec<Marker> = markers.iter().map(|m| m.in_precision(dtype)).collect();
    let mut one = |v: f64| {
        if targets.iter().any(|m| m.is_float(v)) {
            hit(i);
        }
        i = i.saturating_add(1);
    };
    macro_rules! floats {
        ($t:ty, $n:literal, $to:expr) => {
            for e in tile.chunks_exact($n) {
                if let Ok(b) = <[u8; $n]>::try_from(e) {
                    one($to(<$t>::from_le_bytes(b)));
                }
            }
        };
    }
    match dtype {
        DType::F16 => floats!(half::f16, 2, |v: half::f16| v.to_f64()),
        DType::F32 => floats!(f32, 4, f64::from),
        _ => floats!(f64, 8, |v: f64| v),
    }
}

/// The CF packing of a dataset whose attrs are `attr`: `(scale_factor, add_offset)`,
/// 1 and 0 for the one absent; `None` when it has neither.
pub fn cf_packing<'a>(
    attr: impl Fn(&str) -> Option<&'a str>,
) -> Result<Option<(f64, f64)>, CfError> {
    if attr("scale_factor").is_none() && attr("add_offset").is_none() {
        return Ok(None);
    }
    let num = |key: &'static str, default: f64| match attr(key) {
        None => Ok(default),
        Some(t) => crate::tet::meta::parse_number(t)
            .filter(|v| v.is_finite())
            .ok_or_else(|| CfError {
                key,
                text: t.into(),
                must_be: "a finite number",
            }),
    };
    Ok(Some((num("scale_factor", 1.0)?, num("add_offset", 0.0)?)))
}

/// CF decoding of a whole dataset into floats, as xarray's `decode_cf` reads a packed or
/// marked variable: the elements through [`Mask::Unpack`] or [`Mask::Missing`], stored
/// as [`CfDecode::to`].
#[derive(Clone, Debug, PartialEq)]
pub struct CfDecode {
    /// What is applied to each element.
    pub mask: Mask,
    /// The decoded type: the type of `scale_factor`/`add_offset` when the source says it
    /// (`packed_as`), else `f32` for integers of at most 16 bits and `f64` for wider ones;
    /// a float dataset that is only marked keeps its type (NaN at the markers).
    pub to: DType,
    /// The markers past the [`MAX_MARKERS`] that `mask` holds (a long `missing_value`
    /// list): each element equal to one is NaN too, set by a pass of its own
    /// ([`each_marked`]).
    pub extra: Vec<Marker>,
}

impl CfDecode {
    /// The decoding of a `stored` dataset with attrs `attr`; `packed_as` is the float type
    /// its `scale_factor`/`add_offset` were written in, when the source knows it. `None`
    /// when there is nothing to decode.
    pub fn of<'a>(
        stored: DType,
        attr: impl Fn(&str) -> Option<&'a str>,
        packed_as: Option<DType>,
    ) -> Result<Option<CfDecode>, CfError> {
        let all = cf_marker_list(&attr)?;
        let (held, extra) = all.split_at(all.len().min(MAX_MARKERS));
        let extra = extra.to_vec();
        let markers = held
            .iter()
            .try_fold(None::<Markers>, |m, &x| match m {
                None => Some(Some(Markers::from(x))),
                Some(have) => have.with(x).map(Some),
            })
            .flatten();
        let narrow = stored.size() <= 2;
        if let Some((scale, offset)) = cf_packing(&attr)? {
            let to = match packed_as {
                Some(t @ (DType::F32 | DType::F64)) => t,
                _ if narrow => DType::F32,
                _ => DType::F64,
            };
            let mask = Mask::Unpack(Unpack {
                markers,
                scale,
                offset,
            });
            return Ok(Some(CfDecode { mask, to, extra }));
        }
        let only_nan = |m: &Markers| stored.is_float() && m.only_nan() && extra.is_empty();
        let Some(m) = markers.filter(|m| !only_nan(m)) else {
            return Ok(None);
        };
        let to = match stored {
            DType::F16 | DType::F32 | DType::F64 => stored,
            _ if narrow => DType::F32,
            _ => DType::F64,
        };
        Ok(Some(CfDecode {
            mask: Mask::Missing(m),
            to,
            extra,
        }))
    }

    /// Decodes `tile` (elements of `stored`) into `out` (cleared first) as
    /// [`CfDecode::to`] elements; `scratch` holds the `f64` pass between.
    pub fn apply(&self, tile: &[u8], stored: DType, scratch: &mut Vec<u8>, out: &mut Vec<u8>) {
        apply_mask(tile, stored, self.mask, scratch);
        out.clear();
        let masked = self.mask.tile_dtype(stored);
        if masked == self.to {
            out.extend_from_slice(scratch);
        } else {
            // The masked tile is f64 here (an integer or an unpacked dataset); only f32
            // is narrower.
            for e in scratch.chunks_exact(8) {
                if let Ok(b) = <[u8; 8]>::try_from(e) {
                    out.extend_from_slice(&nearest_f32(f64::from_le_bytes(b)).to_le_bytes());
                }
            }
        }
        if self.extra.is_empty() {
            return;
        }
        let (nan16, nan32, nan64) = (
            half::f16::NAN.to_le_bytes(),
            f32::NAN.to_le_bytes(),
            f64::NAN.to_le_bytes(),
        );
        let nan: &[u8] = match self.to {
            DType::F16 => &nan16,
            DType::F32 => &nan32,
            _ => &nan64,
        };
        let size = nan.len();
        each_marked(tile, stored, &self.extra, |i| {
            let at = i
                .checked_mul(size)
                .and_then(|a| Some(a..a.checked_add(size)?));
            if let Some(e) = at.and_then(|r| out.get_mut(r)) {
                e.copy_from_slice(nan);
            }
        });
    }
}

/// [`Mask::Unpack`] of `tile` into `out` as `f64` elements.
fn unpack(tile: &[u8], dtype: DType, u: Unpack, out: &mut Vec<u8>) {
    let mut push = |v: f64| {
        let x = if v.is_nan() {
            v
        } else {
            v * u.scale + u.offset
        };
        out.extend_from_slice(&x.to_le_bytes());
    };
    if !dtype.is_float() {
        each_int(tile, dtype, |v| {
            if u.markers.is_some_and(|m| m.hit_int(v)) {
                push(f64::NAN);
            } else {
                push(int_to_f64(v));
            }
        });
        return;
    }
    let targets = u.markers.map(|m| m.in_precision(dtype));
    let hit = |v: f64| targets.is_some_and(|t| t.hit_float(v));
    macro_rules! floats {
        ($t:ty, $n:literal, $to:expr) => {
            for e in tile.chunks_exact($n) {
                if let Ok(b) = <[u8; $n]>::try_from(e) {
                    let v = $to(<$t>::from_le_bytes(b));
                    push(if hit(v) { f64::NAN } else { v });
                }
            }
        };
    }
    match dtype {
        DType::F16 => floats!(half::f16, 2, |v: half::f16| v.to_f64()),
        DType::F32 => floats!(f32, 4, f64::from),
        _ => floats!(f64, 8, |v: f64| v),
    }
}

impl<B: FrameBackend> ChunkDecoder<B> {
    /// A decoder that refuses chunks needing more than `budget` bytes.
    pub fn new(backend: B, budget: u64) -> Self {
        ChunkDecoder {
            backend,
            budget,
            buf: Vec::new(),
            masked: Vec::new(),
        }
    }

    /// [`ChunkDecoder::decode`], then `mask` applied to a copy of the tile (the copy
    /// counts against the budget with the decode).
    pub fn decode_masked<'s, 'a: 's>(
        &'s mut self,
        chunk: &Chunk<'a>,
        dtype: DType,
        mask: Mask,
    ) -> Result<&'s [u8], DecodeError> {
        let mut m = core::mem::take(&mut self.masked);
        let needed = self.memory_needed_masked(chunk.raw_byte_len, dtype, mask);
        if needed > self.budget {
            self.masked = m;
            return Err(DecodeError {
                kind: DecodeErrorKind::OverBudget {
                    needed,
                    budget: self.budget,
                },
                dataset: chunk.dataset,
                coords: chunk.coords,
                row: chunk.row,
                payload_offset: chunk.payload_offset,
                raw_byte_len: chunk.raw_byte_len,
            });
        }
        let r = self
            .decode(chunk)
            .map(|t| apply_mask(t, dtype, mask, &mut m));
        self.masked = m;
        r?;
        Ok(&self.masked)
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes of memory decoding `raw_len` bytes takes: the output plus the backend's
    /// working memory.
    pub fn memory_needed(&self, raw_len: u64) -> u64 {
        raw_len.saturating_add(self.backend.working_memory(raw_len))
    }

    /// [`ChunkDecoder::memory_needed`] plus the masked copy
    /// [`ChunkDecoder::decode_masked`] holds: as large as the tile, or 8 bytes an element
    /// when `mask` widens a `dtype` tile to `f64`.
    pub fn memory_needed_masked(&self, raw_len: u64, dtype: DType, mask: Mask) -> u64 {
        let copy = match mask.tile_dtype(dtype) {
            d if d == dtype => raw_len,
            d => raw_len
                .checked_div(dtype.size())
                .unwrap_or(0)
                .saturating_mul(d.size()),
        };
        self.memory_needed(raw_len).saturating_add(copy)
    }

    /// The chunk's decoded bytes: a raw payload as it is stored, a zstd payload decoded
    /// into the reused buffer.
    pub fn decode<'s, 'a: 's>(&'s mut self, chunk: &Chunk<'a>) -> Result<&'s [u8], DecodeError> {
        let located = |kind| DecodeError {
            kind,
            dataset: chunk.dataset,
            coords: chunk.coords,
            row: chunk.row,
            payload_offset: chunk.payload_offset,
            raw_byte_len: chunk.raw_byte_len,
        };
        // The table's CRC-32C speaks for a raw payload, and for a frame without a
        // content checksum of its own (checked after it decodes, below).
        let table = |chunk: &Chunk<'_>| match chunk.check_checksum() {
            Err(Error {
                kind: ErrorKind::ChecksumMismatch { stored, computed },
                ..
            }) => Some(DecodeErrorKind::ChunkChecksum { stored, computed }),
            _ => None,
        };
        if chunk.codec == Codec::Raw {
            return match table(chunk) {
                Some(kind) => Err(located(kind)),
                None => Ok(chunk.payload),
            };
        }
        let raw = chunk.raw_byte_len;
        let needed = self.memory_needed(raw);
        if needed > self.budget {
            return Err(located(DecodeErrorKind::OverBudget {
                needed,
                budget: self.budget,
            }));
        }
        let at = chunk.payload_offset;
        let span = chunk.payload;
        let header = parse_frame_header(span, at).map_err(|e| {
            located(match e.kind {
                ErrorKind::OutOfRange { .. } => DecodeErrorKind::Window(e),
                _ => DecodeErrorKind::Frame(e),
            })
        })?;
        if let Some(declared) = header.content_size.filter(|c| *c != raw) {
            return Err(located(DecodeErrorKind::ContentSize { declared }));
        }
        if header.dictionary_id.is_some() {
            return Err(located(DecodeErrorKind::Frame(Error::new(
                ErrorKind::Invalid,
                "zstd.dictionary_id",
                at.saturating_add(5),
            ))));
        }
        let len = usize::try_from(raw).map_err(|_| {
            located(DecodeErrorKind::OverBudget {
                needed,
                budget: self.budget,
            })
        })?;
        if self.buf.len() < len {
            let extra = len.saturating_sub(self.buf.len());
            self.buf
                .try_reserve_exact(extra)
                .map_err(|_| located(DecodeErrorKind::OutOfMemory { needed: raw }))?;
            self.buf.resize(len, 0);
        }
        let out = self.buf.get_mut(..len).unwrap_or_default();
        if let Err(kind) = check_frame(&mut self.backend, span, &header, at, out) {
            // A lenient backend's failure is classified by its strict second opinion, so
            // every backend names the same rule; if that one accepts, the first verdict
            // stands.
            let kind = match self.backend.strict() {
                Some(strict) => check_frame(strict, span, &header, at, out)
                    .err()
                    .unwrap_or(kind),
                None => kind,
            };
            return Err(located(kind));
        }
        if !header.has_checksum {
            if let Some(kind) = table(chunk) {
                return Err(located(kind));
            }
        }
        Ok(out)
    }
}

/// Decodes `span` into `out` with `backend` and applies the rules after decoding: exact
/// length, no trailing bytes, content checksum.
fn check_frame<B: FrameBackend + ?Sized>(
    backend: &mut B,
    span: &[u8],
    header: &FrameHeader,
    at: u64,
    out: &mut [u8],
) -> Result<(), DecodeErrorKind> {
    let raw = u64_of(out.len());
    let done = backend
        .decode_frame(span, header, out)
        .map_err(|e| match e {
            BackendError::TooLong => DecodeErrorKind::TooLong,
            BackendError::Corrupt { at: inner } => DecodeErrorKind::Frame(Error::new(
                ErrorKind::Invalid,
                "zstd.block",
                at.saturating_add(inner),
            )),
        })?;
    if done.written != raw {
        return Err(DecodeErrorKind::TooShort {
            decoded: done.written,
        });
    }
    let span_len = u64_of(span.len());
    if done.consumed < span_len {
        return Err(DecodeErrorKind::Trailing {
            len: span_len.saturating_sub(done.consumed),
        });
    }
    if header.has_checksum {
        let end = usize::try_from(done.consumed).unwrap_or(usize::MAX);
        let stored = end
            .checked_sub(4)
            .and_then(|s| span.get(s..end))
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes)
            .ok_or(DecodeErrorKind::Frame(Error::new(
                ErrorKind::Invalid,
                "zstd.content_checksum",
                at,
            )))?;
        let computed = content_checksum(out);
        if stored != computed {
            return Err(DecodeErrorKind::Checksum { stored, computed });
        }
    }
    Ok(())
}

/// The zstd content checksum: the low 32 bits of XXH64 (seed 0) of the content.
pub fn content_checksum(content: &[u8]) -> u32 {
    let h = twox_hash::XxHash64::oneshot(0, content);
    u32::try_from(h & 0xffff_ffff).unwrap_or(0)
}

/// The pure-Rust backend (ruzstd). Its state is kept between frames, so a long run of
/// chunks allocates its tables once.
#[derive(Default)]
pub struct Ruzstd {
    dec: ruzstd::decoding::FrameDecoder,
}

impl Ruzstd {
    /// A backend with no buffers yet.
    pub fn new() -> Self {
        Ruzstd::default()
    }
}

/// The frame as ruzstd sees it: a replacement header followed by the original blocks.
struct Chained<'a> {
    head: &'a [u8],
    tail: &'a [u8],
}

impl ruzstd::io::Read for Chained<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, ruzstd::io::Error> {
        let src = if self.head.is_empty() {
            &mut self.tail
        } else {
            &mut self.head
        };
        let n = src.len().min(buf.len());
        let (now, rest) = src.split_at(n);
        if let Some(dst) = buf.get_mut(..n) {
            dst.copy_from_slice(now);
        }
        *src = rest;
        Ok(n)
    }
}

/// The largest zstd block: 128 KiB, and never more than the window, which [`Ruzstd`]
/// sets to the output size.
const RUZSTD_BLOCK: u64 = 128 * 1024;
/// ruzstd's entropy tables (three FSE tables, a Huffman table, their repeats).
const RUZSTD_TABLES: u64 = 32 * 1024;

impl FrameBackend for Ruzstd {
    /// Working memory of the ruzstd backend beyond the output: its ring buffer holds
    /// the window, up to twice the output size once its capacity has doubled; per block
    /// (`b` = the block size bound) the literals (`b`), the compressed block (`b`) and
    /// the sequences (at most `b / 3` of 12 bytes, `4b`); and the tables. A small chunk
    /// therefore needs little: 47 KiB in all for a 1.6 KB tile, where the heap
    /// high-water mark of `tet_zstd_fold` (plan and output included) is about 20 KB.
    fn working_memory(&self, raw_len: u64) -> u64 {
        let block = raw_len.min(RUZSTD_BLOCK);
        raw_len
            .saturating_mul(2)
            .saturating_add(block.saturating_mul(6))
            .saturating_add(RUZSTD_TABLES)
    }

    fn decode_frame(
        &mut self,
        span: &[u8],
        header: &FrameHeader,
        out: &mut [u8],
    ) -> Result<Decoded, BackendError> {
        use ruzstd::decoding::BlockDecodingStrategy;
        use ruzstd::io::Read;
        // ruzstd keeps `window_size` bytes back while a frame is being decoded. A frame
        // that decodes to exactly `out.len()` bytes never needs more window than that, so
        // it is handed a single-segment header declaring the output size: the window (and
        // ruzstd's buffer) is then bounded by the output, whatever the frame claims.
        let mut head = [0u8; 13];
        let (magic, rest) = head.split_at_mut(4);
        magic.copy_from_slice(&FRAME_MAGIC);
        let (fhd, fcs) = rest.split_at_mut(1);
        let checksum = if header.has_checksum { 0x04 } else { 0 };
        if let Some(b) = fhd.first_mut() {
            *b = 0xc0 | 0x20 | checksum;
        }
        fcs.copy_from_slice(&u64_of(out.len()).to_le_bytes());
        let start = usize::try_from(header.header_len).unwrap_or(usize::MAX);
        let blocks = span.get(start..).ok_or(BackendError::Corrupt { at: 0 })?;
        let mut src = Chained {
            head: &head,
            tail: blocks,
        };
        let corrupt = |src: &Chained<'_>| BackendError::Corrupt {
            at: u64_of(span.len().saturating_sub(src.tail.len())),
        };
        self.dec.reset(&mut src).map_err(|_| corrupt(&src))?;
        loop {
            let finished = self
                .dec
                .decode_blocks(&mut src, BlockDecodingStrategy::UptoBlocks(1))
                .map_err(|_| corrupt(&src))?;
            if finished {
                break;
            }
            // Anything collectable before the end is past the window, i.e. past the
            // output size.
            if self.dec.can_collect() > 0 {
                return Err(BackendError::TooLong);
            }
        }
        if self.dec.can_collect() > out.len() {
            return Err(BackendError::TooLong);
        }
        let mut written = 0usize;
        while let Some(dst) = out.get_mut(written..).filter(|d| !d.is_empty()) {
            let n = self.dec.read(dst).map_err(|_| corrupt(&src))?;
            if n == 0 {
                break;
            }
            written = written.saturating_add(n);
        }
        Ok(Decoded {
            consumed: u64_of(span.len().saturating_sub(src.tail.len())),
            written: u64_of(written),
        })
    }
}

impl core::error::Error for DecodeError {}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn attrs<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
        move |k| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v)
    }

    /// A list longer than [`Markers`] holds decodes with every value marking (the ones
    /// past it in `extra`), for integers, packed integers and floats alike: NaN exactly
    /// where `np.isin(a, [fill, *missing])` is true.
    #[test]
    fn a_long_missing_value_list_decodes_with_every_value() {
        let list: alloc::vec::Vec<i32> = (1..=12).map(|i| -i).collect();
        let text = alloc::format!(
            "[{}]",
            list.iter()
                .map(|v| v.to_string())
                .collect::<alloc::vec::Vec<_>>()
                .join(", ")
        );
        let values: alloc::vec::Vec<i32> = (-14..6).collect();
        let marked = |v: i32| v == 99 || list.contains(&v);
        for (extra, packed) in [(&[][..], None), (&[("scale_factor", "0.5")][..], Some(0.5))] {
            let mut a = alloc::vec![("_FillValue", "99"), ("missing_value_list", text.as_str())];
            a.extend_from_slice(extra);
            assert!(cf_markers(attrs(&a)).is_err(), "more than Markers holds");
            let cf = CfDecode::of(DType::I32, attrs(&a), None).unwrap().unwrap();
            assert_eq!(cf.extra.len(), 13 - MAX_MARKERS);
            assert_eq!(cf.to, DType::F64);
            let tile: alloc::vec::Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let (mut scratch, mut out) = (alloc::vec::Vec::new(), alloc::vec::Vec::new());
            cf.apply(&tile, DType::I32, &mut scratch, &mut out);
            let got: alloc::vec::Vec<f64> = out
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(got.len(), values.len());
            for (v, g) in values.iter().zip(&got) {
                if marked(*v) {
                    assert!(g.is_nan(), "{v} is marked: {got:?}");
                } else {
                    assert_eq!(*g, f64::from(*v) * packed.unwrap_or(1.0), "{v}");
                }
            }
        }
        // Floats keep their type; a marker is compared in the element's precision.
        let a = [("missing_value_list", "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0.1]")];
        let cf = CfDecode::of(DType::F32, attrs(&a), None).unwrap().unwrap();
        assert_eq!((cf.to, cf.extra.len()), (DType::F32, 2));
        let f = [0.1f32, 10.0, 11.0, 1.0, -0.0];
        let tile: alloc::vec::Vec<u8> = f.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (mut scratch, mut out) = (alloc::vec::Vec::new(), alloc::vec::Vec::new());
        cf.apply(&tile, DType::F32, &mut scratch, &mut out);
        let got: alloc::vec::Vec<f32> = out
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert!(
            got[0].is_nan() && got[1].is_nan() && got[3].is_nan(),
            "{got:?}"
        );
        assert_eq!((got[2], got[4]), (11.0, 0.0));
    }

    /// Every value of a `missing_value` list marks, with `_FillValue`, each once; the
    /// masked tile is NaN exactly where NumPy's `np.isin(a, [fill, *missing])` is true.
    #[test]
    fn missing_value_lists_mark_with_every_value() {
        let a = [
            ("_FillValue", "-32768"),
            ("missing_value", "-1"),
            ("missing_value_list", "[-1, -2, -3]"),
        ];
        let m = cf_markers(attrs(&a)).unwrap().unwrap();
        let ints: alloc::vec::Vec<Option<i128>> = m.iter().map(|k| k.int).collect();
        assert_eq!(ints, [Some(-32768), Some(-1), Some(-2), Some(-3)]);
        let values: [i16; 7] = [5, -1, -2, -3, -4, -32768, 0];
        let tile: alloc::vec::Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = alloc::vec::Vec::new();
        apply_mask(&tile, DType::I16, Mask::Missing(m), &mut out);
        let got: alloc::vec::Vec<f64> = out
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let nan: alloc::vec::Vec<bool> = got.iter().map(|v| v.is_nan()).collect();
        assert_eq!(nan, [false, true, true, true, false, true, false]);
        assert_eq!((got[0], got[4], got[6]), (5.0, -4.0, 0.0));
        apply_mask(&tile, DType::I16, Mask::Indicator(m), &mut out);
        assert_eq!(out, [0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0]);
        // A float list (Zarr's JSON list in missing_value), compared in f32.
        let f = [("missing_value", "[1e20, -999.5]")];
        let m = cf_markers(attrs(&f)).unwrap().unwrap();
        let values = [1e20f32, 3.0, -999.5];
        let tile: alloc::vec::Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        apply_mask(&tile, DType::F32, Mask::Missing(m), &mut out);
        let got: alloc::vec::Vec<f32> = out
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert!(got[0].is_nan() && got[1] == 3.0 && got[2].is_nan());
    }

    /// Unpacking masks every listed value before scaling.
    #[test]
    fn unpack_masks_every_listed_value() {
        let a = [
            ("missing_value", "-1"),
            ("missing_value_list", "[-1, -2, -3]"),
            ("scale_factor", "0.5"),
            ("add_offset", "10"),
        ];
        let cf = CfDecode::of(DType::I16, attrs(&a), Some(DType::F64))
            .unwrap()
            .unwrap();
        let values: [i16; 5] = [-3, -2, -1, 0, 4];
        let tile: alloc::vec::Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (mut scratch, mut out) = (alloc::vec::Vec::new(), alloc::vec::Vec::new());
        cf.apply(&tile, DType::I16, &mut scratch, &mut out);
        let got: alloc::vec::Vec<f64> = out
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert!(got[..3].iter().all(|v| v.is_nan()), "{got:?}");
        assert_eq!(&got[3..], [10.0, 12.0]);
    }

    /// A list longer than the markers hold, or not of numbers, is refused naming the attr.
    #[test]
    fn long_or_bad_lists_are_named() {
        let a = [("missing_value_list", "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]")];
        let e = cf_markers(attrs(&a)).unwrap_err();
        assert_eq!(e.key, "missing_value_list");
        assert!(e.to_string().contains("at most 9 distinct markers"), "{e}");
        // Nine in all, the fill among them, fit.
        let a = [
            ("_FillValue", "0"),
            ("missing_value_list", "[1, 2, 3, 4, 5, 6, 7, 8]"),
        ];
        assert_eq!(cf_markers(attrs(&a)).unwrap().unwrap().len(), MAX_MARKERS);
        let a = [("missing_value", "[1, x]")];
        let e = cf_markers(attrs(&a)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "attr missing_value = \"[1, x]\" is not a number or a list of numbers"
        );
        let a = [("_FillValue", "[1, 2]")];
        assert_eq!(cf_markers(attrs(&a)).unwrap_err().must_be, "a number");
        // NaN, however written, is one marker.
        let a = [("_FillValue", "nan"), ("missing_value", "NaN")];
        assert_eq!(cf_markers(attrs(&a)).unwrap().unwrap().len(), 1);
    }
}
