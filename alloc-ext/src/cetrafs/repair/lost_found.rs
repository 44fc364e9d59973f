//! Orphans named in `/lost+found` (made when absent) by their inode number.

use alloc::vec::Vec;

use tet_core::block::{BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::{
    bitmap_blocks, Buffers, Code, Finding, Fs, BITS_PER_BITMAP_BLOCK, TAIL_AT,
};
use tet_core::Error;

use super::bitmaps::free_bit;
use super::entries::write_suffix;
use super::patches::{reseal_tail, set_bit, Patches};
use super::Fix;
use crate::cetrafs::fsck::OwnershipMap;

/// The name `lost+found`.
const LOST_FOUND: &[u8] = b"lost+found";

/// The first empty entry slot of directory `dir`'s blocks: (block, byte offset).
fn free_slot<D: BlockDeviceMut>(
    fs: &Fs<D>,
    dir: &tet_core::cetrafs::Inode,
    patches: &mut Patches<'_, D>,
    taken: &[(u64, usize)],
) -> Result<Option<(u64, usize)>, Error> {
    let mut bufs = Buffers::new();
    let mut blocks = Vec::new();
    let _ = fs.for_each_extent(dir, &mut bufs.tree, |e| {
        for b in 0..u64::from(e.len) {
            blocks.push(e.physical.saturating_add(b));
        }
        Ok(core::ops::ControlFlow::Continue(()))
    })?;
    for lba in blocks {
        let b = patches.block(lba)?;
        for k in 0..tet_core::cetrafs::DIRENTS_PER_BLOCK {
            let off = k.saturating_mul(266);
            let empty = b
                .get(off..off.saturating_add(8))
                .is_some_and(|x| x.iter().all(|v| *v == 0));
            if empty && !taken.contains(&(lba, off)) {
                return Ok(Some((lba, off)));
            }
        }
    }
    Ok(None)
}

/// A data block free in the bitmap (as this round's patches leave it) and owned by
/// nothing: its block group, its index there, and its block number.
pub(super) fn free_data_block<D: BlockDeviceMut>(
    fs: &Fs<D>,
    own: &OwnershipMap,
    patches: &mut Patches<'_, D>,
) -> Result<Option<(u32, u64, u64)>, Error> {
    let mut buf = [0u8; BLOCK_SIZE];
    for bi in 0..fs.superblock().block_group_count() {
        let bg = fs.block_group(bi, &mut buf)?;
        let raw = *bg.raw();
        let start = raw.start_block.get().saturating_add(1);
        let dbm = bitmap_blocks(raw.length_blocks.get());
        if let Some(i) = free_bit(patches, start, dbm, raw.data_block_count.get(), |i| {
            own.owned(bi, i)
        })? {
            return Ok(Some((bi, i, bg.data_start().saturating_add(i))));
        }
    }
    Ok(None)
}

/// Adds one empty block to directory `lf` (its inline extents: the last one lengthened
/// when the block follows it, else a new extent); returns whether it could.
fn grow<D: BlockDeviceMut>(
    fs: &Fs<D>,
    own: &OwnershipMap,
    patches: &mut Patches<'_, D>,
    lf: &tet_core::cetrafs::Inode,
    fixes: &mut Vec<Fix>,
) -> Result<bool, Error> {
    let raw = *lf.raw();
    let entries = usize::from(raw.extent_header.entries.get());
    if raw.extent_header.depth.get() != 0 || entries == 0 || entries > 4 {
        return Ok(false);
    }
    let Ok(logical) = u32::try_from(lf.size() / BLOCK_SIZE_U64) else {
        return Ok(false);
    };
    let Some((bi, bit, lba)) = free_data_block(fs, own, patches)? else {
        return Ok(false);
    };
    // The last inline extent: (logical, len, physical).
    let k = entries.saturating_sub(1).saturating_mul(16);
    let last = raw.slots.get(k..k.saturating_add(16)).and_then(|e| {
        Some((
            u32::from_le_bytes(e.get(0..4)?.try_into().ok()?),
            u32::from_le_bytes(e.get(4..8)?.try_into().ok()?),
            u64::from_le_bytes(e.get(8..16)?.try_into().ok()?),
        ))
    });
    let Some((l0, n0, p0)) = last else {
        return Ok(false);
    };
    let follows =
        l0.saturating_add(n0) == logical && p0.saturating_add(u64::from(n0)) == lba && n0 < 0x7FFF;
    if !follows && entries == 4 {
        return Ok(false);
    }
    patches.fresh.push(lba);
    let b = patches.block(lba)?;
    *b = [0; BLOCK_SIZE];
    if let Some(dst) = b.get_mut(TAIL_AT..TAIL_AT.saturating_add(4)) {
        dst.copy_from_slice(&tet_core::cetrafs::TAIL_DIR);
    }
    reseal_tail(b);
    patches.inode(lf.lba(), |r| {
        if follows {
            if let Some(dst) = r.slots.get_mut(k.saturating_add(4)..k.saturating_add(8)) {
                dst.copy_from_slice(&n0.saturating_add(1).to_le_bytes());
            }
        } else {
            let at = entries.saturating_mul(16);
            let mut e = [0u8; 16];
            e[..4].copy_from_slice(&logical.to_le_bytes());
            e[4..8].copy_from_slice(&1u32.to_le_bytes());
            e[8..16].copy_from_slice(&lba.to_le_bytes());
            if let Some(dst) = r.slots.get_mut(at..at.saturating_add(16)) {
                dst.copy_from_slice(&e);
            }
            r.extent_header
                .entries
                .set(u16::try_from(entries.saturating_add(1)).unwrap_or(4));
        }
        r.size.set(r.size.get().saturating_add(BLOCK_SIZE_U64));
        r.blocks.set(r.blocks.get().saturating_add(1));
    })?;
    patches.take_blocks(bi, bit, 1)?;
    fixes.push(Fix {
        code: Code::Orphan,
        action: "/lost+found grown by one block for more orphans",
        offset: lf.lba().saturating_mul(BLOCK_SIZE_U64),
        value: Some(lba),
        lossless: true,
    });
    Ok(true)
}

/// Names every orphan in `/lost+found` (made if absent) by its inode number, as
/// e2fsck does. A directory moved there gets `/lost+found` as its parent; link counts
/// follow in the next round. Orphans beyond the free entry slots wait for later rounds.
pub(super) fn reconnect_orphans<D: BlockDeviceMut>(
    fs: &Fs<D>,
    found: &[Finding],
    own: &OwnershipMap,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let orphans: Vec<u64> = found
        .iter()
        .filter(|f| f.code == Code::Orphan)
        .filter_map(|f| f.ino)
        .collect();
    if orphans.is_empty() {
        return Ok(());
    }
    let sb = *fs.superblock();
    let mut bufs = Buffers::new();
    let root = fs.inode(sb.root_inode(), &mut bufs.data)?;
    let itable = sb.raw().inode_table_start.get();
    let found_dir = fs.lookup(&root, LOST_FOUND, &mut bufs)?;
    let lf_ino = match found_dir {
        Some(i) if fs.inode(i, &mut bufs.data).is_ok_and(|x| x.is_dir()) => i,
        Some(_) => return Ok(()), // a file by that name: leave the orphans
        None => {
            // A new directory: an inode, one block, an entry in the root.
            let Some((root_blk, root_off)) = free_slot(fs, &root, patches, &[])? else {
                return Ok(());
            };
            let ib = sb.raw().inode_bitmap_start.get();
            let Some(ino) = free_bit(
                patches,
                ib,
                sb.raw().inode_bitmap_blocks.get(),
                sb.inode_count(),
                |i| i == 0,
            )?
            else {
                return Ok(());
            };
            let Some((bi, bit, lba)) = free_data_block(fs, own, patches)? else {
                return Ok(());
            };
            // The directory block, empty.
            patches.fresh.push(lba);
            patches.fresh.push(itable.saturating_add(ino));
            let b = patches.block(lba)?;
            *b = [0; BLOCK_SIZE];
            if let Some(dst) = b.get_mut(TAIL_AT..TAIL_AT.saturating_add(4)) {
                dst.copy_from_slice(&tet_core::cetrafs::TAIL_DIR);
            }
            reseal_tail(b);
            // The inode.
            let ilba = itable.saturating_add(ino);
            let ib_blk = patches.block(ilba)?;
            *ib_blk = [0; BLOCK_SIZE];
            patches.inode(ilba, |r| {
                r.magic = tet_core::cetrafs::INODE_MAGIC;
                r.ino.set(ino);
                r.mode.set(0o040_700);
                r.nlink.set(2);
                r.size.set(BLOCK_SIZE_U64);
                r.blocks.set(1);
                r.parent.set(sb.root_inode());
                r.extent_header.magic.set(tet_core::cetrafs::EXTENT_MAGIC);
                r.extent_header.entries.set(1);
                r.extent_header.max.set(4);
                let mut e = [0u8; 16];
                e[4..8].copy_from_slice(&1u32.to_le_bytes());
                e[8..16].copy_from_slice(&lba.to_le_bytes());
                r.slots[..16].copy_from_slice(&e);
            })?;
            // Bitmaps and counts.
            let ibm = patches.block(ib.saturating_add(ino / BITS_PER_BITMAP_BLOCK))?;
            set_bit(ibm, ino % BITS_PER_BITMAP_BLOCK, true);
            patches.take_blocks(bi, bit, 1)?;
            // The root's entry and link count.
            patches.dirent(root_blk, root_off, |e| {
                e.inode.set(ino);
                e.name_len.set(10);
                e.file_type = 2;
                if let Some(dst) = e.name.get_mut(..LOST_FOUND.len()) {
                    dst.copy_from_slice(LOST_FOUND);
                }
            })?;
            patches.inode(root.lba(), |r| r.nlink.set(r.nlink.get().saturating_add(1)))?;
            fixes.push(Fix {
                code: Code::Orphan,
                action: "/lost+found created",
                offset: ilba.saturating_mul(BLOCK_SIZE_U64),
                value: Some(ino),
                lossless: true,
            });
            // Its entries are written below, in the block just made.
            ino
        }
    };
    // The directory as this round leaves it (new, or grown below): read from the patch.
    let ilba = itable.saturating_add(lf_ino);
    let mut lf = {
        let b = *patches.block(ilba)?;
        tet_core::cetrafs::Inode::parse(&b, ilba, lf_ino)?
    };
    let mut taken: Vec<(u64, usize)> = Vec::new();
    let mut subdirs = 0u32;
    for o in orphans {
        let Ok(inode) = fs.inode(o, &mut bufs.data) else {
            continue;
        };
        let slot = match free_slot(fs, &lf, patches, &taken)? {
            Some(s) => Some(s),
            None => {
                // Full: one more block, as e2fsck grows lost+found.
                if !grow(fs, own, patches, &lf, fixes)? {
                    break;
                }
                let b = *patches.block(ilba)?;
                lf = tet_core::cetrafs::Inode::parse(&b, ilba, lf_ino)?;
                free_slot(fs, &lf, patches, &taken)?
            }
        };
        let Some((blk, off)) = slot else {
            break;
        };
        taken.push((blk, off));
        let ftype = if inode.is_dir() {
            2
        } else if inode.is_symlink() {
            7
        } else {
            1
        };
        let mut name = [0u8; 21];
        let n = write_suffix(&mut name, o);
        let digits = name.get(1..n).unwrap_or(&[]).to_vec();
        patches.dirent(blk, off, |e| {
            e.inode.set(o);
            e.name_len.set(u16::try_from(digits.len()).unwrap_or(0));
            e.file_type = ftype;
            if let Some(dst) = e.name.get_mut(..digits.len()) {
                dst.copy_from_slice(&digits);
            }
        })?;
        if inode.is_dir() {
            patches.inode(inode.lba(), |r| r.parent.set(lf_ino))?;
            subdirs = subdirs.saturating_add(1);
        }
        fixes.push(Fix {
            code: Code::Orphan,
            action: "orphan named in /lost+found by its inode number",
            offset: inode.lba().saturating_mul(BLOCK_SIZE_U64),
            value: Some(o),
            lossless: true,
        });
    }
    if subdirs > 0 {
        patches.inode(lf.lba(), |r| {
            r.nlink.set(r.nlink.get().saturating_add(subdirs))
        })?;
    }
    Ok(())
}
