//! `kseal create git-credentials|aws-credentials`: the bootstrap Secrets.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};

use super::{CertArgs, Format, parse_scope};
use crate::env;

/// Output options shared by commands that produce one SealedSecret.
#[derive(Debug, Args)]
pub(crate) struct OutArgs {
    /// Write to FILE (atomically, only on success) instead of stdout
    #[arg(short = 'w', long = "write", env = env::KSEAL_WRITE, value_name = "FILE")]
    pub(crate) write: Option<PathBuf>,
    /// Output format [default: yaml, or json for a .json -w file]
    #[arg(short = 'o', long, env = env::KSEAL_FORMAT, value_enum, ignore_case = true)]
    pub(crate) format: Option<Format>,
    /// Name of the Secret [default: what the consumer expects, see above]
    #[arg(long, env = env::KSEAL_NAME)]
    pub(crate) name: Option<String>,
    /// Namespace of the Secret [default: what the consumer expects, see above]
    #[arg(short = 'n', long, env = env::KSEAL_NAMESPACE)]
    pub(crate) namespace: Option<String>,
    /// Scope the Secret is sealed for [default: the .kseal.yaml creation rule's, else strict]
    #[arg(long, env = env::KSEAL_SCOPE, value_parser = parse_scope)]
    pub(crate) scope: Option<kseal_api::Scope>,
}

#[derive(Debug, Subcommand)]
// Boxed: the credential helpers have many flags, the other commands few (clippy
// large_enum_variant).
pub(crate) enum CreateCommand {
    /// Git credentials for Flux (GitRepository secretRef) or Argo CD (repository secret)
    #[command(after_help = GIT_EXAMPLES)]
    GitCredentials(Box<GitArgs>),
    /// AWS credentials for Crossplane's ProviderConfig or External Secrets Operator
    #[command(after_help = AWS_EXAMPLES)]
    AwsCredentials(Box<AwsArgs>),
}

pub(super) const GIT_EXAMPLES: &str = "\
Defaults: Flux reads `identity`, `identity.pub`, `known_hosts` and, for a protected key,
`password` (SSH), or `username`/`password` or `bearerToken`, plus optional `ca.crt` and
`tls.crt`/`tls.key` (HTTPS), or `githubAppID`, `githubAppInstallationID`,
`githubAppPrivateKey`, `githubAppBaseURL` (GitHub App, with `.spec.provider: github`) from
Secret flux-system/flux-system (the bootstrap GitRepository's secretRef). Argo CD reads
labelled Secrets in namespace argocd: `type` (always `git`), `url`, and `sshPrivateKey`,
`username`/`password`, `bearerToken` or `githubAppID`/`githubAppInstallationID`/
`githubAppPrivateKey`/`githubAppEnterpriseBaseUrl`, plus optional `tlsClientCertData`/
`tlsClientCertKey`, `project`, `name`, `insecure` and `enableLfs`; the Secret's name defaults to
one derived from the URL. Argo CD takes CA certificates from the argocd-tls-certs-cm ConfigMap
and SSH host keys from argocd-ssh-known-hosts-cm, never from repository Secrets.
Plaintext never touches the disk: a generated key exists only in memory and in the sealed
output; its public half is printed on stderr (and saved with --public-key-out) so you can
register it as a deploy key.

Examples:
  # Flux over SSH with a new ed25519 deploy key
  ssh-keyscan github.com > known_hosts
  kseal create git-credentials --cert fleet.crt --generate-key --known-hosts-file known_hosts \\
    --public-key-out deploy-key.pub -w clusters/prod/flux-system/git-credentials.yaml

  # Flux over SSH with an existing passphrase-protected key (passphrase prompted, not echoed)
  kseal create git-credentials --cert fleet.crt --identity-file ~/.ssh/flux_ed25519 \\
    --ssh-key-passphrase-prompt --known-hosts-file known_hosts

  # Flux over HTTPS with a token (prompted, not echoed)
  kseal create git-credentials --cert fleet.crt --username git --password-prompt

  # Flux over HTTPS to a server with a private CA, with a mutual TLS client certificate
  kseal create git-credentials --cert fleet.crt --url https://git.internal/acme/fleet.git \\
    --ca-file internal-ca.pem --client-cert client.crt --client-key client.key \\
    --username flux --password-stdin < token.txt

  # Flux with a GitHub App (the GitRepository needs `provider: github`)
  kseal create git-credentials --cert fleet.crt --github-app-id 123456 \\
    --github-app-installation-id 7890123 --github-app-private-key app.private-key.pem

  # Argo CD repository over SSH with an existing key
  kseal create git-credentials --cert fleet.crt --for argocd \\
    --url git@github.com:acme/fleet.git --identity-file ~/.ssh/argocd_ed25519

  # Argo CD repository in project `platform`, with a display name and Git LFS
  kseal create git-credentials --cert fleet.crt --for argocd --project platform \\
    --repo-name fleet --enable-lfs --url https://github.com/acme/fleet.git \\
    --username x-access-token --password-prompt

  # Argo CD repository on a test server whose certificate cannot be verified
  kseal create git-credentials --cert fleet.crt --for argocd --insecure \\
    --url https://git.test.internal/acme/fleet.git --username argocd --password-prompt

  # Argo CD credential template for every repository under a prefix
  kseal create git-credentials --cert fleet.crt --for argocd --argocd-type repo-creds \\
    --url https://github.com/acme --username x-access-token --password-stdin < token.txt

  # Argo CD credential template with a GitHub App on GitHub Enterprise Server
  kseal create git-credentials --cert fleet.crt --for argocd --argocd-type repo-creds \\
    --url https://ghe.example.com/acme --github-app-id 42 --github-app-installation-id 7 \\
    --github-app-private-key app.pem --github-app-enterprise-base-url https://ghe.example.com/api/v3";

pub(super) const AWS_EXAMPLES: &str = "\
Defaults: Crossplane's AWS ProviderConfig (credentials.source: Secret) reads key `credentials`
(an INI file with a [default] profile) of Secret crossplane-system/aws-credentials. The
External Secrets Operator form (--for eso) has keys `access-key`, `secret-access-key` and
`session-token`, as in ESO's SecretStore auth.secretRef, in Secret external-secrets/awssm-secret.
The keys come from exactly one source you name, never implicitly from your own shell:
--profile NAME (a profile of ~/.aws/credentials or $AWS_SHARED_CREDENTIALS_FILE),
--access-key-id ID with the secret key from --secret-access-key-stdin, --secret-access-key-file
or a hidden prompt, or --from-env (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_SESSION_TOKEN).

Examples:
  kseal create aws-credentials --cert fleet.crt --profile crossplane -w aws-credentials.yaml
  kseal create aws-credentials --cert fleet.crt --access-key-id AKIA... \\
    --secret-access-key-stdin < crossplane-secret-key.txt
  kseal create aws-credentials --cert fleet.crt --for eso -n team-a --from-env";

/// Who consumes the git credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum GitConsumer {
    /// Flux source-controller (GitRepository `.spec.secretRef`)
    Flux,
    /// Argo CD repository or credential-template Secret
    Argocd,
}

