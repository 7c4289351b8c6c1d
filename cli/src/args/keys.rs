//! `kseal keys generate|inspect` and the fleet key ring commands (`push`, `activate`,
//! `rotate`, `list`, `export-cert`, `import`, `retire`, `trust`, `sign`).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::{InputFiles, parse_duration};
use crate::env;

pub(super) const GENERATE_EXAMPLES: &str = "\
Examples:
  # A key directory for offline sealing and recovery
  kseal keys generate --out-dir keys

  # A key Secret for the controller, straight into the cluster (the key never hits the disk)
  kseal keys generate | kubectl apply -f -";

pub(super) const PUSH_EXAMPLES: &str = "\
Examples:
  # Seed a new fleet ring in AWS Secrets Manager: generates an RSA-4096 key, which seals at once
  kseal keys push --ring kseal/fleet --aws-region eu-west-1

  # The same, safe to run again (a seeding Job): does nothing once the ring has a key
  kseal keys push --ring kseal/fleet --if-empty

  # Add a key made elsewhere (kseal keys generate --out-dir, or openssl) without activating it
  kseal keys push --ring kseal/fleet --from keys/

  # Air-gapped: a ring in a directory, shipped to clusters as files
  kseal keys push --ring dir:///srv/kseal/ring";

pub(super) const ACTIVATE_EXAMPLES: &str = "\
Examples:
  # Seal with a pushed key once it has been in the ring for the activation delay
  kseal keys activate --ring kseal/fleet 3f2a9c1b0d4e

  # Wait for the delay instead of failing
  kseal keys activate --ring kseal/fleet --wait 3f2a9c1b0d4e

  # Seal with it once every cluster reports holding it (kseal fleet status), at most an hour
  kseal keys activate --ring kseal/fleet --wait-for all --timeout 1h 3f2a9c1b0d4e";

pub(super) const ROTATE_EXAMPLES: &str = "\
Examples:
  # New key now, sealing in about an hour (every controller fetches it first)
  kseal keys rotate --ring kseal/fleet

  # Activate as soon as every cluster reports holding the new key, instead of after a delay
  kseal keys rotate --ring kseal/fleet --wait-for all

  # ... or 95 % of the clusters, or named ones (a canary first)
  kseal keys rotate --ring kseal/fleet --wait-for 95%
  kseal keys rotate --ring kseal/fleet --wait-for canary-eu,canary-us --timeout 10m

  # Push now, activate later from CI
  kseal keys rotate --ring kseal/fleet --no-wait
  kseal keys activate --ring kseal/fleet <kid printed by rotate>";

pub(super) const LIST_EXAMPLES: &str = "\
Examples:
  kseal keys list --ring kseal/fleet
  kseal keys list --ring 'secretsmanager://kseal/fleet?region=eu-west-1' -o json";

pub(super) const EXPORT_CERT_EXAMPLES: &str = "\
Examples:
  # Commit the fleet certificate next to the GitOps repository
  kseal keys export-cert --ring kseal/fleet -w fleet.crt

  # Or seal straight from the ring's index (reads no private key)
  kseal seal --cert secretsmanager://kseal/fleet -f secret.yaml";

pub(super) const IMPORT_EXAMPLES: &str = "\
Examples:
  # Migrate a Bitnami install's keys (the newest keeps sealing)
  kubectl get secret -n kube-system -l sealedsecrets.bitnami.com/sealed-secrets-key -o yaml \\
    > keys-backup.yaml
  kseal keys import --ring kseal/fleet keys-backup.yaml

  # The reference sample's single secret, kept in step for clusters still on ESO + Bitnami
  kseal keys import --ring kseal/fleet secretsmanager://sealed-secrets \\
    --mirror-current-to sealed-secrets";

pub(super) const RETIRE_EXAMPLES: &str = "\
Examples:
  # Remove an old key once nothing in the GitOps repositories needs it
  kseal keys retire --ring kseal/fleet 3f2a9c1b0d4e --check ~/git/fleet --check ~/git/apps

  # In a script: run every check first, then retire without the question
  kseal keys retire --ring kseal/fleet 3f2a9c1b0d4e --check . --dry-run
  kseal keys retire --ring kseal/fleet 3f2a9c1b0d4e --check . --yes

