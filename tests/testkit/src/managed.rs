//! `metadata.managedFields` bookkeeping for server-side apply: field ownership per manager,
//! conflicts between managers, ownership transfer on update and pruning on apply.
//!
//! A field set is the set of leaf paths of a `fieldsV1` document (`f:data`, `f:key`,
//! `k:{"uid":"…"}`, `v:"x"`); a path ending where `fieldsV1` has a `.` entry stands for the list
//! item or map itself.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::merge;

pub(crate) type FieldPath = Vec<String>;
pub(crate) type FieldSet = BTreeSet<FieldPath>;

/// One managedFields entry.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Value,
    subresource: Option<String>,
    set: FieldSet,
}

/// A field another manager owns with a different value.
#[derive(Debug, Clone)]
pub(crate) struct Conflict {
    pub(crate) manager: String,
    pub(crate) operation: String,
    pub(crate) api_version: String,
    pub(crate) path: FieldPath,
}

pub(crate) fn set_of(fields_v1: &Value) -> FieldSet {
    fn walk(v: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
        let Some(m) = v.as_object() else { return };
        for (k, child) in m {
            if k == "." {
                out.insert(prefix.clone());
                continue;
            }
            prefix.push(k.clone());
            if child.as_object().is_none_or(Map::is_empty) {
                out.insert(prefix.clone());
            } else {
                walk(child, prefix, out);
            }
            prefix.pop();
        }
    }
    let mut out = FieldSet::new();
    walk(fields_v1, &mut Vec::new(), &mut out);
    out
}

pub(crate) fn to_fields_v1(set: &FieldSet) -> Value {
    fn insert(m: &mut Map<String, Value>, p: &[String]) {
        let Some((first, rest)) = p.split_first() else {
            return;
        };
        if let Value::Object(child) = m.entry(first.clone()).or_insert_with(|| json!({})) {
            insert(child, rest);
        }
    }
    // A path that also has children is owned itself: mark it with ".".
    fn mark(m: &mut Map<String, Value>, p: &[String]) {
        let Some((first, rest)) = p.split_first() else {
            return;
        };
        if let Some(Value::Object(child)) = m.get_mut(first) {
            if rest.is_empty() {
                if !child.is_empty() {
                    child.insert(".".into(), json!({}));
                }
            } else {
                mark(child, rest);
            }
        }
    }
    let mut root = Map::new();
    for p in set {
        insert(&mut root, p);
    }
    for p in set {
        mark(&mut root, p);
    }
    Value::Object(root)
}

fn find_item(items: &[Value], seg: &str) -> Option<usize> {
    if let Some(k) = seg.strip_prefix("k:") {
        let keys: Map<String, Value> = serde_json::from_str(k).ok()?;
        items
            .iter()
            .position(|i| keys.iter().all(|(kk, kv)| i.get(kk) == Some(kv)))
    } else if let Some(v) = seg.strip_prefix("v:") {
        let want: Value = serde_json::from_str(v).ok()?;
        items.iter().position(|i| *i == want)
    } else {
        None
    }
}

pub(crate) fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path {
        cur = match (seg.strip_prefix("f:"), cur) {
            (Some(f), Value::Object(m)) => m.get(f)?,
            (None, Value::Array(items)) => &items[find_item(items, seg)?],
            _ => return None,
        };
    }
    Some(cur)
}

fn value_at_mut<'a>(obj: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = obj;
    for seg in path {
        cur = match (seg.strip_prefix("f:"), cur) {
            (Some(f), Value::Object(m)) => m.get_mut(f)?,
            (None, Value::Array(items)) => {
                let i = find_item(items, seg)?;
                &mut items[i]
            }
            _ => return None,
        };
    }
    Some(cur)
}

pub(crate) fn remove_at(obj: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let Some(parent) = value_at_mut(obj, parent) else {
        return;
    };
    match (last.strip_prefix("f:"), parent) {
        (Some(f), Value::Object(m)) => {
            m.remove(f);
        }
        (None, Value::Array(items)) => {
            if let Some(i) = find_item(items, last) {
                items.remove(i);
            }
        }
        _ => {}
    }
}

