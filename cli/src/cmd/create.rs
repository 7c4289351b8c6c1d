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

/// Seals `items` into a SealedSecret named by `out` (or the defaults) and emits it.
fn seal_and_emit(
    certificate: &kseal_keys::Certificate,
    out: &OutArgs,
    default_name: &str,
    default_namespace: &str,
    labels: BTreeMap<String, String>,
    items: Items,
) -> Result<()> {
    let name = out.name.clone().unwrap_or_else(|| default_name.to_owned());
    let namespace = out
        .namespace
        .clone()
        .unwrap_or_else(|| default_namespace.to_owned());
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
        scope: out.scope,
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
    eprintln!(
        "sealed Secret `{namespace}/{name}` with items {}",
        items
            .keys()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    crate::output::emit(&text, out.write.as_deref())
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

/// For an OpenSSH private key file: whether it is encrypted, and its public key line
/// (the public half is stored unencrypted in the header).
fn openssh_public(text: &str) -> Option<(bool, String)> {
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .ok()?;
    let rest = der.strip_prefix(b"openssh-key-v1\0")?;
    let mut pos = 0;
    let cipher = read_ssh_string(rest, &mut pos)?;
    read_ssh_string(rest, &mut pos)?; // kdf name
    read_ssh_string(rest, &mut pos)?; // kdf options
    pos += 4; // number of keys
    let blob = read_ssh_string(rest, &mut pos)?;
    let mut p = 0;
    let kind = std::str::from_utf8(read_ssh_string(blob, &mut p)?).ok()?;
    Some((
        cipher != b"none",
        format!(
            "{kind} {}",
            base64::engine::general_purpose::STANDARD.encode(blob)
        ),
    ))
}

/// The SSH identity: private key file content and public key line (if known).
fn ssh_identity(args: &GitArgs) -> Result<(Plaintext, Option<String>)> {
    if args.generate_key {
        let (private, public) = generate_ed25519(&args.key_comment)?;
        return Ok((private, Some(public)));
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
    if let Some((true, _)) = from_header {
        bail!(
            "`{}` is protected by a passphrase: Flux and Argo CD need an unencrypted key (the \
             sealed Secret protects it); export one with `ssh-keygen -p -N '' -f COPY`",
            path.display()
        );
    }
    if as_text.contains("ENCRYPTED") {
        bail!("`{}` is protected by a passphrase", path.display());
    }
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
    Ok((text, public))
}

/// Reads the password or token: flag/env, stdin, or a hidden prompt.
fn read_secret_value(args: &GitArgs, what: &str) -> Result<Plaintext> {
    use std::io::{IsTerminal as _, Read as _};
    if let Some(p) = &args.password {
        return Ok(Plaintext::new(p.clone().into_bytes()));
    }
    if args.password_stdin {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .with_context(|| format!("failed to read the {what} from standard input"))?;
        // A password never ends in a newline; `echo` adds one.
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        return Ok(Plaintext::new(bytes));
    }
    if args.password_prompt || std::io::stdin().is_terminal() {
        let value = rpassword::prompt_password(format!("{what} (not echoed): "))
            .with_context(|| format!("failed to read the {what} from the terminal"))?;
        return Ok(Plaintext::new(value.into_bytes()));
    }
    bail!("no {what}: pass --password-prompt, --password-stdin or KSEAL_GIT_PASSWORD")
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

pub(crate) fn git(args: GitArgs) -> Result<()> {
    let cert = CertRequest::from_args(&args.cert)?;
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
    let https = args.username.is_some()
        || args.password.is_some()
        || args.password_prompt
        || args.password_stdin
        || args.bearer_token;
    if ssh && https {
        bail!(
            "choose SSH (--identity-file/--generate-key) or HTTPS (--username/--password…), not both"
        );
    }
    if !ssh && !https {
        bail!(
            "no credentials: for SSH pass --identity-file FILE or --generate-key; for HTTPS pass \
             --username with --password-prompt/--password-stdin, or --bearer-token"
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
    // Certificate first: a key must never be generated for a Secret that cannot be sealed.
    let certificate = cert.load_one()?;
    let mut items = Items::new();
    let mut labels = BTreeMap::new();
    let mut generated_public = None;
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
            items.insert("type".to_owned(), Plaintext::new(b"git".to_vec()));
            items.insert("url".to_owned(), Plaintext::new(url.as_bytes().to_vec()));
            (name_from_url(prefix, url), "argocd")
        }
    };
    if ssh {
        let (private, public) = ssh_identity(&args)?;
        if args.generate_key {
            generated_public.clone_from(&public);
        }
        match args.consumer {
            GitConsumer::Flux => {
                let known_hosts = args
                    .known_hosts_file
                    .as_deref()
                    .context("Flux needs --known-hosts-file for SSH")?;
                let known = fs_err::read(known_hosts).context("failed to read known_hosts")?;
                if known.iter().all(u8::is_ascii_whitespace) {
                    bail!("`{}` is empty", known_hosts.display());
                }
                items.insert("identity".to_owned(), private);
                match public {
                    Some(line) => {
                        items.insert(
                            "identity.pub".to_owned(),
                            Plaintext::new(format!("{line}\n").into_bytes()),
                        );
                    }
                    None => eprintln!(
                        "note: no public key found (no `.pub` file next to the key): \
                         `identity.pub` is left out"
                    ),
                }
                items.insert("known_hosts".to_owned(), Plaintext::new(known));
            }
            GitConsumer::Argocd => {
                if args.known_hosts_file.is_some() {
                    eprintln!(
                        "note: Argo CD reads SSH known hosts from the argocd-ssh-known-hosts-cm \
                         ConfigMap, not from repository Secrets: --known-hosts-file is ignored"
                    );
                }
                items.insert("sshPrivateKey".to_owned(), private);
            }
        }
    } else if args.bearer_token {
        let token = read_secret_value(&args, "bearer token")?;
        items.insert("bearerToken".to_owned(), token);
    } else {
        let username = args
            .username
            .as_deref()
            .context("HTTPS credentials need --username (or --bearer-token)")?;
        let password = read_secret_value(&args, "password")?;
        if password.is_empty() {
            bail!("the password is empty");
        }
        items.insert(
            "username".to_owned(),
            Plaintext::new(username.as_bytes().to_vec()),
        );
        items.insert("password".to_owned(), password);
    }
    seal_and_emit(
        &certificate,
        &args.out,
        &default_name,
        default_namespace,
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
    match (&args.access_key_id, &args.secret_access_key) {
        (Some(id), Some(secret)) => {
            return Ok(AwsKeys {
                access_key_id: id.clone(),
                secret_access_key: Plaintext::new(secret.clone().into_bytes()),
                session_token: args
                    .session_token
                    .as_ref()
                    .map(|t| Plaintext::new(t.clone().into_bytes())),
                origin: "flags or AWS_* environment variables".to_owned(),
            });
        }
        (Some(_), None) | (None, Some(_)) => bail!(
            "incomplete AWS credentials: both the access key id and the secret access key are \
             needed (--access-key-id/AWS_ACCESS_KEY_ID, --secret-access-key/AWS_SECRET_ACCESS_KEY)"
        ),
        (None, None) => {}
    }
    let profile = std::env::var(crate::env::AWS_PROFILE)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    let file = credentials_file()?;
    if !file.exists() {
        bail!(
            "no AWS credentials: pass --profile NAME, or set AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY (`{}` does not exist)",
            file.display()
        );
    }
    read_profile(&file, &profile)
}

pub(crate) fn aws(args: AwsArgs) -> Result<()> {
    let cert = CertRequest::from_args(&args.cert)?;
    let keys = aws_keys(&args)?;
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
        namespace,
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
}
