//! `kseal check`: the CI gate.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::ControllerArgs;
use crate::env;

pub(super) const CHECK_EXAMPLES: &str = "\
Examples:
  # Public tier, in any CI: the fleet ring's keys from its index (pinned in .kseal.yaml)
  kseal check --cert secretsmanager://kseal/fleet clusters/

  # With certificate files: the first --cert is the active key, the others older keys
  kseal check --cert fleet-2026.crt --cert fleet-2025.crt .

  # Private tier: every item must really open (offline keys, or the cluster's controller)
  kseal check --cert fleet.crt --key keys-backup.yaml clusters/prod
  kseal check --controller clusters/prod

  # For GitHub code scanning, without the Helm charts' templates
  kseal check --cert fleet.crt --exclude 'charts/*/templates/' -o sarif . > kseal.sarif

Errors (exit 1): a document that does not parse, a scope its metadata contradicts, an item
whose RSA block fits no key of the ring, a kseal.dev/sealing-key hint naming a key the ring
does not hold (never did, or retired), a template that does not render, and (private tier) an
item that does not open. Warnings (exit 0 unless --strict): sealed with a key that is not the
active one (stale), cluster-wide where the repository's rules forbid it.";

/// Report formats of `kseal check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CheckFormat {
    /// Grouped by file, coloured on a terminal (not with NO_COLOR)
    Human,
    /// One JSON object: findings and counts
    Json,
    /// SARIF 2.1.0, for GitHub code scanning
    Sarif,
    /// JUnit XML: one test case per SealedSecret
    Junit,
}

/// When `kseal check` draws a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Progress {
    /// On a terminal (stderr), once the work takes more than about a second
    Auto,
    /// Never
    Never,
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Files and directories to check; directories are walked (symbolic links followed once,
    /// hidden entries and what .gitignore files ignore skipped) [default: .]
    #[arg(value_name = "PATH")]
    pub(crate) paths: Vec<PathBuf>,
    /// The ring's keys: certificate files or https URLs (the first is the active key, the
    /// others older keys), or a key ring (secretsmanager://PREFIX or dir://PATH: every key of
    /// its verified index and its active key); repeat or separate with commas [default: the
    /// certificates of the --key files]
    #[arg(
        long,
        env = env::KSEAL_CERT,
        value_delimiter = ',',
        value_name = "FILE|URL|RING"
    )]
    pub(crate) cert: Vec<String>,
    /// Trust anchor of a key ring given as --cert secretsmanager://… or dir://… (a kid, as
    /// `kseal keys trust` prints it); default: the pin in the nearest .kseal.yaml
    #[arg(long, env = env::KSEAL_RING_ANCHOR, value_name = "KID")]
    pub(crate) ring_anchor: Option<String>,
    /// Allow a plain http certificate URL
    #[arg(long, env = env::KSEAL_ALLOW_HTTP)]
    pub(crate) allow_http: bool,
    #[command(flatten)]
    pub(crate) controller: ControllerArgs,
    /// Private tier, offline: private keys (as for `unseal`) every item must open with;
    /// repeat or separate with commas
    #[arg(long = "key", env = env::KSEAL_KEY, value_delimiter = ',', value_name = "FILE")]
    pub(crate) keys: Vec<PathBuf>,
    /// Private tier through the controller in the cluster (its `/v1/verify`, through the API
    /// server), as `kseal validate --controller` does
    #[arg(long = "controller", env = env::KSEAL_CHECK_CONTROLLER, conflicts_with = "keys")]
    pub(crate) use_controller: bool,
    /// Report format
    #[arg(
        short = 'o',
        long,
        alias = "output",
        env = env::KSEAL_CHECK_FORMAT,
        value_enum,
        default_value = "human",
        ignore_case = true
    )]
    pub(crate) format: CheckFormat,
    /// Skip the files and directories GLOB matches (.gitignore syntax, relative to the current
    /// directory, e.g. `charts/*/templates/`); repeat or separate with commas. `excludes:` in
    /// .kseal.yaml adds its own
    #[arg(long = "exclude", env = env::KSEAL_CHECK_EXCLUDE, value_delimiter = ',', value_name = "GLOB")]
    pub(crate) excludes: Vec<String>,
    /// Warnings (stale keys, cluster-wide where forbidden) fail too (exit 1)
    #[arg(long, env = env::KSEAL_CHECK_STRICT)]
    pub(crate) strict: bool,
    /// Also walk what .gitignore files ignore
    #[arg(long, env = env::KSEAL_CHECK_NO_IGNORE)]
    pub(crate) no_ignore: bool,
    /// Progress bar on stderr
    #[arg(long, env = env::KSEAL_CHECK_PROGRESS, value_enum, default_value = "auto")]
    pub(crate) progress: Progress,
}
