//! Template binding: an opt-in seal whose OAEP label also commits to `spec.template`, so that
//! any edit of the template makes the object refuse to open (issue 35).
//!
//! `spec.template` is not covered by Bitnami's seal: whoever may edit a SealedSecret (a
//! repository contributor, anyone with `update` on SealedSecrets) can write a
//! `spec.template.data` template whose outcome depends on the values
//! (`{{ if eq .password "guess" }}…`) and watch whether the Secret appears. A **bound**
//! object's item `NAME` (its key in `spec.encryptedData`) is sealed with the label
//!
//! ```text
//! <Bitnami label> || "\0kseal-template-v1:" || hex(SHA-256(canonical JSON of spec.template))
//!                 || "\0" || NAME
//! ```
//!
//! where the Bitnami label is `namespace/name` (strict), `namespace` (namespace-wide) or
//! empty (cluster-wide), and the hex digest is 64 lowercase characters. The top-level
//! annotation [`TEMPLATE_BINDING_ANNOTATION`]`: v1` tells the opener which label to use; it
//! is only a hint: removing it, adding it or changing the template gives another label, so
//! every item fails to open, the template is never rendered and the failure is the same
//! whatever the edit was. Bitnami's labels never hold a NUL byte (names cannot), so a bound
//! label never equals an unbound one.
//!
//! The item name is bound too: moving a ciphertext to another item of a bound object (say
//! `token`'s value into `.dockerconfigjson`, to have the API server's validation of that key
//! describe the value) changes its label, so it fails to open with the same fixed failure.
//! The base label and the digest have a fixed length for one object, so the name is simply
//! the rest of the label: no two names give the same label. Unbound objects keep Bitnami's
//! one label for every item (wire compatibility), and so do not get this protection.
//! [`ItemsLabel`] gives each caller the label of one item.
//!
//! The deprecated `spec.data` (one sealed Secret, no item names) of a bound object would use
//! the label without the `"\0" || NAME` tail ([`ItemsLabel::whole`]); kseal never seals one.
//!
//! # Canonical form
//!
//! [`canonical_template`] is defined on the template **as kseal reads it** (the typed
//! [`SecretTemplateSpec`]), so it survives any round trip that keeps what the controller
//! uses (kube-apiserver, `kubectl apply`, YAML ↔ JSON, key order):
//!
//! - the template is deserialized into [`SecretTemplateSpec`]: fields kseal does not know
//!   (pruned by the apiserver anyway, or kept in `metadata`'s preserved unknown fields) are
//!   ignored, and an absent template, `template: null` and `template: {}` are the same;
//! - it is serialized to JSON and, recursively: object members whose value is `null`, an
//!   empty object or an empty array are dropped (`labels: {}` ≡ no labels), **except** the
//!   members of `data`, where `null` means "remove this item" and is kept;
//! - written with object keys sorted by their UTF-8 bytes, no whitespace, strings escaped as
//!   `serde_json` escapes them, numbers as integers.
//!
//! Values are compared exactly: `type: Opaque` and no `type`, or `immutable: false` and no
//! `immutable`, are different templates (the apiserver defaults neither in a SealedSecret).
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kseal_keys::{Label, Scope};
use serde_json::Value;
use sha2::Digest as _;

use crate::constants::{TEMPLATE_BINDING_ANNOTATION, TEMPLATE_BINDING_V1};
use crate::{Error, Result, ScopeTarget, SealedSecret, SecretTemplateSpec};

/// The domain separator between the Bitnami label and the template digest (version 1).
pub const TEMPLATE_BINDING_SEPARATOR: &[u8] = b"\0kseal-template-v1:";

/// The canonical JSON bytes of a template (see the [module docs](self)).
pub fn canonical_template(template: Option<&SecretTemplateSpec>) -> Vec<u8> {
    let default = SecretTemplateSpec::default();
    // Serializing a struct of strings, maps and integers cannot fail; fall back to `{}`.
    let value = serde_json::to_value(template.unwrap_or(&default)).unwrap_or(Value::Null);
    let mut out = String::new();
    match prune_template(value) {
        Some(v) => write_canonical(&v, &mut out),
        None => out.push_str("{}"),
    }
    out.into_bytes()
}

