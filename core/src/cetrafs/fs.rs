//! [`Fs`]: a mounted (read-only) cetrafs image over a block device.

use core::marker::PhantomData;
use core::ops::ControlFlow;

use super::groups::{BlockGroup, NodeRow, PendingFree, ZoneGroup};
use super::inode::Inode;
use super::superblock::{Superblock, ANY_DEVICE};
use super::{err, ROWS_PER_BLOCK};
use crate::block::{Block, BlockDevice, BLOCK_SIZE_U64};
use crate::error::{Error, ErrorKind, Result};

/// A mounted image. Opening performs the full mount check (`docs/cetrafs.md` section 2);
/// [`Fs::open_shortened`] relaxes only the device's length, for read-only tools.
///
/// `E` is the error the read path reports: [`Error`] (the field, its offset and the
/// values) unless the image is opened with [`Fs::open_for_read_as`], which can pick the
/// one-byte [`Fault`](crate::Fault) for firmware that has no room for diagnostics. The
/// checks are the same either way.
#[derive(Debug)]
pub struct Fs<D, E = Error> {
    dev: D,
    sb: Superblock,
    /// `fn() -> E`: an `Fs` holds no `E`, it only returns them.
    error: PhantomData<fn() -> E>,
}

impl<D: BlockDevice> Fs<D> {
    /// Mounts `dev` read-only: superblock, map, features, and the zone and block group
    /// tables (which must agree with each other and with the map).
    pub fn open(dev: D, buf: &mut Block) -> Result<Fs<D>> {
        let fs = Fs::open_for_read(dev, buf)?;
        fs.check_group_tables(buf)?;
        Ok(fs)
    }

    /// [`Fs::open`] for an image that may have been cut short: a device shorter than
    /// `total_blocks` mounts (`docs/cetrafs.md` section 2, check 3), and every other
    /// mount check runs as in [`Fs::open`], so every structure still has to fit the
    /// geometry the superblock gives, and the group tables have to be readable. A read
    /// of a block at or past the device's end then fails as the device reports it
    /// ([`past_end`](crate::block::past_end) on the devices of this crate: a
    /// `read-failed` finding in a check), and [`Fs::shortened`] says by how much the
    /// device is short. For read-only tools: writers mount with [`Fs::open`], which
    /// refuses such a device with [`ErrorKind::ShortDevice`], and
    /// [`replay`](super::replay::replay) refuses an `Fs` opened this way.
    pub fn open_shortened(dev: D, buf: &mut Block) -> Result<Fs<D>> {
        let fs = Fs::mount_as(dev, buf, true)?;
        fs.check_group_tables(buf)?;
        Ok(fs)
    }

    /// Mounts `dev` for reading only what reading needs: the superblock, map and
    /// features (mount checks 1-6 of `docs/cetrafs.md` section 2), not the zone and
    /// block group tables (check 7), which only allocation depends on. A bootloader's
    /// mount: it reads one block, and the table checks stay out of its flash.
    pub fn open_for_read(dev: D, buf: &mut Block) -> Result<Fs<D>> {
        Fs::open_for_read_as(dev, buf)
    }

    /// [`Fs::open_for_read`] for an image that may have been cut short, as
    /// [`Fs::open_shortened`] without the group tables: what a read-only tool mounts
    /// when the tables fail (`docs/cetrafs.md` section 2, checks 3 and 7).
    pub fn open_shortened_for_read(dev: D, buf: &mut Block) -> Result<Fs<D>> {
        Fs::mount_as(dev, buf, true)
    }

    /// Mount check 7: the zone and block group tables.
    pub(super) fn check_group_tables(&self, buf: &mut Block) -> Result<()> {
        let z = self.sb.zone_group_count();
        let b = self.sb.block_group_count();
        let mut next_bg: u32 = 0;
        for zi in 0..z {
            let zg = self.zone_group(zi, buf)?;
            let first = zg.cold.first_bg_id.get();
            let count = zg.cold.bg_count.get();
            if first != next_bg {
                return Err(err(
                    ErrorKind::Mismatch {
                        expected: next_bg.into(),
                        found: first.into(),
                    },
                    "zone_group.first_bg_id",
                    zg.lba,
                    516,
                ));
            }
            let end = first
                .checked_add(count)
                .filter(|e| count >= 1 && *e <= b)
                .ok_or(err(
                    ErrorKind::OutOfRange {
                        value: count.into(),
                        max: b.saturating_sub(first).into(),
                    },
                    "zone_group.bg_count",
                    zg.lba,
                    520,
                ))?;
            if let Some(owner) = zg.owner() {
                if u32::from(owner) >= self.sb.node_capacity() {
                    return Err(err(
                        ErrorKind::OutOfRange {
                            value: owner.into(),
                            max: self.sb.node_capacity().saturating_sub(1).into(),
                        },
                        "zone_group.owner_node_id",
                        zg.lba,
                        12,
                    ));
                }
            }
            // Each descriptor is checked against the map (the free counts are cached
            // values: the checker compares them, the mount does not depend on them).
            for bi in first..end {
                self.block_group_in(bi, zi, buf)?;
            }
            next_bg = end;
        }
        if next_bg != b {
            return Err(err(
                ErrorKind::Mismatch {
                    expected: b.into(),
                    found: next_bg.into(),
                },
                "zone group table (block groups covered)",
                1,
                520,
            ));
        }
        Ok(())
    }

