//! Command-line definitions (clap derive), converted into validated requests by each command.
//! This module holds the command tree and the arguments several commands share (input files,
//! the certificate source, the controller, output format); one file per command group holds
//! that group's arguments and help examples, re-exported here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::env;

mod check;
mod create;
mod fleet;
mod keys;
mod recovery;
mod seal;
mod tools;

use check::CHECK_EXAMPLES;
pub(crate) use check::*;
pub(crate) use create::*;
pub(crate) use fleet::*;
pub(crate) use keys::*;
pub(crate) use recovery::*;
use recovery::{RESEAL_EXAMPLES, UNSEAL_EXAMPLES, VALIDATE_EXAMPLES};
pub(crate) use seal::*;
use seal::{CERT_EXAMPLES, SEAL_EXAMPLES, SET_EXAMPLES};
pub(crate) use tools::*;
use tools::{COMPLETIONS_EXAMPLES, CONFIG_EXAMPLES};

/// Seal Kubernetes Secrets for GitOps, offline, with the fleet's public certificate.
///
/// kseal is a drop-in for Bitnami Sealed Secrets: same SealedSecret API, same wire format.
/// Every flag can also be set with a `KSEAL_*` environment variable (shown in each command's
/// help); an explicit flag wins.
#[derive(Debug, Parser)]
#[command(
    name = "kseal",
    version = crate::VERSION,
    propagate_version = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Encrypt Secrets into SealedSecrets with a public certificate
    #[command(after_help = SEAL_EXAMPLES)]
    Seal(SealArgs),
    /// Add or replace one item of a SealedSecret file (value from a hidden prompt or stdin)
    #[command(after_help = SET_EXAMPLES)]
    Set(SetArgs),
    /// Print or save the sealing certificate (from a file, an https URL or the controller)
    #[command(after_help = CERT_EXAMPLES)]
    Cert(CertCmdArgs),
    /// Create a sealed credentials Secret for Flux, Argo CD, Crossplane or External Secrets
    #[command(subcommand)]
    Create(CreateCommand),
    /// Decrypt SealedSecrets with local private keys (recovery; prints plaintext)
    #[command(after_help = UNSEAL_EXAMPLES)]
    Unseal(UnsealArgs),
    /// Re-encrypt SealedSecrets to the sealing key (local private keys, or the controller)
    #[command(after_help = RESEAL_EXAMPLES)]
    Reseal(ResealArgs),
    /// Check that every item of every SealedSecret opens (local private keys or the controller)
    #[command(after_help = VALIDATE_EXAMPLES)]
    Validate(ValidateArgs),
    /// Sealing keys: generate and inspect them, and manage the fleet key ring (push, rotate,
    /// activate, retire, trust, list)
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Try the whole flow offline: generate a key, seal a sample Secret, unseal it
    Quickstart(QuickstartArgs),
    /// Print a shell completion script
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions(CompletionsArgs),
    // `kseal config`: the repository's .kseal.yaml and its creation rules.
    /// Show the .kseal.yaml that applies here and which creation rule picks the ring or
    /// certificate, scope and namespace for a path
    #[command(after_help = CONFIG_EXAMPLES)]
    Config(ConfigArgs),
    // `kseal check` (its own block).
    /// CI gate: check every SealedSecret of a GitOps tree against the key ring (exit 0 clean,
    /// 1 findings, 2 usage or I/O error)
    #[command(after_help = CHECK_EXAMPLES)]
    Check(CheckArgs),
    /// The fleet's view of the key ring: which clusters hold which keys and are current
    #[command(subcommand)]
    Fleet(FleetCommand),
}

