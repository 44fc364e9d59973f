//! How `repair` chooses fixes, the same for both formats:
//!
//! | mode | applies |
//! | --- | --- |
//! | `-n` | nothing; prints what it would do |
//! | `-p` | fixes that lose nothing |
//! | `-y` | every fix, including those that lose something (each named as such) |
//! | none | asks per fix on a terminal; refuses (exit 16) when standard input is not one |

use std::io::{BufRead, IsTerminal, Write};

use crate::Exit;

/// How fixes are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `-n`: change nothing.
    No,
    /// `-p`: lossless fixes only.
    Preen,
    /// `-y`: every fix.
    Yes,
    /// Ask per fix.
    Ask,
}

/// Refuses [`Mode::Ask`] when standard input is not a terminal (there is no one to ask).
pub fn check_can_ask(mode: Mode) -> Result<(), Exit> {
    if mode == Mode::Ask && !std::io::stdin().is_terminal() {
        crate::say!(
            "repair needs -n, -p or -y when standard input is not a terminal \
             (it asks before each fix otherwise)"
        );
        return Err(Exit::Usage);
    }
    Ok(())
}

/// Asks on the terminal whether to apply a fix; anything but `y`/`yes` is a no.
pub fn ask(lossless: bool, code: &str, action: &str) -> bool {
    let kind = if lossless { "fix" } else { "lossy fix" };
    confirm(&format!("{kind}[{code}] {action}?"))
}

/// Asks `question [y/N]` on standard error and reads the answer from standard input:
/// `y` or `yes` is a yes, anything else (an empty line, end of input) a no. The one
/// question every command asks (repair's fixes, mkfs over data).
pub fn confirm(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim(), "y" | "Y" | "yes")
}
