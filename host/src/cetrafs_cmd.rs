//! `tet-host` commands that read cetrafs images: info, ls, cat, stat, verify (`mkfs` is
//! in [`crate::mkfs`]).

use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;

use serde_json::{json, Value};
use tet_alloc::cetrafs::fsck;
use tet_core::block::{BlockDevice, BLOCK_SIZE_U64};
use tet_core::cetrafs::{Buffers, Committed, Features, Finding, Fs, Inode};
use tet_core::{Error, ErrorKind};

use crate::{Exit, Output};

/// A device the commands read an image from.
pub type Dev<'a> = &'a dyn BlockDevice;

fn open_fs<'a>(path: &Path, dev: Dev<'a>) -> Result<Fs<Dev<'a>>, Exit> {
    let mut b = Buffers::new();
    let magic_ok = dev.block_count() > 0
        && dev.read_block(0, &mut b.data).is_ok()
        && b.data.starts_with(&tet_core::cetrafs::SB_MAGIC);
    if !magic_ok {
        eprintln!("tet-host: {}: not a cetrafs image (no CTFS magic); ls, cat and stat read cetrafs images", path.display());
        return Err(Exit::Usage);
    }
    Fs::open(dev, &mut b.data).map_err(|e| {
        eprintln!(
            "tet-host: {}: cannot mount: {}",
            path.display(),
            describe(&e)
        );
        Exit::Problems
    })
}

/// The image as a mount sees it: blocks that committed, not-yet-replayed journal
/// transactions change are served at their last committed version (section 7), so
/// `ls`, `cat` and `stat` show what the filesystem holds; `--no-journal` shows the raw
/// on-disk state.
pub struct Journaled<'a> {
    dev: Dev<'a>,
    map: Vec<(u64, u64)>,
}

impl BlockDevice for Journaled<'_> {
    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }
    fn read_block(&self, lba: u64, buf: &mut tet_core::block::Block) -> tet_core::Result<()> {
        let from = match self.map.binary_search_by_key(&lba, |e| e.0) {
            Ok(i) => self.map.get(i).map_or(lba, |e| e.1),
            Err(_) => lba,
        };
        self.dev.read_block(from, buf)
    }
    fn read_block_prefix(
        &self,
        lba: u64,
        buf: &mut tet_core::block::Block,
        len: usize,
    ) -> tet_core::Result<()> {
        if self.map.binary_search_by_key(&lba, |e| e.0).is_ok() {
            return self.read_block(lba, buf);
        }
        self.dev.read_block_prefix(lba, buf, len)
    }
}

