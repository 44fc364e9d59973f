//! Errors as `tetrs.TetError` (or its subclass `tetrs.MemoryBudgetError`): the message
//! `tet-host` prints (without its `tet-host: ` prefix), the exit status it would end with,
//! the error category and, when there is one, the finding code.

use pyo3::prelude::*;
use tet_std::{Category, Exit};

/// An error on its way to Python.
#[derive(Clone, Debug)]
pub struct Failure {
    /// What `tet-host` says.
    pub message: String,
    /// Its exit status.
    pub exit: u8,
    /// The category's name (`corrupt`, `usage`, `resource`, ...).
    pub category: &'static str,
    /// The finding code (`TET-...`), when the error is one.
    pub code: Option<&'static str>,
}

impl Failure {
    /// An error of `category`.
    pub fn of(category: Category, message: String) -> Failure {
        Failure {
            message,
            exit: Exit::of(category).code(),
            category: category.name(),
            code: None,
        }
    }

    /// A usage error (exit 16).
    pub fn usage(message: String) -> Failure {
        Failure::of(Category::Usage, message)
    }

    /// An operational error: the machine could not do it (exit 8).
    pub fn io(message: String) -> Failure {
        Failure::of(Category::Io, message)
    }

    /// A library error (its message, category and code) on its way to Python, with the
    /// Python spelling of the budget added where the message says how to raise it.
    pub fn reading(e: tet_std::Error) -> Failure {
        let mut f = Failure::from(e);
        if f.category == Category::Resource.name() && f.message.contains("--memory-budget") {
            f.message.push_str(
                " (from Python: memory_budget=SIZE, e.g. memory_budget=\"2G\" or \"50%\")",
            );
        }
        f
    }

    /// The Python exception (`tetrs._errors.TetError`, or `MemoryBudgetError` for a
    /// resource error).
    pub fn into_py_err(self) -> PyErr {
        Python::attach(|py| {
            let class = if self.category == Category::Resource.name() {
                "MemoryBudgetError"
            } else {
                "TetError"
            };
            let made = py
                .import("tetrs._errors")
                .and_then(|m| m.getattr(class))
                .and_then(|c| c.call1((self.message.clone(), self.exit, self.category, self.code)));
            match made {
                Ok(e) => PyErr::from_value(e),
                Err(e) => e,
            }
        })
    }
}

impl From<tet_std::Error> for Failure {
    fn from(e: tet_std::Error) -> Failure {
        let mut f = Failure::of(e.category(), e.message().to_string());
        f.code = e.code();
        f
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        f.into_py_err()
    }
}
