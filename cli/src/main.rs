//! `kseal`: seal Kubernetes Secrets offline for GitOps.

mod args;
mod certs;
mod cmd;
mod env;
mod http;
mod kubeconfig;
mod manifest;
mod output;

use std::process::ExitCode;

use clap::Parser as _;

use crate::args::{Cli, Command, CreateCommand, KeysCommand};

fn main() -> ExitCode {
    let cli = Cli::parse();
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
