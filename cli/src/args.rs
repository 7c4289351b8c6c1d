//! Command-line definitions (clap derive). Converted into validated requests by each command.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::env;

/// Seal Kubernetes Secrets for GitOps, offline, with the fleet's public certificate.
///
/// kseal is a drop-in for Bitnami Sealed Secrets: same SealedSecret API, same wire format.
#[derive(Debug, Parser)]
#[command(
    name = "kseal",
    version,
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
    /// Decrypt SealedSecrets with local private keys (recovery; prints plaintext)
    #[command(after_help = UNSEAL_EXAMPLES)]
    Unseal(UnsealArgs),
    /// Generate and inspect sealing keys
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Try the whole flow offline: generate a key, seal a sample Secret, unseal it
    Quickstart(QuickstartArgs),
}

const SEAL_EXAMPLES: &str = "\
Examples:
  # Seal a Secret manifest for the fleet's certificate
  kseal seal --cert fleet.crt -f secret.yaml > sealed-secret.yaml

  # From kubectl, namespace-wide
  kubectl create secret generic db --from-literal=password=s3cr3t --dry-run=client -o yaml \\
    | kseal seal --cert fleet.crt --scope namespace-wide -n prod";

const UNSEAL_EXAMPLES: &str = "\
Examples:
  # Recover a Secret with a backed-up key pair
  kseal unseal --key keys/tls.key -f sealed-secret.yaml";

#[derive(Debug, Args)]
pub(crate) struct SealArgs {
    /// Certificate (PEM) of the sealing key
    #[arg(long, env = env::KSEAL_CERT, value_name = "FILE")]
    pub(crate) cert: PathBuf,
    /// Input Secret manifest(s), YAML (multi-document) or JSON; `-` or absent reads stdin
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub(crate) file: Option<PathBuf>,
    /// Output format; default: the input's format
    #[arg(short = 'o', long, env = env::KSEAL_FORMAT, value_enum)]
    pub(crate) format: Option<Format>,
    /// Scope the Secrets are sealed for
    #[arg(long, env = env::KSEAL_SCOPE, default_value = "strict", value_parser = parse_scope)]
    pub(crate) scope: kseal_api::Scope,
    /// Namespace for Secrets without one; a Secret declaring another one is an error
    #[arg(short = 'n', long, env = env::KSEAL_NAMESPACE)]
    pub(crate) namespace: Option<String>,
    /// Override the Secret's name
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Allow Secrets with neither data nor stringData
    #[arg(long)]
    pub(crate) allow_empty_data: bool,
}

#[derive(Debug, Args)]
pub(crate) struct UnsealArgs {
    /// Private key PEM file (PKCS #1 or PKCS #8, optionally followed by its certificate);
    /// repeat for several keys
    #[arg(long = "key", env = env::KSEAL_KEY, value_delimiter = ',', required = true, value_name = "FILE")]
    pub(crate) keys: Vec<PathBuf>,
    /// Input SealedSecret manifest(s); `-` or absent reads stdin
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub(crate) file: Option<PathBuf>,
    /// Output format; default: the input's format
    #[arg(short = 'o', long, env = env::KSEAL_FORMAT, value_enum)]
    pub(crate) format: Option<Format>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Generate an RSA key pair and a self-signed certificate (as Bitnami's controller does)
    Generate(GenerateArgs),
}

#[derive(Debug, Args)]
pub(crate) struct GenerateArgs {
    /// Directory to write `tls.key` (PKCS #1, mode 0600) and `tls.crt` into
    #[arg(long, value_name = "DIR")]
    pub(crate) out_dir: PathBuf,
    /// RSA key size in bits
    #[arg(long, env = env::KSEAL_KEY_SIZE, default_value_t = 4096, value_parser = parse_key_size)]
    pub(crate) key_size: u32,
    /// Certificate common name
    #[arg(long, env = env::KSEAL_COMMON_NAME, default_value = "sealed-secret")]
    pub(crate) common_name: String,
    /// Certificate validity in days
    #[arg(long, env = env::KSEAL_VALIDITY_DAYS, default_value_t = 3650, value_parser = clap::value_parser!(u32).range(1..=36500))]
    pub(crate) validity_days: u32,
    /// Overwrite an existing key in the directory
    #[arg(long)]
    pub(crate) force: bool,
}

#[derive(Debug, Args)]
pub(crate) struct QuickstartArgs {
    /// Directory for the demo's key, sample Secret and results
    #[arg(long, env = env::KSEAL_QUICKSTART_DIR, default_value = "kseal-quickstart")]
    pub(crate) dir: PathBuf,
}

/// Manifest output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// YAML, each document prefixed by `---`
    Yaml,
    /// Indented JSON, one object per document
    Json,
}

fn parse_scope(text: &str) -> Result<kseal_api::Scope, String> {
    text.parse()
        .map_err(|e: kseal_keys::ParseScopeError| e.to_string())
}

fn parse_key_size(text: &str) -> Result<u32, String> {
    match text {
        "2048" => Ok(2048),
        "3072" => Ok(3072),
        "4096" => Ok(4096),
        _ => Err(format!(
            "`{text}` is not a supported key size: use 2048, 3072 or 4096"
        )),
    }
}
