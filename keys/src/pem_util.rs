//! PEM and small DER helpers shared by keys and certificates.

use der::Encode as _;
use der::asn1::AnyRef;
#[cfg(feature = "aws-lc")]
use der::{Decode as _, asn1::OctetStringRef};
#[cfg(feature = "aws-lc")]
use zeroize::Zeroizing;

use crate::{Error, Result};

/// OID of `rsaEncryption` (PKCS #1).
pub(crate) const RSA_ENCRYPTION: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

/// Finds the first PEM block whose tag is one of `tags`. Other blocks are skipped, so a file
/// holding a key and a certificate works for either.
pub(crate) fn first_block(text: &str, tags: &[&str], what: &str) -> Result<pem::Pem> {
    let blocks = pem::parse_many(text).map_err(|_| Error::Pem(format!("no valid PEM {what}")))?;
    let mut seen = Vec::new();
    for block in blocks {
        if tags.contains(&block.tag()) {
            return Ok(block);
        }
        seen.push(block.tag().to_owned());
    }
    if seen.is_empty() {
        Err(Error::Pem(format!(
            "no PEM block found where a {what} was expected"
        )))
    } else {
        Err(Error::Pem(format!(
            "expected a {what} ({}), found {}",
            tags.join(", "),
            seen.join(", ")
        )))
    }
}

/// Encodes DER as a PEM block with `\n` line endings.
pub(crate) fn encode(tag: &str, der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new(tag, der.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

#[cfg(feature = "aws-lc")]
/// Encodes secret DER as PEM; the returned text zeroizes on drop.
pub(crate) fn encode_secret(tag: &str, der: &[u8]) -> Zeroizing<String> {
    let block = pem::Pem::new(tag, der.to_vec());
    let text = pem::encode_config(
        &block,
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    );
    zeroize_pem(block);
    Zeroizing::new(text)
}

#[cfg(feature = "aws-lc")]
/// Zeroizes the contents of a PEM block holding secret DER.
pub(crate) fn zeroize_pem(block: pem::Pem) {
    drop(Zeroizing::new(block.into_contents()));
}

/// `AlgorithmIdentifier { rsaEncryption, NULL }`.
fn rsa_algorithm() -> spki::AlgorithmIdentifierRef<'static> {
    spki::AlgorithmIdentifierRef {
        oid: RSA_ENCRYPTION,
        parameters: Some(AnyRef::NULL),
    }
}

/// Wraps a PKCS #1 `RSAPublicKey` into a `SubjectPublicKeyInfo`.
pub(crate) fn rsa_spki_from_pkcs1(pkcs1: &[u8]) -> Result<Vec<u8>> {
    let spki = spki::SubjectPublicKeyInfoRef {
        algorithm: rsa_algorithm(),
        subject_public_key: der::asn1::BitStringRef::from_bytes(pkcs1).map_err(|_| Error::Der {
            what: "RSA public key",
        })?,
    };
    spki.to_der().map_err(|_| Error::Der {
        what: "RSA public key",
    })
}

#[cfg(feature = "aws-lc")]
/// Wraps a PKCS #1 `RSAPrivateKey` into a PKCS #8 `PrivateKeyInfo` (what AWS-LC imports).
pub(crate) fn pkcs8_from_pkcs1(pkcs1: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
    // Validate that this is an RSA private key before wrapping it.
    pkcs1::RsaPrivateKeyRef::from_der(pkcs1).map_err(|_| Error::Der {
        what: "PKCS #1 private key",
    })?;
    let info = pkcs8::PrivateKeyInfoRef::new(
        rsa_algorithm(),
        OctetStringRef::new(pkcs1).map_err(|_| Error::InvalidPrivateKey)?,
    );
    let mut out = Zeroizing::new(Vec::new());
    info.encode_to_vec(&mut out)
        .map_err(|_| Error::InvalidPrivateKey)?;
    Ok(out)
}

#[cfg(feature = "aws-lc")]
/// Extracts the PKCS #1 `RSAPrivateKey` from a PKCS #8 `PrivateKeyInfo`.
pub(crate) fn pkcs1_from_pkcs8(pkcs8_der: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
    let info = pkcs8::PrivateKeyInfoRef::from_der(pkcs8_der).map_err(|_| Error::Der {
        what: "PKCS #8 private key",
    })?;
    if info.algorithm.oid != RSA_ENCRYPTION {
        return Err(Error::NotRsa);
    }
    Ok(Zeroizing::new(info.private_key.as_bytes().to_vec()))
}
