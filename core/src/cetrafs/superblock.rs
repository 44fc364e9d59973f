//! The superblock, feature flags and the region map mount check.

use super::raw::RawSuperblock;
use super::sealed;
use super::{
    err, FORMAT_VERSION, PENDING_PER_BLOCK, ROWS_PER_BLOCK, SB_CHECKSUM_AT, SB_MAGIC,
    SUPERBLOCK_LEN,
};
use crate::arith::div_ceil;
use crate::block::{Block, BLOCK_SIZE};
use crate::error::{Error, ErrorKind, Result};

/// Known feature bits and their names (`docs/cetrafs.md` section 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// `feature_compat`.
    pub compat: u64,
    /// `feature_incompat`.
    pub incompat: u64,
    /// `feature_ro_compat`.
    pub ro_compat: u64,
}

impl Features {
    /// Known compat bits.
    pub const COMPAT: &'static [(u32, &'static str)] = &[
        (0, "COMPAT_XATTR"),
        (1, "COMPAT_SPARSE"),
        (2, "COMPAT_SB_COPIES"),
    ];
    /// Known incompat bits.
    pub const INCOMPAT: &'static [(u32, &'static str)] =
        &[(0, "INCOMPAT_EXTENTS"), (1, "INCOMPAT_UNINIT")];
    /// Known ro-compat bits.
    pub const RO_COMPAT: &'static [(u32, &'static str)] = &[
        (0, "RO_COMPAT_PENDING_FREE"),
        (1, "RO_COMPAT_RECONCILE_SEQ"),
    ];

    /// The bits a table names, computed when compiling (the names stay out of flash
    /// unless something prints them).
    const fn known(mut table: &[(u32, &str)]) -> u64 {
        let mut mask = 0u64;
        while let [(bit, _), rest @ ..] = table {
            if let Some(b) = 1u64.checked_shl(*bit) {
                mask |= b;
            }
            table = rest;
        }
        mask
    }
    const KNOWN_COMPAT: u64 = Self::known(Self::COMPAT);
    const KNOWN_INCOMPAT: u64 = Self::known(Self::INCOMPAT);
    const KNOWN_RO_COMPAT: u64 = Self::known(Self::RO_COMPAT);

    /// Bits of `compat` this build does not know.
    pub fn unknown_compat(&self) -> u64 {
        self.compat & !Self::KNOWN_COMPAT
    }
    /// Bits of `incompat` this build does not know.
    pub fn unknown_incompat(&self) -> u64 {
        self.incompat & !Self::KNOWN_INCOMPAT
    }
    /// Bits of `ro_compat` this build does not know.
    pub fn unknown_ro_compat(&self) -> u64 {
        self.ro_compat & !Self::KNOWN_RO_COMPAT
    }

    /// The name of a known bit, e.g. `name(Features::INCOMPAT, 0)`.
    pub fn name(table: &[(u32, &'static str)], bit: u32) -> Option<&'static str> {
        table.iter().find(|(b, _)| *b == bit).map(|(_, n)| *n)
    }
}

/// The length of the longest prefix of `bytes` that is valid UTF-8 (what
/// `core::str::from_utf8` reports as `valid_up_to`), in a fifth of its code: a label
/// is 64 bytes and a bootloader checks it once, so the standard library's word-at-a-time
/// fast path would only cost flash.
fn utf8_prefix(bytes: &[u8]) -> usize {
    let mut at = 0usize;
    while let Some(&lead) = bytes.get(at) {
        // Continuation bytes after the lead, and the range of the first of them (which
        // excludes overlong forms, surrogates and code points past U+10FFFF).
        let (more, first) = match lead {
            0x00..=0x7F => (0, 0x80..=0xBF),
            0xC2..=0xDF => (1, 0x80..=0xBF),
            0xE0 => (2, 0xA0..=0xBF),
            0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80..=0xBF),
            0xED => (2, 0x80..=0x9F),
            0xF0 => (3, 0x90..=0xBF),
            0xF1..=0xF3 => (3, 0x80..=0xBF),
            0xF4 => (3, 0x80..=0x8F),
            _ => return at,
        };
        for k in 1..=more {
            let range = if k == 1 { first.clone() } else { 0x80..=0xBF };
            match bytes.get(at.saturating_add(k)) {
                Some(b) if range.contains(b) => {}
                _ => return at,
            }
        }
        at = at.saturating_add(1).saturating_add(more);
    }
    at
}

/// A named region of the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Name, as in the spec.
    pub name: &'static str,
    /// First block.
    pub start: u64,
    /// Length in blocks.
    pub blocks: u64,
}

