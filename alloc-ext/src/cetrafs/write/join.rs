//! Joining and leaving as a node, and recovering a node that crashed
//! (`docs/cetrafs.md` section 15: "Refusals", "Join", "Leave", "Recovery").

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::RawNodeRow;
use tet_core::cetrafs::replay::{replay, ReplayOptions};
use tet_core::cetrafs::{
    Buffers, Fs, NodeState, NODE_MAGIC, ROWS_PER_BLOCK, SB_CHECKSUM_AT, SB_CLEAN,
};
use tet_core::checksum::crc32c_skipping;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::txn::{changed, first_sector};
use super::{Errno, JoinOptions, WriteError, Writer};
use crate::cetrafs::journal::committed_slots;

const ACTIVE: u32 = NodeState::Active.raw();
const FENCED: u32 = NodeState::Fenced.raw();
const LEFT: u32 = NodeState::Left.raw();

/// What [`recover`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The row recovered, if the node had one that was not `LEFT`.
    pub row: Option<u32>,
    /// Journal slots replay wrote.
    pub replayed: u64,
    /// Zone groups released.
    pub released: u32,
}

/// Registry row `row` as raw bytes, and where it lies.
fn row_at<D: BlockDeviceMut>(fs: &Fs<D>, row: u32) -> Result<(u64, usize, RawNodeRow), WriteError> {
    let lba = fs
        .superblock()
        .raw()
        .registry_start
        .get()
        .saturating_add(u64::from(row) / ROWS_PER_BLOCK);
    let off = usize::try_from(u64::from(row) % ROWS_PER_BLOCK)
        .unwrap_or(0)
        .saturating_mul(128);
    let mut b: Block = [0; BLOCK_SIZE];
    fs.device().read_block(lba, &mut b)?;
    let r = RawNodeRow::read_from_bytes(b.get(off..off.saturating_add(128)).unwrap_or(&[]))
        .map_err(|_| changed("registry row", lba))?;
    Ok((lba, off, r))
}

/// Writes registry row `r` (sealed) into its block, flushed.
fn write_row<D: BlockDeviceMut>(fs: &Fs<D>, row: u32, r: RawNodeRow) -> Result<(), WriteError> {
    let (_, _, now) = row_at(fs, row)?;
    write_row_over(fs, row, &now, r)
}

/// Writes registry row `r` (sealed) into its block, flushed, only if the row still
/// reads `expected`: a compare-and-write of the row, made atomic against the other
/// writers of this host by the caller's hold on the registry (docs/cetrafs.md section
/// 15, "Holding an image"); the other rows of the block are written as they read.
fn write_row_over<D: BlockDeviceMut>(
    fs: &Fs<D>,
    row: u32,
    expected: &RawNodeRow,
    mut r: RawNodeRow,
) -> Result<(), WriteError> {
    let (lba, off, now) = row_at(fs, row)?;
    if now.as_bytes() != expected.as_bytes() {
        return Err(changed("registry row", lba));
    }
    r.checksum.set(crc32c_skipping(r.as_bytes(), 120));
    let mut b: Block = [0; BLOCK_SIZE];
    fs.device().read_block(lba, &mut b)?;
    if let Some(d) = b.get_mut(off..off.saturating_add(128)) {
        d.copy_from_slice(r.as_bytes());
    }
    fs.device().write_block(lba, &b)?;
    fs.device().flush()?;
    Ok(())
}

/// Sets or clears `SB_CLEAN` in the primary superblock (one compare-and-write of sector
/// 0, flushed); returns whether it was set.
fn set_sb_clean<D: BlockDeviceMut>(fs: &Fs<D>, clean: bool) -> Result<bool, WriteError> {
    let mut b: Block = [0; BLOCK_SIZE];
    fs.device().read_block(0, &mut b)?;
    let old = first_sector(&b);
    let now = tet_core::cetrafs::raw::RawSuperblock::read_from_bytes(old.get(..424).unwrap_or(&[]))
        .map_err(|_| changed("superblock", 0))?;
    let was = now.sb_flags.get() & SB_CLEAN != 0;
    if was == clean {
        return Ok(was);
    }
    let mut raw = now;
    let flags = raw.sb_flags.get();
    raw.sb_flags.set(if clean {
        flags | SB_CLEAN
    } else {
        flags & !SB_CLEAN
    });
    raw.checksum
        .set(crc32c_skipping(raw.as_bytes(), SB_CHECKSUM_AT));
    let mut new = old;
    if let Some(d) = new.get_mut(..424) {
        d.copy_from_slice(raw.as_bytes());
    }
    if !fs.device().compare_and_write(0, &old, &new)? {
        return Err(changed("superblock", 0));
    }
    fs.device().flush()?;
    Ok(was)
}

