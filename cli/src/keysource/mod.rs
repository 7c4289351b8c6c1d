//! Which keys, from where: every command that seals, opens or checks asks this module for its
//! certificates and private keys, so that the rules live in one place. A certificate comes
//! from a file (a PEM certificate or a key backup), an https URL, the controller, or a fleet
//! key ring ([`cert`]); private keys come from PEM files and key Secret backups, with the one
//! rule for which of them seals ([`keys`]); a local key directory is what `kseal keys
//! generate` writes ([`keydir`]); a fleet key ring is read through `kseal-keystore`
//! ([`ring`]); a `.kseal.yaml` creation rule may name the certificate of a path, and
//! `reseal` and `validate` work with local keys or the controller ([`target`]); commands that
//! walk a repository take each file's ring or certificate from its creation rule ([`rules`]).
//!
//! The key-ring readers are installed by the full CLI ([`crate::run`], what `kseal-ring`
//! runs) with [`read_rings_with`]: `kseal` itself hands every key-ring source to
//! `kseal-ring` before any certificate is read, so the key-ring code (and the AWS SDK) is not
//! linked into it.

use std::sync::OnceLock;
use std::time::SystemTime;

use anyhow::Result;
use kseal_keys::{Certificate, KeyId};

pub(crate) mod cert;
pub(crate) mod keydir;
pub(crate) mod keys;
pub(crate) mod ring;
pub(crate) mod rules;
pub(crate) mod target;

/// A key ring's verified index: every certificate with the time it was added, and the
/// active key.
pub(crate) struct RingIndex {
    pub(crate) keys: Vec<(Certificate, SystemTime)>,
    pub(crate) active: Option<KeyId>,
}

/// Reads a ring's sealing certificate: the location, and the anchor given on the command line.
type CertificateReader = fn(&str, Option<&str>) -> Result<String>;

/// Reads a ring's verified index: the location, and the anchor given on the command line.
type IndexReader = fn(&str, Option<&str>) -> Result<RingIndex>;

/// The key-ring certificate reader, once installed.
static CERTIFICATE_READER: OnceLock<CertificateReader> = OnceLock::new();

/// The key-ring index reader, once installed.
static INDEX_READER: OnceLock<IndexReader> = OnceLock::new();

/// Installs the key-ring readers (see the module documentation).
pub(crate) fn read_rings_with(certificate: CertificateReader, index: IndexReader) {
    let _ = CERTIFICATE_READER.set(certificate);
    let _ = INDEX_READER.set(index);
}

/// The installed key-ring certificate reader, if any.
pub(crate) fn ring_certificate_reader() -> Option<CertificateReader> {
    CERTIFICATE_READER.get().copied()
}

/// The installed key-ring index reader, if any.
pub(crate) fn ring_index_reader() -> Option<IndexReader> {
    INDEX_READER.get().copied()
}