/// `dev` through the journal overlay (or raw, with `no_journal`). An image that does
/// not mount, or whose journals cannot be classified, is read raw; the command then
/// reports the mount error itself.
pub fn journaled(dev: Dev<'_>, no_journal: bool) -> Journaled<'_> {
    let mut map = Vec::new();
    let mut bufs = Buffers::new();
    if !no_journal {
        if let Ok(fs) = Fs::open(dev, &mut bufs.data) {
            let n = fs.committed_slots(&mut [], &mut bufs);
            let mut table = vec![Committed::default(); n];
            if let Ok(ov) = fs.overlay(&mut table, &mut bufs) {
                map = ov
                    .entries()
                    .iter()
                    .map(|c| (c.target, c.payload_lba))
                    .collect();
            }
        }
    }
    Journaled { dev, map }
}

/// Every committed slot of the dirty journals, classified across journals (empty when
/// they cannot be classified; `verify` says why).
fn committed_slots(fs: &Fs<Dev<'_>>, bufs: &mut Buffers) -> Vec<Committed> {
    let n = fs.committed_slots(&mut [], bufs);
    let mut table = vec![Committed::default(); n];
    let got = fs.committed_slots(&mut table, bufs);
    table.truncate(got);
    if fs.classify_chains(&mut table, &mut bufs.data).is_err() {
        table.clear();
    }
    table
}

/// An error with its block number spelled out.
pub fn describe(e: &Error) -> String {
    format!(
        "{} (block {}, byte {:#x}) {}",
        e.what,
        e.offset / BLOCK_SIZE_U64,
        e.offset,
        e.kind
    )
}

fn features_json(f: &Features) -> Value {
    let names = |word: u64, table: &[(u32, &'static str)]| -> Vec<String> {
        (0..64u32)
            .filter(|b| word & (1u64 << b) != 0)
            .map(|b| {
                Features::name(table, b).map_or_else(|| format!("unknown bit {b}"), str::to_string)
            })
            .collect()
    };
    json!({
        "compat": names(f.compat, Features::COMPAT),
        "incompat": names(f.incompat, Features::INCOMPAT),
        "ro_compat": names(f.ro_compat, Features::RO_COMPAT),
    })
}

/// `tet-host info` for an image.
pub fn info(path: &Path, dev: Dev<'_>, output: Output) -> Exit {
    let fs = match open_fs(path, dev) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let sb = fs.superblock();
    let mut bufs = Buffers::new();
    let mut zgs = Vec::new();
    for z in 0..sb.zone_group_count() {
        if let Ok(zg) = fs.zone_group(z, &mut bufs.data) {
            zgs.push(json!({"id": z, "owner": zg.owner(), "free_data_blocks": zg.hot().free_data_blocks.get(), "hb_seq": zg.hot().hb_seq.get(), "first_bg": zg.cold().first_bg_id.get(), "bg_count": zg.cold().bg_count.get()}));
        }
    }
    let mut bgs = Vec::new();
    let _ = fs.for_each_block_group(&mut bufs.data, |b, bg| {
        if let Ok(bg) = bg {
            let r = &bg.raw();
            bgs.push(json!({"id": b, "owner_zg": r.owner_zg.get(), "start": r.start_block.get(), "length": r.length_blocks.get(), "data_blocks": r.data_block_count.get(), "free_data_blocks": r.free_data_blocks.get(), "reconcile_seq": r.reconcile_seq.get()}));
        }
        ControlFlow::Continue(())
    });
    let mut nodes = Vec::new();
    let mut journals = Vec::new();
    let slots = committed_slots(&fs, &mut bufs);
    for row in 0..sb.node_capacity() {
        if let Ok(Some(n)) = fs.node_row(row, &mut bufs.data) {
            let host = String::from_utf8_lossy(&n.raw().hostname)
                .trim_end_matches('\0')
                .to_string();
            nodes.push(json!({"row": row, "node_id": n.raw().node_id.get(), "state": n.state_name(), "hostname": host}));
        }
        let mut counts = std::collections::BTreeMap::new();
        for c in slots.iter().filter(|c| c.row == row) {
            if let Some(class) = c.class {
                let n = counts.entry(class.name()).or_insert(0u64);
                *n = n.saturating_add(1);
            }
        }
        let flag = fs.journal_flag(row, &mut bufs.data);
        journals.push(match flag {
            Ok(f) => json!({"row": row, "state": if f.is_dirty() { "DIRTY" } else { "CLEAN" }, "replay_owner": f.raw().replay_owner.get(), "slots": counts}),
            Err(e) => json!({"row": row, "error": describe(&e)}),
        });
    }
    let regions: Vec<Value> =
        std::iter::once(json!({"name": "superblock", "start": 0, "blocks": 1}))
            .chain(
                sb.regions()
                    .iter()
                    .map(|r| json!({"name": r.name, "start": r.start, "blocks": r.blocks})),
            )
            .collect();
    let raw = sb.raw();
    let label = String::from_utf8_lossy(&raw.label)
        .trim_end_matches('\0')
        .to_string();
    let v = json!({
        "file": path.display().to_string(),
        "format": "cetrafs",
        "version": raw.format_version.get(),
        "label": label,
        "total_blocks": sb.total_blocks(),
        "read_only": sb.read_only(),
        "features": features_json(&sb.features()),
        "zone_groups": zgs,
        "block_groups": bgs,
        "node_capacity": sb.node_capacity(),
        "nodes": nodes,
        "inode_count": sb.inode_count(),
        "regions": regions,
        "journals": journals,
    });
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()),
        _ => {
            println!(
                "image:        {} ({} blocks of 4096 bytes)",
                path.display(),
                sb.total_blocks()
            );
            println!(
                "format:       cetrafs 0x{:04x}, label '{label}'{}",
                raw.format_version.get(),
                if sb.read_only() {
                    ", read-only (unknown ro-compat bits)"
                } else {
                    ""
                }
            );
            println!("features:     {}", features_json(&sb.features()));
            println!("regions:");
            for r in &regions {
                println!(
                    "  {:<22} start {:>8}  blocks {:>8}",
                    r["name"].as_str().unwrap_or(""),
                    r["start"],
                    r["blocks"]
                );
            }
            println!("zone groups:");
            for z in &zgs {
                println!(
                    "  zg {:<3} block groups {}..{}  free {}  owner {}",
                    z["id"],
                    z["first_bg"],
                    z["first_bg"]
                        .as_u64()
                        .unwrap_or(0)
                        .saturating_add(z["bg_count"].as_u64().unwrap_or(0)),
                    z["free_data_blocks"],
                    if z["owner"].is_null() {
                        "none".into()
                    } else {
                        z["owner"].to_string()
                    }
                );
            }
            println!("block groups:");
            for b in &bgs {
                println!("  bg {:<3} start {:>8}  length {:>6}  data {:>6}  free {:>6}  zg {}  reconcile_seq {}", b["id"], b["start"], b["length"], b["data_blocks"], b["free_data_blocks"], b["owner_zg"], b["reconcile_seq"]);
            }
            println!(
                "nodes:        {} of {} registry rows in use",
                nodes.len(),
                sb.node_capacity()
            );
            for j in &journals {
                println!(
                    "  journal row {:<3} {}  {}",
                    j["row"],
                    j["state"].as_str().unwrap_or("ERROR"),
                    j["slots"]
                );
            }
        }
    }
    Exit::Clean
}

