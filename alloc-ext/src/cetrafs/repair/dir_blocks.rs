//! Directory blocks salvaged entry by entry (docs/cetrafs.md section 14): a block whose
//! tail or padding is wrong is resealed with every entry as it reads now (`-p`), and an
//! entry that does not validate on its own is removed (`-y`), the others kept with their
//! names.

use alloc::vec::Vec;

use tet_core::block::BlockDeviceMut;
use tet_core::cetrafs::{Code, Finding, DIRENTS_PER_BLOCK, TAIL_AT, TAIL_DIR};
use tet_core::Error;

use super::patches::{reseal_tail, split, Patches};
use super::Fix;

/// The `what` of the findings about a directory block's own rules (tail and padding).
const FRAME: [&str; 3] = [
    "dir_block.tail.crc",
    "dir_block.tail.magic",
    "dir_block.padding",
];

/// The `what` of an entry-level finding whose slot has no name (inode 0, stray bytes).
const EMPTY_SLOT: &str = "dirent (empty slot)";

/// Whether `f` is about a directory block's tail or padding.
fn is_frame(f: &Finding) -> bool {
    matches!(f.code, Code::Checksum | Code::Magic | Code::DirBlock) && FRAME.contains(&f.error.what)
}

/// Whether `f` is about one entry of a directory block.
fn is_entry(f: &Finding) -> bool {
    f.code == Code::DirBlock && f.error.what.starts_with("dirent")
}

/// Whether this round changes directory entries (link counts wait for the next check).
pub(super) fn changes_entries(f: &Finding) -> bool {
    is_entry(f)
}

/// Plans the directory block fixes of one round. A block's frame is resealed first; its
/// bad entries are removed in a later round, once the reseal is on disk, so `-p`, which
/// refuses a removal, still writes the reseal.
pub(super) fn fix_dir_blocks<D: BlockDeviceMut>(
    found: &[Finding],
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let mut resealed: Vec<u64> = Vec::new();
    for f in found.iter().filter(|f| is_frame(f)) {
        let (lba, _) = split(f.error.offset);
        if resealed.contains(&lba) {
            continue;
        }
        resealed.push(lba);
        let b = patches.block(lba)?;
        let used = DIRENTS_PER_BLOCK.saturating_mul(266);
        if let Some(pad) = b.get_mut(used..TAIL_AT) {
            pad.fill(0);
        }
        if let Some(m) = b.get_mut(TAIL_AT..TAIL_AT.saturating_add(4)) {
            m.copy_from_slice(&TAIL_DIR);
        }
        if let Some(r) = b.get_mut(TAIL_AT.saturating_add(4)..TAIL_AT.saturating_add(8)) {
            r.fill(0);
        }
        reseal_tail(b);
        fixes.push(Fix {
            code: f.code,
            action: "directory block resealed: accepts the entries as they read now",
            offset: f.error.offset,
            value: f.ino,
            lossless: true,
        });
    }
    for f in found.iter().filter(|f| is_entry(f)) {
        let (lba, at) = split(f.error.offset);
        if resealed.contains(&lba) {
            continue;
        }
        let slot = (at / 266).saturating_mul(266);
        let empty = f.error.what == EMPTY_SLOT;
        let fix = Fix {
            code: f.code,
            action: if empty {
                "stray bytes of an empty directory slot zeroed"
            } else {
                "directory entry that does not validate removed (its name is lost)"
            },
            offset: f
                .error
                .offset
                .saturating_sub(u64::try_from(at.saturating_sub(slot)).unwrap_or(0)),
            value: f.ino,
            lossless: empty,
        };
        if patches.allows(&fix) {
            patches.clear_dirent(lba, slot)?;
            fixes.push(fix);
        }
    }
    Ok(())
}
