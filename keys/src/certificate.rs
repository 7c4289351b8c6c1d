//! X.509 certificates that carry sealing keys.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use der::{Decode as _, Encode as _};
use x509_cert::Certificate as X509;

use crate::pem_util;
use crate::{Error, KeyId, PublicKey, Result};

/// OID of the X.520 `commonName` attribute.
const COMMON_NAME: der::asn1::ObjectIdentifier = der::asn1::ObjectIdentifier::new_unwrap("2.5.4.3");

/// A parsed certificate: the form in which kseal publishes and distributes public keys.
///
/// Only what sealing needs is checked: the key must be RSA (2048 to 8192 bits). Like
/// Bitnami, no chain or hostname is validated: the certificate is a container for the key.
#[derive(Clone)]
pub struct Certificate {
    der: Arc<[u8]>,
    public_key: PublicKey,
    not_before: SystemTime,
    not_after: SystemTime,
    common_name: Option<String>,
}

impl Certificate {
    /// Parses a DER certificate.
    pub fn from_der(der: &[u8]) -> Result<Self> {
        let cert = X509::from_der(der).map_err(|_| Error::Der {
            what: "certificate",
        })?;
        let tbs = cert.tbs_certificate();
        let spki = tbs
            .subject_public_key_info()
            .to_der()
            .map_err(|_| Error::Der {
                what: "certificate",
            })?;
        let public_key = PublicKey::from_spki_der(&spki)?;
        let validity = tbs.validity();
        let common_name = tbs.subject().iter().find_map(|atv| {
            (atv.oid == COMMON_NAME)
                .then(|| x509_cert::attr::AttributeValue::decode_value_as_string(&atv.value))
                .flatten()
        });
        Ok(Self {
            der: der.into(),
            public_key,
            not_before: validity.not_before.to_system_time(),
            not_after: validity.not_after.to_system_time(),
            common_name,
        })
    }

    /// Parses the first `CERTIFICATE` block of a PEM text (other blocks are skipped).
    pub fn from_pem(text: &str) -> Result<Self> {
        let block = pem_util::first_block(text, &["CERTIFICATE"], "certificate")?;
        Self::from_der(block.contents())
    }

    /// The certificate's public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public_key
    }

    /// The fingerprint of the certificate's public key.
    pub fn id(&self) -> &KeyId {
        self.public_key.id()
    }

    /// Start of validity; orders keys in a ring (newest seals).
    pub fn not_before(&self) -> SystemTime {
        self.not_before
    }

    /// End of validity; sealing with an expired certificate is refused by the CLI.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// Whether `now` is past the end of validity.
    pub fn is_expired_at(&self, now: SystemTime) -> bool {
        now > self.not_after
    }

    /// The subject common name, if any.
    pub fn common_name(&self) -> Option<&str> {
        self.common_name.as_deref()
    }

    /// The DER encoding.
    pub fn to_der(&self) -> &[u8] {
        &self.der
    }

    /// The certificate as a `CERTIFICATE` PEM block.
    pub fn to_pem(&self) -> String {
        pem_util::encode("CERTIFICATE", &self.der)
    }
}

impl PartialEq for Certificate {
    fn eq(&self, other: &Self) -> bool {
        self.der == other.der
    }
}

impl Eq for Certificate {}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("id", self.id())
            .field("common_name", &self.common_name)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish()
    }
}

/// Decodes an X.520 directory string attribute value as text.
trait DecodeAsString {
    fn decode_value_as_string(any: &der::Any) -> Option<String>;
}

impl DecodeAsString for x509_cert::attr::AttributeValue {
    fn decode_value_as_string(any: &der::Any) -> Option<String> {
        use der::asn1::{Ia5StringRef, PrintableStringRef, Utf8StringRef};
        if let Ok(s) = any.decode_as::<Utf8StringRef<'_>>() {
            return Some(s.as_str().to_owned());
        }
        if let Ok(s) = any.decode_as::<PrintableStringRef<'_>>() {
            return Some(s.as_str().to_owned());
        }
        any.decode_as::<Ia5StringRef<'_>>()
            .ok()
            .map(|s| s.as_str().to_owned())
    }
}
