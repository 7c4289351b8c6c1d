//! `kseal-controller` binary entry point.

fn main() {}