/// Region names in map order.
pub const REGION_NAMES: [&str; 8] = [
    "zone group table",
    "block group table",
    "inode bitmap",
    "inode table",
    "node registry",
    "pending-free queues",
    "node journals",
    "block group regions",
];

/// The `device_blocks` of [`Superblock::parse`] that no `total_blocks` exceeds: the mount
/// check without check 3's device length (`docs/cetrafs.md` section 2).
pub const ANY_DEVICE: u64 = u64::MAX;

/// A superblock whose checksum, version, features and region map passed the mount check.
#[derive(Clone, Copy, Debug)]
pub struct Superblock {
    raw: RawSuperblock,
    read_only: bool,
}

impl Superblock {
    /// Parses and checks block 0 against a device of `device_blocks` blocks: a device
    /// shorter than `total_blocks` is refused with [`ErrorKind::ShortDevice`].
    /// [`ANY_DEVICE`] checks everything else (what
    /// [`Fs::open_shortened`](super::Fs::open_shortened) does).
    pub fn parse(block: &Block, device_blocks: u64) -> Result<Superblock> {
        Superblock::parse_as(block, device_blocks)
    }

    /// [`Superblock::parse`] reporting `E` (see [`Fs::open_for_read_as`](super::Fs)).
    pub(crate) fn parse_as<E: From<Error>>(
        block: &Block,
        device_blocks: u64,
    ) -> Result<Superblock, E> {
        let bytes = block.get(..SUPERBLOCK_LEN).unwrap_or(&[]);
        let raw: &RawSuperblock = sealed::<_, E>(
            bytes,
            SB_MAGIC,
            SB_CHECKSUM_AT,
            ("superblock.magic", "superblock.checksum"),
            0,
            0,
        )?;
        let v = raw.format_version.get();
        if v != FORMAT_VERSION {
            return Err(err(
                ErrorKind::Unsupported { version: v.into() },
                "superblock.format_version",
                0,
                4,
            ));
        }
        let bs = raw.block_size.get();
        if usize::try_from(bs).ok() != Some(BLOCK_SIZE) {
            return Err(err(
                ErrorKind::Mismatch {
                    expected: 4096,
                    found: bs.into(),
                },
                "superblock.block_size",
                0,
                8,
            ));
        }
        let flags = raw.sb_flags.get();
        if flags & !super::SB_CLEAN != 0 {
            return Err(err(
                ErrorKind::UnknownFlags {
                    bits: (flags & !super::SB_CLEAN).into(),
                },
                "superblock.sb_flags",
                0,
                12,
            ));
        }
        // `location` (280) is 0 in the primary, like the reserved bytes after it.
        super::zero::<E>(
            bytes.get(280..SB_CHECKSUM_AT).unwrap_or(&[]),
            "superblock.location and reserved (zero in the primary)",
            0,
            280,
        )?;
        let label_len = raw.label.iter().position(|b| *b == 0).unwrap_or(64);
        let (label, pad) = raw.label.split_at(label_len);
        let valid = utf8_prefix(label);
        if valid < label.len() {
            return Err(err(
                ErrorKind::InvalidUtf8 {
                    valid_up_to: crate::arith::u64_of(valid),
                },
                "superblock.label",
                0,
                200,
            ));
        }
        super::zero::<E>(
            pad,
            "superblock.label (NUL padding)",
            0,
            200usize.saturating_add(label_len),
        )?;
        let features = Features {
            compat: raw.feature_compat.get(),
            incompat: raw.feature_incompat.get(),
            ro_compat: raw.feature_ro_compat.get(),
        };
        let unknown = features.unknown_incompat();
        if unknown != 0 {
            // Name the lowest unknown bit's position.
            return Err(err(
                ErrorKind::UnknownFlags {
                    bits: u64::from(unknown.trailing_zeros()),
                },
                "superblock.feature_incompat (bit position)",
                0,
                48,
            ));
        }
        if features.incompat & 1 == 0 {
            return Err(err(
                ErrorKind::MissingFlags { bits: 1 },
                "superblock.feature_incompat (INCOMPAT_EXTENTS is required)",
                0,
                48,
            ));
        }
        let sb = Superblock {
            raw: *raw,
            read_only: features.unknown_ro_compat() != 0,
        };
        sb.check_map::<E>(device_blocks)?;
        Ok(sb)
    }

    /// The raw fields.
    pub fn raw(&self) -> &RawSuperblock {
        &self.raw
    }

    /// Whether an unknown ro-compat bit forces a read-only mount.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Feature words.
    pub fn features(&self) -> Features {
        Features {
            compat: self.raw.feature_compat.get(),
            incompat: self.raw.feature_incompat.get(),
            ro_compat: self.raw.feature_ro_compat.get(),
        }
    }