fn type_name(inode: &Inode) -> &'static str {
    if inode.is_dir() {
        "dir"
    } else if inode.is_symlink() {
        "symlink"
    } else {
        "file"
    }
}

/// Mounts the image and resolves `inner`: the start of `ls`, `cat` and `stat`.
fn open_path<'a>(
    path: &Path,
    dev: Dev<'a>,
    inner: &str,
    bufs: &mut Buffers,
) -> Result<(Fs<Dev<'a>>, Inode), Exit> {
    let fs = open_fs(path, dev)?;
    let inode = fs.resolve(inner.as_bytes(), bufs).map_err(|e| {
        if e.kind == ErrorKind::NotFound {
            eprintln!(
                "tet-host: {}: {inner}: no such file or directory",
                path.display()
            );
            Exit::Usage
        } else {
            eprintln!("tet-host: {}: {inner}: {}", path.display(), describe(&e));
            Exit::Problems
        }
    })?;
    Ok((fs, inode))
}

/// `tet-host ls`.
pub fn ls(path: &Path, dev: Dev<'_>, inner: &str, output: Output, no_journal: bool) -> Exit {
    let view = journaled(dev, no_journal);
    let dev: Dev<'_> = &view;
    let mut bufs = Buffers::new();
    let (fs, dir) = match open_path(path, dev, inner, &mut bufs) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let mut names: Vec<(Vec<u8>, u64)> = Vec::new();
    if dir.is_dir() {
        if let Err(e) = fs.read_dir(&dir, &mut bufs, |e| {
            names.push((e.name().to_vec(), e.inode));
            ControlFlow::Continue(())
        }) {
            eprintln!("tet-host: {}: {}", path.display(), describe(&e));
            return Exit::Problems;
        }
    } else {
        names.push((
            inner
                .rsplit('/')
                .next()
                .unwrap_or(inner)
                .as_bytes()
                .to_vec(),
            dir.ino(),
        ));
    }
    names.sort();
    let mut rows = Vec::new();
    for (name, ino) in names {
        match fs.inode(ino, &mut bufs.data) {
            Ok(i) => rows.push(json!({"name": String::from_utf8_lossy(&name), "inode": ino, "type": type_name(&i), "size": i.size(), "mode": format!("{:o}", i.raw().mode.get() & 0o7777)})),
            Err(e) => {
                eprintln!("tet-host: {}: {}", path.display(), describe(&e));
                return Exit::Problems;
            }
        }
    }
    match output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        ),
        _ => {
            for r in &rows {
                println!(
                    "{:<8} {:>5} {:>10} {:>6}  {}",
                    r["type"].as_str().unwrap_or(""),
                    r["mode"].as_str().unwrap_or(""),
                    r["size"],
                    r["inode"],
                    r["name"].as_str().unwrap_or("")
                );
            }
        }
    }
    Exit::Clean
}

