//! kseal-keys integration tests: one binary (as `tests/it` and uv, ripgrep), so each test
//! module is not linked into a binary of its own.

mod common;
mod interop;
mod keyring;
mod proptests;
mod signature;