/// Argo CD secret types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ArgocdType {
    /// One repository (`argocd.argoproj.io/secret-type: repository`)
    Repository,
    /// Credentials for every repository under a URL prefix (`repo-creds`)
    RepoCreds,
}

#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("github_app")
        .args([
            "github_app_id",
            "github_app_installation_id",
            "github_app_private_key",
            "github_app_enterprise_base_url",
        ])
        .multiple(true)
        .conflicts_with_all([
            "identity_file",
            "generate_key",
            "username",
            "password",
            "password_prompt",
            "password_stdin",
            "bearer_token",
        ])
))]
#[command(group(
    ArgGroup::new("ssh_key_passphrase_source")
        .args([
            "ssh_key_passphrase",
            "ssh_key_passphrase_prompt",
            "ssh_key_passphrase_stdin",
        ])
        .multiple(false)
        .requires("identity_file")
        .conflicts_with("generate_key")
))]
pub(crate) struct GitArgs {
    #[command(flatten)]
    pub(crate) cert: CertArgs,
    #[command(flatten)]
    pub(crate) out: OutArgs,
    /// Who reads the Secret
    #[arg(long = "for", env = env::KSEAL_GIT_FOR, value_enum, default_value = "flux")]
    pub(crate) consumer: GitConsumer,
    /// Repository URL (required for Argo CD; for Flux it only checks the credential kind)
    #[arg(long, env = env::KSEAL_GIT_URL)]
    pub(crate) url: Option<String>,

