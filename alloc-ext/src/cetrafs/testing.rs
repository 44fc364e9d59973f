//! Tools for tests and fuzzing (feature `testing`): journal transactions written
//! directly, registry rows, and resealing every checksum after a mutation.

use alloc::vec::Vec;

use super::mkfs::*;
use tet_core::block::{Block, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::{RawJournalFlag, RawNodeRow, RawSlotHeader};
use tet_core::cetrafs::{
    Superblock, F_COMMIT, F_FRESH, INODE_MAGIC, JF_MAGIC, JOURNAL_DIRTY, JS_MAGIC, NODE_MAGIC,
    ROWS_PER_BLOCK, SB_CHECKSUM_AT, SB_CLEAN, TAIL_AT, TAIL_DIR, TAIL_EXTENT, TAIL_XATTR,
    ZG_COLD_AT,
};
use tet_core::checksum::{crc32c, crc32c_skipping};
use tet_core::Error;
use zerocopy::{FromZeros, IntoBytes};

fn seal(buf: &mut [u8], field: usize) {
    let c = crc32c_skipping(buf, field);
    put(buf, field, &c.to_le_bytes());
}

/// The superblock of a whole image held in memory.
fn image_superblock(img: &[u8]) -> Result<Superblock, Error> {
    let blk0: &[u8; BLOCK_SIZE] = img
        .get(..BLOCK_SIZE)
        .and_then(|b| b.try_into().ok())
        .ok_or(invalid("image"))?;
    Superblock::parse(blk0, u64::try_from(img.len()).unwrap_or(0) / BLOCK_SIZE_U64)
}

/// Writes one transaction into registry row `row`'s journal of `img`, starting at slot
/// `first_slot`: each `(target, payload, fresh)` becomes a slot; `commit` sets `F_COMMIT`
/// on the last; `dirty` sets the flag block `DIRTY` (and clears the superblock's
/// `SB_CLEAN`, as a crash after the commit leaves it). The pre-change checksum is the crc
/// of the target block as `img` holds it now. A test tool (feature `testing`).
pub fn write_journal_txn(
    img: &mut [u8],
    row: u32,
    first_slot: u64,
    txn_id: u64,
    writes: &[(u64, Vec<u8>, bool)],
    commit: bool,
    dirty: bool,
) -> Result<(), Error> {
    let sb = image_superblock(img)?;
    if row >= sb.node_capacity() {
        return Err(invalid("journal row"));
    }
    // Geometry from a superblock that parsed: every block number below lies inside the
    // image, so the arithmetic saturates where it cannot overflow.
    let slice = journal_of(&sb, row);
    let slots = sb.node_journal_blocks().saturating_sub(1) / 2;
    if first_slot.saturating_add(u64::try_from(writes.len()).unwrap_or(u64::MAX)) > slots {
        return Err(full("journal slots"));
    }
    if writes
        .iter()
        .any(|(t, p, _)| *t >= sb.total_blocks() || p.len() > BLOCK_SIZE)
    {
        return Err(invalid("journal write"));
    }
    let n = u32::try_from(writes.len()).map_err(|_| full("journal slots"))?;
    for (i, (target, payload, fresh)) in writes.iter().enumerate() {
        let index = u32::try_from(i).map_err(|_| full("journal slots"))?;
        let mut page: Block = [0; BLOCK_SIZE];
        put(&mut page, 0, payload);
        let at = usize_of(target.saturating_mul(BLOCK_SIZE_U64));
        let pre = img
            .get(at..at.saturating_add(BLOCK_SIZE))
            .map_or(0, |b| u64::from(crc32c(b)));
        let mut h = RawSlotHeader::new_zeroed();
        h.magic = JS_MAGIC;
        let last = index.saturating_add(1) == n;
        h.flags
            .set(if *fresh { F_FRESH } else { 0 } | if commit && last { F_COMMIT } else { 0 });
        h.txn_id.set(txn_id);
        h.target_lba.set(*target);
        h.payload_checksum.set(u64::from(crc32c(&page)));
        h.pre_checksum.set(if *fresh { 0 } else { pre });
        h.txn_index.set(index);
        h.txn_slots.set(n);
        h.header_checksum.set(crc32c_skipping(h.as_bytes(), 56));
        let hdr = first_slot
            .saturating_add(u64::from(index))
            .saturating_mul(2)
            .saturating_add(slice)
            .saturating_add(1);
        let mut hb: Block = [0; BLOCK_SIZE];
        put(&mut hb, 0, h.as_bytes());
        MemSink(img).write_block(hdr, &hb)?;
        MemSink(img).write_block(hdr.saturating_add(1), &page)?;
    }
    let mut f = RawJournalFlag::new_zeroed();
    f.magic = JF_MAGIC;
    f.state.set(if dirty { JOURNAL_DIRTY } else { 0 });
    f.seq.set(txn_id);
    f.row.set(row);
    f.checksum.set(crc32c_skipping(f.as_bytes(), 56));
    let mut fb: Block = [0; BLOCK_SIZE];
    put(&mut fb, 0, f.as_bytes());
    MemSink(img).write_block(slice, &fb)?;
    if dirty {
        // A dirty journal means the filesystem was not cleanly unmounted.
        let mut raw = *sb.raw();
        raw.sb_flags.set(raw.sb_flags.get() & !SB_CLEAN);
        raw.checksum
            .set(crc32c_skipping(raw.as_bytes(), SB_CHECKSUM_AT));
        put(img, 0, raw.as_bytes());
    }
    Ok(())
}

/// The first block of registry row `row`'s journal.
fn journal_of(sb: &Superblock, row: u32) -> u64 {
    sb.raw()
        .node_journal_start
        .get()
        .saturating_add(u64::from(row).saturating_mul(sb.node_journal_blocks()))
}

fn le64(img: &[u8], at: usize) -> u64 {
    img.get(at..at.saturating_add(8))
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes)
}

