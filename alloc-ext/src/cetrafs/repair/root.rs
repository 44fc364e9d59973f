//! A root inode that does not read: a new root directory, over the directory blocks the
//! old one owned when the image still holds them, so its entries keep their names.
//!
//! The old root's blocks are what is left of it: their bits are set in the data bitmap,
//! nothing owns them, and they are sealed directory blocks. One of them is taken as the
//! root's when every entry it holds names an inode in use that misses a name: one no path
//! reaches (an orphan of this check), or a file another path reaches whose link count
//! says it has more names than the check counted (a hard link); and every subdirectory
//! among them is an orphan naming the root as its parent (the parent field,
//! docs/cetrafs.md section 9). Names must be unique across the blocks taken.
//! Without such a block the root is made empty and its former children go to
//! `/lost+found` in the next round, by their inode numbers, as e2fsck does.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use tet_core::block::{Block, BlockDeviceMut, BLOCK_SIZE, BLOCK_SIZE_U64};
use tet_core::cetrafs::{
    bitmap_blocks, Buffers, Code, FileType, Finding, Fs, BITS_PER_BITMAP_BLOCK, DIRENTS_PER_BLOCK,
    EXTENT_MAGIC, INODE_MAGIC, TAIL_AT, TAIL_DIR,
};
use tet_core::checksum::crc32c_skipping;
use tet_core::Error;

use super::lost_found::free_data_block;
use super::patches::{reseal_tail, set_bit, Patches};
use super::Fix;
use crate::cetrafs::fsck::OwnershipMap;

/// Most unowned blocks read in the search for the old root's (a leak larger than this
/// is searched in its first blocks only; what is not taken goes to `/lost+found`).
const SEARCH: usize = 1 << 14;
/// A root made by repair holds its blocks in the inode's four inline extents.
const INLINE_EXTENTS: usize = 4;

