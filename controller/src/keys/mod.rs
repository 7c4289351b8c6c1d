//! Loading the key ring, hot reload, and optional in-cluster key generation and renewal.
//!
//! Keys come from a [`KeySource`]. The one implemented here, [`SecretKeySource`], reads them
//! exactly as Bitnami stores them, so an existing Bitnami install's keys work unchanged:
//! Secrets in the controller namespace labelled
//! `sealedsecrets.bitnami.com/sealed-secrets-key=active`, with a PEM private key (PKCS #1 or
//! PKCS #8) in `tls.key` and a PEM certificate in `tls.crt`, plus the pre-v0.9 legacy Secret
//! named exactly the key prefix (loaded even without the label; a label other than `active`
//! on it disables it too).
//!
//! Unlike Bitnami, the source is watched: adding a key Secret, deleting one or relabelling it
//! (any value but `active`, e.g. `compromised`) changes the ring without a restart. A key
//! Secret that cannot be used (bad PEM, not RSA, certificate and key that do not belong
//! together) is skipped with a warning, a `kseal_key_load_errors_total{reason}` count and a
//! Warning event on the Secret; it never stops the controller.
//!
//! With `--generate-key-if-missing=true` the leader also generates keys: one when the ring is
//! empty, then renewals as [`crate::keys::renewal`] decides from the ring it sees
//! (`--key-renew-period`, `--key-cutoff-time`), and one per [`KeyRequester::request`]
//! (SIGUSR1). A new key only adds to the ring: older keys are never deleted or deactivated,
//! so everything sealed with them still unseals, and `/v1/cert.pem` serves the new key as
//! soon as the watch delivers it.
//!
//! Which key seals: without a key source, the newest key whose certificate has not expired
//! (Bitnami's rule). With `--key-source`, only the fleet ring's active key as the ring view
//! names it (`crate::keys::ringview`), once a loaded key's material hashes to that kid; labels and
//! annotations never choose it, so any other key Secret opens but never seals. While the
//! active key cannot seal, the last verified active key does, or none ([`SealingChoice`]).
//!
//! The [`KeySource`] trait is the seam for other stores (e.g. AWS Secrets Manager): a source
//! yields snapshots of candidate keys and can store a generated key; parsing, ordering,
//! error reporting and publishing into [`State`] are shared.
//!
//! The folder's other parts: [`source`] (the fleet ring as a key source, mirrored into key
//! Secrets), `ringview` (what the controller trusts about the fleet ring's index and the
//! ring-state Secret), [`renewal`] (when a new key is due) and `layout` (the key Secret
//! layout every task shares). This file holds the types every part shares ([`KeyMaterial`],
//! [`Rejection`], the [`KeySource`] trait) and [`publish`]; `secrets` holds
//! [`SecretKeySource`], `sealing` parses keys into a ring and chooses its sealing key
//! ([`build_ring`]), and `loader` runs the loader and key generation ([`run`]). Their public
//! items are re-exported here.

pub mod binding;
pub(crate) mod layout;
mod loader;
#[doc(hidden)]
pub mod renewal;
pub(crate) mod ringview;
mod sealing;
mod secrets;
pub mod source;

use std::fmt;
use std::time::SystemTime;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::ObjectReference;
use kseal_keys::{KeyPair, KeyRing};
use zeroize::Zeroizing;

use crate::state::State;

pub use self::loader::{KeyRequester, KeyRequests, generate, run};
pub use self::sealing::{Built, LoadedCopies, ParseCache, RingSealing, SealingChoice, build_ring};
pub use self::secrets::{SecretKeySource, key_secret, material_from_secret, with_metadata};
pub use crate::keys::layout::{CERTIFICATE_ITEM, KEY_SECRET_TYPE, PRIVATE_KEY_ITEM, REPORTER};

