//! `tet-host ls`, `cat` and `stat`: reading an image as a mount sees it.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;

use serde_json::{json, Value};
use tet_core::cetrafs::{Buffers, Fs, Inode};
use tet_core::{Error, ErrorKind};

use super::*;
use crate::{Exit, Output};

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
pub(super) fn open_path<'a>(
    path: &Path,
    dev: Dev<'a>,
    inner: &[u8],
    bufs: &mut Buffers,
) -> Result<(Fs<Dev<'a>>, Inode), Exit> {
    let fs = open_fs(path, dev)?;
    let inode = fs.resolve(inner, bufs).map_err(|e| {
        let shown = escaped(inner);
        if e.kind == ErrorKind::NotFound {
            match symlink_on_the_way(&fs, inner, bufs) {
                Some((at, target)) => crate::say!(
                    "{}: {shown}: {} is a symlink (-> {}); paths in an image are not followed \
                     through symlinks",
                    path.display(),
                    escaped(&at),
                    escaped(&target)
                ),
                None => crate::say!("{}: {shown}: no such file or directory", path.display()),
            }
        } else {
            crate::say!("{}: {shown}: {}", path.display(), describe(&e));
        }
        Exit::of(e.kind.category())
    })?;
    Ok((fs, inode))
}

/// The symlink a path goes through, when it does: its path and its target. The one
/// symlink policy of the reading commands: a symlink is shown as itself (`ls`, `stat`) and
/// never followed, inside a path or at its end (its target may name anything, on this
/// host or another), and a path through one says so instead of "no such file".
fn symlink_on_the_way(
    fs: &Fs<Dev<'_>>,
    inner: &[u8],
    bufs: &mut Buffers,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let parts: Vec<&[u8]> = inner
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    let mut at = Vec::new();
    for (k, part) in parts.iter().enumerate() {
        at.push(b'/');
        at.extend_from_slice(part);
        let i = fs.resolve(&at, bufs).ok()?;
        if i.is_symlink() && k.saturating_add(1) < parts.len() {
            return Some((at, link_target(fs, &i, bufs)));
        }
        if !i.is_dir() {
            return None;
        }
    }
    None
}

/// A symlink's target (empty when it does not read: the caller reports the path).
fn link_target(fs: &Fs<Dev<'_>>, i: &Inode, bufs: &mut Buffers) -> Vec<u8> {
    let mut target = Vec::new();
    let _ = fs.stream(i, bufs, |b| {
        target.extend_from_slice(b);
        ControlFlow::Continue(())
    });
    target
}

/// How `ls` lists.
#[derive(Clone, Copy, Debug, Default)]
pub struct LsOptions {
    /// `-l`: mode as `-rw-r--r--`, links, owner, group, size, modification time, and
    /// `-> target` for a symlink.
    pub long: bool,
    /// `-R`: every directory below, each under its path (directories entered once).
    pub recursive: bool,
}

/// `tet-host ls`.
pub fn ls(
    path: &Path,
    dev: Dev<'_>,
    inner: &[u8],
    output: Output,
    no_journal: bool,
    o: LsOptions,
) -> Exit {
    with_journal(dev, no_journal, |dev| ls_in(path, dev, inner, output, o))
}

/// `drwxr-x---` for a mode.
fn mode_string(inode: &Inode, mode: u32) -> String {
    let kind = if inode.is_dir() {
        'd'
    } else if inode.is_symlink() {
        'l'
    } else {
        '-'
    };
    let mut s = String::from(kind);
    for (bit, c) in [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o40, 'r'),
        (0o20, 'w'),
        (0o10, 'x'),
        (0o4, 'r'),
        (0o2, 'w'),
        (0o1, 'x'),
    ] {
        s.push(if mode & bit != 0 { c } else { '-' });
    }
    s
}