/// Recovers node `node_id` after a crash, with no second node (section 15): replays
/// its journal (forced), sets the free counts of the zone groups its row owns from
/// their bitmaps and releases them, and marks the row `LEFT`; with no other node
/// `ACTIVE` and no journal dirty, sets `SB_CLEAN`. Idempotent; a node with
/// no row, or whose row has `LEFT` with a clean journal, is left as it is.
pub fn recover<D: BlockDeviceMut>(dev: D, node_id: u64) -> Result<Recovered, WriteError> {
    let mut bufs = Buffers::new();
    let fs = Fs::open(dev, &mut bufs.data)?;
    recover_in(fs, node_id).map(|(r, _)| r)
}

fn recover_in<D: BlockDeviceMut>(
    fs: Fs<D>,
    node_id: u64,
) -> Result<(Recovered, Fs<D>), WriteError> {
    let mut bufs = Buffers::new();
    let mut out = Recovered::default();
    let Some(row) = find_row(&fs, node_id)? else {
        return Ok((out, fs));
    };
    let (_, _, r) = row_at(&fs, row)?;
    let dirty = fs.journal_flag(row, &mut bufs.data)?.is_dirty();
    if r.state.get() == LEFT && !dirty {
        return Ok((out, fs));
    }
    out.row = Some(row);
    if dirty {
        let mut table = committed_slots(&fs, &mut bufs)?;
        let rep = replay(
            &fs,
            ReplayOptions {
                node_id,
                force: true,
            },
            &mut table,
            &mut bufs,
            &mut |_: &tet_core::cetrafs::Finding| {},
        )?;
        out.replayed = rep.written;
    }
    // The zone groups the row owns: counts from the bitmaps, then released.
    let mut w = Writer::bare(fs, node_id, row)?;
    let zones = u32::try_from(w.zones.len()).unwrap_or(0);
    for z in 0..zones {
        let mut b: Block = [0; BLOCK_SIZE];
        let zg = w.fs.zone_group(z, &mut b)?;
        if zg.owner().map(u32::from) != Some(row) {
            continue;
        }
        let (first, n) = (zg.cold().first_bg_id.get(), zg.cold().bg_count.get());
        for bg in first..first.saturating_add(n) {
            let d = w.fs.block_group(bg, &mut b)?;
            let counted = w.count_free(bg)?;
            let seq = d.raw().reconcile_seq.get().wrapping_add(1);
            w.write_group_count(bg, counted, seq)?;
            w.counts.insert(
                bg,
                super::GroupCount {
                    free: counted,
                    reconcile_seq: seq,
                },
            );
        }
        // The counts durable before the release: a released zone group is no longer
        // the row's, so a recovery run again after a cut would not set them.
        w.fs.device().flush()?;
        w.write_zone(z, None)?;
        w.fs.device().flush()?;
        out.released = out.released.saturating_add(1);
    }
    let (_, _, mut r) = row_at(&w.fs, row)?;
    if r.magic == NODE_MAGIC && r.state.get() != LEFT {
        r.state.set(LEFT);
        write_row(&w.fs, row, r)?;
    }
    // With no node left ACTIVE and every journal clean, the filesystem is clean again.
    let mut live = false;
    for other in 0..w.fs.superblock().node_capacity() {
        let (_, _, o) = row_at(&w.fs, other)?;
        let dirty = w.fs.journal_flag(other, &mut bufs.data)?.is_dirty();
        live |= dirty || (o.magic == NODE_MAGIC && o.state.get() == ACTIVE);
    }
    if !live {
        set_sb_clean(&w.fs, true)?;
    }
    Ok((out, w.fs))
}

