//! The ring contract's documents: key ids, the per-key secret `{"crt","key"}` and the index.
//!
//! Both documents are JSON SecretStrings in Secrets Manager and files in a directory store.
//! They are written as strict JSON and read leniently where the reference sample's hand-made
//! JSON (raw newlines inside strings) may appear.

use std::fmt;
use std::time::SystemTime;

use kseal_keys::{Certificate, KeyPair, PublicKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use crate::{Error, Result};

/// The index schema this build writes: a signed history (see [`crate::trust`]).
pub const INDEX_SCHEMA: u32 = 2;
/// The schema of indexes written before signing existed; read only where a caller allows an
/// unsigned ring ([`crate::Trust::legacy`]).
pub const UNSIGNED_INDEX_SCHEMA: u32 = 1;

/// A key's identifier in a ring: the lowercase hex SHA-256 of its DER `SubjectPublicKeyInfo`
/// (what `openssl pkey -pubin -outform DER | sha256sum` prints). Hex, so a secret name ending in
/// it never looks like Secrets Manager's `-XXXXXX` ARN suffix.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Kid(String);

impl Kid {
    /// The kid of `public`.
    pub fn of(public: &PublicKey) -> Self {
        Self(hex::encode(Sha256::digest(public.to_spki_der())))
    }

    /// Parses 64 lowercase hex characters.
    pub fn parse(text: &str) -> Result<Self> {
        let ok = text.len() == 64
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(Error::InvalidKid(text.chars().take(80).collect()))
        }
    }

    /// The full hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 characters, for tables and names (unique enough to tell keys apart; every
    /// command also accepts this prefix where it is unambiguous).
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl fmt::Display for Kid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Kid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kid({})", self.0)
    }
}

impl Serialize for Kid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Kid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Kid::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One key as stored: `{"crt": "<PEM certificate>", "key": "<PEM private key>"}`, the reference
/// sample's format, so External Secrets Operator can map any single key. The private key
/// zeroizes on drop and never appears in `Debug`.
pub struct KeyEntry {
    crt: String,
    key: Zeroizing<String>,
}

impl fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyEntry").finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct RawEntry {
    #[serde(alias = "tls.crt")]
    crt: String,
    #[serde(alias = "tls.key")]
    key: String,
}

#[derive(Serialize)]
struct RawEntryOut<'a> {
    crt: &'a str,
    key: &'a str,
}

impl KeyEntry {
    /// The entry for `pair`, with the private key in PKCS #1 PEM (what Bitnami writes into
    /// `tls.key`).
    pub fn from_pair(pair: &KeyPair) -> Result<Self> {
        let key = pair
            .private_key()
            .to_pkcs1_pem()
            .map_err(|_| Error::BadKey {
                what: "generated key".into(),
                reason: "cannot encode the private key".into(),
            })?;
        Ok(Self {
            crt: pair.certificate().to_pem(),
            key,
        })
    }

    /// The entry from PEM texts (not yet checked; see [`KeyEntry::to_pair`]).
    pub fn from_pem(certificate: String, private_key: Zeroizing<String>) -> Self {
        Self {
            crt: certificate,
            key: private_key,
        }
    }

    /// Reads a SecretString. Accepts strict JSON and the reference sample's hand-made JSON with
    /// raw newlines inside the strings; `tls.crt`/`tls.key` are accepted as property names too.
    /// `what` names the document in errors (never its content).
    pub fn parse(text: &str, what: &str) -> Result<Self> {
        let raw: RawEntry = match serde_json::from_str(text) {
            Ok(raw) => raw,
            Err(strict) => {
                let repaired = Zeroizing::new(escape_control_in_strings(text));
                serde_json::from_str(&repaired).map_err(|_| Error::Malformed {
                    what: what.to_owned(),
                    // serde_json's message names a position and a category, never the input.
                    reason: format!(
                        "expected a JSON object with string properties \"crt\" and \"key\" ({strict})"
                    ),
                })?
            }
        };
        Ok(Self {
            crt: raw.crt,
            key: Zeroizing::new(raw.key),
        })
    }

    /// Strict JSON (newlines escaped), for writing.
    pub fn to_json(&self) -> Zeroizing<String> {
        let out = RawEntryOut {
            crt: &self.crt,
            key: &self.key,
        };
        // Serialising two strings into a String cannot fail.
        Zeroizing::new(serde_json::to_string(&out).unwrap_or_default())
    }