The key is first removed from the index (controllers drop their copy after their
--key-source-retire-grace), then its secret is scheduled for deletion with a recovery window.
Retiring is refused while a cluster that reported recently (kseal fleet status) still opens
SealedSecrets with the key; --force retires it anyway.";

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
    /// Hand the ring's history to a dedicated root key that no cluster holds (AWS KMS or an
    /// offline file): the seeder, once; then pin the root with `kseal keys trust`
    #[command(name = "re-root", after_help = REROOT_EXAMPLES)]
    ReRoot(ReRootArgs),
    /// Sign the ring's index again with a new expiry, changing nothing else (the seeder, on a
    /// schedule: readers refuse an expired index)
    #[command(after_help = REFRESH_EXAMPLES)]
    Refresh(RefreshArgs),
    /// Generate an offline root key file (RSA-4096, mode 0600) for `re-root --root file://…`
    #[command(name = "new-root", after_help = REROOT_EXAMPLES)]
    NewRoot(NewRootArgs),
    /// List every SealedSecret item sealed to a key, in the tree and in every commit: the
    /// values to change at their source after the key (or a cluster holding it) is compromised
    #[command(after_help = EXPOSURE_EXAMPLES)]
    Exposure(ExposureArgs),
    /// Write the Kyverno policy (or its ConfigMap) that admits only SealedSecrets sealed with
    /// a key of the ring, from the ring's verified index
    #[command(name = "export-policy", after_help = EXPORT_POLICY_EXAMPLES)]
    ExportPolicy(ExportPolicyArgs),
}

pub(super) const EXPORT_POLICY_EXAMPLES: &str = "\
Examples:
  # The ConfigMap of fingerprints and the ValidatingPolicy (Kyverno 1.17+) for the fleet ring
  kseal keys export-policy --ring kseal/fleet | kubectl apply -f -

  # After each push, rotate or retire (e.g. in the seeder's job), kept in Git
  kseal keys export-policy --ring kseal/fleet -o clusters/all/kyverno-kseal.yaml

  # One policy per ring, each bound to its namespaces
  kseal keys export-policy --ring kseal/prod --name prod -n payments -n orders
  kseal keys export-policy --ring kseal/dev --name dev -n sandbox

  # Only the ConfigMap, for the ClusterPolicy forms (Kyverno 1.13 to 1.16)
  kseal keys export-policy --ring kseal/fleet --format configmap

