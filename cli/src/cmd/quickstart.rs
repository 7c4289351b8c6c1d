//! `kseal quickstart`: the whole offline flow on an embedded sample, in a local directory.

use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result, ensure};
use kseal_api::SealOptions;
use kseal_keys::{CertificateOptions, KeyRing, KeySize};

use crate::args::{Format, QuickstartArgs};
use crate::keysource::keydir::{GenerateRequest, KEY_FILE};
use crate::manifest::{Input, Source, write_atomic};

/// The sample: a Flux Git credentials Secret, the kind of secret a new cluster needs first.
const SAMPLE_SECRET: &str = "\
apiVersion: v1
kind: Secret
metadata:
  name: flux-system
  namespace: flux-system
  labels:
    app.kubernetes.io/part-of: flux
type: Opaque
stringData:
  username: git
  password: quickstart-not-a-real-token
";

pub(crate) fn run(args: QuickstartArgs) -> Result<()> {
    let dir = args.dir;
    let keys_dir = dir.join("keys");
    let step = |n: u8, text: &str| eprintln!("[{n}/4] {text}");

    step(1, &format!("key pair in `{}`", keys_dir.display()));
    let pair = if keys_dir.join(KEY_FILE).exists() {
        let pair = crate::keysource::keydir::load_dir(&keys_dir)?;
        eprintln!("      reusing the existing key");
        pair
    } else {
        crate::keysource::keydir::generate(&GenerateRequest {
            out_dir: keys_dir.clone(),
            size: KeySize::Rsa4096,
            certificate: CertificateOptions {
                not_before: SystemTime::now(),
                validity: Duration::from_secs(3650 * 86_400),
                ..CertificateOptions::default()
            },
            force: false,
        })?
    };
    eprintln!("      fingerprint {}", pair.id());

    step(2, "sample Secret (plaintext, never commit this)");
    let secret_path = dir.join("secret.yaml");
    write_atomic(&secret_path, SAMPLE_SECRET.as_bytes(), true)?;
    eprintln!("      wrote `{}`", secret_path.display());

    step(3, "seal it with the public certificate only");
    let input = Input {
        source: Source::File(secret_path),
        text: SAMPLE_SECRET.to_owned(),
    };
    let options = SealOptions {
        default_namespace: Some("default".into()),
        ..SealOptions::default()
    };
    let sealed = crate::sealing::seal_input(&input, pair.certificate(), &options, Format::Yaml)?;
    let sealed_path = dir.join("sealed-secret.yaml");
    write_atomic(&sealed_path, sealed.as_bytes(), false)?;
    eprintln!("      wrote `{}` (safe to commit)", sealed_path.display());

    step(4, "unseal it with the private key, as the controller will");
    let ring: KeyRing = [pair].into_iter().collect();
    let sealed_input = Input {
        source: Source::File(sealed_path.clone()),
        text: sealed.clone(),
    };
    let unsealed = crate::opening::unseal_input(&sealed_input, &ring, Format::Yaml)?;
    let unsealed_path = dir.join("unsealed-secret.yaml");
    write_atomic(&unsealed_path, unsealed.as_bytes(), true)?;
    let secrets: Vec<k8s_openapi::api::core::v1::Secret> = Input {
        source: Source::File(unsealed_path.clone()),
        text: unsealed,
    }
    .objects("Secret", "v1")?;
    let data = secrets
        .first()
        .and_then(|s| s.data.as_ref())
        .context("the unsealed Secret has no data")?;
    ensure!(
        data.get("password").map(|v| v.0.as_slice())
            == Some(b"quickstart-not-a-real-token".as_slice()),
        "the round trip changed the data"
    );
    eprintln!(
        "      wrote `{}`: {}, identical to the input",
        unsealed_path.display(),
        crate::text::count(data.len(), "item")
    );
    eprintln!("done. The SealedSecret:");
    crate::output::stdout(&sealed)
}
