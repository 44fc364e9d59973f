//! Fixes of single fields and entries, each answering one finding with the value the
//! check computed: inode counts, sizes and parents, entry types, entries naming what
//! they must not (removed), repeated names (renamed), and inode checksums.

use alloc::vec::Vec;

use tet_core::block::BlockDeviceMut;
use tet_core::cetrafs::raw::RawInode;
use tet_core::cetrafs::{Code, Finding, INODE_MAGIC};
use tet_core::checksum::crc32c_skipping;
use tet_core::{Error, ErrorKind};

use super::patches::{expected, split, Patches};
use super::Fix;

/// Sets one field of an inode to a counted value.
type SetField = fn(&mut RawInode, u64);

/// The fix for finding `f`, if it is one of these. `entries_change`: entries are being
/// fixed this round, so link counts wait for the next round's check.
pub(super) fn fix_one<D: BlockDeviceMut>(
    f: &Finding,
    entries_change: bool,
    extents_settled: bool,
    patches: &mut Patches<'_, D>,
    fixes: &mut Vec<Fix>,
) -> Result<(), Error> {
    let (lba, off) = split(f.error.offset);
    let want = expected(f);
    let fix = |action, lossless| Fix {
        code: f.code,
        action,
        offset: f.error.offset,
        value: want,
        lossless,
    };
    // An inode field set to the value the check counted.
    let field: Option<(SetField, &'static str)> = match (f.code, want) {
        // No names at all is an orphan (reconnecting is not done here), not nlink 0.
        (Code::LinkCount, Some(n)) if n >= 1 && !entries_change => Some((
            |r, n| r.nlink.set(u32::try_from(n).unwrap_or(u32::MAX)),
            "nlink set to the references counted",
        )),
        // Counted from the extents: only once no block is claimed twice (an extent
        // grown over other files' blocks would be blessed, and a directory made to read
        // their data as entries).
        (Code::InodeBlocks, _) if extents_settled => {
            Some((|r, n| r.blocks.set(n), "blocks set to the extents' total"))
        }
        (Code::DirSize, _) if extents_settled => Some((
            |r, n| r.size.set(n),
            "directory size set to its mapped blocks",
        )),
        (Code::DirParent, Some(0)) => Some((
            |r, n| r.parent.set(n),
            "parent set to 0 (only a directory has a parent)",
        )),
        (Code::DirParent, _) => Some((
            |r, n| r.parent.set(n),
            "parent set to the directory naming it",
        )),
        _ => None,
    };
    if let (Some((set, action)), Some(n)) = (field, want) {
        patches.inode(lba, |r| set(r, n))?;
        fixes.push(fix(action, true));
        return Ok(());
    }
    // An entry that must go.
    let removed = match f.code {
        // A directory named twice (a hard link, or the entry closing a loop): the later
        // entry goes; the directory stays reachable through the first.
        Code::DirLinked => Some("entry naming a directory a second time removed"),
        // Entries that break a rule of their own are `dir_blocks`'.
        Code::DirentFree => Some("entry naming an inode not in use removed"),
        _ => None,
    };
    if let Some(action) = removed {
        if patches.allows(&fix(action, false)) {
            patches.clear_dirent(lba, off)?;
            fixes.push(fix(action, false));
        }
        return Ok(());
    }
    match (f.code, want) {
        (Code::DirentType, Some(t)) => {
            let t8 = u8::try_from(t).unwrap_or(0);
            patches.dirent(lba, off.saturating_sub(10), |d| d.file_type = t8)?;
            fixes.push(fix("file_type set to the inode's", true));
        }
        // An inode that does not validate but can be made sound without guessing a
        // field that means something (`sound_inode`): a wrong checksum, a must-be-zero
        // field holding a byte, an nlink of 0. Its tree and data are checked next round.
        (Code::Checksum, _) if f.error.what == "inode.checksum" => {
            reseal_inode(patches, lba, fixes, |lossless| {
                fix(
                    if lossless {
                        "inode checksum recomputed (the inode reads as it was sealed)"
                    } else {
                        "inode checksum recomputed: accepts the inode as it reads now (a \
                         changed field is kept as it reads)"
                    },
                    lossless,
                )
            })?;
        }
        (Code::Inode, _) if matches!(f.error.kind, ErrorKind::NonZero { .. }) => {
            reseal_inode(patches, lba, fixes, |lossless| {
                fix(
                    "inode's must-be-zero fields cleared (they carry nothing) and resealed",
                    lossless,
                )
            })?;
        }
        (Code::Inode, _) if f.error.kind == ErrorKind::Zero && f.error.what == "inode.nlink" => {
            reseal_inode(patches, lba, fixes, |lossless| {
                fix(
                    "nlink 0 of an inode in use set to 1 (next round counts its names)",
                    lossless,
                )
            })?;
        }
        // An inode whose magic alone is wrong: restored when the stored checksum then
        // matches (every other byte is as it was sealed) and the inode parses.
        (Code::Magic, _) if f.error.what == "inode.magic" => {
            let itable = patches.fs.superblock().raw().inode_table_start.get();
            let ino = lba.saturating_sub(itable);
            let mut b = *patches.block(lba)?;
            if let Some(m) = b.get_mut(..4) {
                m.copy_from_slice(&INODE_MAGIC);
            }
            let stored = b
                .get(248..256)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
                .map(u64::from_le_bytes);
            let sealed = stored == Some(crc32c_skipping(b.get(..256).unwrap_or(&[]), 248));
            if sealed && tet_core::cetrafs::Inode::parse(&b, lba, ino).is_ok() {
                *patches.block(lba)? = b;
                fixes.push(fix(
                    "inode magic restored (its checksum matches with it)",
                    true,
                ));
            }
        }
        (Code::DirentDuplicate, _) => {
            let rename = fix("repeated name renamed with ~ and the inode number", false);
            if !patches.allows(&rename) {
                return Ok(());
            }
            let mut renamed = false;
            patches.dirent(lba, off.saturating_sub(11), |d| {
                let len = usize::from(d.name_len.get()).min(255);
                let mut suffix = [0u8; 21];
                let n = write_suffix(&mut suffix, d.inode.get());
                let keep = len.min(255usize.saturating_sub(n));
                if let (Some(dst), Some(src)) = (
                    d.name.get_mut(keep..keep.saturating_add(n)),
                    suffix.get(..n),
                ) {
                    dst.copy_from_slice(src);
                    d.name_len
                        .set(u16::try_from(keep.saturating_add(n)).unwrap_or(255));
                    renamed = true;
                }
            })?;
            if renamed {
                fixes.push(rename);
            }
        }
        _ => {}
    }
    Ok(())
}

