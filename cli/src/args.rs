//! Command-line definitions (clap derive). Converted into validated requests by each command.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

use crate::env;

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
}

const SEAL_EXAMPLES: &str = "\
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

const SET_EXAMPLES: &str = "\
Examples:
  # Prompt for the value (not echoed) and add it as item `password`
  kseal set --cert fleet.crt sealed-secret.yaml password

  # From a pipe; --strip-newline drops the newline `echo` adds
  echo \"$API_KEY\" | kseal set --cert fleet.crt --strip-newline sealed-secret.yaml api-key";

const CERT_EXAMPLES: &str = "\
Examples:
  # Save the controller's certificate (via the Kubernetes API) for offline sealing
  kseal cert -w fleet.crt

  # From another install, or another cluster context
  kseal cert --controller-namespace kube-system --controller-name sealed-secrets-controller
  kseal cert --context prod-eu -w prod-eu.crt";

const UNSEAL_EXAMPLES: &str = "\
Examples:
  # Recover a Secret with a backed-up key pair
  kseal unseal --key keys/tls.key -f sealed-secret.yaml

  # With a backup of the controller's key Secrets
  kubectl get secret -n kseal-system -l sealedsecrets.bitnami.com/sealed-secrets-key -o yaml \\
    > keys-backup.yaml
  kseal unseal --key keys-backup.yaml -f sealed-secret.yaml";

const RESEAL_EXAMPLES: &str = "\
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

