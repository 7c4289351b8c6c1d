//! The CLI's integration tests, in one binary (as `tests/it`, uv and ripgrep do): the test
//! code and its dependencies are linked once instead of once per file. No test changes the
//! process's environment or working directory (each runs `kseal` as a child process with its
//! own), so none needs a process of its own.

#[macro_use]
mod common;

mod bind_template;
mod build_info;
mod check;
mod cli;
mod config_rules;
mod export_policy;
mod fleet_wait;
mod repositories;
mod reseal_stale;
mod ring;
mod walk_links;
mod workflows;
