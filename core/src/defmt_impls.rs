//! `defmt::Format` for the views whose fields are raw on-disk structures (feature
//! `defmt`): each prints what a log line needs, not every byte. Plain types derive it
//! where they are defined.

use defmt::{write, Format, Formatter};

use crate::cetrafs;
use crate::tet;

impl Format for tet::Coords {
    fn format(&self, f: Formatter<'_>) {
        write!(f, "{}", self.as_slice());
    }
}

impl Format for tet::Superblock {
    fn format(&self, f: Formatter<'_>) {
        write!(
            f,
            "TETR {{ datasets: {=u32}, flags: {=u32:#x}, index: {=u64} +{=u64} }}",
            self.dataset_count(),
            self.flags(),
            self.chunk_index_offset(),
            self.chunk_index_length()
        );
    }
}

impl Format for tet::Dataset<'_> {
    fn format(&self, f: Formatter<'_>) {
        write!(
            f,
            "dataset {=u32} {=str}: {}, {=u64} elements in {=u64} chunks",
            self.id().0,
            self.name(),
            self.dtype(),
            self.element_count(),
            self.grid_cells()
        );
    }
}

impl Format for cetrafs::Superblock {
    fn format(&self, f: Formatter<'_>) {
        write!(
            f,
            "CTFS {{ blocks: {=u64}, zone groups: {=u32}, block groups: {=u32}, nodes: {=u32}, inodes: {=u64}, read-only: {=bool} }}",
            self.total_blocks(),
            self.zone_group_count(),
            self.block_group_count(),
            self.node_capacity(),
            self.inode_count(),
            self.read_only()
        );
    }
}

impl Format for cetrafs::Inode {
    fn format(&self, f: Formatter<'_>) {
        write!(
            f,
            "inode {=u64} {{ mode: {=u32:o}, size: {=u64}, tree depth: {=u16} }}",
            self.ino(),
            self.raw().mode.get(),
            self.size(),
            self.depth()
        );
    }
}

impl Format for cetrafs::DirEntry<'_> {
    fn format(&self, f: Formatter<'_>) {
        write!(
            f,
            "{=[u8]:a} -> inode {=u64} ({})",
            self.name(),
            self.inode,
            self.file_type
        );
    }
}

impl Format for cetrafs::Xattr<'_> {
    fn format(&self, f: Formatter<'_>) {
        write!(f, "{=[u8]:a} = {=[u8]:a}", self.key(), self.value());
    }
}
