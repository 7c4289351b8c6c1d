//! Self-signed certificate generation (rcgen for the structure, AWS-LC for the signature).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::SecureRandom as _;
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256, RsaKeyPair};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyUsagePurpose,
    PublicKeyData, SerialNumber, SigningKey,
};

use crate::{Certificate, Error, PublicKey, Result};

/// Signs with an RSA key held by AWS-LC, so rcgen never holds a copy of the private key.
struct RsaSigner {
    key: RsaKeyPair,
    public_pkcs1: Vec<u8>,
}

impl PublicKeyData for RsaSigner {
    fn der_bytes(&self) -> &[u8] {
        &self.public_pkcs1
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_RSA_SHA256
    }
}

impl SigningKey for RsaSigner {
    fn sign(&self, msg: &[u8]) -> std::result::Result<Vec<u8>, rcgen::Error> {
        let mut sig = vec![0; self.key.public_modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &aws_lc_rs::rand::SystemRandom::new(),
                msg,
                &mut sig,
            )
            .map_err(|_| rcgen::Error::RingUnspecified)?;
        Ok(sig)
    }
}

fn offset_time(t: SystemTime) -> Result<time::OffsetDateTime> {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).map_err(|_| bad_time())?,
        Err(e) => -i64::try_from(e.duration().as_secs()).map_err(|_| bad_time())?,
    };
    time::OffsetDateTime::from_unix_timestamp(secs).map_err(|_| bad_time())
}

fn bad_time() -> Error {
    Error::Generate("certificate validity is out of range".into())
}

pub(crate) fn self_signed(
    pkcs8: &[u8],
    public_key: &PublicKey,
    options: &CertificateOptions,
) -> Result<Certificate> {
    let signer_key =
        RsaKeyPair::from_pkcs8(pkcs8).map_err(|_| Error::Generate("the key cannot sign".into()))?;
    let public_pkcs1 = signer_key.public_key().as_ref().to_vec();
    let signer = RsaSigner {
        key: signer_key,
        public_pkcs1,
    };

    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    if !options.common_name.is_empty() {
        dn.push(DnType::CommonName, options.common_name.as_str());
    }
    params.distinguished_name = dn;
    params.not_before = offset_time(options.not_before)?;
    let not_after = options
        .not_before
        .checked_add(options.validity)
        .ok_or_else(bad_time)?;
    params.not_after = offset_time(not_after)?;
    // Random 128-bit serial like Bitnami's; the top bit is cleared so the DER INTEGER is
    // positive without padding.
    let mut serial = [0u8; 16];
    aws_lc_rs::rand::SystemRandom::new()
        .fill(&mut serial)
        .map_err(|_| Error::Generate("the system RNG failed".into()))?;
    serial[0] &= 0x7f;
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    // Bitnami's controller marks its certificates as a CA with key usage EncipherOnly.
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::EncipherOnly];

    let cert = params
        .self_signed(&signer)
        .map_err(|e| Error::Generate(format!("cannot build certificate: {e}")))?;
    let parsed = Certificate::from_der(cert.der())?;
    if parsed.public_key() != public_key {
        // Cannot happen: the signer was built from the same PKCS #8 bytes.
        return Err(Error::Generate(
            "certificate key differs from the private key".into(),
        ));
    }
    Ok(parsed)
}

/// Options for the self-signed certificate that carries a sealing key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateOptions {
    /// Subject and issuer common name; empty gives an empty subject, like Bitnami's default.
    pub common_name: String,
    /// Start of validity (defaults to now).
    pub not_before: SystemTime,
    /// Length of validity (defaults to 10 × 365 days, Bitnami's `--key-ttl`).
    pub validity: Duration,
}

impl CertificateOptions {
    /// Bitnami's default validity: 87,600 hours.
    pub const DEFAULT_VALIDITY: Duration = Duration::from_secs(87_600 * 3600);
    /// The common name Bitnami's docs and the interop vectors use.
    pub const DEFAULT_COMMON_NAME: &'static str = "sealed-secret";
}

impl Default for CertificateOptions {
    fn default() -> Self {
        Self {
            common_name: Self::DEFAULT_COMMON_NAME.to_owned(),
            not_before: SystemTime::now(),
            validity: Self::DEFAULT_VALIDITY,
        }
    }
}
