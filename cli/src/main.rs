//! `kseal`: seal Kubernetes Secrets offline for GitOps.

mod args;
mod cmd;
mod env;
mod manifest;
mod output;

use std::process::ExitCode;

use clap::Parser as _;

use crate::args::{Cli, Command, KeysCommand};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Seal(args) => cmd::seal::run(args),
        Command::Unseal(args) => cmd::unseal::run(args),
        Command::Keys(KeysCommand::Generate(args)) => cmd::keys::run(args),
        Command::Quickstart(args) => cmd::quickstart::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
