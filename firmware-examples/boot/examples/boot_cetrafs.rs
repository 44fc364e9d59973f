//! `boot_cetrafs`: what a bootloader does before it jumps. The cetrafs image sits in
//! flash that a driver reads through `embedded-storage`; the program mounts it, lays
//! the node journals over it (a node that crashed after committing leaves blocks there
//! that the disk does not have yet), resolves `/boot/kernel.img`, streams it through
//! CRC-32C with one 4 KiB block buffer and no allocator, and compares the result with
//! the `user.crc32c` xattr stored beside it. It does that for an image with a clean
//! journal (kernel v1) and for the same image after a crash that left a committed,
//! unreplayed transaction updating the kernel to v2, which is what must be read.
//!
//! Budget: 16 KiB of flash and 8 KiB of RAM (`boot/memory.x`; the link fails beyond),
//! which the core's read path meets by reporting one-byte
//! [`Fault`](tet_core::Fault)s (`error-detail` builds it with full errors, in 24 KiB).
//! No `core::fmt`: numbers are printed by `tet-fw-support`, which keeps the formatting
//! machinery (several KiB) out of the binary.
#![no_std]
#![no_main]

use core::ops::ControlFlow;

use cortex_m_rt::entry;
use tet_core::block::{Block, BlockDevice, FlashDevice, BLOCK_SIZE};
use tet_core::cetrafs::{Committed, Fs, Overlay, OverlayDevice};
use tet_core::checksum::Crc32c;
use tet_core::{Error, ErrorKind};
use tet_fw_support::{exit, hex, out, out_dec as dec, paint_stack, report_stack};

macro_rules! image {
    ($name:ident, $file:literal) => {
        #[link_section = ".image"]
        static $name: [u8; include_bytes!(concat!(env!("OUT_DIR"), "/", $file)).len()] =
            *include_bytes!(concat!(env!("OUT_DIR"), "/", $file));
    };
}
image!(CLEAN, "boot.img");
image!(DIRTY_BLOCKS, "dirty.blocks");
/// The blocks `DIRTY_BLOCKS` replace, u32 little-endian each.
static DIRTY_LBAS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/dirty.lbas"));

/// The largest kernel this bootloader loads (its load region).
const MAX_KERNEL: u64 = 1 << 20;

/// Journal slots the overlay can hold: more committed slots than this refuse to boot
/// (`BufferTooSmall`), they are never silently ignored.
const OVERLAY_SLOTS: usize = 4;

/// Memory-mapped flash presented as a flash driver presents it. `patch` emulates a
/// second partition: the blocks it names read from `blocks` instead (a second whole
/// image would not fit the LM3S6965's flash).
struct MappedFlash {
    base: &'static [u8],
    lbas: &'static [u8],
    blocks: &'static [u8],
}

impl embedded_storage::ReadStorage for MappedFlash {
    type Error = ();

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), ()> {
        let at = usize::try_from(offset).map_err(|_| ())?;
        let (lba, within) = (at / BLOCK_SIZE, at % BLOCK_SIZE);
        let patched = self
            .lbas
            .chunks_exact(4)
            .position(|l| usize::try_from(u32::from_le_bytes([l[0], l[1], l[2], l[3]])) == Ok(lba));
        // The reader asks for whole blocks or their prefixes, never across a block
        // boundary, so one block's source serves the whole request.
        let src = match patched {
            Some(k) => self.blocks.get(k * BLOCK_SIZE + within..),
            None => self.base.get(at..),
        };
        let src = src.ok_or(())?;
        if src.len() < bytes.len() {
            return Err(());
        }
        for (d, s) in bytes.iter_mut().zip(src) {
            *d = *s;
        }
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.base.len()
    }
}

#[entry]
fn main() -> ! {
    // `static mut` in the entry function: safe, unique references (cortex-m-rt), kept
    // in .bss where the linker counts them against the 8 KiB.
    static mut BUF: Block = [0; BLOCK_SIZE];
    static mut TABLE: [Committed; OVERLAY_SLOTS] = [Committed::EMPTY; OVERLAY_SLOTS];
    paint_stack();
    let clean = MappedFlash {
        base: &CLEAN,
        lbas: &[],
        blocks: &[],
    };
    let dirty = MappedFlash {
        base: &CLEAN,
        lbas: DIRTY_LBAS,
        blocks: &DIRTY_BLOCKS,
    };
    let a = boot(b"clean image", clean, BUF, TABLE, b'1');
    let b = boot(b"after a crash", dirty, BUF, TABLE, b'2');
    report_stack();
    exit(a && b)
}

/// Mounts `image`, overlays its journals, checks `/boot/kernel.img` against its xattr,
/// and expects the kernel's version line to end in `version`.
fn boot(
    name: &[u8],
    image: MappedFlash,
    buf: &mut Block,
    table: &mut [Committed],
    version: u8,
) -> bool {
    out(&[name, b": "]);
    let flash = FlashDevice::new(image, 0);
    match check(&flash, buf, table, version) {
        Ok(ok) => ok,
        Err(e) => {
            report(e);
            false
        }
    }
}

/// What a failure reports: by default a [`Fault`](tet_core::Fault), only whether the image is truncated,
/// corrupt, incompatible or unreadable, which is all a bootloader acts on (every check
/// still runs); with the `error-detail` feature the core's [`Error`], naming the field
/// and its offset, for 8 KiB more flash.
#[cfg(not(feature = "error-detail"))]
type Failure = tet_core::Fault;
#[cfg(feature = "error-detail")]
type Failure = Error;

