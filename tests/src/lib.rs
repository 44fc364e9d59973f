//! Test-only crate; the tests live in tests/.
