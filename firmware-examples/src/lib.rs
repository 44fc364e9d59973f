//! What the LM3S6965 examples share: a panic handler that reports through semihosting
//! (with `core::fmt`; these examples are not size-constrained) and exits non-zero, and
//! the exit and stack measurement of `tet-fw-support`.
#![no_std]

use cortex_m_semihosting::hprintln;
pub use tet_fw_support::{exit, paint_stack, report_stack};

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("panic: {}", info);
    exit(false)
}
