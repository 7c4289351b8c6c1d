//! Sealing: encrypting one value to a public key.

use zeroize::Zeroizing;

use crate::envelope::{self, SESSION_KEY_LEN, ZERO_NONCE};
use crate::{Error, Label, PublicKey, Result};

/// The implementation used to seal. Both produce the same envelope format and pass the same
/// vectors; they differ in build needs and speed, never in output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// AWS-LC (C and assembly): the fastest; needs a C compiler to build.
    #[cfg(feature = "aws-lc")]
    AwsLc,
    /// RustCrypto `rsa` 0.10 + `aes-gcm`: pure Rust, for portable builds. Public-key
    /// operations only, so the `rsa` crate's private-key timing issue (RUSTSEC-2023-0071)
    /// does not apply.
    #[cfg(feature = "pure-rust")]
    PureRust,
}

impl Backend {
    /// The backend [`seal`] uses: AWS-LC when built in, otherwise pure Rust.
    #[cfg(feature = "aws-lc")]
    pub const DEFAULT: Backend = Backend::AwsLc;
    /// The backend [`seal`] uses: AWS-LC when built in, otherwise pure Rust.
    #[cfg(all(feature = "pure-rust", not(feature = "aws-lc")))]
    pub const DEFAULT: Backend = Backend::PureRust;

    /// Every backend compiled into this build.
    pub const ALL: &'static [Backend] = &[
        #[cfg(feature = "aws-lc")]
        Backend::AwsLc,
        #[cfg(feature = "pure-rust")]
        Backend::PureRust,
    ];
}

impl Default for Backend {
    fn default() -> Self {
        Backend::DEFAULT
    }
}

/// Seals `plaintext` for `key` under `label` with the default backend and returns the raw
/// envelope (see [`crate::envelope`]). Sealing is randomized: the same input never gives the
/// same bytes twice.
pub fn seal(key: &PublicKey, label: &Label, plaintext: &[u8]) -> Result<Vec<u8>> {
    seal_with(Backend::DEFAULT, key, label, plaintext)
}

/// Seals and returns standard padded base64, as stored in `spec.encryptedData`.
pub fn seal_base64(key: &PublicKey, label: &Label, plaintext: &[u8]) -> Result<String> {
    seal(key, label, plaintext).map(|bytes| envelope::encode_base64(&bytes))
}

/// Seals with a chosen backend.
pub fn seal_with(
    backend: Backend,
    key: &PublicKey,
    label: &Label,
    plaintext: &[u8],
) -> Result<Vec<u8>> {
    match backend {
        #[cfg(feature = "aws-lc")]
        Backend::AwsLc => aws_lc::seal(key, label.as_bytes(), plaintext),
        #[cfg(feature = "pure-rust")]
        Backend::PureRust => pure::seal(key, label.as_bytes(), plaintext),
    }
}

#[cfg(feature = "aws-lc")]
mod aws_lc {
    use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    use aws_lc_rs::rsa::OAEP_SHA256_MGF1SHA256;

    use super::*;

    pub(super) fn seal(key: &PublicKey, label: &[u8], plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut session = Zeroizing::new([0u8; SESSION_KEY_LEN]);
        aws_lc_rs::rand::fill(&mut session[..]).map_err(|_| Error::Seal)?;

        let aead =
            LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &session[..]).map_err(|_| Error::Seal)?);
        let mut sealed = Vec::with_capacity(plaintext.len() + envelope::TAG_LEN);
        sealed.extend_from_slice(plaintext);
        // Single-use random session key, so the fixed zero nonce never repeats under a key.
        aead.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(ZERO_NONCE),
            Aad::empty(),
            &mut sealed,
        )
        .map_err(|_| Error::Seal)?;

        let mut rsa = vec![0u8; key.oaep.ciphertext_size()];
        let wrapped = key
            .oaep
            .encrypt(&OAEP_SHA256_MGF1SHA256, &session[..], &mut rsa, Some(label))
            .map_err(|_| Error::Seal)?;
        envelope::frame(wrapped, &sealed)
    }
}

#[cfg(feature = "pure-rust")]
mod pure {
    use aes_gcm::aead::{Aead as _, KeyInit as _};
    use aes_gcm::{Aes256Gcm, Nonce};
    use rsa::pkcs8::DecodePublicKey as _;
    use rsa::{Oaep, RsaPublicKey};

    use super::*;

    pub(super) fn seal(key: &PublicKey, label: &[u8], plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut session = Zeroizing::new([0u8; SESSION_KEY_LEN]);
        getrandom::fill(&mut session[..]).map_err(|_| Error::Seal)?;

        let aead = Aes256Gcm::new_from_slice(&session[..]).map_err(|_| Error::Seal)?;
        // Single-use random session key, so the fixed zero nonce never repeats under a key.
        let sealed = aead
            .encrypt(&Nonce::from(ZERO_NONCE), plaintext)
            .map_err(|_| Error::Seal)?;

        let rsa_key =
            RsaPublicKey::from_public_key_der(key.to_spki_der()).map_err(|_| Error::Seal)?;
        let padding = Oaep::<sha2::Sha256>::new_with_label(label.to_vec());
        // An OS RNG failure is unrecoverable; UnwrapErr turns it into a panic, as in every
        // RustCrypto API that takes an infallible RNG. Only the OAEP seed is drawn here.
        let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
        let wrapped = rsa_key
            .encrypt(&mut rng, padding, &session[..])
            .map_err(|_| Error::Seal)?;
        envelope::frame(&wrapped, &sealed)
    }
}
