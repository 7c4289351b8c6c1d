//! RSA private keys (AWS-LC: blinded, constant-time) and key generation.

use std::fmt;

use aws_lc_rs::encoding::AsDer as _;
use aws_lc_rs::rsa::{OAEP_SHA256_MGF1SHA256, OaepPrivateDecryptingKey, PrivateDecryptingKey};
use zeroize::Zeroizing;

use crate::pem_util;
pub use crate::x509_gen::CertificateOptions;
use crate::{Certificate, Error, PublicKey, Result};

/// RSA key sizes kseal generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeySize {
    /// 2048 bits (allowed; weaker than the default).
    Rsa2048,
    /// 3072 bits.
    Rsa3072,
    /// 4096 bits, Bitnami's default.
    #[default]
    Rsa4096,
}

impl KeySize {
    /// The size in bits.
    pub fn bits(self) -> usize {
        match self {
            KeySize::Rsa2048 => 2048,
            KeySize::Rsa3072 => 3072,
            KeySize::Rsa4096 => 4096,
        }
    }

    /// The size for a bit count, if kseal generates keys of that size.
    pub fn from_bits(bits: usize) -> Option<Self> {
        match bits {
            2048 => Some(KeySize::Rsa2048),
            3072 => Some(KeySize::Rsa3072),
            4096 => Some(KeySize::Rsa4096),
            _ => None,
        }
    }

    fn backend(self) -> aws_lc_rs::rsa::KeySize {
        match self {
            KeySize::Rsa2048 => aws_lc_rs::rsa::KeySize::Rsa2048,
            KeySize::Rsa3072 => aws_lc_rs::rsa::KeySize::Rsa3072,
            KeySize::Rsa4096 => aws_lc_rs::rsa::KeySize::Rsa4096,
        }
    }
}

/// An RSA private key.
///
/// Private operations run in AWS-LC, which blinds them and is constant-time (the pure-Rust
/// `rsa` crate is not: RUSTSEC-2023-0071). The PKCS #8 copy kept for export zeroizes on drop;
/// `Debug` shows only the fingerprint.
pub struct PrivateKey {
    pkcs8: Zeroizing<Vec<u8>>,
    oaep: OaepPrivateDecryptingKey,
    public: PublicKey,
}

impl PrivateKey {
    /// Generates a fresh key from the operating system's RNG.
    pub fn generate(size: KeySize) -> Result<Self> {
        let key = PrivateDecryptingKey::generate(size.backend())
            .map_err(|_| Error::Generate("RSA key generation failed".into()))?;
        let der = key
            .as_der()
            .map_err(|_| Error::Generate("cannot encode the new key".into()))?;
        Self::from_pkcs8_der(der.as_ref())
    }

    /// Imports a DER PKCS #8 `PrivateKeyInfo` holding an RSA key.
    pub fn from_pkcs8_der(der: &[u8]) -> Result<Self> {
        // Check the algorithm first so a non-RSA key gets a clear error.
        pem_util::pkcs1_from_pkcs8(der)?;
        let key = PrivateDecryptingKey::from_pkcs8(der).map_err(|_| Error::InvalidPrivateKey)?;
        let bits = key.key_size_bits();
        if !(crate::public::MIN_RSA_BITS..=crate::public::MAX_RSA_BITS).contains(&bits) {
            return Err(Error::KeySize(bits));
        }
        let public_der = key
            .public_key()
            .as_der()
            .map_err(|_| Error::InvalidPrivateKey)?;
        let public = PublicKey::from_spki_der(public_der.as_ref())?;
        let oaep = OaepPrivateDecryptingKey::new(key).map_err(|_| Error::InvalidPrivateKey)?;
        Ok(Self {
            pkcs8: Zeroizing::new(der.to_vec()),
            oaep,
            public,
        })
    }

    /// Imports a DER PKCS #1 `RSAPrivateKey` (how Bitnami stores `tls.key`).
    pub fn from_pkcs1_der(der: &[u8]) -> Result<Self> {
        let pkcs8 = pem_util::pkcs8_from_pkcs1(der)?;
        Self::from_pkcs8_der(&pkcs8)
    }

