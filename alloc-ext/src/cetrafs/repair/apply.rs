//! Writing a round's blocks: through a clean journal as committed transactions,
//! replayed one by one, and the hot-sector group tables by compare-and-write.

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::raw::{RawJournalFlag, RawSlotHeader};
use tet_core::cetrafs::replay::{replay, ReplayOptions, ReplayReport};
use tet_core::cetrafs::{
    bitmap_blocks, Buffers, Finding, Fs, F_COMMIT, JOURNAL_CLEAN, JOURNAL_DIRTY, JS_MAGIC,
};
use tet_core::checksum::{crc32c, crc32c_skipping};
use tet_core::{Error, ErrorKind};
use zerocopy::{FromBytes, IntoBytes};

use super::{RepairError, RepairOptions};
use crate::cetrafs::journal::committed_slots;

/// Writes `blocks` through a clean journal as committed transactions of at most one
/// journal's slots each, replaying each before the next.
pub(super) fn apply<D: BlockDeviceMut>(
    fs: &Fs<D>,
    blocks: &BTreeMap<u64, Block>,
    fresh: &[u64],
    opts: &RepairOptions,
    txn: &mut u64,
    bufs: &mut Buffers,
) -> Result<(), RepairError> {
    let sb = *fs.superblock();
    let slots = fs.journal_slots();
    // Journal flag blocks and slot headers are never journal targets: a rebuilt flag
    // goes by compare-and-write of its hot sector, a clean journal's emptied slot header
    // by a plain write (nothing reads it), both before any journal is chosen.
    let journals = sb.raw().node_journal_start.get();
    let journals_end = journals.saturating_add(
        u64::from(sb.node_capacity()).saturating_mul(sb.raw().node_journal_blocks.get()),
    );
    let in_journals = |l: u64| l >= journals && l < journals_end;
    let per_journal = sb.raw().node_journal_blocks.get().max(1);
    for (lba, new) in blocks.iter().filter(|(l, _)| in_journals(**l)) {
        if lba.saturating_sub(journals).checked_rem(per_journal) == Some(0) {
            let old = read_sector(fs, *lba, &mut bufs.data)?;
            let sector = first_sector(new);
            if old != sector && !fs.device().compare_and_write(*lba, &old, &sector)? {
                return Err(RepairError::NoJournal);
            }
        } else {
            fs.device().write_block(*lba, new)?;
        }
    }
    fs.device().flush()?;
    // The group tables are hot-sector records (section 1): written by compare-and-write
    // of their first 512 bytes, after the journaled blocks, never through a journal
    // (whose targets lie past them).
    let tables_end = sb.raw().inode_bitmap_start.get();
    // Batches are atomic, their order is not: blocks nothing references yet go first,
    // then bitmaps, then the blocks that reference them, so a cut between batches leaves
    // at worst an unreferenced block or a leaked bit, which the next round fixes.
    let ib = sb.raw().inode_bitmap_start.get();
    let ib_end = ib.saturating_add(sb.raw().inode_bitmap_blocks.get());
    let mut bitmap_blocks_set: Vec<(u64, u64)> = vec![(ib, ib_end)];
    for bi in 0..sb.block_group_count() {
        let (start, len) = sb.bg_span(bi);
        let first = start.saturating_add(1);
        bitmap_blocks_set.push((first, first.saturating_add(bitmap_blocks(len))));
    }
    let rank = |l: u64| -> u8 {
        if fresh.contains(&l) {
            0
        } else if bitmap_blocks_set.iter().any(|(a, b)| l >= *a && l < *b) {
            1
        } else {
            2
        }
    };
    let mut list: Vec<(&u64, &Block)> = blocks
        .iter()
        .filter(|(l, _)| **l >= tables_end && !in_journals(**l))
        .collect();
    list.sort_by_key(|(l, _)| (rank(**l), **l));
    let hot: Vec<(&u64, &Block)> = blocks.iter().filter(|(l, _)| **l < tables_end).collect();
    let row = if list.is_empty() {
        0
    } else {
        if slots == 0 {
            return Err(RepairError::NoJournal);
        }
        (0..sb.node_capacity())
            .find(|r| {
                fs.journal_flag(*r, &mut bufs.data)
                    .is_ok_and(|f| f.raw().state.get() == JOURNAL_CLEAN)
            })
            .ok_or(RepairError::NoJournal)?
    };
    let per = usize::try_from(slots).unwrap_or(1).max(1);
    let start = fs.journal_start(row);
    for batch in list.chunks(per) {
        *txn = txn.saturating_add(1);
        let n = u32::try_from(batch.len()).unwrap_or(0);
        for (k, (target, new)) in batch.iter().enumerate() {
            let k32 = u32::try_from(k).unwrap_or(0);
            fs.device().read_block(**target, &mut bufs.data)?;
            let mut h = RawSlotHeader::read_from_bytes(&[0u8; 64][..])
                .map_err(|_| Error::new(ErrorKind::Invalid, "slot", 0))?;
            h.magic = JS_MAGIC;
            h.flags.set(if k32.saturating_add(1) == n {
                F_COMMIT
            } else {
                0
            });
            h.txn_id.set(*txn);
            h.target_lba.set(**target);
            h.payload_checksum.set(u64::from(crc32c(&new[..])));
            h.pre_checksum.set(u64::from(crc32c(&bufs.data[..])));
            h.txn_index.set(k32);
            h.txn_slots.set(n);
            h.header_checksum.set(crc32c_skipping(h.as_bytes(), 56));
            let hdr = start
                .saturating_add(1)
                .saturating_add(u64::from(k32).saturating_mul(2));
            let mut hb: Block = [0; BLOCK_SIZE];
            if let Some(dst) = hb.get_mut(..64) {
                dst.copy_from_slice(h.as_bytes());
            }
            fs.device().write_block(hdr.saturating_add(1), new)?;
            fs.device().write_block(hdr, &hb)?;
        }
        // The rest of the journal's slots: empty, so no stale slot joins the transaction.
        let empty: Block = [0; BLOCK_SIZE];
        for k in u64::from(n)..slots {
            let hdr = start.saturating_add(1).saturating_add(k.saturating_mul(2));
            fs.device().read_block(hdr, &mut bufs.data)?;
            if bufs.data.iter().any(|b| *b != 0) {
                fs.device().write_block(hdr, &empty)?;
            }
        }
        fs.device().flush()?;
        // Commit: the flag goes DIRTY by compare-and-write of its hot sector.
        let old = read_sector(fs, start, &mut bufs.data)?;
        let mut flag = RawJournalFlag::read_from_bytes(bufs.data.get(..64).unwrap_or(&[]))
            .map_err(|_| Error::new(ErrorKind::Invalid, "journal flag", start))?;
        flag.state.set(JOURNAL_DIRTY);
        flag.seq.set(flag.seq.get().wrapping_add(1));
        flag.checksum.set(crc32c_skipping(flag.as_bytes(), 56));
        let mut new = old;
        if let Some(dst) = new.get_mut(..64) {
            dst.copy_from_slice(flag.as_bytes());
        }
        if !fs.device().compare_and_write(start, &old, &new)? {
            return Err(RepairError::NoJournal);
        }
        fs.device().flush()?;
        replay_all(fs, opts, bufs)?;
    }
    for (lba, new) in hot {
        let old = read_sector(fs, *lba, &mut bufs.data)?;
        let sector = first_sector(new);
        if old != sector && !fs.device().compare_and_write(*lba, &old, &sector)? {
            return Err(RepairError::NoJournal);
        }
    }
    fs.device().flush()?;
    Ok(())
}

pub(super) fn replay_all<D: BlockDeviceMut>(
    fs: &Fs<D>,
    opts: &RepairOptions,
    bufs: &mut Buffers,
) -> Result<ReplayReport, RepairError> {
    // Replay gathers the slots into the table again; this sizes it.
    let mut table = committed_slots(fs, bufs)?;
    let report = replay(
        fs,
        ReplayOptions {
            node_id: opts.node_id,
            force: true,
        },
        &mut table,
        bufs,
        &mut |_: &Finding| {},
    )?;
    Ok(report)
}

/// The first 512 bytes of block `lba` as the device holds it now (the hot sector a
/// compare-and-write compares).
fn read_sector<D: BlockDeviceMut>(
    fs: &Fs<D>,
    lba: u64,
    buf: &mut Block,
) -> Result<[u8; 512], Error> {
    fs.device().read_block(lba, buf)?;
    Ok(first_sector(buf))
}

fn first_sector(b: &Block) -> [u8; 512] {
    let mut s = [0u8; 512];
    s.copy_from_slice(b.get(..512).unwrap_or(&[0; 512]));
    s
}
