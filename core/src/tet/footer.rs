//! The optional `THST` history footer at the end of the file.

use zerocopy::FromBytes;

use super::finding::{Code, Finding};
use super::raw::{off, RawFooterTail};
use super::{FOOTER_MAGIC, FOOTER_TAIL_LEN, HISTORY_VERSION};
use crate::arith::{slice, u64_of};
use crate::error::{Error, ErrorKind};

/// A footer whose tail is well formed and whose `history_json` lies after `floor`.
/// The JSON itself is not parsed here.
#[derive(Clone, Copy, Debug)]
pub struct Footer<'a> {
    history_json: &'a [u8],
    json_offset: u64,
    tail_offset: u64,
}

impl<'a> Footer<'a> {
    /// Parses the footer tail at the end of `file`. `floor` is the first byte the JSON
    /// may occupy (the end of the index, or 32 for an empty file).
    pub fn parse(file: &'a [u8], floor: u64) -> Result<Footer<'a>, Finding> {
        Footer::parse_tail(file, floor, true)
    }

    /// [`Footer::parse`] with the tail's magic taken to be `THST` whatever it reads:
    /// whether a tail whose magic is damaged otherwise holds a footer (its length and
    /// version valid), so that repair can restore the magic instead of dropping the
    /// footer.
    pub fn parse_restoring_magic(file: &'a [u8], floor: u64) -> Result<Footer<'a>, Finding> {
        Footer::parse_tail(file, floor, false)
    }

    fn parse_tail(file: &'a [u8], floor: u64, check_magic: bool) -> Result<Footer<'a>, Finding> {
        let len = u64_of(file.len());
        let min = floor.saturating_add(FOOTER_TAIL_LEN);
        if len < min {
            return Err(Finding::new(
                Code::FooterTruncated,
                Error::new(
                    ErrorKind::Truncated {
                        needed: min,
                        available: len,
                    },
                    "footer",
                    floor.min(len),
                ),
            ));
        }
        let tail_offset = len.saturating_sub(FOOTER_TAIL_LEN);
        let tail_bytes = slice(file, tail_offset, FOOTER_TAIL_LEN, "footer")
            .map_err(|e| Finding::new(Code::FooterTruncated, e))?;
        let tail = RawFooterTail::read_from_bytes(tail_bytes).map_err(|_| {
            Finding::new(
                Code::FooterTruncated,
                Error::new(ErrorKind::Invalid, "footer", tail_offset),
            )
        })?;
        if check_magic && tail.magic != FOOTER_MAGIC {
            return Err(Finding::new(
                Code::FooterMagic,
                Error::new(
                    ErrorKind::BadMagic {
                        expected: FOOTER_MAGIC,
                        found: tail.magic,
                    },
                    "footer.magic",
                    tail_offset.saturating_add(off::footer::MAGIC),
                ),
            ));
        }
        let version = tail.history_version.get();
        if version != HISTORY_VERSION {
            return Err(Finding::new(
                Code::FooterVersion,
                Error::new(
                    ErrorKind::Unsupported {
                        version: version.into(),
                    },
                    "footer.history_version",
                    tail_offset.saturating_add(off::footer::HISTORY_VERSION),
                ),
            ));
        }
        let json_len = tail.history_json_len.get();
        let room = tail_offset.saturating_sub(floor);
        if json_len > room {
            return Err(Finding::new(
                Code::FooterLength,
                Error::new(
                    ErrorKind::OutOfRange {
                        value: json_len,
                        max: room,
                    },
                    "footer.history_json_len",
                    tail_offset.saturating_add(off::footer::HISTORY_JSON_LEN),
                ),
            ));
        }
        let json_offset = tail_offset.saturating_sub(json_len);
        let history_json = slice(file, json_offset, json_len, "footer.history_json")
            .map_err(|e| Finding::new(Code::FooterLength, e))?;
        Ok(Footer {
            history_json,
            json_offset,
            tail_offset,
        })
    }

    /// The `history_json` bytes (unparsed).
    pub fn history_json(&self) -> &'a [u8] {
        self.history_json
    }

    /// Absolute offset of `history_json`: the end of the payload area.
    pub fn json_offset(&self) -> u64 {
        self.json_offset
    }

    /// Absolute offset of the 16-byte tail.
    pub fn tail_offset(&self) -> u64 {
        self.tail_offset
    }
}
