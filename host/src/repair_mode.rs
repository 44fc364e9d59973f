//! How `repair` chooses fixes, the same for both formats:
//!
//! | mode | applies |
//! | --- | --- |
//! | `-n` | nothing; prints what it would do |
//! | `-p` | fixes that lose nothing |
//! | `-y` | every fix, including those that lose something (each named as such) |
//! | none | asks per fix on a terminal (y, n, a, q: [`Asker`]); refuses (exit 16) when standard input is not one |

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

/// The questions of one interactive repair, answered as e2fsck's are: `y` yes, `n` no
/// (and not asked again in a later round), `a` yes to this and every later fix, `q` no
/// to this and every later fix; anything else is asked again. The end of input is `q`.
#[derive(Debug, Default)]
pub struct Asker {
    /// `a` (true) or `q` (false) given: the answer to every later question.
    all: Option<bool>,
    /// Fixes declined, by their code and action.
    declined: std::collections::BTreeSet<String>,
}

impl Asker {
    /// Asks whether to apply a fix (`key` tells fixes apart across rounds).
    pub fn ask(&mut self, lossless: bool, code: &str, action: &str, key: &str) -> bool {
        if let Some(all) = self.all {
            return all;
        }
        let key = format!("{code} {key}");
        if self.declined.contains(&key) {
            return false;
        }
        let kind = if lossless { "fix" } else { "lossy fix" };
        loop {
            eprint!("{kind}[{code}] {action}? [y/n/a/q] ");
            let _ = std::io::stderr().flush();
            let mut line = String::new();
            let answer = match std::io::stdin().lock().read_line(&mut line) {
                Ok(0) | Err(_) => "q",
                Ok(_) => line.trim(),
            };
            match answer {
                "y" | "Y" | "yes" => return true,
                "n" | "N" | "no" => {
                    self.declined.insert(key);
                    return false;
                }
                "a" | "A" | "all" => {
                    self.all = Some(true);
                    return true;
                }
                "q" | "Q" | "quit" => {
                    self.all = Some(false);
                    return false;
                }
                _ => crate::errln!(
                    "answer y (yes), n (no), a (yes to this and every later fix) or q (no \
                     to this and every later fix)"
                ),
            }
        }
    }
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
