//! The ring's dedicated root: the key that signs the ring's history and is never a sealing
//! key, so no cluster ever holds it.
//!
//! Two kinds ([`RootKey`]):
//!
//! - **`kms://KEY`**: an AWS KMS asymmetric key (`KeyUsage` `SIGN_VERIFY`, an RSA key spec,
//!   signing with `RSASSA_PSS_SHA_256`). The private key never leaves KMS; the seeder's role
//!   alone may `kms:Sign`, readers need nothing (the public key travels in the ring's root
//!   record). `KEY` is a key id, a key ARN or an alias (`alias/kseal-root`).
//! - **`file://PATH`** (or a plain path): an RSA private key in a PEM file kept offline
//!   (`kseal keys new-root`), for directory rings and for teams that keep the root on a
//!   hardware-backed laptop. The file must be readable by its owner only.
//!
//! Whatever the kind, a root is identified by its [`Kid`] (the hash of its public key), which
//! is what readers pin. Before signing, the key's public half is compared with the record that
//! names it, so a `--root` pointing at another key fails instead of writing a history nobody
//! can verify.

use std::path::PathBuf;

use aws_sdk_kms::Client;
use aws_sdk_kms::primitives::Blob;
use aws_sdk_kms::types::{KeyUsageType, MessageType, SigningAlgorithmSpec};
use base64::Engine as _;
use kseal_keys::{PrivateKey, PublicKey};

use crate::asm::AwsOptions;
use crate::contract::Kid;
use crate::contract::Signature;
use crate::{Error, Result};

/// The most `kms:Sign` takes as a `RAW` message (AWS KMS API reference, `Sign`, `Message`).
pub const KMS_RAW_MESSAGE_MAX: usize = 4096;

/// What `kms:Sign` is sent for `message`: the message itself (`RAW`) up to 4096 bytes, else its
/// SHA-256 digest (`DIGEST`). For RSASSA-PSS-SHA-256 both give a signature over the same
/// message: KMS hashes a `RAW` message with SHA-256 and signs a `DIGEST` as that hash. A
/// signed index grows by about 250 bytes per key, so a ring of 15 keys or more needs the
/// digest. The emulator implements only `RAW`, which the tests' short messages keep using.
fn kms_payload(message: &[u8]) -> (Vec<u8>, MessageType) {
    if message.len() <= KMS_RAW_MESSAGE_MAX {
        (message.to_vec(), MessageType::Raw)
    } else {
        use sha2::Digest as _;
        (sha2::Sha256::digest(message).to_vec(), MessageType::Digest)
    }
}

/// Where a dedicated root key lives, as `--root` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootKey {
    /// An AWS KMS key: id, ARN or `alias/…`.
    Kms(String),
    /// A PEM private key file.
    File(PathBuf),
}

impl RootKey {
    /// Parses `kms://KEY`, `file://PATH` or a plain path.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |reason: &str| Error::Malformed {
            what: format!("root key {text:?}"),
            reason: reason.to_owned(),
        };
        if let Some(key) = text.strip_prefix("kms://") {
            if key.is_empty() || key.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(bad(
                    "kms:// needs a key id, key ARN or alias, e.g. kms://alias/kseal-root",
                ));
            }
            return Ok(Self::Kms(key.to_owned()));
        }
        let path = text.strip_prefix("file://").unwrap_or(text);
        if path.is_empty() || text.contains("://") && !text.starts_with("file://") {
            return Err(bad(
                "expected kms://KEY (an AWS KMS key) or file://PATH (a PEM private key)",
            ));
        }
        Ok(Self::File(PathBuf::from(path)))
    }

    /// `kms://…` or `file://…`.
    pub fn describe(&self) -> String {
        match self {
            Self::Kms(key) => format!("kms://{key}"),
            Self::File(path) => format!("file://{}", path.display()),
        }
    }
}

/// A dedicated root key, opened: it can sign.
#[derive(Clone)]
pub struct RootSigner {
    key: RootKey,
    public: PublicKey,
    kid: Kid,
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Kms { client: Client, key_id: String },
    File(std::sync::Arc<PrivateKey>),
}

impl std::fmt::Debug for RootSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootSigner")
            .field("key", &self.key.describe())
            .field("kid", &self.kid.short())
            .finish_non_exhaustive()
    }
}

impl RootSigner {
    /// Opens `key`: reads a file root (refusing one that others may read), or asks KMS for the
    /// key's public half and checks that it is an RSA signing key with PSS-SHA-256.
    pub async fn open(key: &RootKey, aws: &AwsOptions) -> Result<Self> {
        match key {
            RootKey::File(path) => Self::open_file(path).await,
            RootKey::Kms(id) => Self::open_kms(id, aws).await,
        }
    }

