//! kseal integration tests: one binary, as in uv and ripgrep.
