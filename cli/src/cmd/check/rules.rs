//! The rules `kseal check` applies to each SealedSecret, their levels, and the checks:
//! the public tier (scope, RSA block size, sealing-key hint, templates, age) needs only
//! certificates; the private tier opens every item with `--key` files or the controller.

use std::time::{Duration, SystemTime};

use anyhow::Result;
use kseal_api::SealedSecret;
use kseal_api::constants::{
    CLUSTER_WIDE_ANNOTATION, NAMESPACE_WIDE_ANNOTATION, SEALING_KEY_ANNOTATION,
};
use kseal_keys::{KeyId, KeyRing, Scope};

use super::finding::{Finding, Rule};
use super::groups::{Groups, Place};
use super::keys::{RingKey, RingView};
use super::scan::Object;
use crate::opening::{Checker, open_items};
use crate::text::count;

pub(super) fn days(age: Duration) -> String {
    count(age.as_secs() / 86_400, "day")
}

/// The scope findings of one object.
pub(super) fn check_scope(sealed: &SealedSecret, line: usize, out: &mut Vec<Finding>) {
    let mut problem = |message: String| {
        out.push(Finding {
            rule: Rule::Scope,
            line,
            item: None,
            message,
        });
    };
    let annotations = sealed.metadata.annotations.as_ref();
    let value = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    for key in [CLUSTER_WIDE_ANNOTATION, NAMESPACE_WIDE_ANNOTATION] {
        if let Some(v) = value(key)
            && v != "true"
            && v != "false"
        {
            problem(format!(
                "annotation `{key}` is `{v}`: the controller reads only `true`, so it seals and \
                 opens with another scope than the annotation suggests"
            ));
        }
    }
    if value(CLUSTER_WIDE_ANNOTATION) == Some("true")
        && value(NAMESPACE_WIDE_ANNOTATION) == Some("true")
    {
        problem(
            "both the cluster-wide and the namespace-wide annotations are `true`: the controller \
             opens it cluster-wide"
                .to_owned(),
        );
    }
    let scope = sealed.scope();
    let name = sealed.metadata.name.as_deref().unwrap_or_default();
    let namespace = sealed.metadata.namespace.as_deref().unwrap_or_default();
    if scope == Scope::Strict && name.is_empty() {
        problem(
            "a strict-scope SealedSecret needs metadata.name (its items are bound to it)"
                .to_owned(),
        );
    }
    if scope != Scope::Cluster && namespace.is_empty() {
        problem(format!(
            "a {scope} SealedSecret needs metadata.namespace (its items are bound to it)"
        ));
    }
    if let Some(meta) = sealed
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
    {
        if scope != Scope::Cluster
            && let Some(ns) = meta.namespace.as_deref()
            && !ns.is_empty()
            && ns != namespace
        {
            problem(format!(
                "spec.template.metadata.namespace `{ns}` differs from metadata.namespace \
                 `{namespace}`, which the items are bound to"
            ));
        }
        if scope == Scope::Strict
            && let Some(n) = meta.name.as_deref()
            && !n.is_empty()
            && n != name
        {
            problem(format!(
                "spec.template.metadata.name `{n}` differs from metadata.name `{name}`, which \
                 the items are bound to"
            ));
        }
        let template_scope = kseal_api::scope_of(meta);
        let sets_scope = meta.annotations.as_ref().is_some_and(|a| {
            a.contains_key(CLUSTER_WIDE_ANNOTATION) || a.contains_key(NAMESPACE_WIDE_ANNOTATION)
        });
        if sets_scope && template_scope != scope {
            problem(format!(
                "the template's annotations say {template_scope}, the object's {scope}: the \
                 controller binds the items to the object's"
            ));
        }
    }
}

/// Where an object is checked: its file's place (view and rules), and every view of the run
/// (another group's ring that holds the sealing key makes `wrong-ring-for-path`).
#[derive(Clone, Copy)]
pub(super) struct At<'a> {
    pub(super) groups: &'a Groups,
    pub(super) place: &'a Place,
}

impl<'a> At<'a> {
    fn view(&self) -> Option<(usize, &'a RingView)> {
        self.place.view.map(|v| (v, &self.groups.views[v]))
    }

