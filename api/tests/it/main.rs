//! kseal-api integration tests: one binary (as `tests/it` and uv, ripgrep), so each test
//! module is not linked into a binary of its own.

mod common;
mod interop;
mod no_panic;
mod seal_unseal;
mod template;
mod template_binding;
mod validation;
