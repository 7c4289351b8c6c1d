//! `kseal create git-credentials` and `kseal create aws-credentials`: the bootstrap secrets a
//! new cluster needs, built in memory and sealed in one step. Plaintext never touches the disk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kseal_api::SealOptions;
use kseal_keys::Plaintext;

use crate::args::{ArgocdType, AwsArgs, AwsConsumer, GitArgs, GitConsumer, OutArgs};
use crate::certs::CertRequest;
use crate::manifest::{format_for_path, render};

/// Items of the Secret being built; values are zeroized when dropped.
type Items = BTreeMap<String, Plaintext>;

/// The certificate request of `cert`, with the `.kseal.yaml` creation rule of the output
/// path filling `--cert` when it is not given.
fn cert_request(cert: &crate::args::CertArgs, out: &OutArgs) -> Result<CertRequest> {
    let rule = crate::project::rule_for_output(out.write.as_deref())?;
    let mut cert = cert.clone();
    crate::project::apply_cert(&mut cert.cert, rule.as_ref())?;
    CertRequest::from_args(&cert)
}

/// Seals `items` into a SealedSecret named by `out` (or the defaults) and emits it.
fn seal_and_emit(
    certificate: &kseal_keys::Certificate,
    out: &OutArgs,
    default_name: &str,
    default_namespace: Option<&str>,
    labels: BTreeMap<String, String>,
    items: Items,
) -> Result<()> {
    let rule = crate::project::rule_for_output(out.write.as_deref())?;
    let name = out.name.clone().unwrap_or_else(|| default_name.to_owned());
    // -n, else the consumer's namespace (the one its controller reads, e.g. flux-system),
    // else the creation rule's. Every consumer defines one today, so a rule's namespace
    // does not move a bootstrap Secret away from where its consumer looks for it.
    let namespace = out
        .namespace
        .clone()
        .or_else(|| default_namespace.map(str::to_owned))
        .or_else(|| rule.as_ref().and_then(|r| r.namespace()).map(str::to_owned))
        .unwrap_or_else(|| "default".to_owned());
    let scope = out
        .scope
        .or_else(|| rule.as_ref().and_then(|r| r.scope()))
        .unwrap_or(kseal_api::Scope::Strict);
    if let Some(rule) = &rule {
        rule.check_scope(scope, &format!("Secret `{namespace}/{name}`"))?;
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: (!labels.is_empty()).then_some(labels),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        // The plaintext leaves its zeroizing buffers only for this in-memory Secret.
        data: Some(
            items
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.expose().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    };
    let options = SealOptions {
        scope,
        ..SealOptions::default()
    };
    let backend = crate::cmd::seal::backend_for(items.len());
    let sealed =
        crate::cmd::seal::seal_secret_with(backend, &secret, certificate.public_key(), &options)
            .with_context(|| format!("failed to seal Secret `{namespace}/{name}`"))?;
    let format = out
        .format
        .or_else(|| out.write.as_deref().and_then(format_for_path))
        .unwrap_or(crate::args::Format::Yaml);
    let text = render(&[sealed], format)?;
    // Written first, reported after: a failed write never follows a success line.
    crate::output::emit(&text, out.write.as_deref())?;
    eprintln!(
        "sealed Secret `{namespace}/{name}` with items {}",
        items
            .keys()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Git credentials

/// Appends an SSH wire-format string (u32 length, bytes).
fn ssh_string(out: &mut Vec<u8>, data: &[u8]) {
    // Lengths here are at most a few hundred bytes: the cast cannot truncate.
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// A new ed25519 key: (OpenSSH private key file, `ssh-ed25519 AAAA… comment` line).
fn generate_ed25519(comment: &str) -> Result<(Plaintext, String)> {
    use aws_lc_rs::encoding::AsBigEndian as _;
    use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair as _};
    let pair = Ed25519KeyPair::generate()
        .map_err(|_| anyhow::anyhow!("failed to generate an ed25519 key"))?;
    let public = pair.public_key().as_ref().to_vec();
    let seed = pair
        .seed()
        .and_then(|s| s.as_be_bytes())
        .map_err(|_| anyhow::anyhow!("failed to export the ed25519 key"))?;
    let seed: &[u8] = AsRef::<[u8]>::as_ref(&*seed);
    let mut public_blob = Vec::new();
    ssh_string(&mut public_blob, b"ssh-ed25519");
    ssh_string(&mut public_blob, &public);

    let mut check = [0u8; 4];
    aws_lc_rs::rand::fill(&mut check).map_err(|_| anyhow::anyhow!("no randomness"))?;
    let mut private = Plaintext::new(Vec::new()).into_zeroizing();
    private.extend_from_slice(&check);
    private.extend_from_slice(&check);
    ssh_string(&mut private, b"ssh-ed25519");
    ssh_string(&mut private, &public);
    let mut secret = Plaintext::new([seed, public.as_slice()].concat()).into_zeroizing();
    ssh_string(&mut private, &secret);
    secret.iter_mut().for_each(|b| *b = 0);
    ssh_string(&mut private, comment.as_bytes());
    let mut pad = 1u8;
    while !private.len().is_multiple_of(8) {
        private.push(pad);
        pad += 1;
    }
    let mut file = Plaintext::new(Vec::new()).into_zeroizing();
    file.extend_from_slice(b"openssh-key-v1\0");
    ssh_string(&mut file, b"none");
    ssh_string(&mut file, b"none");
    ssh_string(&mut file, b"");
    file.extend_from_slice(&1u32.to_be_bytes());
    ssh_string(&mut file, &public_blob);
    ssh_string(&mut file, &private);
    let b64 = Plaintext::new(
        base64::engine::general_purpose::STANDARD
            .encode(&*file)
            .into_bytes(),
    );
    let mut pem = Vec::with_capacity(b64.len() + 80);
    pem.extend_from_slice(b"-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for line in b64.expose().chunks(70) {
        pem.extend_from_slice(line);
        pem.push(b'\n');
    }
    pem.extend_from_slice(b"-----END OPENSSH PRIVATE KEY-----\n");
    let public_line = format!(
        "ssh-ed25519 {} {comment}",
        base64::engine::general_purpose::STANDARD.encode(&public_blob)
    );
    Ok((Plaintext::new(pem), public_line))
}

/// Reads a u32-length-prefixed SSH string at `*pos`.
fn read_ssh_string<'a>(data: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let len_bytes: [u8; 4] = data.get(*pos..*pos + 4)?.try_into().ok()?;
    let len = u32::from_be_bytes(len_bytes) as usize;
    let start = *pos + 4;
    let out = data.get(start..start.checked_add(len)?)?;
    *pos = start + len;
    Some(out)
}

/// The decoded body of the first PEM block whose label is one of `labels`, and that label.
/// The base64 text and the decoded bytes stay in zeroizing buffers.
fn pem_block<'l>(text: &str, labels: &[&'l str]) -> Option<(&'l str, Plaintext)> {
    let mut lines = text.lines().map(str::trim);
    let label = loop {
        let line = lines.next()?;
        if let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
            .and_then(|l| labels.iter().find(|want| **want == l))
        {
            break *label;
        }
    };
    let end = format!("-----END {label}-----");
    let mut body = Plaintext::new(Vec::new()).into_zeroizing();
    loop {
        let line = lines.next()?;
        if line == end {
            break;
        }
        body.extend(line.bytes().filter(|b| !b.is_ascii_whitespace()));
    }
    let der = Plaintext::new(
        base64::engine::general_purpose::STANDARD
            .decode(&*body)
            .ok()?,
    );
    (!der.is_empty()).then_some((label, der))
}