    /// The finding for key `id`, which the path's view does not hold, when another group's
    /// ring does.
    fn wrong_ring(&self, id: &KeyId, line: usize, item: Option<String>) -> Option<Finding> {
        let (index, view) = self.view()?;
        let other = self.groups.holding(index, id).next()?;
        let rule = self.place.rule.as_deref().map_or_else(
            || "no creation rule covers this path, so it is checked against".to_owned(),
            |why| format!("{why} seals this path to"),
        );
        Some(Finding {
            rule: Rule::WrongRing,
            line,
            item,
            message: format!(
                "sealed with key {id} of {}, but {rule} {}: the clusters of the other group \
                 open it and this path's cannot; seal it again to this path's ring",
                other.name, view.name
            ),
        })
    }
}

/// The public-tier findings of one object.
pub(super) fn check_public(object: &mut Object, at: At<'_>, now: SystemTime) {
    let Some(sealed) = object.sealed.as_ref() else {
        return;
    };
    let mut out = Vec::new();
    check_scope(sealed, object.line, &mut out);
    if sealed.scope() == Scope::Cluster
        && let Some(rule) = &at.place.forbid
    {
        out.push(Finding {
            rule: Rule::ClusterWide,
            line: object.line,
            item: None,
            message: format!(
                "cluster-wide scope, which the repository's rules forbid here ({rule})"
            ),
        });
    }
    // A file whose creation rule is refused has no ring to check against: its finding says so.
    let ring = at.view().map(|(_, view)| view);
    let hinted = ring.and_then(|ring| check_hint(sealed, object, ring, at, now, &mut out));
    check_envelopes(sealed, object, ring, hinted, &mut out);
    check_templates(sealed, object, &mut out);
    object.findings.extend(out);
}

/// The `kseal.dev/sealing-key` hint: a key fingerprint the ring holds, and the active one
/// (else every item is stale); returns the hinted key of the ring.
fn check_hint<'r>(
    sealed: &SealedSecret,
    object: &Object,
    ring: &'r RingView,
    at: At<'_>,
    now: SystemTime,
    out: &mut Vec<Finding>,
) -> Option<&'r RingKey> {
    let raw_hint = sealed
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SEALING_KEY_ANNOTATION));
    let mut hinted: Option<&RingKey> = None;
    if let Some(raw) = raw_hint {
        match KeyId::parse(raw) {
            None => out.push(Finding {
                rule: Rule::UnknownKey,
                line: object.line,
                item: None,
                message: format!("annotation `{SEALING_KEY_ANNOTATION}` is not a key fingerprint"),
            }),
            Some(id) => match ring.get(&id) {
                None => {
                    out.push(
                        at.wrong_ring(&id, object.line, None)
                            .unwrap_or_else(|| Finding {
                                rule: Rule::UnknownKey,
                                line: object.line,
                                item: None,
                                message: format!(
                                    "sealed with key {id}, which the ring does not hold (never \
                                 did, or retired it): no controller can open it"
                                ),
                            }),
                    )
                }
                Some(key) => {
                    hinted = Some(key);
                    if ring.active.as_ref().is_some_and(|a| a != &key.id) {
                        let age = now.duration_since(key.since).unwrap_or_default();
                        for (item, line) in &object.item_lines {
                            out.push(Finding {
                                rule: Rule::Stale,
                                line: *line,
                                item: Some(item.clone()),
                                message: format!(
                                    "sealed with key {} ({} old), not the active key {}: \
                                     re-seal it",
                                    key.id,
                                    days(age),
                                    ring.active.as_ref().map_or("-", KeyId::as_str)
                                ),
                            });
                        }
                    }
                }
            },
        }
    }
    hinted
}

