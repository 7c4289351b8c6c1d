//! kseal-api placeholder.
