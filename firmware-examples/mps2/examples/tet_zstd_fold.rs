//! `tet_zstd_fold`: a `.tet` file with zstd chunks, folded on a microcontroller with a
//! small heap. The fold engine of `tet-alloc` (plan, decode, fold, finish) computes
//! the mean and standard deviation of a compressed `f32` dataset; ruzstd decodes each
//! chunk under a memory budget (a chunk that needs more is refused, not attempted);
//! a counting allocator around `embedded-alloc` reports the heap's high-water mark.
//! Runs on QEMU's MPS2-AN386 (the LM3S6965's 64 KiB of RAM would leave little heap).
#![no_std]
#![no_main]

extern crate alloc;

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicUsize, Ordering};

use cortex_m_rt::entry;
use embedded_alloc::LlffHeap;
use tet_alloc::tet::decode::{ChunkDecoder, Ruzstd};
use tet_alloc::tet::query::{execute, plan, Axes, Operation};
use tet_core::tet::fold::{Reduce, Value};
use tet_core::tet::{Codec, TetFile};
use tet_fw_support::{exit, out, out_dec, paint_stack, report_stack};

static TET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/series.tet"));

/// The heap: 64 KiB of RAM.
const HEAP_BYTES: usize = 64 * 1024;
/// What one chunk's decode may take (output plus ruzstd's working memory).
const DECODE_BUDGET: u64 = 48 * 1024;

/// `embedded-alloc`'s heap, counting the bytes in use and their peak.
struct Counting {
    heap: LlffHeap,
    used: AtomicUsize,
    peak: AtomicUsize,
}

// SAFETY: every call is forwarded to the heap; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { self.heap.alloc(layout) };
        if !p.is_null() {
            let now = self.used.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { self.heap.dealloc(ptr, layout) };
        self.used.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static HEAP: Counting = Counting {
    heap: LlffHeap::empty(),
    used: AtomicUsize::new(0),
    peak: AtomicUsize::new(0),
};

#[entry]
fn main() -> ! {
    static mut ARENA: [u8; HEAP_BYTES] = [0; HEAP_BYTES];
    // SAFETY: called once, before any allocation, with memory no one else uses.
    unsafe { HEAP.heap.init(ARENA.as_mut_ptr() as usize, HEAP_BYTES) };
    paint_stack();
    let ok = run();
    report_stack();
    out(&[b"heap high-water mark: "]);
    out_dec(HEAP.peak.load(Ordering::Relaxed) as u32);
    out(&[b" bytes of "]);
    out_dec(HEAP_BYTES as u32);
    out(&[b"\n"]);
    exit(ok)
}

fn run() -> bool {
    let Ok(file) = TetFile::open(TET) else {
        out(&[b"series.tet does not open\n"]);
        return false;
    };
    let Ok(ds) = file.dataset("temperature") else {
        return false;
    };
    let zstd = file
        .rows()
        .iter()
        .filter(|r| Codec::from_wire(r.codec.get()) == Some(Codec::Zstd))
        .count();
    out(&[b"temperature: "]);
    out_dec(ds.element_count() as u32);
    out(&[b" f32 values in "]);
    out_dec(zstd as u32);
    out(&[b" zstd chunks\n"]);
    let Ok(p) = plan(&file, ds, &[]) else {
        return false;
    };
    let mut dec = ChunkDecoder::new(Ruzstd::new(), DECODE_BUDGET);
    out(&[b"decode budget "]);
    out_dec(DECODE_BUDGET as u32);
    out(&[b" bytes; a chunk needs "]);
    out_dec(dec.memory_needed(16 * 25 * 4) as u32);
    out(&[b"\n"]);
    let Ok(axes) = Axes::new(ds.ndim(), None) else {
        return false;
    };
    let mut ok = true;
    for (name, op, want) in [
        (&b"mean"[..], Reduce::Mean, 26.4_f64),
        (b"std", Reduce::Std(0), 4.726_521),
    ] {
        match execute(&file, &p, Operation::Reduce(op), &axes, &mut dec) {
            Ok(o) => match o.values.first() {
                Some(Value::F64(v)) => {
                    out(&[name, b": "]);
                    fixed4(*v);
                    let close = (v - want).abs() < 1e-3;
                    out(&[if close { b"\n" } else { b" (unexpected)\n" }]);
                    ok &= close;
                }
                _ => ok = false,
            },
            Err(_) => {
                out(&[name, b": the fold failed\n"]);
                ok = false;
            }
        }
    }
    // The same fold with a budget below what a chunk needs is refused before decoding.
    let mut small = ChunkDecoder::new(Ruzstd::new(), 1024);
    let refused = execute(
        &file,
        &p,
        Operation::Reduce(Reduce::Mean),
        &axes,
        &mut small,
    )
    .is_err();
    out(&[if refused {
        b"with a 1024-byte budget: refused\n"
    } else {
        b"with a 1024-byte budget: NOT refused\n"
    }]);
    ok && refused
}

/// `v` with four decimals (no `core::fmt`).
fn fixed4(v: f64) {
    if v < 0.0 {
        out(&[b"-"]);
    }
    let scaled = (v.abs() * 10_000.0 + 0.5) as u64;
    out_dec((scaled / 10_000) as u32);
    out(&[b"."]);
    let frac = (scaled % 10_000) as u32;
    let mut buf = [b'0'; 4];
    let mut f = frac;
    for d in buf.iter_mut().rev() {
        *d = b'0' + (f % 10) as u8;
        f /= 10;
    }
    out(&[&buf]);
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    out(&[b"panic\n"]);
    exit(false)
}
