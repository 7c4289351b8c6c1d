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
    /// What the keys are, for messages: "key ring `secretsmanager://kseal/prod`".
    pub(super) name: String,
    /// Whether they are one group's ring (a creation rule's, or the --cert ring), rather than
    /// whatever keys the --key files or the controller hold.
    pub(super) group: bool,
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
    let mut view = RingView {
        name: "the ring of the --cert flags".to_owned(),
        group: !args.cert.is_empty(),
        ..RingView::default()
    };
    if args.cert.is_empty() {
        if let Some(loaded) = keys {
            view.name = "the keys of the --key files".to_owned();
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
        add_source(&mut view, &request, &spec.source)?;
    }
    Ok(view)
}

/// Adds the keys of one source to `view`: every key of a ring's verified index (its active key
/// the view's, if it has none yet), or one certificate (active if the view has none yet).
fn add_source(view: &mut RingView, request: &CertRequest, source: &Source) -> Result<()> {
    if let Source::Ring(location) = source {
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
        return Ok(());
    }
    let what = request.describe(source);
    let text = request.fetch_pem(source)?;
    let cert =
        Certificate::from_pem(&text).with_context(|| format!("{what} is not a PEM certificate"))?;
    if view.active.is_none() {
        view.active = Some(cert.id().clone());
    }
    view.add(&cert, cert.not_before());
    Ok(())
}

/// The keys a creation rule seals a path with: `spec` is its `--cert` value (a ring, a
/// certificate file or an https URL), `anchor` the pin of its ring in the same `.kseal.yaml`.
pub(super) fn rule_view(spec: &str, anchor: Option<&str>) -> Result<RingView> {
    let parsed = crate::keysource::cert::parse_spec(spec)?;
    let request = CertRequest {
        specs: Vec::new(),
        controller: ControllerTarget::default(),
        allow_http: false,
        ring_anchor: anchor.map(str::to_owned),
    };
    let mut view = RingView {
        group: true,
        name: match &parsed.source {
            Source::Ring(location) => format!("key ring `{location}`"),
            other => format!("certificate {}", request.describe(other)),
        },
        ..RingView::default()
    };
    add_source(&mut view, &request, &parsed.source)?;
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
        name: "the controller's certificate".to_owned(),
        ..RingView::default()
    };
    view.add(&cert, cert.not_before());
    Ok(view)
}