/// The inode in block `lba` made sound ([`sound_inode`]) and written, when the fix `make`
/// builds (told whether it loses nothing) is allowed.
fn reseal_inode<D: BlockDeviceMut>(
    patches: &mut Patches<'_, D>,
    lba: u64,
    fixes: &mut Vec<Fix>,
    make: impl FnOnce(bool) -> Fix,
) -> Result<(), Error> {
    if let Some((b, lossless)) = sound_inode(patches, lba)? {
        let made = make(lossless);
        if patches.allows(&made) {
            *patches.block(lba)? = b;
            fixes.push(made);
        }
    }
    Ok(())
}

/// The must-be-zero fields of an inode a repair may clear: `flags`, the extent header's
/// `generation`, each inline slot past `entries`, the reserved bytes. Clearing a slot
/// loses nothing only when the inode was sealed so (a changed `entries` makes a real
/// extent look unused, and the checksum then says so: see [`sound_inode`]).
const ZERO_FIELDS: [(usize, usize); 7] = [
    (4, 8),
    (112, 116),
    (116, 132),
    (132, 148),
    (148, 164),
    (164, 180),
    (180, 248),
];

/// Whether two checksums differ in one byte only: the stored checksum itself was hit,
/// and what it covers is what was sealed.
pub(super) fn one_byte_apart(a: u64, b: u64) -> bool {
    let d = (a ^ b).to_le_bytes();
    d.iter().filter(|x| **x != 0).count() == 1
}