    /// The PEM certificate.
    pub fn certificate_pem(&self) -> &str {
        &self.crt
    }

    /// The PEM private key.
    pub fn private_key_pem(&self) -> &Zeroizing<String> {
        &self.key
    }

    /// Parses and checks the pair: both PEM texts valid, RSA of 2048 to 8192 bits, and the
    /// certificate belonging to the private key. `what` names the document in errors.
    pub fn to_pair(&self, what: &str) -> Result<KeyPair> {
        KeyPair::from_pem(&self.key, &self.crt).map_err(|e| Error::BadKey {
            what: what.to_owned(),
            reason: key_error_reason(&e),
        })
    }
}

/// A reason for a rejected key that never quotes key material.
pub(crate) fn key_error_reason(e: &kseal_keys::Error) -> String {
    use kseal_keys::Error as E;
    match e {
        E::Pem(_) | E::Der { .. } => "\"crt\" or \"key\" is not valid PEM".into(),
        E::NotRsa => "not an RSA key".into(),
        E::KeySize(bits) => format!("RSA key of {bits} bits: kseal accepts 2048 to 8192"),
        E::KeyMismatch { .. } => "the certificate does not belong to the private key".into(),
        _ => "the private key was rejected".into(),
    }
}

/// Escapes raw control characters inside JSON string literals (the reference sample pastes PEM
/// files between quotes). Outside strings nothing changes.
fn escape_control_in_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            if escaped {
                escaped = false;
                out.push(c);
                continue;
            }
            match c {
                '\\' => {
                    escaped = true;
                    out.push(c);
                }
                '"' => {
                    in_string = false;
                    out.push(c);
                }
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        } else {
            if c == '"' {
                in_string = true;
            }
            out.push(c);
        }
    }
    out
}

/// The public description of one key in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexEntry {
    /// The key's id (also the name suffix of its key secret).
    pub kid: Kid,
    /// Bitnami's fingerprint (`SHA256:…`), as in the `kseal.dev/sealing-key` annotation.
    pub fingerprint: String,
    /// When the key entered the index (RFC 3339). Activation waits on it.
    pub added: jiff::Timestamp,
    /// Certificate validity start.
    pub not_before: jiff::Timestamp,
    /// Certificate validity end. An expired key still opens, but never seals.
    pub not_after: jiff::Timestamp,
    /// RSA modulus size.
    pub bits: u32,
    /// The PEM certificate.
    pub crt: String,
}

impl IndexEntry {
    /// The entry for `certificate`, added at `added`.
    pub fn new(certificate: &Certificate, added: SystemTime) -> Result<Self> {
        let ts = |t: SystemTime| {
            jiff::Timestamp::try_from(t).map_err(|_| Error::Malformed {
                what: "certificate".into(),
                reason: "validity outside the supported time range".into(),
            })
        };
        Ok(Self {
            kid: Kid::of(certificate.public_key()),
            fingerprint: certificate.id().to_string(),
            added: ts(added)?,
            not_before: ts(certificate.not_before())?,
            not_after: ts(certificate.not_after())?,
            bits: u32::try_from(certificate.public_key().bits()).unwrap_or(u32::MAX),
            crt: certificate.to_pem(),
        })
    }

    /// The parsed certificate.
    pub fn certificate(&self) -> Result<Certificate> {
        Certificate::from_pem(&self.crt).map_err(|e| Error::Malformed {
            what: format!("index entry {}", self.kid.short()),
            reason: key_error_reason(&e),
        })
    }

    /// Whether the certificate has expired at `now`.
    pub fn is_expired_at(&self, now: SystemTime) -> bool {
        jiff::Timestamp::try_from(now).is_ok_and(|now| now >= self.not_after)
    }
}

