//! Zone group and block group descriptors, region headers, registry rows and pending-free
//! entries.

use zerocopy::FromBytes;

use super::raw::{
    RawBlockGroup, RawNodeRow, RawPendingFree, RawRegionHeader, RawZoneGroupCold, RawZoneGroupHot,
};
use super::sealed;
use zerocopy::IntoBytes;

use super::{
    bitmap_blocks, check_magic, err, zero, BG_MAGIC, NODE_MAGIC, PF_MAGIC, RH_MAGIC, ZG_COLD_AT,
    ZG_COLD_MAGIC, ZG_MAGIC,
};
use crate::block::Block;
use crate::error::{ErrorKind, Result};

/// A zone group descriptor with valid magics and checksums.
#[derive(Clone, Copy, Debug)]
pub struct ZoneGroup {
    pub(crate) hot: RawZoneGroupHot,
    pub(crate) cold: RawZoneGroupCold,
    pub(crate) lba: u64,
}

impl ZoneGroup {
    /// Parses the descriptor in `block` (read from `lba`), expected to be zone group `id`.
    pub fn parse(block: &Block, lba: u64, id: u32) -> Result<ZoneGroup> {
        let hot_bytes = block.get(..64).unwrap_or(&[]);
        let hot: RawZoneGroupHot = *sealed(
            hot_bytes,
            ZG_MAGIC,
            56,
            ("zone_group.magic", "zone_group.hot_checksum"),
            lba,
            0,
        )?;
        let cold_bytes = block
            .get(ZG_COLD_AT..ZG_COLD_AT.saturating_add(64))
            .unwrap_or(&[]);
        let cold: RawZoneGroupCold = *sealed(
            cold_bytes,
            ZG_COLD_MAGIC,
            56,
            ("zone_group.cold.magic", "zone_group.cold_checksum"),
            lba,
            ZG_COLD_AT,
        )?;
        zero(hot.reserved0.as_bytes(), "zone_group.reserved", lba, 4)?;
        zero(hot.reserved1.as_bytes(), "zone_group.reserved", lba, 14)?;
        zero(&hot.reserved2, "zone_group.reserved", lba, 32)?;
        zero(
            &cold.reserved,
            "zone_group.cold.reserved",
            lba,
            ZG_COLD_AT.saturating_add(12),
        )?;
        if hot.zg_id.get() != id {
            return Err(err(
                ErrorKind::Mismatch {
                    expected: id.into(),
                    found: hot.zg_id.get().into(),
                },
                "zone_group.zg_id",
                lba,
                8,
            ));
        }
        Ok(ZoneGroup { hot, cold, lba })
    }

    /// The hot part (compare-and-write), as checked.
    pub fn hot(&self) -> &RawZoneGroupHot {
        &self.hot
    }

    /// The cold part (fixed at mkfs), as checked.
    pub fn cold(&self) -> &RawZoneGroupCold {
        &self.cold
    }

    /// Its block.
    pub fn lba(&self) -> u64 {
        self.lba
    }

    /// Owning registry row, or `None` for `0xFFFF`.
    pub fn owner(&self) -> Option<u16> {
        let o = self.hot.owner_node_id.get();
        (o != super::ZG_NO_OWNER).then_some(o)
    }
}

/// A block group descriptor with valid magic and checksum.
#[derive(Clone, Copy, Debug)]
pub struct BlockGroup {
    pub(crate) raw: RawBlockGroup,
    pub(crate) lba: u64,
}

