//! Resource types the server knows: built-ins plus whatever CRDs register, and discovery documents.

use serde_json::{Value, json};

/// Identity of a resource type in storage: `(group, plural)`.
pub(crate) type TypeKey = (String, String);

/// One served resource type.
#[derive(Debug, Clone)]
pub(crate) struct ResourceType {
    pub(crate) group: String,
    /// Served versions; the first is the storage/preferred version.
    pub(crate) versions: Vec<String>,
    pub(crate) plural: String,
    pub(crate) singular: String,
    pub(crate) kind: String,
    pub(crate) list_kind: String,
    pub(crate) short_names: Vec<String>,
    pub(crate) namespaced: bool,
    /// Has a `/status` subresource (main endpoint ignores `.status`, `/status` ignores the rest).
    pub(crate) status: bool,
    /// Maintains `metadata.generation` (custom resources, CRDs).
    pub(crate) generation: bool,
    /// PUT on a missing object creates it (leases, events).
    pub(crate) create_on_update: bool,
    /// PUT without `metadata.resourceVersion` is allowed.
    pub(crate) unconditional_update: bool,
    /// Built into the server (not from a CRD): strategic merge patch allowed, list items lose kind.
    pub(crate) builtin: bool,
    /// `events.k8s.io/v1` Events: stored as core/v1 Events and converted on the way in and out.
    pub(crate) events_v1: bool,
}

impl ResourceType {
    /// The storage key (events.k8s.io Events share the core Events' storage).
    pub(crate) fn key(&self) -> TypeKey {
        if self.events_v1 {
            return (String::new(), "events".to_owned());
        }
        (self.group.clone(), self.plural.clone())
    }

    /// The identity in the registry.
    pub(crate) fn type_key(&self) -> TypeKey {
        (self.group.clone(), self.plural.clone())
    }

    pub(crate) fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// Field labels beyond `metadata.name`/`metadata.namespace`, and whether the type has its
    /// own field label conversion (which changes the apiserver's error text).
    pub(crate) fn field_labels(&self) -> (&'static [&'static str], bool) {
        const CORE_EVENTS: &[&str] = &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ];
        const V1_EVENTS: &[&str] = &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "deprecatedSource",
            "type",
        ];
        match (self.group.as_str(), self.plural.as_str(), self.builtin) {
            (_, _, false) => (&[], true),
            ("", "secrets", _) => (&["type"], true),
            ("", "namespaces", _) => (&["status.phase"], true),
            ("", "events", _) => (CORE_EVENTS, true),
            ("events.k8s.io", "events", _) => (V1_EVENTS, true),
            _ => (&[], false),
        }
    }

    pub(crate) fn storage_version(&self) -> &str {
        self.versions.first().map_or("v1", String::as_str)
    }

    fn builtin(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            short_names: Vec::new(),
            namespaced,
            status: false,
            generation: false,
            create_on_update: false,
            unconditional_update: true,
            builtin: true,
            events_v1: false,
        }
    }

    fn short(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// The `APIResource` entries (the resource and its subresources) for discovery.
    fn discovery_entries(&self) -> Vec<Value> {
        let verbs = [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        let mut out = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
            "shortNames": self.short_names,
            "storageVersionHash": "",
        })];
        if self.status {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

/// The built-in resource types.
pub(crate) fn builtins() -> Vec<ResourceType> {
    let mut ns = ResourceType::builtin("", "v1", "namespaces", "Namespace", false).short(&["ns"]);
    ns.status = true;
    let mut svc = ResourceType::builtin("", "v1", "services", "Service", true).short(&["svc"]);
    svc.status = true;
    let mut lease = ResourceType::builtin("coordination.k8s.io", "v1", "leases", "Lease", true);
    lease.create_on_update = true;
    let mut ev = ResourceType::builtin("", "v1", "events", "Event", true).short(&["ev"]);
    ev.create_on_update = true;
    let mut ev2 =
        ResourceType::builtin("events.k8s.io", "v1", "events", "Event", true).short(&["ev"]);
    ev2.create_on_update = true;
    ev2.events_v1 = true;
    let mut crd = ResourceType::builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
    )
    .short(&["crd", "crds"]);
    crd.status = true;
    crd.generation = true;
    crd.unconditional_update = false;
    vec![
        ns,
        ResourceType::builtin("", "v1", "secrets", "Secret", true),
        ResourceType::builtin("", "v1", "configmaps", "ConfigMap", true).short(&["cm"]),
        ev,
        svc,
        ResourceType::builtin("", "v1", "serviceaccounts", "ServiceAccount", true).short(&["sa"]),
        ResourceType::builtin("", "v1", "endpoints", "Endpoints", true).short(&["ep"]),
        ev2,
        lease,
        crd,
    ]
}

