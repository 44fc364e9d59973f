//! The one error of the library: what went wrong as a [`Category`], the file it concerns
//! and the sentence a person reads.

use std::path::{Path, PathBuf};

use tet_core::Category;

/// An error of any operation of this crate.
///
/// The message is the whole sentence as `tet-host` says it after its `tet-host: ` prefix,
/// the path written where the sentence puts it (`cannot read PATH: ...`, `PATH: no
/// dataset ...`); [`Error::path`] gives the path alone. The category decides the exit
/// status ([`crate::Exit::of`]) and lets callers tell the file's damage from a refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    category: Category,
    path: Option<PathBuf>,
    message: String,
    code: Option<&'static str>,
}

impl Error {
    /// An error of `category` saying `message`.
    pub fn new(category: Category, message: impl Into<String>) -> Error {
        Error {
            category,
            path: None,
            message: message.into(),
            code: None,
        }
    }

    /// A usage error: what the caller asked for cannot be (exit 16).
    pub fn usage(message: impl Into<String>) -> Error {
        Error::new(Category::Usage, message)
    }

    /// An operational error: the machine could not do it (exit 8).
    pub fn io(message: impl Into<String>) -> Error {
        Error::new(Category::Io, message)
    }

    /// The same error, concerning the file at `path`.
    #[must_use]
    pub fn at(mut self, path: &Path) -> Error {
        self.path = Some(path.to_path_buf());
        self
    }

    /// The same error, with the finding code (`TET-...`) it reports, when there is one.
    #[must_use]
    pub fn with_code(mut self, code: Option<&'static str>) -> Error {
        self.code = code;
        self
    }

    /// What went wrong, as the exit status sees it.
    pub fn category(&self) -> Category {
        self.category
    }

    /// The file it concerns, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The sentence a person reads.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The finding code, when the error is a finding (a chunk that does not decode).
    pub fn code(&self) -> Option<&'static str> {
        self.code
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