    /// Blocks in the filesystem.
    pub fn total_blocks(&self) -> u64 {
        self.raw.total_blocks.get()
    }
    /// Z.
    pub fn zone_group_count(&self) -> u32 {
        self.raw.zone_group_count.get()
    }
    /// B.
    pub fn block_group_count(&self) -> u32 {
        self.raw.block_group_count.get()
    }
    /// N.
    pub fn node_capacity(&self) -> u32 {
        self.raw.node_capacity.get()
    }
    /// Inode table length (inodes 0 .. count).
    pub fn inode_count(&self) -> u64 {
        self.raw.inode_count.get()
    }
    /// The root directory's inode.
    pub fn root_inode(&self) -> u64 {
        self.raw.root_inode.get()
    }
    /// Nominal block group size.
    pub fn bg_size_blocks(&self) -> u64 {
        self.raw.bg_size_blocks.get()
    }
    /// First block group region.
    pub fn bg_regions_start(&self) -> u64 {
        self.raw.bg_regions_start.get()
    }
    /// Blocks per node journal slice.
    pub fn node_journal_blocks(&self) -> u64 {
        self.raw.node_journal_blocks.get()
    }
    /// Pending-free blocks per zone group.
    pub fn pending_blocks_per_zg(&self) -> u64 {
        div_ceil(
            u64::from(self.raw.pending_slots_per_zg.get()),
            PENDING_PER_BLOCK,
        )
    }

    /// The eight regions after block 0, in map order.
    pub fn regions(&self) -> [Region; 8] {
        let mut out = [Region {
            name: "",
            start: 0,
            blocks: 0,
        }; 8];
        for ((o, (start, blocks)), name) in out.iter_mut().zip(self.spans()).zip(REGION_NAMES) {
            *o = Region {
                name,
                start,
                blocks,
            };
        }
        out
    }

    /// The regions' (start, length), without their names (which the mount check does
    /// not print).
    fn spans(&self) -> [(u64, u64); 8] {
        let r = &self.raw;
        let total = r.total_blocks.get();
        let bgs = r.bg_regions_start.get();
        let journals = u64::from(r.node_capacity.get()).saturating_mul(r.node_journal_blocks.get());
        [
            (r.zg_table_start.get(), u64::from(r.zone_group_count.get())),
            (r.bg_table_start.get(), u64::from(r.block_group_count.get())),
            (r.inode_bitmap_start.get(), r.inode_bitmap_blocks.get()),
            (r.inode_table_start.get(), r.inode_count.get()),
            (r.registry_start.get(), r.registry_blocks.get()),
            (r.pending_start.get(), r.pending_blocks.get()),
            (r.node_journal_start.get(), journals),
            (bgs, total.saturating_sub(bgs)),
        ]
    }

    /// Start and length of block group `i` (which must be `< B`).
    pub fn bg_span(&self, i: u32) -> (u64, u64) {
        let size = self.bg_size_blocks();
        let start = self
            .bg_regions_start()
            .saturating_add(u64::from(i).saturating_mul(size));
        let len = size.min(self.total_blocks().saturating_sub(start));
        (start, len)
    }

