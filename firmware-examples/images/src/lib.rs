//! What the firmware examples' build scripts share (runs on the host).

use std::path::{Path, PathBuf};

use tet_alloc::cetrafs::mkfs::{ImageBuilder, Params};
use tet_core::block::BLOCK_SIZE;

/// The build script's `OUT_DIR`, with `layout` written there as `memory.x` (which
/// cortex-m-rt's `link.x` includes) and put on the linker's search path. The layout is
/// not left in the package directory: `ld` would find it in the working directory
/// first, for every package of the workspace.
pub fn out_dir_with_layout(layout: &str) -> PathBuf {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out.join("memory.x"), layout).expect("memory.x");
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=build.rs");
    out
}

/// The layout file `name` of the package, read (and watched for changes).
pub fn layout(name: &str) -> String {
    println!("cargo:rerun-if-changed={name}");
    std::fs::read_to_string(Path::new(name)).expect("layout")
}

/// A builder for the smallest cetrafs image with one zone group, one node, 16 inodes,
/// `bg_size_blocks`-block groups and a `journal_blocks`-block journal, and `spare`
/// blocks beyond that minimum for what the example puts in it.
pub fn small_image(bg_size_blocks: u64, journal_blocks: u64, spare: u64) -> ImageBuilder {
    let mut p = Params {
        bg_size_blocks,
        zone_groups: 1,
        nodes: 1,
        inodes: 16,
        journal_blocks,
        pending_slots: 8,
        ..Params::default()
    };
    let min = ImageBuilder::min_size_bytes(&p).expect("a valid geometry");
    p.size_bytes = min + spare * BLOCK_SIZE as u64;
    ImageBuilder::new(p)
}