/// One listed entry: its row for JSON and its line for a person.
fn ls_row(
    fs: &Fs<Dev<'_>>,
    bufs: &mut Buffers,
    dir_path: &[u8],
    name: &[u8],
    i: &Inode,
    o: LsOptions,
) -> Result<(Value, String), Error> {
    let st = fs.stat(i);
    let mut row = serde_json::Map::new();
    put_name(&mut row, "name", name);
    if o.recursive {
        let mut full = dir_path.to_vec();
        if !full.ends_with(b"/") {
            full.push(b'/');
        }
        full.extend_from_slice(name);
        put_name(&mut row, "path", &full);
    }
    row.insert("inode".into(), json!(st.ino));
    row.insert("type".into(), json!(type_name(i)));
    row.insert("size".into(), json!(st.size));
    row.insert("mode".into(), json!(format!("{:o}", st.mode & 0o7777)));
    let mut target = Vec::new();
    if i.is_symlink() && o.long {
        // The callback never stops the stream.
        let _ = fs.stream(i, bufs, |b| {
            target.extend_from_slice(b);
            ControlFlow::Continue(())
        })?;
    }
    let line = if o.long {
        row.insert("nlink".into(), json!(st.nlink));
        row.insert("uid".into(), json!(st.uid));
        row.insert("gid".into(), json!(st.gid));
        row.insert("mtime_ns".into(), json!(st.mtime_ns));
        if i.is_symlink() {
            put_name(&mut row, "target", &target);
        }
        let when = crate::time::rfc3339(st.mtime_ns / 1_000_000_000);
        let arrow = if i.is_symlink() {
            format!(" -> {}", escaped(&target))
        } else {
            String::new()
        };
        format!(
            "{} {:>3} {:>6} {:>6} {:>12} {}  {}{arrow}",
            mode_string(i, st.mode),
            st.nlink,
            st.uid,
            st.gid,
            st.size,
            when.get(..16).unwrap_or(&when).replace('T', " "),
            escaped(name)
        )
    } else {
        format!(
            "{:<8} {:>5} {:>10} {:>6}  {}",
            type_name(i),
            format!("{:o}", st.mode & 0o7777),
            st.size,
            st.ino,
            escaped(name)
        )
    };
    Ok((Value::Object(row), line))
}

fn ls_in(path: &Path, dev: Dev<'_>, inner: &[u8], output: Output, o: LsOptions) -> Exit {
    let mut bufs = Buffers::new();
    let (fs, top) = match open_path(path, dev, inner, &mut bufs) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let fail = |e: &Error| {
        crate::say!("{}: {}", path.display(), describe(e));
        Exit::of(e.kind.category())
    };
    let mut rows: Vec<Value> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    if !top.is_dir() {
        let base = inner.rsplit(|b| *b == b'/').next().unwrap_or(inner);
        match ls_row(&fs, &mut bufs, inner, base, &top, o) {
            Ok((row, line)) => {
                rows.push(row);
                lines.push(line);
            }
            Err(e) => return fail(&e),
        }
    }
    // Directories to list, depth first in name order; each entered once.
    let mut pending: Vec<(Vec<u8>, Inode)> = Vec::new();
    if top.is_dir() {
        pending.push((inner.to_vec(), top));
    }
    let mut entered = std::collections::BTreeSet::new();
    let mut first = true;
    while let Some((dir_path, dir)) = pending.pop() {
        if !entered.insert(dir.ino()) {
            continue;
        }
        let mut names: Vec<(Vec<u8>, u64)> = Vec::new();
        if let Err(e) = fs.read_dir(&dir, &mut bufs, |e| {
            names.push((e.name().to_vec(), e.inode));
            ControlFlow::Continue(())
        }) {
            return fail(&e);
        }
        names.sort();
        if o.recursive {
            if !first {
                lines.push(String::new());
            }
            lines.push(format!("{}:", escaped(&dir_path)));
        }
        first = false;
        let mut below = Vec::new();
        for (name, ino) in names {
            let i = match fs.inode(ino, &mut bufs.data) {
                Ok(i) => i,
                Err(e) => return fail(&e),
            };
            match ls_row(&fs, &mut bufs, &dir_path, &name, &i, o) {
                Ok((row, line)) => {
                    rows.push(row);
                    lines.push(line);
                }
                Err(e) => return fail(&e),
            }
            if o.recursive && i.is_dir() {
                let mut child = dir_path.clone();
                if !child.ends_with(b"/") {
                    child.push(b'/');
                }
                child.extend_from_slice(&name);
                below.push((child, i));
            }
        }
        // Popped last-first: push in reverse name order.
        pending.extend(below.into_iter().rev());
    }
    match output {
        Output::Json => crate::report::print_json(&Value::Array(rows)),
        _ => {
            for l in &lines {
                println!("{l}");
            }
        }
    }
    Exit::Clean
}

/// `tet-host cat`.
pub fn cat(path: &Path, dev: Dev<'_>, inner: &[u8], output: Output, no_journal: bool) -> Exit {
    with_journal(dev, no_journal, |dev| cat_in(path, dev, inner, output))
}

