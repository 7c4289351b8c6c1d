//! `kseal create git-credentials`: a sealed repository Secret for Flux or Argo CD (SSH key
//! or HTTPS token, with the consumer's labels and fields).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_keys::Plaintext;

use super::giturl::{is_ssh_url, name_from_url};
use super::pem::{pem_is_encrypted, read_pem_certificates, read_pem_private_key};
use super::ssh::{generate_ed25519, openssh_public};
use super::{Items, cert_request, read_hidden, seal_and_emit};
use crate::args::{ArgocdType, GitArgs, GitConsumer};

/// An SSH private key for the Secret.
pub(super) struct SshIdentity {
    /// The key file's content.
    private: Plaintext,
    /// The `ssh-… AAAA… comment` line, when known.
    public: Option<String>,
    /// Whether the key is protected by a passphrase.
    encrypted: bool,
}

/// The SSH identity: generated, or read from --identity-file.
pub(super) fn ssh_identity(args: &GitArgs) -> Result<SshIdentity> {
    if args.generate_key {
        let (private, public) = generate_ed25519(&args.key_comment)?;
        return Ok(SshIdentity {
            private,
            public: Some(public),
            encrypted: false,
        });
    }
    let Some(path) = &args.identity_file else {
        bail!("no SSH key: pass --identity-file FILE or --generate-key");
    };
    let text = Plaintext::new(fs_err::read(path).context("failed to read the SSH private key")?);
    let as_text = std::str::from_utf8(text.expose())
        .with_context(|| format!("`{}` is not a text SSH private key", path.display()))?;
    if !as_text.contains("PRIVATE KEY-----") {
        bail!(
            "`{}` is not an SSH private key (expected an OpenSSH or PEM private key)",
            path.display()
        );
    }
    let from_header = openssh_public(as_text);
    let encrypted = from_header.as_ref().is_some_and(|(e, _)| *e) || pem_is_encrypted(as_text);
    let pub_path = PathBuf::from(format!("{}.pub", path.display()));
    let public = if pub_path.exists() {
        Some(
            fs_err::read_to_string(&pub_path)
                .context("failed to read the SSH public key")?
                .trim()
                .to_owned(),
        )
    } else {
        from_header.map(|(_, line)| line)
    };
    if args.public_key_out.is_some() {
        eprintln!("note: --public-key-out is only used with --generate-key");
    }
    Ok(SshIdentity {
        private: text,
        public,
        encrypted,
    })
}

/// Reads the password or token: flag/env, stdin, or a hidden prompt.
pub(super) fn read_secret_value(args: &GitArgs, what: &str) -> Result<Plaintext> {
    read_hidden(
        args.password.as_ref(),
        args.password_stdin,
        args.password_prompt,
        what,
    )?
    .with_context(|| {
        format!("no {what}: pass --password-prompt, --password-stdin or KSEAL_GIT_PASSWORD")
    })
}

/// The passphrase Flux needs next to a protected key (item `password`), or `None` for an
/// unprotected key.
pub(super) fn ssh_key_passphrase(
    args: &GitArgs,
    path: &Path,
    encrypted: bool,
) -> Result<Option<Plaintext>> {
    let given = args.ssh_key_passphrase.is_some()
        || args.ssh_key_passphrase_prompt
        || args.ssh_key_passphrase_stdin;
    if !encrypted {
        if given {
            bail!(
                "`{}` is not protected by a passphrase: drop --ssh-key-passphrase… (and \
                 KSEAL_SSH_KEY_PASSPHRASE); Flux fails to load an unprotected key with one",
                path.display()
            );
        }
        return Ok(None);
    }
    let passphrase = read_hidden(
        args.ssh_key_passphrase.as_ref(),
        args.ssh_key_passphrase_stdin,
        args.ssh_key_passphrase_prompt,
        "SSH key passphrase",
    )?
    .with_context(|| {
        format!(
            "`{}` is protected by a passphrase: pass --ssh-key-passphrase-prompt, \
             --ssh-key-passphrase-stdin or KSEAL_SSH_KEY_PASSPHRASE (Flux reads it from item \
             `password`), or export an unprotected copy with `ssh-keygen -p -N '' -f COPY`",
            path.display()
        )
    })?;
    if passphrase.is_empty() {
        bail!("the passphrase of `{}` is empty", path.display());
    }
    Ok(Some(passphrase))
}