/// `tet-host cat`.
pub fn cat(path: &Path, dev: Dev<'_>, inner: &str, output: Output, no_journal: bool) -> Exit {
    let view = journaled(dev, no_journal);
    let dev: Dev<'_> = &view;
    let mut bufs = Buffers::new();
    let (fs, f) = match open_path(path, dev, inner, &mut bufs) {
        Ok(r) => r,
        Err(e) => return e,
    };
    if f.is_dir() {
        eprintln!("tet-host: {}: {inner}: is a directory", path.display());
        return Exit::Usage;
    }
    let mut stdout = std::io::stdout().lock();
    let fail = |e: &Error| {
        eprintln!("tet-host: {}: {}", path.display(), describe(e));
        Exit::Problems
    };
    if output != Output::Json {
        let r = stream_file(&fs, &f, &mut bufs, |chunk| stdout.write_all(chunk));
        return match r {
            Ok(Ok(())) => Exit::Clean,
            Ok(Err(_)) => Exit::Operational,
            Err(e) => fail(&e),
        };
    }
    // JSON streams too: one pass decides text (UTF-8) or hex, a second writes it.
    let mut utf8 = Utf8Check::default();
    if let Err(e) = stream_file(&fs, &f, &mut bufs, |c| {
        utf8.feed(c);
        Ok(())
    }) {
        return fail(&e);
    }
    let text = utf8.finish();
    let head = format!(
        "{{\"path\":{},\"inode\":{},\"size\":{},\"{}\":\"",
        Value::String(inner.to_string()),
        f.ino(),
        f.size(),
        if text { "text" } else { "hex" }
    );
    if stdout.write_all(head.as_bytes()).is_err() {
        return Exit::Operational;
    }
    let mut carry: Vec<u8> = Vec::new();
    let r = stream_file(&fs, &f, &mut bufs, |chunk| {
        if text {
            // Escape whole characters only: hold back an incomplete one for the next chunk.
            carry.extend_from_slice(chunk);
            let valid = match std::str::from_utf8(&carry) {
                Ok(_) => carry.len(),
                Err(e) => e.valid_up_to(),
            };
            let done = carry.get(..valid).unwrap_or(&[]);
            let s =
                serde_json::to_string(std::str::from_utf8(done).unwrap_or("")).unwrap_or_default();
            stdout.write_all(s.get(1..s.len().saturating_sub(1)).unwrap_or("").as_bytes())?;
            carry.drain(..valid);
            Ok(())
        } else {
            let hex: String = chunk.iter().map(|b| format!("{b:02x}")).collect();
            stdout.write_all(hex.as_bytes())
        }
    });
    match r {
        Ok(Ok(())) => match stdout.write_all(b"\"}\n") {
            Ok(()) => Exit::Clean,
            Err(_) => Exit::Operational,
        },
        Ok(Err(_)) => Exit::Operational,
        Err(e) => fail(&e),
    }
}

/// Reads `f` start to end in 64 KiB pieces, handing each to `sink`: memory stays one
/// piece whatever the file's size says. The outer error is the image's, the inner the
/// sink's.
fn stream_file(
    fs: &Fs<Dev<'_>>,
    f: &Inode,
    bufs: &mut Buffers,
    mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<std::io::Result<()>, Error> {
    let mut chunk = vec![0u8; 1 << 16];
    let mut off = 0u64;
    while off < f.size() {
        let n = fs.read(f, off, &mut chunk, bufs)?;
        if n == 0 {
            break;
        }
        if let Err(e) = sink(chunk.get(..n).unwrap_or(&[])) {
            return Ok(Err(e));
        }
        off = off.saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
    }
    Ok(Ok(()))
}

/// Bytes as text when they are UTF-8, else as `0x` and hex (as `getfattr -e hex`
/// prints them), so a binary value is shown whole and unambiguously.
fn shown(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.starts_with("0x") => s.to_string(),
        _ => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}")
        }
    }
}

