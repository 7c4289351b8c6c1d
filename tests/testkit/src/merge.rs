//! Patch flavours: JSON merge patch, JSON patch (Go semantics), an approximation of strategic
//! merge patch, and server-side apply merging/pruning.
//!
//! List handling shared by strategic merge patch and apply (the approximation of the schema):
//! - `metadata.finalizers` is a set of scalars (union on merge);
//! - `metadata.ownerReferences` is a map list keyed by `uid`;
//! - for built-in types, lists named `conditions` are keyed by `type`, and `containers`,
//!   `initContainers`, `env`, `volumes`, `volumeMounts`, `imagePullSecrets`, `secrets` and
//!   `ports` are keyed by `name` (ports by `containerPort`/`port` when unnamed);
//! - every other list is atomic (replaced as a whole), which is what custom resources without
//!   `x-kubernetes-list-type` annotations get on a real server.

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

/// How a list at some path merges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ListType {
    Atomic,
    Set,
    Map(&'static str),
}

/// The list type of the list at `path` (object keys from the root).
pub(crate) fn list_type(path: &[String], builtin: bool, items: &[Value]) -> ListType {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["metadata", "finalizers"] => return ListType::Set,
        ["metadata", "ownerReferences"] => return ListType::Map("uid"),
        _ => {}
    }
    if !builtin {
        return ListType::Atomic;
    }
    match p.last().copied() {
        Some("conditions") => ListType::Map("type"),
        Some(
            "containers" | "initContainers" | "env" | "volumes" | "imagePullSecrets" | "secrets",
        ) => ListType::Map("name"),
        Some("volumeMounts") => ListType::Map("mountPath"),
        Some("ports") => {
            if items.iter().all(|i| i.get("containerPort").is_some()) {
                ListType::Map("containerPort")
            } else {
                ListType::Map("port")
            }
        }
        _ => ListType::Atomic,
    }
}