/// Plans a new root when the root inode does not read; returns whether the round is the
/// root's alone: the rebuild is planned (the next check sees the tree under the new
/// root), or it was refused and nothing else may be planned without the root.
pub(super) fn rebuild_root<D: BlockDeviceMut>(
    fs: &Fs<D>,
    found: &[Finding],
    own: &OwnershipMap,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<bool, Error> {
    let sb = *fs.superblock();
    let root = sb.root_inode();
    let mut bufs = Buffers::new();
    if !found.iter().any(|f| f.code == Code::RootInode) || fs.inode(root, &mut bufs.data).is_ok() {
        return Ok(false);
    }
    let mut orphans: Vec<u64> = found
        .iter()
        .filter(|f| f.code == Code::Orphan)
        .filter_map(|f| f.ino)
        .collect();
    orphans.sort_unstable();
    orphans.dedup();
    let mut short: Vec<u64> = found
        .iter()
        .filter(|f| f.code == Code::LinkCount)
        .filter_map(|f| f.ino)
        .collect();
    short.sort_unstable();
    short.dedup();
    let (blocks, subdirs, entries) = old_root_blocks(fs, own, patches, (&orphans, &short), root)?;
    let itable = sb.raw().inode_table_start.get();
    let ilba = itable.saturating_add(root);
    let (blocks, salvaged) = if blocks.is_empty() {
        let Some((bi, bit, lba)) = free_data_block(fs, own, patches)? else {
            return Ok(false);
        };
        (alloc::vec![(lba, Some((bi, bit)))], false)
    } else {
        (blocks.into_iter().map(|b| (b, None)).collect(), true)
    };
    let fix = Fix {
        code: Code::RootInode,
        action: if salvaged {
            "root directory rebuilt over the directory blocks it owned: its entries keep \
             their names (the value counts them); its mode, owner and times are lost \
             (now 755, uid 0, time 0)"
        } else {
            "root directory rebuilt empty (none of its blocks was found): what it held goes \
             to /lost+found by inode number; its mode, owner and times are lost"
        },
        offset: ilba.saturating_mul(BLOCK_SIZE_U64),
        value: Some(entries),
        lossless: false,
    };
    // Refused (or `-p`): the round plans nothing else. Every other family reads the
    // tree from the root; link counts counted without it would be lowered below the
    // names its blocks still hold.
    if !patches.allows(&fix) {
        return Ok(true);
    }
    for (lba, new) in &blocks {
        if let Some((bi, bit)) = new {
            patches.fresh.push(*lba);
            let b = patches.block(*lba)?;
            *b = [0; BLOCK_SIZE];
            if let Some(dst) = b.get_mut(TAIL_AT..TAIL_AT.saturating_add(4)) {
                dst.copy_from_slice(&TAIL_DIR);
            }
            reseal_tail(b);
            patches.take_blocks(*bi, *bit, 1)?;
        }
    }
    // The extents: runs of consecutive blocks, in logical order.
    let mut runs: Vec<(u64, u32)> = Vec::new();
    for (lba, _) in &blocks {
        match runs.last_mut() {
            Some((start, len)) if start.saturating_add(u64::from(*len)) == *lba => {
                *len = len.saturating_add(1);
            }
            _ => runs.push((*lba, 1)),
        }
    }
    let count = u64::try_from(blocks.len()).unwrap_or(0);
    patches.fresh.push(ilba);
    *patches.block(ilba)? = [0; BLOCK_SIZE];
    patches.inode(ilba, |r| {
        r.magic = INODE_MAGIC;
        r.ino.set(root);
        r.mode.set(0o040_755);
        r.nlink.set(2u32.saturating_add(subdirs));
        r.size.set(count.saturating_mul(BLOCK_SIZE_U64));
        r.blocks.set(count);
        r.parent.set(root);
        r.extent_header.magic.set(EXTENT_MAGIC);
        r.extent_header
            .entries
            .set(u16::try_from(runs.len()).unwrap_or(0));
        r.extent_header.max.set(4);
        let mut logical = 0u32;
        for (slot, (start, len)) in r.slots.chunks_exact_mut(16).zip(&runs) {
            if let Some(dst) = slot.get_mut(0..4) {
                dst.copy_from_slice(&logical.to_le_bytes());
            }
            if let Some(dst) = slot.get_mut(4..8) {
                dst.copy_from_slice(&len.to_le_bytes());
            }
            if let Some(dst) = slot.get_mut(8..16) {
                dst.copy_from_slice(&start.to_le_bytes());
            }
            logical = logical.saturating_add(*len);
        }
    })?;
    // Its bit in the inode bitmap, when that was lost too.
    let ib = sb.raw().inode_bitmap_start.get();
    let bm = patches.block(ib.saturating_add(root / BITS_PER_BITMAP_BLOCK))?;
    set_bit(bm, root % BITS_PER_BITMAP_BLOCK, true);
    fixes.push(fix);
    Ok(true)
}

/// The old root's directory blocks among the unowned ones (sorted, at most
/// [`INLINE_EXTENTS`] runs), how many of their entries are directories, and how many
/// entries they hold.
fn old_root_blocks<D: BlockDeviceMut>(
    fs: &Fs<D>,
    own: &OwnershipMap,
    patches: &mut Patches<'_, D>,
    (orphans, short): (&[u64], &[u64]),
    root: u64,
) -> Result<(Vec<u64>, u32, u64), Error> {
    let sb = *fs.superblock();
    let mut bufs = Buffers::new();
    let mut unowned: Vec<u64> = Vec::new();
    let mut buf: Block = [0; BLOCK_SIZE];
    'groups: for bi in 0..sb.block_group_count() {
        let bg = fs.block_group(bi, &mut buf)?;
        let r = *bg.raw();
        let start = r.start_block.get().saturating_add(1);
        for k in 0..bitmap_blocks(r.length_blocks.get()) {
            let bm = *patches.block(start.saturating_add(k))?;
            let first = k.saturating_mul(BITS_PER_BITMAP_BLOCK);
            let last = r
                .data_block_count
                .get()
                .min(first.saturating_add(BITS_PER_BITMAP_BLOCK));
            for i in first..last {
                let bit = i.saturating_sub(first);
                let set = usize::try_from(bit / 8)
                    .ok()
                    .and_then(|x| bm.get(x))
                    .is_some_and(|x| x & (1u8 << (bit % 8)) != 0);
                if set && !own.owned(bi, i) {
                    if unowned.len() >= SEARCH {
                        break 'groups;
                    }
                    unowned.push(bg.data_start().saturating_add(i));
                }
            }
        }
    }
    let mut taken: Vec<u64> = Vec::new();
    let mut names: BTreeSet<Vec<u8>> = BTreeSet::new();
    let (mut subdirs, mut entries) = (0u32, 0u64);
    let mut runs = 0usize;
    for lba in unowned {
        if fs.device().read_block(lba, &mut buf).is_err() || !sealed_dir_block(&buf) {
            continue;
        }
        let mut block_names: Vec<Vec<u8>> = Vec::new();
        let mut block_subdirs = 0u32;
        let mut fits = true;
        for k in 0..DIRENTS_PER_BLOCK {
            let e = match fs.dir_entry_at(&buf, lba, k.saturating_mul(266)) {
                Ok(Some(e)) => e,
                Ok(None) => continue,
                Err(_) => {
                    fits = false;
                    break;
                }
            };
            // An entry names an inode that reads and misses a name: an orphan, or a file
            // another path reaches whose link count counts more names than the check
            // found (a hard link); a directory must name the root as its parent.
            let is_orphan = orphans.binary_search(&e.inode).is_ok();
            let misses_name = is_orphan || short.binary_search(&e.inode).is_ok();
            let fits_entry = match fs.inode(e.inode, &mut bufs.data) {
                Ok(i) if e.file_type == FileType::Directory => {
                    is_orphan && i.is_dir() && i.raw().parent.get() == root
                }
                Ok(i) => misses_name && !i.is_dir(),
                Err(_) => false,
            };
            let name = e.name().to_vec();
            if !fits_entry || names.contains(&name) || block_names.contains(&name) {
                fits = false;
                break;
            }

            if e.file_type == FileType::Directory {
                block_subdirs = block_subdirs.saturating_add(1);
            }
            block_names.push(name);
        }
        if !fits || block_names.is_empty() {
            continue;
        }
        // Runs: the blocks come in ascending order, so a new run starts at a gap.
        let new_run = taken.last().is_none_or(|l| l.saturating_add(1) != lba);
        if new_run && runs >= INLINE_EXTENTS {
            continue;
        }
        if new_run {
            runs = runs.saturating_add(1);
        }
        entries = entries.saturating_add(u64::try_from(block_names.len()).unwrap_or(0));
        subdirs = subdirs.saturating_add(block_subdirs);
        names.extend(block_names);
        taken.push(lba);
    }
    Ok((taken, subdirs, entries))
}

/// Whether `b` is a directory block whose tail reads as sealed.
fn sealed_dir_block(b: &Block) -> bool {
    let magic = b.get(TAIL_AT..TAIL_AT.saturating_add(4)) == Some(&TAIL_DIR[..]);
    let stored = b
        .get(TAIL_AT.saturating_add(8)..TAIL_AT.saturating_add(16))
        .and_then(|x| <[u8; 8]>::try_from(x).ok())
        .map(u64::from_le_bytes);
    magic && stored == Some(crc32c_skipping(&b[..], TAIL_AT.saturating_add(8)))
}