/// The ring's index: no private material. Readers that may not see private keys (laptops, CI)
/// read only this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// Schema version ([`INDEX_SCHEMA`]).
    pub schema: u32,
    /// The ring prefix it belongs to (a copy of the index under another name is refused).
    pub ring: String,
    /// Grows by one on every write of a signed index; readers refuse to go back.
    #[serde(default)]
    pub version: u64,
    /// The key that seals, if any.
    pub active: Option<Kid>,
    /// When the index was last written.
    pub updated: jiff::Timestamp,
    /// Every key of the ring, oldest first.
    pub keys: Vec<IndexEntry>,
    /// Keys that left the ring, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<RetiredEntry>,
    /// The root chain, anchor first ([`crate::trust`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roots: Vec<RootRecord>,
    /// Until when readers take this index as current (a signed index, [`crate::trust`]): a
    /// reader that may choose the sealing key refuses an index past it, so an old index
    /// replayed by whoever can write `R/index` is refused once it expires. The seeder
    /// re-signs before then (`kseal keys refresh`). Absent in indexes written before expiry
    /// existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<jiff::Timestamp>,
    /// The last root's signature over everything above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
}

impl Index {
    /// An empty, unsigned index for `ring` (a writer signs it before it is stored).
    pub fn empty(ring: &str, now: SystemTime) -> Self {
        Self {
            schema: UNSIGNED_INDEX_SCHEMA,
            ring: ring.to_owned(),
            version: 0,
            active: None,
            updated: jiff::Timestamp::try_from(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH),
            keys: Vec::new(),
            retired: Vec::new(),
            roots: Vec::new(),
            expires: None,
            signature: None,
        }
    }

    /// Whether this index carries a signed history (schema 2).
    pub fn is_signed(&self) -> bool {
        self.schema == INDEX_SCHEMA
    }

