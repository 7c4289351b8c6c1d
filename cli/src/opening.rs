//! Opening SealedSecrets with a key ring: unsealing whole objects ([`unseal_input`]),
//! opening `spec.encryptedData` item by item ([`open_items`], which also handles objects with
//! `spec.template.data`: templates only refer to item names), and checking that every item
//! opens, with local keys or through the controller ([`Checker`]).

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use kseal_api::{ItemsLabel, ScopeTarget, SealedSecret};
use kseal_keys::{KeyId, KeyRing, Plaintext, Scope};

use crate::args::Format;
use crate::controller::Controller;
use crate::manifest::{Input, render};
use crate::text::count;

/// Unseals every SealedSecret of `input` with `ring` and renders the Secrets.
pub(crate) fn unseal_input(input: &Input, ring: &KeyRing, format: Format) -> Result<String> {
    let sealed: Vec<SealedSecret> = input.objects("SealedSecret", "bitnami.com/v1alpha1")?;
    let secrets = sealed
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let name = s.metadata.name.as_deref().unwrap_or("<unnamed>");
            kseal_api::unseal(s, ring).with_context(|| {
                format!(
                    "failed to unseal `{name}` (document {} of {})",
                    i + 1,
                    input.source
                )
            })
        })
        .collect::<Result<Vec<Secret>>>()?;
    render(&secrets, format)
}

/// The labels a SealedSecret's items are sealed with (item `k`: `.item(k)`), from its
/// top-level metadata, and the scope and label it stands for (for messages).
pub(crate) fn label_of(sealed: &SealedSecret) -> Result<(ItemsLabel, ScopeTarget)> {
    let scope = sealed.scope();
    let name = sealed.metadata.name.as_deref().unwrap_or_default();
    let namespace = sealed.metadata.namespace.as_deref().unwrap_or_default();
    if scope == Scope::Strict && name.is_empty() {
        bail!("the SealedSecret has no name");
    }
    if scope != Scope::Cluster && namespace.is_empty() {
        bail!("the SealedSecret has no namespace");
    }
    // Bound to `spec.template` (digested, not rendered) and to each item's name when the
    // object is template-bound.
    Ok(kseal_api::items_label(sealed, namespace, name)?)
}

/// `namespace/name` for messages.
pub(crate) fn object_name(sealed: &SealedSecret) -> String {
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
    /// "no key opens `a`, `b` (tried strict scope "prod/db")", after
    /// [`kseal_api::TEMPLATE_BINDING_MISMATCH`] for a template-bound object.
    pub(crate) fn failure(&self) -> String {
        // A bound object's template was maybe edited: the same words, whatever it says.
        let binding = if self.tried.template_bound {
            format!("{}, or ", kseal_api::TEMPLATE_BINDING_MISMATCH)
        } else {
            String::new()
        };
        format!(
            "{binding}no key opens {} (tried {})",
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
        match ring.open_base64(&label.item(item), value, hint.as_ref()) {
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
    match kseal_api::render_template_data(templates, &items) {
        // Which template failed, where and how can depend on the values; this output may be
        // read by whoever wrote the template (a pull request's CI log), as the controller's
        // status is: it says only that a template failed.
        Err(e) if e.depends_on_values() => bail!("{}", kseal_api::TEMPLATE_FAILED),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(templates.len()),
    }
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
                let message = match crate::controller::status_message(&response.body) {
                    m if m.is_empty() => response.body.trim().to_owned(),
                    m => m.trim_start_matches(": ").to_owned(),
                };
                match response.status {
                    200 => Ok(Ok(format!("controller: {message}"))),
                    400 | 409 | 422 => Ok(Err(format!("controller: {message}"))),
                    status => bail!(
                        "the controller `{}` could not verify (HTTP {status}{})",
                        controller.describe(),
                        crate::controller::status_message(&response.body)
                    ),
                }
            }
        }
    }
}
