//! The zstd frame header (RFC 8878 section 3.1.1), parsed without allocation so that every
//! decoder backend applies the same rules before it touches a frame: the magic, the
//! reserved bit, the window size against a cap, and the declared content size against the
//! row's `raw_byte_len`. Decoding itself lives in `tet-alloc`.

use crate::arith::u64_of;
use crate::error::{Error, ErrorKind};

/// The zstd frame magic, `28 b5 2f fd`.
pub const FRAME_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The largest window a chunk's frame may declare: 128 MiB, the reference decoder's
/// default limit (`ZSTD_WINDOWLOG_LIMIT_DEFAULT = 27`).
pub const MAX_WINDOW: u64 = 1 << 27;

/// A parsed frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FrameHeader {
    /// Bytes the header occupies, magic included.
    pub header_len: u64,
    /// Window size the decoder must keep.
    pub window_size: u64,
    /// `Frame_Content_Size`, when the frame declares it.
    pub content_size: Option<u64>,
    /// Whether a 4-byte XXH64-derived checksum follows the last block.
    pub has_checksum: bool,
    /// `Dictionary_ID`, when nonzero (chunks never use dictionaries).
    pub dictionary_id: Option<u32>,
}

fn le(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |a, b| a.wrapping_shl(8) | u64::from(*b))
}

/// Parses the header of the frame at the start of `frame`, whose first byte is at absolute
/// offset `at`. Errors name the header field.
pub fn parse_frame_header(frame: &[u8], at: u64) -> Result<FrameHeader, Error> {
    let truncated = |needed: usize| {
        Error::new(
            ErrorKind::Truncated {
                needed: at.saturating_add(u64_of(needed)),
                available: at.saturating_add(u64_of(frame.len())),
            },
            "zstd.frame_header",
            at,
        )
    };
    let magic = frame.get(..4).ok_or(truncated(5))?;
    if magic != FRAME_MAGIC {
        let mut found = [0u8; 4];
        found.copy_from_slice(magic);
        return Err(Error::new(
            ErrorKind::BadMagic {
                expected: FRAME_MAGIC,
                found,
            },
            "zstd.magic",
            at,
        ));
    }
    let fhd = *frame.get(4).ok_or(truncated(5))?;
    let fhd_at = at.saturating_add(4);
    if fhd & 0x08 != 0 {
        return Err(Error::new(
            ErrorKind::UnknownFlags { bits: 0x08 },
            "zstd.frame_header_descriptor",
            fhd_at,
        ));
    }
    let single_segment = fhd & 0x20 != 0;
    let has_checksum = fhd & 0x04 != 0;
    let dict_len: usize = match fhd & 0x03 {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => 4,
    };
    let fcs_len: usize = match fhd >> 6 {
        0 if single_segment => 1,
        0 => 0,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let mut pos: usize = 5;
    let mut window = None;
    if !single_segment {
        let wd = *frame.get(pos).ok_or(truncated(pos.saturating_add(1)))?;
        let log = 10u32.saturating_add(u32::from(wd >> 3));
        let base = 1u64.checked_shl(log).unwrap_or(u64::MAX);
        let add = (base / 8).saturating_mul(u64::from(wd & 7));
        window = Some(base.saturating_add(add));
        pos = pos.saturating_add(1);
    }
    let dict_end = pos.saturating_add(dict_len);
    let dict = le(frame.get(pos..dict_end).ok_or(truncated(dict_end))?);
    let fcs_end = dict_end.saturating_add(fcs_len);
    let fcs_bytes = frame.get(dict_end..fcs_end).ok_or(truncated(fcs_end))?;
    let mut content_size = (fcs_len > 0).then(|| le(fcs_bytes));
    if fcs_len == 2 {
        content_size = content_size.map(|c| c.saturating_add(256));
    }
    let window_size = match (window, content_size) {
        (Some(w), _) => w,
        (None, Some(c)) => c,
        (None, None) => 0,
    };
    if window_size > MAX_WINDOW {
        return Err(Error::new(
            ErrorKind::OutOfRange {
                value: window_size,
                max: MAX_WINDOW,
            },
            "zstd.window_descriptor",
            at.saturating_add(5),
        ));
    }
    Ok(FrameHeader {
        header_len: u64_of(fcs_end),
        window_size,
        content_size,
        has_checksum,
        dictionary_id: u32::try_from(dict).ok().filter(|d| *d != 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_segment_and_windowed_headers() {
        // Single segment, 1-byte FCS (value 100), checksum.
        let h = parse_frame_header(&[0x28, 0xb5, 0x2f, 0xfd, 0x24, 100], 10).unwrap();
        assert_eq!(h.header_len, 6);
        assert_eq!(h.content_size, Some(100));
        assert_eq!(h.window_size, 100);
        assert!(h.has_checksum);
        // Window descriptor 0x58: log 10 + 11 = 21 -> 2 MiB, no FCS.
        let h = parse_frame_header(&[0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58], 0).unwrap();
        assert_eq!(h.window_size, 2 << 20);
        assert_eq!(h.content_size, None);
        // 2-byte FCS adds 256.
        let h = parse_frame_header(&[0x28, 0xb5, 0x2f, 0xfd, 0x60, 1, 0], 0).unwrap();
        assert_eq!(h.content_size, Some(257));
    }

    #[test]
    fn rejects_bad_magic_reserved_bit_huge_window_and_truncation() {
        let e = parse_frame_header(&[0x28, 0xb5, 0x2f, 0xfe, 0x20, 1], 7).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::BadMagic { .. }));
        assert_eq!(e.offset, 7);
        let e = parse_frame_header(&[0x28, 0xb5, 0x2f, 0xfd, 0x28, 1], 0).unwrap_err();
        assert_eq!(e.what, "zstd.frame_header_descriptor");
        // Window log 10 + 21 = 31: 2 GiB.
        let e = parse_frame_header(&[0x28, 0xb5, 0x2f, 0xfd, 0x00, 21 << 3], 0).unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::OutOfRange {
                value: 1 << 31,
                max: MAX_WINDOW
            }
        );
        let e = parse_frame_header(&[0x28, 0xb5, 0x2f, 0xfd, 0xc0, 0x58, 1], 100).unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::Truncated {
                needed: 114,
                available: 107
            }
        );
        assert!(parse_frame_header(&[], 0).is_err());
    }
}
