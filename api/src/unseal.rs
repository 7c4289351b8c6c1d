//! SealedSecret → Secret, as Bitnami's controller does it.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kseal_keys::envelope::{self, Envelope};
use kseal_keys::{KeyId, KeyRing, Label, OpenOrder, OpenStats, Plaintext, Scope};

use crate::constants::{API_VERSION, KIND, SKIP_SET_OWNER_REFERENCES_ANNOTATION, TRUE};
use crate::render::render_template_data;
use crate::seal::strip_server_fields;
use crate::{Error, ItemsLabel, Result, ScopeTarget, SealedSecret};

/// How to unseal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsealOptions {
    /// Accept the deprecated v1 format (`spec.data`: a whole Secret sealed as one value).
    /// Bitnami's `--accept-deprecated-v1-data` defaults to true, and so does this.
    pub accept_deprecated_v1_data: bool,
    /// Key to try first for particular items (e.g. the key that opened them last time);
    /// wins over every other hint.
    pub item_hints: BTreeMap<String, KeyId>,
    /// Key to try first for every item without an item hint.
    pub object_hint: Option<KeyId>,
    /// Without an item or object hint, try the key named by the top-level
    /// `kseal.dev/sealing-key` annotation first (default true). Hints only order the
    /// attempts; a wrong hint costs at most one extra RSA operation per item.
    pub use_annotation_hint: bool,
    /// Keys to try after an item's hint (if any) and before the ring's own order, first
    /// one first: e.g. the keys that opened unhinted values of the same object or namespace
    /// lately. Within one SealedSecret the key that opened an item is tried before these
    /// for the items after it (their items are almost always sealed by one key). Only
    /// orders the attempts, like the hints: the result never depends on it.
    pub preferred_keys: Vec<KeyId>,
    /// Guesses from outside the object (the controller's keys fitting above its
    /// namespace's largest block), tried after the first [`UnsealOptions::guesses_at`]
    /// preferred keys and before the others, until the object's first item opens; from
    /// then on the order is the preferred keys' alone (the key that opened it first). So
    /// together they cost at most one RSA operation each per unseal, however many keys the
    /// object's items were sealed with, and a guess that is also a preferred key keeps its
    /// early place until then.
    pub guesses: Vec<KeyId>,
    /// How many of the preferred keys come before the guesses (e.g. 1: the key that last
    /// opened this very object).
    pub guesses_at: usize,
    /// Render `spec.template.data` (default true, as Bitnami's controller does). Turn it
    /// off where the template is attacker-controlled and rendering would leak anything,
    /// e.g. the controller's verify and rotate endpoints; `template.data` is then ignored.
    pub render_template_data: bool,
}

impl Default for UnsealOptions {
    fn default() -> Self {
        Self {
            accept_deprecated_v1_data: true,
            item_hints: BTreeMap::new(),
            object_hint: None,
            use_annotation_hint: true,
            preferred_keys: Vec::new(),
            guesses: Vec::new(),
            guesses_at: 0,
            render_template_data: true,
        }
    }
}

impl UnsealOptions {
    /// The keys tried first for an object's first item, in order: the first
    /// [`UnsealOptions::guesses_at`] preferred keys, the [`UnsealOptions::guesses`], then
    /// the other preferred keys, each once (the preferred keys alone when there is no guess).
    /// Once an item opens, the preferred keys alone order the attempts.
    pub fn first_order(&self) -> Vec<KeyId> {
        if self.guesses.is_empty() {
            return self.preferred_keys.clone();
        }
        let (before, after) = self
            .preferred_keys
            .split_at(self.guesses_at.min(self.preferred_keys.len()));
        let mut order: Vec<KeyId> = Vec::with_capacity(before.len() + self.guesses.len());
        for key in before.iter().chain(&self.guesses).chain(after) {
            if !order.contains(key) {
                order.push(key.clone());
            }
        }
        order
    }
}

