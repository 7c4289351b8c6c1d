//! The one error type of `kseal-keys`.

/// Errors from the crypto core.
///
/// Opening a sealed value fails with the single opaque [`Error::Open`] whatever went wrong
/// (RSA unwrap, OAEP label, GCM tag, wrong key): telling the causes apart would hand an
/// attacker a padding or label oracle. Structural errors ([`Error::Truncated`],
/// [`Error::Base64`]) only describe public bytes and may be specific.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// No key in the ring could open the value (wrong key, wrong scope or name, or tampering).
    #[error("no key could decrypt secret")]
    Open,
    /// The sealed value is shorter than its own length prefix says, or has no room for a tag.
    #[error(
        "sealed value is truncated: {len} byte{}, expected at least {expected}",
        if *len == 1 { "" } else { "s" }
    )]
    Truncated {
        /// Length of the input.
        len: usize,
        /// Minimum length the header requires.
        expected: usize,
    },
    /// The sealed value is not standard (padded) base64.
    #[error("sealed value is not valid base64")]
    Base64,
    /// The key ring holds no key.
    #[error("the key ring is empty")]
    EmptyKeyRing,
    /// Text that should hold PEM does not, or holds a block of the wrong kind.
    #[error("invalid PEM: {0}")]
    Pem(String),
    /// DER inside a PEM block or a certificate could not be parsed.
    #[error("invalid {what}: malformed DER")]
    Der {
        /// What was being parsed.
        what: &'static str,
    },
    /// The key is not an RSA key (kseal, like Bitnami, seals with RSA only).
    #[error("unsupported key algorithm: only RSA keys are supported")]
    NotRsa,
    /// The RSA key size is outside what kseal accepts.
    #[error("unsupported RSA key size {0} bits: expected 2048 to 8192")]
    KeySize(usize),
    /// The private key was rejected by the crypto backend.
    #[error("invalid RSA private key")]
    InvalidPrivateKey,
    /// The certificate's public key does not belong to the private key it was paired with.
    #[error("certificate {certificate} does not match private key {private_key}")]
    KeyMismatch {
        /// Fingerprint of the certificate's public key.
        certificate: String,
        /// Fingerprint of the private key's public half.
        private_key: String,
    },
    /// Encrypting failed (an RNG or backend failure; never caused by the plaintext).
    #[error("sealing failed in the crypto backend")]
    Seal,
    /// Signing failed in the crypto backend.
    #[error("signing failed in the crypto backend")]
    Sign,
    /// A signature does not verify with the key it names.
    #[error("the signature does not verify")]
    BadSignature,
    /// Generating a key or a certificate failed.
    #[error("key generation failed: {0}")]
    Generate(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
