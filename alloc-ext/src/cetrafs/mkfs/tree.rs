//! The tree being copied into a new image: [`ImageBuilder`]'s directories, files,
//! symlinks, hard links, owners and xattrs, checked as they are added. File bytes stay
//! with their [`Content`] until the image is written.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use tet_core::cetrafs::XATTRS_PER_BLOCK;
use tet_core::Error;

use super::{full, invalid, usize_of, Params};

/// How all-zero blocks of a file are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sparse {
    /// Every block is allocated and written.
    Dense,
    /// All-zero blocks are holes (no extent).
    Holes,
    /// All-zero blocks are allocated as uninitialized extents (not written).
    Uninit,
}

/// Placement of a file's data blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// As contiguous as the allocator allows.
    Contiguous,
    /// Every other block, so each block is its own extent (to grow deep trees).
    Fragmented,
}

/// A file's bytes, read block by block while the image is written, so a builder copying
/// files from elsewhere never holds their contents (`mkfs --from`). `Vec<u8>` is one.
pub trait Content {
    /// Length in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` (at most one block) with the bytes at `offset`; a source that ends
    /// early (a file that shrank) is an error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error>;
}

impl Content for Vec<u8> {
    fn size(&self) -> u64 {
        u64::try_from(self.len()).unwrap_or(u64::MAX)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let at = usize_of(offset);
        let src = self
            .get(at..at.saturating_add(buf.len()))
            .ok_or(invalid("file content"))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

pub(super) enum Kind {
    File {
        data: Box<dyn Content>,
        sparse: Sparse,
        placement: Placement,
    },
    Symlink {
        target: Vec<u8>,
    },
    Dir {
        /// Name, inode, file type.
        entries: Vec<(Vec<u8>, u64, u8)>,
    },
}

pub(super) struct Node {
    pub(super) kind: Kind,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) mtime_ns: u64,
    /// A directory's parent (0 for others).
    pub(super) parent: u64,
    pub(super) xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Directory entries naming a file or symlink (hard links).
    pub(super) links: u32,
}

impl Node {
    /// A node named once, owned by root, mtime 0, no xattrs.
    fn new(kind: Kind, mode: u32, parent: u64) -> Node {
        Node {
            kind,
            mode,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            parent,
            xattrs: Vec::new(),
            links: 1,
        }
    }

    fn empty_dir(mode: u32, parent: u64) -> Node {
        Node::new(
            Kind::Dir {
                entries: Vec::new(),
            },
            mode,
            parent,
        )
    }
}

/// Builds an image in memory.
pub struct ImageBuilder {
    pub(super) params: Params,
    /// Indexed by inode number; index 0 stands for inode 0 and is never written.
    pub(super) nodes: Vec<Node>,
}

impl ImageBuilder {
    /// A builder with an empty root directory (inode 1, mode 0755).
    pub fn new(params: Params) -> Self {
        ImageBuilder {
            params,
            nodes: vec![Node::empty_dir(0, 0), Node::empty_dir(0o040_755, 1)],
        }
    }

    /// The root directory's inode.
    pub const ROOT: u64 = 1;

    fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Error> {
        self.nodes.get_mut(usize_of(ino)).ok_or(invalid("inode"))
    }

    fn link(&mut self, dir: u64, name: &[u8], ino: u64, ftype: u8) -> Result<(), Error> {
        if name.is_empty()
            || name.len() > 255
            || name.contains(&b'/')
            || name.contains(&0)
            || name == b"."
            || name == b".."
        {
            return Err(invalid("name"));
        }
        match &mut self.node_mut(dir)?.kind {
            Kind::Dir { entries } => {
                if entries.iter().any(|(n, _, _)| n == name) {
                    return Err(invalid("name (exists)"));
                }
                entries.push((name.to_vec(), ino, ftype));
                Ok(())
            }
            _ => Err(invalid("parent (not a directory)")),
        }
    }