/// Whether a byte stream is UTF-8, fed in pieces that may split a character.
#[derive(Default)]
struct Utf8Check {
    pending: Vec<u8>,
    bad: bool,
}

impl Utf8Check {
    fn feed(&mut self, chunk: &[u8]) {
        if self.bad {
            return;
        }
        self.pending.extend_from_slice(chunk);
        match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.clear(),
            // An incomplete character at the end waits for the next piece.
            Err(e) if e.error_len().is_none() => {
                let keep = self.pending.split_off(e.valid_up_to());
                self.pending = keep;
            }
            Err(_) => self.bad = true,
        }
    }

    fn finish(self) -> bool {
        !self.bad && self.pending.is_empty()
    }
}

/// `tet-host stat`.
pub fn stat(path: &Path, dev: Dev<'_>, inner: &str, output: Output, no_journal: bool) -> Exit {
    let view = journaled(dev, no_journal);
    let dev: Dev<'_> = &view;
    let mut bufs = Buffers::new();
    let (fs, i) = match open_path(path, dev, inner, &mut bufs) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let s = fs.stat(&i);
    let mut xattrs = serde_json::Map::new();
    if let Err(e) = fs.xattrs(&i, &mut bufs, |x| {
        xattrs.insert(shown(x.key()), Value::String(shown(x.value())));
        ControlFlow::Continue(())
    }) {
        eprintln!("tet-host: {}: {}", path.display(), describe(&e));
        return Exit::Problems;
    }
    let v = json!({
        "path": inner, "inode": s.ino, "type": type_name(&i), "mode": format!("{:o}", s.mode & 0o7777),
        "uid": s.uid, "gid": s.gid, "nlink": s.nlink, "size": s.size, "blocks": s.blocks,
        "mtime_ns": s.mtime_ns, "parent": s.parent, "extent_depth": s.depth, "xattrs": xattrs,
    });
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()),
        _ => {
            for (k, val) in v.as_object().into_iter().flatten() {
                println!(
                    "{k:<13} {}",
                    if let Value::String(s) = val {
                        s.clone()
                    } else {
                        val.to_string()
                    }
                );
            }
        }
    }
    Exit::Clean
}