/// The inode in block `lba` made sound, if it can be without guessing a field that
/// means something: each must-be-zero field that holds a byte cleared ([`ZERO_FIELDS`]),
/// an `nlink` of 0 set to 1 (the next round counts its names), and the checksum
/// recomputed, until it parses. `None` when another rule still fails. With it, whether
/// it loses nothing: the inode was sealed as it reads (the stored checksum matches it,
/// or differs in one byte, the checksum itself hit) or is again once the cleared bytes
/// are zero; otherwise resealing blesses a changed field (`-y` only).
fn sound_inode<D: BlockDeviceMut>(
    patches: &mut Patches<'_, D>,
    lba: u64,
) -> Result<Option<(tet_core::block::Block, bool)>, Error> {
    let itable = patches.fs.superblock().raw().inode_table_start.get();
    let ino = lba.saturating_sub(itable);
    let mut b = *patches.block(lba)?;
    let crc = |b: &tet_core::block::Block| crc32c_skipping(b.get(..256).unwrap_or(&[]), 248);
    let stored = b
        .get(248..256)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0);
    let first = crc(&b);
    let sealed_as_read = first == stored || one_byte_apart(first, stored);
    let mut nlink_set = false;
    // Each round clears one field; an inode has 256 bytes.
    for _ in 0..256 {
        // The checksum of what the inode now holds, nlink as it was read.
        let mut as_sealed = b;
        if nlink_set {
            if let Some(n) = as_sealed.get_mut(28..32) {
                n.fill(0);
            }
        }
        let restored = crc(&as_sealed) == stored;
        let c = crc(&b);
        if let Some(dst) = b.get_mut(248..256) {
            dst.copy_from_slice(&c.to_le_bytes());
        }
        match tet_core::cetrafs::Inode::parse(&b, lba, ino) {
            Ok(_) => return Ok(Some((b, sealed_as_read || restored))),
            Err(e) if e.kind == ErrorKind::Zero && e.what == "inode.nlink" && !nlink_set => {
                nlink_set = true;
                if let Some(n) = b.get_mut(28..32) {
                    n.copy_from_slice(&1u32.to_le_bytes());
                }
            }
            Err(e) if matches!(e.kind, ErrorKind::NonZero { .. }) => {
                let at = usize::try_from(e.offset % tet_core::block::BLOCK_SIZE_U64).unwrap_or(0);
                let Some(&(lo, hi)) = ZERO_FIELDS.iter().find(|(lo, hi)| at >= *lo && at < *hi)
                else {
                    return Ok(None);
                };
                match b.get_mut(lo..hi) {
                    Some(f) if f.iter().any(|x| *x != 0) => f.fill(0),
                    _ => return Ok(None),
                }
            }
            Err(_) => return Ok(None),
        }
    }
    Ok(None)
}

/// `~` and the decimal `ino` into `out`; returns the length.
pub(super) fn write_suffix(out: &mut [u8; 21], ino: u64) -> usize {
    let mut digits = [0u8; 20];
    let mut n = 0usize;
    let mut v = ino;
    loop {
        if let Some(d) = digits.get_mut(n) {
            *d = b'0'.saturating_add(u8::try_from(v % 10).unwrap_or(0));
        }
        n = n.saturating_add(1);
        v /= 10;
        if v == 0 || n >= 20 {
            break;
        }
    }
    if let Some(o) = out.first_mut() {
        *o = b'~';
    }
    for k in 0..n {
        if let (Some(dst), Some(src)) = (
            out.get_mut(k.saturating_add(1)),
            digits.get(n.saturating_sub(1).saturating_sub(k)),
        ) {
            *dst = *src;
        }
    }
    n.saturating_add(1)
}