/// For an OpenSSH private key file: whether it is encrypted, and its public key line
/// (the public half is stored unencrypted in the header).
fn openssh_public(text: &str) -> Option<(bool, String)> {
    let (_, der) = pem_block(text, &["OPENSSH PRIVATE KEY"])?;
    let rest = der.expose().strip_prefix(b"openssh-key-v1\0")?;
    let mut pos = 0;
    let cipher = read_ssh_string(rest, &mut pos)?;
    let kdf = read_ssh_string(rest, &mut pos)?;
    read_ssh_string(rest, &mut pos)?; // kdf options
    pos += 4; // number of keys
    let blob = read_ssh_string(rest, &mut pos)?;
    let mut p = 0;
    let kind = std::str::from_utf8(read_ssh_string(blob, &mut p)?).ok()?;
    Some((
        cipher != b"none" || kdf != b"none",
        format!(
            "{kind} {}",
            base64::engine::general_purpose::STANDARD.encode(blob)
        ),
    ))
}

/// Whether a PEM private key is encrypted: PKCS #8 says so in its label, PKCS #1 in a
/// `Proc-Type: 4,ENCRYPTED` header.
fn pem_is_encrypted(text: &str) -> bool {
    text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || text.contains("Proc-Type: 4,ENCRYPTED")
}