    /// SSH private key file (OpenSSH or PEM); `FILE.pub` is used for `identity.pub` when
    /// present. Flux accepts a passphrase-protected key (see --ssh-key-passphrase-prompt)
    #[arg(
        long,
        env = env::KSEAL_IDENTITY_FILE,
        value_name = "FILE",
        conflicts_with = "generate_key",
        help_heading = "SSH"
    )]
    pub(crate) identity_file: Option<PathBuf>,
    /// Generate a new ed25519 SSH key in memory (no passphrase)
    #[arg(long, env = env::KSEAL_GENERATE_KEY, help_heading = "SSH")]
    pub(crate) generate_key: bool,
    /// Comment of the generated key
    #[arg(
        long,
        env = env::KSEAL_KEY_COMMENT,
        default_value = "kseal-deploy-key",
        help_heading = "SSH"
    )]
    pub(crate) key_comment: String,
    /// Write the public key (never the private one) to FILE
    #[arg(long, env = env::KSEAL_PUBLIC_KEY_OUT, value_name = "FILE", help_heading = "SSH")]
    pub(crate) public_key_out: Option<PathBuf>,
    /// known_hosts file (e.g. from `ssh-keyscan HOST`); required by Flux for SSH
    #[arg(long, env = env::KSEAL_KNOWN_HOSTS_FILE, value_name = "FILE", help_heading = "SSH")]
    pub(crate) known_hosts_file: Option<PathBuf>,
    /// Passphrase of a protected --identity-file, stored for Flux as item `password` (prefer
    /// --ssh-key-passphrase-prompt or --ssh-key-passphrase-stdin: flags show up in `ps`)
    #[arg(
        long,
        env = env::KSEAL_SSH_KEY_PASSPHRASE,
        hide_env_values = true,
        value_name = "PASSPHRASE",
        help_heading = "SSH"
    )]
    pub(crate) ssh_key_passphrase: Option<String>,
    /// Prompt for the passphrase of --identity-file (not echoed); also asked, without this
    /// flag, when the key is protected and stdin is a terminal
    #[arg(long, env = env::KSEAL_SSH_KEY_PASSPHRASE_PROMPT, help_heading = "SSH")]
    pub(crate) ssh_key_passphrase_prompt: bool,
    /// Read the passphrase of --identity-file from stdin
    #[arg(long, env = env::KSEAL_SSH_KEY_PASSPHRASE_STDIN, help_heading = "SSH")]
    pub(crate) ssh_key_passphrase_stdin: bool,

    /// HTTPS user name
    #[arg(long, env = env::KSEAL_GIT_USERNAME, help_heading = "HTTPS")]
    pub(crate) username: Option<String>,
    /// HTTPS password or token (prefer --password-prompt or --password-stdin: flags show up
    /// in `ps` and shell history)
    #[arg(
        long,
        env = env::KSEAL_GIT_PASSWORD,
        hide_env_values = true,
        help_heading = "HTTPS"
    )]
    pub(crate) password: Option<String>,
    /// Prompt for the password (not echoed)
    #[arg(long, env = env::KSEAL_PASSWORD_PROMPT, help_heading = "HTTPS")]
    pub(crate) password_prompt: bool,
    /// Read the password (or with --bearer-token, the token) from stdin
    #[arg(long, env = env::KSEAL_PASSWORD_STDIN, help_heading = "HTTPS")]
    pub(crate) password_stdin: bool,
    /// Use an HTTPS bearer token instead of user name and password (value from --password,
    /// --password-prompt or --password-stdin)
    #[arg(long, env = env::KSEAL_BEARER_TOKEN, help_heading = "HTTPS")]
    pub(crate) bearer_token: bool,
    /// PEM CA certificate(s) the Git server's TLS certificate chains to; Flux only, as item
    /// `ca.crt` (Argo CD reads CAs from the argocd-tls-certs-cm ConfigMap)
    #[arg(long, env = env::KSEAL_CA_FILE, value_name = "FILE", help_heading = "HTTPS")]
    pub(crate) ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (Flux `tls.crt`, Argo CD `tlsClientCertData`)
    #[arg(
        long,
        env = env::KSEAL_CLIENT_CERT,
        value_name = "FILE",
        requires = "client_key",
        help_heading = "HTTPS"
    )]
    pub(crate) client_cert: Option<PathBuf>,
    /// PEM private key of --client-cert, unencrypted (Flux `tls.key`, Argo CD
    /// `tlsClientCertKey`)
    #[arg(
        long,
        env = env::KSEAL_CLIENT_KEY,
        value_name = "FILE",
        requires = "client_cert",
        help_heading = "HTTPS"
    )]
    pub(crate) client_key: Option<PathBuf>,

    /// GitHub App id
    #[arg(
        long,
        env = env::KSEAL_GITHUB_APP_ID,
        value_name = "ID",
        value_parser = clap::value_parser!(u64).range(1..),
        requires_all = ["github_app_installation_id", "github_app_private_key"],
        help_heading = "GitHub App (HTTPS)"
    )]
    pub(crate) github_app_id: Option<u64>,
    /// Installation id of the GitHub App in the organisation or account
    #[arg(
        long,
        env = env::KSEAL_GITHUB_APP_INSTALLATION_ID,
        value_name = "ID",
        value_parser = clap::value_parser!(u64).range(1..),
        requires = "github_app_id",
        help_heading = "GitHub App (HTTPS)"
    )]
    pub(crate) github_app_installation_id: Option<u64>,
    /// The GitHub App's private key (PEM, as downloaded from GitHub)
    #[arg(
        long,
        env = env::KSEAL_GITHUB_APP_PRIVATE_KEY,
        value_name = "FILE",
        requires = "github_app_id",
        help_heading = "GitHub App (HTTPS)"
    )]
    pub(crate) github_app_private_key: Option<PathBuf>,
    /// API URL of GitHub Enterprise Server (e.g. `https://ghe.example.com/api/v3`); default:
    /// github.com
    #[arg(
        long,
        env = env::KSEAL_GITHUB_APP_ENTERPRISE_BASE_URL,
        value_name = "URL",
        requires = "github_app_id",
        help_heading = "GitHub App (HTTPS)"
    )]
    pub(crate) github_app_enterprise_base_url: Option<String>,

    /// Argo CD Secret type
    #[arg(
        long,
        env = env::KSEAL_ARGOCD_TYPE,
        value_enum,
        default_value = "repository",
        help_heading = "Argo CD"
    )]
    pub(crate) argocd_type: ArgocdType,
    /// Argo CD project the repository belongs to (item `project`)
    #[arg(long, env = env::KSEAL_ARGOCD_PROJECT, value_name = "NAME", help_heading = "Argo CD")]
    pub(crate) project: Option<String>,
    /// Display name of the repository in Argo CD (item `name`; not the Secret's --name)
    #[arg(
        long,
        env = env::KSEAL_ARGOCD_REPO_NAME,
        value_name = "NAME",
        help_heading = "Argo CD"
    )]
    pub(crate) repo_name: Option<String>,
    /// Skip the server's TLS certificate check (HTTPS) or host key check (SSH): item
    /// `insecure: "true"`. Anyone on the network path can then impersonate the server
    #[arg(long, env = env::KSEAL_ARGOCD_INSECURE, help_heading = "Argo CD")]
    pub(crate) insecure: bool,
    /// Fetch Git LFS objects (item `enableLfs: "true"`)
    #[arg(long, env = env::KSEAL_ARGOCD_ENABLE_LFS, help_heading = "Argo CD")]
    pub(crate) enable_lfs: bool,
}