Every key of the ring is listed: the sealing key, the keys pushed but not yet active (so that
values sealed right after an activation are admitted before every cluster's copy is updated)
and the older keys that still open what they sealed. Retired keys are not. The index must be
signed and verify against the ring's pin (.kseal.yaml or --ring-anchor).";

/// `--format` of `kseal keys export-policy`.
const KSEAL_POLICY_FORMAT: &str = "KSEAL_POLICY_FORMAT";
/// `--namespace` of `kseal keys export-policy`.
const KSEAL_POLICY_NAMESPACES: &str = "KSEAL_POLICY_NAMESPACES";
/// `--name` of `kseal keys export-policy`.
const KSEAL_POLICY_NAME: &str = "KSEAL_POLICY_NAME";
/// `--output` of `kseal keys export-policy`.
const KSEAL_POLICY_OUTPUT: &str = "KSEAL_POLICY_OUTPUT";

/// What `kseal keys export-policy` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PolicyFormat {
    /// The ConfigMap of fingerprints and the ValidatingPolicy that reads it (Kyverno 1.17 or
    /// later), ready for `kubectl apply -f`
    Policy,
    /// Only the ConfigMap kyverno/kseal-NAME-keys, as the examples' fleet-keys.yaml (for the
    /// ClusterPolicy forms, Kyverno 1.13 to 1.16)
    Configmap,
    /// Only the fingerprints, as a JSON array (the ConfigMap's `fingerprints` value)
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct ExportPolicyArgs {
    /// What to write
    #[arg(long, env = KSEAL_POLICY_FORMAT, value_enum, default_value = "policy", ignore_case = true)]
    pub(crate) format: PolicyFormat,
    /// Judge SealedSecrets only in these namespaces (repeat or separate with commas; with
    /// --format policy) [default: every namespace]
    #[arg(short = 'n', long = "namespace", env = KSEAL_POLICY_NAMESPACES, value_delimiter = ',', value_name = "NAMESPACE")]
    pub(crate) namespaces: Vec<String>,
    /// Names the ConfigMap (kyverno/kseal-NAME-keys) and the policy
    /// (kseal-require-NAME-sealing-key): one NAME per ring, so that policies of several rings
    /// live side by side
    #[arg(long, env = KSEAL_POLICY_NAME, default_value = "fleet", value_name = "NAME")]
    pub(crate) name: String,
    /// Write to this file (atomically) instead of stdout
    #[arg(short = 'o', long = "output", alias = "write", env = KSEAL_POLICY_OUTPUT, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
}

pub(super) const EXPOSURE_EXAMPLES: &str = "\
Examples:
  # What the key's ciphertexts in the working tree would open
  kseal keys exposure SHA256:mOu37IQK… clusters/

  # Also every value ever committed with it (old ciphertexts stay in git history)
  kseal keys exposure SHA256:mOu37IQK… --git-history -o json > exposed.json

  # The key by its certificate
  kseal keys exposure certs/prod-2025.crt --git-history

Items are attributed by their kseal.dev/sealing-key annotation (kseal writes it when it seals).
SealedSecrets without one cannot be attributed offline: they are listed apart, as possibly
sealed to the key.";

/// Report formats of `kseal keys exposure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExposureFormat {
    /// Grouped by namespace/name/item, one line per value
    Text,
    /// One JSON object
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct ExposureArgs {
    /// The key: its SHA256: fingerprint (as the kseal.dev/sealing-key annotation and `kseal
    /// keys inspect` show it), or a file holding its certificate
    #[arg(value_name = "KID|CERT")]
    pub(crate) key: String,
    /// Files and directories to search (in the working tree; with --git-history, the same
    /// paths in every commit of the repository holding them) [default: .]
    #[arg(value_name = "PATH")]
    pub(crate) paths: Vec<PathBuf>,
    /// Also search every commit reachable from any ref (`git log --all`), naming the commit
    /// that introduced each value
    // The variable names are spelled here until env.rs (shared) declares them.
    #[arg(long, env = "KSEAL_EXPOSURE_GIT_HISTORY")]
    pub(crate) git_history: bool,
    /// Report format
    #[arg(
        short = 'o',
        long,
        env = "KSEAL_EXPOSURE_FORMAT",
        value_enum,
        default_value = "text",
        ignore_case = true
    )]
    pub(crate) format: ExposureFormat,
}

pub(super) const REROOT_EXAMPLES: &str = "Examples:
  # An AWS KMS key that only the seeder's role may use (kms:Sign)
  aws kms create-key --key-usage SIGN_VERIFY --key-spec RSA_4096 --description 'kseal ring root'
  kseal keys re-root --ring kseal/fleet --to kms://alias/kseal-fleet-root
  # Or an offline key file (keep it off every cluster, e.g. on the seeder's hardware-backed disk)
  kseal keys new-root --out /secure/kseal-root.pem
  kseal keys re-root --ring dir:///srv/ring --to file:///secure/kseal-root.pem
  # Later, from one dedicated root to another (signed by both)
  kseal keys re-root --ring kseal/fleet --root kms://alias/old-root --to kms://alias/new-root
  # Then, in each GitOps repository, move the pin to the root (and set controllers'
  # --ring-anchor / keySource.ringAnchor to the kid it prints)
  kseal keys trust --ring kseal/fleet";

pub(super) const REFRESH_EXAMPLES: &str = "Examples:
  # Daily, from the seeder's CronJob (readers refuse an index past its expiry, 7 days by default)
  kseal keys refresh --ring kseal/fleet --root kms://alias/kseal-fleet-root
  # Change how long each index stays current
  kseal keys refresh --ring kseal/fleet --root kms://alias/kseal-fleet-root --lifetime 3d";

