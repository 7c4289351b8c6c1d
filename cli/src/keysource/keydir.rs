//! A local key directory: `tls.key` (PKCS #1, owner-only) and `tls.crt`, as `kseal keys
//! generate --out-dir` writes it and `kseal quickstart` reuses it, and certificate files.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use anyhow::{Context as _, Result, bail};
use kseal_keys::{Certificate, CertificateOptions, KeyPair, KeySize};

use crate::args::{GenerateArgs, KeySpecArgs};
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
    pub(crate) fn from_args(args: GenerateArgs, out_dir: PathBuf) -> Result<Self> {
        let (size, certificate) = key_spec(&args.spec)?;
        Ok(Self {
            out_dir,
            size,
            certificate,
            force: args.force,
        })
    }
}

/// The key size and certificate options of `--key-size`, `--common-name`, `--key-ttl`.
pub(crate) fn key_spec(spec: &KeySpecArgs) -> Result<(KeySize, CertificateOptions)> {
    let size = KeySize::from_bits(spec.key_size as usize)
        .with_context(|| format!("unsupported key size {}", spec.key_size))?;
    Ok((
        size,
        CertificateOptions {
            common_name: spec.common_name.clone(),
            not_before: SystemTime::now(),
            validity: spec.validity(),
        },
    ))
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
    refuse_foreign_dir(&request.out_dir)?;
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

/// Refuses an existing directory that holds anything but a key pair: `--out-dir keys` run in
/// a clone of this repository would otherwise drop a private key into the `keys/` crate, next
/// to files git tracks.
fn refuse_foreign_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    if !dir.is_dir() {
        bail!("`{}` exists and is not a directory", dir.display());
    }
    let mut foreign: Vec<String> = fs_err::read_dir(dir)?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name != KEY_FILE && name != CERT_FILE)
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    foreign.sort();
    let shown: Vec<String> = foreign.iter().take(3).map(|n| format!("`{n}`")).collect();
    let more = if foreign.len() > 3 { ", …" } else { "" };
    bail!(
        "`{}` already holds other files ({}{more}): refusing to write a private key there; \
         pass a new directory, e.g. --out-dir fleet-key",
        dir.display(),
        shown.join(", ")
    )
}

/// Loads `tls.key` and `tls.crt` from a key directory, checking that they belong together
/// and that the certificate can still seal.
pub(crate) fn load_dir(dir: &Path) -> Result<KeyPair> {
    let key_path = dir.join(KEY_FILE);
    let cert = read_certificate(&dir.join(CERT_FILE))?;
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

/// Reads a certificate file and refuses one that cannot be used for sealing.
pub(crate) fn read_certificate(path: &Path) -> Result<Certificate> {
    let text = fs_err::read_to_string(path).context("failed to read the sealing certificate")?;
    crate::keysource::cert::check(&text, &format!("`{}`", path.display()))
}
