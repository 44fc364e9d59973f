//! `tet-host tune IMAGE [--label L] [--uuid U]`: changes the volume label or UUID, as
//! `tune2fs -L`/`-U` do. The superblock is not a journal target (docs/cetrafs.md
//! section 7), and its 424 bytes sit in the first 512-byte sector: the change is one
//! rewrite of that sector, resealed and flushed, so a power cut leaves the old
//! superblock or the new one (a sector is written whole or not at all).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde_json::json;
use tet_core::cetrafs::raw::RawSuperblock;
use tet_core::cetrafs::{Buffers, SB_CHECKSUM_AT};
use tet_core::checksum::crc32c_skipping;
use zerocopy::IntoBytes;

use super::*;
use crate::{Exit, Output};

/// Bytes of the label field.
const LABEL_LEN: usize = 64;

/// What to change.
#[derive(Clone, Debug, Default)]
pub struct TuneOptions {
    /// A new label (at most 63 bytes: the field keeps a NUL).
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
    if let Some(l) = &o.label {
        if l.len() >= LABEL_LEN || l.as_bytes().contains(&0) {
            crate::say!(
                "tune: the label is {} bytes; the field holds at most {} (and no NUL)",
                l.len(),
                LABEL_LEN - 1
            );
            return Exit::Usage;
        }
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
        Err(e) => return e,
    };
    if !o.force {
        let mut bufs = Buffers::new();
        for row in 0..fs.superblock().node_capacity() {
            if let Ok(Some(n)) = fs.node_row(row, &mut bufs.data) {
                if n.state_name() == "ACTIVE" {
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
    let mut sb: RawSuperblock = *fs.superblock().raw();
    if let Some(l) = &o.label {
        sb.label = [0; LABEL_LEN];
        if let Some(field) = sb.label.get_mut(..l.len()) {
            field.copy_from_slice(l.as_bytes());
        }
    }
    if let Some(u) = o.uuid {
        sb.uuid = u;
    }
    sb.checksum
        .set(crc32c_skipping(sb.as_bytes(), SB_CHECKSUM_AT));
    let mut sector = [0u8; 512];
    if let Some(head) = sector.get_mut(..size_of::<RawSuperblock>()) {
        head.copy_from_slice(sb.as_bytes());
    }
    // The rest of the sector as it is on disk (zeros by the format, kept regardless).
    let written = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .and_then(|f| {
            let mut old = [0u8; 512];
            f.read_exact_at(&mut old, 0)?;
            if let (Some(rest), Some(keep)) = (
                sector.get_mut(size_of::<RawSuperblock>()..),
                old.get(size_of::<RawSuperblock>()..),
            ) {
                rest.copy_from_slice(keep);
            }
            f.write_all_at(&sector, 0)?;
            f.sync_data()
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
