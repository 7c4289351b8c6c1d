//! RSA public keys and their fingerprints.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use der::{Decode as _, Encode as _};
use sha2::{Digest as _, Sha256};
use spki::SubjectPublicKeyInfoRef;

use crate::pem_util::{self, RSA_ENCRYPTION};
use crate::{Error, Result};

/// Smallest RSA modulus kseal accepts, in bits.
pub const MIN_RSA_BITS: usize = 2048;
/// Largest RSA modulus kseal accepts, in bits.
pub const MAX_RSA_BITS: usize = 8192;

/// A key's identity: Bitnami's fingerprint, `SHA256:` followed by the unpadded base64 of the
/// SHA-256 of the OpenSSH-encoded public key (what `ssh-keygen -lf` prints).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(String);

impl KeyId {
    /// Parses a fingerprint string such as `SHA256:mOu37IQK…`.
    pub fn parse(text: &str) -> Option<Self> {
        let b64 = text.strip_prefix("SHA256:")?;
        let digest = STANDARD_NO_PAD.decode(b64).ok()?;
        (digest.len() == 32).then(|| Self(text.to_owned()))
    }

    /// The fingerprint text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn of_rsa(modulus: &[u8], exponent: &[u8]) -> Self {
        fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
            // SSH strings carry a 32-bit length; RSA values here are at most 8192 bits.
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(bytes);
        }
        fn put_mpint(out: &mut Vec<u8>, unsigned_be: &[u8]) {
            let first = unsigned_be
                .iter()
                .position(|&b| b != 0)
                .unwrap_or(unsigned_be.len());
            let trimmed = &unsigned_be[first..];
            if trimmed.first().is_some_and(|b| b & 0x80 != 0) {
                out.extend_from_slice(&((trimmed.len() + 1) as u32).to_be_bytes());
                out.push(0);
                out.extend_from_slice(trimmed);
            } else {
                put_string(out, trimmed);
            }
        }
        let mut wire = Vec::with_capacity(modulus.len() + exponent.len() + 24);
        put_string(&mut wire, b"ssh-rsa");
        put_mpint(&mut wire, exponent);
        put_mpint(&mut wire, modulus);
        let digest = Sha256::digest(&wire);
        Self(format!("SHA256:{}", STANDARD_NO_PAD.encode(digest)))
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({})", self.0)
    }
}

/// An RSA public key: what sealing needs, and all a laptop ever holds.
#[derive(Clone)]
pub struct PublicKey {
    spki_der: Arc<[u8]>,
    modulus: Arc<[u8]>,
    exponent: Arc<[u8]>,
    bits: usize,
    id: KeyId,
    #[cfg(feature = "aws-lc")]
    pub(crate) oaep: Arc<aws_lc_rs::rsa::OaepPublicEncryptingKey>,
}

impl PublicKey {
    /// Parses a DER `SubjectPublicKeyInfo` holding an RSA key.
    pub fn from_spki_der(der: &[u8]) -> Result<Self> {
        let spki = SubjectPublicKeyInfoRef::from_der(der)
            .map_err(|_| Error::Der { what: "public key" })?;
        if spki.algorithm.oid != RSA_ENCRYPTION {
            return Err(Error::NotRsa);
        }
        let pkcs1 = spki
            .subject_public_key
            .as_bytes()
            .ok_or(Error::Der { what: "public key" })?;
        let canonical = spki
            .to_der()
            .map_err(|_| Error::Der { what: "public key" })?;
        Self::from_parts(canonical, pkcs1)
    }

    /// Parses a DER PKCS #1 `RSAPublicKey`.
    pub fn from_pkcs1_der(der: &[u8]) -> Result<Self> {
        let spki = pem_util::rsa_spki_from_pkcs1(der)?;
        Self::from_parts(spki, der)
    }

    /// Parses PEM: `PUBLIC KEY` (SPKI), `RSA PUBLIC KEY` (PKCS #1) or a `CERTIFICATE`
    /// (its key is taken; validity is not checked here, see [`crate::Certificate`]).
    pub fn from_pem(text: &str) -> Result<Self> {
        let block = pem_util::first_block(
            text,
            &["PUBLIC KEY", "RSA PUBLIC KEY", "CERTIFICATE"],
            "public key",
        )?;
        match block.tag() {
            "PUBLIC KEY" => Self::from_spki_der(block.contents()),
            "RSA PUBLIC KEY" => Self::from_pkcs1_der(block.contents()),
            // The certificate's key, read here rather than through `Certificate` (which
            // is built on this type), with the same errors.
            _ => {
                let bad = |_| Error::Der {
                    what: "certificate",
                };
                let cert = x509_cert::Certificate::from_der(block.contents()).map_err(bad)?;
                let spki = cert
                    .tbs_certificate()
                    .subject_public_key_info()
                    .to_der()
                    .map_err(bad)?;
                Self::from_spki_der(&spki)
            }
        }
    }

