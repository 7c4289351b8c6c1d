//! `kseal unseal`: recovery with local private keys.

use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Secret;
use kseal_api::SealedSecret;
use kseal_keys::{Certificate, CertificateOptions, KeyPair, KeyRing, PrivateKey};

use crate::args::{Format, UnsealArgs};
use crate::manifest::{Input, render};

/// Loads a key file: a PEM private key, optionally followed by its certificate. Without a
/// certificate a throwaway one is made so the key can join a ring (it only orders keys).
pub(crate) fn read_key_pair(path: &Path) -> Result<KeyPair> {
    let text = fs_err::read_to_string(path).context("failed to read a private key")?;
    let context = || format!("failed to read private key `{}`", path.display());
    let key = PrivateKey::from_pem(&text).with_context(context)?;
    let cert = match Certificate::from_pem(&text) {
        Ok(cert) => cert,
        Err(_) => key
            .self_signed_certificate(&CertificateOptions {
                common_name: "kseal-recovery".into(),
                not_before: SystemTime::UNIX_EPOCH,
                ..CertificateOptions::default()
            })
            .with_context(context)?,
    };
    KeyPair::new(key, cert).with_context(context)
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
    let ring = args
        .keys
        .iter()
        .map(|p| read_key_pair(p))
        .collect::<Result<KeyRing>>()?;
    let input = Input::read(args.file.as_deref())?;
    let format = args.format.unwrap_or_else(|| input.format());
    let out = unseal_input(&input, &ring, format)?;
    crate::output::stdout(&out)
}