fn cat_in(path: &Path, dev: Dev<'_>, inner: &[u8], output: Output) -> Exit {
    let mut bufs = Buffers::new();
    let (fs, f) = match open_path(path, dev, inner, &mut bufs) {
        Ok(r) => r,
        Err(e) => return e,
    };
    if f.is_dir() {
        crate::say!("{}: {}: is a directory", path.display(), escaped(inner));
        return Exit::Operational;
    }
    if f.is_symlink() {
        let target = link_target(&fs, &f, &mut bufs);
        crate::say!(
            "{}: {}: is a symlink (-> {}); symlinks in an image are not followed (`stat` \
             shows it)",
            path.display(),
            escaped(inner),
            escaped(&target)
        );
        return Exit::Operational;
    }
    let mut stdout = std::io::stdout().lock();
    let fail = |e: &Error| {
        crate::say!("{}: {}: {}", path.display(), escaped(inner), describe(e));
        Exit::of(e.kind.category())
    };
    if output != Output::Json {
        let r = stream_file(&fs, &f, &mut bufs, |chunk| stdout.write_all(chunk));
        return match r {
            Ok(Ok(())) => Exit::Clean,
            Ok(Err(e)) => crate::cli::stdout_failed(&e),
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
    let mut named = serde_json::Map::new();
    put_name(&mut named, "path", inner);
    let named = Value::Object(named).to_string();
    let head = format!(
        "{},\"inode\":{},\"size\":{},\"{}\":\"",
        named.strip_suffix('}').unwrap_or(&named),
        f.ino(),
        f.size(),
        if text { "text" } else { "hex" }
    );
    if let Err(e) = stdout.write_all(head.as_bytes()) {
        return crate::cli::stdout_failed(&e);
    }
    // The document has begun: an error from here on goes to standard error only.
    crate::report::printed();
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
            Err(e) => crate::cli::stdout_failed(&e),
        },
        Ok(Err(e)) => crate::cli::stdout_failed(&e),
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
pub fn stat(path: &Path, dev: Dev<'_>, inner: &[u8], output: Output, no_journal: bool) -> Exit {
    with_journal(dev, no_journal, |dev| stat_in(path, dev, inner, output))
}

fn stat_in(path: &Path, dev: Dev<'_>, inner: &[u8], output: Output) -> Exit {
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
        crate::say!("{}: {}", path.display(), describe(&e));
        return Exit::of(e.kind.category());
    }
    // The extent list, as debugfs `stat` shows it (in logical order).
    let mut extents: Vec<tet_core::cetrafs::Extent> = Vec::new();
    if let Err(e) = fs.for_each_extent(&i, &mut bufs.tree, |x| {
        extents.push(x);
        Ok(ControlFlow::Continue(()))
    }) {
        crate::say!("{}: {}", path.display(), describe(&e));
        return Exit::of(e.kind.category());
    }
    extents.sort_by_key(|x| x.logical);
    let mut target = Vec::new();
    if i.is_symlink() {
        if let Err(e) = fs.stream(&i, &mut bufs, |b| {
            target.extend_from_slice(b);
            ControlFlow::Continue(())
        }) {
            crate::say!("{}: {}", path.display(), describe(&e));
            return Exit::of(e.kind.category());
        }
    }
    let secs = s.mtime_ns / 1_000_000_000;
    let when = crate::time::rfc3339(secs);
    let mtime = format!(
        "{}.{:09}Z",
        when.strip_suffix('Z').unwrap_or(&when),
        s.mtime_ns % 1_000_000_000
    );
    let mut v = serde_json::Map::new();
    put_name(&mut v, "path", inner);
    let rest = json!({
        "inode": s.ino, "type": type_name(&i), "mode": format!("{:o}", s.mode & 0o7777),
        "uid": s.uid, "gid": s.gid, "nlink": s.nlink, "size": s.size, "blocks": s.blocks,
        "mtime_ns": s.mtime_ns, "mtime": mtime, "parent": s.parent, "extent_depth": s.depth,
        "extents": extents.iter().map(|x| json!({"logical": x.logical, "len": x.len, "physical": x.physical, "uninit": x.uninit})).collect::<Vec<_>>(),
        "xattrs": xattrs,
    });
    v.extend(rest.as_object().cloned().unwrap_or_default());
    if i.is_symlink() {
        put_name(&mut v, "target", &target);
    }
    let v = Value::Object(v);
    match output {
        Output::Json => crate::report::print_json(&v),
        _ => {
            for (k, val) in v.as_object().into_iter().flatten() {
                let shown = match val {
                    _ if k == "path" => escaped(inner),
                    _ if k == "target" => escaped(&target),
                    _ if k == "mode" => format!(
                        "{} ({})",
                        mode_string(&i, s.mode),
                        val.as_str().unwrap_or("")
                    ),
                    _ if k == "extents" => {
                        // One line per extent: logical range, physical range, length.
                        let lines: Vec<String> = extents
                            .iter()
                            .map(|x| {
                                let end = u64::from(x.logical).saturating_add(u64::from(x.len));
                                format!(
                                    "\n  logical {}..{end} -> blocks {}..{} ({} block{}{})",
                                    x.logical,
                                    x.physical,
                                    x.physical.saturating_add(u64::from(x.len)),
                                    x.len,
                                    if x.len == 1 { "" } else { "s" },
                                    if x.uninit { ", uninitialized" } else { "" }
                                )
                            })
                            .collect();
                        format!("{}{}", extents.len(), lines.concat())
                    }
                    Value::String(s) => s.clone(),
                    _ => val.to_string(),
                };
                if !k.ends_with("_hex") {
                    println!("{k:<13} {shown}");
                }
            }
        }
    }
    Exit::Clean
}
