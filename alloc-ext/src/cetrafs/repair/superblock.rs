//! The superblock stage of a repair (`docs/cetrafs.md` sections 3.1 and 14). Before any
//! other write, a primary that fails (or every primary, with `-b N`) is restored from the
//! copy the search takes; after the last round, every copy is made to match the primary,
//! and an image without copies gets them where their places are blank.

use alloc::vec::Vec;

use tet_core::block::{Block, BlockDevice, BlockDeviceMut, BLOCK_SIZE};
use tet_core::cetrafs::copies::{copy_offset, locate, Source};
use tet_core::cetrafs::{Code, Finding, Superblock, SB_CHECKSUM_AT, SUPERBLOCK_LEN};
use zerocopy::IntoBytes;

use super::{Fix, Mode, RepairError, RepairOutcome};
use crate::cetrafs::copies::{audit, rewrite, with_copies, write_copies, write_primary};

/// What a restored primary's fix says.
pub const RESTORED: &str = "primary superblock restored from the copy";
/// A copy rewritten.
pub const COPY_REWRITTEN: &str = "superblock copy rewritten from the superblock";
/// Copies added to an image without them.
pub const COPIES_ADDED: &str = "superblock copies added (COMPAT_SB_COPIES set)";
/// Copies added over bytes that were not blank.
pub const COPIES_ADDED_OVER: &str =
    "superblock copies added (COMPAT_SB_COPIES set) over nonzero bytes no structure defines";

/// The restore a repair starts with, when the superblock to use is a copy: the fix
/// (named after the primary's finding, the copy's block as its value) and the
/// superblock. `None` when the primary is the one to use, or none passes.
pub(super) fn restore_plan<D: BlockDevice>(
    dev: &D,
    pick: Option<u64>,
    buf: &mut Block,
) -> Option<(Fix, Superblock)> {
    let l = locate(dev, buf, dev.block_count(), pick).ok()?;
    let Source::Copy(lba) = l.source else {
        return None;
    };
    let code = match l.primary {
        Some(e) => Finding::structural(Code::Mount, e).code,
        None => {
            // `-b N` over a primary that passes: restored only if they differ.
            dev.read_block(0, buf).ok()?;
            let on_disk = buf.get(..SUPERBLOCK_LEN)?;
            let want = l.sb.primary_record();
            // The flags and the checksum aside (a copy carries no flags).
            let same = want
                .as_bytes()
                .iter()
                .zip(on_disk)
                .enumerate()
                .all(|(i, (w, h))| w == h || (12..16).contains(&i) || i >= SB_CHECKSUM_AT);
            if same {
                return None;
            }
            Code::SuperblockCopy
        }
    };
    Some((
        Fix {
            code,
            action: RESTORED,
            offset: 0,
            value: Some(lba),
            lossless: true,
        },
        l.sb,
    ))
}

/// Writes the restored primary (one write of block 0, flushed).
pub(super) fn restore<D: BlockDeviceMut>(dev: &D, sb: &Superblock) -> Result<(), RepairError> {
    let mut buf: Block = [0; BLOCK_SIZE];
    write_primary(dev, &sb.primary_record(), &mut buf)?;
    Ok(())
}

/// After the last round: copies that differ from the primary are rewritten, one at a
/// time; an image without copies gets them (the primary first, with the bit, then the
/// copies) when their places are blank, and only with `-y` otherwise. Nothing happens
/// when the primary does not pass (the fixes before said why).
pub(super) fn copies<D: BlockDeviceMut>(
    dev: &D,
    mode: Mode,
    decide: &mut dyn FnMut(&Fix) -> bool,
    out: &mut RepairOutcome,
) -> Result<(), RepairError> {
    let mut buf: Block = [0; BLOCK_SIZE];
    if dev.read_block(0, &mut buf).is_err() {
        return Ok(());
    }
    let Ok(sb) = Superblock::parse(&buf, dev.block_count()) else {
        return Ok(());
    };
    let states = audit(dev, &sb, &mut buf);
    let mut todo: Vec<(Fix, Vec<u64>)> = Vec::new();
    if sb.has_copies() {
        // A copy that differs is a finding of the check (a warning): something found.
        out.found |= states.iter().any(|s| s.problem.is_some());
        for s in states.iter().filter(|s| s.problem.is_some()) {
            let fix = Fix {
                code: Code::SuperblockCopy,
                action: COPY_REWRITTEN,
                offset: copy_offset(s.lba),
                value: None,
                lossless: true,
            };
            todo.push((fix, alloc::vec![s.lba]));
        }
    } else {
        let blank = states.iter().all(|s| s.blank);
        let fix = Fix {
            code: Code::SuperblockCopy,
            action: if blank {
                COPIES_ADDED
            } else {
                COPIES_ADDED_OVER
            },
            offset: 40,
            value: Some(tet_core::arith::u64_of(states.len())),
            lossless: blank,
        };
        todo.push((fix, Vec::new()));
    }
    for (fix, lbas) in todo {
        let allowed = match mode {
            Mode::No => {
                out.fixes.push(fix);
                continue;
            }
            Mode::Preen => fix.lossless && decide(&fix),
            Mode::Yes => decide(&fix),
        };
        if !allowed {
            out.withheld.push(fix);
            continue;
        }
        if lbas.is_empty() {
            rewrite(dev, &with_copies(&sb), &mut buf)?;
        } else {
            write_copies(dev, &sb, &lbas, &mut buf)?;
        }
        out.fixes.push(fix);
    }
    Ok(())
}