    /// Zone group `z`.
    pub fn zone_group(&self, z: u32, buf: &mut Block) -> Result<ZoneGroup> {
        if z >= self.sb.zone_group_count() {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: z.into(),
                    max: self.sb.zone_group_count().saturating_sub(1).into(),
                },
                "zone group",
                0,
                64,
            ));
        }
        let lba = 1u64.saturating_add(z.into());
        self.dev.read_block(lba, buf)?;
        ZoneGroup::parse(buf, lba, z)
    }

    /// Block group `bi`, whose owner is looked up from the zone group table.
    pub fn block_group(&self, bi: u32, buf: &mut Block) -> Result<BlockGroup> {
        let mut owner = None;
        for zi in 0..self.sb.zone_group_count() {
            let zg = self.zone_group(zi, buf)?;
            let first = zg.cold.first_bg_id.get();
            if bi >= first && bi < first.saturating_add(zg.cold.bg_count.get()) {
                owner = Some(zi);
                break;
            }
        }
        let owner = owner.ok_or(err(
            ErrorKind::OutOfRange {
                value: bi.into(),
                max: self.sb.block_group_count().saturating_sub(1).into(),
            },
            "block group",
            0,
            68,
        ))?;
        self.block_group_in(bi, owner, buf)
    }

    /// Calls `f` with every block group in order, reading each zone group once (so a
    /// full pass costs `Z + B` block reads, where [`Fs::block_group`] costs `Z + 1` per
    /// group). Uses only `buf`.
    pub fn for_each_block_group(
        &self,
        buf: &mut Block,
        mut f: impl FnMut(u32, Result<BlockGroup>) -> ControlFlow<()>,
    ) -> Result<()> {
        for zi in 0..self.sb.zone_group_count() {
            let zg = self.zone_group(zi, buf)?;
            let first = zg.cold.first_bg_id.get();
            let end = first
                .saturating_add(zg.cold.bg_count.get())
                .min(self.sb.block_group_count());
            for bi in first..end {
                if f(bi, self.block_group_in(bi, zi, buf)).is_break() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn block_group_in(&self, bi: u32, owner: u32, buf: &mut Block) -> Result<BlockGroup> {
        let lba = self.sb.raw().bg_table_start.get().saturating_add(bi.into());
        self.dev.read_block(lba, buf)?;
        let (start, len) = self.sb.bg_span(bi);
        BlockGroup::parse(buf, lba, bi, start, len, owner)
    }

    /// Registry row `row` (`None` when free).
    pub fn node_row(&self, row: u32, buf: &mut Block) -> Result<Option<NodeRow>> {
        if row >= self.sb.node_capacity() {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: row.into(),
                    max: self.sb.node_capacity().saturating_sub(1).into(),
                },
                "registry row",
                0,
                136,
            ));
        }
        let lba = self
            .sb
            .raw()
            .registry_start
            .get()
            .saturating_add(u64::from(row) / ROWS_PER_BLOCK);
        self.dev.read_block(lba, buf)?;
        let off = usize::try_from(u64::from(row) % ROWS_PER_BLOCK)
            .unwrap_or(0)
            .saturating_mul(128);
        NodeRow::parse(buf, lba, off, row, self.journal_start(row))
    }

    /// Pending-free slot `slot` of zone group `z` (`None` when free).
    pub fn pending_free(&self, z: u32, slot: u32, buf: &mut Block) -> Result<Option<PendingFree>> {
        let per_zg = self.sb.pending_blocks_per_zg();
        let lba = self
            .sb
            .raw()
            .pending_start
            .get()
            .saturating_add(u64::from(z).saturating_mul(per_zg))
            .saturating_add(u64::from(slot) / super::PENDING_PER_BLOCK);
        self.dev.read_block(lba, buf)?;
        let off = usize::try_from(u64::from(slot) % super::PENDING_PER_BLOCK)
            .unwrap_or(0)
            .saturating_mul(16);
        let entry = PendingFree::parse(buf, lba, off)?;
        if let Some(e) = entry {
            self.check_data_range(e.lba, e.count.into(), "pending_free.lba", lba, off)?;
        }
        Ok(entry)
    }
}