/// `kseal keys re-root`.
#[derive(Debug, Args)]
pub(crate) struct ReRootArgs {
    /// Ask nothing (the default when standard input is not a terminal)
    #[arg(short = 'y', long, env = env::KSEAL_YES)]
    pub(crate) yes: bool,
    /// The new root: kms://KEY (an AWS KMS key id, ARN or alias/NAME; SIGN_VERIFY, RSA) or
    /// file://PATH (a PEM private key, `kseal keys new-root`)
    #[arg(long = "to", env = env::KSEAL_REROOT_TO, value_name = "ROOT")]
    pub(crate) to: String,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
}

/// `kseal keys refresh`.
#[derive(Debug, Args)]
pub(crate) struct RefreshArgs {
    #[command(flatten)]
    pub(crate) ring: RingArgs,
}

/// `kseal keys new-root`.
#[derive(Debug, Args)]
pub(crate) struct NewRootArgs {
    /// Where to write the private key (created with mode 0600; never overwritten)
    #[arg(long, env = env::KSEAL_NEW_ROOT_OUT, value_name = "FILE")]
    pub(crate) out: std::path::PathBuf,
}

pub(super) const TRUST_EXAMPLES: &str = "Examples:
  # Show the anchor of the fleet ring and pin it in ./.kseal.yaml (commit the file)
  kseal keys trust --ring kseal/fleet
  # Check the ring against the anchor pinned already (changes nothing when it matches)
  kseal keys trust --ring kseal/fleet --check";

pub(super) const SIGN_EXAMPLES: &str = "Examples:
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
    /// Move a pin that names a ring key to the ring's dedicated root with this kid (all 64 hex
    /// digits), confirmed with the ring's seeder out of band (a pin at a ring key cannot tell a real move from a
    /// fork signed with a cluster's keys)
    #[arg(long, env = env::KSEAL_TRUST_ROOT_KID, value_name = "KID")]
    pub(crate) root_kid: Option<String>,
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
    /// AWS_ENDPOINT_URL_SECRETS_MANAGER, then AWS_ENDPOINT_URL (the controller's flag has the
    /// same name)
    #[arg(long = "aws-endpoint-url", alias = "endpoint-url", env = env::KSEAL_AWS_ENDPOINT_URL, value_name = "URL")]
    pub(crate) endpoint_url: Option<String>,
    /// IAM role to assume with the credentials found (e.g. the fleet's seeder role)
    #[arg(long = "aws-assume-role", alias = "assume-role", env = env::KSEAL_AWS_ASSUME_ROLE, value_name = "ROLE_ARN")]
    pub(crate) assume_role: Option<String>,
    /// The ring's trust anchor or dedicated root (a kid, as `kseal keys trust` prints it);
    /// default: the pin in the nearest .kseal.yaml. An index whose signed history does not pass
    /// through it is refused
    #[arg(long, env = env::KSEAL_RING_ANCHOR, value_name = "KID")]
    pub(crate) ring_anchor: Option<String>,
    /// The ring's dedicated root signing key, for commands that write: kms://KEY (AWS KMS) or
    /// file://PATH (an offline PEM key). Required once the ring has a dedicated root; a new
    /// ring pushed with it starts there
    #[arg(long, env = env::KSEAL_RING_ROOT, value_name = "ROOT")]
    pub(crate) root: Option<String>,
    /// How long an index a write signs stays current (e.g. 7d, 36h; 1h to 90d); default: what
    /// the ring has, else 7 days
    #[arg(long, env = env::KSEAL_RING_LIFETIME, value_parser = super::parse_duration, value_name = "DURATION")]
    pub(crate) lifetime: Option<std::time::Duration>,
    /// Let a write build on an index past its expiry: only after checking that its version and
    /// active key are the ones you wrote last (an expired index may be an old one put back)
    #[arg(long, env = env::KSEAL_ALLOW_EXPIRED)]
    pub(crate) allow_expired: bool,
    /// Let a write build on the index of this SHA-256 although the ring's history marker,
    /// written by an older kseal, records none: only after checking the version, active key,
    /// keys and retired keys that the refusal printed are the ones you wrote last. When the
    /// store holds other indexes of that version, the value the refusal prints: your digest
    /// first, then each other one, comma-separated
    #[arg(long, env = env::KSEAL_ADOPT_INDEX, value_name = "DIGEST")]
    pub(crate) adopt_index: Option<String>,
    /// Let a write build on the index although the ring's history marker records a later
    /// write of this SHA-256 as pending (the full digest the refusal printed; several
    /// comma-separated): only after checking that your last write failed before it wrote the
    /// index and that the index is the one you wrote before it. A write the store still holds
    /// is never dropped, and a pending write not named still stops the write
    #[arg(long, env = env::KSEAL_DROP_PENDING, value_name = "SHA-256", value_delimiter = ',', value_parser = parse_sha256)]
    pub(crate) drop_pending: Vec<String>,
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
pub(super) fn parse_key_ttl(text: &str) -> Result<std::time::Duration, String> {
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
    /// controllers' --key-source-interval plus its 10 % jitter [default: 66m; with
    /// --wait-for: none, and a floor when given]
    #[arg(long, env = env::KSEAL_ACTIVATION_DELAY, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) delay: Option<std::time::Duration>,
}