/// The Argo CD repository settings that are set, as a phrase ("--project and --insecure
/// only apply") for error messages; `None` when there are none.
pub(super) fn argocd_only_flags(args: &GitArgs) -> Option<String> {
    let flags: Vec<&str> = [
        (args.project.is_some(), "--project"),
        (args.repo_name.is_some(), "--repo-name"),
        (args.insecure, "--insecure"),
        (args.enable_lfs, "--enable-lfs"),
    ]
    .into_iter()
    .filter_map(|(set, flag)| set.then_some(flag))
    .collect();
    match flags.as_slice() {
        [] => None,
        [one] => Some(format!("{one} only applies")),
        [init @ .., last] => Some(format!("{} and {last} only apply", init.join(", "))),
    }
}

/// Checks the combination of flags, before anything is read or generated.
pub(super) fn check_git_args(args: &GitArgs, ssh: bool, https: bool) -> Result<()> {
    let argocd_only = argocd_only_flags(args);
    let passphrase_given = args.ssh_key_passphrase.is_some()
        || args.ssh_key_passphrase_prompt
        || args.ssh_key_passphrase_stdin;
    match args.consumer {
        GitConsumer::Flux => {
            if let Some(flags) = argocd_only {
                bail!(
                    "{flags} to Argo CD (--for argocd): Flux's Git credentials have no such \
                     items"
                );
            }
        }
        GitConsumer::Argocd => {
            if args.ca_file.is_some() {
                bail!(
                    "Argo CD does not read a CA certificate from repository Secrets: add it to \
                     the argocd-tls-certs-cm ConfigMap in namespace argocd, under the \
                     repository's host name (`argocd cert add-tls HOST --from FILE` does this), \
                     and drop --ca-file"
                );
            }
            if passphrase_given {
                bail!(
                    "Argo CD cannot use a passphrase-protected SSH key (its repository Secrets \
                     have no passphrase item): export an unprotected copy with `ssh-keygen -p \
                     -N '' -f COPY` (the sealed Secret protects it) and drop \
                     --ssh-key-passphrase…"
                );
            }
            if let (ArgocdType::RepoCreds, Some(flags)) = (args.argocd_type, argocd_only) {
                bail!(
                    "{flags} to Argo CD repository Secrets: credential templates \
                     (--argocd-type repo-creds) carry only credentials"
                );
            }
        }
    }
    if ssh && (args.ca_file.is_some() || args.client_cert.is_some()) {
        bail!(
            "--ca-file, --client-cert and --client-key are for HTTPS: over SSH the server is \
             checked against known hosts and the client signs in with its SSH key"
        );
    }
    if ssh && https {
        bail!(
            "choose SSH (--identity-file/--generate-key) or HTTPS (--username/--password…), not both"
        );
    }
    if !ssh && !https {
        bail!(
            "no credentials: for SSH pass --identity-file FILE or --generate-key; for HTTPS pass \
             --username with --password-prompt/--password-stdin, --bearer-token, \
             --client-cert/--client-key or --github-app-id"
        );
    }
    let companion = args.password.is_some()
        || args.password_prompt
        || args.password_stdin
        || args.bearer_token
        || args.github_app_id.is_some();
    if args.consumer == GitConsumer::Argocd && args.client_cert.is_some() && !companion {
        bail!(
            "Argo CD presents a TLS client certificate only together with a password, a bearer \
             token or a GitHub App (it connects without credentials otherwise): add \
             --username with --password-stdin/--password-prompt, --bearer-token, or \
             --github-app-id"
        );
    }
    if let Some(url) = &args.url {
        if ssh && !is_ssh_url(url) {
            bail!(
                "`{url}` is not an SSH URL (ssh://… or git@host:path) but SSH credentials were given"
            );
        }
        if https && is_ssh_url(url) {
            bail!("`{url}` is an SSH URL but HTTPS credentials were given");
        }
    }
    if let Some(base) = &args.github_app_enterprise_base_url
        && !base
            .get(..8)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
    {
        bail!(
            "--github-app-enterprise-base-url `{base}` is not an https:// URL (GitHub Enterprise \
             Server's API, e.g. https://ghe.example.com/api/v3)"
        );
    }
    Ok(())
}

