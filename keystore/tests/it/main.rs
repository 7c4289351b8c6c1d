//! kseal-keystore integration tests: one binary (as `tests/it` and uv, ripgrep), so the AWS
//! SDK and the test kit are linked once, not once per test file.

mod asm;
mod asm_no_credentials;
mod dir;
mod fleet;
mod root;
mod trust;
