//! kseal-controller placeholder.
