//! Names shared by the CLI and the controller: API identity, annotations, labels, field manager.
//!
//! Bitnami's annotations and labels take effect only when their value is exactly
//! [`TRUE`] (`"true"`); any other value counts as unset.

/// API group of the custom resource.
pub const GROUP: &str = "bitnami.com";
/// API version of the custom resource (the only one; served and stored).
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of a `SealedSecret` object.
pub const API_VERSION: &str = "bitnami.com/v1alpha1";
/// `kind` of the custom resource.
pub const KIND: &str = "SealedSecret";
/// Plural resource name.
pub const PLURAL: &str = "sealedsecrets";
/// Name of the CustomResourceDefinition.
pub const CRD_NAME: &str = "sealedsecrets.bitnami.com";

/// The only value that switches a Bitnami annotation or label on.
pub const TRUE: &str = "true";

/// Prefix of every Bitnami annotation.
pub const ANNOTATION_PREFIX: &str = "sealedsecrets.bitnami.com/";

/// On a SealedSecret (controller) or an input Secret (CLI): sealed with an empty label, so it
/// opens under any name in any namespace. Wins over [`NAMESPACE_WIDE_ANNOTATION`].
pub const CLUSTER_WIDE_ANNOTATION: &str = "sealedsecrets.bitnami.com/cluster-wide";
/// On a SealedSecret (controller) or an input Secret (CLI): sealed with the namespace as label,
/// so it opens under any name in its namespace.
pub const NAMESPACE_WIDE_ANNOTATION: &str = "sealedsecrets.bitnami.com/namespace-wide";
/// On an existing in-cluster Secret: the controller may overwrite it and take ownership.
pub const MANAGED_ANNOTATION: &str = "sealedsecrets.bitnami.com/managed";
/// On an existing in-cluster Secret: merge keys, labels and annotations into it instead of
/// replacing it (no ownership unless [`MANAGED_ANNOTATION`] is also set).
pub const PATCH_ANNOTATION: &str = "sealedsecrets.bitnami.com/patch";
/// In `spec.template.metadata.annotations`: do not set an owner reference on the Secret, so
/// it survives the deletion of its SealedSecret.
pub const SKIP_SET_OWNER_REFERENCES_ANNOTATION: &str =
    "sealedsecrets.bitnami.com/skip-set-owner-references";

/// Label on the key Secrets in the controller's namespace.
pub const SEALING_KEY_LABEL: &str = "sealedsecrets.bitnami.com/sealed-secrets-key";
/// Value of [`SEALING_KEY_LABEL`] that marks a usable key pair.
pub const SEALING_KEY_LABEL_ACTIVE: &str = "active";

/// kseal's own top-level SealedSecret annotation: the fingerprint ([`kseal_keys::KeyId`]) of
/// the key that sealed it, so the controller tries that key first and opens each item with
/// one RSA operation. Only a hint: a wrong or stale value costs extra attempts, never a
/// wrong result. Bitnami ignores it.
pub const SEALING_KEY_ANNOTATION: &str = "kseal.dev/sealing-key";

/// kseal's own top-level SealedSecret annotation: the values are sealed with a label that
/// also commits to a digest of `spec.template` ([`crate::binding`]), so any edit of the
/// template makes the object refuse to open. Only a hint for which label to try: removing or
/// adding it makes the object refuse to open too. Bitnami ignores it (and cannot open such
/// objects: its label differs).
pub const TEMPLATE_BINDING_ANNOTATION: &str = "kseal.dev/template-binding";
/// The value of [`TEMPLATE_BINDING_ANNOTATION`] for the binding this build writes and opens.
pub const TEMPLATE_BINDING_V1: &str = "v1";

/// `kubectl apply`'s copy of the last applied object; holds the plaintext of a Secret.
pub const KUBECTL_LAST_APPLIED_ANNOTATION: &str =
    "kubectl.kubernetes.io/last-applied-configuration";
/// kubecfg's copy of the last applied object; holds the plaintext of a Secret.
pub const KUBECFG_LAST_APPLIED_ANNOTATION: &str = "kubecfg.ksonnet.io/last-applied-configuration";
/// Annotations removed from the template when sealing, because they copy the plaintext.
pub const STRIPPED_ANNOTATIONS: [&str; 2] = [
    KUBECTL_LAST_APPLIED_ANNOTATION,
    KUBECFG_LAST_APPLIED_ANNOTATION,
];

/// Label whose value Bitnami copies into its metrics' `instance` label.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";

/// Field manager name the controller uses for its writes.
pub const FIELD_MANAGER: &str = "kseal-controller";

/// The only status condition type: whether the Secret is in sync with the SealedSecret.
pub const CONDITION_SYNCED: &str = "Synced";
/// Condition status `True`.
pub const CONDITION_TRUE: &str = "True";
/// Condition status `False`.
pub const CONDITION_FALSE: &str = "False";
