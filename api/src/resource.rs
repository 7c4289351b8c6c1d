//! The `bitnami.com/v1alpha1` `SealedSecret` custom resource.
//!
//! Field names, optionality and the generated CRD schema follow Bitnami's Helm CRD, so the
//! same objects are accepted by both controllers and `kubectl get sealedsecrets` prints the
//! same columns. Deserialization is lenient: unknown fields are ignored and every optional
//! field may be absent or `null`, so any SealedSecret written by `kubeseal` (JSON or YAML)
//! reads.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kseal_keys::{KeyId, Scope};
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::constants::{CONDITION_SYNCED, SEALING_KEY_ANNOTATION};

/// The specification of a SealedSecret: the sealed items and the shape of the Secret to
/// produce.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "bitnami.com",
    version = "v1alpha1",
    kind = "SealedSecret",
    plural = "sealedsecrets",
    singular = "sealedsecret",
    namespaced,
    status = "SealedSecretStatus",
    derive = "PartialEq",
    doc = "SealedSecret is the K8s representation of a \"sealed Secret\" - a regular k8s Secret that has been sealed (encrypted) using the controller's key.",
    // The raw-JSON form: clippy's duplicated_attributes fires on repeated `type_ = "string"`.
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[0].message"}"#,
    printcolumn = r#"{"name":"Synced","type":"string","jsonPath":".status.conditions[0].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = spec_schema_fixups)]
pub struct SealedSecretSpec {
    /// Deprecated "v1" format: the whole Secret, serialized as JSON and sealed as one value
    /// (standard base64 on the wire). Use `encryptedData` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "deprecated_data_schema")]
    pub data: Option<String>,

    /// The sealed items: Secret data key → sealed value (standard base64). Item keys are not
    /// bound by the seal; the values are.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(schema_with = "encrypted_data_schema")]
    pub encrypted_data: BTreeMap<String, String>,

    /// The structure of the Secret created from this SealedSecret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<SecretTemplateSpec>,
}

/// The structure a Secret should have when created from a SealedSecret. None of it is covered
/// by the seal.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretTemplateSpec {
    /// Keys to render from the decrypted items with a Go `text/template` and Sprig
    /// functions, as Bitnami does; a `null` value omits the item of that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "template_data_schema")]
    pub data: Option<BTreeMap<String, Option<String>>>,

    /// Copied to the Secret's `immutable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub immutable: Option<bool>,

    /// Metadata of the Secret (labels, annotations, finalizers, ...); its name and namespace
    /// are always replaced with the SealedSecret's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "template_metadata_schema")]
    pub metadata: Option<ObjectMeta>,

    /// Copied to the Secret's `type`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// The most recently observed status of a SealedSecret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SealedSecretStatus {
    /// The latest observations; like Bitnami, one condition of type `Synced`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<SealedSecretCondition>>,

    /// The `metadata.generation` the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The state of a SealedSecret at a point in time.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = condition_schema_fixups)]
pub struct SealedSecretCondition {
    /// Last time the condition went from one status to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "time_schema")]
    pub last_transition_time: Option<Time>,

    /// Last time the condition was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "time_schema")]
    pub last_update_time: Option<Time>,

    /// Human-readable details (the error text when unsealing failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// Machine-readable reason for the last transition (Bitnami never sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,

    /// The condition type; `Synced` is the only one.
    #[serde(default, rename = "type")]
    pub type_: String,
}

impl SealedSecret {
    /// The scope from this object's top-level annotations (never from the template).
    pub fn scope(&self) -> Scope {
        crate::scope_of(&self.metadata)
    }

    /// The key fingerprint in the top-level `kseal.dev/sealing-key` annotation, if present
    /// and well formed.
    pub fn sealing_key_hint(&self) -> Option<KeyId> {
        self.metadata
            .annotations
            .as_ref()?
            .get(SEALING_KEY_ANNOTATION)
            .and_then(|value| KeyId::parse(value))
    }

    /// The `Synced` condition, if the status has one.
    pub fn synced_condition(&self) -> Option<&SealedSecretCondition> {
        self.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == CONDITION_SYNCED)
    }
}

/// Reads a missing or `null` value as the type's default (kubeseal's v1 objects carry
/// `"encryptedData": null`).
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Marks `fields` required and drops the `default`s schemars derives from `#[serde(default)]`
/// (which only makes reading lenient; the API server must not default these).
fn require(schema: &mut Schema, fields: &[&str]) {
    if let Some(properties) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for field in fields {
            if let Some(property) = properties
                .get_mut(*field)
                .and_then(serde_json::Value::as_object_mut)
            {
                property.remove("default");
            }
        }
    }
    schema.insert("required".to_owned(), serde_json::json!(fields));
}

fn spec_schema_fixups(schema: &mut Schema) {
    require(schema, &["encryptedData"]);
}

fn condition_schema_fixups(schema: &mut Schema) {
    require(schema, &["status", "type"]);
}

// Schemas written by hand where the derived ones would not match Bitnami's CRD or would not
// be structural. Each is inlined by kube's generator (no `$ref`).

fn deprecated_data_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Data is deprecated and will be removed eventually. Use per-value EncryptedData instead.",
        "type": "string",
        "format": "byte",
        "nullable": true,
    })
}

fn encrypted_data_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string" },
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn template_data_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Keys that should be templated using decrypted data.",
        "type": "object",
        "additionalProperties": { "type": "string", "nullable": true },
        "nullable": true,
    })
}