/// SHA-256 of [`canonical_template`].
pub fn template_digest(template: Option<&SecretTemplateSpec>) -> [u8; 32] {
    sha2::Sha256::digest(canonical_template(template)).into()
}

/// The separator between the bound label and the item name (version 1).
pub const ITEM_NAME_SEPARATOR: &[u8] = b"\0";

/// The labels of one SealedSecret's values: Bitnami's one label for every item of an unbound
/// object; for a template-bound object, one label per item name ([module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemsLabel {
    /// The Bitnami label, or `Bitnami label || "\0kseal-template-v1:" || hex(digest)` when
    /// the object is template-bound.
    base: Label,
    bound: bool,
}

impl ItemsLabel {
    /// Bitnami's label, the same for every item (an unbound object).
    pub fn unbound(label: Label) -> Self {
        Self {
            base: label,
            bound: false,
        }
    }

    /// `label` bound to `template`: each item gets its own label ([`ItemsLabel::item`]).
    pub fn bound(label: &Label, template: Option<&SecretTemplateSpec>) -> Self {
        Self {
            base: bind_label(label, template),
            bound: true,
        }
    }

    /// Whether the labels commit to the template and the item names.
    pub fn is_bound(&self) -> bool {
        self.bound
    }

    /// The label of the item `name` (its key in `spec.encryptedData`), to open it and to seal
    /// a value for it: the base label when unbound, the base label `|| "\0" || name` when
    /// bound.
    pub fn item(&self, name: &str) -> Label {
        if !self.bound {
            return self.base.clone();
        }
        let mut bytes =
            Vec::with_capacity(self.base.as_bytes().len() + ITEM_NAME_SEPARATOR.len() + name.len());
        bytes.extend_from_slice(self.base.as_bytes());
        bytes.extend_from_slice(ITEM_NAME_SEPARATOR);
        bytes.extend_from_slice(name.as_bytes());
        Label::from_bytes(bytes)
    }

    /// The label of a value that belongs to no item: the deprecated `spec.data` (one sealed
    /// Secret). The base label, bound to the template when the object is bound.
    pub fn whole(&self) -> &Label {
        &self.base
    }
}

/// `label` bound to `template`: `label || "\0kseal-template-v1:" || hex(digest)`, the base
/// of a bound object's item labels ([`ItemsLabel::item`] appends the item name).
pub fn bind_label(label: &Label, template: Option<&SecretTemplateSpec>) -> Label {
    let mut bytes = label.as_bytes().to_vec();
    bytes.extend_from_slice(TEMPLATE_BINDING_SEPARATOR);
    let mut hex = String::with_capacity(64);
    for b in template_digest(template) {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{b:02x}");
    }
    bytes.extend_from_slice(hex.as_bytes());
    Label::from_bytes(bytes)
}

/// Whether top-level metadata marks the object as template-bound: the annotation
/// [`TEMPLATE_BINDING_ANNOTATION`] with value [`TEMPLATE_BINDING_V1`]. Any other value is
/// [`Error::UnknownTemplateBinding`] (a later version this build cannot open).
pub fn template_binding(meta: &ObjectMeta) -> Result<bool> {
    match meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_BINDING_ANNOTATION))
    {
        None => Ok(false),
        Some(v) if v == TEMPLATE_BINDING_V1 => Ok(true),
        Some(v) => Err(Error::UnknownTemplateBinding { value: v.clone() }),
    }
}

/// The labels `sealed`'s values are sealed with, as the object `namespace/name` (its scope
/// from its top-level annotations, bound to `spec.template` and each item's name when it is
/// marked bound), and the target it stands for in messages. Open and re-seal the item `key`
/// with `.item(key)`.
pub fn items_label(
    sealed: &SealedSecret,
    namespace: &str,
    name: &str,
) -> Result<(ItemsLabel, ScopeTarget)> {
    let scope: Scope = sealed.scope();
    let label = scope.label(namespace, name);
    let mut tried = ScopeTarget::new(scope, namespace, name);
    if template_binding(&sealed.metadata)? {
        tried.template_bound = true;
        Ok((
            ItemsLabel::bound(&label, sealed.spec.template.as_ref()),
            tried,
        ))
    } else {
        Ok((ItemsLabel::unbound(label), tried))
    }
}

