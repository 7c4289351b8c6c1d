//! Every environment variable the `kseal` binary reads, declared once.
//!
//! Each flag `--some-flag` can also be set with `KSEAL_SOME_FLAG`; an explicit flag wins.

/// Certificate sources (`--cert`), separated by commas.
pub(crate) const KSEAL_CERT: &str = "KSEAL_CERT";
/// Controller Service name (`--controller-name`).
pub(crate) const KSEAL_CONTROLLER_NAME: &str = "KSEAL_CONTROLLER_NAME";
/// Controller Service namespace (`--controller-namespace`).
pub(crate) const KSEAL_CONTROLLER_NAMESPACE: &str = "KSEAL_CONTROLLER_NAMESPACE";
/// Kubeconfig file (`--kubeconfig`).
pub(crate) const KSEAL_KUBECONFIG: &str = "KSEAL_KUBECONFIG";
/// Kubeconfig context (`--context`).
pub(crate) const KSEAL_CONTEXT: &str = "KSEAL_CONTEXT";
/// Allow plain http certificate URLs (`--allow-http`).
pub(crate) const KSEAL_ALLOW_HTTP: &str = "KSEAL_ALLOW_HTTP";
/// `--controller-ring`.
pub(crate) const KSEAL_CONTROLLER_RING: &str = "KSEAL_CONTROLLER_RING";
/// Input file (`-f/--file`).
pub(crate) const KSEAL_FILE: &str = "KSEAL_FILE";
/// Output file (`-w/--write`).
pub(crate) const KSEAL_WRITE: &str = "KSEAL_WRITE";
/// Output format (`-o/--format`).
pub(crate) const KSEAL_FORMAT: &str = "KSEAL_FORMAT";
/// Sealing scope (`--scope`).
pub(crate) const KSEAL_SCOPE: &str = "KSEAL_SCOPE";
/// Namespace (`-n/--namespace`).
pub(crate) const KSEAL_NAMESPACE: &str = "KSEAL_NAMESPACE";
/// Name (`--name`).
pub(crate) const KSEAL_NAME: &str = "KSEAL_NAME";
/// Allow Secrets without data (`--allow-empty-data`).
pub(crate) const KSEAL_ALLOW_EMPTY_DATA: &str = "KSEAL_ALLOW_EMPTY_DATA";
/// Bind the values to the SealedSecret's template (`--bind-template`).
pub(crate) const KSEAL_BIND_TEMPLATE: &str = "KSEAL_BIND_TEMPLATE";
/// SealedSecret file to merge into (`--merge-into`).
pub(crate) const KSEAL_MERGE_INTO: &str = "KSEAL_MERGE_INTO";
/// Seal one raw value (`--raw`).
pub(crate) const KSEAL_RAW: &str = "KSEAL_RAW";
/// File holding the value (`--from-file`).
pub(crate) const KSEAL_FROM_FILE: &str = "KSEAL_FROM_FILE";
/// Drop a trailing newline from the value (`--strip-newline`).
pub(crate) const KSEAL_STRIP_NEWLINE: &str = "KSEAL_STRIP_NEWLINE";
/// Private key files (`--key`), separated by commas.
pub(crate) const KSEAL_KEY: &str = "KSEAL_KEY";
/// Validate through the controller (`validate --controller`).
pub(crate) const KSEAL_VALIDATE_CONTROLLER: &str = "KSEAL_VALIDATE_CONTROLLER";
/// Re-encrypt through the controller (`reseal --controller`).
pub(crate) const KSEAL_RESEAL_CONTROLLER: &str = "KSEAL_RESEAL_CONTROLLER";
/// Rewrite files in place (`--in-place`).
pub(crate) const KSEAL_IN_PLACE: &str = "KSEAL_IN_PLACE";
/// Re-seal only the items not sealed with the active key (`reseal --stale`).
pub(crate) const KSEAL_STALE: &str = "KSEAL_STALE";
/// List what would change without writing (`reseal --stale --dry-run`).
pub(crate) const KSEAL_DRY_RUN: &str = "KSEAL_DRY_RUN";
/// Output path whose creation rule `kseal config --for` shows.
pub(crate) const KSEAL_CONFIG_FOR: &str = "KSEAL_CONFIG_FOR";
/// Print the JSON Schema of `.kseal.yaml` (`kseal config --schema`).
pub(crate) const KSEAL_CONFIG_SCHEMA: &str = "KSEAL_CONFIG_SCHEMA";
/// Output directory of `keys generate` (`--out-dir`).
pub(crate) const KSEAL_OUT_DIR: &str = "KSEAL_OUT_DIR";
/// Key size for `keys generate` (`--key-size`).
pub(crate) const KSEAL_KEY_SIZE: &str = "KSEAL_KEY_SIZE";
/// Certificate common name for `keys generate` (`--common-name`).
pub(crate) const KSEAL_COMMON_NAME: &str = "KSEAL_COMMON_NAME";
/// Certificate validity of generated keys (`--key-ttl`, as the controller's).
pub(crate) const KSEAL_KEY_TTL: &str = "KSEAL_KEY_TTL";
/// Deprecated: certificate validity in days (`--validity-days`).
pub(crate) const KSEAL_VALIDITY_DAYS: &str = "KSEAL_VALIDITY_DAYS";
/// Overwrite an existing key (`--force`).
pub(crate) const KSEAL_FORCE: &str = "KSEAL_FORCE";
/// Directory for `quickstart` (`--dir`).
pub(crate) const KSEAL_QUICKSTART_DIR: &str = "KSEAL_QUICKSTART_DIR";
/// Consumer of git credentials (`create git-credentials --for`).
pub(crate) const KSEAL_GIT_FOR: &str = "KSEAL_GIT_FOR";
/// Argo CD secret type (`--argocd-type`).
pub(crate) const KSEAL_ARGOCD_TYPE: &str = "KSEAL_ARGOCD_TYPE";
/// Repository URL (`--url`).
pub(crate) const KSEAL_GIT_URL: &str = "KSEAL_GIT_URL";
/// SSH private key file (`--identity-file`).
pub(crate) const KSEAL_IDENTITY_FILE: &str = "KSEAL_IDENTITY_FILE";
/// Generate an SSH key (`--generate-key`).
pub(crate) const KSEAL_GENERATE_KEY: &str = "KSEAL_GENERATE_KEY";
/// Comment of a generated SSH key (`--key-comment`).
pub(crate) const KSEAL_KEY_COMMENT: &str = "KSEAL_KEY_COMMENT";
/// Where to write the generated public key (`--public-key-out`).
pub(crate) const KSEAL_PUBLIC_KEY_OUT: &str = "KSEAL_PUBLIC_KEY_OUT";
/// known_hosts file (`--known-hosts-file`).
pub(crate) const KSEAL_KNOWN_HOSTS_FILE: &str = "KSEAL_KNOWN_HOSTS_FILE";
/// HTTPS user name (`--username`).
pub(crate) const KSEAL_GIT_USERNAME: &str = "KSEAL_GIT_USERNAME";
/// HTTPS password or token (`--password`).
pub(crate) const KSEAL_GIT_PASSWORD: &str = "KSEAL_GIT_PASSWORD";
/// Prompt for the password (`--password-prompt`).
pub(crate) const KSEAL_PASSWORD_PROMPT: &str = "KSEAL_PASSWORD_PROMPT";
/// Read the password from stdin (`--password-stdin`).
pub(crate) const KSEAL_PASSWORD_STDIN: &str = "KSEAL_PASSWORD_STDIN";
/// Use a bearer token (`--bearer-token`).
pub(crate) const KSEAL_BEARER_TOKEN: &str = "KSEAL_BEARER_TOKEN";
/// Passphrase of the SSH private key, for Flux (`--ssh-key-passphrase`).
pub(crate) const KSEAL_SSH_KEY_PASSPHRASE: &str = "KSEAL_SSH_KEY_PASSPHRASE";
/// Prompt for the SSH key passphrase (`--ssh-key-passphrase-prompt`).
pub(crate) const KSEAL_SSH_KEY_PASSPHRASE_PROMPT: &str = "KSEAL_SSH_KEY_PASSPHRASE_PROMPT";
/// Read the SSH key passphrase from stdin (`--ssh-key-passphrase-stdin`).
pub(crate) const KSEAL_SSH_KEY_PASSPHRASE_STDIN: &str = "KSEAL_SSH_KEY_PASSPHRASE_STDIN";
/// CA certificate for HTTPS, for Flux (`--ca-file`).
pub(crate) const KSEAL_CA_FILE: &str = "KSEAL_CA_FILE";
/// TLS client certificate (`--client-cert`).
pub(crate) const KSEAL_CLIENT_CERT: &str = "KSEAL_CLIENT_CERT";
/// TLS client key (`--client-key`).
pub(crate) const KSEAL_CLIENT_KEY: &str = "KSEAL_CLIENT_KEY";
/// GitHub App id (`--github-app-id`).
pub(crate) const KSEAL_GITHUB_APP_ID: &str = "KSEAL_GITHUB_APP_ID";
/// GitHub App installation id (`--github-app-installation-id`).
pub(crate) const KSEAL_GITHUB_APP_INSTALLATION_ID: &str = "KSEAL_GITHUB_APP_INSTALLATION_ID";
/// GitHub App private key file (`--github-app-private-key`).
pub(crate) const KSEAL_GITHUB_APP_PRIVATE_KEY: &str = "KSEAL_GITHUB_APP_PRIVATE_KEY";
/// GitHub Enterprise API URL for the GitHub App (`--github-app-enterprise-base-url`).
pub(crate) const KSEAL_GITHUB_APP_ENTERPRISE_BASE_URL: &str =
    "KSEAL_GITHUB_APP_ENTERPRISE_BASE_URL";
