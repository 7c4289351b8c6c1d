//! `kseal reseal` and `kseal validate`: offline maintenance with local private keys.
//!
//! Both open `spec.encryptedData` item by item with the key ring instead of unsealing whole
//! objects, so a SealedSecret with `spec.template.data` is handled too: its templates only
//! refer to item names, which resealing keeps.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_api::{ScopeTarget, SealedSecret};
use kseal_keys::{Certificate, KeyId, KeyRing, Label, Plaintext, Scope};

use crate::args::{ControllerArgs, ResealArgs, ValidateArgs};
use crate::certs::{CertRequest, Controller, ControllerTarget};
use crate::cmd::unseal::{LoadedRing, load_keys};
use crate::manifest::{Input, SealedFile, mapping_at};
use crate::text::count;

/// The label a SealedSecret's items are sealed with, from its top-level metadata, and the
/// scope and label it stands for (for messages).
fn label_of(sealed: &SealedSecret) -> Result<(Label, ScopeTarget)> {
    let scope = sealed.scope();
    let name = sealed.metadata.name.as_deref().unwrap_or_default();
    let namespace = sealed.metadata.namespace.as_deref().unwrap_or_default();
    if scope == Scope::Strict && name.is_empty() {
        bail!("the SealedSecret has no name");
    }
    if scope != Scope::Cluster && namespace.is_empty() {
        bail!("the SealedSecret has no namespace");
    }
    Ok((
        scope.label(namespace, name),
        ScopeTarget::new(scope, namespace, name),
    ))
}

/// `namespace/name` for messages.
fn object_name(sealed: &SealedSecret) -> String {
    format!(
        "{}/{}",
        sealed.metadata.namespace.as_deref().unwrap_or("-"),
        sealed.metadata.name.as_deref().unwrap_or("-")
    )
}

/// What opening the items of one SealedSecret gave.
pub(crate) struct Opened {
    pub(crate) items: BTreeMap<String, Plaintext>,
    pub(crate) keys: BTreeMap<String, KeyId>,
    pub(crate) failed: Vec<String>,
    /// The scope and label tried.
    pub(crate) tried: ScopeTarget,
}

impl Opened {
    /// "no key opens `a`, `b` (tried strict scope "prod/db")".
    fn failure(&self) -> String {
        format!(
            "no key opens {} (tried {})",
            quoted(&self.failed),
            self.tried
        )
    }
}

pub(crate) fn open_items(sealed: &SealedSecret, ring: &KeyRing) -> Result<Opened> {
    if sealed.spec.data.as_deref().is_some_and(|d| !d.is_empty()) {
        bail!("it uses the deprecated v1 `spec.data` field, which this command does not handle");
    }
    let (label, tried) = label_of(sealed)?;
    let hint = sealed.sealing_key_hint();
    let mut opened = Opened {
        items: BTreeMap::new(),
        keys: BTreeMap::new(),
        failed: Vec::new(),
        tried,
    };
    for (item, value) in &sealed.spec.encrypted_data {
        match ring.open_base64(&label, value, hint.as_ref()) {
            Ok(o) => {
                opened.keys.insert(item.clone(), o.key);
                opened.items.insert(item.clone(), o.plaintext);
            }
            Err(kseal_keys::Error::Open) => opened.failed.push(item.clone()),
            // Structural errors describe public bytes only (base64, length).
            Err(e) => bail!("encryptedData item `{item}` is not a valid sealed value: {e}"),
        }
    }
    Ok(opened)
}

/// Renders `spec.template.data` against the opened items, as the controller will; returns
/// how many templates there are.
fn render_templates(sealed: &SealedSecret, opened: &Opened) -> Result<usize> {
    let Some(templates) = sealed
        .spec
        .template
        .as_ref()
        .and_then(|t| t.data.as_ref())
        .filter(|d| !d.is_empty())
    else {
        return Ok(0);
    };
    // Copies of the plaintext for the renderer, dropped at the end of this function.
    let items = opened
        .items
        .iter()
        .map(|(k, v)| (k.clone(), k8s_openapi::ByteString(v.expose().to_vec())))
        .collect();
    kseal_api::render_template_data(templates, &items)?;
    Ok(templates.len())
}

fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How `validate` (and `check --controller`) checks an object.
pub(crate) enum Checker {
    Keys(KeyRing),
    Controller(Controller),
}