#[cfg(not(feature = "error-detail"))]
fn report(tet_core::Fault(category): tet_core::Fault) {
    out(&[b"error: image ", category.name().as_bytes(), b"\n"]);
}

#[cfg(feature = "error-detail")]
fn report(e: Error) {
    // Image offsets fit 32 bits here (the image is in a 256 KiB part).
    let at = u32::try_from(e.offset).unwrap_or(u32::MAX);
    out(&[
        b"error: ",
        e.what.as_bytes(),
        b" at byte 0x",
        &hex(at),
        b"\n",
    ]);
}

/// The reader, as this bootloader uses it: through `&dyn BlockDevice`, so that one copy
/// serves the raw flash and the journal overlay (an `Fs<D>` per device type would be
/// two), reporting [`Failure`]s.
type Reader<'d> = Fs<&'d dyn BlockDevice, Failure>;

fn check(
    flash: &dyn BlockDevice,
    buf: &mut Block,
    table: &mut [Committed],
    version: u8,
) -> Result<bool, Failure> {
    let raw = Reader::open_for_read_as(flash, buf)?;
    let overlay = journals(&raw, buf, table)?;
    let through = OverlayDevice::new(flash, &overlay);
    let fs = Reader::open_for_read_as(&through, buf)?;
    let k = kernel(&fs, buf)?;
    out(&[b"  /boot/kernel.img: "]);
    dec(k.size);
    out(&[b" bytes, "]);
    line(&k.head);
    out(&[
        b"  crc32c ",
        &hex(k.crc),
        b", xattr user.crc32c ",
        &hex(k.expected),
    ]);
    let ok = k.crc == k.expected && k.head.get(..8) == Some(b"KERNEL v") && k.head[8] == version;
    out(&[if ok { b": ok\n" } else { b": MISMATCH\n" }]);
    Ok(ok)
}

/// Gathers what the node journals hold that the disk does not have yet. Its own frame
/// (not inlined), gone from the stack before the kernel is read through the overlay.
#[inline(never)]
fn journals<'t>(
    fs: &Reader<'_>,
    buf: &mut Block,
    table: &'t mut [Committed],
) -> Result<Overlay<'t>, Failure> {
    let overlay = fs.overlay(table, buf)?;
    let overlaid = overlay.entries().len();
    if overlaid == 0 {
        out(&[b"mounted, journals clean\n"]);
    } else {
        out(&[b"mounted, "]);
        dec(overlaid as u32);
        out(&[b" block(s) read from a crashed node's journal\n"]);
        // What the disk holds without the journal: the previous kernel.
        let raw = kernel(fs, buf)?;
        out(&[b"  on disk without the journal: "]);
        line(&raw.head);
    }
    Ok(overlay)
}

struct Kernel {
    /// At most `MAX_KERNEL`.
    size: u32,
    head: [u8; 16],
    crc: u32,
    expected: u32,
}

/// Resolves the kernel, reads its expected checksum, and streams it.
fn kernel(fs: &Reader<'_>, buf: &mut Block) -> Result<Kernel, Failure> {
    let ino = fs.resolve(b"/boot/kernel.img", buf)?;
    // A kernel larger than the RAM it is loaded into is refused before it is read (the
    // stream's work follows the file size, holes included).
    if ino.size() > MAX_KERNEL {
        let e = Error::new(
            ErrorKind::OutOfRange {
                value: ino.size(),
                max: MAX_KERNEL,
            },
            "inode.size (kernel larger than its load region)",
            // The size field, byte 32 of the inode's block.
            ino.lba()
                .saturating_mul(BLOCK_SIZE as u64)
                .saturating_add(32),
        );
        // A `Fault` by default; the same `Error` with `error-detail`.
        #[allow(clippy::useless_conversion)]
        return Err(e.into());
    }
    let mut digits = [0u8; 8];
    let n = fs.xattr(&ino, b"user.crc32c", &mut digits, buf)?;
    let expected = parse_hex(digits.get(..n).unwrap_or(&[])).unwrap_or(0);
    let mut crc = Crc32c::new();
    let mut head = [0u8; 16];
    let mut first = true;
    let _whole = fs.stream(&ino, buf, |bytes| {
        if first {
            for (d, s) in head.iter_mut().zip(bytes) {
                *d = *s;
            }
            first = false;
        }
        crc.update(bytes);
        ControlFlow::Continue(())
    })?;
    Ok(Kernel {
        size: u32::try_from(ino.size()).unwrap_or(u32::MAX),
        head,
        crc: crc.finish(),
        expected,
    })
}

fn parse_hex(digits: &[u8]) -> Option<u32> {
    if digits.len() != 8 {
        return None;
    }
    digits.iter().try_fold(0u32, |acc, d| {
        let v = char::from(*d).to_digit(16)?;
        Some(acc << 4 | v)
    })
}

/// The first line of `head`.
fn line(head: &[u8]) {
    let end = head.iter().position(|b| *b == b'\n').unwrap_or(head.len());
    out(&[head.get(..end).unwrap_or(&[]), b"\n"]);
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    out(&[b"panic\n"]);
    exit(false)
}
