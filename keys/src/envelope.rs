//! The sealed-value envelope: parsing and framing, independent of any crypto backend.
//!
//! # Byte layout ([`Format::Bitnami`])
//!
//! ```text
//! offset 0    u16, big-endian   N = length of the RSA ciphertext (512 for RSA-4096)
//! offset 2    N bytes           RSA-OAEP(SHA-256, MGF1-SHA-256, label = scope label)
//!                               of a fresh random 32-byte AES-256 key
//! offset 2+N  rest              AES-256-GCM(key, nonce = 12 zero bytes, no AAD):
//!                               ciphertext (same length as the plaintext) || 16-byte tag
//! ```
//!
//! This is exactly what Bitnami's `HybridEncrypt` produces. It carries no version byte and no
//! key id, so an opener must try keys in turn (see [`crate::KeyRing::open`]). The zero nonce
//! is safe because every AES key is random and used for exactly one value.
//!
//! In `SealedSecret` objects each envelope is written as standard padded base64
//! ([`encode_base64`] / [`decode_base64`]).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::{Error, Result};

/// Length of the AES-256 session key wrapped by RSA.
pub(crate) const SESSION_KEY_LEN: usize = 32;
/// Length of the AES-GCM authentication tag.
pub const TAG_LEN: usize = 16;
/// Length of the big-endian length prefix.
pub const PREFIX_LEN: usize = 2;
/// The all-zero GCM nonce. Safe: each session key is random and seals exactly one value.
pub(crate) const ZERO_NONCE: [u8; 12] = [0; 12];

/// Envelope formats kseal reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// Bitnami Sealed Secrets' format: length-prefixed RSA-OAEP block, then AES-256-GCM.
    Bitnami,
}

/// A parsed, not yet opened, sealed value borrowing its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope<'a> {
    rsa_ciphertext: &'a [u8],
    aead_ciphertext: &'a [u8],
}

impl<'a> Envelope<'a> {
    /// Splits `bytes` into its RSA block and its AES-GCM part, checking lengths only.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let Some((prefix, rest)) = bytes.split_first_chunk::<PREFIX_LEN>() else {
            return Err(Error::Truncated {
                len: bytes.len(),
                expected: PREFIX_LEN,
            });
        };
        let rsa_len = usize::from(u16::from_be_bytes(*prefix));
        let expected = PREFIX_LEN + rsa_len + TAG_LEN;
        if bytes.len() < expected {
            return Err(Error::Truncated {
                len: bytes.len(),
                expected,
            });
        }
        let (rsa_ciphertext, aead_ciphertext) = rest.split_at(rsa_len);
        Ok(Self {
            rsa_ciphertext,
            aead_ciphertext,
        })
    }

    /// The format of this envelope.
    pub fn format(&self) -> Format {
        Format::Bitnami
    }

    /// The RSA-OAEP block that wraps the session key.
    pub fn rsa_ciphertext(&self) -> &'a [u8] {
        self.rsa_ciphertext
    }

    /// The AES-256-GCM ciphertext followed by its 16-byte tag.
    pub fn aead_ciphertext(&self) -> &'a [u8] {
        self.aead_ciphertext
    }

    /// Length of the plaintext inside.
    pub fn plaintext_len(&self) -> usize {
        self.aead_ciphertext.len() - TAG_LEN
    }
}

/// Frames an RSA block and an AEAD ciphertext (with tag) as one envelope.
pub(crate) fn frame(rsa_ciphertext: &[u8], aead_ciphertext: &[u8]) -> Result<Vec<u8>> {
    let len = u16::try_from(rsa_ciphertext.len()).map_err(|_| Error::Seal)?;
    let mut out = Vec::with_capacity(PREFIX_LEN + rsa_ciphertext.len() + aead_ciphertext.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(rsa_ciphertext);
    out.extend_from_slice(aead_ciphertext);
    Ok(out)
}

/// Encodes an envelope as standard padded base64, as stored in `spec.encryptedData`.
pub fn encode_base64(envelope: &[u8]) -> String {
    STANDARD.encode(envelope)
}

/// Decodes standard padded base64. Like Go's decoder (and so Bitnami's controller) it skips
/// `\r` and `\n`, so wrapped values are accepted; URL-safe or unpadded base64 is rejected.
pub fn decode_base64(text: &str) -> Result<Vec<u8>> {
    // A byte scan: `str::contains` with a char array runs a per-character searcher.
    if text.bytes().any(|b| b == b'\r' || b == b'\n') {
        let joined: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
        STANDARD.decode(joined).map_err(|_| Error::Base64)
    } else {
        STANDARD.decode(text).map_err(|_| Error::Base64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_splits_at_the_prefix() {
        let mut bytes = vec![0, 3, 1, 2, 3];
        bytes.extend_from_slice(&[9; TAG_LEN + 2]);
        let env = Envelope::parse(&bytes).unwrap();
        assert_eq!(env.rsa_ciphertext(), &[1, 2, 3]);
        assert_eq!(env.aead_ciphertext().len(), TAG_LEN + 2);
        assert_eq!(env.plaintext_len(), 2);
        assert_eq!(env.format(), Format::Bitnami);
    }

    #[test]
    fn parse_rejects_short_inputs_with_specific_errors() {
        assert_eq!(
            Envelope::parse(&[]),
            Err(Error::Truncated {
                len: 0,
                expected: 2
            })
        );
        assert_eq!(
            Envelope::parse(&[2]),
            Err(Error::Truncated {
                len: 1,
                expected: 2
            })
        );
        let short = [0u8, 4, 1, 2, 3, 4];
        assert_eq!(
            Envelope::parse(&short),
            Err(Error::Truncated {
                len: 6,
                expected: 2 + 4 + TAG_LEN
            })
        );
    }

    #[test]
    fn frame_then_parse_round_trips() {
        let framed = frame(&[7; 5], &[8; TAG_LEN]).unwrap();
        let env = Envelope::parse(&framed).unwrap();
        assert_eq!(env.rsa_ciphertext(), &[7; 5]);
        assert_eq!(env.aead_ciphertext(), &[8; TAG_LEN]);
    }

    #[test]
    fn base64_is_standard_padded_and_tolerates_line_breaks() {
        assert_eq!(encode_base64(b"\xfb\xff"), "+/8=");
        assert_eq!(decode_base64("+/8=").unwrap(), b"\xfb\xff");
        assert_eq!(decode_base64("+/\r\n8=").unwrap(), b"\xfb\xff");
        assert_eq!(decode_base64("-_8="), Err(Error::Base64));
        assert_eq!(decode_base64("+/8"), Err(Error::Base64));
    }
}
