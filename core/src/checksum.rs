//! CRC-32C as cetrafs uses it: `~crc32c(~0, buf)` over a structure whose own checksum
//! field reads as zero, stored as a `u64`. The lookup table size is a build choice
//! (crate features `crc-no-table`, default 1 KiB, `crc-table-16k`).

use crc::{Crc, CRC_32_ISCSI};

#[cfg(feature = "crc-no-table")]
static CRC: Crc<u32, crc::NoTable> = Crc::<u32, crc::NoTable>::new(&CRC_32_ISCSI);
#[cfg(all(not(feature = "crc-no-table"), feature = "crc-table-16k"))]
static CRC: Crc<u32, crc::Table<16>> = Crc::<u32, crc::Table<16>>::new(&CRC_32_ISCSI);
#[cfg(all(not(feature = "crc-no-table"), not(feature = "crc-table-16k")))]
static CRC: Crc<u32, crc::Table<1>> = Crc::<u32, crc::Table<1>>::new(&CRC_32_ISCSI);

/// CRC-32C of `buf`.
#[cfg(not(feature = "crc-hw"))]
pub fn crc32c(buf: &[u8]) -> u32 {
    CRC.checksum(buf)
}

/// CRC-32C of `buf` (hardware where the CPU has it).
#[cfg(feature = "crc-hw")]
pub fn crc32c(buf: &[u8]) -> u32 {
    crc32c::crc32c(buf)
}

/// The table implementation, whatever the features (tests compare the two).
pub fn crc32c_software(buf: &[u8]) -> u32 {
    CRC.checksum(buf)
}

/// CRC-32C of bytes that arrive in pieces (a file streamed a block at a time):
/// `update` with each piece in order, then `finish`; the result equals [`crc32c`] of
/// the pieces joined.
#[derive(Clone, Copy, Debug)]
pub struct Crc32c {
    /// The register before the final complement (`!0` before any byte).
    state: u32,
}

impl Crc32c {
    /// Nothing hashed yet.
    pub const fn new() -> Self {
        Crc32c { state: 0 }
    }

    /// Hashes `bytes` after what came before.
    pub fn update(&mut self, bytes: &[u8]) {
        #[cfg(feature = "crc-hw")]
        {
            self.state = crc32c::crc32c_append(self.state, bytes);
        }
        #[cfg(not(feature = "crc-hw"))]
        {
            // Resume the register where the last piece left it: `finish` is the register
            // complemented, and `crc` reflects a custom initial value for this
            // reflected algorithm, so hand it the reflection.
            let mut d = CRC.digest_with_initial((!self.state).reverse_bits());
            d.update(bytes);
            self.state = d.finalize();
        }
    }

    /// The CRC-32C of everything hashed.
    pub const fn finish(&self) -> u32 {
        self.state
    }
}

impl Default for Crc32c {
    fn default() -> Self {
        Crc32c::new()
    }
}

/// CRC-32C of `buf` with the 8 bytes at `field` read as zero (the checksum field itself).
/// A `field` outside `buf` is treated as absent.
pub fn crc32c_skipping(buf: &[u8], field: usize) -> u64 {
    let end = field.saturating_add(8).min(buf.len());
    let start = field.min(end);
    let (head, zeros, tail) = (
        buf.get(..start).unwrap_or(&[]),
        [0u8; 8].get(..end.saturating_sub(start)).unwrap_or(&[]),
        buf.get(end..).unwrap_or(&[]),
    );
    #[cfg(feature = "crc-hw")]
    {
        let c = crc32c::crc32c_append(crc32c::crc32c(head), zeros);
        u64::from(crc32c::crc32c_append(c, tail))
    }
    #[cfg(not(feature = "crc-hw"))]
    {
        let mut d = CRC.digest();
        d.update(head);
        d.update(zeros);
        d.update(tail);
        u64::from(d.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_value_and_skipping() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        let mut b = [7u8; 32];
        let with = crc32c_skipping(&b, 8);
        b[8..16].copy_from_slice(&[0; 8]);
        assert_eq!(with, u64::from(crc32c(&b)));
        b[8..16].copy_from_slice(&with.to_le_bytes());
        assert_eq!(crc32c_skipping(&b, 8), with);
    }

    #[test]
    fn incremental_matches_whole() {
        let data: [u8; 300] = core::array::from_fn(|i| (i * 7 + 3) as u8);
        for split in [0, 1, 9, 150, 299, 300] {
            let mut c = Crc32c::new();
            c.update(&data[..split]);
            c.update(&[]);
            c.update(&data[split..]);
            assert_eq!(c.finish(), crc32c(&data), "split at {split}");
        }
        assert_eq!(Crc32c::new().finish(), crc32c(&[]));
        let mut c = Crc32c::default();
        c.update(b"123456789");
        assert_eq!(c.finish(), 0xE306_9283);
    }
}
