//! What every firmware example shares, with no `core::fmt` (its machinery costs
//! several KiB of flash) and no panic handler (each binary picks its own): output and
//! the exit status over semihosting, and the stack high-water mark measured by painting.
#![no_std]

use cortex_m_semihosting::{debug, hio};

/// The device part of the vector table. None of the examples enables an interrupt, so it
/// holds one vector, the fewest cortex-m-rt's linker script accepts; without its
/// `device` feature cortex-m-rt would reserve 240 of them (960 bytes of flash).
#[link_section = ".vector_table.interrupts"]
#[no_mangle]
#[used]
static __INTERRUPTS: [unsafe extern "C" fn(); 1] = [DefaultHandler];

extern "C" {
    /// cortex-m-rt's handler for interrupts nobody claimed.
    fn DefaultHandler();
}

/// Writes `parts` to the host's standard output.
pub fn out(parts: &[&[u8]]) {
    if let Ok(mut s) = hio::hstdout() {
        for p in parts {
            let _ = s.write_all(p);
        }
    }
}

/// Writes `parts` to the host's standard error (measurements that vary between builds,
/// kept out of the compared output).
pub fn err(parts: &[&[u8]]) {
    if let Ok(mut s) = hio::hstderr() {
        for p in parts {
            let _ = s.write_all(p);
        }
    }
}

/// `v` in decimal, into `buf` (a `u32` has at most 10 digits); returns the digits.
/// (`u32`: 64-bit division would pull in nearly 1 KiB of `compiler_builtins`.)
pub fn dec(mut v: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    while let Some(k) = i.checked_sub(1) {
        i = k;
        if let Some(d) = buf.get_mut(k) {
            *d = b'0' + (v % 10) as u8;
        }
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.get(i..).unwrap_or(&[])
}

/// `v` as 8 lowercase hex digits.
pub fn hex(v: u32) -> [u8; 8] {
    let mut digits = [0u8; 8];
    for (k, d) in digits.iter_mut().enumerate() {
        let nibble = (v >> (28 - 4 * k)) & 0xF;
        *d = b"0123456789abcdef"[nibble as usize];
    }
    digits
}

/// Prints `v` in decimal to standard output.
pub fn out_dec(v: u32) {
    out(&[dec(v, &mut [0; 10])]);
}

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

const PAINT: u32 = 0xA5A5_5A5A;

extern "C" {
    // cortex-m-rt: the end of the statics (where the heap would start) and the top of
    // the stack, which grows down towards it.
    static __sheap: u32;
    static _stack_start: u32;
}

/// Paints the unused stack (from the end of the statics to a little below the current
/// stack pointer) so that [`stack_used`] can find the deepest point the stack reached.
/// Call first thing in `main`.
#[inline(never)]
pub fn paint_stack() {
    let bottom = core::ptr::addr_of!(__sheap) as usize;
    let sp = cortex_m::register::msp::read() as usize;
    let mut p = bottom;
    // Leave 64 bytes under the stack pointer for this function's own frame.
    while p + 4 <= sp.saturating_sub(64) {
        // SAFETY: [bottom, sp - 64) is RAM no one uses yet: above the statics, below
        // the live stack.
        unsafe { core::ptr::write_volatile(p as *mut u32, PAINT) };
        p += 4;
    }
}

/// Bytes of stack used since [`paint_stack`]: from the top of the stack down to the
/// lowest word no longer holding the paint.
pub fn stack_used() -> usize {
    let bottom = core::ptr::addr_of!(__sheap) as usize;
    let top = core::ptr::addr_of!(_stack_start) as usize;
    let mut p = bottom;
    // SAFETY: reads of RAM between the statics and the stack top.
    while p < top && unsafe { core::ptr::read_volatile(p as *const u32) } == PAINT {
        p += 4;
    }
    top - p
}

/// Reports the stack high-water mark on standard error, as `stack: N bytes`.
pub fn report_stack() {
    err(&[
        b"stack: ",
        dec(stack_used() as u32, &mut [0; 10]),
        b" bytes\n",
    ]);
}