/// `.data.x`, `.metadata.ownerReferences[uid="…"]`, `.metadata.finalizers[="x"]`.
pub(crate) fn display(path: &[String]) -> String {
    let mut out = String::new();
    for seg in path {
        if let Some(f) = seg.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = seg.strip_prefix("k:") {
            let keys: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let inner: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", inner.join(",")));
        } else if let Some(v) = seg.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        }
    }
    out
}

pub(crate) fn entries_of(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| Entry {
                    manager: e["manager"].as_str().unwrap_or_default().to_owned(),
                    operation: e["operation"].as_str().unwrap_or_default().to_owned(),
                    api_version: e["apiVersion"].as_str().unwrap_or_default().to_owned(),
                    time: e["time"].clone(),
                    subresource: e["subresource"].as_str().map(str::to_owned),
                    set: set_of(&e["fieldsV1"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn entries_to_value(entries: &[Entry]) -> Value {
    Value::Array(
        entries
            .iter()
            .map(|e| {
                let mut v = json!({
                    "manager": e.manager,
                    "operation": e.operation,
                    "apiVersion": e.api_version,
                    "time": e.time,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": to_fields_v1(&e.set),
                });
                if let Some(s) = &e.subresource {
                    v["subresource"] = s.clone().into();
                }
                v
            })
            .collect(),
    )
}

fn now() -> Value {
    crate::store::now().into()
}

/// Puts `set` into the entry of (manager, operation, subresource), creating it if needed; the
/// time changes only when the set does.
fn set_entry(
    entries: &mut Vec<Entry>,
    manager: &str,
    operation: &str,
    api_version: &str,
    sub: Option<&str>,
    set: FieldSet,
) {
    let pos = entries.iter().position(|e| {
        e.manager == manager && e.operation == operation && e.subresource.as_deref() == sub
    });
    match pos {
        Some(i) => {
            if entries[i].set != set || entries[i].api_version != api_version {
                entries[i].set = set;
                entries[i].api_version = api_version.to_owned();
                entries[i].time = now();
            }
        }
        None => entries.push(Entry {
            manager: manager.to_owned(),
            operation: operation.to_owned(),
            api_version: api_version.to_owned(),
            time: now(),
            subresource: sub.map(str::to_owned),
            set,
        }),
    }
    entries.retain(|e| !e.set.is_empty());
}

fn is_marker(set: &FieldSet, p: &FieldPath) -> bool {
    set.iter().any(|q| q.len() > p.len() && q.starts_with(p))
}

/// A non-apply write: the writer gains the fields it changed; other managers lose fields whose
/// values changed or disappeared.
pub(crate) fn record_update(
    entries: &mut Vec<Entry>,
    old: &Value,
    new: &Value,
    changed: FieldSet,
    manager: &str,
    api_version: &str,
    sub: Option<&str>,
) {
    for e in entries.iter_mut() {
        if e.manager == manager && e.operation == "Update" && e.subresource.as_deref() == sub {
            continue;
        }
        let snapshot = e.set.clone();
        e.set.retain(|p| {
            let now = value_at(new, p);
            if is_marker(&snapshot, p) {
                now.is_some()
            } else {
                now.is_some() && now == value_at(old, p)
            }
        });
    }
    let mut mine = entries
        .iter()
        .find(|e| {
            e.manager == manager && e.operation == "Update" && e.subresource.as_deref() == sub
        })
        .map(|e| e.set.clone())
        .unwrap_or_default();
    mine.retain(|p| value_at(new, p).is_some());
    mine.extend(changed);
    set_entry(entries, manager, "Update", api_version, sub, mine);
}

/// Applies `cfg` (whose field set is `newset`) for `manager` onto `obj`: checks conflicts with
/// other managers (unless `force`, which takes the fields over), prunes what the manager
/// applied before but no longer does (unless someone else owns it), merges, and records the
/// manager's new field set.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply(
    entries: &mut Vec<Entry>,
    obj: &mut Value,
    cfg: &Value,
    newset: FieldSet,
    manager: &str,
    force: bool,
    api_version: &str,
    sub: Option<&str>,
    builtin: bool,
) -> Result<(), Vec<Conflict>> {
    let mut conflicts = Vec::new();
    for e in entries.iter().filter(|e| e.manager != manager) {
        for p in newset.intersection(&e.set) {
            if is_marker(&newset, p) {
                continue;
            }
            if value_at(obj, p) != value_at(cfg, p) {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    operation: e.operation.clone(),
                    api_version: e.api_version.clone(),
                    path: p.clone(),
                });
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflicts);
        }
        for e in entries.iter_mut().filter(|e| e.manager != manager) {
            for c in &conflicts {
                if c.manager == e.manager {
                    e.set.remove(&c.path);
                }
            }
        }
    }
    let oldset = entries
        .iter()
        .find(|e| e.manager == manager && e.operation == "Apply" && e.subresource.as_deref() == sub)
        .map(|e| e.set.clone())
        .unwrap_or_default();
    let mut gone: Vec<&FieldPath> = oldset.difference(&newset).collect();
    gone.sort_by_key(|p| p.len());
    for p in gone {
        let owned_elsewhere = newset.iter().any(|q| q.starts_with(p))
            || entries
                .iter()
                .filter(|e| {
                    !(e.manager == manager
                        && e.operation == "Apply"
                        && e.subresource.as_deref() == sub)
                })
                .any(|e| e.set.iter().any(|q| q.starts_with(p)));
        if !owned_elsewhere {
            remove_at(obj, p);
        }
    }
    merge::merge_keyed(obj, cfg, &mut Vec::new(), builtin, false);
    set_entry(entries, manager, "Apply", api_version, sub, newset);
    Ok(())
}

/// The apiserver's text for apply conflicts.
pub(crate) fn conflict_message(conflicts: &[Conflict]) -> String {
    let who = |c: &Conflict| {
        if c.operation == "Apply" {
            format!("{:?}", c.manager)
        } else {
            format!("{:?} using {}", c.manager, c.api_version)
        }
    };
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            who(c),
            display(&c.path)
        );
    }
    let mut out = format!("Apply failed with {} conflicts: ", conflicts.len());
    let mut first = true;
    let mut managers: Vec<String> = conflicts.iter().map(who).collect();
    managers.dedup();
    for m in managers {
        if !first {
            out.push('\n');
        }
        first = false;
        out.push_str(&format!("conflicts with {m}:"));
        for c in conflicts.iter().filter(|c| who(c) == m) {
            out.push_str(&format!("\n- {}", display(&c.path)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_sets_round_trip_through_fields_v1() {
        let f = json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"u\"}": {".": {}, "f:name": {}}}}});
        let set = set_of(&f);
        assert_eq!(set.len(), 4);
        assert_eq!(to_fields_v1(&set), f);
    }

    #[test]
    fn apply_reports_conflicts_and_force_takes_ownership() {
        let mut obj = json!({"data": {"x": "1"}});
        let mut entries = Vec::new();
        let cfg1 = json!({"data": {"x": "1"}});
        let set1 = set_of(&merge::fields_v1(&cfg1, &mut Vec::new(), true));
        apply(
            &mut entries,
            &mut obj,
            &cfg1,
            set1,
            "m1",
            false,
            "v1",
            None,
            true,
        )
        .unwrap();
        let cfg2 = json!({"data": {"x": "2"}});
        let set2 = set_of(&merge::fields_v1(&cfg2, &mut Vec::new(), true));
        let c = apply(
            &mut entries,
            &mut obj,
            &cfg2,
            set2.clone(),
            "m2",
            false,
            "v1",
            None,
            true,
        )
        .unwrap_err();
        assert_eq!(
            conflict_message(&c),
            "Apply failed with 1 conflict: conflict with \"m1\": .data.x"
        );
        apply(
            &mut entries,
            &mut obj,
            &cfg2,
            set2,
            "m2",
            true,
            "v1",
            None,
            true,
        )
        .unwrap();
        assert_eq!(obj, json!({"data": {"x": "2"}}));
        // m1 lost the field: applying nothing no longer prunes it.
        apply(
            &mut entries,
            &mut obj,
            &json!({}),
            FieldSet::new(),
            "m1",
            false,
            "v1",
            None,
            true,
        )
        .unwrap();
        assert_eq!(obj, json!({"data": {"x": "2"}}));
    }
}
