//! What the watchers read of an object's metadata.
//!
//! Every write to an object adds to its `managedFields`: per field manager, the set of fields
//! it owns as nested JSON maps. The controller never reads them, and on a cold start every
//! SealedSecret arrives twice with them (listed, then its status written) and every Secret
//! once (created). [`WireMeta`] reads an `ObjectMeta` as `ObjectMeta`'s own parser does,
//! except that serde skips `managedFields` (and the creation time, which nothing the
//! controller does with a watched object reads) without building them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;

/// `ObjectMeta` without `managedFields` or `creationTimestamp` (see the
/// [module docs](self)). As in `ObjectMeta`, every field may be absent or `null`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireMeta {
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    self_link: Option<String>,
    #[serde(default)]
    uid: Option<String>,
}

impl WireMeta {
    /// The `ObjectMeta`, with no managed fields and no creation time.
    pub(crate) fn into_meta(self) -> ObjectMeta {
        ObjectMeta {
            annotations: self.annotations,
            creation_timestamp: None,
            deletion_grace_period_seconds: self.deletion_grace_period_seconds,
            deletion_timestamp: self.deletion_timestamp,
            finalizers: self.finalizers,
            generate_name: self.generate_name,
            generation: self.generation,
            labels: self.labels,
            managed_fields: None,
            name: self.name,
            namespace: self.namespace,
            owner_references: self.owner_references,
            resource_version: self.resource_version,
            self_link: self.self_link,
            uid: self.uid,
        }
    }
}
