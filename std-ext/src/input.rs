//! Getting a file's bytes: memory-mapped when possible, read into memory otherwise.

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// The bytes of an input file.
pub enum Input {
    /// A read-only private mapping.
    Mapped(memmap2::Mmap),
    /// The file read into memory (empty files, or filesystems that refuse mmap).
    Read(Vec<u8>),
}

impl Input {
    /// Opens `path`: mapped, or read when it is empty or the file system refuses a
    /// mapping. Errors are operational (category `io`).
    pub fn open(path: &Path) -> std::io::Result<Input> {
        check_kind(path)?;
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        if len > 0 {
            if let Ok(map) = map_readonly(&file) {
                return Ok(Input::Mapped(map));
            }
        }
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        Ok(Input::Read(buf))
    }

    /// Reads `path` into memory (`--no-mmap`).
    pub fn read(path: &Path) -> std::io::Result<Input> {
        check_kind(path)?;
        let mut buf = Vec::new();
        File::open(path)?.read_to_end(&mut buf)?;
        Ok(Input::Read(buf))
    }

    /// Opens `path` mapped ([`Input::open`]) or, with `no_mmap`, read into memory
    /// ([`Input::read`]); the failure as an operational error (`cannot read PATH: ...`).
    pub fn load(path: &Path, no_mmap: bool) -> Result<Input, crate::Error> {
        let opened = if no_mmap {
            Input::read(path)
        } else {
            Input::open(path)
        };
        opened
            .map_err(|e| crate::Error::io(format!("cannot read {}: {e}", path.display())).at(path))
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Input::Mapped(m) => m,
            Input::Read(v) => v,
        }
    }

    /// Lets the kernel drop the resident pages of bytes `offset .. offset + len` of a
    /// mapped input (a streaming reader calls it behind itself, so a pass over a large
    /// file does not keep the file resident in this process); the bytes read the same
    /// afterwards. A read input, or a failed request, changes nothing.
    pub fn release(&self, offset: u64, len: u64) {
        if let Input::Mapped(m) = self {
            let start = usize::try_from(offset).unwrap_or(usize::MAX).min(m.len());
            let n = usize::try_from(len)
                .unwrap_or(usize::MAX)
                .min(m.len().saturating_sub(start));
            if n > 0 {
                drop_pages(m, start, n);
            }
        }
    }
}

/// `madvise(MADV_DONTNEED)` over `start .. start + len` of `map` (in bounds).
///
/// # Safety
/// The mapping is private and read-only and this process never writes it, so dropping
/// its pages only makes the next read fault them in again from the file: every byte
/// reads as before, under the same contract as [`map_readonly`] (no other process
/// rewrites or truncates the file while it is mapped). Nothing else is changed.
#[allow(unsafe_code)]
fn drop_pages(map: &memmap2::Mmap, start: usize, len: usize) {
    // SAFETY: see the function's contract above; the range is inside the mapping.
    let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len) };
}

/// Refuses inputs that are not regular files or block devices, before opening them:
/// opening a FIFO with no writer would block, and reading a character device such as
/// `/dev/zero` would never end. Both formats are random-access; neither can be read
/// from a stream.
pub fn check_kind(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::metadata(path)?.file_type();
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else {
        return Ok(());
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {what}; .tet files and cetrafs images are read from regular files"),
    ))
}

/// Maps `file` read-only.
///
/// # Safety
/// The mapping is sound only while no process truncates or rewrites the file. The `.tet`
/// format (spec, "Concurrency") rules out reading a file while it is written, and every
/// parser behind this treats the bytes as untrusted, so a concurrent writer can cause
/// wrong answers but the code never relies on the bytes for memory safety beyond their
/// length, which a truncation would violate (SIGBUS). Callers that cannot rule that out
/// should read the file instead; `Input::open` falls back to reading when mapping fails.
#[allow(unsafe_code)]
fn map_readonly(file: &File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: see the function's contract above.
    unsafe { memmap2::Mmap::map(file) }
}
