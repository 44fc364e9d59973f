//! Structures rebuilt from the superblock's geometry, the registry and the bitmaps
//! (docs/cetrafs.md section 14): region headers, free registry rows, pending-free
//! entries, journal flag blocks and the slot headers of clean journals. Each loses
//! nothing but a registry row in use, whose node's registration goes (`-y` only).

use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::raw::RawSlotHeader;
use tet_core::cetrafs::{Code, Finding, Fs, JOURNAL_CLEAN, JS_MAGIC, NODE_MAGIC};
use tet_core::Error;
use zerocopy::{FromBytes, IntoBytes};

use super::patches::{split, Patches};
use super::Fix;
use crate::cetrafs::records;

/// Plans the fixes of this family for finding `f`.
pub(super) fn fix_derived<D: BlockDeviceMut>(
    f: &Finding,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let fs: &Fs<D> = patches.fs;
    let sb = *fs.superblock();
    let raw = *sb.raw();
    let (lba, off) = split(f.error.offset);
    let fix = |action, offset, lossless| Fix {
        code: f.code,
        action,
        offset,
        value: None,
        lossless,
    };
    let at = |l: u64, o: usize| {
        l.saturating_mul(BLOCK_SIZE_U64)
            .saturating_add(u64::try_from(o).unwrap_or(0))
    };
    // The check reports a bad magic or checksum under `magic`/`checksum` whatever the
    // structure: the family is told by the field.
    let w = f.error.what;
    let family = match f.code {
        Code::RegionHeader | Code::Magic | Code::Checksum if w.starts_with("region_header") => {
            Code::RegionHeader
        }
        Code::RegistryRow | Code::Magic | Code::Checksum if w.starts_with("registry") => {
            Code::RegistryRow
        }
        Code::PendingEntry | Code::Magic if w.starts_with("pending_free") => Code::PendingEntry,
        Code::PendingZone | Code::PendingDuplicate => Code::PendingEntry,
        Code::JournalFlag | Code::Magic | Code::Checksum if w.starts_with("journal_flag") => {
            Code::JournalFlag
        }
        Code::JournalSlot | Code::Magic | Code::Checksum if w.starts_with("slot.") => {
            Code::JournalSlot
        }
        _ => return Ok(()),
    };
    match family {
        Code::RegionHeader => {
            let Some(bi) = (0..sb.block_group_count()).find(|b| sb.bg_span(*b).0 == lba) else {
                return Ok(());
            };
            let (start, len) = sb.bg_span(bi);
            let rh = records::region_header(bi, start, len);
            put(patches.block(lba)?, 0, rh.as_bytes());
            fixes.push(fix(
                "region header rebuilt from the superblock's geometry",
                at(lba, 0),
                true,
            ));
        }
        Code::RegistryRow => {
            let reg = raw.registry_start.get();
            if lba < reg || lba >= reg.saturating_add(raw.registry_blocks.get()) {
                return Ok(());
            }
            let row_off = off.saturating_sub(off.checked_rem(128).unwrap_or(0));
            let row = lba
                .saturating_sub(reg)
                .saturating_mul(32)
                .saturating_add(u64::try_from(off / 128).unwrap_or(0));
            if f.error.what == "registry (rows past node_capacity)" {
                let b = patches.block(lba)?;
                if let Some(tail) = b.get_mut(off..) {
                    tail.fill(0);
                }
                fixes.push(fix(
                    "registry bytes past node_capacity zeroed",
                    at(lba, off),
                    true,
                ));
                return Ok(());
            }
            // A field the row's position decides (its row number, where its journal
            // is): set from it and the row resealed, losing nothing.
            let field = match f.error.what {
                "registry.row" => Some((4usize, 4usize)),
                "registry.journal_start" => Some((40, 8)),
                _ => None,
            };
            if let (Some((at_field, len)), tet_core::ErrorKind::Mismatch { expected, .. }) =
                (field, f.error.kind)
            {
                let b = patches.block(lba)?;
                let bytes = expected.to_le_bytes();
                put(
                    b,
                    row_off.saturating_add(at_field),
                    bytes.get(..len).unwrap_or(&[]),
                );
                let c = tet_core::checksum::crc32c_skipping(
                    b.get(row_off..row_off.saturating_add(128)).unwrap_or(&[]),
                    120,
                );
                put(b, row_off.saturating_add(120), &c.to_le_bytes());
                fixes.push(fix(
                    "registry row field set from the row's position and resealed",
                    at(lba, row_off.saturating_add(at_field)),
                    true,
                ));
                return Ok(());
            }
            let mut now: Block = [0; BLOCK_SIZE];
            fs.device().read_block(lba, &mut now)?;
            let row_bytes = now.get(row_off..row_off.saturating_add(128)).unwrap_or(&[]);
            // A row in use whose magic alone was hit: restored when the checksum then
            // matches.
            let mut fixed = [0u8; 128];
            if let (Some(dst), true) = (fixed.get_mut(..), row_bytes.len() == 128) {
                dst.copy_from_slice(row_bytes);
            }
            if let Some(m) = fixed.get_mut(..4) {
                m.copy_from_slice(&NODE_MAGIC);
            }
            let stored = fixed
                .get(120..128)
                .and_then(|x| <[u8; 8]>::try_from(x).ok())
                .map(u64::from_le_bytes);
            if stored == Some(tet_core::checksum::crc32c_skipping(&fixed, 120))
                && row_bytes.get(..4) != Some(&NODE_MAGIC[..])
            {
                put(patches.block(lba)?, row_off, &NODE_MAGIC);
                fixes.push(fix(
                    "registry row magic restored (its checksum matches with it)",
                    at(lba, row_off),
                    true,
                ));
                return Ok(());
            }
            // A free row is all zero: a few stray bytes in one are zeroed; a row with
            // more is (or was) a node's, and clearing it loses what it held.
            let stray = row_bytes.iter().filter(|b| **b != 0).count() <= 8;
            let in_use = !stray || row_bytes.get(..4).is_some_and(|m| m == NODE_MAGIC);
            // A row in use is cleared only while its journal is clean: nothing of the
            // node is left to replay, only its registration is lost.
            let clean = u32::try_from(row).ok().is_some_and(|r| {
                fs.journal_flag(r, &mut [0u8; 4096])
                    .is_ok_and(|j| j.raw().state.get() == JOURNAL_CLEAN)
            });
            if in_use && !clean {
                return Ok(());
            }
            let cleared = if in_use {
                fix(
                    "registry row that does not validate cleared: the node's registration \
                     (node id, state, hostname) is lost; its journal is clean",
                    at(lba, row_off),
                    false,
                )
            } else {
                fix(
                    "free registry row's stray bytes zeroed",
                    at(lba, row_off),
                    true,
                )
            };
            if !patches.allows(&cleared) {
                return Ok(());
            }
            if let Some(r) = patches
                .block(lba)?
                .get_mut(row_off..row_off.saturating_add(128))
            {
                r.fill(0);
            }
            fixes.push(cleared);
        }
        // (`pending-in-use` is reported at the file's extent, not at the entry: the entry
        // stays until the file no longer maps the block, which never frees it.)
        Code::PendingEntry => {
            let first = raw.pending_start.get();
            if lba < first || lba >= first.saturating_add(raw.pending_blocks.get()) {
                return Ok(());
            }
            let e = off.saturating_sub(off.checked_rem(16).unwrap_or(0));
            if let Some(r) = patches.block(lba)?.get_mut(e..e.saturating_add(16)) {
                r.fill(0);
            }
            fixes.push(fix(
                "pending-free entry emptied (the bitmap rebuild reclaims what it held; no \
                 block a file maps is freed)",
                at(lba, e),
                true,
            ));
        }
        Code::JournalFlag => {
            let per = raw.node_journal_blocks.get().max(1);
            let first = raw.node_journal_start.get();
            let end = first.saturating_add(per.saturating_mul(u64::from(sb.node_capacity())));
            if lba < first || lba >= end || lba.saturating_sub(first).checked_rem(per) != Some(0) {
                return Ok(());
            }
            let row = u32::try_from(lba.saturating_sub(first).checked_div(per).unwrap_or(0))
                .unwrap_or(u32::MAX);
            // Every slot header empty: the journal holds nothing, and a clean flag is
            // all it can have said.
            // Nothing to replay: every slot header empty, not a valid header, or one whose
            // target already holds its payload (a transaction already applied).
            let mut empty = true;
            let mut hb: Block = [0; BLOCK_SIZE];
            let mut tb: Block = [0; BLOCK_SIZE];
            for s in 0..fs.journal_slots() {
                let h = lba.saturating_add(1).saturating_add(s.saturating_mul(2));
                fs.device().read_block(h, &mut hb)?;
                let Ok(hdr) = RawSlotHeader::read_from_bytes(hb.get(..64).unwrap_or(&[])) else {
                    continue;
                };
                let valid = hdr.magic == JS_MAGIC
                    && hdr.header_checksum.get()
                        == tet_core::checksum::crc32c_skipping(hb.get(..64).unwrap_or(&[]), 56);
                if !valid {
                    continue;
                }
                let applied = fs
                    .device()
                    .read_block(hdr.target_lba.get(), &mut tb)
                    .is_ok()
                    && u64::from(tet_core::checksum::crc32c(&tb[..])) == hdr.payload_checksum.get();
                if !applied {
                    empty = false;
                    break;
                }
            }
            let seq = {
                let b = patches.block(lba)?;
                u64::from_le_bytes(
                    b.get(16..24)
                        .and_then(|s| s.try_into().ok())
                        .unwrap_or([0; 8]),
                )
            };
            let flag = records::clean_journal_flag(row, seq.wrapping_add(1));
            let rebuilt = if empty {
                fix(
                    "journal flag block rebuilt CLEAN (its slots hold nothing to replay)",
                    at(lba, 0),
                    true,
                )
            } else {
                fix(
                    "journal flag block rebuilt CLEAN: the transactions its slots hold are \
                     not replayed",
                    at(lba, 0),
                    false,
                )
            };
            if patches.allows(&rebuilt) {
                put(patches.block(lba)?, 0, flag.as_bytes());
                fixes.push(rebuilt);
            }
        }
        Code::JournalSlot => {
            let per = raw.node_journal_blocks.get().max(1);
            let first = raw.node_journal_start.get();
            let end = first.saturating_add(per.saturating_mul(u64::from(sb.node_capacity())));
            if lba < first || lba >= end {
                return Ok(());
            }
            let rel = lba.saturating_sub(first).checked_rem(per).unwrap_or(0);
            let row = u32::try_from(lba.saturating_sub(first).checked_div(per).unwrap_or(0))
                .unwrap_or(u32::MAX);
            // Only a header (odd block of the slice) of a journal whose flag says CLEAN:
            // nothing in it will be replayed.
            let clean = fs
                .journal_flag(row, &mut [0u8; 4096])
                .is_ok_and(|j| j.raw().state.get() == JOURNAL_CLEAN);
            if rel == 0 || rel.checked_rem(2) == Some(0) || !clean {
                return Ok(());
            }
            if let Some(h) = patches.block(lba)?.get_mut(..64) {
                h.fill(0);
            }
            fixes.push(fix(
                "slot header of a clean journal emptied (nothing in it is replayed)",
                at(lba, 0),
                true,
            ));
        }
        _ => {}
    }
    Ok(())
}

fn put(b: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = b.get_mut(at..at.saturating_add(bytes.len())) {
        dst.copy_from_slice(bytes);
    }
}