fn le32(img: &[u8], at: usize) -> u32 {
    img.get(at..at.saturating_add(4))
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(0, u32::from_le_bytes)
}

/// Writes registry row `row` of `img` for node `node_id` in `state` (1 `ACTIVE`,
/// 2 `FENCED`, 3 `LEFT`), sealed. A test tool (feature `testing`).
pub fn register_node(
    img: &mut [u8],
    row: u32,
    node_id: u64,
    state: u32,
    hostname: &[u8],
) -> Result<(), Error> {
    let sb = image_superblock(img)?;
    if row >= sb.node_capacity() || hostname.len() > 64 {
        return Err(invalid("registry row"));
    }
    let mut r = RawNodeRow::new_zeroed();
    r.magic = NODE_MAGIC;
    r.row.set(row);
    r.node_id.set(node_id);
    r.state.set(state);
    r.journal_start.set(journal_of(&sb, row));
    put(&mut r.hostname, 0, hostname);
    let mut bytes = r.as_bytes().to_vec();
    seal(&mut bytes, 120);
    let at = usize_of(
        sb.raw()
            .registry_start
            .get()
            .saturating_add(u64::from(row) / ROWS_PER_BLOCK)
            .saturating_mul(BLOCK_SIZE_U64),
    )
    .saturating_add(usize_of(u64::from(row) % ROWS_PER_BLOCK).saturating_mul(128));
    put(img, at, &bytes);
    Ok(())
}

/// Recomputes every checksum of `img` in place, reading the geometry from the (possibly
/// corrupt) superblock without trusting it: every loop is bounded by the image size.
/// Fuzz targets use this so mutations get past the checksums to the checks behind them.
/// A test tool (feature `testing`).
pub fn reseal(img: &mut [u8]) {
    let nblocks = u64::try_from(img.len() / BLOCK_SIZE).unwrap_or(0);
    let seal_at = |img: &mut [u8], lba: u64, start: usize, len: usize, field: usize| {
        let base = usize_of(lba.saturating_mul(BLOCK_SIZE_U64)).saturating_add(start);
        if let Some(s) = img.get_mut(base..base.saturating_add(len)) {
            seal(s, field);
        }
    };
    if img.len() < 424 {
        return;
    }
    let z = u64::from(le32(img, 64)).min(nblocks);
    let b = u64::from(le32(img, 68)).min(nblocks);
    // Every loop below is bounded by the block count, so `1 + z + i` and the like stay
    // far below 2^64; offsets saturate (and then miss the image) where a value read from
    // the superblock is wild.
    for i in 1..=z {
        seal_at(img, i, 0, 64, 56);
        seal_at(img, i, ZG_COLD_AT, 64, 56);
    }
    for i in 0..b {
        seal_at(img, z.saturating_add(1).saturating_add(i), 0, 128, 112);
    }
    let (regions, size) = (le64(img, 176), le64(img, 184).max(1));
    for i in 0..b {
        seal_at(
            img,
            regions.saturating_add(i.saturating_mul(size)),
            0,
            64,
            56,
        );
    }
    let (reg, reg_blocks) = (le64(img, 120), le64(img, 128).min(nblocks));
    for blk in 0..reg_blocks {
        for r in 0..usize_of(ROWS_PER_BLOCK) {
            let at = usize_of(reg.saturating_add(blk).saturating_mul(BLOCK_SIZE_U64))
                .saturating_add(r.saturating_mul(128));
            if img.get(at..at.saturating_add(4)) == Some(&b"CTND"[..]) {
                seal_at(
                    img,
                    reg.saturating_add(blk),
                    r.saturating_mul(128),
                    128,
                    120,
                );
            }
        }
    }
    let (js, jb, n) = (le64(img, 160), le64(img, 168), u64::from(le32(img, 136)));
    for row in 0..n.min(nblocks) {
        let slice = js.saturating_add(row.saturating_mul(jb));
        seal_at(img, slice, 0, 64, 56);
        for s in 0..jb.saturating_sub(1).min(nblocks) / 2 {
            let hdr = slice.saturating_add(1).saturating_add(s.saturating_mul(2));
            let at = usize_of(hdr.saturating_mul(BLOCK_SIZE_U64));
            if img.get(at..at.saturating_add(4)) == Some(&JS_MAGIC[..]) {
                seal_at(img, hdr, 0, 64, 56);
            }
        }
    }
    let magic_at = |img: &[u8], at: usize| {
        img.get(at..at.saturating_add(4))
            .and_then(|h| <[u8; 4]>::try_from(h).ok())
    };
    for lba in 0..nblocks {
        let at = usize_of(lba.saturating_mul(BLOCK_SIZE_U64));
        if magic_at(img, at) == Some(INODE_MAGIC) {
            seal_at(img, lba, 0, 256, 248);
        }
        let tail = magic_at(img, at.saturating_add(TAIL_AT));
        if matches!(tail, Some(t) if t == TAIL_EXTENT || t == TAIL_DIR || t == TAIL_XATTR) {
            seal_at(img, lba, 0, BLOCK_SIZE, TAIL_AT + 8);
        }
    }
    if let Some(sb) = img.get_mut(..424) {
        seal(sb, SB_CHECKSUM_AT);
    }
}
