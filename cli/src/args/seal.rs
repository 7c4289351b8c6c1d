//! `kseal seal`, `kseal set` and `kseal cert`: sealing with a certificate.

use std::path::PathBuf;

use clap::Args;

use super::{CertArgs, Format, InputFiles, parse_scope};
use crate::env;

pub(super) const SEAL_EXAMPLES: &str = "\
Examples:
  # Seal a Secret manifest for the fleet's certificate
  kseal seal --cert fleet.crt -f secret.yaml -w sealed-secret.yaml

  # From kubectl, namespace-wide, certificate fetched from the controller in the cluster
  kubectl create secret generic db --from-literal=password=s3cr3t --dry-run=client -o yaml \\
    | kseal seal --scope namespace-wide -n prod

  # Add or replace items of an existing SealedSecret file (keeps its name, namespace, scope)
  kubectl create secret generic db --from-literal=api-key=k3y --dry-run=client -o yaml \\
    | kseal seal --cert fleet.crt --merge-into sealed-secret.yaml

  # The same, leaving the ciphertext of items whose value is unchanged (no spurious diff)
  kubectl create secret generic db --from-env-file=db.env --dry-run=client -o yaml \\
    | kseal seal --cert fleet.crt --merge-into sealed-secret.yaml --key keys-backup.yaml

  # One value, for a hand-written SealedSecret (prints base64, no newline)
  printf %s \"$TOKEN\" | kseal seal --cert fleet.crt --raw -n prod --name db

  # The same Secret for the fleet and a DR key: writes sealed.fleet.yaml and sealed.dr.yaml
  kseal seal --cert fleet=fleet.crt --cert dr=dr.crt -f secret.yaml -w sealed.yaml

Several --cert: each certificate gets its own output. With -w FILE the certificate's name is
inserted before the extension (or replaces `{cert}` in FILE); on stdout the outputs follow
each other in --cert order. Name a certificate with NAME=SOURCE; by default the name is the
file name without extension (the directory's name for `tls.crt`), or the URL's host.";

pub(super) const SET_EXAMPLES: &str = "\
Examples:
  # Prompt for the value (not echoed) and add it as item `password`
  kseal set --cert fleet.crt sealed-secret.yaml password

  # From a pipe; --strip-newline drops the newline `echo` adds
  echo \"$API_KEY\" | kseal set --cert fleet.crt --strip-newline sealed-secret.yaml api-key";

pub(super) const CERT_EXAMPLES: &str = "\
Examples:
  # Save the controller's certificate (via the Kubernetes API) for offline sealing
  kseal cert -w fleet.crt

  # From another install, or another cluster context
  kseal cert --controller-namespace kube-system --controller-name sealed-secrets-controller
  kseal cert --context prod-eu -w prod-eu.crt";

#[derive(Debug, Args)]
pub(crate) struct SealArgs {
    #[command(flatten)]
    pub(crate) cert: CertArgs,
    #[command(flatten)]
    pub(crate) files: InputFiles,
    /// Write to FILE (atomically, only on success) instead of stdout; `.yaml`/`.yml` means YAML
    #[arg(short = 'w', long = "write", env = env::KSEAL_WRITE, value_name = "FILE")]
    pub(crate) write: Option<PathBuf>,
    /// Output format; default: YAML for a .yaml/.yml -w file, else the input's format
    #[arg(short = 'o', long, env = env::KSEAL_FORMAT, value_enum, ignore_case = true)]
    pub(crate) format: Option<Format>,
    /// Scope the Secrets are sealed for; given, it replaces any scope annotation of the input
    /// [default: the input's scope annotation, else strict]
    #[arg(long, env = env::KSEAL_SCOPE, value_parser = parse_scope)]
    pub(crate) scope: Option<kseal_api::Scope>,
    /// Namespace for Secrets without one; a Secret declaring another one is an error
    /// [default: the kubeconfig context's namespace, else `default`; not for cluster-wide]
    #[arg(short = 'n', long, env = env::KSEAL_NAMESPACE)]
    pub(crate) namespace: Option<String>,
    /// Override the Secret's name (with --raw: the name the value is sealed for)
    #[arg(long, env = env::KSEAL_NAME)]
    pub(crate) name: Option<String>,
    /// Allow Secrets with neither data nor stringData (with --raw: an empty value)
    #[arg(long, env = env::KSEAL_ALLOW_EMPTY_DATA)]
    pub(crate) allow_empty_data: bool,
    /// Bind the values to the SealedSecret's spec.template (annotation
    /// kseal.dev/template-binding): any later edit of the template makes the object refuse to
    /// open, so no template edit can probe the values. Only kseal opens such objects
    #[arg(
        long,
        env = env::KSEAL_BIND_TEMPLATE,
        conflicts_with_all = ["merge_into", "raw"]
    )]
    pub(crate) bind_template: bool,
    /// Add or replace the sealed items in this existing SealedSecret file, in place, keeping
    /// its format, key order, name, namespace and scope (YAML comments are not kept)
    #[arg(
        long,
        env = env::KSEAL_MERGE_INTO,
        value_name = "FILE",
        conflicts_with_all = ["write", "raw"]
    )]
    pub(crate) merge_into: Option<PathBuf>,
    // `seal --merge-into --key`: unchanged items keep their ciphertext.
    /// With --merge-into: private keys (as for `unseal`) that open the file's items; an item
    /// whose value is unchanged keeps its ciphertext, so the diff shows only real changes
    /// (ignored without --merge-into)
    #[arg(long = "key", env = env::KSEAL_KEY, value_delimiter = ',', value_name = "FILE")]
    pub(crate) keys: Vec<PathBuf>,
    /// Seal one value (from --from-file or stdin) and print it as base64 without a newline
    #[arg(long, env = env::KSEAL_RAW)]
    pub(crate) raw: bool,
    /// With --raw: read the value from this file (`KEY=` prefix accepted and ignored)
    #[arg(long, env = env::KSEAL_FROM_FILE, value_name = "[KEY=]FILE", requires = "raw")]
    pub(crate) from_file: Option<String>,
    /// With --raw: drop one trailing newline from the value
    #[arg(long, env = env::KSEAL_STRIP_NEWLINE, requires = "raw")]
    pub(crate) strip_newline: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SetArgs {
    /// SealedSecret file to update in place (format, key order, name, namespace and scope are
    /// kept; YAML comments are not)
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// Item key to add or replace
    #[arg(value_name = "KEY")]
    pub(crate) key: String,
    #[command(flatten)]
    pub(crate) cert: CertArgs,
    /// Read the value from this file instead of a prompt or stdin
    #[arg(long, env = env::KSEAL_FROM_FILE, value_name = "FILE")]
    pub(crate) from_file: Option<PathBuf>,
    /// Drop one trailing newline from the value
    #[arg(long, env = env::KSEAL_STRIP_NEWLINE)]
    pub(crate) strip_newline: bool,
    /// Seal an empty value instead of refusing it
    #[arg(long, env = env::KSEAL_ALLOW_EMPTY_DATA)]
    pub(crate) allow_empty_data: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CertCmdArgs {
    #[command(flatten)]
    pub(crate) cert: CertArgs,
    /// Save the certificate to FILE (atomically) instead of printing it
    #[arg(short = 'w', long = "write", env = env::KSEAL_WRITE, value_name = "FILE")]
    pub(crate) write: Option<PathBuf>,
}
