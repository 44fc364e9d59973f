//! What a file or device holds, told from the signatures that `file`, `wipefs` and
//! `mkfs.ext4` look for: so `mkfs` does not format over a filesystem without asking, and
//! a file of neither format is named as what it is.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Bytes read from the start of a target: enough for every signature below (Btrfs keeps
/// its superblock at 64 KiB).
pub const PROBE_LEN: usize = 0x11000;

/// A signature at a fixed offset.
struct Magic {
    at: usize,
    bytes: &'static [u8],
    what: &'static str,
}

/// Checked in order: the first match names the contents.
const MAGICS: &[Magic] = &[
    Magic {
        at: 0,
        bytes: b"CTFS",
        what: "a cetrafs image",
    },
    Magic {
        at: 0,
        bytes: b"TETR",
        what: "a .tet file",
    },
    Magic {
        at: 0,
        bytes: b"\x93NUMPY",
        what: "a NumPy .npy file",
    },
    Magic {
        at: 0,
        bytes: b"PK\x03\x04",
        what: "a zip archive (a NumPy .npz file?)",
    },
    Magic {
        at: 0,
        bytes: b"PK\x05\x06",
        what: "an empty zip archive",
    },
    Magic {
        at: 0,
        bytes: b"\x89HDF\r\n\x1a\n",
        what: "an HDF5 file (NetCDF-4?)",
    },
    Magic {
        at: 0,
        bytes: b"CDF\x01",
        what: "a NetCDF classic file",
    },
    Magic {
        at: 0,
        bytes: b"CDF\x02",
        what: "a NetCDF 64-bit offset file",
    },
    Magic {
        at: 0,
        bytes: b"\x1f\x8b",
        what: "a gzip file",
    },
    Magic {
        at: 0,
        bytes: b"\x28\xb5\x2f\xfd",
        what: "a zstd file",
    },
    Magic {
        at: 0,
        bytes: b"LUKS\xba\xbe",
        what: "a LUKS encrypted volume",
    },
    Magic {
        at: 0,
        bytes: b"XFSB",
        what: "an XFS filesystem",
    },
    Magic {
        at: 1080,
        bytes: b"\x53\xef",
        what: "an ext2/ext3/ext4 filesystem",
    },
    Magic {
        at: 0x10040,
        bytes: b"_BHRfS_M",
        what: "a Btrfs filesystem",
    },
    Magic {
        at: 4086,
        bytes: b"SWAPSPACE2",
        what: "a swap area",
    },
    Magic {
        at: 4086,
        bytes: b"SWAP-SPACE",
        what: "a swap area",
    },
    Magic {
        at: 512,
        bytes: b"EFI PART",
        what: "a GPT partition table",
    },
    Magic {
        at: 54,
        bytes: b"FAT",
        what: "a FAT filesystem",
    },
    Magic {
        at: 82,
        bytes: b"FAT32",
        what: "a FAT filesystem",
    },
    Magic {
        at: 510,
        bytes: b"\x55\xaa",
        what: "an MBR partition table",
    },
];

/// What `head` (the first bytes of a target) holds: a known signature, "data" for any
/// nonzero byte, or `None` when it is empty or all zero.
pub fn describe(head: &[u8]) -> Option<&'static str> {
    let found = MAGICS.iter().find(|m| {
        m.at.checked_add(m.bytes.len())
            .and_then(|end| head.get(m.at..end))
            .is_some_and(|b| b == m.bytes)
    });
    match found {
        Some(m) => Some(m.what),
        None if is_text(head) => Some("a text file"),
        None if head.iter().any(|b| *b != 0) => Some("data (it is not empty)"),
        None => None,
    }
}

/// Whether `head` reads as text: UTF-8 (a character cut at the end of the probe
/// allowed) with no control characters but tabs and line ends.
fn is_text(head: &[u8]) -> bool {
    let valid = match std::str::from_utf8(head) {
        Ok(s) => s,
        Err(e) if e.error_len().is_none() => head
            .get(..e.valid_up_to())
            .and_then(|h| std::str::from_utf8(h).ok())
            .unwrap_or(""),
        Err(_) => return false,
    };
    !valid.is_empty()
        && valid
            .chars()
            .all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t'))
}

/// The first [`PROBE_LEN`] bytes of `file` (fewer when it is shorter).
pub fn head(file: &File) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; PROBE_LEN];
    let mut got = 0usize;
    while let Some(rest) = buf.get_mut(got..).filter(|r| !r.is_empty()) {
        let at = u64::try_from(got).unwrap_or(u64::MAX);
        match file.read_at(rest, at) {
            Ok(0) => break,
            Ok(n) => got = got.saturating_add(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn signatures_at_their_offsets() {
        let mut ext4 = vec![0u8; 2048];
        ext4[1080] = 0x53;
        ext4[1081] = 0xef;
        assert_eq!(describe(&ext4), Some("an ext2/ext3/ext4 filesystem"));
        let mut btrfs = vec![0u8; super::PROBE_LEN];
        btrfs[0x10040..0x10048].copy_from_slice(b"_BHRfS_M");
        assert_eq!(describe(&btrfs), Some("a Btrfs filesystem"));
        let mut mbr = vec![0u8; 512];
        mbr[510] = 0x55;
        mbr[511] = 0xaa;
        assert_eq!(describe(&mbr), Some("an MBR partition table"));
        mbr[54..57].copy_from_slice(b"FAT");
        assert_eq!(describe(&mbr), Some("a FAT filesystem"));
        assert_eq!(describe(b"\x93NUMPY\x01\x00"), Some("a NumPy .npy file"));
        assert_eq!(describe(&[0u8; 4096]), None);
        assert_eq!(describe(&[]), None);
        assert_eq!(
            describe(b"root:x:0:0:root:/root:/bin/bash\n"),
            Some("a text file")
        );
        let mut stray = vec![0u8; 4096];
        stray[4000] = 1;
        assert_eq!(describe(&stray), Some("data (it is not empty)"));
    }
}