/// An SSH private key for the Secret.
struct SshIdentity {
    /// The key file's content.
    private: Plaintext,
    /// The `ssh-… AAAA… comment` line, when known.
    public: Option<String>,
    /// Whether the key is protected by a passphrase.
    encrypted: bool,
}

/// The SSH identity: generated, or read from --identity-file.
fn ssh_identity(args: &GitArgs) -> Result<SshIdentity> {
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

/// Reads a hidden value: from a flag or variable, from stdin, or from a prompt (asked when
/// `prompt` is set or stdin is a terminal). `None` when no source applies.
fn read_hidden(
    value: Option<&String>,
    from_stdin: bool,
    prompt: bool,
    what: &str,
) -> Result<Option<Plaintext>> {
    use std::io::{IsTerminal as _, Read as _};
    if let Some(v) = value {
        return Ok(Some(Plaintext::new(v.clone().into_bytes())));
    }
    if from_stdin {
        let mut bytes = Plaintext::new(Vec::new()).into_zeroizing();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .with_context(|| format!("failed to read the {what} from standard input"))?;
        // A secret never ends in a newline; `echo` adds one.
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        return Ok(Some(Plaintext::new(std::mem::take(&mut *bytes))));
    }
    if prompt || std::io::stdin().is_terminal() {
        let value = rpassword::prompt_password(format!("{what} (not echoed): "))
            .with_context(|| format!("failed to read the {what} from the terminal"))?;
        return Ok(Some(Plaintext::new(value.into_bytes())));
    }
    Ok(None)
}

/// Reads the password or token: flag/env, stdin, or a hidden prompt.
fn read_secret_value(args: &GitArgs, what: &str) -> Result<Plaintext> {
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
fn ssh_key_passphrase(args: &GitArgs, path: &Path, encrypted: bool) -> Result<Option<Plaintext>> {
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

/// Reads a PEM file of certificates (a CA bundle or a client certificate chain).
fn read_pem_certificates(path: &Path, what: &str) -> Result<Plaintext> {
    use ureq::tls::PemItem;
    let bytes =
        Plaintext::new(fs_err::read(path).with_context(|| format!("failed to read {what}"))?);
    let text = std::str::from_utf8(bytes.expose()).with_context(|| {
        format!(
            "`{}` is not a PEM file (expected {what}: -----BEGIN CERTIFICATE-----)",
            path.display()
        )
    })?;
    // Checked before parsing, so a key is never decoded outside a zeroizing buffer.
    if text.contains("PRIVATE KEY-----") {
        bail!(
            "`{}` holds a private key, but {what} must hold only certificates",
            path.display()
        );
    }
    let mut certificates = 0;
    for item in ureq::tls::parse_pem(bytes.expose()) {
        match item {
            Ok(PemItem::Certificate(_)) => certificates += 1,
            Ok(_) => {}
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "`{}` is not a valid PEM file (expected {what})",
                    path.display()
                )));
            }
        }
    }
    if certificates == 0 {
        bail!(
            "`{}` holds no PEM certificate (expected {what}: -----BEGIN CERTIFICATE-----)",
            path.display()
        );
    }
    Ok(bytes)
}

/// Reads an unencrypted PEM private key whose label is one of `labels`.
fn read_pem_private_key(path: &Path, what: &str, labels: &[&str]) -> Result<Plaintext> {
    let bytes =
        Plaintext::new(fs_err::read(path).with_context(|| format!("failed to read {what}"))?);
    let expected = labels
        .iter()
        .map(|l| format!("-----BEGIN {l}-----"))
        .collect::<Vec<_>>()
        .join(" or ");
    let text = std::str::from_utf8(bytes.expose()).with_context(|| {
        format!(
            "`{}` is not a PEM file (expected {what}: {expected})",
            path.display()
        )
    })?;
    if pem_is_encrypted(text) {
        bail!(
            "`{}` is an encrypted private key: {what} must be unencrypted (the sealed Secret \
             protects it); export one with `openssl pkey -in FILE -out COPY`",
            path.display()
        );
    }
    if pem_block(text, labels).is_none() {
        bail!(
            "`{}` is not a PEM private key (expected {what}: {expected})",
            path.display()
        );
    }
    Ok(bytes)
}