    /// Imports PEM: `RSA PRIVATE KEY` (PKCS #1) or `PRIVATE KEY` (PKCS #8). Other blocks
    /// in the text (a certificate, say) are skipped.
    pub fn from_pem(text: &str) -> Result<Self> {
        let block = pem_util::first_block(
            text,
            &[
                "RSA PRIVATE KEY",
                "PRIVATE KEY",
                "ENCRYPTED PRIVATE KEY",
                "EC PRIVATE KEY",
            ],
            "private key",
        )?;
        let result = match block.tag() {
            "RSA PRIVATE KEY" => Self::from_pkcs1_der(block.contents()),
            "PRIVATE KEY" => Self::from_pkcs8_der(block.contents()),
            "EC PRIVATE KEY" => Err(Error::NotRsa),
            _ => Err(Error::Pem(
                "encrypted private keys are not supported: decrypt it first \
                 (openssl pkey -in key.pem -out plain.pem)"
                    .into(),
            )),
        };
        pem_util::zeroize_pem(block);
        result
    }

    /// The public half.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// The PKCS #8 DER encoding (secret; zeroizes on drop).
    pub fn to_pkcs8_der(&self) -> Zeroizing<Vec<u8>> {
        self.pkcs8.clone()
    }

    /// The key as a `PRIVATE KEY` (PKCS #8) PEM block (secret; zeroizes on drop).
    pub fn to_pkcs8_pem(&self) -> Zeroizing<String> {
        pem_util::encode_secret("PRIVATE KEY", &self.pkcs8)
    }

    /// The key as an `RSA PRIVATE KEY` (PKCS #1) PEM block, as Bitnami stores `tls.key`.
    pub fn to_pkcs1_pem(&self) -> Result<Zeroizing<String>> {
        let pkcs1 = self.to_pkcs1_der()?;
        Ok(pem_util::encode_secret("RSA PRIVATE KEY", &pkcs1))
    }

    /// The PKCS #1 `RSAPrivateKey` DER encoding (secret; zeroizes on drop): the bytes inside
    /// the PKCS #8 wrapper, exactly as the key was imported (a PKCS #1 import keeps its
    /// bytes). Unlike the PEM forms these bytes do not depend on a text encoder, so formats
    /// that must stay stable (the controller's data-MAC key) derive from them.
    pub fn to_pkcs1_der(&self) -> Result<Zeroizing<Vec<u8>>> {
        pem_util::pkcs1_from_pkcs8(&self.pkcs8)
    }

    /// Creates a self-signed certificate for this key, shaped like Bitnami's.
    pub fn self_signed_certificate(&self, options: &CertificateOptions) -> Result<Certificate> {
        crate::x509_gen::self_signed(&self.pkcs8, self.public_key(), options)
    }

    /// Signs `message` with RSASSA-PSS (SHA-256, MGF1-SHA-256, 32-byte salt), the signature
    /// kseal uses for the fleet ring's signed index. The private operation runs in AWS-LC
    /// (blinded). The result is as long as the modulus.
    pub fn sign_pss_sha256(&self, message: &[u8]) -> Result<Vec<u8>> {
        let pair = aws_lc_rs::rsa::KeyPair::from_pkcs8(&self.pkcs8)
            .map_err(|_| Error::InvalidPrivateKey)?;
        let mut signature = vec![0u8; pair.public_modulus_len()];
        pair.sign(
            &aws_lc_rs::signature::RSA_PSS_SHA256,
            &aws_lc_rs::rand::SystemRandom::new(),
            message,
            &mut signature,
        )
        .map_err(|_| Error::Sign)?;
        Ok(signature)
    }

    /// RSA-OAEP-SHA256 decryption of a 32-byte session key. Any failure is `Error::Open`.
    pub(crate) fn unwrap_session_key(
        &self,
        rsa_ciphertext: &[u8],
        label: &[u8],
    ) -> Result<Zeroizing<[u8; crate::envelope::SESSION_KEY_LEN]>> {
        let mut out = Zeroizing::new(vec![0u8; self.oaep.min_output_size()]);
        let plain = self
            .oaep
            .decrypt(
                &OAEP_SHA256_MGF1SHA256,
                rsa_ciphertext,
                &mut out,
                Some(label),
            )
            .map_err(|_| Error::Open)?;
        let mut key = Zeroizing::new([0u8; crate::envelope::SESSION_KEY_LEN]);
        if plain.len() != key.len() {
            return Err(Error::Open);
        }
        key.copy_from_slice(plain);
        Ok(key)
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateKey")
            .field("id", self.public.id())
            .field("bits", &self.public.bits())
            .finish_non_exhaustive()
    }
}
