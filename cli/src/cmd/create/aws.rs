//! `kseal create aws-credentials`: sealed AWS keys for Crossplane or External Secrets, from
//! a profile, the environment or a prompt.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use kseal_keys::Plaintext;

use super::ini::{AwsKeys, read_profile};
use super::{Items, cert_request, seal_and_emit};
use crate::args::{AwsArgs, AwsConsumer};

pub(super) fn credentials_file() -> Result<PathBuf> {
    if let Some(p) =
        std::env::var_os(crate::env::AWS_SHARED_CREDENTIALS_FILE).filter(|p| !p.is_empty())
    {
        return Ok(PathBuf::from(p));
    }
    let home = crate::kubeconfig::home_dir()
        .context("cannot find the home directory for ~/.aws/credentials")?;
    Ok(home.join(".aws").join("credentials"))
}

pub(super) fn aws_keys(args: &AwsArgs) -> Result<AwsKeys> {
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
pub(super) fn aws_keys_from_env() -> Result<AwsKeys> {
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
pub(super) fn secret_access_key(args: &AwsArgs) -> Result<Plaintext> {
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
pub(super) fn drop_stray_session_token(keys: &mut AwsKeys) -> bool {
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
        &super::load_certificate(&cert, &args.out, Some(namespace))?,
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