/// `tet-host verify` for an image: the full check (`tet_alloc::cetrafs::fsck`), findings in the
/// order found, exit 0 when clean (warnings included) and 4 otherwise.
pub fn verify(path: &Path, dev: Dev<'_>, output: Output, memory_limit: u64) -> Exit {
    let mut found: Vec<Finding> = Vec::new();
    let outcome = fsck::check(dev, &fsck::Options { memory_limit }, &mut |f: &Finding| {
        found.push(*f)
    });
    let (errors, warnings) = (outcome.summary.errors, outcome.summary.warnings);
    let status = if errors > 0 {
        "errors"
    } else if warnings > 0 {
        "warnings"
    } else {
        "clean"
    };
    match output {
        Output::Json => {
            let list: Vec<Value> = found
                .iter()
                .map(|f| json!({"code": f.code.as_str(), "severity": f.severity().name(), "field": f.error.what, "offset": f.error.offset, "block": f.error.offset / BLOCK_SIZE_U64, "inode": f.ino, "message": describe(&f.error)}))
                .collect();
            let v = json!({"file": path.display().to_string(), "format": "cetrafs", "status": status, "errors": errors, "warnings": warnings, "inodes": outcome.summary.inodes, "cross_checked": outcome.cross_checked, "findings": list});
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        Output::Quiet => match found.first() {
            None => println!("{}: clean", path.display()),
            Some(f) => println!(
                "{}: {errors} error(s), {warnings} warning(s); first: {}[{}] {}",
                path.display(),
                f.severity().name(),
                f.code.as_str(),
                describe(&f.error)
            ),
        },
        Output::Human => {
            for f in &found {
                let ino = f.ino.map(|i| format!(" inode {i}:")).unwrap_or_default();
                println!(
                    "{}[{}]{ino} {}",
                    f.severity().name(),
                    f.code.as_str(),
                    describe(&f.error)
                );
            }
            if errors == 0 && warnings == 0 {
                println!("{}: clean", path.display());
            } else {
                println!(
                    "{}: {errors} error(s), {warnings} warning(s)",
                    path.display()
                );
            }
        }
    }
    if errors > 0 {
        Exit::Problems
    } else {
        Exit::Clean
    }
}

/// `tet-host replay IMAGE`: journal replay only (as e2fsck's `-E journal_only`). Exit 0
/// when no journal was dirty, 1 when journals were replayed, 4 when some slots conflict
/// (reported, not written), 8 when refused (a live node's journal, another replayer's
/// claim) or the image cannot be written.
pub fn replay(
    path: &Path,
    dev: &crate::device::FileDevice,
    node_id: u64,
    force: bool,
    output: Output,
) -> Exit {
    use tet_core::cetrafs::replay::{replay as run, ReplayError, ReplayOptions};
    let mut bufs = Buffers::new();
    let fs = match Fs::open(dev, &mut bufs.data) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("tet-host: {}: cannot mount: {}", path.display(), describe(&e));
            return Exit::Problems;
        }
    };
    let n = fs.committed_slots(&mut [], &mut bufs);
    let mut table = vec![Committed::default(); n];
    let mut conflicts: Vec<Finding> = Vec::new();
    let r = run(
        &fs,
        ReplayOptions { node_id, force },
        &mut table,
        &mut bufs,
        &mut |f: &Finding| conflicts.push(*f),
    );
    let report = match r {
        Ok(r) => r,
        Err(ReplayError::LiveNode { row, node_id }) => {
            eprintln!(
                "tet-host: {}: the journal of node {node_id} (registry row {row}) needs replay, \
                 but the registry shows that node ACTIVE: it replays its own journal. If it is \
                 down, fence it or pass --force",
                path.display()
            );
            return Exit::Operational;
        }
        Err(ReplayError::Claimed { row, owner }) => {
            eprintln!(
                "tet-host: {}: the journal of registry row {row} is being replayed by node \
                 {owner}; pass --force to take it over",
                path.display()
            );
            return Exit::Operational;
        }
        Err(ReplayError::Device(e)) => {
            eprintln!("tet-host: {}: replay stopped: {}", path.display(), describe(&e));
            return Exit::Operational;
        }
    };
    match output {
        Output::Json => println!(
            "{}",
            json!({"file": path.display().to_string(), "journals": report.journals,
                   "written": report.written, "already_applied": report.already,
                   "conflicts": report.conflicts,
                   "findings": conflicts.iter().map(|f| json!({"code": f.code.as_str(), "offset": f.error.offset, "message": describe(&f.error)})).collect::<Vec<_>>()})
        ),
        _ => {
            for f in &conflicts {
                println!("{}[{}] {}", f.severity().name(), f.code.as_str(), describe(&f.error));
            }
            if report.journals == 0 {
                println!("{}: no journal needs replay", path.display());
            } else {
                println!(
                    "{}: replayed {} journal(s): {} block(s) written, {} already applied, {} conflicting",
                    path.display(),
                    report.journals,
                    report.written,
                    report.already,
                    report.conflicts
                );
            }
        }
    }
    if report.conflicts > 0 {
        Exit::Problems
    } else if report.journals > 0 {
        Exit::Fixed
    } else {
        Exit::Clean
    }
}

