//! `kseal unseal`: recovery with local private keys, and the key loading shared by the
//! offline maintenance commands.

use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use kseal_api::SealedSecret;
use kseal_keys::{Certificate, CertificateOptions, KeyPair, KeyRing, PrivateKey};

use crate::args::{Format, UnsealArgs};
use crate::manifest::{Input, Source, render};

/// A private key (PEM), optionally followed by its certificate. Without a certificate a
/// throwaway one is made so the key can join a ring (it only orders keys).
fn pair_from_pem(key_pem: &str, cert_pem: Option<&str>, what: &str) -> Result<KeyPair> {
    let context = || format!("failed to read private key {what}");
    let key = PrivateKey::from_pem(key_pem).with_context(context)?;
    let cert = match cert_pem.map(Certificate::from_pem) {
        Some(Ok(cert)) => cert,
        Some(Err(e)) => {
            return Err(e).with_context(|| format!("failed to read certificate {what}"));
        }
        None => key
            .self_signed_certificate(&CertificateOptions {
                common_name: "kseal-recovery".into(),
                // Oldest possible, so a key with a real certificate ranks newer; valid long
                // enough never to count as expired.
                not_before: SystemTime::UNIX_EPOCH,
                validity: std::time::Duration::from_secs(200 * 365 * 86_400),
            })
            .with_context(context)?,
    };
    KeyPair::new(key, cert).with_context(context)
}

/// One item of a Secret's `data` (or `stringData`) as text.
pub(crate) fn secret_item(secret: &Secret, key: &str) -> Option<String> {
    if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
        return String::from_utf8(v.0.clone()).ok();
    }
    secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key))
        .cloned()
}

/// The key Secrets of a manifest file (`tls.key` and `tls.crt` of each), as `kubectl get
/// secret -o yaml` prints them (one Secret or a `v1 List`).
pub(crate) fn key_secrets(path: &Path, text: String) -> Result<Vec<Secret>> {
    let input = Input {
        source: Source::File(path.to_owned()),
        text,
    };
    input.objects("Secret", "v1").with_context(|| {
        format!(
            "`{}` is neither a PEM private key nor key Secret manifests",
            path.display()
        )
    })
}

/// Whether a file is PEM rather than a manifest.
pub(crate) fn is_pem(text: &str) -> bool {
    text.trim_start().starts_with("-----BEGIN")
}

/// Loads every key pair of a key file: a PEM private key (optionally with its
/// certificate), key Secret manifests, or a `v1 List` of key Secrets.
pub(crate) fn read_key_pairs(path: &Path) -> Result<Vec<KeyPair>> {
    let text = fs_err::read_to_string(path).context("failed to read a private key file")?;
    let what = format!("`{}`", path.display());
    if is_pem(&text) {
        if text.contains("-----BEGIN CERTIFICATE-----") {
            return Ok(vec![pair_from_pem(&text, Some(&text), &what)?]);
        }
        // `kseal keys generate` writes `tls.key` next to `tls.crt`: use the certificate
        // beside the key when it belongs to it (it dates the key for `reseal`).
        let sibling = path.with_extension("crt");
        if let Ok(cert) = fs_err::read_to_string(&sibling)
            && let Ok(pair) = pair_from_pem(&text, Some(&cert), &what)
        {
            return Ok(vec![pair]);
        }
        return Ok(vec![pair_from_pem(&text, None, &what)?]);
    }
    let secrets = key_secrets(path, text)?;
    secrets
        .iter()
        .map(|secret| {
            let name = secret.metadata.name.as_deref().unwrap_or("<unnamed>");
            let what = format!("of Secret `{name}` in `{}`", path.display());
            let key = secret_item(secret, "tls.key").with_context(|| {
                format!("Secret `{name}` in `{}` has no tls.key", path.display())
            })?;
            let cert = secret_item(secret, "tls.crt");
            let pair = pair_from_pem(&key, cert.as_deref(), &what)?;
            // Bitnami orders keys by the Secret's creation time; so do we when it is known.
            Ok(match &secret.metadata.creation_timestamp {
                Some(t) => pair.with_order_time(SystemTime::from(t.0)),
                None => pair,
            })
        })
        .collect()
}

/// Loads all key files into one ring.
pub(crate) fn load_ring(paths: &[std::path::PathBuf]) -> Result<KeyRing> {
    let mut ring = KeyRing::new();
    for path in paths {
        for pair in read_key_pairs(path)? {
            ring.insert(pair);
        }
    }
    if ring.is_empty() {
        bail!("no private key found in the --key files");
    }
    Ok(ring)
}

/// Unseals every SealedSecret of `input` with `ring` and renders the Secrets.
pub(crate) fn unseal_input(input: &Input, ring: &KeyRing, format: Format) -> Result<String> {
    let sealed: Vec<SealedSecret> = input.objects("SealedSecret", "bitnami.com/v1alpha1")?;
    let secrets = sealed
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let name = s.metadata.name.as_deref().unwrap_or("<unnamed>");
            kseal_api::unseal(s, ring).with_context(|| {
                format!(
                    "failed to unseal `{name}` (document {} of {})",
                    i + 1,
                    input.source
                )
            })
        })
        .collect::<Result<Vec<Secret>>>()?;
    render(&secrets, format)
}

pub(crate) fn run(args: UnsealArgs) -> Result<()> {
    let ring = load_ring(&args.keys.keys)?;
    let inputs = Input::read_all(&args.files.all())?;
    let format = args.format.unwrap_or_else(|| inputs[0].format());
    // Everything is unsealed before anything is printed.
    let out = inputs
        .iter()
        .map(|input| unseal_input(input, &ring, format))
        .collect::<Result<String>>()?;
    crate::output::stdout(&out)
}
