//! Getting a file's bytes for a command: [`tet_std::input`], with the failure said and
//! turned into an exit status.

pub use tet_std::input::*;

use crate::Exit;

/// Runs `f` on the opened input at `path` (mapped, or read with `no_mmap`), for callers
/// that release pages behind them ([`Input::release`]).
pub fn with_opened(path: &std::path::Path, no_mmap: bool, f: impl FnOnce(&Input) -> Exit) -> Exit {
    match Input::load(path, no_mmap) {
        Ok(i) => f(&i),
        Err(e) => {
            crate::say!("{e}");
            Exit::of(e.category())
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
    with_opened(path, no_mmap, |i| f(i.bytes()))
}
