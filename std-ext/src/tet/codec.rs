//! The reference C zstd behind `tet-alloc`'s backend traits: decoding for `verify` and
//! `repair` (the speed target in `docs/benchmarks.md` needs it), compression with a
//! configurable level for writing. `tet-alloc` keeps ruzstd; a differential test
//! (`tests/tests/decode.rs`) holds the two decoders to identical bytes and identical
//! verdicts.
//!
//! The C decoder is the fast path for valid frames. When a frame fails any rule, it is
//! decoded again with ruzstd (its [`FrameBackend::strict`] opinion) to say *which* rule
//! it breaks: single-shot C decoding writes a block's output before it has checked the
//! block's bit stream, so a corrupt block can look "too long" or "too short" to it,
//! while ruzstd checks each block before its output counts. Should ruzstd accept a
//! frame C refused, the C verdict stands (and the differential test fails).

use tet_alloc::tet::decode::{BackendError, Decoded, FrameBackend, Ruzstd};
use tet_alloc::tet::writer::Compressor;
use tet_core::tet::zstd::FrameHeader;
use tet_core::{Error, ErrorKind};
use zstd::zstd_safe::{self, zstd_sys::ZSTD_ErrorCode, DCtx, DParameter};

/// Working memory of a C decompression context (about 160 KiB in zstd 1.5, rounded up).
const C_DCTX_BYTES: u64 = 256 * 1024;

/// The C decoder. Content checksums are left to `tet-alloc`, which checks them the same
/// way for every backend.
pub struct CZstd {
    dctx: DCtx<'static>,
    classify: Ruzstd,
}

impl CZstd {
    /// A decoder context (one per thread).
    pub fn new() -> Self {
        let mut dctx = DCtx::create();
        // Checksums are verified by the caller; errors here would only hide which rule
        // failed. Setting a known parameter cannot fail.
        let _ = dctx.set_parameter(DParameter::ForceIgnoreChecksum(true));
        CZstd {
            dctx,
            classify: Ruzstd::new(),
        }
    }
}

impl Default for CZstd {
    fn default() -> Self {
        CZstd::new()
    }
}

impl FrameBackend for CZstd {
    fn working_memory(&self, raw_len: u64) -> u64 {
        // The ruzstd fallback runs only after C failed, but it may run.
        C_DCTX_BYTES.saturating_add(self.classify.working_memory(raw_len))
    }

    fn decode_frame(
        &mut self,
        span: &[u8],
        _header: &FrameHeader,
        out: &mut [u8],
    ) -> Result<Decoded, BackendError> {
        // Decode only the first frame; what follows it is the caller's to judge.
        let frame_len = zstd_safe::find_frame_compressed_size(span).unwrap_or(span.len());
        let frame = span.get(..frame_len).unwrap_or(span);
        match self.dctx.decompress(out, frame) {
            Ok(written) => Ok(Decoded {
                consumed: u64::try_from(frame_len).unwrap_or(u64::MAX),
                written: u64::try_from(written).unwrap_or(u64::MAX),
            }),
            Err(code)
                if zstd_safe::is_error_kind(code, ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall) =>
            {
                Err(BackendError::TooLong)
            }
            Err(_) => Err(BackendError::Corrupt { at: 0 }),
        }
    }

    fn strict(&mut self) -> Option<&mut dyn FrameBackend> {
        Some(&mut self.classify)
    }
}

/// The C compressor at a given level (1 ..= 22; 3 is zstd's default). Frames carry their
/// content size and a content checksum.
pub struct CCompressor {
    cctx: zstd_safe::CCtx<'static>,
}

impl CCompressor {
    /// A compressor at `level`.
    pub fn new(level: i32) -> Self {
        let mut cctx = zstd_safe::CCtx::create();
        let _ = cctx.set_parameter(zstd_safe::CParameter::CompressionLevel(level));
        let _ = cctx.set_parameter(zstd_safe::CParameter::ChecksumFlag(true));
        CCompressor { cctx }
    }
}

impl Compressor for CCompressor {
    fn compress(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        out.clear();
        out.reserve(zstd_safe::compress_bound(raw.len()));
        self.cctx
            .compress2(out, raw)
            .map_err(|_| Error::new(ErrorKind::Io, "zstd compressor", 0))?;
        Ok(())
    }
}
