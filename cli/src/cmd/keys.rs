//! `kseal keys generate` and `kseal keys inspect`.

use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use kseal_keys::KeyPair;

use crate::args::{GenerateArgs, InspectArgs};
use crate::keysource::keydir::{CERT_FILE, GenerateRequest, KEY_FILE, generate};
use crate::manifest::{Input, Source};

pub(crate) fn run(args: GenerateArgs) -> Result<()> {
    let Some(out_dir) = args.out_dir.clone() else {
        return generate_to_stdout(args);
    };
    let request = GenerateRequest::from_args(args, out_dir)?;
    let pair = generate(&request)?;
    eprintln!(
        "wrote {} and {} ({})",
        request.out_dir.join(KEY_FILE).display(),
        request.out_dir.join(CERT_FILE).display(),
        pair.id()
    );
    Ok(())
}

/// Generates a key pair and prints it as a key Secret manifest (`kubernetes.io/tls`, with the
/// label the controller looks for). Refuses to print a private key to a terminal.
fn generate_to_stdout(args: GenerateArgs) -> Result<()> {
    use base64::Engine as _;
    use std::io::IsTerminal as _;
    if std::io::stdout().is_terminal() {
        bail!(
            "refusing to print a private key to the terminal: pipe it (e.g. `| kubectl apply -f \
             -`), redirect it to a file, or pass --out-dir DIR"
        );
    }
    let namespace = args.namespace.clone();
    if let Err(e) = kseal_api::validation::validate_namespace_name(&namespace) {
        bail!("`{namespace}` is not a valid namespace name: {e}");
    }
    let request = GenerateRequest::from_args(args, PathBuf::new())?;
    eprintln!(
        "generating an RSA-{} key pair (this takes about a second)…",
        request.size.bits()
    );
    let pair = KeyPair::generate(request.size, &request.certificate)
        .context("failed to generate the key pair")?;
    let key_pem = pair
        .private_key()
        .to_pkcs1_pem()
        .context("failed to encode the private key")?;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    // A name from the fingerprint: stable for the key, a valid Kubernetes name.
    let suffix: String = pair
        .id()
        .as_str()
        .trim_start_matches("SHA256:")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .take(10)
        .collect();
    let manifest = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: sealed-secrets-key-{suffix}\n  namespace: {namespace}\n  labels:\n    {}: {}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n",
        kseal_api::constants::SEALING_KEY_LABEL,
        kseal_api::constants::SEALING_KEY_LABEL_ACTIVE,
        b64(pair.certificate().to_pem().as_bytes()),
        b64(key_pem.as_bytes()),
    );
    eprintln!("key Secret for {} (namespace {namespace})", pair.id());
    crate::output::stdout(&manifest)
}

/// Describes a certificate: fingerprint, subject, validity and size.
fn describe_certificate(out: &mut String, cert: &kseal_keys::Certificate) {
    let now = SystemTime::now();
    let state = if cert.is_expired_at(now) {
        " (EXPIRED)"
    } else if cert.not_before() > now {
        " (not yet valid)"
    } else {
        ""
    };
    out.push_str(&format!(
        "  certificate  {}\n  subject CN   {}\n  not before   {}\n  not after    {}{state}\n  key size     {} bits\n",
        cert.id(),
        cert.common_name().unwrap_or("-"),
        crate::time::utc_time(cert.not_before()),
        crate::time::utc_time(cert.not_after()),
        cert.public_key().bits()
    ));
}

/// Describes a PEM text holding a private key and/or certificate.
fn describe_pem(out: &mut String, key_pem: Option<&str>, cert_pem: Option<&str>) -> Result<()> {
    let cert = cert_pem
        .map(kseal_keys::Certificate::from_pem)
        .transpose()
        .context("failed to read the certificate")?;
    if let Some(cert) = &cert {
        describe_certificate(out, cert);
    }
    if let Some(pem) = key_pem {
        let key =
            kseal_keys::PrivateKey::from_pem(pem).context("failed to read the private key")?;
        let public = key.public_key();
        match &cert {
            Some(c) if c.public_key() == public => {
                out.push_str("  private key  present, matches the certificate\n");
            }
            Some(_) => out.push_str(&format!(
                "  private key  {} DOES NOT match the certificate\n",
                public.id()
            )),
            None => out.push_str(&format!(
                "  private key  {}\n  key size     {} bits\n",
                public.id(),
                public.bits()
            )),
        }
    }
    Ok(())
}

pub(crate) fn inspect(args: InspectArgs) -> Result<()> {
    let mut out = String::new();
    for input in Input::read_all(&args.files.all())? {
        let (label, what) = match &input.source {
            Source::File(path) => (
                path.display().to_string(),
                format!("failed to inspect `{}`", path.display()),
            ),
            Source::Stdin => (
                "standard input".to_owned(),
                "failed to inspect standard input".to_owned(),
            ),
        };
        let what = || what.clone();
        let text = &input.text;
        if crate::keysource::keys::is_pem(text) {
            out.push_str(&format!("{label}:\n"));
            let key = text.contains("PRIVATE KEY-----").then_some(text.as_str());
            let cert = text
                .contains("-----BEGIN CERTIFICATE-----")
                .then_some(text.as_str());
            if key.is_none() && cert.is_none() {
                bail!("{}: no certificate or private key in it", what());
            }
            describe_pem(&mut out, key, cert).with_context(what)?;
            continue;
        }
        let secrets: Vec<k8s_openapi::api::core::v1::Secret> = input
            .objects("Secret", "v1")
            .with_context(|| format!("{} is neither PEM nor key Secret manifests", input.source))?;
        for secret in secrets {
            let name = format!(
                "{}/{}",
                secret.metadata.namespace.as_deref().unwrap_or("-"),
                secret.metadata.name.as_deref().unwrap_or("-")
            );
            out.push_str(&format!("{label} Secret {name}:\n"));
            let key = crate::keysource::keys::secret_item(&secret, "tls.key");
            let cert = crate::keysource::keys::secret_item(&secret, "tls.crt");
            if key.is_none() && cert.is_none() {
                bail!("{}: Secret `{name}` has no tls.key or tls.crt", what());
            }
            describe_pem(&mut out, key.as_deref(), cert.as_deref())
                .with_context(|| format!("{}: Secret `{name}`", what()))?;
        }
    }
    crate::output::stdout(&out)
}