fn template_metadata_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Standard object's metadata.",
        "type": "object",
        "nullable": true,
        "properties": {
            "annotations": { "type": "object", "additionalProperties": { "type": "string" } },
            "finalizers": { "type": "array", "items": { "type": "string" } },
            "labels": { "type": "object", "additionalProperties": { "type": "string" } },
            "name": { "type": "string" },
            "namespace": { "type": "string" },
        },
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn time_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "date-time",
        "nullable": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt as _;
    use serde_json::{Value, json};

    fn schema() -> Value {
        let crd = SealedSecret::crd();
        let version = &crd.spec.versions[0];
        serde_json::to_value(
            version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("schema"),
        )
        .expect("json")
    }

    fn walk(
        value: &Value,
        path: &str,
        visit: &mut dyn FnMut(&str, &serde_json::Map<String, Value>),
    ) {
        if let Value::Object(map) = value {
            visit(path, map);
            for (key, child) in map {
                walk(child, &format!("{path}/{key}"), visit);
            }
        } else if let Value::Array(items) = value {
            for (i, child) in items.iter().enumerate() {
                walk(child, &format!("{path}/{i}"), visit);
            }
        }
    }

    #[test]
    fn crd_identity_matches_bitnami() {
        let crd = SealedSecret::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("sealedsecrets.bitnami.com")
        );
        assert_eq!(crd.spec.group, "bitnami.com");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.kind, "SealedSecret");
        assert_eq!(crd.spec.names.plural, "sealedsecrets");
        assert_eq!(crd.spec.names.singular.as_deref(), Some("sealedsecret"));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage);
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(
            columns,
            [
                ("Status", "string", ".status.conditions[0].message"),
                ("Synced", "string", ".status.conditions[0].status"),
                ("Age", "date", ".metadata.creationTimestamp"),
            ]
        );
    }

    #[test]
    fn crd_schema_is_structural_and_self_contained() {
        let schema = schema();
        let supported_formats = ["byte", "date-time", "int64", "int32"];
        walk(&schema, "", &mut |path, map| {
            for banned in [
                "$ref",
                "$schema",
                "definitions",
                "$defs",
                "anyOf",
                "oneOf",
                "allOf",
            ] {
                assert!(!map.contains_key(banned), "{banned} at {path}");
            }
            if let Some(Value::String(format)) = map.get("format") {
                assert!(
                    supported_formats.contains(&format.as_str()),
                    "{format} at {path}"
                );
            }
            if path.ends_with("/properties") || path.ends_with("/additionalProperties") {
                return;
            }
            if map.contains_key("properties") || map.contains_key("additionalProperties") {
                assert!(
                    map.get("type") == Some(&json!("object")),
                    "object without type at {path}"
                );
            }
            if let Some(ty) = map.get("type") {
                assert!(ty.is_string(), "type must be a single string at {path}");
            }
            assert!(
                !(map.contains_key("properties") && map.contains_key("additionalProperties")),
                "properties and additionalProperties at {path}"
            );
        });
    }

    #[test]
    fn crd_schema_has_bitnami_shape() {
        let schema = schema();
        let spec = &schema["properties"]["spec"];
        assert_eq!(spec["required"], json!(["encryptedData"]));
        let encrypted = &spec["properties"]["encryptedData"];
        assert_eq!(
            encrypted["x-kubernetes-preserve-unknown-fields"],
            json!(true)
        );
        assert_eq!(encrypted["additionalProperties"]["type"], json!("string"));
        assert_eq!(spec["properties"]["data"]["format"], json!("byte"));
        let template = &spec["properties"]["template"]["properties"];
        assert_eq!(template["metadata"]["nullable"], json!(true));
        assert_eq!(
            template["metadata"]["x-kubernetes-preserve-unknown-fields"],
            json!(true)
        );
        assert_eq!(template["data"]["nullable"], json!(true));
        assert_eq!(template["type"]["type"], json!("string"));
        assert_eq!(template["immutable"]["type"], json!("boolean"));
        let status = &schema["properties"]["status"]["properties"];
        assert_eq!(status["observedGeneration"]["format"], json!("int64"));
        let condition = &status["conditions"]["items"];
        let mut required: Vec<_> = condition["required"]
            .as_array()
            .expect("required")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        required.sort_unstable();
        assert_eq!(required, ["status", "type"]);
        assert_eq!(
            condition["properties"]["lastTransitionTime"]["format"],
            json!("date-time")
        );
    }

    #[test]
    fn unknown_and_null_fields_do_not_break_deserialization() {
        let value = json!({
            "apiVersion": "bitnami.com/v1alpha1",
            "kind": "SealedSecret",
            "metadata": {"name": "n", "namespace": "ns", "creationTimestamp": null, "future": 1},
            "spec": {
                "encryptedData": {"a": "AgA="},
                "template": {"metadata": null, "data": null, "type": null, "extra": {}},
                "data": null,
                "somethingNew": [1, 2]
            },
            "status": {"conditions": [{"type": "Synced", "status": "True", "lastUpdateTime": null}], "x": 1},
            "unknownTop": true
        });
        let ss: SealedSecret = serde_json::from_value(value).expect("deserializes");
        assert_eq!(ss.spec.encrypted_data["a"], "AgA=");
        assert_eq!(
            ss.synced_condition().map(|c| c.status.as_str()),
            Some("True")
        );
    }

    #[test]
    fn serializes_api_version_and_kind() {
        let ss = SealedSecret::new("n", SealedSecretSpec::default());
        let value = serde_json::to_value(&ss).expect("json");
        assert_eq!(value["apiVersion"], "bitnami.com/v1alpha1");
        assert_eq!(value["kind"], "SealedSecret");
        assert_eq!(value["spec"], json!({"encryptedData": {}}));
    }
}
