//! What every example shares: a panic handler that reports and exits non-zero through
//! semihosting, and the exit itself.
#![no_std]

use cortex_m_semihosting::{debug, hprintln};

/// Ends the program under QEMU: status 0 when `ok`, 1 otherwise.
pub fn exit(ok: bool) -> ! {
    debug::exit(if ok {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    #[allow(clippy::empty_loop)]
    loop {}
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("panic: {}", info);
    exit(false)
}