/// RFC 7386 JSON merge patch (`json_patch::merge`).
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Merge used by strategic merge patch (`strategic == true`: honours `$patch` directives and
/// `null` deletes) and by server-side apply (`strategic == false`).
pub(crate) fn merge_keyed(
    target: &mut Value,
    patch: &Value,
    path: &mut Vec<String>,
    builtin: bool,
    strategic: bool,
) {
    match patch {
        Value::Object(p) => {
            if strategic && p.get("$patch").and_then(Value::as_str) == Some("replace") {
                let mut clean = patch.clone();
                strip_directives(&mut clean);
                *target = clean;
                return;
            }
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let Value::Object(t) = target else { return };
            for (k, v) in p {
                if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
                    if let (Some(Value::Array(list)), Value::Array(del)) = (t.get_mut(field), v) {
                        list.retain(|x| !del.contains(x));
                    }
                    continue;
                }
                if k.starts_with('$') {
                    continue;
                }
                if v.is_null() {
                    t.remove(k);
                    continue;
                }
                path.push(k.clone());
                merge_keyed(
                    t.entry(k.clone()).or_insert(Value::Null),
                    v,
                    path,
                    builtin,
                    strategic,
                );
                path.pop();
            }
        }
        Value::Array(items) => {
            let lt = list_type(path, builtin, items);
            let existing = match target {
                Value::Array(a) => a,
                _ => {
                    let mut clean = patch.clone();
                    strip_directives(&mut clean);
                    if let Value::Array(a) = &mut clean {
                        a.retain(|i| i.get("$patch").is_none());
                    }
                    *target = clean;
                    return;
                }
            };
            match lt {
                ListType::Atomic => {
                    let mut clean = patch.clone();
                    strip_directives(&mut clean);
                    *target = clean;
                }
                ListType::Set => {
                    let mut merged: Vec<Value> = Vec::new();
                    // Strategic merge puts the patch's items first, as Go's implementation does.
                    let (first, second) = if strategic {
                        (items, &*existing)
                    } else {
                        (&*existing, items)
                    };
                    for i in first.iter().chain(second.iter()) {
                        if !merged.contains(i) {
                            merged.push(i.clone());
                        }
                    }
                    *existing = merged;
                }
                ListType::Map(key) => {
                    let mut patched: Vec<Value> = Vec::new();
                    let mut seen: Vec<Value> = Vec::new();
                    for item in items {
                        let id = item.get(key).cloned().unwrap_or(Value::Null);
                        seen.push(id.clone());
                        if strategic && item.get("$patch").and_then(Value::as_str) == Some("delete")
                        {
                            continue;
                        }
                        let mut merged = existing
                            .iter()
                            .find(|e| e.get(key) == Some(&id))
                            .cloned()
                            .unwrap_or(Value::Null);
                        merge_keyed(&mut merged, item, path, builtin, strategic);
                        patched.push(merged);
                    }
                    let rest = existing
                        .iter()
                        .filter(|e| !seen.iter().any(|id| e.get(key) == Some(id)))
                        .cloned();
                    // Strategic merge lists the patch's items first; apply keeps existing order.
                    *existing = if strategic {
                        patched.into_iter().chain(rest).collect()
                    } else {
                        let mut out: Vec<Value> = existing
                            .iter()
                            .map(|e| {
                                let id = e.get(key);
                                seen.iter()
                                    .position(|s| Some(s) == id)
                                    .and_then(|p| patched.get(p).cloned())
                                    .unwrap_or_else(|| e.clone())
                            })
                            .collect();
                        for (id, p) in seen.iter().zip(patched.iter()) {
                            if !existing.iter().any(|e| e.get(key) == Some(id)) {
                                out.push(p.clone());
                            }
                        }
                        out
                    };
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

/// Applies an RFC 6902 JSON patch the way the apiserver's Go library does. In particular a
/// `test` of `null` against a missing path succeeds (kube-runtime's `finalizer()` relies on it),
/// which the Rust `json-patch` crate rejects.
pub(crate) fn json_patch(doc: &mut Value, patch: &Value) -> ApiResult<()> {
    let ops = patch.as_array().ok_or_else(|| {
        ApiError::bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    })?;
    for op in ops {
        let is_null_test = op.get("op").and_then(Value::as_str) == Some("test")
            && op.get("value").is_none_or(Value::is_null);
        if is_null_test {
            let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
            match doc.pointer(path) {
                None | Some(Value::Null) => continue,
                Some(_) => return Err(ApiError::patch_rejected()),
            }
        }
        let one: json_patch::Patch = serde_json::from_value(Value::Array(vec![op.clone()]))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        json_patch::patch(doc, &one).map_err(|_| ApiError::patch_rejected())?;
    }
    Ok(())
}

/// A `fieldsV1` set describing the fields present in `v` (list items by key when the list is
/// keyed, atomic lists as leaves).
pub(crate) fn fields_v1(v: &Value, path: &mut Vec<String>, builtin: bool) -> Value {
    let mut out = Map::new();
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                path.push(k.clone());
                let inner = match child {
                    Value::Object(_) => fields_v1(child, path, builtin),
                    Value::Array(items) => match list_type(path, builtin, items) {
                        ListType::Atomic => Value::Object(Map::new()),
                        ListType::Set => Value::Object(
                            items
                                .iter()
                                .map(|i| (format!("v:{i}"), Value::Object(Map::new())))
                                .collect(),
                        ),
                        ListType::Map(key) => {
                            let mut lm = Map::new();
                            for i in items {
                                let id = i.get(key).cloned().unwrap_or(Value::Null);
                                let mut k = Map::new();
                                k.insert(key.to_owned(), id);
                                let mut f = fields_v1(i, path, builtin);
                                if let Value::Object(fm) = &mut f {
                                    fm.insert(".".into(), Value::Object(Map::new()));
                                }
                                lm.insert(format!("k:{}", Value::Object(k)), f);
                            }
                            Value::Object(lm)
                        }
                    },
                    _ => Value::Object(Map::new()),
                };
                path.pop();
                out.insert(format!("f:{k}"), inner);
            }
        }
        _ => return Value::Object(Map::new()),
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}}));
    }

    #[test]
    fn json_patch_test_null_on_missing_path_succeeds_like_go() {
        let mut doc = json!({"metadata": {}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
        ]);
        json_patch(&mut doc, &patch).unwrap();
        assert_eq!(doc, json!({"metadata": {"finalizers": ["x"]}}));
        let err = json_patch(
            &mut doc,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]),
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
    }

    #[test]
    fn strategic_merge_merges_finalizers_and_keyed_lists() {
        let mut obj = json!({"metadata": {"finalizers": ["a"]}, "status": {"conditions": [{"type": "R", "status": "False"}]}});
        let patch = json!({"metadata": {"finalizers": ["b"]}, "status": {"conditions": [{"type": "R", "status": "True"}, {"type": "S", "status": "True"}]}});
        merge_keyed(&mut obj, &patch, &mut Vec::new(), true, true);
        assert_eq!(obj["metadata"]["finalizers"], json!(["b", "a"]));
        assert_eq!(
            obj["status"]["conditions"],
            json!([{"type": "R", "status": "True"}, {"type": "S", "status": "True"}])
        );
    }
}