/// Reads a CRD object into the resource type it defines. Returns field errors as text.
pub(crate) fn from_crd(crd: &Value) -> Result<ResourceType, Vec<crate::error::FieldError>> {
    use crate::error::FieldError;
    let spec = &crd["spec"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let group = s(&spec["group"]);
    let names = &spec["names"];
    let plural = s(&names["plural"]);
    let kind = s(&names["kind"]);
    let mut errs = Vec::new();
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    }
    if plural.is_empty() {
        errs.push(FieldError::required("spec.names.plural", ""));
    }
    if kind.is_empty() {
        errs.push(FieldError::required("spec.names.kind", ""));
    }
    let name = s(&crd["metadata"]["name"]);
    if errs.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            "metadata.name",
            &format!("{name:?}"),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = s(&spec["scope"]);
    if scope != "Namespaced" && scope != "Cluster" {
        errs.push(FieldError {
            field: "spec.scope".into(),
            reason: "FieldValueNotSupported",
            detail: "supported values: \"Cluster\", \"Namespaced\"".into(),
            value: Some(format!("{scope:?}")),
        });
    }
    let versions: Vec<&Value> = spec["versions"]
        .as_array()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    if versions.is_empty() {
        errs.push(FieldError::required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    // Storage version first, then the other served versions.
    let mut served: Vec<String> = Vec::new();
    let mut status = false;
    for v in &versions {
        let vname = s(&v["name"]);
        let is_served = v["served"].as_bool().unwrap_or(false);
        if v["storage"].as_bool().unwrap_or(false) {
            served.insert(0, vname);
        } else if is_served {
            served.push(vname);
        }
        if v["subresources"].get("status").is_some() {
            status = true;
        }
    }
    Ok(ResourceType {
        group,
        versions: served,
        singular: names["singular"]
            .as_str()
            .map_or_else(|| kind.to_lowercase(), str::to_owned),
        list_kind: names["listKind"]
            .as_str()
            .map_or_else(|| format!("{kind}List"), str::to_owned),
        short_names: names["shortNames"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        plural,
        kind,
        namespaced: scope == "Namespaced",
        status,
        generation: true,
        create_on_update: false,
        unconditional_update: false,
        builtin: false,
        events_v1: false,
    })
}

/// `/api`.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// `APIResourceList` for one group/version, or `None` when nothing is served there.
pub(crate) fn resource_list(types: &[&ResourceType], group: &str, version: &str) -> Option<Value> {
    let matching: Vec<&&ResourceType> = types
        .iter()
        .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
        .collect();
    if matching.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let resources: Vec<Value> = matching
        .iter()
        .flat_map(|t| t.discovery_entries())
        .collect();
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// The `APIGroup` for a named group, or `None`.
pub(crate) fn api_group(types: &[&ResourceType], group: &str) -> Option<Value> {
    let mut versions: Vec<String> = Vec::new();
    let mut preferred = None;
    for t in types.iter().filter(|t| t.group == group) {
        if preferred.is_none() {
            preferred = Some(t.storage_version().to_owned());
        }
        for v in &t.versions {
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
    }
    let preferred = preferred?;
    let gv = |v: &str| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    Some(json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": gv(&preferred),
    }))
}

/// `/apis`.
pub(crate) fn group_list(types: &[&ResourceType]) -> Value {
    let mut groups: Vec<String> = Vec::new();
    for t in types {
        if !t.group.is_empty() && !groups.contains(&t.group) {
            groups.push(t.group.clone());
        }
    }
    let groups: Vec<Value> = groups.iter().filter_map(|g| api_group(types, g)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// Field renames between core/v1 Events and events.k8s.io/v1 Events.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename_fields(obj: &Value, to_v1: bool, api_version: &str) -> Value {
    let Some(m) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = serde_json::Map::new();
    for (k, v) in m {
        if v.is_null() {
            continue;
        }
        let renamed = EVENT_FIELDS
            .iter()
            .find(|(core, v1)| if to_v1 { k == core } else { k == v1 })
            .map(|(core, v1)| if to_v1 { *v1 } else { *core })
            .unwrap_or(k.as_str());
        out.insert(renamed.to_owned(), v.clone());
    }
    out.insert("apiVersion".into(), api_version.into());
    out.insert("kind".into(), "Event".into());
    Value::Object(out)
}

/// A stored core/v1 Event as an events.k8s.io/v1 Event.
pub(crate) fn event_to_v1(core: &Value) -> Value {
    rename_fields(core, true, "events.k8s.io/v1")
}

/// An events.k8s.io/v1 Event as a core/v1 Event for storage.
pub(crate) fn event_from_v1(v1: &Value) -> Value {
    rename_fields(v1, false, "v1")
}