/// The items' envelopes: each parses, and its RSA block fits the hinted key (else a key of
/// the ring).
fn check_envelopes(
    sealed: &SealedSecret,
    object: &Object,
    ring: Option<&RingView>,
    hinted: Option<&RingKey>,
    out: &mut Vec<Finding>,
) {
    for (item, value) in &sealed.spec.encrypted_data {
        let line = object.item_lines.get(item).copied().unwrap_or(object.line);
        let mut finding = |rule: Rule, message: String| {
            out.push(Finding {
                rule,
                line,
                item: Some(item.clone()),
                message,
            });
        };
        let bytes = match kseal_keys::envelope::decode_base64(value) {
            Ok(b) => b,
            Err(e) => {
                finding(
                    Rule::Malformed,
                    format!("item `{item}` is not a sealed value: {e}"),
                );
                continue;
            }
        };
        let envelope = match kseal_keys::envelope::Envelope::parse(&bytes) {
            Ok(e) => e,
            Err(e) => {
                finding(
                    Rule::Malformed,
                    format!("item `{item}` is not a sealed value: {e}"),
                );
                continue;
            }
        };
        let len = envelope.rsa_ciphertext().len();
        let Some(ring) = ring else {
            continue;
        };
        match hinted {
            Some(key) if key.block_len != len => finding(
                Rule::RsaLength,
                format!(
                    "item `{item}` has a {len}-byte RSA block, but its hinted key {} makes \
                     {}-byte blocks",
                    key.id, key.block_len
                ),
            ),
            _ if !ring.keys.iter().any(|k| k.block_len == len) => finding(
                Rule::RsaLength,
                format!("item `{item}` has a {len}-byte RSA block, which no key of the ring makes"),
            ),
            _ => {}
        }
    }
}

/// Templates, rendered against placeholders (their syntax and the items they name).
fn check_templates(sealed: &SealedSecret, object: &Object, out: &mut Vec<Finding>) {
    if let Some(templates) = sealed
        .spec
        .template
        .as_ref()
        .and_then(|t| t.data.as_ref())
        .filter(|d| !d.is_empty())
    {
        let items = sealed
            .spec
            .encrypted_data
            .keys()
            .map(|k| (k.clone(), k8s_openapi::ByteString(b"placeholder".to_vec())))
            .collect();
        if let Err(e) = kseal_api::render_template_data(templates, &items) {
            out.push(Finding {
                rule: Rule::Template,
                line: object.line,
                item: None,
                message: format!("spec.template.data does not render: {e}"),
            });
        }
    }
}

pub(super) fn check_private_keys(object: &mut Object, ring: &KeyRing, at: At<'_>) {
    let Some(sealed) = object.sealed.as_ref() else {
        return;
    };
    let opened = match open_items(sealed, ring) {
        Ok(o) => o,
        Err(e) => {
            object.findings.push(Finding {
                rule: Rule::DoesNotOpen,
                line: object.line,
                item: None,
                message: format!("cannot be opened: {e:#}"),
            });
            return;
        }
    };
    for item in &opened.failed {
        object.findings.push(Finding {
            rule: Rule::DoesNotOpen,
            line: object.item_lines.get(item).copied().unwrap_or(object.line),
            item: Some(item.clone()),
            message: format!(
                "item `{item}` does not open with any --key (tried {})",
                opened.tried
            ),
        });
    }
    // Sealed to another group's ring, where the hint did not say so already.
    let wrong = object.findings.iter().any(|f| f.rule == Rule::WrongRing);
    if let Some((_, view)) = at.view()
        && !wrong
    {
        for (item, key) in &opened.keys {
            let line = object.item_lines.get(item).copied().unwrap_or(object.line);
            if view.get(key).is_none()
                && let Some(finding) = at.wrong_ring(key, line, Some(item.clone()))
            {
                object.findings.push(finding);
            }
        }
    }
    // Stale by the key that really opened it, where the hint did not say so already (nor
    // that the key is another group's: re-sealing to this ring's active key is the same fix).
    if object.findings.iter().any(|f| f.rule == Rule::WrongRing) {
        return;
    }
    let warned: Vec<String> = object
        .findings
        .iter()
        .filter(|f| f.rule == Rule::Stale)
        .filter_map(|f| f.item.clone())
        .collect();
    if let Some(active) = at.view().and_then(|(_, view)| view.active.as_ref()) {
        for (item, key) in &opened.keys {
            if key != active && !warned.contains(item) {
                object.findings.push(Finding {
                    rule: Rule::Stale,
                    line: object.item_lines.get(item).copied().unwrap_or(object.line),
                    item: Some(item.clone()),
                    message: format!(
                        "opens with key {key}, not the active key {active}: re-seal it"
                    ),
                });
            }
        }
    }
    // `opened` (and its plaintext, zeroized) is dropped here.
}

pub(super) fn check_private_controller(object: &mut Object, checker: &Checker) -> Result<()> {
    let Some(sealed) = object.sealed.as_ref() else {
        return Ok(());
    };
    if let Err(reason) = checker.check(sealed)? {
        object.findings.push(Finding {
            rule: Rule::DoesNotOpen,
            line: object.line,
            item: None,
            message: reason,
        });
    }
    Ok(())
}