    async fn open_file(path: &std::path::Path) -> Result<Self> {
        let what = format!("root key file {}", path.display());
        let meta = tokio::fs::metadata(path)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::NotFound {
                    what: what.clone(),
                    store: "this machine".into(),
                },
                _ => Error::Malformed {
                    what: what.clone(),
                    reason: format!("cannot be read: {e}"),
                },
            })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(Error::Refused(format!(
                    "{what} may be read or written by group or others (mode {mode:03o}); the \
                     ring's root signs its whole history: chmod 600 it"
                )));
            }
        }
        if meta.len() > 64 * 1024 || !meta.is_file() {
            return Err(Error::Malformed {
                what,
                reason: "not a PEM private key file".into(),
            });
        }
        let text = zeroize::Zeroizing::new(tokio::fs::read_to_string(path).await.map_err(|e| {
            Error::Malformed {
                what: what.clone(),
                reason: format!("cannot be read: {e}"),
            }
        })?);
        let private = PrivateKey::from_pem(&text).map_err(|e| Error::BadKey {
            what: what.clone(),
            reason: e.to_string(),
        })?;
        let public = private.public_key().clone();
        Ok(Self {
            key: RootKey::File(path.to_owned()),
            kid: Kid::of(&public),
            public,
            backend: Backend::File(std::sync::Arc::new(private)),
        })
    }

    async fn open_kms(id: &str, aws: &AwsOptions) -> Result<Self> {
        let (config, _) = crate::asm::sdk_config(aws).await?;
        let client = Client::new(&config);
        let what = format!("KMS key {id}");
        let out = client
            .get_public_key()
            .key_id(id)
            .send()
            .await
            .map_err(|e| crate::asm::classify("kms:GetPublicKey", &what, e))?;
        if out.key_usage() != Some(&KeyUsageType::SignVerify) {
            return Err(Error::BadKey {
                what,
                reason: "its key usage is not SIGN_VERIFY (create it with --key-usage \
                         SIGN_VERIFY --key-spec RSA_4096)"
                    .into(),
            });
        }
        if !out
            .signing_algorithms()
            .contains(&SigningAlgorithmSpec::RsassaPssSha256)
        {
            return Err(Error::BadKey {
                what,
                reason: "it cannot sign with RSASSA_PSS_SHA_256 (an RSA key spec is needed)".into(),
            });
        }
        let der = out.public_key().ok_or_else(|| Error::BadKey {
            what: what.clone(),
            reason: "KMS returned no public key".into(),
        })?;
        let public = PublicKey::from_spki_der(der.as_ref()).map_err(|e| Error::BadKey {
            what: what.clone(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            key: RootKey::Kms(id.to_owned()),
            kid: Kid::of(&public),
            public,
            backend: Backend::Kms {
                client,
                key_id: out.key_id().unwrap_or(id).to_owned(),
            },
        })
    }

    /// The root's kid (what readers pin).
    pub fn kid(&self) -> &Kid {
        &self.kid
    }

    /// The root's public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// Where it lives.
    pub fn key(&self) -> &RootKey {
        &self.key
    }

    /// Where a writer finds it again, as recorded in the ring (KMS keys only: a file's path is
    /// the seeder's own business).
    pub fn location(&self) -> Option<String> {
        match &self.backend {
            Backend::Kms { key_id, .. } => Some(format!("kms://{key_id}")),
            Backend::File(_) => None,
        }
    }

    /// Signs `message` (RSASSA-PSS, SHA-256), checking the signature before returning it.
    pub async fn sign(&self, message: &[u8]) -> Result<Signature> {
        let sig = match &self.backend {
            Backend::File(private) => {
                private
                    .sign_pss_sha256(message)
                    .map_err(|_| Error::BadKey {
                        what: self.key.describe(),
                        reason: "it cannot sign".into(),
                    })?
            }
            Backend::Kms { client, key_id } => {
                let what = format!("KMS key {key_id}");
                let (payload, kind) = kms_payload(message);
                let out = client
                    .sign()
                    .key_id(key_id)
                    .message(Blob::new(payload))
                    .message_type(kind)
                    .signing_algorithm(SigningAlgorithmSpec::RsassaPssSha256)
                    .send()
                    .await
                    .map_err(|e| crate::asm::classify("kms:Sign", &what, e))?;
                out.signature()
                    .map(|b| b.as_ref().to_vec())
                    .ok_or_else(|| Error::BadKey {
                        what,
                        reason: "KMS returned no signature".into(),
                    })?
            }
        };
        // A signature that does not verify would make the whole ring unreadable: never
        // write one.
        self.public
            .verify_pss_sha256(message, &sig)
            .map_err(|_| Error::BadKey {
                what: self.key.describe(),
                reason: "its signature does not verify with its own public key".into(),
            })?;
        Ok(Signature {
            kid: self.kid.clone(),
            sig: base64::engine::general_purpose::STANDARD.encode(sig),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// AWS KMS refuses a RAW message over 4096 bytes (a ring of 15 keys or more): longer
    /// messages go as their SHA-256 digest, which PSS-SHA-256 signs alike.
    #[test]
    fn long_messages_go_to_kms_as_their_digest() {
        use aws_sdk_kms::types::MessageType;
        use sha2::Digest as _;
        let short = vec![7u8; super::KMS_RAW_MESSAGE_MAX];
        assert_eq!(
            super::kms_payload(&short),
            (short.clone(), MessageType::Raw)
        );
        let long = vec![7u8; super::KMS_RAW_MESSAGE_MAX + 1];
        assert_eq!(
            super::kms_payload(&long),
            (sha2::Sha256::digest(&long).to_vec(), MessageType::Digest)
        );
    }

    #[test]
    fn root_keys_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(
            RootKey::parse("kms://alias/kseal-root").ok(),
            Some(RootKey::Kms("alias/kseal-root".into()))
        );
        assert_eq!(
            RootKey::parse("file:///secure/root.pem").ok(),
            Some(RootKey::File("/secure/root.pem".into()))
        );
        assert_eq!(
            RootKey::parse("root.pem").ok(),
            Some(RootKey::File("root.pem".into()))
        );
        for bad in ["kms://", "", "s3://bucket/root", "kms://a b"] {
            let e = RootKey::parse(bad).unwrap_err().to_string();
            assert!(e.contains("root key"), "{bad}: {e}");
        }
    }
}