const VALIDATE_EXAMPLES: &str = "\
Examples:
  # Offline, with a backup of the key Secrets
  kseal validate --key keys-backup.yaml clusters/prod/*.yaml

  # Against the controller of the current kubeconfig context
  kseal validate --controller clusters/prod/*.yaml";

const GENERATE_EXAMPLES: &str = "\
Examples:
  # A key directory for offline sealing and recovery
  kseal keys generate --out-dir keys

  # A key Secret for the controller, straight into the cluster (the key never hits the disk)
  kseal keys generate | kubectl apply -f -";

const PUSH_EXAMPLES: &str = "\
Examples:
  # Seed a new fleet ring in AWS Secrets Manager: generates an RSA-4096 key, which seals at once
  kseal keys push --ring kseal/fleet --aws-region eu-west-1

  # The same, safe to run again (a seeding Job): does nothing once the ring has a key
  kseal keys push --ring kseal/fleet --if-empty

  # Add a key made elsewhere (kseal keys generate --out-dir, or openssl) without activating it
  kseal keys push --ring kseal/fleet --from keys/

  # Air-gapped: a ring in a directory, shipped to clusters as files
  kseal keys push --ring dir:///srv/kseal/ring";

const ACTIVATE_EXAMPLES: &str = "\
Examples:
  # Seal with a pushed key once it has been in the ring for the activation delay
  kseal keys activate --ring kseal/fleet 3f2a9c1b0d4e

  # Wait for the delay instead of failing
  kseal keys activate --ring kseal/fleet --wait 3f2a9c1b0d4e";

const ROTATE_EXAMPLES: &str = "\
Examples:
  # New key now, sealing in about an hour (every controller fetches it first)
  kseal keys rotate --ring kseal/fleet

  # Push now, activate later from CI
  kseal keys rotate --ring kseal/fleet --no-wait
  kseal keys activate --ring kseal/fleet <kid printed by rotate>";

const LIST_EXAMPLES: &str = "\
Examples:
  kseal keys list --ring kseal/fleet
  kseal keys list --ring 'secretsmanager://kseal/fleet?region=eu-west-1' -o json";

const EXPORT_CERT_EXAMPLES: &str = "\
Examples:
  # Commit the fleet certificate next to the GitOps repository
  kseal keys export-cert --ring kseal/fleet -w fleet.crt

  # Or seal straight from the ring's index (reads no private key)
  kseal seal --cert secretsmanager://kseal/fleet -f secret.yaml";

const IMPORT_EXAMPLES: &str = "\
Examples:
  # Migrate a Bitnami install's keys (the newest keeps sealing)
  kubectl get secret -n kube-system -l sealedsecrets.bitnami.com/sealed-secrets-key -o yaml \\
    > keys-backup.yaml
  kseal keys import --ring kseal/fleet keys-backup.yaml

  # The reference sample's single secret, kept in step for clusters still on ESO + Bitnami
  kseal keys import --ring kseal/fleet secretsmanager://sealed-secrets \\
    --mirror-current-to sealed-secrets";

const RETIRE_EXAMPLES: &str = "\
Examples:
  # Remove an old key once nothing in the GitOps repositories needs it
  kseal keys retire --ring kseal/fleet 3f2a9c1b0d4e --check ~/git/fleet --check ~/git/apps

The key is first removed from the index (controllers drop their copy after their
--key-source-retire-grace), then its secret is scheduled for deletion with a recovery window.";

const CONFIG_EXAMPLES: &str = "\
Examples:
  # Which rule of the nearest .kseal.yaml applies to a file, and why
  kseal config --for clusters/prod/db.yaml

  # The JSON Schema of .kseal.yaml, for editors (yaml-language-server)
  kseal config --schema > kseal-config.schema.json

.kseal.yaml is found from the current directory upwards. Its creation_rules are tried in
order and the first whose path_regex matches the output path (relative to the file's
directory) applies: its ring or cert, scope and namespace are defaults of `kseal seal`,
`create`, `set` and `reseal`; --cert, --scope and -n always win over them.
forbid_cluster_wide is a policy that no flag lifts.";

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  kseal completions bash > ~/.local/share/bash-completion/completions/kseal
  kseal completions zsh > \"${fpath[1]}/_kseal\"
  kseal completions fish > ~/.config/fish/completions/kseal.fish";

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
}

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

const GIT_EXAMPLES: &str = "\
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

const AWS_EXAMPLES: &str = "\
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
    /// active (`kseal.dev/active`), else the newest
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

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Generate an RSA key pair and a self-signed certificate (as Bitnami's controller does)
    #[command(after_help = GENERATE_EXAMPLES)]
    Generate(GenerateArgs),
    /// Show fingerprint, validity, size and subject of certificates, keys or key Secrets (PEM,
    /// key Secret manifests or `v1 List`s of them)
    Inspect(InspectArgs),
    /// Add a key to the fleet key ring (generated, or from files); the first key of a new ring
    /// seals at once, later ones after `activate`
    #[command(after_help = PUSH_EXAMPLES)]
    Push(PushArgs),
    /// Make a key of the ring the sealing key, once every controller has had time to fetch it
    #[command(after_help = ACTIVATE_EXAMPLES)]
    Activate(ActivateArgs),
    /// Generate and push a new key, then activate it after the safety delay
    #[command(after_help = ROTATE_EXAMPLES)]
    Rotate(RotateArgs),
    /// List the ring's keys: kid, fingerprint, validity and which key seals
    #[command(after_help = LIST_EXAMPLES)]
    List(ListArgs),
    /// Write the ring's sealing certificate (public) for offline sealing
    #[command(after_help = EXPORT_CERT_EXAMPLES)]
    ExportCert(ExportCertArgs),
    /// Import existing keys into the ring (Bitnami key backups, PEM files, the reference
    /// sample's single Secrets Manager secret), so a fleet migrates without re-sealing
    #[command(after_help = IMPORT_EXAMPLES)]
    Import(ImportArgs),
    /// Remove a key from the ring, after proving that no SealedSecret needs it
    #[command(after_help = RETIRE_EXAMPLES)]
    Retire(RetireArgs),
    /// Pin the ring's trust anchor in this repository's .kseal.yaml, after showing it
    #[command(after_help = TRUST_EXAMPLES)]
    Trust(TrustArgs),
    /// Sign the history of a ring written by a kseal before signed rings (the seeder, once)
    #[command(after_help = SIGN_EXAMPLES)]
    Sign(SignArgs),
}

const TRUST_EXAMPLES: &str = "Examples:
  # Show the anchor of the fleet ring and pin it in ./.kseal.yaml (commit the file)
  kseal keys trust --ring kseal/fleet
  # Check the ring against the anchor pinned already (changes nothing when it matches)
  kseal keys trust --ring kseal/fleet --check";

const SIGN_EXAMPLES: &str = "Examples:
  # As the seeder, once: sign an existing ring's index, anchored at its active key
  kseal keys sign --ring kseal/fleet
  # Then, in the GitOps repository
  kseal keys trust --ring kseal/fleet";

/// `kseal keys trust`.
#[derive(Debug, Args)]
pub(crate) struct TrustArgs {
    /// Only check that the ring verifies against the pinned anchor; write nothing
    #[arg(long, env = env::KSEAL_TRUST_CHECK)]
    pub(crate) check: bool,
    /// Where to write the pin [default: ./.kseal.yaml]
    #[arg(long, env = env::KSEAL_TRUST_FILE, value_name = "FILE")]
    pub(crate) file: Option<PathBuf>,
    /// Ask nothing (the default when standard input is not a terminal)
    #[arg(short = 'y', long, env = env::KSEAL_YES)]
    pub(crate) yes: bool,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
}

/// `kseal keys sign`.
#[derive(Debug, Args)]
pub(crate) struct SignArgs {
    /// Ask nothing (the default when standard input is not a terminal)
    #[arg(short = 'y', long, env = env::KSEAL_YES)]
    pub(crate) yes: bool,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
}

/// Where the fleet key ring lives and how to reach it.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Key ring")]
pub(crate) struct RingArgs {
    /// The key ring: a Secrets Manager prefix (`kseal/fleet`, or
    /// `secretsmanager://kseal/fleet?region=eu-west-1`) or a directory (`dir:///path/to/ring`)
    #[arg(long, env = env::KSEAL_RING, default_value = kseal_keystore::DEFAULT_RING, value_name = "RING")]
    pub(crate) ring: String,
    /// AWS region; default: the ring URL's `?region=`, then AWS_REGION, then the profile's
    /// (the controller's flag has the same name)
    #[arg(long = "aws-region", alias = "region", env = env::KSEAL_AWS_REGION, value_name = "REGION")]
    pub(crate) region: Option<String>,
    /// AWS profile of ~/.aws/config (SSO and credential_process profiles work)
    #[arg(long = "aws-profile", env = env::AWS_PROFILE, value_name = "PROFILE")]
    pub(crate) aws_profile: Option<String>,
    /// Secrets Manager endpoint URL (e.g. a local emulator); default:
    /// AWS_ENDPOINT_URL_SECRETS_MANAGER, then AWS_ENDPOINT_URL
    #[arg(long, env = env::KSEAL_AWS_ENDPOINT_URL, value_name = "URL")]
    pub(crate) endpoint_url: Option<String>,
    /// IAM role to assume with the credentials found (e.g. the fleet's seeder role)
    #[arg(long = "aws-assume-role", alias = "assume-role", env = env::KSEAL_AWS_ASSUME_ROLE, value_name = "ROLE_ARN")]
    pub(crate) assume_role: Option<String>,
    /// The ring's trust anchor (a kid, as `kseal keys trust` prints it); default: the pin in
    /// the nearest .kseal.yaml. An index whose signed history does not start there is refused
    #[arg(long, env = env::KSEAL_RING_ANCHOR, value_name = "KID")]
    pub(crate) ring_anchor: Option<String>,
    /// Accept a directory ring whose files or directories group or others may write, or whose
    /// private keys they may read (as ssh, kseal refuses them by default)
    #[arg(long, env = env::KSEAL_INSECURE_PERMS)]
    pub(crate) insecure_perms: bool,
}

/// Options of commands that write to the ring.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Writing")]
pub(crate) struct RingWriteArgs {
    /// Customer-managed KMS key for secrets kseal creates (default: the account's aws/secretsmanager key)
    #[arg(long, env = env::KSEAL_AWS_KMS_KEY_ID, value_name = "KEY_ID", value_parser = parse_kms_key_id)]
    pub(crate) kms_key_id: Option<String>,
    /// Replicate secrets kseal creates to these regions (each region's clusters read their
    /// replica); repeat or separate with commas
    #[arg(long = "replica-region", env = env::KSEAL_AWS_REPLICA_REGIONS, value_delimiter = ',', value_name = "REGION")]
    pub(crate) replica_regions: Vec<String>,
    /// Also write the active key to this single secret in the reference sample's format
    /// (`{"crt","key"}`), for clusters still on External Secrets Operator and Bitnami
    #[arg(long, env = env::KSEAL_MIRROR_CURRENT_TO, value_name = "NAME")]
    pub(crate) mirror_current_to: Option<String>,
}

/// `--yes`, on the commands that ask before they change the ring.
#[derive(Debug, Args, Clone)]
pub(crate) struct ConfirmArgs {
    /// Ask nothing (the default when standard input is not a terminal)
    #[arg(short = 'y', long, env = env::KSEAL_YES)]
    pub(crate) yes: bool,
}

/// `--yes` on a command that never asks: accepted (scripts written for older versions keep
/// working), hidden, and said to have no effect.
#[derive(Debug, Args, Clone)]
pub(crate) struct NeverAsksArgs {
    #[arg(short = 'y', long = "yes", hide = true, env = env::KSEAL_YES)]
    pub(crate) yes: bool,
}

impl NeverAsksArgs {
    /// Warns that `--yes` does nothing for `command` (given on the command line: a `KSEAL_YES`
    /// set for a whole script is meant for the commands that ask).
    pub(crate) fn warn(&self, command: &str) {
        if self.yes && std::env::var_os(env::KSEAL_YES).is_none() {
            eprintln!("warning: --yes has no effect: `{command}` never asks");
        }
    }
}

/// Size, subject and validity of generated keys.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "New keys")]
pub(crate) struct KeySpecArgs {
    /// RSA key size in bits
    #[arg(long, env = env::KSEAL_KEY_SIZE, default_value_t = 4096, value_parser = parse_key_size)]
    pub(crate) key_size: u32,
    /// Certificate common name
    #[arg(long, env = env::KSEAL_COMMON_NAME, default_value = "sealed-secret")]
    pub(crate) common_name: String,
    /// Certificate validity, as the controller's --key-ttl (e.g. 87600h: 10 years)
    #[arg(long, env = env::KSEAL_KEY_TTL, default_value = "87600h", value_parser = parse_key_ttl, value_name = "DURATION")]
    pub(crate) key_ttl: std::time::Duration,
    /// Deprecated spelling: certificate validity in days (use --key-ttl)
    #[arg(long, env = env::KSEAL_VALIDITY_DAYS, hide = true, conflicts_with = "key_ttl", value_parser = clap::value_parser!(u32).range(1..=36500))]
    pub(crate) validity_days: Option<u32>,
}

impl KeySpecArgs {
    /// How long generated certificates are valid: --key-ttl, or the deprecated --validity-days.
    pub(crate) fn validity(&self) -> std::time::Duration {
        self.validity_days.map_or(self.key_ttl, |days| {
            std::time::Duration::from_secs(u64::from(days) * 86_400)
        })
    }
}

/// A certificate validity: a duration of at least an hour and at most 100 years.
fn parse_key_ttl(text: &str) -> Result<std::time::Duration, String> {
    let ttl = parse_duration(text)?;
    let (min, max) = (3_600, 100 * 365 * 86_400);
    if !(min..=max).contains(&ttl.as_secs()) {
        return Err(format!(
            "`{text}` is not a usable certificate validity: use between 1h and 876000h (100 years)"
        ));
    }
    Ok(ttl)
}

// Own arguments come before the flattened groups: a group's help heading applies to every
// argument after it.
#[derive(Debug, Args)]
pub(crate) struct PushArgs {
    /// Push these keys instead of generating one: key directories (`tls.key` + `tls.crt`, as
    /// `kseal keys generate --out-dir` writes), PEM files, or key Secret manifests
    #[arg(long, env = env::KSEAL_FROM, value_delimiter = ',', value_name = "PATH")]
    pub(crate) from: Vec<PathBuf>,
    /// Generate and push a key only when the ring has none yet; otherwise change nothing and
    /// succeed (for seeding Jobs that may run more than once)
    #[arg(long, env = env::KSEAL_IF_EMPTY, conflicts_with = "from")]
    pub(crate) if_empty: bool,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
    #[command(flatten)]
    pub(crate) write: RingWriteArgs,
    #[command(flatten)]
    pub(crate) never_asks: NeverAsksArgs,
    #[command(flatten)]
    pub(crate) spec: KeySpecArgs,
}

/// When a pushed key may seal.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Activation")]
pub(crate) struct DelayArgs {
    /// Activate without waiting: only when every controller already has the key (a key
    /// Secret in each cluster's kseal-system carries its kid in the `kseal.dev/kid`
    /// annotation), or the fleet is brand new
    #[arg(long, env = env::KSEAL_NOW)]
    pub(crate) now: bool,
    /// How long a key must have been in the ring before it may seal: at least the
    /// controllers' --key-source-interval plus its 10 % jitter
    #[arg(long, env = env::KSEAL_ACTIVATION_DELAY, default_value = "66m", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) delay: std::time::Duration,
}

impl DelayArgs {
    /// The delay to wait before a key may seal: none with `--now`.
    pub(crate) fn effective(&self) -> std::time::Duration {
        if self.now {
            std::time::Duration::ZERO
        } else {
            self.delay
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ActivateArgs {
    /// The key: its kid, at least 6 leading characters of it, or its SHA256: fingerprint
    #[arg(value_name = "KID")]
    pub(crate) key: String,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
    #[command(flatten)]
    pub(crate) write: RingWriteArgs,
    #[command(flatten)]
    pub(crate) confirm: ConfirmArgs,
    #[command(flatten)]
    pub(crate) delay: DelayArgs,
    /// Wait until the key may be activated instead of failing
    #[arg(long, env = env::KSEAL_WAIT)]
    pub(crate) wait: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RotateArgs {
    #[command(flatten)]
    pub(crate) ring: RingArgs,
    #[command(flatten)]
    pub(crate) write: RingWriteArgs,
    #[command(flatten)]
    pub(crate) confirm: ConfirmArgs,
    #[command(flatten)]
    pub(crate) delay: DelayArgs,
    /// Push the new key and stop; activate it later with `kseal keys activate`
    #[arg(long, env = env::KSEAL_NO_WAIT, conflicts_with = "now")]
    pub(crate) no_wait: bool,
    #[command(flatten)]
    pub(crate) spec: KeySpecArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Output: a table, or the index as JSON (public data only)
    #[arg(short = 'o', long = "format", alias = "output", env = env::KSEAL_LIST_OUTPUT, value_enum, default_value = "table", value_name = "FORMAT")]
    pub(crate) output: ListOutput,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
}

/// `keys list` output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ListOutput {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct ExportCertArgs {
    /// Which key's certificate; default: the sealing key's
    #[arg(long = "kid", env = env::KSEAL_KID, value_name = "KID")]
    pub(crate) key: Option<String>,
    /// Write to this file (atomically) instead of stdout
    #[arg(short = 'w', long = "write", env = env::KSEAL_WRITE, value_name = "FILE")]
    pub(crate) write: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// Where the keys are: key Secret backups (`kubectl get secret -l
    /// sealedsecrets.bitnami.com/sealed-secrets-key -o yaml`), PEM files, key directories, or
    /// `secretsmanager://NAME[?region=…]` (the reference sample's single `{"crt","key"}` secret)
    #[arg(value_name = "SOURCE", required = true)]
    pub(crate) sources: Vec<String>,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
    #[command(flatten)]
    pub(crate) write: RingWriteArgs,
    #[command(flatten)]
    pub(crate) never_asks: NeverAsksArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RetireArgs {
    /// The key: its kid, at least 6 leading characters of it, or its SHA256: fingerprint
    #[arg(value_name = "KID")]
    pub(crate) key: String,
    /// Directories or files of SealedSecrets (your GitOps repositories): the key is retired
    /// only if every item there opens without it
    #[arg(long, env = env::KSEAL_CHECK, value_delimiter = ',', required = true, value_name = "PATH")]
    pub(crate) check: Vec<PathBuf>,
    /// Days Secrets Manager keeps the deleted key secret recoverable (7 to 30)
    #[arg(long, env = env::KSEAL_RECOVERY_DAYS, default_value_t = 30, value_parser = clap::value_parser!(u32).range(7..=30))]
    pub(crate) recovery_days: u32,
    /// Retire the key even when the --check paths hold no SealedSecret at all (by default
    /// that is refused: it usually means a wrong path)
    #[arg(long, env = env::KSEAL_ALLOW_NONE)]
    pub(crate) allow_none: bool,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
    #[command(flatten)]
    pub(crate) write: RingWriteArgs,
    #[command(flatten)]
    pub(crate) confirm: ConfirmArgs,
}

#[derive(Debug, Args)]
pub(crate) struct GenerateArgs {
    /// Directory to write `tls.key` (PKCS #1, mode 0600) and `tls.crt` into; without it, a
    /// key Secret manifest (as the controller stores keys) is printed to stdout, never to a
    /// terminal
    #[arg(long, env = env::KSEAL_OUT_DIR, value_name = "DIR")]
    pub(crate) out_dir: Option<PathBuf>,
    /// Namespace of the printed key Secret (without --out-dir)
    #[arg(short = 'n', long, env = env::KSEAL_NAMESPACE, default_value = "kseal-system")]
    pub(crate) namespace: String,
    /// Overwrite an existing key in the directory
    #[arg(long, env = env::KSEAL_FORCE)]
    pub(crate) force: bool,
    #[command(flatten)]
    pub(crate) spec: KeySpecArgs,
}

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    // PEM certificates or keys, key Secret manifests, or `v1 List`s of key Secrets.
    #[command(flatten)]
    pub(crate) files: InputFiles,
}

#[derive(Debug, Args)]
pub(crate) struct QuickstartArgs {
    /// Directory for the demo's key, sample Secret and results
    #[arg(long, env = env::KSEAL_QUICKSTART_DIR, default_value = "kseal-quickstart")]
    pub(crate) dir: PathBuf,
}

// `kseal config` (creation rules).
#[derive(Debug, Args)]
pub(crate) struct ConfigArgs {
    /// Output path to show the creation rule for (as -w, --merge-into or a `set` FILE would
    /// name it); without it, the rule for output to stdout
    #[arg(long = "for", env = env::KSEAL_CONFIG_FOR, value_name = "PATH")]
    pub(crate) for_path: Option<PathBuf>,
    /// Print the JSON Schema of .kseal.yaml instead (for editors)
    #[arg(long, env = env::KSEAL_CONFIG_SCHEMA, conflicts_with = "for_path")]
    pub(crate) schema: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// Shell to complete for
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
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

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    kseal_api::duration::parse(text)
}

/// A KMS key as Secrets Manager takes it: a key id, `alias/NAME`, or the ARN of either. A
/// copied placeholder (`key/…`) is refused here rather than by AWS halfway through a write.
fn parse_kms_key_id(text: &str) -> Result<String, String> {
    let usage = "use a key id (1234abcd-12ab-34cd-56ef-1234567890ab or mrk-…), alias/NAME, or \
                 arn:aws:kms:REGION:ACCOUNT:key/ID";
    if let Some(bad) = text.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!(
            "`{text}` is not a KMS key: it contains {bad:?} (a placeholder left in?); {usage}"
        ));
    }
    let id_ok = |id: &str| {
        let hex = id.strip_prefix("mrk-").unwrap_or(id);
        !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
    };
    let alias_ok = |alias: &str| {
        !alias.is_empty()
            && alias
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/_-".contains(c))
    };
    let resource_ok = |resource: &str| match resource.split_once('/') {
        Some(("key", id)) => id_ok(id),
        Some(("alias", alias)) => alias_ok(alias),
        _ => false,
    };
    let ok = if let Some(rest) = text.strip_prefix("arn:") {
        let parts: Vec<&str> = rest.splitn(5, ':').collect();
        matches!(parts.as_slice(), [partition, "kms", region, account, resource]
            if partition.starts_with("aws")
                && !region.is_empty()
                && account.len() == 12
                && account.chars().all(|c| c.is_ascii_digit())
                && resource_ok(resource))
    } else if text.starts_with("alias/") {
        resource_ok(text)
    } else {
        id_ok(text)
    };
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` is not a KMS key: {usage}"))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }

    #[test]
    fn kms_keys_take_the_forms_secrets_manager_takes_and_refuse_placeholders() {
        for good in [
            "1234abcd-12ab-34cd-56ef-1234567890ab",
            "mrk-1234abcd12ab34cd56ef1234567890ab",
            "alias/kseal-ring",
            "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            "arn:aws-us-gov:kms:us-gov-west-1:111122223333:alias/kseal",
        ] {
            assert_eq!(parse_kms_key_id(good).as_deref(), Ok(good), "{good}");
        }
        let placeholder = parse_kms_key_id("arn:aws:kms:eu-west-1:111122223333:key/…").unwrap_err();
        assert!(placeholder.contains("placeholder"), "{placeholder}");
        for bad in [
            "",
            "arn:aws:kms:eu-west-1:111122223333:key/",
            "arn:aws:kms:eu-west-1:1111:key/1234abcd",
            "arn:aws:s3:eu-west-1:111122223333:key/1234abcd",
            "alias/",
            "my key",
            "kms-key",
        ] {
            let e = parse_kms_key_id(bad).unwrap_err();
            assert!(e.contains("is not a KMS key"), "{bad}: {e}");
        }
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

// `kseal check` (its own block).

const CHECK_EXAMPLES: &str = "\
Examples:
  # Public tier, in any CI: the fleet ring's keys from its index (pinned in .kseal.yaml)
  kseal check --cert secretsmanager://kseal/fleet clusters/

  # With certificate files: the first --cert is the active key, the others older keys
  kseal check --cert fleet-2026.crt --cert fleet-2025.crt .

  # Private tier: every item must really open (offline keys, or the cluster's controller)
  kseal check --cert fleet.crt --key keys-backup.yaml clusters/prod
  kseal check --controller clusters/prod

  # For GitHub code scanning
  kseal check --cert fleet.crt --format sarif . > kseal.sarif

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
    #[arg(long, env = env::KSEAL_CHECK_FORMAT, value_enum, default_value = "human", ignore_case = true)]
    pub(crate) format: CheckFormat,
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
