//! Exit statuses, chosen from an error's category in one place.

use tet_core::Category;

/// A process exit status, in the fsck convention: 0 clean, 1 problems found and all
/// corrected, 4 problems found and left, 8 operational error (cannot open or read), 16
/// usage error.
///
/// The library returns categories, never statuses; this is the one table that turns a
/// category into a status, for the `tet-host` binary and for the Python binding, which
/// reports the status `tet-host` would have ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: nothing found.
    Clean = 0,
    /// 1: problems found and all corrected.
    Fixed = 1,
    /// 4: problems found and left in place.
    Problems = 4,
    /// 8: the file could not be opened or read.
    Operational = 8,
    /// 16: bad command line.
    Usage = 16,
}

impl Exit {
    /// The exit status for an error of `category`, the one mapping every command uses
    /// (the README's table): the input's own damage, whatever its form, is 4; what the
    /// machine could not do (read, write, memory, a refusal) is 8; what the user typed
    /// wrong is 16.
    pub fn of(category: Category) -> Exit {
        match category {
            Category::Truncated | Category::Corrupt | Category::Incompatible => Exit::Problems,
            Category::Unsatisfiable | Category::Resource | Category::Io => Exit::Operational,
            Category::Usage => Exit::Usage,
        }
    }

    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Clean => 0,
            Exit::Fixed => 1,
            Exit::Problems => 4,
            Exit::Operational => 8,
            Exit::Usage => 16,
        }
    }
}
