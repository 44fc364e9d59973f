//! `defmt_log`: the core's views, findings and errors logged with defmt (feature
//! `defmt` of `tet-core`) over semihosting, and decoded on the host by `defmt-print`
//! (`run-defmt.sh`). It verifies a `.tet` file cut short and a cetrafs image whose
//! block group miscounts its free blocks, and logs what the core reports: the views
//! (superblocks, datasets, inodes), every finding, the summaries and an error.
#![no_std]
#![no_main]

use core::ops::ControlFlow;

use cortex_m_rt::entry;
use defmt_semihosting as _;
use tet_core::block::{Block, BlockDevice, MemDevice, BLOCK_SIZE};
use tet_core::cetrafs::{check, Buffers, Committed, Fs};
use tet_core::tet::{self, TetFile, VerifyOptions};
use tet_fw_support::{exit, paint_stack, report_stack};

static TET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cut.tet"));
static IMG: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/counts.img"));

#[entry]
fn main() -> ! {
    static mut BUFS: Buffers = Buffers::new();
    static mut BITMAP: Block = [0; BLOCK_SIZE];
    static mut TABLE: [Committed; 4] = [Committed::EMPTY; 4];
    paint_stack();
    let tet_errors = tet_file();
    let cfs_errors = cetrafs(BUFS, BITMAP, TABLE);
    // Each image reports exactly the damage it was given: the cut payload (the bytes
    // left of it are then unreferenced, a warning), and the free count the group and its
    // zone disagree on.
    report_stack();
    exit(tet_errors == 1 && cfs_errors == 2)
}

fn tet_file() -> u32 {
    let mut scratch = [0u64; 64];
    let mut errors = 0u32;
    let summary = tet::verify(
        TET,
        VerifyOptions {
            scratch: &mut scratch,
            metadata_spill: None,
        },
        &mut |f: &tet::Finding| {
            if f.severity() == tet::Severity::Error {
                errors += 1;
            }
            defmt::warn!("cut.tet: {}", f);
        },
    );
    defmt::info!("cut.tet: {}", summary);
    if let Some(file) = TetFile::parse(TET, &mut |_: &tet::Finding| {}) {
        defmt::info!("cut.tet: {}", file.superblock());
        for ds in file.datasets().flatten() {
            defmt::info!("cut.tet: {}", ds);
        }
    }
    if let Err(e) = TetFile::open(TET) {
        defmt::error!("cut.tet does not open: {}", e);
    }
    errors
}

fn cetrafs(bufs: &mut Buffers, bitmap: &mut Block, table: &mut [Committed]) -> u32 {
    let dev = MemDevice::new(IMG);
    let fs = match Fs::open(&dev as &dyn BlockDevice, &mut bufs.data) {
        Ok(fs) => fs,
        Err(e) => {
            defmt::error!("counts.img does not mount: {}", e);
            return u32::MAX;
        }
    };
    defmt::info!("counts.img: {}", fs.superblock());
    let mut errors = 0u32;
    let summary = check::verify(&fs, bufs, bitmap, table, &mut |f: &check::Finding| {
        if f.severity() == check::Severity::Error {
            errors += 1;
        }
        defmt::warn!("counts.img: {}", f);
    });
    defmt::info!("counts.img: {}", summary);
    if let Ok(root) = fs.resolve(b"/", bufs) {
        defmt::info!("counts.img: {}", root);
        let _ = fs.read_dir(&root, bufs, |e| {
            defmt::info!("counts.img: /{}", e);
            ControlFlow::Continue(())
        });
    }
    if let Err(e) = fs.resolve(b"/missing", bufs) {
        defmt::error!("counts.img: /missing: {}", e);
    }
    errors
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    defmt::error!("panic");
    exit(false)
}
