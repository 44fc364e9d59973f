//! Crash-safe replacement of a file ([`tet_std::atomic`]), with what only the binary
//! does: say a refusal and turn it into an exit status, and remove the temporary files
//! when a signal ends the process.

pub use tet_std::atomic::*;

use std::path::Path;

use crate::Exit;

/// On SIGINT, SIGTERM, SIGHUP (a closed terminal or ssh session) or SIGQUIT, removes the
/// temporary file of every write in progress (the targets are untouched: they are
/// replaced only by a rename at the end) and exits with 128 + the signal's number (130,
/// 143, 129, 131), as a shell reports a killed command. `main` calls it once.
pub fn remove_temporaries_on_signal() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])
    else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            // The list stays locked until exit: no write can register a new file meanwhile.
            let _held = remove_temporaries();
            std::process::exit(signal.saturating_add(128));
        }
    });
}

/// [`tet_std::atomic::check_output`], the refusal said (exit 16 for the output being an
/// input or existing, 8 for a directory that is not there).
pub fn check_output(output: &Path, inputs: &[&Path], force: bool) -> Result<(), Exit> {
    tet_std::atomic::check_output(output, inputs, force).map_err(|e| {
        crate::say!("{e}");
        Exit::of(e.category())
    })
}