/// The template object with [`prune`] applied to each member, except `data`, whose `null`
/// entries are kept ([`prune_data`]).
fn prune_template(value: Value) -> Option<Value> {
    let Value::Object(map) = value else {
        return prune(value);
    };
    let pruned: serde_json::Map<String, Value> = map
        .into_iter()
        .filter_map(|(k, v)| {
            let v = if k == "data" { prune_data(v) } else { prune(v) };
            v.map(|v| (k, v))
        })
        .collect();
    (!pruned.is_empty()).then_some(Value::Object(pruned))
}

/// Drops `null`, `{}` and `[]` (recursively, members and array elements); `None` when the
/// value itself is dropped.
fn prune(value: Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Object(map) => {
            let pruned: serde_json::Map<String, Value> = map
                .into_iter()
                .filter_map(|(k, v)| prune(v).map(|v| (k, v)))
                .collect();
            (!pruned.is_empty()).then_some(Value::Object(pruned))
        }
        Value::Array(items) => {
            let items: Vec<Value> = items.into_iter().filter_map(prune).collect();
            (!items.is_empty()).then_some(Value::Array(items))
        }
        other => Some(other),
    }
}

/// `spec.template.data`: a map of strings and `null`s, kept whole unless empty.
fn prune_data(value: Value) -> Option<Value> {
    match value {
        Value::Object(map) if map.is_empty() => None,
        Value::Object(map) => Some(Value::Object(map)),
        other => prune(other),
    }
}

