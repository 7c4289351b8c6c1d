//! Scope from annotations, as Bitnami reads and writes it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kseal_keys::Scope;

use crate::constants::{CLUSTER_WIDE_ANNOTATION, NAMESPACE_WIDE_ANNOTATION, TRUE};

/// The scope an annotation map selects.
///
/// As in Bitnami: an annotation counts only when its value is exactly `"true"`, and
/// cluster-wide wins when both are set. No annotation means [`Scope::Strict`].
pub fn scope_from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Scope {
    let is_true = |key: &str| {
        annotations
            .and_then(|a| a.get(key))
            .is_some_and(|v| v == TRUE)
    };
    if is_true(CLUSTER_WIDE_ANNOTATION) {
        Scope::Cluster
    } else if is_true(NAMESPACE_WIDE_ANNOTATION) {
        Scope::Namespace
    } else {
        Scope::Strict
    }
}

/// The scope of an object, from its own `metadata.annotations`.
///
/// For a SealedSecret pass its **top-level** metadata: that is what the controller binds the
/// label to, never `spec.template.metadata`.
pub fn scope_of(metadata: &ObjectMeta) -> Scope {
    scope_from_annotations(metadata.annotations.as_ref())
}

/// The scope and the public part of the label an unseal tried: what a decrypt error names.
///
/// It is public metadata (the SealedSecret's own scope, namespace and name), never a secret:
/// it answers the usual "no key could decrypt" question (a renamed or moved SealedSecret)
/// without saying anything about the keys or the ciphertext. Displays as
/// `strict scope "prod/db"`, `namespace-wide scope "prod"` or `cluster-wide scope`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeTarget {
    /// The scope read from the object's top-level annotations.
    pub scope: Scope,
    /// The label as text: `namespace/name` (strict), `namespace` (namespace-wide) or empty
    /// (cluster-wide).
    pub label: String,
    /// Whether the label was also bound to `spec.template` ([`crate::binding`]).
    pub template_bound: bool,
}

impl ScopeTarget {
    /// The target of `scope` for an object `namespace/name`.
    pub fn new(scope: Scope, namespace: &str, name: &str) -> Self {
        // The OAEP label itself, as text (it is made of the two `&str`s, so always UTF-8).
        let label = scope.label(namespace, name);
        Self {
            scope,
            label: String::from_utf8_lossy(label.as_bytes()).into_owned(),
            template_bound: false,
        }
    }
}

impl std::fmt::Display for ScopeTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.scope {
            Scope::Cluster => f.write_str("cluster-wide scope")?,
            scope => write!(f, "{scope} scope {:?}", self.label)?,
        }
        if self.template_bound {
            f.write_str(", bound to spec.template")?;
        }
        Ok(())
    }
}

/// Rewrites the scope annotations so that they select `scope`: both are removed, then the
/// one `scope` needs (if any) is set to `"true"` (Bitnami's `UpdateScopeAnnotations`).
pub fn set_scope_annotations(annotations: &mut BTreeMap<String, String>, scope: Scope) {
    annotations.remove(NAMESPACE_WIDE_ANNOTATION);
    annotations.remove(CLUSTER_WIDE_ANNOTATION);
    match scope {
        Scope::Strict => {}
        Scope::Namespace => {
            annotations.insert(NAMESPACE_WIDE_ANNOTATION.to_owned(), TRUE.to_owned());
        }
        Scope::Cluster => {
            annotations.insert(CLUSTER_WIDE_ANNOTATION.to_owned(), TRUE.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn no_annotation_means_strict() {
        assert_eq!(scope_from_annotations(None), Scope::Strict);
        assert_eq!(
            scope_from_annotations(Some(&BTreeMap::new())),
            Scope::Strict
        );
    }

    #[test]
    fn only_the_exact_value_true_counts() {
        for value in ["True", "TRUE", "yes", "1", " true", ""] {
            let a = annotations(&[
                (CLUSTER_WIDE_ANNOTATION, value),
                (NAMESPACE_WIDE_ANNOTATION, value),
            ]);
            assert_eq!(scope_from_annotations(Some(&a)), Scope::Strict, "{value:?}");
        }
        let a = annotations(&[(NAMESPACE_WIDE_ANNOTATION, "true")]);
        assert_eq!(scope_from_annotations(Some(&a)), Scope::Namespace);
        let a = annotations(&[(CLUSTER_WIDE_ANNOTATION, "true")]);
        assert_eq!(scope_from_annotations(Some(&a)), Scope::Cluster);
    }

    #[test]
    fn cluster_wide_wins_over_namespace_wide() {
        let a = annotations(&[
            (CLUSTER_WIDE_ANNOTATION, "true"),
            (NAMESPACE_WIDE_ANNOTATION, "true"),
        ]);
        assert_eq!(scope_from_annotations(Some(&a)), Scope::Cluster);
    }

    #[test]
    fn setting_a_scope_replaces_both_annotations() {
        for scope in Scope::ALL {
            let mut a = annotations(&[
                (CLUSTER_WIDE_ANNOTATION, "true"),
                (NAMESPACE_WIDE_ANNOTATION, "true"),
                ("other", "kept"),
            ]);
            set_scope_annotations(&mut a, scope);
            assert_eq!(scope_from_annotations(Some(&a)), scope);
            assert_eq!(a.get("other").map(String::as_str), Some("kept"));
            let scope_keys = a.keys().filter(|k| k.starts_with("sealedsecrets")).count();
            assert_eq!(scope_keys, usize::from(scope != Scope::Strict));
        }
    }
}
