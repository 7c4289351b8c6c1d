//! What `reseal` and `validate` work with, and where a re-sealed value goes: local private
//! keys or the cluster's controller ([`keys_or_controller`]), and the certificate to reseal to
//! (`--cert`, else a `.kseal.yaml` creation rule, else the sealing key of the `--key` files).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_keys::{Certificate, KeyRing};

use super::cert::CertRequest;
use super::keys::{LoadedRing, load_keys};
use crate::args::{ControllerArgs, ResealArgs};
use crate::controller::{Controller, ControllerTarget};

/// What `validate` and `reseal` work with: local private keys or the cluster's controller.
pub(crate) enum Backing {
    Keys(LoadedRing),
    Controller(Controller),
}

pub(crate) fn keys_or_controller(
    use_controller: bool,
    controller: &ControllerArgs,
    keys: &[PathBuf],
) -> Result<Backing> {
    if use_controller {
        return Ok(Backing::Controller(Controller::connect(
            &ControllerTarget::from_args(controller),
        )?));
    }
    if keys.is_empty() {
        bail!(
            "pass --key FILE (local private keys) or --controller (ask the controller in the \
             cluster)"
        );
    }
    Ok(Backing::Keys(load_keys(keys)?))
}

/// The certificate to reseal to: `--cert`, else the sealing key of the --key files (the
/// fleet ring's active key when they mark one, see [`crate::keysource::keys::sealing_key`]).
pub(crate) fn target_certificate(
    args: &ResealArgs,
    loaded: LoadedRing,
) -> Result<(KeyRing, Certificate)> {
    if let Some(text) = &args.cert {
        let spec = crate::keysource::cert::parse_spec(text)?;
        let request = CertRequest {
            specs: vec![spec],
            controller: ControllerTarget::default(),
            allow_http: args.allow_http,
            ring_anchor: None,
        };
        return Ok((loaded.ring, request.load_one()?));
    }
    let (id, note) = loaded
        .sealing
        .context("failed to choose the key to reseal to")?;
    if let Some(note) = note {
        eprintln!("{note}");
    }
    let cert = loaded
        .ring
        .get(&id)
        .context("no private key to reseal with")?
        .certificate();
    let cert = crate::keysource::cert::check(&cert.to_pem(), &format!("of the sealing key {id}"))?;
    Ok((loaded.ring, cert))
}

/// The certificate the `.kseal.yaml` creation rules give the files (none for standard
/// input, or when no rule names one); files whose rules differ need --cert or --stale.
pub(crate) fn rule_certificate(paths: &[PathBuf]) -> Result<Option<String>> {
    let mut found: Option<(String, String)> = None;
    let mut without = None;
    for path in paths.iter().filter(|p| *p != Path::new("-")) {
        let rule = crate::project::rule_for_output(Some(path))?;
        let Some((rule, spec)) = rule
            .map(|r| r.cert_spec().map(|s| s.map(|s| (r, s))))
            .transpose()?
            .flatten()
        else {
            without.get_or_insert_with(|| path.display().to_string());
            continue;
        };
        match &found {
            Some((other, why)) if *other != spec => bail!(
                "the files are sealed to different certificates by .kseal.yaml ({why}; {}): \
                 reseal them separately, pass --cert, or use --stale (which follows each \
                 file's rule)",
                rule.describe()
            ),
            Some(_) => {}
            None => found = Some((spec, rule.describe())),
        }
    }
    if let (Some((_, why)), Some(path)) = (&found, &without) {
        bail!(
            "`{path}` has no .kseal.yaml rule naming a certificate, but {why} names one: \
             reseal them separately, pass --cert, or use --stale (which follows each file's \
             rule)"
        );
    }
    if let Some((_, why)) = &found {
        eprintln!("note: resealing to the certificate of {why}");
    }
    Ok(found.map(|(spec, _)| spec))
}

pub(crate) fn cert_for(text: &str, allow_http: bool) -> Result<Certificate> {
    CertRequest {
        specs: vec![crate::keysource::cert::parse_spec(text)?],
        controller: ControllerTarget::default(),
        allow_http,
        ring_anchor: None,
    }
    .load_one()
}
