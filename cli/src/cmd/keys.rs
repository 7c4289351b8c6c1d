//! `kseal keys generate`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail};
use kseal_keys::{CertificateOptions, KeyPair, KeySize};

use crate::args::GenerateArgs;
use crate::manifest::write_atomic;

/// File names inside a key directory, as in a `kubernetes.io/tls` Secret.
pub(crate) const KEY_FILE: &str = "tls.key";
/// Certificate file name inside a key directory.
pub(crate) const CERT_FILE: &str = "tls.crt";

/// A validated `keys generate` request.
pub(crate) struct GenerateRequest {
    pub(crate) out_dir: PathBuf,
    pub(crate) size: KeySize,
    pub(crate) certificate: CertificateOptions,
    pub(crate) force: bool,
}

impl GenerateRequest {
    pub(crate) fn from_args(args: GenerateArgs) -> Result<Self> {
        let size = KeySize::from_bits(args.key_size as usize)
            .with_context(|| format!("unsupported key size {}", args.key_size))?;
        Ok(Self {
            out_dir: args.out_dir,
            size,
            certificate: CertificateOptions {
                common_name: args.common_name,
                not_before: SystemTime::now(),
                validity: Duration::from_secs(u64::from(args.validity_days) * 86_400),
            },
            force: args.force,
        })
    }
}

pub(crate) fn run(args: GenerateArgs) -> Result<()> {
    let request = GenerateRequest::from_args(args)?;
    let pair = generate(&request)?;
    eprintln!(
        "wrote {} and {} ({})",
        request.out_dir.join(KEY_FILE).display(),
        request.out_dir.join(CERT_FILE).display(),
        pair.id()
    );
    Ok(())
}

/// Generates a key pair and writes `tls.key` (PKCS #1, owner-only) and `tls.crt`.
pub(crate) fn generate(request: &GenerateRequest) -> Result<KeyPair> {
    let key_path = request.out_dir.join(KEY_FILE);
    if key_path.exists() && !request.force {
        bail!(
            "`{}` already exists: refusing to overwrite a private key (use --force to replace it)",
            key_path.display()
        );
    }
    fs_err::create_dir_all(&request.out_dir)?;
    eprintln!(
        "generating an RSA-{} key pair (this takes about a second)…",
        request.size.bits()
    );
    let started = Instant::now();
    let pair = KeyPair::generate(request.size, &request.certificate)
        .context("failed to generate the key pair")?;
    eprintln!("generated in {:.1} s", started.elapsed().as_secs_f64());
    write_pair(&request.out_dir, &pair)?;
    Ok(pair)
}

/// Loads `tls.key` and `tls.crt` from a key directory, checking that they belong together
/// and that the certificate can still seal.
pub(crate) fn load_dir(dir: &Path) -> Result<KeyPair> {
    let key_path = dir.join(KEY_FILE);
    let cert = crate::cmd::seal::read_certificate(&dir.join(CERT_FILE))?;
    let key = kseal_keys::PrivateKey::from_pem(&fs_err::read_to_string(&key_path)?)
        .with_context(|| format!("failed to read private key `{}`", key_path.display()))?;
    KeyPair::new(key, cert)
        .with_context(|| format!("the key pair in `{}` is inconsistent", dir.display()))
}

fn write_pair(dir: &Path, pair: &KeyPair) -> Result<()> {
    let key_pem = pair
        .private_key()
        .to_pkcs1_pem()
        .context("failed to encode the private key")?;
    write_atomic(&dir.join(KEY_FILE), key_pem.as_bytes(), true)?;
    write_atomic(
        &dir.join(CERT_FILE),
        pair.certificate().to_pem().as_bytes(),
        false,
    )?;
    Ok(())
}