/// The activation delay without `--delay` or `--wait-for`.
pub(crate) const DEFAULT_ACTIVATION_DELAY: std::time::Duration =
    std::time::Duration::from_secs(66 * 60);

impl DelayArgs {
    /// The delay to wait before a key may seal: none with `--now`; with `--wait-for`
    /// (`fleet`), only the `--delay` given, as a floor under the fleet's acknowledgements.
    pub(crate) fn effective(&self, fleet: bool) -> std::time::Duration {
        match (self.now, self.delay) {
            (true, _) => std::time::Duration::ZERO,
            (false, Some(delay)) => delay,
            (false, None) if fleet => std::time::Duration::ZERO,
            (false, None) => DEFAULT_ACTIVATION_DELAY,
        }
    }
}

/// `--wait-for` of `kseal keys rotate` and `activate`.
const KSEAL_WAIT_FOR: &str = "KSEAL_WAIT_FOR";
/// `--timeout` of `--wait-for`.
const KSEAL_WAIT_TIMEOUT: &str = "KSEAL_WAIT_TIMEOUT";
/// The hidden poll interval of `--wait-for` (tests).
const KSEAL_WAIT_POLL: &str = "KSEAL_WAIT_POLL";

/// Which clusters must acknowledge a pending key before it seals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WaitFor {
    /// Every cluster with a record (a silent or unreadable one blocks).
    All,
    /// This percentage (1 to 100) of the clusters with a record, rounded up.
    Percent(u8),
    /// These clusters, each of them.
    Clusters(Vec<kseal_keystore::ClusterId>),
}

impl std::fmt::Display for WaitFor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitFor::All => f.write_str("all"),
            WaitFor::Percent(n) => write!(f, "{n}%"),
            WaitFor::Clusters(ids) => {
                let ids: Vec<&str> = ids.iter().map(|c| c.as_str()).collect();
                f.write_str(&ids.join(","))
            }
        }
    }
}

/// `all`, `N%` (1 to 100) or cluster ids separated by commas.
pub(crate) fn parse_wait_for(text: &str) -> Result<WaitFor, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("all") {
        return Ok(WaitFor::All);
    }
    if let Some(number) = text.strip_suffix('%') {
        return match number.trim().parse::<u8>() {
            Ok(n @ 1..=100) => Ok(WaitFor::Percent(n)),
            _ => Err(format!(
                "`{text}` is not a share of the fleet: use 1% to 100%"
            )),
        };
    }
    let mut ids = Vec::new();
    for id in text.split(',').map(str::trim) {
        let id = kseal_keystore::ClusterId::parse(id)
            .map_err(|e| format!("{e}; use `all`, `N%` or cluster ids separated by commas"))?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(WaitFor::Clusters(ids))
}