fn is_ssh_url(url: &str) -> bool {
    url.starts_with("ssh://") || (url.contains('@') && !url.contains("://"))
}

/// A Secret name derived from a repository URL: `repo-github-com-acme-fleet`.
pub(crate) fn name_from_url(prefix: &str, url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let rest = rest.strip_suffix(".git").unwrap_or(rest);
    let mut name = String::from(prefix);
    for c in rest.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    name.truncate(63);
    name.trim_end_matches('-').to_owned()
}

/// The Argo CD repository settings that are set, as a phrase ("--project and --insecure
/// only apply") for error messages; `None` when there are none.
fn argocd_only_flags(args: &GitArgs) -> Option<String> {
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
fn check_git_args(args: &GitArgs, ssh: bool, https: bool) -> Result<()> {
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
    // Certificate first: a key must never be generated for a Secret that cannot be sealed.
    let certificate = cert.load_one()?;
    let mut items = Items::new();
    let mut labels = BTreeMap::new();
    let mut generated_public = None;
    let text = |value: &str| Plaintext::new(value.as_bytes().to_vec());
    let (default_name, default_namespace) = match args.consumer {
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
            items.insert("type".to_owned(), text("git"));
            items.insert("url".to_owned(), text(url));
            if let Some(project) = &args.project {
                items.insert("project".to_owned(), text(project));
            }
            if let Some(name) = &args.repo_name {
                items.insert("name".to_owned(), text(name));
            }
            if args.insecure {
                items.insert("insecure".to_owned(), text("true"));
                eprintln!(
                    "warning: --insecure: Argo CD will not verify the server of `{url}` (TLS \
                     certificate or SSH host key); anyone on the network path can impersonate it"
                );
            }
            if args.enable_lfs {
                items.insert("enableLfs".to_owned(), text("true"));
            }
            (name_from_url(prefix, url), "argocd")
        }
    };
    if ssh {
        let identity = ssh_identity(&args)?;
        if args.generate_key {
            generated_public.clone_from(&identity.public);
        }
        match args.consumer {
            GitConsumer::Flux => {
                let known_hosts = args
                    .known_hosts_file
                    .as_deref()
                    .context("Flux needs --known-hosts-file for SSH")?;
                let passphrase = match &args.identity_file {
                    Some(path) => ssh_key_passphrase(&args, path, identity.encrypted)?,
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
                        items.insert("identity.pub".to_owned(), text(&format!("{line}\n")));
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
    } else if let (Some(app_id), Some(installation_id), Some(key_path)) = (
        args.github_app_id,
        args.github_app_installation_id,
        &args.github_app_private_key,
    ) {
        let key = read_pem_private_key(
            key_path,
            "the GitHub App's private key",
            &["RSA PRIVATE KEY", "PRIVATE KEY"],
        )?;
        items.insert("githubAppID".to_owned(), text(&app_id.to_string()));
        items.insert(
            "githubAppInstallationID".to_owned(),
            text(&installation_id.to_string()),
        );
        items.insert("githubAppPrivateKey".to_owned(), key);
        if let Some(base) = &args.github_app_enterprise_base_url {
            let key = match args.consumer {
                GitConsumer::Flux => "githubAppBaseURL",
                GitConsumer::Argocd => "githubAppEnterpriseBaseUrl",
            };
            items.insert(key.to_owned(), text(base));
        }
        if args.consumer == GitConsumer::Flux {
            eprintln!(
                "note: Flux uses GitHub App credentials only for a GitRepository with \
                 `.spec.provider: github`"
            );
        }
    } else if args.bearer_token {
        let token = read_secret_value(&args, "bearer token")?;
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
        let password = read_secret_value(&args, "password")?;
        if password.is_empty() {
            bail!("the password is empty");
        }
        items.insert("username".to_owned(), text(username));
        items.insert("password".to_owned(), password);
    }
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

// ---------------------------------------------------------------------------------------
// AWS credentials

/// Static AWS credentials.
struct AwsKeys {
    access_key_id: String,
    secret_access_key: Plaintext,
    session_token: Option<Plaintext>,
    origin: String,
}

/// Reads one profile of an AWS shared credentials file (INI).
fn read_profile(path: &Path, profile: &str) -> Result<AwsKeys> {
    let text = Plaintext::new(
        fs_err::read(path).context("failed to read the AWS shared credentials file")?,
    );
    let text = std::str::from_utf8(text.expose())
        .with_context(|| format!("`{}` is not UTF-8 text", path.display()))?;
    let mut section: Option<&str> = None;
    let mut values: BTreeMap<&str, &str> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim();
            section = Some(name.strip_prefix("profile ").unwrap_or(name).trim());
            continue;
        }
        if section == Some(profile)
            && let Some((k, v)) = line.split_once('=')
        {
            values.insert(k.trim(), v.trim());
        }
    }
    let get = |k: &str| values.get(k).copied().filter(|v| !v.is_empty());
    let (Some(id), Some(secret)) = (get("aws_access_key_id"), get("aws_secret_access_key")) else {
        bail!(
            "profile `{profile}` in `{}` has no aws_access_key_id and aws_secret_access_key",
            path.display()
        );
    };
    Ok(AwsKeys {
        access_key_id: id.to_owned(),
        secret_access_key: Plaintext::new(secret.as_bytes().to_vec()),
        session_token: get("aws_session_token").map(|t| Plaintext::new(t.as_bytes().to_vec())),
        origin: format!("profile `{profile}`"),
    })
}

fn credentials_file() -> Result<PathBuf> {
    if let Some(p) =
        std::env::var_os(crate::env::AWS_SHARED_CREDENTIALS_FILE).filter(|p| !p.is_empty())
    {
        return Ok(PathBuf::from(p));
    }
    let home = crate::kubeconfig::home_dir()
        .context("cannot find the home directory for ~/.aws/credentials")?;
    Ok(home.join(".aws").join("credentials"))
}

fn aws_keys(args: &AwsArgs) -> Result<AwsKeys> {
    if let Some(profile) = &args.profile {
        return read_profile(&credentials_file()?, profile);
    }
    if args.from_env {
        return aws_keys_from_env();
    }
    if let Some(id) = &args.access_key_id {
        return Ok(AwsKeys {
            access_key_id: id.clone(),
            secret_access_key: secret_access_key(args)?,
            session_token: args
                .session_token
                .as_ref()
                .map(|t| Plaintext::new(t.clone().into_bytes())),
            origin: "--access-key-id".to_owned(),
        });
    }
    // No source named. The AWS CLI's variables are never taken implicitly: in the shell that
    // seeds the ring they are the administrator's own keys, not the consumer's.
    let in_env = std::env::var_os(crate::env::AWS_ACCESS_KEY_ID).is_some_and(|v| !v.is_empty());
    let hint = if in_env {
        "\n(AWS_ACCESS_KEY_ID is set in this shell, but it is not used unless you pass \
         --from-env: those are usually your own keys, not the ones the consumer should have)"
    } else {
        ""
    };
    bail!(
        "which AWS keys should be sealed? Name the source: --profile NAME (a profile of the \
         shared credentials file), --access-key-id ID with --secret-access-key-stdin (or \
         --secret-access-key-file FILE, or a prompt), or --from-env{hint}"
    )
}

/// `--from-env`: the AWS CLI's variables, all or nothing.
fn aws_keys_from_env() -> Result<AwsKeys> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (id, secret) = (
        var(crate::env::AWS_ACCESS_KEY_ID),
        var(crate::env::AWS_SECRET_ACCESS_KEY),
    );
    let (Some(id), Some(secret)) = (id, secret) else {
        bail!(
            "--from-env needs both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to be set and \
             not empty"
        );
    };
    Ok(AwsKeys {
        access_key_id: id,
        secret_access_key: Plaintext::new(secret.into_bytes()),
        session_token: var(crate::env::AWS_SESSION_TOKEN).map(|t| Plaintext::new(t.into_bytes())),
        origin: "AWS_* environment variables (--from-env)".to_owned(),
    })
}

/// The secret access key that goes with `--access-key-id`: from stdin, a file, the deprecated
/// flag, or a hidden prompt on a terminal.
fn secret_access_key(args: &AwsArgs) -> Result<Plaintext> {
    use std::io::{IsTerminal as _, Read as _};
    let mut bytes = if args.secret_access_key_stdin {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .context("failed to read the secret access key from standard input")?;
        bytes
    } else if let Some(path) = &args.secret_access_key_file {
        fs_err::read(path).context("failed to read the secret access key")?
    } else if let Some(secret) = &args.secret_access_key {
        eprintln!(
            "warning: --secret-access-key is deprecated: a secret on the command line is \
             visible in `ps` and shell history; use --secret-access-key-stdin or \
             --secret-access-key-file"
        );
        secret.clone().into_bytes()
    } else if std::io::stdin().is_terminal() {
        rpassword::prompt_password("secret access key (not echoed): ")
            .context("failed to read the secret access key from the terminal")?
            .into_bytes()
    } else {
        bail!(
            "--access-key-id needs the secret access key: pass --secret-access-key-stdin (and \
             pipe it in) or --secret-access-key-file FILE"
        );
    };
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    if bytes.is_empty() {
        bail!("the secret access key is empty");
    }
    Ok(Plaintext::new(bytes))
}

/// Long-term (`AKIA…`) keys never take a session token: one found beside them is a leftover
/// of another login (e.g. `AWS_SESSION_TOKEN` in the shell) and would break the credentials.
fn drop_stray_session_token(keys: &mut AwsKeys) -> bool {
    keys.access_key_id.starts_with("AKIA") && keys.session_token.take().is_some()
}

pub(crate) fn aws(args: AwsArgs) -> Result<()> {
    let cert = cert_request(&args.cert, &args.out)?;
    let mut keys = aws_keys(&args)?;
    if drop_stray_session_token(&mut keys) {
        eprintln!(
            "warning: ignoring the session token (--session-token or AWS_SESSION_TOKEN): \
             AKIA… keys are long-term keys and take none"
        );
    }
    if keys.access_key_id.is_empty() {
        bail!("the access key id from {} is empty", keys.origin);
    }
    if keys.secret_access_key.expose().is_empty() {
        bail!("the secret access key from {} is empty", keys.origin);
    }
    let text_ok = |v: &[u8]| !v.is_empty() && v.iter().all(|b| b.is_ascii_graphic());
    if !text_ok(keys.access_key_id.as_bytes())
        || !text_ok(keys.secret_access_key.expose())
        || keys
            .session_token
            .as_ref()
            .is_some_and(|t| !text_ok(t.expose()))
    {
        bail!(
            "the AWS credentials from {} contain spaces or control characters",
            keys.origin
        );
    }
    if !(keys.access_key_id.starts_with("AKIA") || keys.access_key_id.starts_with("ASIA")) {
        eprintln!(
            "warning: access key id `{}` does not look like an AWS key (AKIA… or ASIA…)",
            keys.access_key_id
        );
    }
    if keys.access_key_id.starts_with("ASIA") && keys.session_token.is_none() {
        eprintln!("warning: ASIA… keys are temporary and need a session token");
    }
    eprintln!(
        "using AWS access key {} from {}",
        keys.access_key_id, keys.origin
    );
    let mut items = Items::new();
    let (name, namespace) = match args.consumer {
        AwsConsumer::Crossplane => {
            let mut ini = Plaintext::new(Vec::new()).into_zeroizing();
            ini.extend_from_slice(b"[default]\naws_access_key_id = ");
            ini.extend_from_slice(keys.access_key_id.as_bytes());
            ini.extend_from_slice(b"\naws_secret_access_key = ");
            ini.extend_from_slice(keys.secret_access_key.expose());
            if let Some(token) = &keys.session_token {
                ini.extend_from_slice(b"\naws_session_token = ");
                ini.extend_from_slice(token.expose());
            }
            ini.push(b'\n');
            items.insert("credentials".to_owned(), Plaintext::new(ini.to_vec()));
            ("aws-credentials", "crossplane-system")
        }
        AwsConsumer::Eso => {
            items.insert(
                "access-key".to_owned(),
                Plaintext::new(keys.access_key_id.as_bytes().to_vec()),
            );
            items.insert(
                "secret-access-key".to_owned(),
                Plaintext::new(keys.secret_access_key.expose().to_vec()),
            );
            if let Some(token) = &keys.session_token {
                items.insert(
                    "session-token".to_owned(),
                    Plaintext::new(token.expose().to_vec()),
                );
            }
            ("awssm-secret", "external-secrets")
        }
    };
    seal_and_emit(
        &cert.load_one()?,
        &args.out,
        name,
        Some(namespace),
        BTreeMap::new(),
        items,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_openssh_files_with_a_matching_public_line() {
        let (private, public) = generate_ed25519("test").unwrap();
        let text = std::str::from_utf8(private.expose()).unwrap();
        assert!(text.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        assert!(text.ends_with("-----END OPENSSH PRIVATE KEY-----\n"));
        let (encrypted, line) = openssh_public(text).unwrap();
        assert!(!encrypted);
        assert!(public.starts_with(&line));
        assert!(public.starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"));
        assert!(public.ends_with(" test"));
    }

    #[test]
    fn pem_blocks_need_a_wanted_label_a_matching_end_and_base64() {
        let key =
            "junk\n-----BEGIN RSA PRIVATE KEY-----\nAAEC\nAw==\n-----END RSA PRIVATE KEY-----\n";
        let (label, der) = pem_block(key, &["PRIVATE KEY", "RSA PRIVATE KEY"]).unwrap();
        assert_eq!(label, "RSA PRIVATE KEY");
        assert_eq!(der.expose(), [0, 1, 2, 3]);
        assert!(pem_block(key, &["PRIVATE KEY"]).is_none());
        let unterminated = "-----BEGIN PRIVATE KEY-----\nAAEC\n";
        assert!(pem_block(unterminated, &["PRIVATE KEY"]).is_none());
        let not_base64 = "-----BEGIN PRIVATE KEY-----\n#!?\n-----END PRIVATE KEY-----\n";
        assert!(pem_block(not_base64, &["PRIVATE KEY"]).is_none());
        let empty = "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n";
        assert!(pem_block(empty, &["PRIVATE KEY"]).is_none());
    }

    #[test]
    fn encrypted_pem_keys_are_recognised_by_label_or_header() {
        assert!(pem_is_encrypted(
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAA==\n-----END ENCRYPTED PRIVATE KEY-----\n"
        ));
        assert!(pem_is_encrypted(
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n"
        ));
        assert!(!pem_is_encrypted(
            "-----BEGIN RSA PRIVATE KEY-----\nENCRYPTEDAAAA\n-----END RSA PRIVATE KEY-----\n"
        ));
    }

    #[test]
    fn secret_names_derive_from_repository_urls() {
        assert_eq!(
            name_from_url("repo-", "git@github.com:acme/fleet.git"),
            "repo-github-com-acme-fleet"
        );
        assert_eq!(
            name_from_url("creds-", "https://github.com/acme"),
            "creds-github-com-acme"
        );
        assert!(name_from_url("repo-", &"a".repeat(200)).len() <= 63);
    }

    #[test]
    fn profiles_are_read_from_ini_sections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials");
        fs_err::write(
            &path,
            "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = s1\n\n[profile ci]\naws_access_key_id=ASIACI\naws_secret_access_key=s2\naws_session_token=t2\n",
        )
        .unwrap();
        let ci = read_profile(&path, "ci").unwrap();
        assert_eq!(ci.access_key_id, "ASIACI");
        assert_eq!(ci.secret_access_key.expose(), b"s2");
        assert_eq!(ci.session_token.unwrap().expose(), b"t2");
        let err = read_profile(&path, "nope").err().unwrap().to_string();
        assert!(err.starts_with("profile `nope`"), "{err}");
    }

    #[test]
    fn a_session_token_beside_a_long_term_key_is_dropped() {
        let keys = |id: &str| AwsKeys {
            access_key_id: id.to_owned(),
            secret_access_key: Plaintext::new(b"s".to_vec()),
            session_token: Some(Plaintext::new(b"t".to_vec())),
            origin: "test".to_owned(),
        };
        let mut long_term = keys("AKIAIOSFODNN7EXAMPLE");
        assert!(drop_stray_session_token(&mut long_term));
        assert!(long_term.session_token.is_none());
        let mut temporary = keys("ASIAIOSFODNN7EXAMPLE");
        assert!(!drop_stray_session_token(&mut temporary));
        assert!(temporary.session_token.is_some());
    }
}