/// The outcome of [`unseal_with`].
///
/// `Debug` shows the Secret's identity and item keys only, never its data.
pub struct Unsealed {
    /// The Secret to create or update.
    ///
    /// Hand-over note: `k8s_openapi::ByteString` does not zeroize. The plaintext stays in
    /// zeroizing [`Plaintext`] buffers until every item has opened, then each buffer is
    /// moved (not copied) into the Secret; from there on the caller owns its lifetime.
    pub secret: Secret,
    /// RSA private-key operations spent in total (for metrics).
    pub rsa_operations: u64,
    /// For each `encryptedData` item, the key that opened it (worth caching as the next
    /// [`UnsealOptions::item_hints`]).
    pub keys: BTreeMap<String, KeyId>,
    /// The key that opened the deprecated `spec.data`, when that format was used.
    pub deprecated_data_key: Option<KeyId>,
}

impl fmt::Debug for Unsealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let meta = &self.secret.metadata;
        let items: Vec<&String> = self.secret.data.iter().flat_map(|d| d.keys()).collect();
        f.debug_struct("Unsealed")
            .field("namespace", &meta.namespace)
            .field("name", &meta.name)
            .field("items", &items)
            .field("rsa_operations", &self.rsa_operations)
            .field("keys", &self.keys)
            .field("deprecated_data_key", &self.deprecated_data_key)
            .finish()
    }
}

/// Unseals with the default [`UnsealOptions`] and returns the Secret.
pub fn unseal(sealed: &SealedSecret, ring: &KeyRing) -> Result<Secret> {
    unseal_with(sealed, ring, &UnsealOptions::default()).map(|u| u.secret)
}

/// Unseals `sealed` with `ring` (reference §1.4, §1.6, §3.5).
///
/// - Scope, name and namespace come from the SealedSecret's **top-level** metadata, never
///   from the template, so a renamed or moved strict object (or a moved namespace-wide one)
///   fails to open, and a template cannot widen the scope.
/// - The Secret's metadata is a copy of `spec.template.metadata` with the name and namespace
///   forced to the SealedSecret's, server-populated fields removed, and the owner references
///   replaced by one controller reference to the SealedSecret, unless the template carries
///   `sealedsecrets.bitnami.com/skip-set-owner-references: "true"`. A SealedSecret without
///   `metadata.uid` (not read from a cluster, e.g. offline recovery) gets no owner reference.
/// - `type` and `immutable` come from the template; `data` holds every decrypted item.
/// - The deprecated `spec.data` (a whole Secret sealed as one JSON value) is accepted when
///   [`UnsealOptions::accept_deprecated_v1_data`]; the template is then not used (as in
///   Bitnami), only the name, namespace and owner reference are forced.
/// - `spec.template.data` is rendered over the decrypted items (see [`crate::template`]):
///   each rendered key replaces the item of that name, a `null` entry removes it. Every
///   template is tried and all failures are reported together in [`Error::TemplateData`].
///   [`UnsealOptions::render_template_data`] turns this off.
///
/// - A SealedSecret annotated `kseal.dev/template-binding: v1` is opened with the label bound
///   to its current `spec.template` and to each item's name ([`crate::binding`]): when the
///   template (or the annotation) changed since sealing, or a value was moved to another
///   item, the items fail and the error is
///   [`Error::TemplateBinding`], the same whatever the template says; nothing is rendered.
///
/// Every item is tried; all that fail are named in one [`Error::Decrypt`].
pub fn unseal_with(
    sealed: &SealedSecret,
    ring: &KeyRing,
    options: &UnsealOptions,
) -> Result<Unsealed> {
    unseal_counted(sealed, ring, options, &mut OpenStats::default())
}