/// Who consumes the AWS credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AwsConsumer {
    /// Crossplane AWS ProviderConfig: INI under key `credentials`
    Crossplane,
    /// External Secrets Operator: `access-key`, `secret-access-key`, `session-token`
    Eso,
}

#[derive(Debug, Args)]
pub(crate) struct AwsArgs {
    #[command(flatten)]
    pub(crate) cert: CertArgs,
    #[command(flatten)]
    pub(crate) out: OutArgs,
    /// Who reads the Secret
    #[arg(long = "for", env = env::KSEAL_AWS_FOR, value_enum, default_value = "crossplane")]
    pub(crate) consumer: AwsConsumer,
    /// Read the keys from this profile of the AWS shared credentials file
    #[arg(long, env = env::KSEAL_AWS_PROFILE, value_name = "NAME")]
    pub(crate) profile: Option<String>,
    /// Take the keys from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN
    /// (never implicit: in a seeding shell those are usually your own keys)
    #[arg(long, env = env::KSEAL_AWS_FROM_ENV, conflicts_with_all = ["profile", "access_key_id"])]
    pub(crate) from_env: bool,
    /// Access key id; the secret key then comes from --secret-access-key-stdin,
    /// --secret-access-key-file or a hidden prompt
    #[arg(long, env = env::KSEAL_AWS_ACCESS_KEY_ID, value_name = "ID", conflicts_with = "profile")]
    pub(crate) access_key_id: Option<String>,
    /// Read the secret access key from standard input (one trailing newline is dropped)
    #[arg(long, env = env::KSEAL_AWS_SECRET_ACCESS_KEY_STDIN, requires = "access_key_id")]
    pub(crate) secret_access_key_stdin: bool,
    /// Read the secret access key from this file (one trailing newline is dropped)
    #[arg(
        long,
        env = env::KSEAL_AWS_SECRET_ACCESS_KEY_FILE,
        value_name = "FILE",
        requires = "access_key_id",
        conflicts_with = "secret_access_key_stdin"
    )]
    pub(crate) secret_access_key_file: Option<PathBuf>,
    /// Deprecated: a secret on the command line is visible in `ps` and shell history; use
    /// --secret-access-key-stdin or --secret-access-key-file
    #[arg(
        long,
        hide = true,
        env = env::KSEAL_AWS_SECRET_ACCESS_KEY,
        hide_env_values = true,
        requires = "access_key_id",
        conflicts_with_all = ["secret_access_key_stdin", "secret_access_key_file"]
    )]
    pub(crate) secret_access_key: Option<String>,
    /// Session token, for temporary (ASIA…) keys given with --access-key-id
    #[arg(
        long,
        env = env::KSEAL_AWS_SESSION_TOKEN,
        hide_env_values = true,
        requires = "access_key_id"
    )]
    pub(crate) session_token: Option<String>,
}
