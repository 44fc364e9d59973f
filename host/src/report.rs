//! Findings of both formats rendered one way: the same human line
//! (`error[code] message`) and the same JSON object (`code`, `severity`, `field`,
//! `offset`, `message`, and a `context` object that each format fills with what locates
//! the finding in its own terms: dataset, row and chunk coordinates for `.tet`, block and
//! inode for cetrafs). `verify`, `repair` and `replay` print through it; the shape itself
//! ([`Rendered`]) is the library's (`tet_std::report`), so the Python binding renders the
//! same objects.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use serde_json::{json, Value};

use crate::Exit;

pub use tet_std::report::{Rendered, KEEP};

/// `N error(s), M warning(s)`, or `clean`, after `path: `.
pub fn summary_line(path: &std::path::Path, errors: u64, warnings: u64) -> String {
    if errors == 0 && warnings == 0 {
        format!("{}: clean", path.display())
    } else {
        format!(
            "{}: {errors} error(s), {warnings} warning(s)",
            path.display()
        )
    }
}

/// Whether errors also go to standard output as JSON (the command has `--json`).
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);
/// Whether the command printed its JSON document (then an error is in it, or after it
/// on standard error only).
static DOCUMENT: AtomicBool = AtomicBool::new(false);
/// The last error said, for the JSON error object.
static LAST: Mutex<Option<String>> = Mutex::new(None);

/// Writes one line to standard error. A failure is ignored: with standard error closed
/// (`2>&1 | head -c1`) the message has nowhere to go, and the command's exit status still
/// tells its outcome (`eprintln!` would panic instead). Use through [`crate::errln!`].
pub fn stderr_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Writes a line to standard error like `eprintln!`, but a closed standard error is not a
/// panic ([`report::stderr_line`](crate::report::stderr_line)).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::report::stderr_line(format_args!($($arg)*))
    };
}

/// Says an error on standard error (`tet-host: MESSAGE`), keeping it for
/// [`finish`]. Use through [`crate::say!`].
pub fn say(message: String) {
    crate::errln!("tet-host: {message}");
    remember(message);
}

/// Says a warning on standard error (`tet-host: warning: MESSAGE`): the command goes on,
/// and the message is not kept as its error.
pub fn warn(message: String) {
    crate::errln!("tet-host: warning: {message}");
}

/// Keeps `message` as the error [`finish`] reports, without printing it (for errors
/// another library has printed already).
pub fn remember(message: String) {
    *LAST.lock().unwrap_or_else(PoisonError::into_inner) = Some(message);
}

/// Says an error, formatted like `format!`: `say!("{}: cannot mount", path.display())`.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::report::say(format!($($arg)*))
    };
}

/// Turns JSON errors on: `main` calls it for a command given `--json`.
pub fn json_errors() {
    set_json_errors(true);
}

/// Turns JSON errors on or off (off for a command whose output turns out not to be
/// JSON: `.tet` repair prints lines).
pub fn set_json_errors(on: bool) {
    JSON_ERRORS.store(on, Ordering::Relaxed);
}

/// Prints a command's JSON document on standard output, pretty, and notes that it did.
pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    printed();
}

/// Notes that the command printed its JSON document itself.
pub fn printed() {
    DOCUMENT.store(true, Ordering::Relaxed);
}

/// At the end of a command with `--json` that failed (exit 4, 8 or 16) before printing
/// its document: the error as one JSON object on standard output, so a script reading
/// JSON always gets JSON: `{"error": {"code": "operational", "message": ..., "exit": 8}}`.
pub fn finish(exit: Exit) {
    let code = match exit {
        Exit::Problems => "damaged",
        Exit::Operational => "operational",
        Exit::Usage => "usage",
        Exit::Clean | Exit::Fixed => return,
    };
    if !JSON_ERRORS.load(Ordering::Relaxed) || DOCUMENT.load(Ordering::Relaxed) {
        return;
    }
    let message = LAST
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_default();
    println!(
        "{}",
        json!({"error": {"code": code, "message": message, "exit": exit.code()}})
    );
}