/// Recovers every writer whose row is `ACTIVE` or `FENCED` (section 15, "Recovery of a
/// crashed writer"), in row order: for a caller that knows no node is alive (the host's
/// `replay`, holding the image's gate). Each recovery is [`recover`]'s; the result
/// names each node recovered with what was done. Idempotent, as [`recover`] is.
pub fn recover_all<D: BlockDeviceMut>(dev: D) -> Result<Vec<(u64, Recovered)>, WriteError> {
    let mut bufs = Buffers::new();
    let mut fs = Fs::open(dev, &mut bufs.data)?;
    let mut crashed = Vec::new();
    for row in 0..fs.superblock().node_capacity() {
        let (_, _, r) = row_at(&fs, row)?;
        let state = NodeState::from_raw(r.state.get());
        if r.magic == NODE_MAGIC && matches!(state, Some(NodeState::Active | NodeState::Fenced)) {
            crashed.push(r.node_id.get());
        }
    }
    let mut out = Vec::with_capacity(crashed.len());
    for id in crashed {
        let (r, back) = recover_in(fs, id)?;
        fs = back;
        out.push((id, r));
    }
    Ok(out)
}

/// The row whose node id is `node_id`.
fn find_row<D: BlockDeviceMut>(fs: &Fs<D>, node_id: u64) -> Result<Option<u32>, WriteError> {
    for row in 0..fs.superblock().node_capacity() {
        let (_, _, r) = row_at(fs, row)?;
        if r.magic == NODE_MAGIC && r.node_id.get() == node_id {
            return Ok(Some(row));
        }
    }
    Ok(None)
}

impl<D: BlockDeviceMut> Writer<D> {
    /// A writer over `fs` as row `row`, nothing written, zone table read.
    fn bare(fs: Fs<D>, node_id: u64, row: u32) -> Result<Self, WriteError> {
        let mut zones = Vec::new();
        let mut b: Block = [0; BLOCK_SIZE];
        for z in 0..fs.superblock().zone_group_count() {
            let zg = fs.zone_group(z, &mut b)?;
            zones.push((zg.cold().first_bg_id.get(), zg.cold().bg_count.get()));
        }
        let fs_xattr = fs.superblock().raw().feature_compat.get() & 1 != 0;
        Ok(Writer {
            fs,
            node_id,
            row,
            next_txn: 1,
            stale: 0,
            was_clean: false,
            owned: Vec::new(),
            zones,
            counts: BTreeMap::new(),
            inode_hint: 2,
            now_ns: 0,
            left: false,
            xattrs_enabled: fs_xattr,
            batch: false,
            pending: super::txn::Txn::default(),
        })
    }