/// `--wait-for`: activate once the fleet reports holding the key, not after a guessed delay.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Activation")]
pub(crate) struct FleetWaitArgs {
    /// Activate once these clusters' fleet records show they hold the key and the index that
    /// added it: `all` (every cluster with a record; a silent one blocks until it reports
    /// again), `N%` of them, or cluster ids separated by commas. Needs records (`kseal fleet
    /// status`); without, the delay applies
    #[arg(long, env = KSEAL_WAIT_FOR, value_parser = parse_wait_for, conflicts_with = "now", value_name = "all|N%|CLUSTERS")]
    pub(crate) wait_for: Option<WaitFor>,
    /// How long --wait-for waits; then it exits 3, naming the clusters missing, and the key
    /// stays pending
    #[arg(long, env = KSEAL_WAIT_TIMEOUT, default_value = "30m", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) timeout: std::time::Duration,
    /// How often --wait-for reads the records
    #[arg(long = "wait-poll", env = KSEAL_WAIT_POLL, default_value = "5s", value_parser = parse_duration, hide = true)]
    pub(crate) poll: std::time::Duration,
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
    #[command(flatten)]
    pub(crate) fleet: FleetWaitArgs,
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
    #[arg(long, env = env::KSEAL_NO_WAIT, conflicts_with_all = ["now", "wait_for"])]
    pub(crate) no_wait: bool,
    #[command(flatten)]
    pub(crate) fleet: FleetWaitArgs,
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

/// `--force` of `kseal keys retire`.
const KSEAL_RETIRE_FORCE: &str = "KSEAL_RETIRE_FORCE";

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
    /// Retire the key even while clusters that reported recently (`kseal fleet status`) still
    /// open SealedSecrets with it: they stop opening them once their controllers drop the key
    #[arg(long, env = KSEAL_RETIRE_FORCE)]
    pub(crate) force: bool,
    /// Run every check and say what would be retired; change nothing
    #[arg(long, env = env::KSEAL_DRY_RUN)]
    pub(crate) dry_run: bool,
    /// Retire without asking; needed when standard input or standard error is not a terminal
    /// (a script, CI): retiring is never done unasked
    #[arg(short = 'y', long, env = env::KSEAL_YES)]
    pub(crate) yes: bool,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
    #[command(flatten)]
    pub(crate) write: RingWriteArgs,
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

/// A full SHA-256 digest (64 hex characters), lowercased: `--drop-pending` takes the whole
/// digest the refusal printed, never a prefix (one could be made to match). Empty or false
/// names nothing; true is refused (the flag was a switch once).
pub(super) fn parse_sha256(text: &str) -> Result<String, String> {
    let digest = text.trim();
    let word = digest.to_ascii_lowercase();
    if matches!(word.as_str(), "" | "false" | "0" | "no" | "off") {
        // An empty or false variable (a template's default, or from when the flag was a
        // switch) names nothing: it drops nothing.
        Ok(String::new())
    } else if digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(word)
    } else if matches!(word.as_str(), "true" | "1" | "yes" | "on") {
        Err(format!(
            "expected the full SHA-256 the refusal printed (64 hex characters), got {digest:?}: \
             --drop-pending (KSEAL_DROP_PENDING) names the pending write it drops, it is no \
             longer a switch"
        ))
    } else {
        Err(format!(
            "expected the full SHA-256 the refusal printed (64 hex characters), got {} \
             characters",
            digest.chars().count()
        ))
    }
}

/// A KMS key as Secrets Manager takes it: a key id, `alias/NAME`, or the ARN of either. A
/// copied placeholder (`key/…`) is refused here rather than by AWS halfway through a write.
pub(super) fn parse_kms_key_id(text: &str) -> Result<String, String> {
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

pub(super) fn parse_key_size(text: &str) -> Result<u32, String> {
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
    fn drop_pending_takes_a_whole_sha256_only() {
        let full = "AB".repeat(32);
        assert_eq!(parse_sha256(&full), Ok("ab".repeat(32)));
        assert_eq!(parse_sha256(&format!(" {full} ")), Ok("ab".repeat(32)));
        for nothing in ["", " ", "false", "0", "OFF"] {
            assert_eq!(parse_sha256(nothing), Ok(String::new()), "{nothing:?}");
        }
        for bad in [
            "ab",
            "true",
            &full[..63],
            &format!("{full}a"),
            &"g".repeat(64),
        ] {
            let e = parse_sha256(bad).expect_err(bad);
            assert!(e.contains("64 hex characters"), "{bad}: {e}");
        }
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
}