    /// Parses and checks an index: the schema is known, the ring matches, every kid is the
    /// hash of its certificate's key and every other field of an entry (fingerprint, bits,
    /// validity) is what its certificate says, no kid twice, the active kid is one of the keys,
    /// and no retired kid is still a key. Signatures are checked by [`crate::trust::verify`].
    pub fn parse(text: &str, expected_ring: &str, what: &str) -> Result<Self> {
        let malformed = |reason: String| Error::Malformed {
            what: what.to_owned(),
            reason,
        };
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| malformed(format!("not JSON ({e})")))?;
        let schema = value.get("schema").and_then(serde_json::Value::as_u64);
        if schema != Some(u64::from(INDEX_SCHEMA))
            && schema != Some(u64::from(UNSIGNED_INDEX_SCHEMA))
        {
            return Err(malformed(format!(
                "schema {} is not supported by this kseal (it reads schemas {UNSIGNED_INDEX_SCHEMA} and {INDEX_SCHEMA}); upgrade kseal",
                schema.map_or_else(|| "(missing)".to_owned(), |s| s.to_string())
            )));
        }
        let index: Index = serde_json::from_value(value).map_err(|e| malformed(e.to_string()))?;
        if index.schema == UNSIGNED_INDEX_SCHEMA {
            // An unsigned index was written by a kseal before signed histories, which never
            // wrote these fields. One that carries them is a signed ring's index rewritten as
            // unsigned (by whoever can write the index but cannot sign): taking it as a
            // legacy index would let the next routine write sign what they wrote.
            let signed_fields: Vec<&str> = [
                ("roots", !index.roots.is_empty()),
                ("retired", !index.retired.is_empty()),
                ("signature", index.signature.is_some()),
                ("version", index.version != 0),
                ("expires", index.expires.is_some()),
            ]
            .into_iter()
            .filter_map(|(field, present)| present.then_some(field))
            .collect();
            if !signed_fields.is_empty() {
                return Err(malformed(format!(
                    "it says schema {UNSIGNED_INDEX_SCHEMA} (unsigned) but carries a signed \
                     history's {}: a signed ring's index rewritten as unsigned is refused by \
                     every reader and writer; restore the signed index from the store's \
                     previous version",
                    signed_fields.join(", ")
                )));
            }
        }
        if index.ring != expected_ring {
            return Err(malformed(format!(
                "it belongs to ring {:?}, not {expected_ring:?}",
                index.ring
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for entry in &index.keys {
            if !seen.insert(&entry.kid) {
                return Err(malformed(format!(
                    "key {} is listed twice",
                    entry.kid.short()
                )));
            }
            let cert = entry.certificate()?;
            if Kid::of(cert.public_key()) != entry.kid {
                return Err(malformed(format!(
                    "key {} does not match its certificate",
                    entry.kid.short()
                )));
            }
            let expected = IndexEntry::new(&cert, SystemTime::from(entry.added))?;
            let field = if expected.fingerprint != entry.fingerprint {
                Some("fingerprint")
            } else if expected.bits != entry.bits {
                Some("bits")
            } else if expected.not_before != entry.not_before {
                Some("notBefore")
            } else if expected.not_after != entry.not_after {
                Some("notAfter")
            } else {
                None
            };
            if let Some(field) = field {
                return Err(malformed(format!(
                    "the {field} of key {} is not what its certificate says",
                    entry.kid.short()
                )));
            }
        }
        for retired in &index.retired {
            if seen.contains(&retired.kid) {
                return Err(malformed(format!(
                    "key {} is listed both as a key and as retired",
                    retired.kid.short()
                )));
            }
        }
        if let Some(active) = &index.active
            && !seen.contains(active)
        {
            return Err(malformed(format!(
                "the active key {} is not one of its keys",
                active.short()
            )));
        }
        Ok(index)
    }

    /// [`Index::parse`] for a copy of an index that may belong to any ring (a directory ring,
    /// e.g. mounted by the Secrets Store CSI driver): the ring is the one the document names.
    pub fn parse_any_ring(text: &str, what: &str) -> Result<Self> {
        let ring = serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v.get("ring").and_then(|r| r.as_str()).map(str::to_owned))
            .unwrap_or_default();
        Self::parse(text, &ring, what)
    }

    /// Strict, stable JSON (pretty, so diffs of a directory store read well).
    pub fn to_json(&self) -> String {
        // Serialising plain data into a String cannot fail.
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The SHA-256 of [`Index::to_json`], hex: what the history marker records of each index
    /// its writers write ([`crate::Marker::vouches`]).
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(self.to_json().as_bytes()))
    }

    /// The entry with this kid.
    pub fn entry(&self, kid: &Kid) -> Option<&IndexEntry> {
        self.keys.iter().find(|e| &e.kid == kid)
    }

    /// The active key's entry.
    pub fn active_entry(&self) -> Option<&IndexEntry> {
        self.active.as_ref().and_then(|k| self.entry(k))
    }

    /// Resolves a full kid, a unique prefix of at least 6 characters, or a Bitnami fingerprint.
    pub fn resolve(&self, text: &str) -> Result<&IndexEntry> {
        let text = text.trim();
        if text.starts_with("SHA256:") {
            return self
                .keys
                .iter()
                .find(|e| e.fingerprint == text)
                .ok_or_else(|| Error::UnknownKey(text.to_owned()));
        }
        if text.len() < 6 {
            return Err(Error::UnknownKey(format!(
                "{text} (give at least 6 characters of the kid)"
            )));
        }
        let mut matches = self
            .keys
            .iter()
            .filter(|e| e.kid.as_str().starts_with(text));
        match (matches.next(), matches.next()) {
            (Some(e), None) => Ok(e),
            (Some(_), Some(_)) => Err(Error::UnknownKey(format!(
                "{text} (ambiguous: more than one key starts with it)"
            ))),
            _ => Err(Error::UnknownKey(text.to_owned())),
        }
    }
}

// The signed history's records, as data ([`crate::trust`] signs and checks them).

/// A signature in the index: the kid of the key that made it and RSASSA-PSS-SHA256, base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// The signing key.
    pub kid: Kid,
    /// The signature, standard base64.
    pub sig: String,
}

/// One link of the root chain: a root key and the signatures that admit it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootRecord {
    /// 1 for the anchor, then one more per root rotation.
    pub seq: u64,
    /// The root key's kid.
    pub kid: Kid,
    /// The root key's DER `SubjectPublicKeyInfo`, base64 (kept here so the chain can be checked
    /// after the key left the ring).
    pub spki: String,
    /// Signatures over [`root_message`](crate::trust::root_message): by the previous root (none for the anchor) and by
    /// this root itself.
    pub signatures: Vec<Signature>,
    /// A dedicated root: a signing key that is not, and never was, a key of the ring (AWS KMS
    /// or an offline file, [`crate::root`]). Once a ring's root is dedicated, every later root
    /// is too: ring keys, which clusters hold, never sign its history again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dedicated: bool,
    /// Where writers find a dedicated root (`kms://…`); a hint, signed with the record, never
    /// trusted for anything else (the key is checked against `spki`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// A key that left the ring, remembered so a reader can tell "retired" from "never a key of