    /// Joins the filesystem on `dev` as a node (section 15): checks the refusals,
    /// recovers the node's own crash, clears `SB_CLEAN`, writes its row `ACTIVE`.
    pub fn join(dev: D, opts: &JoinOptions) -> Result<Self, WriteError> {
        if opts.node_id == 0 || opts.hostname.len() > 64 {
            return Err(Errno::EINVAL.into());
        }
        let mut bufs = Buffers::new();
        let fs = Fs::open(dev, &mut bufs.data)?;
        if fs.superblock().read_only() {
            return Err(Errno::EROFS.into());
        }
        let rows = fs.superblock().node_capacity();
        let mut mine: Option<u32> = None;
        let mut free: Option<u32> = None;
        for row in 0..rows {
            let (_, _, r) = row_at(&fs, row)?;
            let dirty = fs.journal_flag(row, &mut bufs.data)?.is_dirty();
            if r.magic != NODE_MAGIC {
                if r.as_bytes().iter().all(|b| *b == 0) && free.is_none() && !dirty {
                    free = Some(row);
                }
                if dirty {
                    return Err(WriteError::NeedsReplay { row, node_id: 0 });
                }
                continue;
            }
            let id = r.node_id.get();
            if id == opts.node_id {
                mine = Some(row);
                continue;
            }
            match r.state.get() {
                ACTIVE => {
                    let end = r.hostname.iter().position(|b| *b == 0).unwrap_or(64);
                    return Err(WriteError::NodeActive {
                        row,
                        node_id: id,
                        hostname: r.hostname.get(..end).unwrap_or(&[]).to_vec(),
                    });
                }
                FENCED => return Err(WriteError::NeedsReplay { row, node_id: id }),
                _ if dirty => return Err(WriteError::NeedsReplay { row, node_id: id }),
                _ => {}
            }
        }
        let row = mine.or(free).ok_or(Errno::ENOSPC)?;
        // Zone groups owned by rows that are not this node's (none is live, above).
        for z in 0..fs.superblock().zone_group_count() {
            let zg = fs.zone_group(z, &mut bufs.data)?;
            if let Some(o) = zg.owner() {
                if u32::from(o) != row {
                    return Err(WriteError::ZoneOwned {
                        zone_group: z,
                        owner: o,
                    });
                }
            }
        }
        let fs = if mine.is_some() {
            // Our own crash: recovered first (a no-op after a clean leave).
            recover_in(fs, opts.node_id)?.1
        } else {
            fs
        };
        // txn_ids: past every id any journal holds; our journal's stale headers.
        let slots = fs.journal_slots();
        let mut max_txn = 0u64;
        let mut stale = 0u64;
        for r in 0..rows {
            for s in 0..slots {
                match fs.journal_slot(r, s, &mut bufs) {
                    Ok(Some(sl)) => {
                        max_txn = max_txn.max(sl.header().txn_id.get());
                        if r == row {
                            stale = s.saturating_add(1);
                        }
                    }
                    Ok(None) => {}
                    Err(_) => {
                        if r == row {
                            stale = s.saturating_add(1);
                        }
                    }
                }
            }
        }
        let was_clean = set_sb_clean(&fs, false)?;
        // The row as recovery left it: what the compare-and-write expects.
        let (_, _, old) = row_at(&fs, row)?;
        let mut r = RawNodeRow::new_zeroed();
        r.magic = NODE_MAGIC;
        r.row.set(row);
        r.node_id.set(opts.node_id);
        r.state.set(ACTIVE);
        r.lease_seq.set(if old.magic == NODE_MAGIC {
            old.lease_seq.get().wrapping_add(1)
        } else {
            0
        });
        r.last_heartbeat.set(opts.now_secs);
        r.journal_start.set(fs.journal_start(row));
        if let Some(d) = r.hostname.get_mut(..opts.hostname.len()) {
            d.copy_from_slice(&opts.hostname);
        }
        write_row_over(&fs, row, &old, r)?;
        let mut w = Writer::bare(fs, opts.node_id, row)?;
        w.next_txn = max_txn.saturating_add(1).max(1);
        w.stale = stale;
        w.was_clean = was_clean;
        w.now_ns = opts.now_secs.saturating_mul(1_000_000_000);
        Ok(w)
    }

    /// Leaves (section 15): every zone group released with its free count, the row
    /// `LEFT`, `SB_CLEAN` set again if the join cleared it.
    pub fn leave(mut self) -> Result<(), WriteError> {
        self.sync()?;
        self.left = true;
        // The last transaction's free counts durable before the zone groups are
        // released (a flush does not order the writes before it: a release that landed
        // without them would leave counts that no recovery sets, the zone group no
        // longer being the row's).
        self.fs.device().flush()?;
        for z in self.owned.clone() {
            self.release_zone(z)?;
        }
        self.fs.device().flush()?;
        let (_, _, mut r) = row_at(&self.fs, self.row)?;
        r.state.set(LEFT);
        write_row(&self.fs, self.row, r)?;
        if self.was_clean {
            set_sb_clean(&self.fs, true)?;
        }
        Ok(())
    }
}

// Byte offsets of the registry and superblock records are the zerocopy structs'.
const _: () = assert!(core::mem::size_of::<RawNodeRow>() == 128);
const _: u64 = BLOCK_SIZE_U64;
