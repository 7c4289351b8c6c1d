//! The ring `kseal check` checks against: its certificates with the time each was added,
//! and the active key, from `--cert` (files or a key ring's index), the `--key` files, or
//! the controller.

use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use kseal_keys::{Certificate, KeyId};

use crate::args::CheckArgs;
use crate::controller::ControllerTarget;
use crate::keysource::cert::{CertRequest, Source};

/// A key of the ring, public part only.
#[derive(Debug, Clone)]
pub(super) struct RingKey {
    pub(super) id: KeyId,
    /// Length of its RSA blocks (the modulus size in bytes).
    pub(super) block_len: usize,
    /// When it entered the ring (its certificate's start without a ring index).
    pub(super) since: SystemTime,
}

/// What the public tier checks against.
#[derive(Debug, Default)]
pub(super) struct RingView {
    pub(super) keys: Vec<RingKey>,
    pub(super) active: Option<KeyId>,
}

impl RingView {
    pub(super) fn get(&self, id: &KeyId) -> Option<&RingKey> {
        self.keys.iter().find(|k| &k.id == id)
    }

    pub(super) fn add(&mut self, cert: &Certificate, since: SystemTime) {
        if self.get(cert.id()).is_none() {
            self.keys.push(RingKey {
                id: cert.id().clone(),
                block_len: cert.public_key().ciphertext_len(),
                since,
            });
        }
    }
}

/// The ring from `--cert` (files: the first is active; a key ring: its index), else from
/// the `--key` files, else the controller's certificate with `--controller`.
pub(super) fn ring_view(
    args: &CheckArgs,
    keys: Option<&crate::keysource::keys::LoadedRing>,
) -> Result<RingView> {
    let mut view = RingView::default();
    if args.cert.is_empty() {
        if let Some(loaded) = keys {
            for pair in loaded.ring.keys() {
                view.add(pair.certificate(), pair.certificate().not_before());
            }
            view.active = loaded.sealing.as_ref().ok().map(|(id, _)| id.clone());
            return Ok(view);
        }
        if !args.use_controller {
            bail!(
                "pass the ring's keys: --cert FILE… (the active certificate first), --cert \
                 secretsmanager://… or dir://… (a key ring), --key FILE… or --controller"
            );
        }
    }
    let request = CertRequest {
        specs: args
            .cert
            .iter()
            .map(|c| crate::keysource::cert::parse_spec(c))
            .collect::<Result<Vec<_>>>()?,
        controller: ControllerTarget::from_args(&args.controller),
        allow_http: args.allow_http,
        ring_anchor: args.ring_anchor.clone(),
    };
    if request.specs.is_empty() {
        // --controller without --cert: the ring is the controller's certificate.
        return controller_view(&request);
    }
    for spec in &request.specs {
        if let Source::Ring(location) = &spec.source {
            let Some(read) = crate::keysource::ring_index_reader() else {
                bail!("reading key ring `{location}` is `kseal-ring`'s job");
            };
            let index = read(location, request.ring_anchor.as_deref())
                .with_context(|| format!("failed to read the keys of key ring `{location}`"))?;
            for (cert, added) in &index.keys {
                view.add(cert, *added);
            }
            if view.active.is_none() {
                view.active = index.active;
            }
            continue;
        }
        let what = request.describe(&spec.source);
        let text = request.fetch_pem(&spec.source)?;
        let cert = Certificate::from_pem(&text)
            .with_context(|| format!("{what} is not a PEM certificate"))?;
        if view.active.is_none() {
            view.active = Some(cert.id().clone());
        }
        view.add(&cert, cert.not_before());
    }
    Ok(view)
}

/// The ring as the controller's certificate (`--controller` without `--cert`).
pub(super) fn controller_view(request: &CertRequest) -> Result<RingView> {
    let text = request.fetch_pem(&Source::Controller)?;
    let cert = Certificate::from_pem(&text).with_context(|| {
        format!(
            "{} is not a PEM certificate",
            request.describe(&Source::Controller)
        )
    })?;
    let mut view = RingView {
        active: Some(cert.id().clone()),
        ..RingView::default()
    };
    view.add(&cert, cert.not_before());
    Ok(view)
}