impl Checker {
    /// `Ok(summary)` when every item opens, `Err(reason)` when not; `Err` of the outer
    /// result when the check itself could not run.
    pub(crate) fn check(&self, s: &SealedSecret) -> Result<std::result::Result<String, String>> {
        match self {
            Checker::Keys(ring) => Ok(match open_items(s, ring) {
                Err(e) => Err(format!("{e:#}")),
                Ok(o) if !o.failed.is_empty() => Err(o.failure()),
                Ok(o) => {
                    let mut keys: Vec<&str> = o.keys.values().map(KeyId::as_str).collect();
                    keys.sort_unstable();
                    keys.dedup();
                    let templates = match render_templates(s, &o) {
                        Ok(0) => String::new(),
                        Ok(1) => "; its template renders".to_owned(),
                        Ok(n) => format!("; its {n} templates render"),
                        Err(e) => return Ok(Err(format!("{e:#}"))),
                    };
                    let verb = if o.items.len() == 1 { "opens" } else { "open" };
                    Ok(format!(
                        "{} {verb} with {}{templates}",
                        count(o.items.len(), "item"),
                        keys.join(", ")
                    ))
                }
            }),
            Checker::Controller(controller) => {
                let body = serde_json::to_string(s).context("failed to encode the SealedSecret")?;
                let response = controller.request("POST", "/v1/verify", Some(&body))?;
                // The controller answers in plain text; the API server's proxy in a JSON Status.
                let message = match crate::certs::status_message(&response.body) {
                    m if m.is_empty() => response.body.trim().to_owned(),
                    m => m.trim_start_matches(": ").to_owned(),
                };
                match response.status {
                    200 => Ok(Ok(format!("controller: {message}"))),
                    400 | 409 | 422 => Ok(Err(format!("controller: {message}"))),
                    status => bail!(
                        "the controller `{}` could not verify (HTTP {status}{})",
                        controller.describe(),
                        crate::certs::status_message(&response.body)
                    ),
                }
            }
        }
    }
}

/// What `validate` and `reseal` work with: local private keys or the cluster's controller.
enum Backing {
    Keys(LoadedRing),
    Controller(Controller),
}