/// How to reach the controller through the Kubernetes API server.
#[derive(Debug, Args, Clone)]
pub(crate) struct ControllerArgs {
    /// Name of the controller's Service
    #[arg(long, env = env::KSEAL_CONTROLLER_NAME, default_value = "kseal-controller")]
    pub(crate) controller_name: String,
    /// Namespace of the controller's Service
    #[arg(long, env = env::KSEAL_CONTROLLER_NAMESPACE, default_value = "kseal-system")]
    pub(crate) controller_namespace: String,
    /// Kubeconfig file; default: $KUBECONFIG, then ~/.kube/config
    #[arg(long, env = env::KSEAL_KUBECONFIG, value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Kubeconfig context; default: the current context
    #[arg(long, env = env::KSEAL_CONTEXT)]
    pub(crate) context: Option<String>,
}

/// The input files of a command, the same way for every command: `-f FILE` (repeatable) and
/// FILE arguments, `-` for standard input; none reads standard input.
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct InputFiles {
    /// Input file; repeat for several; `-` reads stdin [default: stdin]
    #[arg(short = 'f', long = "file", env = env::KSEAL_FILE, value_name = "FILE")]
    pub(crate) file: Vec<PathBuf>,
    /// Input files, the same as -f FILE
    #[arg(value_name = "FILE")]
    pub(crate) paths: Vec<PathBuf>,
}

impl InputFiles {
    /// Every input file: the `-f` ones, then the arguments.
    pub(crate) fn all(&self) -> Vec<PathBuf> {
        self.file.iter().chain(&self.paths).cloned().collect()
    }
}

/// Where the sealing certificate comes from.
#[derive(Debug, Args, Clone)]
pub(crate) struct CertArgs {
    /// Certificate to seal with: a PEM file, an https:// URL, a key ring
    /// (secretsmanager://PREFIX or dir://PATH: its active key), or NAME=SOURCE; repeat to seal
    /// once per certificate. Without it, the controller's certificate is fetched through the
    /// Kubernetes API
    #[arg(
        long,
        env = env::KSEAL_CERT,
        value_delimiter = ',',
        value_name = "[NAME=]FILE|URL|RING"
    )]
    pub(crate) cert: Vec<String>,
    #[command(flatten)]
    pub(crate) controller: ControllerArgs,
    /// Allow fetching a certificate URL over plain http (never do this over an untrusted
    /// network: whoever swaps the certificate reads the secrets)
    #[arg(long, env = env::KSEAL_ALLOW_HTTP)]
    pub(crate) allow_http: bool,
    /// Trust anchor of a key ring given as --cert secretsmanager://… or dir://… (a kid, as
    /// `kseal keys trust` prints it); default: the pin in the nearest .kseal.yaml
    #[arg(long, env = env::KSEAL_RING_ANCHOR, value_name = "KID")]
    pub(crate) ring_anchor: Option<String>,
    /// Without --cert, from a controller that mirrors several key rings: the certificate of
    /// this ring (its Secrets Manager prefix, e.g. kseal/team-a) instead of the default one
    #[arg(long, env = env::KSEAL_CONTROLLER_RING, value_name = "RING")]
    pub(crate) controller_ring: Option<String>,
}

/// Manifest output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// YAML, each document prefixed by `---`
    Yaml,
    /// Indented JSON, one object per document
    Json,
}

pub(super) fn parse_scope(text: &str) -> Result<kseal_api::Scope, String> {
    text.parse()
        .map_err(|e: kseal_keys::ParseScopeError| e.to_string())
}

pub(super) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    kseal_api::duration::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_can_be_set_from_the_environment() {
        use clap::CommandFactory as _;
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_positional() || matches!(id, "help" | "version") {
                    continue;
                }
                match arg.get_env().and_then(|e| e.to_str()) {
                    Some(var) if var.starts_with("KSEAL_") || var.starts_with("AWS_") => {}
                    _ => missing.push(format!("{path} --{id}")),
                }
            }
            for sub in command.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "kseal", &mut missing);
        assert!(
            missing.is_empty(),
            "flags without a KSEAL_* variable: {missing:?}"
        );
    }
}
