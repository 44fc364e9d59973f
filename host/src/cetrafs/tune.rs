//! `tet-host tune IMAGE [--label L] [--uuid U]`: changes the volume label or UUID, as
//! `tune2fs -L`/`-U` do. The superblock is not a journal target (docs/cetrafs.md
//! section 7), and its 424 bytes sit in the first 512-byte sector: the change is one
//! rewrite of that sector, resealed and flushed, so a power cut leaves the old
//! superblock or the new one (a sector is written whole or not at all); then each copy
//! the same way (section 3.1), with `generation` advanced so a reader choosing among
//! copies takes the new one.

use std::path::Path;

use serde_json::json;
use tet_core::cetrafs::copies::reseal;
use tet_core::cetrafs::raw::RawSuperblock;
use tet_core::cetrafs::Buffers;

use super::*;
use crate::{Exit, Output};

/// Bytes of the label field.
const LABEL_LEN: usize = 64;

/// What to change.
#[derive(Clone, Debug, Default)]
pub struct TuneOptions {
    /// A new label (at most 64 bytes, the whole field).
    pub label: Option<String>,
    /// A new UUID.
    pub uuid: Option<[u8; 16]>,
    /// Change an image whose registry shows nodes ACTIVE (it may be mounted).
    pub force: bool,
}

/// `tet-host tune`. Exit 0 changed, 4 the image does not mount or is shorter than its
/// filesystem (cut short: refused), 8 it cannot be written or a node is ACTIVE, 16
/// nothing to change or a label too long.
pub fn tune(path: &Path, o: &TuneOptions, output: Output) -> Exit {
    if o.label.is_none() && o.uuid.is_none() {
        crate::say!("tune: nothing to change; give --label or --uuid");
        return Exit::Usage;
    }
    if let Some(why) = o.label.as_deref().and_then(super::mkfs::label_problem) {
        crate::say!("tune: {why}");
        return Exit::Usage;
    }
    let dev = match device::FileDevice::open(path) {
        Ok(d) => d,
        Err(e) => {
            crate::say!("cannot read {}: {e}", path.display());
            return Exit::Operational;
        }
    };
    let fs = match open_fs_to_write(path, &dev) {
        Ok(f) => f,
        Err(e) => {
            // A primary that fails while a copy passes: repair restores it first.
            let mut b = Buffers::new();
            if let Ok(l) = copies::locate(&dev, &mut b.data, dev.block_count(), None) {
                if let copies::Source::Copy(lba) = l.source {
                    crate::say!(
                        "{}: not changed: the primary superblock fails its checks; \
                         `tet-host repair {}` restores it from the copy in block {lba} first",
                        path.display(),
                        path.display()
                    );
                }
            }
            return e;
        }
    };
    // A process holding the image refuses it, --force or not.
    let _hold = match super::write::gate("tune", path) {
        Ok(h) => h,
        Err(e) => return e,
    };
    if !o.force {
        let mut bufs = Buffers::new();
        for row in 0..fs.superblock().node_capacity() {
            if let Ok(Some(n)) = fs.node_row(row, &mut bufs.data) {
                if n.state() == tet_core::cetrafs::NodeState::Active {
                    crate::say!(
                        "{}: node {} (registry row {row}) is ACTIVE: the filesystem may be \
                         mounted. Change it offline, or pass --force",
                        path.display(),
                        n.raw().node_id.get()
                    );
                    return Exit::Operational;
                }
            }
        }
    }
    let mut sb: RawSuperblock = fs.superblock().primary_record();
    if let Some(l) = &o.label {
        sb.label = [0; LABEL_LEN];
        if let Some(field) = sb.label.get_mut(..l.len()) {
            field.copy_from_slice(l.as_bytes());
        }
    }
    if let Some(u) = o.uuid {
        sb.uuid = u;
    }
    sb.generation.set(sb.generation.get().saturating_add(1));
    reseal(&mut sb);
    // The primary (one write of sector 0's record, flushed), then each copy.
    let written = device::FileDevice::open_rw(path)
        .map_err(|e| e.to_string())
        .and_then(|rw| {
            tet_alloc::cetrafs::copies::rewrite(&rw, &sb, &mut Buffers::new().data)
                .map_err(|e| describe(&e))
        });
    if let Err(e) = written {
        crate::say!("cannot write {}: {e}", path.display());
        return Exit::Operational;
    }
    let label = String::from_utf8_lossy(&sb.label)
        .trim_end_matches('\0')
        .to_string();
    let uuid = super::uuid::format(&sb.uuid);
    match output {
        Output::Json => crate::report::print_json(&json!({
            "image": path.display().to_string(), "label": label, "uuid": uuid,
        })),
        _ => println!("{}: label '{label}', uuid {uuid}", path.display()),
    }
    Exit::Clean
}
