//! `kseal unseal`, `kseal reseal` and `kseal validate`: maintenance with private keys or
//! the controller.

use std::path::PathBuf;

use clap::Args;

use super::{ControllerArgs, Format, InputFiles};
use crate::env;

pub(super) const UNSEAL_EXAMPLES: &str = "\
Examples:
  # Recover a Secret with a backed-up key pair
  kseal unseal --key keys/tls.key -f sealed-secret.yaml

  # With a backup of the controller's key Secrets
  kubectl get secret -n kseal-system -l sealedsecrets.bitnami.com/sealed-secrets-key -o yaml \\
    > keys-backup.yaml
  kseal unseal --key keys-backup.yaml -f sealed-secret.yaml";

pub(super) const RESEAL_EXAMPLES: &str = "\
Examples:
  # Re-encrypt to the backup's sealing key (marked kseal.dev/active, else the newest)
  kseal reseal --key keys-backup.yaml --in-place sealed-secret.yaml

  # To a given certificate, to stdout
  kseal reseal --key old.key --cert new.crt sealed-secret.yaml

  # By the controller of the current kubeconfig context, to its sealing key
  kseal reseal --controller --in-place clusters/prod/*.yaml

  # After a rotation: only the items sealed with an older key, in a whole repository; every
  # other byte of the files stays as it was (--dry-run lists them first)
  kseal reseal --stale --key keys-backup.yaml --cert secretsmanager://kseal/fleet clusters/";

pub(super) const VALIDATE_EXAMPLES: &str = "\
Examples:
  # Offline, with a backup of the key Secrets
  kseal validate --key keys-backup.yaml clusters/prod/*.yaml

  # Against the controller of the current kubeconfig context
  kseal validate --controller clusters/prod/*.yaml";

/// Private keys for recovery commands.
#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    /// Private keys: PEM files (PKCS #1 or PKCS #8, optionally followed by the certificate),
    /// key Secret manifests, or a `v1 List` of them (`kubectl get secret -l
    /// sealedsecrets.bitnami.com/sealed-secrets-key -o yaml`); repeat or separate with commas
    #[arg(long = "key", env = env::KSEAL_KEY, value_delimiter = ',', required = true, value_name = "FILE")]
    pub(crate) keys: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct UnsealArgs {
    #[command(flatten)]
    pub(crate) keys: KeyArgs,
    #[command(flatten)]
    pub(crate) files: InputFiles,
    /// Output format; default: the input's format
    #[arg(short = 'o', long, env = env::KSEAL_FORMAT, value_enum, ignore_case = true)]
    pub(crate) format: Option<Format>,
}

#[derive(Debug, Args)]
pub(crate) struct ResealArgs {
    /// Private keys (as for `unseal`); repeat or separate with commas
    #[arg(long = "key", env = env::KSEAL_KEY, value_delimiter = ',', value_name = "FILE")]
    pub(crate) keys: Vec<PathBuf>,
    /// Certificate (file or https URL) to re-encrypt to; default: the --key the backup marks
    /// active (`kseal.dev/active`), else the newest (with --stale, never a guess among PEM
    /// files)
    #[arg(long = "cert", env = env::KSEAL_CERT, value_name = "FILE|URL")]
    pub(crate) cert: Option<String>,
    /// Ask the controller in the cluster to re-encrypt instead (its `/v1/rotate`, through the
    /// API server; kubeseal's --re-encrypt)
    #[arg(long = "controller", env = env::KSEAL_RESEAL_CONTROLLER, conflicts_with_all = ["keys", "cert"])]
    pub(crate) use_controller: bool,
    #[command(flatten)]
    pub(crate) controller: ControllerArgs,
    /// Allow a plain http certificate URL
    #[arg(long, env = env::KSEAL_ALLOW_HTTP)]
    pub(crate) allow_http: bool,
    #[command(flatten)]
    pub(crate) files: InputFiles,
    /// Rewrite each file in place (atomically) instead of printing
    #[arg(long, env = env::KSEAL_IN_PLACE)]
    pub(crate) in_place: bool,
    // `reseal --stale`.
    /// Re-seal in place only the items sealed with a key other than the sealing key, changing
    /// no other byte of the files; FILE arguments may be directories (walked as `keys retire
    /// --check` walks them). With --controller, an object is stale when its
    /// `kseal.dev/sealing-key` annotation names another key than the controller's (one without
    /// the annotation is skipped with a warning)
    #[arg(long, env = env::KSEAL_STALE, conflicts_with = "in_place")]
    pub(crate) stale: bool,
    /// With --stale: list what would be re-sealed, write nothing
    #[arg(long, env = env::KSEAL_DRY_RUN, requires = "stale")]
    pub(crate) dry_run: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// Private keys (as for `unseal`); repeat or separate with commas
    #[arg(long = "key", env = env::KSEAL_KEY, value_delimiter = ',', value_name = "FILE")]
    pub(crate) keys: Vec<PathBuf>,
    /// Ask the controller in the cluster instead (its `/v1/verify`, through the API server)
    #[arg(long = "controller", env = env::KSEAL_VALIDATE_CONTROLLER, conflicts_with = "keys")]
    pub(crate) use_controller: bool,
    #[command(flatten)]
    pub(crate) controller: ControllerArgs,
    #[command(flatten)]
    pub(crate) files: InputFiles,
}
