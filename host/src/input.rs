//! Getting a file's bytes: memory-mapped when possible, read into memory otherwise.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::Exit;

/// The bytes of an input file.
pub enum Input {
    /// A read-only private mapping.
    Mapped(memmap2::Mmap),
    /// The file read into memory (empty files, or filesystems that refuse mmap).
    Read(Vec<u8>),
}

impl Input {
    /// Opens `path`. Errors are operational (exit 8).
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

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Input::Mapped(m) => m,
            Input::Read(v) => v,
        }
    }
}

/// Refuses inputs that are not regular files or block devices, before opening them:
/// opening a FIFO with no writer would block, and reading a character device such as
/// `/dev/zero` would never end. Both formats are random-access; neither can be read
/// from a stream.
pub(crate) fn check_kind(path: &Path) -> std::io::Result<()> {
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

/// Runs `f` on the bytes of the file at `path`, mapped.
pub fn with_input(path: &std::path::Path, f: impl FnOnce(&[u8]) -> Exit) -> Exit {
    with_input_mode(path, false, f)
}

/// Runs `f` on the bytes of the file at `path`: mapped, or read into memory with
/// `no_mmap`.
pub fn with_input_mode(
    path: &std::path::Path,
    no_mmap: bool,
    f: impl FnOnce(&[u8]) -> Exit,
) -> Exit {
    let opened = if no_mmap {
        Input::read(path)
    } else {
        Input::open(path)
    };
    match opened {
        Ok(i) => f(i.bytes()),
        Err(e) => {
            crate::say!("cannot read {}: {e}", path.display());
            Exit::Operational
        }
    }
}