    fn from_parts(spki_der: Vec<u8>, pkcs1_der: &[u8]) -> Result<Self> {
        let rsa = pkcs1::RsaPublicKeyRef::from_der(pkcs1_der).map_err(|_| Error::Der {
            what: "RSA public key",
        })?;
        let modulus = rsa.modulus.as_bytes();
        let exponent = rsa.public_exponent.as_bytes();
        let lead = modulus
            .iter()
            .position(|&b| b != 0)
            .unwrap_or(modulus.len());
        let modulus = &modulus[lead..];
        let bits = match modulus.first() {
            Some(&top) => modulus.len() * 8 - top.leading_zeros() as usize,
            None => 0,
        };
        if !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) {
            return Err(Error::KeySize(bits));
        }
        #[cfg(feature = "aws-lc")]
        let oaep = {
            let key = aws_lc_rs::rsa::PublicEncryptingKey::from_der(&spki_der)
                .map_err(|_| Error::Der { what: "public key" })?;
            Arc::new(
                aws_lc_rs::rsa::OaepPublicEncryptingKey::new(key)
                    .map_err(|_| Error::Der { what: "public key" })?,
            )
        };
        Ok(Self {
            id: KeyId::of_rsa(modulus, exponent),
            modulus: modulus.into(),
            exponent: exponent.into(),
            spki_der: spki_der.into(),
            bits,
            #[cfg(feature = "aws-lc")]
            oaep,
        })
    }

    /// The key's fingerprint.
    pub fn id(&self) -> &KeyId {
        &self.id
    }

    /// Modulus size in bits.
    pub fn bits(&self) -> usize {
        self.bits
    }

    /// Length in bytes of this key's RSA ciphertexts (the envelope's length prefix).
    pub fn ciphertext_len(&self) -> usize {
        self.bits.div_ceil(8)
    }

    /// Whether `rsa_block` can be an RSA ciphertext of this key at all: exactly as long as
    /// the modulus, and numerically smaller than it (big-endian). A block that fails either
    /// check is rejected by the private-key operation too, so a ring rules this key out
    /// without spending one (see [`crate::KeyRing::open`]).
    ///
    /// Not constant-time, and need not be: both inputs are public (the ciphertext is read
    /// from git, the modulus is in the certificate), and no private key is involved.
    pub(crate) fn fits_rsa_block(&self, rsa_block: &[u8]) -> bool {
        // The modulus is kept without leading zeros, so it is `ciphertext_len()` bytes long;
        // for equal lengths, comparing big-endian bytes in order compares the numbers.
        rsa_block.len() == self.modulus.len() && rsa_block < &*self.modulus
    }

    /// Whether `sealed` (raw envelope bytes) may have been sealed with this key, judged
    /// from public data only: its RSA block fits this key's modulus (length and value).
    /// `false` means this key certainly cannot open it; `true` means only that it might.
    /// A value sealed with this key always fits. Malformed envelopes give `false`.
    pub fn may_have_sealed(&self, sealed: &[u8]) -> bool {
        crate::envelope::Envelope::parse(sealed)
            .is_ok_and(|envelope| self.fits_rsa_block(envelope.rsa_ciphertext()))
    }

    /// The key as DER `SubjectPublicKeyInfo`.
    pub fn to_spki_der(&self) -> &[u8] {
        &self.spki_der
    }

    /// The key as a `PUBLIC KEY` PEM block.
    pub fn to_pem(&self) -> String {
        pem_util::encode("PUBLIC KEY", &self.spki_der)
    }

    /// The big-endian modulus without leading zeros.
    pub fn modulus(&self) -> &[u8] {
        &self.modulus
    }

    /// The big-endian public exponent.
    pub fn exponent(&self) -> &[u8] {
        &self.exponent
    }

    /// Checks an RSASSA-PSS (SHA-256, MGF1-SHA-256) signature over `message` made with this
    /// key's private half ([`crate::PrivateKey::sign_pss_sha256`], or AWS KMS's
    /// `RSASSA_PSS_SHA_256`), whatever its salt length (recovered as RFC 8017 §9.1.2 allows).
    /// A public operation: no secret is involved, so timing does not matter here.
    pub fn verify_pss_sha256(&self, message: &[u8], signature: &[u8]) -> Result<()> {
        // AWS-LC first: kseal's own signatures and AWS KMS's use a salt as long as the hash,
        // which is all it accepts, and it is the faster of the two. Any other salt length
        // (an emulator's) goes to the salt-recovering verifier.
        #[cfg(feature = "aws-lc")]
        {
            use aws_lc_rs::signature::{RSA_PSS_2048_8192_SHA256, RsaPublicKeyComponents};
            let fast = RsaPublicKeyComponents {
                n: &*self.modulus,
                e: &*self.exponent,
            }
            .verify(&RSA_PSS_2048_8192_SHA256, message, signature);
            if fast.is_ok() {
                return Ok(());
            }
        }
        crate::pss::verify(&self.modulus, &self.exponent, message, signature)
    }
}

impl PartialEq for PublicKey {
    fn eq(&self, other: &Self) -> bool {
        self.modulus == other.modulus && self.exponent == other.exponent
    }
}

impl Eq for PublicKey {}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKey")
            .field("id", &self.id)
            .field("bits", &self.bits)
            .finish()
    }
}
