//! CRC-32C as cetrafs uses it: `~crc32c(~0, buf)` over a structure whose own checksum
//! field reads as zero, stored as a `u64`. The lookup table size is a build choice
//! (crate features `crc-no-table`, default 1 KiB, `crc-table-16k`); `crc-hw` uses the
//! CPU's instructions instead (see `hw` below).

use crc::{Crc, CRC_32_ISCSI};

#[cfg(feature = "crc-no-table")]
static CRC: Crc<u32, crc::NoTable> = Crc::<u32, crc::NoTable>::new(&CRC_32_ISCSI);
#[cfg(all(not(feature = "crc-no-table"), feature = "crc-table-16k"))]
static CRC: Crc<u32, crc::Table<16>> = Crc::<u32, crc::Table<16>>::new(&CRC_32_ISCSI);
#[cfg(all(not(feature = "crc-no-table"), not(feature = "crc-table-16k")))]
static CRC: Crc<u32, crc::Table<1>> = Crc::<u32, crc::Table<1>>::new(&CRC_32_ISCSI);

/// Hardware CRC-32C for host builds, from whichever of two crates measured faster for
/// the CPU and the length (docs/benchmarks.md, "`.tet` chunk checksums"):
///
/// * `crc-fast` where the CPU has AVX-512VL and VPCLMULQDQ (x86-64 only): its folding
///   kernel (carry-less multiplies fused with `crc32`) takes about twice the `crc32c`
///   crate's speed from 2 KiB up, and one-shot it is 10–20 % faster below that too;
/// * the `crc32c` crate (three interleaved `crc32` streams) everywhere else: on x86-64
///   without AVX-512 crc-fast's 128-bit kernel is the slower of the two, and on AArch64
///   nothing has been measured, so nothing changed there.
///
/// Both give the same CRC (the tests compare them with the `crc` tables).
#[cfg(feature = "crc-hw")]
mod hw {
    /// Pieces shorter than this are appended by the `crc32c` crate even where the wide
    /// kernel is there: crc-fast resumes from a state only through a `Digest`, whose
    /// set-up eats what its kernel would save on a short piece.
    #[cfg(target_arch = "x86_64")]
    const APPEND_WIDE_FROM: usize = 256;

    /// Whether crc-fast runs its AVX-512 VPCLMULQDQ kernel here (the CPUID bits it checks
    /// itself; the standard library caches them, so this is a few loads).
    #[cfg(target_arch = "x86_64")]
    fn wide() -> bool {
        extern crate std;
        std::is_x86_feature_detected!("vpclmulqdq")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("pclmulqdq")
            && std::is_x86_feature_detected!("sse4.2")
    }

    /// CRC-32C of `bytes`.
    pub(super) fn crc32c(bytes: &[u8]) -> u32 {
        #[cfg(target_arch = "x86_64")]
        if wide() {
            return crc_fast::crc32_iscsi(bytes);
        }
        crc32c::crc32c(bytes)
    }

    /// CRC-32C of the bytes that gave `prev` followed by `bytes`.
    pub(super) fn append(prev: u32, bytes: &[u8]) -> u32 {
        #[cfg(target_arch = "x86_64")]
        if bytes.len() >= APPEND_WIDE_FROM && wide() {
            // A crc-fast state is the register before the final complement.
            let mut d = crc_fast::Digest::new_with_init_state(
                crc_fast::CrcAlgorithm::Crc32Iscsi,
                u64::from(!prev),
            );
            d.update(bytes);
            // `finalize` is a u64 for every width; a CRC-32 fills the low half.
            let [a, b, c, e, ..] = d.finalize().to_le_bytes();
            return u32::from_le_bytes([a, b, c, e]);
        }
        crc32c::crc32c_append(prev, bytes)
    }
}

/// CRC-32C of `buf`.
#[cfg(not(feature = "crc-hw"))]
pub fn crc32c(buf: &[u8]) -> u32 {
    CRC.checksum(buf)
}

/// CRC-32C of `buf` (hardware where the CPU has it).
#[cfg(feature = "crc-hw")]
pub fn crc32c(buf: &[u8]) -> u32 {
    hw::crc32c(buf)
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
            self.state = hw::append(self.state, bytes);
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
        let c = hw::append(hw::crc32c(head), zeros);
        u64::from(hw::append(c, tail))
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

    /// A deterministic xorshift, so a failing case can be replayed.
    fn next(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..len).map(|_| next(&mut x) as u8).collect()
    }

    /// The path the features chose (under `crc-hw` on a CPU with AVX-512 VPCLMULQDQ,
    /// crc-fast, and the `crc32c` crate for appends under 256 bytes), whole, skipping a
    /// field, and streamed in random pieces, against the `crc` tables: random lengths
    /// 0..=5000 from every start modulo 64 (the kernels align their loads and finish the
    /// tail apart, so a misstep there shows only at some lengths and starts).
    #[test]
    fn random_lengths_and_starts_match_software() {
        let data = noise(5000 + 64, 1);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for case in 0..3000 {
            let start = (next(&mut x) % 64) as usize;
            let len = (next(&mut x) % 5001) as usize;
            let b = &data[start..start + len];
            let want = crc32c_software(b);
            assert_eq!(crc32c(b), want, "case {case}: start {start}, length {len}");

            let field = (next(&mut x) % (len as u64 + 9)) as usize;
            let mut zeroed = b.to_vec();
            let end = (field + 8).min(len);
            zeroed[field.min(end)..end].fill(0);
            assert_eq!(
                crc32c_skipping(b, field),
                u64::from(crc32c_software(&zeroed)),
                "case {case}: start {start}, length {len}, field {field}"
            );

            let mut c = Crc32c::new();
            let mut rest = b;
            while !rest.is_empty() {
                // Pieces either side of the 256-byte switch, and empty ones.
                let n = (next(&mut x) % 700) as usize;
                let (piece, tail) = rest.split_at(n.min(rest.len()));
                c.update(piece);
                rest = tail;
            }
            assert_eq!(c.finish(), want, "case {case}: start {start}, length {len}");
        }
    }

    /// The streaming form split into two pieces at every point, from aligned and
    /// unaligned starts, against the tables and the one-shot form.
    #[test]
    fn streaming_split_at_every_point() {
        let data = noise(4200, 2);
        for (start, len) in [
            (0, 255),
            (1, 256),
            (3, 257),
            (0, 1024),
            (5, 4096),
            (7, 4103),
        ] {
            let b = &data[start..start + len];
            let want = crc32c_software(b);
            assert_eq!(crc32c(b), want, "start {start}, length {len}");
            for split in 0..=len {
                let mut c = Crc32c::new();
                c.update(&b[..split]);
                c.update(&b[split..]);
                assert_eq!(
                    c.finish(),
                    want,
                    "start {start}, length {len}, split {split}"
                );
            }
        }
    }
}