/// Argo CD project of the repository (`--project`).
pub(crate) const KSEAL_ARGOCD_PROJECT: &str = "KSEAL_ARGOCD_PROJECT";
/// Argo CD display name of the repository (`--repo-name`).
pub(crate) const KSEAL_ARGOCD_REPO_NAME: &str = "KSEAL_ARGOCD_REPO_NAME";
/// Argo CD: skip host key / TLS verification (`--insecure`).
pub(crate) const KSEAL_ARGOCD_INSECURE: &str = "KSEAL_ARGOCD_INSECURE";
/// Argo CD: enable git-lfs (`--enable-lfs`).
pub(crate) const KSEAL_ARGOCD_ENABLE_LFS: &str = "KSEAL_ARGOCD_ENABLE_LFS";
/// Consumer of AWS credentials (`create aws-credentials --for`).
pub(crate) const KSEAL_AWS_FOR: &str = "KSEAL_AWS_FOR";
/// AWS profile to read (`--profile`).
pub(crate) const KSEAL_AWS_PROFILE: &str = "KSEAL_AWS_PROFILE";
/// Take the sealed AWS keys from the AWS CLI's variables (`create aws-credentials --from-env`).
pub(crate) const KSEAL_AWS_FROM_ENV: &str = "KSEAL_AWS_FROM_ENV";
/// AWS access key id to seal (`--access-key-id`).
pub(crate) const KSEAL_AWS_ACCESS_KEY_ID: &str = "KSEAL_AWS_ACCESS_KEY_ID";
/// Read the secret access key to seal from stdin (`--secret-access-key-stdin`).
pub(crate) const KSEAL_AWS_SECRET_ACCESS_KEY_STDIN: &str = "KSEAL_AWS_SECRET_ACCESS_KEY_STDIN";
/// File holding the secret access key to seal (`--secret-access-key-file`).
pub(crate) const KSEAL_AWS_SECRET_ACCESS_KEY_FILE: &str = "KSEAL_AWS_SECRET_ACCESS_KEY_FILE";
/// Secret access key to seal (`--secret-access-key`, deprecated: visible in `ps`).
pub(crate) const KSEAL_AWS_SECRET_ACCESS_KEY: &str = "KSEAL_AWS_SECRET_ACCESS_KEY";
/// Session token to seal (`--session-token`).
pub(crate) const KSEAL_AWS_SESSION_TOKEN: &str = "KSEAL_AWS_SESSION_TOKEN";
/// AWS access key id, the AWS CLI's own variable (read only with `--from-env`).
pub(crate) const AWS_ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
/// AWS secret access key, the AWS CLI's own variable (read only with `--from-env`).
pub(crate) const AWS_SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
/// AWS session token, the AWS CLI's own variable (read only with `--from-env`).
pub(crate) const AWS_SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";
/// Default AWS profile name, as the AWS CLI reads it.
pub(crate) const AWS_PROFILE: &str = "AWS_PROFILE";
/// AWS shared credentials file, as the AWS CLI reads it.
pub(crate) const AWS_SHARED_CREDENTIALS_FILE: &str = "AWS_SHARED_CREDENTIALS_FILE";
/// The fleet key ring (`--ring`).
pub(crate) const KSEAL_RING: &str = "KSEAL_RING";
/// The trust anchor of the ring (`--ring-anchor`).
pub(crate) const KSEAL_RING_ANCHOR: &str = "KSEAL_RING_ANCHOR";
/// `--root` of the ring commands.
pub(crate) const KSEAL_RING_ROOT: &str = "KSEAL_RING_ROOT";
/// `--lifetime` of the ring commands.
pub(crate) const KSEAL_RING_LIFETIME: &str = "KSEAL_RING_LIFETIME";
/// `--allow-expired` of the ring commands.
pub(crate) const KSEAL_ALLOW_EXPIRED: &str = "KSEAL_ALLOW_EXPIRED";
/// `--adopt-index`: the digest of the index a write may build on under a history marker an
/// older kseal wrote.
pub(crate) const KSEAL_ADOPT_INDEX: &str = "KSEAL_ADOPT_INDEX";
/// `--drop-pending`: the SHA-256 of the pending writes (comma-separated) a write may drop,
/// building on the index although the history marker records them as pending.
pub(crate) const KSEAL_DROP_PENDING: &str = "KSEAL_DROP_PENDING";
/// `kseal keys re-root --to`.
pub(crate) const KSEAL_REROOT_TO: &str = "KSEAL_REROOT_TO";
/// `kseal keys trust --root-kid`.
pub(crate) const KSEAL_TRUST_ROOT_KID: &str = "KSEAL_TRUST_ROOT_KID";
/// `kseal keys new-root --out`.
pub(crate) const KSEAL_NEW_ROOT_OUT: &str = "KSEAL_NEW_ROOT_OUT";
/// `kseal keys trust --check`.
pub(crate) const KSEAL_TRUST_CHECK: &str = "KSEAL_TRUST_CHECK";
/// `kseal keys trust --file`.
pub(crate) const KSEAL_TRUST_FILE: &str = "KSEAL_TRUST_FILE";
/// AWS region for the ring (`--aws-region`).
pub(crate) const KSEAL_AWS_REGION: &str = "KSEAL_AWS_REGION";
/// Secrets Manager endpoint URL (`--aws-endpoint-url`).
pub(crate) const KSEAL_AWS_ENDPOINT_URL: &str = "KSEAL_AWS_ENDPOINT_URL";
/// IAM role to assume (`--aws-assume-role`).
pub(crate) const KSEAL_AWS_ASSUME_ROLE: &str = "KSEAL_AWS_ASSUME_ROLE";
/// KMS key for created secrets (`--kms-key-id`).
pub(crate) const KSEAL_AWS_KMS_KEY_ID: &str = "KSEAL_AWS_KMS_KEY_ID";
/// Replica regions for created secrets (`--replica-region`), separated by commas.
pub(crate) const KSEAL_AWS_REPLICA_REGIONS: &str = "KSEAL_AWS_REPLICA_REGIONS";
/// Single secret kept in step with the active key (`--mirror-current-to`).
pub(crate) const KSEAL_MIRROR_CURRENT_TO: &str = "KSEAL_MIRROR_CURRENT_TO";
/// Ask nothing (`--yes`).
pub(crate) const KSEAL_YES: &str = "KSEAL_YES";
/// Keys to push (`keys push --from`), separated by commas.
pub(crate) const KSEAL_FROM: &str = "KSEAL_FROM";
/// Push only into a ring without keys (`keys push --if-empty`).
pub(crate) const KSEAL_IF_EMPTY: &str = "KSEAL_IF_EMPTY";
/// Activate without the safety delay (`--now`).
pub(crate) const KSEAL_NOW: &str = "KSEAL_NOW";
/// Safety delay before activation (`--delay`).
pub(crate) const KSEAL_ACTIVATION_DELAY: &str = "KSEAL_ACTIVATION_DELAY";
/// Wait for the safety delay (`keys activate --wait`).
pub(crate) const KSEAL_WAIT: &str = "KSEAL_WAIT";
/// Do not wait to activate (`keys rotate --no-wait`).
pub(crate) const KSEAL_NO_WAIT: &str = "KSEAL_NO_WAIT";
/// Output of `keys list` (`-o/--output`).
pub(crate) const KSEAL_LIST_OUTPUT: &str = "KSEAL_LIST_OUTPUT";
/// Key of `keys export-cert` (`--kid`).
pub(crate) const KSEAL_KID: &str = "KSEAL_KID";
/// SealedSecrets to check before retiring (`keys retire --check`), separated by commas.
pub(crate) const KSEAL_CHECK: &str = "KSEAL_CHECK";
/// Recovery window of retired key secrets (`--recovery-days`).
pub(crate) const KSEAL_RECOVERY_DAYS: &str = "KSEAL_RECOVERY_DAYS";
/// Retire although `--check` found no SealedSecret (`keys retire --allow-none`).
pub(crate) const KSEAL_ALLOW_NONE: &str = "KSEAL_ALLOW_NONE";
/// Accept a directory ring that group or others may write or read (`--insecure-perms`).
pub(crate) const KSEAL_INSECURE_PERMS: &str = "KSEAL_INSECURE_PERMS";
/// Kubeconfig path list, as kubectl reads it.
pub(crate) const KUBECONFIG: &str = "KUBECONFIG";
/// Where the highest version of each pinned ring read here is kept (default
/// `$XDG_CACHE_HOME/kseal`, else `~/.cache/kseal`).
pub(crate) const KSEAL_CACHE_DIR: &str = "KSEAL_CACHE_DIR";

// `kseal check` (its own block).
/// Report format of `kseal check` (`--format`).
pub(crate) const KSEAL_CHECK_FORMAT: &str = "KSEAL_CHECK_FORMAT";
/// `kseal check --controller`: open every item through the controller's verify API.
pub(crate) const KSEAL_CHECK_CONTROLLER: &str = "KSEAL_CHECK_CONTROLLER";
/// `kseal check --strict`: warnings fail too.
pub(crate) const KSEAL_CHECK_STRICT: &str = "KSEAL_CHECK_STRICT";
/// `kseal check --no-ignore`: also walk what `.gitignore` files ignore.
pub(crate) const KSEAL_CHECK_NO_IGNORE: &str = "KSEAL_CHECK_NO_IGNORE";
/// `kseal check --progress`: when to draw the progress bar.
pub(crate) const KSEAL_CHECK_PROGRESS: &str = "KSEAL_CHECK_PROGRESS";
/// `kseal check --exclude` globs, separated by commas.
pub(crate) const KSEAL_CHECK_EXCLUDE: &str = "KSEAL_CHECK_EXCLUDE";