impl<D: BlockDevice, E: From<Error>> Fs<D, E> {
    /// [`Fs::open_for_read`], with `E` as the error of the mount and of everything read
    /// through this `Fs`: `Fs::<_, Fault>::open_for_read_as(dev, buf)` runs the same
    /// checks and reports one-byte [`Fault`](crate::Fault)s.
    pub fn open_for_read_as(dev: D, buf: &mut Block) -> Result<Self, E> {
        Fs::mount_as(dev, buf, false)
    }

    /// Mount checks 1-6; `short_ok` accepts a device shorter than `total_blocks`.
    pub(super) fn mount_as(dev: D, buf: &mut Block, short_ok: bool) -> Result<Self, E> {
        let blocks = dev.block_count();
        if blocks == 0 {
            return Err(err(
                ErrorKind::Truncated {
                    needed: BLOCK_SIZE_U64,
                    available: 0,
                },
                "superblock",
                0,
                0,
            ));
        }
        dev.read_block(0, buf)?;
        // `map`, not `?` and `Ok`: the superblock then moves once, into the result (on
        // Cortex-M3 the other form copies it twice, 336 bytes more code).
        let limit = if short_ok { ANY_DEVICE } else { blocks };
        Superblock::parse_as(buf, limit).map(|sb| Fs {
            dev,
            sb,
            error: PhantomData,
        })
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// The checked superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// When the device is shorter than the filesystem (an `Fs` from
    /// [`Fs::open_shortened`] over an image cut short, or a device that shrank after the
    /// mount): the error that says so, [`ErrorKind::ShortDevice`] about
    /// `superblock.total_blocks` (byte 32) with both lengths. `None` otherwise.
    pub fn shortened(&self) -> Option<Error> {
        let device_blocks = self.dev.block_count();
        let total_blocks = self.sb.total_blocks();
        (device_blocks < total_blocks).then_some(Error::new(
            ErrorKind::ShortDevice {
                device_blocks,
                total_blocks,
            },
            "superblock.total_blocks",
            32,
        ))
    }

    /// Reads block `lba` into `buf`, a device error reported as `E`: one conversion
    /// for every read of the read path.
    pub(crate) fn load(&self, lba: u64, buf: &mut Block) -> Result<(), E> {
        self.dev.read_block(lba, buf).map_err(E::from)
    }

    /// First block of registry row `row`'s journal slice.
    pub fn journal_start(&self, row: u32) -> u64 {
        self.sb
            .raw()
            .node_journal_start
            .get()
            .saturating_add(u64::from(row).saturating_mul(self.sb.node_journal_blocks()))
    }

    /// Checks that blocks `start .. start + len` lie inside one block group's data area.
    /// `lba`/`field` locate the pointer being checked, for the error.
    pub fn check_data_range(
        &self,
        start: u64,
        len: u64,
        what: &'static str,
        lba: u64,
        field: usize,
    ) -> Result<(), E> {
        let regions = self.sb.bg_regions_start();
        let size = self.sb.bg_size_blocks();
        let bad = || -> E {
            err(
                ErrorKind::OutOfRange {
                    value: start,
                    max: self.sb.total_blocks(),
                },
                what,
                lba,
                field,
            )
        };
        let rel = start.checked_sub(regions).ok_or_else(bad)?;
        let bg =
            u32::try_from(crate::arith::div_u64(rel, size).ok_or_else(bad)?).map_err(|_| bad())?;
        if bg >= self.sb.block_group_count() {
            return Err(bad());
        }
        let (bg_start, bg_len) = self.sb.bg_span(bg);
        let data_start = bg_start
            .saturating_add(1)
            .saturating_add(super::bitmap_blocks(bg_len));
        let end = start.checked_add(len).ok_or_else(bad)?;
        if start < data_start || end > bg_start.saturating_add(bg_len) {
            return Err(bad());
        }
        Ok(())
    }

    /// Inode `ino` (1 ..< `inode_count`).
    pub fn inode(&self, ino: u64, buf: &mut Block) -> Result<Inode, E> {
        let lba = self.inode_lba(ino)?;
        self.dev.read_block_prefix(lba, buf, 256).map_err(E::from)?;
        Inode::parse_as(buf, lba, ino)
    }

    /// Inode `ino` from `bytes`, the first 256 bytes of its block (from a batch of the
    /// inode table, [`BlockDevice::read_prefixes`]): what [`Fs::inode`] returns after
    /// its read.
    pub fn inode_from(&self, ino: u64, bytes: &[u8]) -> Result<Inode, E> {
        let lba = self.inode_lba(ino)?;
        Inode::parse_as(bytes, lba, ino)
    }

    /// The block of inode `ino`, or the error of an inode number out of range.
    fn inode_lba(&self, ino: u64) -> Result<u64, E> {
        if ino == 0 || ino >= self.sb.inode_count() {
            return Err(err(
                ErrorKind::OutOfRange {
                    value: ino,
                    max: self.sb.inode_count().saturating_sub(1),
                },
                "inode number",
                0,
                112,
            ));
        }
        Ok(self.sb.raw().inode_table_start.get().saturating_add(ino))
    }
}
