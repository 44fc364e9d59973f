//! Getting a file's bytes for a command: [`tet_std::input`], with the failure said and
//! turned into an exit status.

pub use tet_std::input::*;

use crate::Exit;

/// Runs `f` on the opened input at `path` (mapped, or read with `no_mmap`), for callers
/// that release pages behind them ([`Input::release`]).
pub fn with_opened(path: &std::path::Path, no_mmap: bool, f: impl FnOnce(&Input) -> Exit) -> Exit {
    let opened = if no_mmap {
        Input::read(path)
    } else {
        Input::open(path)
    };
    match opened {
        Ok(i) => f(&i),
        Err(e) => {
            crate::say!("cannot read {}: {e}", path.display());
            Exit::Operational
        }
    }
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