/// Writes `value` as JSON with object keys sorted by their bytes (independent of whether
/// `serde_json` keeps insertion order).
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn template(json: &str) -> SecretTemplateSpec {
        serde_json::from_str(json).unwrap()
    }

    fn canonical(json: &str) -> String {
        String::from_utf8(canonical_template(Some(&template(json)))).unwrap()
    }

    #[test]
    fn the_canonical_form_sorts_keys_and_drops_empty_members() {
        let a = canonical(
            r#"{"type":"Opaque","metadata":{"name":"db","labels":{"b":"2","a":"1"},
                "annotations":{},"finalizers":[],"creationTimestamp":null},
                "immutable":null,"data":{"dsn":"{{ .user }}","drop":null}}"#,
        );
        let b = canonical(
            r#"{"data":{"drop":null,"dsn":"{{ .user }}"},
                "metadata":{"labels":{"a":"1","b":"2"},"name":"db"},"type":"Opaque",
                "unknownField":"pruned by the apiserver"}"#,
        );
        assert_eq!(a, b);
        assert_eq!(
            a,
            r#"{"data":{"drop":null,"dsn":"{{ .user }}"},"metadata":{"labels":{"a":"1","b":"2"},"name":"db"},"type":"Opaque"}"#
        );
    }

    #[test]
    fn no_template_null_and_empty_template_are_the_same() {
        let empty = canonical_template(None);
        assert_eq!(empty, b"{}");
        assert_eq!(canonical_template(Some(&template("{}"))), empty);
        assert_eq!(
            canonical_template(Some(&template(r#"{"metadata":{},"data":{}}"#))),
            empty
        );
    }

    #[test]
    fn a_null_template_entry_is_not_an_absent_one() {
        // `drop: null` removes an item; absent keeps it: different templates.
        assert_ne!(
            canonical(r#"{"data":{"drop":null}}"#),
            canonical(r#"{"data":{}}"#)
        );
    }

    #[test]
    fn every_edit_changes_the_bound_label() {
        let base = Scope::Strict.label("prod", "db");
        let templates = [
            r#"{}"#,
            r#"{"type":"Opaque"}"#,
            r#"{"immutable":false}"#,
            r#"{"metadata":{"labels":{"a":"1"}}}"#,
            r#"{"metadata":{"labels":{"a":"2"}}}"#,
            r#"{"data":{"x":"{{ .password }}"}}"#,
            r#"{"data":{"x":"{{ if eq .password \"guess\" }}y{{ end }}"}}"#,
            r#"{"data":{"x":null}}"#,
        ];
        let labels: std::collections::BTreeSet<Vec<u8>> = templates
            .iter()
            .map(|t| bind_label(&base, Some(&template(t))).as_bytes().to_vec())
            .collect();
        assert_eq!(labels.len(), templates.len());
        for label in &labels {
            assert!(label.starts_with(b"prod/db\0kseal-template-v1:"));
            assert_eq!(label.len(), b"prod/db\0kseal-template-v1:".len() + 64);
            assert_ne!(label.as_slice(), base.as_bytes());
        }
    }

    #[test]
    fn the_digest_is_pinned() {
        // Freezes the canonical form: a change here breaks every bound object. The input is
        // written out of order, with members the canonical form drops.
        let t = template(
            r#"{"type":"Opaque","immutable":null,"metadata":{"namespace":"prod","labels":{},"name":"db"}}"#,
        );
        assert_eq!(
            canonical_template(Some(&t)),
            br#"{"metadata":{"name":"db","namespace":"prod"},"type":"Opaque"}"#
        );
        let hex: String = template_digest(Some(&t))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "db9cdeb839f1f02e49f1feec660474833d4596506fa8983c638f7ad6fd35495c"
        );
        let label = bind_label(&Scope::Namespace.label("prod", "db"), Some(&t));
        assert_eq!(
            label.as_bytes(),
            b"prod\0kseal-template-v1:db9cdeb839f1f02e49f1feec660474833d4596506fa8983c638f7ad6fd35495c"
        );
        let items = ItemsLabel::bound(&Scope::Namespace.label("prod", "db"), Some(&t));
        assert_eq!(
            items.item("password").as_bytes(),
            b"prod\0kseal-template-v1:db9cdeb839f1f02e49f1feec660474833d4596506fa8983c638f7ad6fd35495c\0password"
        );
    }

    #[test]
    fn bound_items_have_their_own_label_and_unbound_ones_share_bitnamis() {
        let t = template(r#"{"type":"kubernetes.io/dockerconfigjson"}"#);
        let base = Scope::Strict.label("prod", "db");
        let unbound = ItemsLabel::unbound(base.clone());
        assert!(!unbound.is_bound());
        assert_eq!(unbound.item("token"), base);
        assert_eq!(unbound.item(".dockerconfigjson"), base);
        assert_eq!(unbound.whole(), &base);

        let bound = ItemsLabel::bound(&base, Some(&t));
        assert!(bound.is_bound());
        assert_eq!(bound.whole(), &bind_label(&base, Some(&t)));
        let names = ["token", ".dockerconfigjson", "", "a", "a\0b", "b"];
        let labels: std::collections::BTreeSet<Vec<u8>> = names
            .iter()
            .map(|n| bound.item(n).as_bytes().to_vec())
            .collect();
        assert_eq!(labels.len(), names.len());
        for (name, label) in names.iter().map(|n| (n, bound.item(n))) {
            let mut expected = bind_label(&base, Some(&t)).as_bytes().to_vec();
            expected.push(0);
            expected.extend_from_slice(name.as_bytes());
            assert_eq!(label.as_bytes(), expected.as_slice());
            assert_ne!(label.as_bytes(), bound.whole().as_bytes());
        }
    }

    #[test]
    fn only_v1_marks_an_object_bound() {
        let meta = |v: Option<&str>| ObjectMeta {
            annotations: v
                .map(|v| BTreeMap::from([(TEMPLATE_BINDING_ANNOTATION.into(), v.into())])),
            ..ObjectMeta::default()
        };
        assert!(!template_binding(&meta(None)).unwrap());
        assert!(template_binding(&meta(Some("v1"))).unwrap());
        let err = template_binding(&meta(Some("v2"))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown template binding `v2` in annotation kseal.dev/template-binding: this build opens only `v1`"
        );
    }
}