pub(crate) fn git(args: GitArgs) -> Result<()> {
    let cert = cert_request(&args.cert, &args.out)?;
    if args.consumer == GitConsumer::Flux
        && (args.identity_file.is_some() || args.generate_key)
        && args.known_hosts_file.is_none()
    {
        bail!(
            "Flux verifies the SSH host: pass --known-hosts-file FILE (e.g. from \
             `ssh-keyscan github.com > known_hosts`)"
        );
    }
    let ssh = args.identity_file.is_some() || args.generate_key;
    let github_app = args.github_app_id.is_some();
    let tls_client = args.client_cert.is_some();
    let https = args.username.is_some()
        || args.password.is_some()
        || args.password_prompt
        || args.password_stdin
        || args.bearer_token
        || github_app
        || tls_client
        || args.ca_file.is_some();
    check_git_args(&args, ssh, https)?;
    let mut items = Items::new();
    let mut labels = BTreeMap::new();
    let (default_name, default_namespace) = consumer_items(&args, &mut items, &mut labels)?;
    // Certificate before the credentials: a key must never be generated for a Secret that
    // cannot be sealed.
    let certificate = super::load_certificate(&cert, &args.out, Some(default_namespace))?;
    let generated_public = if ssh {
        ssh_items(&args, &mut items)?
    } else {
        https_items(&args, &mut items)?;
        None
    };
    tls_items(&args, &mut items)?;
    seal_and_emit(
        &certificate,
        &args.out,
        &default_name,
        Some(default_namespace),
        labels,
        items,
    )?;
    if let Some(public) = generated_public {
        eprintln!("new ed25519 key; register its public half as a deploy key:\n{public}");
        if let Some(path) = &args.public_key_out {
            crate::manifest::write_atomic(path, format!("{public}\n").as_bytes(), false)?;
            eprintln!("wrote `{}`", path.display());
        }
    }
    Ok(())
}

/// The items and labels of `args.consumer` that do not depend on the credentials (Argo CD's
/// repository fields); returns the Secret's default name and namespace.
fn consumer_items(
    args: &GitArgs,
    items: &mut Items,
    labels: &mut BTreeMap<String, String>,
) -> Result<(String, &'static str)> {
    let defaults = match args.consumer {
        GitConsumer::Flux => ("flux-system".to_owned(), "flux-system"),
        GitConsumer::Argocd => {
            let url = args
                .url
                .as_deref()
                .context("Argo CD needs the repository URL: pass --url")?;
            let (label, prefix) = match args.argocd_type {
                ArgocdType::Repository => ("repository", "repo-"),
                ArgocdType::RepoCreds => ("repo-creds", "creds-"),
            };
            labels.insert(
                "argocd.argoproj.io/secret-type".to_owned(),
                label.to_owned(),
            );
            items.insert("type".to_owned(), text_item("git"));
            items.insert("url".to_owned(), text_item(url));
            if let Some(project) = &args.project {
                items.insert("project".to_owned(), text_item(project));
            }
            if let Some(name) = &args.repo_name {
                items.insert("name".to_owned(), text_item(name));
            }
            if args.insecure {
                items.insert("insecure".to_owned(), text_item("true"));
                eprintln!(
                    "warning: --insecure: Argo CD will not verify the server of `{url}` (TLS \
                     certificate or SSH host key); anyone on the network path can impersonate it"
                );
            }
            if args.enable_lfs {
                items.insert("enableLfs".to_owned(), text_item("true"));
            }
            (name_from_url(prefix, url), "argocd")
        }
    };
    Ok(defaults)
}