impl BlockGroup {
    /// Parses descriptor `id` from `block` (read from `lba`) and checks it against the
    /// geometry the superblock implies: `start`, `length` and owning zone group `owner`.
    pub fn parse(
        block: &Block,
        lba: u64,
        id: u32,
        start: u64,
        length: u64,
        owner: u32,
    ) -> Result<BlockGroup> {
        let bytes = block.get(..128).unwrap_or(&[]);
        let raw: RawBlockGroup = *sealed(
            bytes,
            BG_MAGIC,
            112,
            ("block_group.magic", "block_group.checksum"),
            lba,
            0,
        )?;
        let dbm = bitmap_blocks(length);
        let data = length.saturating_sub(1).saturating_sub(dbm);
        let checks: [(u64, u64, &'static str, usize); 9] = [
            (raw.bg_id.get().into(), id.into(), "block_group.bg_id", 4),
            (
                raw.owner_zg.get().into(),
                owner.into(),
                "block_group.owner_zg",
                8,
            ),
            (raw.start_block.get(), start, "block_group.start_block", 16),
            (
                raw.length_blocks.get(),
                length,
                "block_group.length_blocks",
                24,
            ),
            (raw.header_offset.get(), 0, "block_group.header_offset", 32),
            (raw.bitmap_offset.get(), 1, "block_group.bitmap_offset", 40),
            (
                raw.data_offset.get(),
                dbm.saturating_add(1),
                "block_group.data_offset",
                48,
            ),
            (
                raw.data_block_count.get(),
                data,
                "block_group.data_block_count",
                56,
            ),
            (raw.reserved0.get().into(), 0, "block_group.reserved", 12),
        ];
        for (found, expected, what, off) in checks {
            if found != expected {
                return Err(err(ErrorKind::Mismatch { expected, found }, what, lba, off));
            }
        }
        zero(&raw.reserved1, "block_group.reserved", lba, 72)?;
        let free = raw.free_data_blocks.get();
        if free > data {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: free,
                    max: data,
                },
                "block_group.free_data_blocks",
                lba,
                64,
            ));
        }
        Ok(BlockGroup { raw, lba })
    }

    /// The descriptor, as checked.
    pub fn raw(&self) -> &RawBlockGroup {
        &self.raw
    }

    /// Its block.
    pub fn lba(&self) -> u64 {
        self.lba
    }

    /// First data block (absolute).
    pub fn data_start(&self) -> u64 {
        self.raw
            .start_block
            .get()
            .saturating_add(self.raw.data_offset.get())
    }

    /// One past the last data block (absolute).
    pub fn data_end(&self) -> u64 {
        self.data_start()
            .saturating_add(self.raw.data_block_count.get())
    }

    /// Checks the region header block for this group.
    pub fn check_region_header(&self, block: &Block) -> Result<RawRegionHeader> {
        let lba = self.raw.start_block.get();
        let bytes = block.get(..64).unwrap_or(&[]);
        let rh: RawRegionHeader = *sealed(
            bytes,
            RH_MAGIC,
            56,
            ("region_header.magic", "region_header.checksum"),
            lba,
            0,
        )?;
        let checks: [(u64, u64, &'static str, usize); 3] = [
            (
                rh.bg_id.get().into(),
                self.raw.bg_id.get().into(),
                "region_header.bg_id",
                4,
            ),
            (rh.start_block.get(), lba, "region_header.start_block", 8),
            (
                rh.length_blocks.get(),
                self.raw.length_blocks.get(),
                "region_header.length_blocks",
                16,
            ),
        ];
        for (found, expected, what, off) in checks {
            if found != expected {
                return Err(err(ErrorKind::Mismatch { expected, found }, what, lba, off));
            }
        }
        zero(&rh.reserved, "region_header.reserved", lba, 24)?;
        Ok(rh)
    }
}

/// A registry row in use.
#[derive(Clone, Copy, Debug)]
pub struct NodeRow {
    pub(crate) raw: RawNodeRow,
}