    fn check_map<E: From<Error>>(&self, device_blocks: u64) -> Result<(), E> {
        let r = &self.raw;
        let z = u64::from(r.zone_group_count.get());
        let b = u64::from(r.block_group_count.get());
        let n = u64::from(r.node_capacity.get());
        let total = r.total_blocks.get();
        let at_least = |value: u64, min: u64, what: &'static str, off: usize| -> Result<(), E> {
            if value < min {
                Err(err(
                    ErrorKind::Mismatch {
                        expected: min,
                        found: value,
                    },
                    what,
                    0,
                    off,
                ))
            } else {
                Ok(())
            }
        };
        let equal = |value: u64, expected: u64, what: &'static str, off: usize| -> Result<(), E> {
            if value == expected {
                Ok(())
            } else {
                Err(err(
                    ErrorKind::Mismatch {
                        expected,
                        found: value,
                    },
                    what,
                    0,
                    off,
                ))
            }
        };
        if total > device_blocks {
            return Err(err(
                ErrorKind::ShortDevice {
                    device_blocks,
                    total_blocks: total,
                },
                "superblock.total_blocks",
                0,
                32,
            ));
        }
        at_least(z, 1, "superblock.zone_group_count", 64)?;
        at_least(b, 1, "superblock.block_group_count", 68)?;
        at_least(n, 1, "superblock.node_capacity", 136)?;
        equal(r.zg_table_start.get(), 1, "superblock.zg_table_start", 72)?;
        equal(
            r.bg_table_start.get(),
            1u64.saturating_add(z),
            "superblock.bg_table_start",
            80,
        )?;
        equal(r.root_inode.get(), 1, "superblock.root_inode", 192)?;
        at_least(r.inode_count.get(), 2, "superblock.inode_count", 112)?;
        let bitmap_cap = r
            .inode_bitmap_blocks
            .get()
            .saturating_mul(super::BITS_PER_BITMAP_BLOCK);
        at_least(
            bitmap_cap,
            r.inode_count.get(),
            "superblock.inode_bitmap_blocks",
            96,
        )?;
        at_least(
            r.registry_blocks.get().saturating_mul(ROWS_PER_BLOCK),
            n,
            "superblock.registry_blocks",
            128,
        )?;
        at_least(
            u64::from(r.pending_slots_per_zg.get()),
            1,
            "superblock.pending_slots_per_zg",
            140,
        )?;
        equal(
            r.pending_blocks.get(),
            z.saturating_mul(self.pending_blocks_per_zg()),
            "superblock.pending_blocks",
            152,
        )?;
        let jb = r.node_journal_blocks.get();
        if jb < 3 || jb % 2 == 0 {
            return Err(err(
                ErrorKind::OddAtLeast { value: jb, min: 3 },
                "superblock.node_journal_blocks",
                0,
                168,
            ));
        }
        let starts = [72usize, 80, 88, 104, 120, 144, 160, 176];
        // The span before: the superblock's block 0 until the first region.
        let mut prev_start = 0u64;
        let mut prev_end = 1u64;
        for ((start, blocks), off) in self.spans().into_iter().zip(starts) {
            let what = "superblock region start";
            if start == 0 {
                return Err(err(ErrorKind::Zero, what, 0, off));
            }
            let end =
                start
                    .checked_add(blocks)
                    .ok_or(err::<E>(ErrorKind::Overflow, what, 0, off))?;
            if end > total || start >= total {
                return Err(err(
                    ErrorKind::Truncated {
                        needed: end,
                        available: total,
                    },
                    what,
                    0,
                    off,
                ));
            }
            if start < prev_end {
                return Err(err(
                    ErrorKind::Overlap {
                        other: super::at(prev_start, 0),
                    },
                    what,
                    0,
                    off,
                ));
            }
            prev_start = start;
            prev_end = end;
        }
        let size = r.bg_size_blocks.get();
        at_least(size, 3, "superblock.bg_size_blocks", 184)?;
        let span = total.saturating_sub(r.bg_regions_start.get());
        equal(b, div_ceil(span, size), "superblock.block_group_count", 68)?;
        let last = u32::try_from(b.saturating_sub(1))
            .map_err(|_| err::<E>(ErrorKind::Overflow, "superblock.block_group_count", 0, 68))?;
        at_least(
            self.bg_span(last).1,
            3,
            "superblock.total_blocks (last block group)",
            32,
        )?;
        if z > b {
            return Err(err(
                ErrorKind::OutOfRange { value: z, max: b },
                "superblock.zone_group_count",
                0,
                64,
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{utf8_prefix, Features};

    #[test]
    fn known_feature_masks_follow_the_tables() {
        let all = Features {
            compat: u64::MAX,
            incompat: u64::MAX,
            ro_compat: u64::MAX,
        };
        assert_eq!(all.unknown_compat(), !0b111);
        assert_eq!(all.unknown_incompat(), !0b11);
        assert_eq!(all.unknown_ro_compat(), !0b11);
    }

    fn std_prefix(b: &[u8]) -> usize {
        match core::str::from_utf8(b) {
            Ok(_) => b.len(),
            Err(e) => e.valid_up_to(),
        }
    }

    #[test]
    fn agrees_with_the_standard_library() {
        // Every sequence of up to three bytes, and each followed by a tail.
        for a in 0..=255u8 {
            assert_eq!(utf8_prefix(&[a]), std_prefix(&[a]), "{a:02x}");
            for b in 0..=255u8 {
                let two = [a, b, b'x'];
                assert_eq!(utf8_prefix(&two), std_prefix(&two), "{two:02x?}");
                for c in [
                    0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xF4, 0xFF,
                ] {
                    for d in [0x41, 0x80, 0xBF, 0xC0] {
                        let four = [a, b, c, d, b'y'];
                        assert_eq!(utf8_prefix(&four), std_prefix(&four), "{four:02x?}");
                    }
                }
            }
        }
        let label = "nœud-λ 東京 🚀".as_bytes();
        assert_eq!(utf8_prefix(label), label.len());
        assert_eq!(utf8_prefix(&label[..label.len() - 1]), label.len() - 4);
    }
}