/// The SSH items (`--identity-file` or `--generate-key`) in the consumer's names; returns the
/// public line of a generated key.
fn ssh_items(args: &GitArgs, items: &mut Items) -> Result<Option<String>> {
    let identity = ssh_identity(args)?;
    let generated_public = if args.generate_key {
        identity.public.clone()
    } else {
        None
    };
    match args.consumer {
        GitConsumer::Flux => {
            let known_hosts = args
                .known_hosts_file
                .as_deref()
                .context("Flux needs --known-hosts-file for SSH")?;
            let passphrase = match &args.identity_file {
                Some(path) => ssh_key_passphrase(args, path, identity.encrypted)?,
                None => None,
            };
            let known = fs_err::read(known_hosts).context("failed to read known_hosts")?;
            if known.iter().all(u8::is_ascii_whitespace) {
                bail!("`{}` is empty", known_hosts.display());
            }
            items.insert("identity".to_owned(), identity.private);
            if let Some(passphrase) = passphrase {
                items.insert("password".to_owned(), passphrase);
            }
            match identity.public {
                Some(line) => {
                    items.insert("identity.pub".to_owned(), text_item(&format!("{line}\n")));
                }
                None => eprintln!(
                    "note: no public key found (no `.pub` file next to the key): \
                     `identity.pub` is left out"
                ),
            }
            items.insert("known_hosts".to_owned(), Plaintext::new(known));
        }
        GitConsumer::Argocd => {
            if let (true, Some(path)) = (identity.encrypted, &args.identity_file) {
                bail!(
                    "`{}` is protected by a passphrase: Argo CD needs an unencrypted key \
                     (the sealed Secret protects it); export one with `ssh-keygen -p -N '' \
                     -f COPY`",
                    path.display()
                );
            }
            if args.known_hosts_file.is_some() {
                eprintln!(
                    "note: Argo CD reads SSH known hosts from the argocd-ssh-known-hosts-cm \
                     ConfigMap, not from repository Secrets: --known-hosts-file is ignored"
                );
            }
            items.insert("sshPrivateKey".to_owned(), identity.private);
        }
    }
    Ok(generated_public)
}

/// The HTTPS items: a GitHub App, a bearer token, or a username and password.
fn https_items(args: &GitArgs, items: &mut Items) -> Result<()> {
    if let (Some(app_id), Some(installation_id), Some(key_path)) = (
        args.github_app_id,
        args.github_app_installation_id,
        &args.github_app_private_key,
    ) {
        let key = read_pem_private_key(
            key_path,
            "the GitHub App's private key",
            &["RSA PRIVATE KEY", "PRIVATE KEY"],
        )?;
        items.insert("githubAppID".to_owned(), text_item(&app_id.to_string()));
        items.insert(
            "githubAppInstallationID".to_owned(),
            text_item(&installation_id.to_string()),
        );
        items.insert("githubAppPrivateKey".to_owned(), key);
        if let Some(base) = &args.github_app_enterprise_base_url {
            let key = match args.consumer {
                GitConsumer::Flux => "githubAppBaseURL",
                GitConsumer::Argocd => "githubAppEnterpriseBaseUrl",
            };
            items.insert(key.to_owned(), text_item(base));
        }
        if args.consumer == GitConsumer::Flux {
            eprintln!(
                "note: Flux uses GitHub App credentials only for a GitRepository with \
                 `.spec.provider: github`"
            );
        }
    } else if args.bearer_token {
        let token = read_secret_value(args, "bearer token")?;
        items.insert("bearerToken".to_owned(), token);
    } else if args.username.is_some()
        || args.password.is_some()
        || args.password_prompt
        || args.password_stdin
    {
        let username = args
            .username
            .as_deref()
            .context("HTTPS credentials need --username (or --bearer-token)")?;
        let password = read_secret_value(args, "password")?;
        if password.is_empty() {
            bail!("the password is empty");
        }
        items.insert("username".to_owned(), text_item(username));
        items.insert("password".to_owned(), password);
    }
    Ok(())
}

/// The TLS items: a client certificate and key, and a CA bundle.
fn tls_items(args: &GitArgs, items: &mut Items) -> Result<()> {
    if let (Some(cert_path), Some(key_path)) = (&args.client_cert, &args.client_key) {
        let client_cert = read_pem_certificates(cert_path, "the TLS client certificate")?;
        let client_key = read_pem_private_key(
            key_path,
            "the TLS client key",
            &["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"],
        )?;
        let (cert_item, key_item) = match args.consumer {
            GitConsumer::Flux => ("tls.crt", "tls.key"),
            GitConsumer::Argocd => ("tlsClientCertData", "tlsClientCertKey"),
        };
        items.insert(cert_item.to_owned(), client_cert);
        items.insert(key_item.to_owned(), client_key);
    }
    if let Some(ca_path) = &args.ca_file {
        // Argo CD was refused in `check_git_args`: it reads CAs from a ConfigMap.
        let ca = read_pem_certificates(ca_path, "a CA certificate")?;
        items.insert("ca.crt".to_owned(), ca);
    }
    Ok(())
}

/// A text value as an item.
fn text_item(value: &str) -> Plaintext {
    Plaintext::new(value.as_bytes().to_vec())
}
