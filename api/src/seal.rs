//! Secret → SealedSecret, as `kubeseal` does it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kseal_keys::{PublicKey, Scope};

use crate::constants::{
    SEALING_KEY_ANNOTATION, STRIPPED_ANNOTATIONS, TEMPLATE_BINDING_ANNOTATION, TEMPLATE_BINDING_V1,
};
use crate::{Error, Result, SealedSecret, SealedSecretSpec, SecretTemplateSpec};
use crate::{scope_of, set_scope_annotations};

/// How to seal a Secret: the knobs of `kubeseal`'s normal mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealOptions {
    /// Overrides the Secret's name (`kubeseal --name`).
    pub name: Option<String>,
    /// An explicitly requested namespace (`kubeseal -n`). Fills in a Secret without a
    /// namespace; a Secret that declares a different one is an
    /// [`Error::NamespaceMismatch`], except when the scope is cluster-wide (the Secret's own
    /// namespace is kept then).
    pub namespace: Option<String>,
    /// The namespace used when neither the Secret nor [`SealOptions::namespace`] has one (the
    /// kubeconfig context's namespace, or `default`). Never causes a mismatch.
    pub default_namespace: Option<String>,
    /// `kubeseal --scope`. [`Scope::Namespace`] and [`Scope::Cluster`] rewrite the Secret's
    /// scope annotations; [`Scope::Strict`] (the default) leaves them alone, exactly like
    /// kubeseal, so a Secret annotated cluster-wide stays cluster-wide.
    pub scope: Scope,
    /// Seal a Secret with neither `data` nor `stringData` instead of failing
    /// (`kubeseal --allow-empty-data`).
    pub allow_empty_data: bool,
    /// The implementation that seals each value (same format either way): AWS-LC by
    /// default; the pure-Rust backend avoids AWS-LC's one-off RNG seeding in short-lived
    /// processes that seal a few values.
    pub backend: kseal_keys::Backend,
    /// Bind the values to the SealedSecret's `spec.template` ([`crate::binding`]): each
    /// value's label also commits to the template's digest and to the value's item name, and
    /// the object is annotated
    /// [`TEMPLATE_BINDING_ANNOTATION`]`: v1`, so any later edit of the template (or of that
    /// annotation) makes it refuse to open. Only kseal opens bound objects.
    pub bind_template: bool,
}

/// Server-populated metadata that must not travel into a template (or out of one).
pub(crate) fn strip_server_fields(meta: &mut ObjectMeta) {
    meta.uid = None;
    meta.resource_version = None;
    meta.generation = None;
    meta.creation_timestamp = None;
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.self_link = None;
    meta.managed_fields = None;
}

fn non_empty(value: Option<&String>) -> Option<String> {
    value.filter(|v| !v.is_empty()).cloned()
}

