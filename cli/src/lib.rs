//! `kseal`: seal Kubernetes Secrets offline for GitOps.
//!
//! The binary is `kseal`; this library exposes only [`run`], so that other programs of the
//! workspace (the `kseal-demo` walkthrough) run real `kseal` commands in-process. Everything
//! else is private: the command line is the interface.

mod args;
mod certs;
mod cmd;
mod env;
mod http;
mod kubeconfig;
mod manifest;
mod output;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser as _;

use crate::args::{Cli, Command, CreateCommand, KeysCommand};

/// Runs `kseal` with `args` (the first one is the program name, as in `std::env::args_os`):
/// parses them, runs the command and prints errors on stderr (`error: …`, or clap's usage
/// message). Returns the exit code `kseal` would exit with; never exits the process.
///
/// Commands that talk to a key ring start their own single-threaded Tokio runtime, so call
/// this outside any runtime (e.g. from `tokio::task::spawn_blocking`).
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // What `Cli::parse` does, without exiting: help and version go to stdout with
            // code 0, usage errors to stderr with code 2. A closed pipe is not an error.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let result = match cli.command {
        Command::Seal(args) => cmd::seal::run(args),
        Command::Set(args) => cmd::set::run(args),
        Command::Cert(args) => cmd::cert::run(args),
        Command::Create(CreateCommand::GitCredentials(args)) => cmd::create::git(*args),
        Command::Create(CreateCommand::AwsCredentials(args)) => cmd::create::aws(*args),
        Command::Unseal(args) => cmd::unseal::run(args),
        Command::Reseal(args) => cmd::recovery::reseal(args),
        Command::Validate(args) => cmd::recovery::validate(args),
        Command::Keys(KeysCommand::Generate(args)) => cmd::keys::run(args),
        Command::Keys(KeysCommand::Inspect(args)) => cmd::keys::inspect(args),
        Command::Keys(KeysCommand::Push(args)) => cmd::ring::push(args),
        Command::Keys(KeysCommand::Activate(args)) => cmd::ring::activate(args),
        Command::Keys(KeysCommand::Rotate(args)) => cmd::ring::rotate(args),
        Command::Keys(KeysCommand::List(args)) => cmd::ring::list(args),
        Command::Keys(KeysCommand::ExportCert(args)) => cmd::ring::export_cert(args),
        Command::Keys(KeysCommand::Import(args)) => cmd::ring::import(args),
        Command::Keys(KeysCommand::Retire(args)) => cmd::ring::retire(args),
        Command::Quickstart(args) => cmd::quickstart::run(args),
        Command::Completions(args) => cmd::completions::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
