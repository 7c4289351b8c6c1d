//! Cross-crate tests for kseal live in `it/`; this library is intentionally empty.