fn keys_or_controller(
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

pub(crate) fn validate(args: ValidateArgs) -> Result<()> {
    let checker = match keys_or_controller(args.use_controller, &args.controller, &args.keys)? {
        // The ring tries the sealing key first when the --key files name one; validating seals
        // nothing, so keys that name none (or two) only keep the default order.
        Backing::Keys(loaded) => Checker::Keys(loaded.ring),
        Backing::Controller(controller) => Checker::Controller(controller),
    };
    let mut report = String::new();
    let (mut total, mut bad) = (0usize, 0usize);
    for input in Input::read_all(&args.files.all())? {
        let sealed: Vec<SealedSecret> =
            input.objects("SealedSecret", kseal_api::constants::API_VERSION)?;
        for (i, s) in sealed.iter().enumerate() {
            total += 1;
            let name = object_name(s);
            let place = format!("{} document {}", input.source, i + 1);
            let line = match checker.check(s)? {
                Err(reason) => {
                    bad += 1;
                    format!("FAIL {name} ({place}): {reason}")
                }
                Ok(summary) => format!("ok   {name} ({place}): {summary}"),
            };
            report.push_str(&line);
            report.push('\n');
        }
    }
    crate::output::stdout(&report)?;
    if bad > 0 {
        bail!(
            "{bad} of {} failed to validate",
            count(total, "SealedSecret")
        );
    }
    Ok(())
}

/// The certificate to reseal to: `--cert`, else the sealing key of the --key files (the
/// fleet ring's active key when they mark one, see [`crate::cmd::unseal::sealing_key`]).
fn target_certificate(args: &ResealArgs, loaded: LoadedRing) -> Result<(KeyRing, Certificate)> {
    if let Some(text) = &args.cert {
        let spec = crate::certs::parse_spec(text)?;
        let request = CertRequest {
            specs: vec![spec],
            controller: crate::certs::ControllerTarget::default(),
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
    let cert = crate::certs::check(&cert.to_pem(), &format!("of the sealing key {id}"))?;
    Ok((loaded.ring, cert))
}

/// The certificate the `.kseal.yaml` creation rules give the files (none for standard
/// input, or when no rule names one); files whose rules differ need --cert or --stale.
fn rule_certificate(paths: &[PathBuf]) -> Result<Option<String>> {
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

/// Who re-encrypts.
enum Resealer {
    Local { ring: KeyRing, cert: Certificate },
    Controller(Controller),
}

impl Resealer {
    fn describe(&self) -> String {
        match self {
            Resealer::Local { cert, .. } => format!("for {}", cert.id()),
            Resealer::Controller(c) => format!("by the controller `{}`", c.describe()),
        }
    }

    /// Re-encrypts one SealedSecret document in place.
    fn reseal(&self, doc: &mut crate::yaml::Doc, sealed: &SealedSecret) -> Result<()> {
        match self {
            Resealer::Local { ring, cert } => {
                let opened = open_items(sealed, ring)?;
                if !opened.failed.is_empty() {
                    bail!("{}", opened.failure());
                }
                let (label, _) = label_of(sealed)?;
                let mut resealed = Vec::new();
                for (item, plaintext) in &opened.items {
                    let value =
                        kseal_keys::seal_base64(cert.public_key(), &label, plaintext.expose())?;
                    resealed.push((item.clone(), value));
                }
                let data = mapping_at(doc, &["spec", "encryptedData"])?;
                for (item, value) in resealed {
                    data.insert(item, value.into());
                }
                mapping_at(doc, &["metadata", "annotations"])?
                    .insert(SEALING_KEY_ANNOTATION.into(), cert.id().to_string().into());
            }
            Resealer::Controller(controller) => {
                let body = serde_json::to_string(doc).context("failed to encode the document")?;
                let answer = controller.rotate(&body)?;
                let rotated: crate::yaml::Doc = crate::yaml::from_str(&answer)
                    .context("the controller's answer is not a SealedSecret")?;
                if rotated.get("kind").and_then(|k| k.as_str()) != Some(kseal_api::constants::KIND)
                {
                    bail!("the controller's answer is not a SealedSecret");
                }
                *doc = rotated;
            }
        }
        Ok(())
    }
}

fn reseal_file(input: &Input, resealer: &Resealer) -> Result<(SealedFile, usize)> {
    let mut file = SealedFile::parse(input)?;
    for i in 0..file.values.len() {
        let sealed = &file.sealed[i];
        let what = format!(
            "failed to reseal `{}` (document {} of {})",
            object_name(sealed),
            i + 1,
            input.source
        );
        resealer.reseal(&mut file.values[i], sealed).context(what)?;
    }
    let count = file.values.len();
    Ok((file, count))
}

pub(crate) fn reseal(mut args: ResealArgs) -> Result<()> {
    if args.stale {
        return crate::cmd::reseal_stale::run(&args);
    }
    if !args.use_controller && args.cert.is_none() {
        args.cert = rule_certificate(&args.files.all())?;
    }
    let resealer = match keys_or_controller(args.use_controller, &args.controller, &args.keys)? {
        Backing::Keys(loaded) => {
            let (ring, cert) = target_certificate(&args, loaded)?;
            Resealer::Local { ring, cert }
        }
        Backing::Controller(controller) => Resealer::Controller(controller),
    };
    let paths = args.files.all();
    if args.in_place && (paths.is_empty() || paths.iter().any(|f| f == Path::new("-"))) {
        bail!("--in-place needs FILE arguments (not standard input)");
    }
    let inputs = Input::read_all(&paths)?;
    // Everything is resealed in memory first: one bad object leaves every file untouched.
    let files = inputs
        .iter()
        .map(|input| reseal_file(input, &resealer))
        .collect::<Result<Vec<_>>>()?;
    let mut out = String::new();
    for ((file, changed), path) in files
        .iter()
        .zip(paths.iter().map(Some).chain(std::iter::repeat(None)))
    {
        let text = file.render()?;
        match path {
            Some(path) if args.in_place => {
                crate::manifest::write_atomic(path, text.as_bytes(), false)?;
                eprintln!(
                    "resealed {} in `{}` {}",
                    count(*changed, "SealedSecret"),
                    path.display(),
                    resealer.describe()
                );
            }
            _ => out.push_str(&text),
        }
    }
    crate::output::stdout(&out)
}