/// `tet-host repair IMAGE` for cetrafs: replay, check, fix (`tet_alloc::cetrafs::repair`),
/// in place through the journal. `-n` writes nothing; `-p` applies lossless fixes; `-y`
/// every fix; without one it asks per fix on a terminal (exit 16 when standard input is
/// not one). Exit 0 clean, 1 problems found and all corrected, 4 problems left, 8 when
/// refused or the image cannot be written.
pub fn repair(path: &Path, mode: crate::tet_repair::Mode, force: bool, output: Output) -> Exit {
    use std::io::IsTerminal;
    use tet_alloc::cetrafs::repair::{repair as run, Fix, Mode, RepairError, RepairOptions};
    use tet_core::cetrafs::replay::ReplayError;
    let m = match mode {
        crate::tet_repair::Mode::No => Mode::No,
        crate::tet_repair::Mode::Preen => Mode::Preen,
        crate::tet_repair::Mode::Yes | crate::tet_repair::Mode::Ask => Mode::Yes,
    };
    let asking = mode == crate::tet_repair::Mode::Ask;
    if asking && !std::io::stdin().is_terminal() {
        eprintln!(
            "tet-host: repair needs -n, -p or -y when standard input is not a terminal \
             (it asks before each fix otherwise)"
        );
        return Exit::Usage;
    }
    let opened = if m == Mode::No {
        crate::device::FileDevice::open(path)
    } else {
        crate::device::FileDevice::open_rw(path)
    };
    let dev = match opened {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tet-host: cannot open {}: {e}", path.display());
            return Exit::Operational;
        }
    };
    let opts = RepairOptions {
        node_id: u64::MAX,
        force,
        memory_limit: crate::tet_cmd::host_ram() / 4,
    };
    let mut decide = |f: &Fix| -> bool {
        if !asking {
            return true;
        }
        eprint!(
            "{}[{}] {}? [y/N] ",
            if f.lossless { "fix" } else { "lossy fix" },
            f.code.as_str(),
            f.action
        );
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut std::io::stdin().lock(), &mut line).is_err() {
            return false;
        }
        matches!(line.trim(), "y" | "Y" | "yes")
    };
    let out = match run(&dev, m, &opts, &mut decide) {
        Ok(o) => o,
        Err(RepairError::Mounted { row, node_id }) => {
            eprintln!(
                "tet-host: {}: node {node_id} (registry row {row}) is ACTIVE: the filesystem \
                 may be mounted. Repair it offline, or pass --force",
                path.display()
            );
            return Exit::Operational;
        }
        Err(RepairError::Replay(ReplayError::LiveNode { row, node_id })) => {
            eprintln!(
                "tet-host: {}: the journal of node {node_id} (registry row {row}) needs \
                 replay but that node is ACTIVE",
                path.display()
            );
            return Exit::Operational;
        }
        Err(RepairError::Replay(ReplayError::Claimed { row, owner })) => {
            eprintln!(
                "tet-host: {}: the journal of registry row {row} is being replayed by node {owner}",
                path.display()
            );
            return Exit::Operational;
        }
        Err(
            RepairError::Replay(ReplayError::Device(e))
            | RepairError::Device(e)
            | RepairError::Stopped(e),
        ) => {
            eprintln!("tet-host: {}: repair stopped: {}", path.display(), describe(&e));
            return Exit::Operational;
        }
        Err(RepairError::NoJournal) => {
            eprintln!(
                "tet-host: {}: no clean journal to write fixes through",
                path.display()
            );
            return Exit::Operational;
        }
    };
    let verb = if m == Mode::No { "would fix" } else { "fixed" };
    match output {
        Output::Json => println!(
            "{}",
            json!({"file": path.display().to_string(), "mode": format!("{m:?}").to_lowercase(),
                   "replayed_journals": out.replay.journals, "rounds": out.rounds,
                   "fixes": out.fixes.iter().map(|f| json!({"code": f.code.as_str(), "action": f.action, "offset": f.offset, "value": f.value, "lossless": f.lossless})).collect::<Vec<_>>(),
                   "left": out.left.iter().map(|f| json!({"code": f.code.as_str(), "offset": f.error.offset, "message": describe(&f.error)})).collect::<Vec<_>>()})
        ),
        _ => {
            if out.replay.journals > 0 {
                println!(
                    "replayed {} journal(s): {} block(s) written",
                    out.replay.journals, out.replay.written
                );
            }
            for f in &out.fixes {
                println!(
                    "{verb}[{}] {} (byte {:#x}){}",
                    f.code.as_str(),
                    f.action,
                    f.offset,
                    f.value.map(|v| format!(" = {v}")).unwrap_or_default()
                );
            }
            for f in &out.left {
                println!("left[{}] {}", f.code.as_str(), describe(&f.error));
            }
        }
    }
    let had = out.found || out.replay.journals > 0;
    if !out.left.is_empty() || (m == Mode::No && had) {
        Exit::Problems
    } else if had || !out.fixes.is_empty() {
        Exit::Fixed
    } else {
        Exit::Clean
    }
}