/// Seals `secret` for `key` into a SealedSecret, following `kubeseal` (reference §5.5).
///
/// - The name comes from [`SealOptions::name`] or the Secret; one is required.
/// - The scope comes from the Secret's annotations after [`SealOptions::scope`] is applied;
///   the namespace from the Secret, then [`SealOptions::namespace`], then
///   [`SealOptions::default_namespace`]; strict and namespace-wide scopes require one.
/// - Every `data` and `stringData` entry is sealed separately (randomized) with the scope's
///   label; `stringData` wins on a key clash. Neither present is [`Error::EmptyData`] unless
///   [`SealOptions::allow_empty_data`].
/// - Top-level metadata: name, namespace, the scope annotation and
///   [`SEALING_KEY_ANNOTATION`] (the key's fingerprint) only, plus
///   [`TEMPLATE_BINDING_ANNOTATION`] with [`SealOptions::bind_template`], whose labels then
///   also commit to the template written here and to each item's name ([`crate::binding`]).
/// - Template: the Secret's metadata without server fields (uid, resourceVersion, generation,
///   creation/deletion timestamps, deletionGracePeriodSeconds, selfLink, managedFields),
///   without last-applied annotations (they hold the plaintext) and without ownerReferences;
///   plus `type` and `immutable`.
///
/// Certificate expiry is not checked here: that is the caller's policy (kubeseal refuses
/// expired certificates).
pub fn seal_secret(
    secret: &Secret,
    key: &PublicKey,
    options: &SealOptions,
) -> Result<SealedSecret> {
    let data = secret.data.as_ref().filter(|d| !d.is_empty());
    let string_data = secret.string_data.as_ref().filter(|d| !d.is_empty());
    if data.is_none() && string_data.is_none() && !options.allow_empty_data {
        return Err(Error::EmptyData {
            name: options
                .name
                .clone()
                .or_else(|| secret.metadata.name.clone())
                .unwrap_or_default(),
        });
    }

    let mut meta = secret.metadata.clone();
    if let Some(name) = &options.name {
        meta.name = Some(name.clone());
    }
    let name = non_empty(meta.name.as_ref()).ok_or(Error::MissingName)?;

    if options.scope != Scope::Strict {
        let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
        set_scope_annotations(annotations, options.scope);
    }
    let scope = scope_of(&meta);

    let declared = non_empty(meta.namespace.as_ref());
    if scope != Scope::Cluster
        && let (Some(declared), Some(requested)) =
            (&declared, non_empty(options.namespace.as_ref()))
        && *declared != requested
    {
        return Err(Error::NamespaceMismatch {
            secret: declared.clone(),
            requested,
        });
    }
    let namespace = declared
        .or_else(|| non_empty(options.namespace.as_ref()))
        .or_else(|| non_empty(options.default_namespace.as_ref()));
    if namespace.is_none() && scope != Scope::Cluster {
        return Err(Error::MissingNamespace { name });
    }

    // Template metadata: what the controller will copy onto the Secret.
    meta.namespace.clone_from(&namespace);
    strip_server_fields(&mut meta);
    meta.owner_references = None;
    if let Some(annotations) = &mut meta.annotations {
        for stripped in STRIPPED_ANNOTATIONS {
            annotations.remove(stripped);
        }
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }

    let template = SecretTemplateSpec {
        data: None,
        immutable: secret.immutable,
        metadata: Some(meta),
        type_: secret.type_.clone(),
    };
    let base = scope.label(namespace.as_deref().unwrap_or_default(), &name);
    let labels = if options.bind_template {
        // The template exactly as it is written below: the controller digests the same.
        crate::binding::ItemsLabel::bound(&base, Some(&template))
    } else {
        crate::binding::ItemsLabel::unbound(base)
    };
    let mut encrypted_data = BTreeMap::new();
    let data_items = data.into_iter().flatten().map(|(k, v)| (k, v.0.as_slice()));
    let string_items = string_data
        .into_iter()
        .flatten()
        .map(|(k, v)| (k, v.as_bytes()));
    // stringData comes last, so it overwrites data on a key clash (as the API server does).
    for (item, plaintext) in data_items.chain(string_items) {
        let sealed = kseal_keys::seal_with(options.backend, key, &labels.item(item), plaintext)
            .map_err(|source| Error::Seal {
                item: item.clone(),
                source,
            })?;
        encrypted_data.insert(item.clone(), kseal_keys::envelope::encode_base64(&sealed));
    }

    let mut top_annotations = BTreeMap::new();
    set_scope_annotations(&mut top_annotations, scope);
    top_annotations.insert(SEALING_KEY_ANNOTATION.to_owned(), key.id().to_string());
    if options.bind_template {
        top_annotations.insert(
            TEMPLATE_BINDING_ANNOTATION.to_owned(),
            TEMPLATE_BINDING_V1.to_owned(),
        );
    }

    Ok(SealedSecret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace,
            annotations: Some(top_annotations),
            ..ObjectMeta::default()
        },
        spec: SealedSecretSpec {
            data: None,
            encrypted_data,
            template: Some(template),
        },
        status: None,
    })
}