/// this ring".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredEntry {
    /// The key's kid.
    pub kid: Kid,
    /// When it was removed from the index.
    pub retired: jiff::Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kseal_keys::{CertificateOptions, KeySize};

    fn pair() -> KeyPair {
        // Test-only 2048-bit key; do not copy.
        KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap()
    }

    #[test]
    fn kid_is_hex_sha256_of_spki() {
        let p = pair();
        let kid = Kid::of(p.public_key());
        assert_eq!(kid.as_str().len(), 64);
        let expected: String = Sha256::digest(p.public_key().to_spki_der())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(kid.as_str(), expected);
        assert!(Kid::parse(kid.as_str()).is_ok());
        assert!(Kid::parse(&kid.as_str().to_uppercase()).is_err());
        assert!(Kid::parse("abc").is_err());
    }

    #[test]
    fn entry_round_trips_as_strict_json() {
        let p = pair();
        let entry = KeyEntry::from_pair(&p).unwrap();
        let json = entry.to_json();
        assert!(!json.contains('\n'), "newlines must be escaped");
        let back = KeyEntry::parse(&json, "test").unwrap();
        assert_eq!(back.to_pair("test").unwrap().id(), p.id());
    }

    #[test]
    fn sample_json_with_raw_newlines_is_read() {
        let p = pair();
        let text = format!(
            "{{\n  \"crt\": \"{}\",\n  \"key\": \"{}\"\n}}\n",
            p.certificate().to_pem(),
            p.private_key().to_pkcs8_pem().as_str()
        );
        assert!(serde_json::from_str::<serde_json::Value>(&text).is_err());
        let entry = KeyEntry::parse(&text, "sealed-secrets").unwrap();
        assert_eq!(entry.to_pair("x").unwrap().id(), p.id());
    }

    #[test]
    fn malformed_entry_error_never_quotes_the_input() {
        let err = KeyEntry::parse("{\"crt\": \"x\", \"key\": \"TOPSECRET", "k").unwrap_err();
        assert!(!err.to_string().contains("TOPSECRET"), "{err}");
        let err = KeyEntry::parse("[]", "k").unwrap_err();
        assert!(err.to_string().contains("\"crt\""), "{err}");
    }

    #[test]
    fn mismatched_pair_is_rejected() {
        let a = pair();
        let b = pair();
        let entry = KeyEntry::from_pem(
            b.certificate().to_pem(),
            a.private_key().to_pkcs1_pem().unwrap(),
        );
        let err = entry.to_pair("kseal/fleet/keys/x").unwrap_err();
        assert!(err.to_string().contains("does not belong"), "{err}");
    }

    #[test]
    fn index_checks_kids_and_active() {
        let p = pair();
        let mut index = Index::empty("kseal/fleet", SystemTime::now());
        index
            .keys
            .push(IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
        index.active = Some(Kid::of(p.public_key()));
        let text = index.to_json();
        assert_eq!(Index::parse(&text, "kseal/fleet", "i").unwrap(), index);
        assert!(Index::parse(&text, "other", "i").is_err());

        let mut wrong = index.clone();
        wrong.keys[0].kid = Kid::parse(&"0".repeat(64)).unwrap();
        wrong.active = Some(wrong.keys[0].kid.clone());
        let err = Index::parse(&wrong.to_json(), "kseal/fleet", "i").unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");

        let future = text.replace("\"schema\": 1", "\"schema\": 3");
        let err = Index::parse(&future, "kseal/fleet", "i").unwrap_err();
        assert!(err.to_string().contains("upgrade kseal"), "{err}");
    }

    #[test]
    fn index_resolves_prefixes_and_fingerprints() {
        let p = pair();
        let mut index = Index::empty("r", SystemTime::now());
        index
            .keys
            .push(IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
        let kid = Kid::of(p.public_key());
        assert_eq!(index.resolve(&kid.as_str()[..8]).unwrap().kid, kid);
        assert_eq!(index.resolve(p.id().as_str()).unwrap().kid, kid);
        assert!(index.resolve("abc").is_err());
        assert!(index.resolve("ffffffffffff").is_err());
    }
}