/// One candidate key as a source holds it, before parsing.
pub struct KeyMaterial {
    /// Where it comes from, for logs (e.g. `kube-system/sealed-secrets-key5rxd9`); not secret.
    pub origin: String,
    /// Changes whenever the content may have changed (a resourceVersion); parsing is cached
    /// per `(origin, version)`.
    pub version: String,
    /// The object to attach a Warning event to when the key is rejected.
    pub reference: Option<ObjectReference>,
    /// When the key was stored (orders keys under `SecretCreationTimestamp`).
    pub created: Option<SystemTime>,
    /// The PEM texts, or why they could not be read.
    pub pem: Result<KeyPem, Rejection>,
    /// Labelled as a copy of a fleet ring key (`kseal.dev/mirror=true`). A label proves
    /// nothing: only a key whose material hashes to a kid of the ring view counts as a
    /// mirror, and only the view's active key seals.
    pub mirror: bool,
    /// A mirror's `kseal.dev/ring` annotation: the ring it claims to copy (decides its ring
    /// only while no verified ring view lists the key; see [`binding`]).
    pub ring: Option<String>,
}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyMaterial")
            .field("origin", &self.origin)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// A private key and certificate in PEM. The private key zeroizes on drop.
pub struct KeyPem {
    /// `tls.key`.
    pub private_key: Zeroizing<String>,
    /// `tls.crt`.
    pub certificate: String,
}

/// Why a key was skipped. Messages never quote key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The `reason` label of `kseal_key_load_errors_total`.
    pub reason: &'static str,
    /// Human-readable explanation.
    pub message: String,
}

impl Rejection {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }

    fn from_keys_error(error: &kseal_keys::Error) -> Self {
        use kseal_keys::Error as E;
        match error {
            E::Pem(_) | E::Der { .. } => Self::new("pem", "tls.key or tls.crt is not valid PEM"),
            E::NotRsa | E::KeySize(_) => {
                Self::new("not_rsa", "the key is not an RSA key of 2048 to 8192 bits")
            }
            E::KeyMismatch { .. } => Self::new(
                "mismatch",
                "the certificate in tls.crt does not belong to the private key in tls.key",
            ),
            _ => Self::new("invalid", "the private key was rejected"),
        }
    }
}

/// A store of sealing keys.
pub trait KeySource: Send + 'static {
    /// Every candidate key, first once the initial load is complete, then again after each
    /// change. The stream retries transient errors itself.
    fn snapshots(&mut self) -> BoxStream<'static, Vec<KeyMaterial>>;

    /// Stores a newly generated key, so that a later snapshot holds it. Returns where it was
    /// stored (for logs).
    fn store(&self, pair: &KeyPair) -> BoxFuture<'static, Result<String, crate::Error>>;

    /// Reports a rejected key where its owner will see it (best effort).
    fn report(&self, material: &KeyMaterial, rejection: &Rejection) -> BoxFuture<'static, ()>;
}

/// Publishes `ring` into `state` and refreshes the key metrics.
pub fn publish(state: &State, ring: KeyRing) -> bool {
    publish_with(state, ring, None)
}

/// [`publish`], with the claims of bound rings published together with the ring.
pub fn publish_with(state: &State, ring: KeyRing, claims: Option<binding::Claims>) -> bool {
    let len = ring.len();
    let ids: Vec<String> = ring.keys().map(|k| k.id().to_string()).collect();
    let sealing = ring.sealing_key().map(|k| k.id().to_string());
    // Readers that see the new ring also see the readiness it implies: not ready is published
    // before an empty ring, ready after a non-empty one.
    let ready = |ready: bool| {
        state
            .readiness
            .keys_loaded
            .store(ready, std::sync::atomic::Ordering::Release);
    };
    if len == 0 {
        ready(false);
    }
    let changed = state.keys.replace_with(ring, claims);
    if len > 0 {
        ready(true);
    }
    state
        .metrics
        .keys_loaded
        .set(i64::try_from(len).unwrap_or(i64::MAX));
    refresh_age(state);
    if changed {
        tracing::info!(keys = len, sealing_key = ?sealing, fingerprints = ?ids, "key ring updated");
    }
    changed
}

fn refresh_age(state: &State) {
    let ring = state.keys.ring();
    let age = ring
        .sealing_key()
        .and_then(|k| SystemTime::now().duration_since(k.order_time()).ok())
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    state.metrics.sealing_key_age_seconds.set(age);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kseal_keys::{CertificateOptions, KeySize};

    pub(super) fn pair() -> KeyPair {
        // Test-only 2048-bit key.
        KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap()
    }

    pub(super) fn material(name: &str, pair: &KeyPair, version: &str) -> KeyMaterial {
        let mut secret = key_secret("sealed-secrets-key", "ks", pair).unwrap();
        secret.metadata.name = Some(name.to_owned());
        secret.metadata.resource_version = Some(version.to_owned());
        material_from_secret(&secret)
    }
}