    fn add(&mut self, dir: u64, name: &[u8], node: Node, ftype: u8) -> Result<u64, Error> {
        let ino = u64::try_from(self.nodes.len()).map_err(|_| full("inodes"))?;
        if ino >= self.params.inodes {
            return Err(full("inode table"));
        }
        self.link(dir, name, ino, ftype)?;
        self.nodes.push(node);
        Ok(ino)
    }

    /// Adds a directory `name` in `dir`.
    pub fn mkdir(&mut self, dir: u64, name: &[u8], mode: u32) -> Result<u64, Error> {
        let node = Node::empty_dir(0o040_000 | (mode & 0o7777), dir);
        self.add(dir, name, node, 2)
    }

    /// Adds a regular file.
    pub fn add_file(
        &mut self,
        dir: u64,
        name: &[u8],
        data: Vec<u8>,
        sparse: Sparse,
        placement: Placement,
    ) -> Result<u64, Error> {
        self.add_file_from(dir, name, Box::new(data), sparse, placement)
    }

    /// Adds a regular file whose bytes are read from `data` while the image is written.
    pub fn add_file_from(
        &mut self,
        dir: u64,
        name: &[u8],
        data: Box<dyn Content>,
        sparse: Sparse,
        placement: Placement,
    ) -> Result<u64, Error> {
        let kind = Kind::File {
            data,
            sparse,
            placement,
        };
        self.add(dir, name, Node::new(kind, 0o100_644, 0), 1)
    }

    /// Adds a symbolic link.
    pub fn add_symlink(&mut self, dir: u64, name: &[u8], target: &[u8]) -> Result<u64, Error> {
        let kind = Kind::Symlink {
            target: target.to_vec(),
        };
        self.add(dir, name, Node::new(kind, 0o120_777, 0), 7)
    }

    /// Names the existing file or symlink `ino` again, as `name` in `dir` (a hard link:
    /// one inode, `nlink` counting its names). Directories cannot be linked.
    pub fn add_link(&mut self, dir: u64, name: &[u8], ino: u64) -> Result<(), Error> {
        let ftype = match &self.nodes.get(usize_of(ino)).ok_or(invalid("inode"))?.kind {
            Kind::File { .. } => 1,
            Kind::Symlink { .. } => 7,
            Kind::Dir { .. } => return Err(invalid("hard link to a directory")),
        };
        if ino == 0 {
            return Err(invalid("inode"));
        }
        self.link(dir, name, ino, ftype)?;
        let n = self.node_mut(ino)?;
        n.links = n.links.checked_add(1).ok_or(full("links"))?;
        Ok(())
    }

    /// Sets owner, permission bits and mtime of `ino`.
    pub fn set_meta(
        &mut self,
        ino: u64,
        perm: u32,
        uid: u32,
        gid: u32,
        mtime_ns: u64,
    ) -> Result<(), Error> {
        let n = self.node_mut(ino)?;
        n.mode = (n.mode & 0o170_000) | (perm & 0o7777);
        n.uid = uid;
        n.gid = gid;
        n.mtime_ns = mtime_ns;
        Ok(())
    }

    /// Adds an extended attribute (key with namespace, ≤ 64 bytes; value ≤ 256 bytes;
    /// at most 12 per inode).
    pub fn set_xattr(&mut self, ino: u64, key: &[u8], value: &[u8]) -> Result<(), Error> {
        if key.is_empty()
            || key.len() > 64
            || key.contains(&0)
            || !key.contains(&b'.')
            || value.len() > 256
        {
            return Err(invalid("xattr"));
        }
        let n = self.node_mut(ino)?;
        if let Some(e) = n.xattrs.iter_mut().find(|(k, _)| k == key) {
            e.1 = value.to_vec();
            return Ok(());
        }
        if n.xattrs.len() >= XATTRS_PER_BLOCK {
            return Err(full("xattr block"));
        }
        n.xattrs.push((key.to_vec(), value.to_vec()));
        Ok(())
    }
}
