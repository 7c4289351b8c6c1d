//! kseal-keys placeholder.