impl NodeRow {
    /// Parses row `row` at byte `off` of `block` (read from `lba`); `Ok(None)` for a free
    /// (all-zero) row. `journal_start` is where the row's journal must be.
    pub fn parse(
        block: &Block,
        lba: u64,
        off: usize,
        row: u32,
        journal_start: u64,
    ) -> Result<Option<NodeRow>> {
        let bytes = block.get(off..off.saturating_add(128)).unwrap_or(&[]);
        if bytes.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        let raw: RawNodeRow = *sealed(
            bytes,
            NODE_MAGIC,
            120,
            ("registry.magic", "registry.checksum"),
            lba,
            off,
        )?;
        let checks: [(u64, u64, &'static str, usize); 2] = [
            (raw.row.get().into(), row.into(), "registry.row", 4),
            (
                raw.journal_start.get(),
                journal_start,
                "registry.journal_start",
                40,
            ),
        ];
        for (found, expected, what, o) in checks {
            if found != expected {
                return Err(err(
                    ErrorKind::Mismatch { expected, found },
                    what,
                    lba,
                    off.saturating_add(o),
                ));
            }
        }
        zero(
            raw.reserved0.as_bytes(),
            "registry.reserved",
            lba,
            off.saturating_add(20),
        )?;
        zero(
            &raw.reserved1,
            "registry.reserved",
            lba,
            off.saturating_add(112),
        )?;
        if raw.node_id.get() == 0 {
            return Err(err(
                ErrorKind::Zero,
                "registry.node_id",
                lba,
                off.saturating_add(8),
            ));
        }
        let state = raw.state.get();
        if NodeState::from_raw(state).is_none() {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: state.into(),
                    max: 3,
                },
                "registry.state",
                lba,
                off.saturating_add(16),
            ));
        }
        Ok(Some(NodeRow { raw }))
    }

    /// The row, as checked.
    pub fn raw(&self) -> &RawNodeRow {
        &self.raw
    }

    /// The row's state (checked by [`NodeRow::parse`] to be one of the three).
    pub fn state(&self) -> NodeState {
        NodeState::from_raw(self.raw.state.get()).unwrap_or(NodeState::Left)
    }

    /// `ACTIVE`, `FENCED` or `LEFT`.
    pub fn state_name(&self) -> &'static str {
        self.state().name()
    }
}

/// A registry row's `state` (docs/cetrafs.md section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// 1: the node has joined and writes (or crashed while it did).
    Active,
    /// 2: another node has fenced it; its journal and zone groups await recovery.
    Fenced,
    /// 3: the node left cleanly (or was recovered).
    Left,
}

impl NodeState {
    /// The state a stored `u32` names, if any.
    pub const fn from_raw(raw: u32) -> Option<NodeState> {
        match raw {
            1 => Some(NodeState::Active),
            2 => Some(NodeState::Fenced),
            3 => Some(NodeState::Left),
            _ => None,
        }
    }

    /// The value stored in `state`.
    pub const fn raw(self) -> u32 {
        match self {
            NodeState::Active => 1,
            NodeState::Fenced => 2,
            NodeState::Left => 3,
        }
    }

    /// The spec's name: `ACTIVE`, `FENCED` or `LEFT`.
    pub const fn name(self) -> &'static str {
        match self {
            NodeState::Active => "ACTIVE",
            NodeState::Fenced => "FENCED",
            NodeState::Left => "LEFT",
        }
    }
}

/// A pending-free entry in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingFree {
    /// First freed block.
    pub lba: u64,
    /// Blocks.
    pub count: u32,
}

impl PendingFree {
    /// Parses the entry at byte `off` of `block` (read from `lba`); `Ok(None)` when free.
    pub fn parse(block: &Block, lba: u64, off: usize) -> Result<Option<PendingFree>> {
        let bytes = block.get(off..off.saturating_add(16)).unwrap_or(&[]);
        if bytes.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        let raw = RawPendingFree::read_from_bytes(bytes)
            .map_err(|_| err(ErrorKind::Invalid, "pending-free entry", lba, off))?;
        check_magic(
            raw.magic,
            PF_MAGIC,
            "pending_free.magic",
            lba,
            off.saturating_add(12),
        )?;
        if raw.count.get() == 0 {
            return Err(err(
                ErrorKind::Zero,
                "pending_free.count",
                lba,
                off.saturating_add(8),
            ));
        }
        Ok(Some(PendingFree {
            lba: raw.lba.get(),
            count: raw.count.get(),
        }))
    }
}