/// [`unseal_with`], adding the RSA operations spent to `stats` also when unsealing fails.
pub fn unseal_counted(
    sealed: &SealedSecret,
    ring: &KeyRing,
    options: &UnsealOptions,
    stats: &mut OpenStats,
) -> Result<Unsealed> {
    let meta = &sealed.metadata;
    let name = meta
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(Error::MissingName)?;
    let scope = sealed.scope();
    let namespace = meta.namespace.as_deref().filter(|n| !n.is_empty());
    if namespace.is_none() && scope != Scope::Cluster {
        return Err(Error::MissingNamespace {
            name: name.to_owned(),
        });
    }
    // Scope, name and namespace from the top-level metadata; bound to `spec.template` when
    // the object says so. A bound object whose template changed fails to open every item
    // here, before any template is rendered.
    let (label, tried) = crate::binding::items_label(sealed, namespace.unwrap_or_default(), name)?;

    let spec = &sealed.spec;
    let template = spec.template.as_ref();
    let deprecated = spec.data.as_deref().filter(|d| !d.is_empty());
    if deprecated.is_some() {
        if !spec.encrypted_data.is_empty() {
            return Err(Error::BothDataFields);
        }
        if !options.accept_deprecated_v1_data {
            return Err(Error::DeprecatedDataRejected);
        }
    }

    let annotation_hint = options
        .use_annotation_hint
        .then(|| sealed.sealing_key_hint())
        .flatten();
    let object_hint = options.object_hint.as_ref().or(annotation_hint.as_ref());
    let skip_owner = template
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(SKIP_SET_OWNER_REFERENCES_ANNOTATION))
        .is_some_and(|v| v == TRUE);

    let start = stats.rsa_operations;
    let mut unsealed = if let Some(blob) = deprecated {
        let order = OpenOrder::new()
            .hint(object_hint)
            .prefer(&options.preferred_keys);
        let (secret, key) = open_deprecated(blob, (label.whole(), &tried), ring, &order, stats)?;
        Unsealed {
            secret,
            rsa_operations: 0,
            keys: BTreeMap::new(),
            deprecated_data_key: Some(key),
        }
    } else {
        let (mut data, keys) =
            open_items(sealed, (&label, &tried), ring, options, object_hint, stats)?;
        if let Some(templates) = template
            .and_then(|t| t.data.as_ref())
            .filter(|_| options.render_template_data)
        {
            for (key, rendered) in render_template_data(templates, &data)? {
                match rendered {
                    Some(bytes) => data.insert(key, ByteString(bytes)),
                    None => data.remove(&key),
                };
            }
        }
        let template_meta = template
            .and_then(|t| t.metadata.clone())
            .unwrap_or_default();
        Unsealed {
            secret: Secret {
                metadata: template_meta,
                type_: template.and_then(|t| t.type_.clone()),
                immutable: template.and_then(|t| t.immutable),
                data: Some(data),
                string_data: None,
            },
            rsa_operations: 0,
            keys,
            deprecated_data_key: None,
        }
    };
    unsealed.rsa_operations = stats.rsa_operations - start;

    let secret_meta = &mut unsealed.secret.metadata;
    strip_server_fields(secret_meta);
    secret_meta.name = Some(name.to_owned());
    secret_meta.namespace = namespace.map(str::to_owned);
    secret_meta.owner_references = owner_reference(meta, skip_owner).map(|r| vec![r]);
    Ok(unsealed)
}

/// The controller reference Bitnami sets: no `blockOwnerDeletion`.
fn owner_reference(meta: &ObjectMeta, skip: bool) -> Option<OwnerReference> {
    if skip {
        return None;
    }
    let uid = meta.uid.as_deref().filter(|u| !u.is_empty())?;
    Some(OwnerReference {
        api_version: API_VERSION.to_owned(),
        kind: KIND.to_owned(),
        name: meta.name.clone().unwrap_or_default(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    })
}

/// Decodes standard base64 and checks the envelope's lengths (public bytes only).
fn decode_envelope(text: &str) -> kseal_keys::Result<Vec<u8>> {
    let bytes = envelope::decode_base64(text)?;
    Envelope::parse(&bytes)?;
    Ok(bytes)
}

fn open_items(
    sealed: &SealedSecret,
    (label, tried): (&ItemsLabel, &ScopeTarget),
    ring: &KeyRing,
    options: &UnsealOptions,
    object_hint: Option<&KeyId>,
    stats: &mut OpenStats,
) -> Result<(BTreeMap<String, ByteString>, BTreeMap<String, KeyId>)> {
    let items = &sealed.spec.encrypted_data;
    // Structural checks first, on public bytes only, before any RSA operation.
    let mut envelopes = Vec::with_capacity(items.len());
    for (item, text) in items {
        let bytes = decode_envelope(text).map_err(|source| Error::MalformedItem {
            item: item.clone(),
            source,
        })?;
        envelopes.push((item, bytes));
    }
    if !envelopes.is_empty() && ring.is_empty() {
        return Err(Error::NoKeys);
    }

    let mut opened: Vec<(&String, Plaintext)> = Vec::with_capacity(envelopes.len());
    let mut keys = BTreeMap::new();
    let mut failed = Vec::new();
    let mut failure = None;
    // The caller's preferences, with the key that opened the latest item of this object
    // moved to the front: one object's items are almost always sealed by one key, so an
    // unhinted object costs its trial decryptions once, not once per item.
    // Until the first item opens, the guesses stand after the first `guesses_at`
    // preferences; from then on the order is the caller's preferences alone.
    let mut guessing = !options.guesses.is_empty();
    let mut prefer = options.first_order();
    for (item, bytes) in &envelopes {
        let hint = options.item_hints.get(*item).or(object_hint);
        let order = OpenOrder::new().hint(hint).prefer(&prefer);
        match ring.open_ordered(&label.item(item), bytes, &order, stats) {
            Ok(open) => {
                // The guesses served the first item that opened: dropped then, once; the
                // items after it try the key that opened it, then the caller's preferences
                // in their own order (a key that opens a later item moves to the front).
                if guessing {
                    guessing = false;
                    prefer = options.preferred_keys.clone();
                }
                if prefer.first() != Some(&open.key) {
                    prefer.retain(|k| k != &open.key);
                    prefer.insert(0, open.key.clone());
                }
                keys.insert((*item).clone(), open.key);
                opened.push((item, open.plaintext));
            }
            Err(e) => {
                failed.push((*item).clone());
                failure.get_or_insert(e);
            }
        }
    }
    if let Some(source) = failure {
        // `opened` is dropped here, zeroizing the items that did open.
        let hint = sealed.sealing_key_hint().map(|key| {
            Box::new(crate::error::HintNote {
                held: ring.get(&key).is_some(),
                key,
            })
        });
        if tried.template_bound {
            // One fixed message: nothing of the template is rendered or named.
            return Err(Error::TemplateBinding {
                items: failed,
                tried: tried.clone(),
                source,
            });
        }
        return Err(Error::Decrypt {
            items: failed,
            tried: tried.clone(),
            hint,
            source,
        });
    }

    // Hand-over: each plaintext buffer is moved, not copied, into a non-zeroizing ByteString.
    let data = opened
        .into_iter()
        .map(|(item, plaintext)| {
            let mut bytes = plaintext.into_zeroizing();
            (item.clone(), ByteString(std::mem::take(&mut *bytes)))
        })
        .collect();
    Ok((data, keys))
}

fn open_deprecated(
    blob: &str,
    (label, tried): (&Label, &ScopeTarget),
    ring: &KeyRing,
    order: &OpenOrder<'_>,
    stats: &mut OpenStats,
) -> Result<(Secret, KeyId)> {
    let bytes =
        decode_envelope(blob).map_err(|source| Error::MalformedDeprecatedData { source })?;
    if ring.is_empty() {
        return Err(Error::NoKeys);
    }
    let opened = ring
        .open_ordered(label, &bytes, order, stats)
        .map_err(|source| Error::DecryptDeprecatedData {
            tried: tried.clone(),
            source,
        })?;
    // The parse error is dropped: serde's messages can quote the input.
    let mut secret: Secret = serde_json::from_slice(opened.plaintext.expose())
        .map_err(|_| Error::DeprecatedDataNotASecret)?;
    // Fold stringData into data, as the API server would on write, so callers see one map.
    if let Some(string_data) = secret.string_data.take() {
        let data = secret.data.get_or_insert_with(BTreeMap::new);
        for (item, value) in string_data {
            data.insert(item, ByteString(value.into_bytes()));
        }
    }
    Ok((secret, opened.key))
}
