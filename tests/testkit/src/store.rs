//! The object store: resourceVersions, the event log, watch subscribers, and the write paths
//! (create, update, patch, apply, delete) with the semantics of the real apiserver that
//! controllers depend on.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use kseal_api::validation;

use crate::error::{ApiError, ApiResult, FieldError};
use crate::managed;
use crate::merge;
use crate::registry::{self, ResourceType, TypeKey};

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub(crate) type ObjName = (String, String);

/// Retired events kept for a request to drop at most (see [`State::take_retired`]).
const RETIRED_MAX: usize = 1024;

/// A change, as kept in the event log and sent to watchers.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) rv: u64,
    pub(crate) tkey: TypeKey,
    pub(crate) ns: String,
    pub(crate) etype: &'static str,
    pub(crate) obj: Arc<Value>,
    /// The previous state for MODIFIED events (selector transitions need it).
    pub(crate) old: Option<Arc<Value>>,
}

struct Subscriber {
    tkey: TypeKey,
    tx: mpsc::UnboundedSender<Arc<Event>>,
}

/// How a write reaches an existing object.
pub(crate) struct WriteReq<'a> {
    /// Writing through `/status`.
    pub(crate) status: bool,
    pub(crate) manager: &'a str,
    /// PUT: the body replaces the object (resourceVersion may be required).
    pub(crate) is_put: bool,
    /// Requested API version (recorded in managedFields).
    pub(crate) version: &'a str,
    /// For apply: the managedFields entries computed by the apply.
    pub(crate) managed: Option<Vec<managed::Entry>>,
    /// Do not persist (dryRun=All).
    pub(crate) dry_run: bool,
}

/// Options of a DELETE.
#[derive(Debug, Default, Clone)]
pub(crate) struct DeleteOpts {
    pub(crate) propagation: Option<String>,
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
    pub(crate) dry_run: bool,
}

/// The state behind one test API server.
pub(crate) struct State {
    rv: u64,
    pub(crate) types: BTreeMap<TypeKey, ResourceType>,
    /// Shared with the event log and the write that stored it: an object is copied only when
    /// a write changes it.
    objects: HashMap<TypeKey, BTreeMap<ObjName, Arc<Value>>>,
    /// uid -> where the object lives (for garbage collection).
    uids: HashMap<String, (TypeKey, ObjName)>,
    log: VecDeque<Arc<Event>>,
    /// Highest resourceVersion no longer covered by the log.
    compacted: u64,
    log_limit: usize,
    /// Events that left the log, dropped by [`State::take_retired`]'s caller once the lock is
    /// released: the last copy of an object's older state often goes with them.
    retired: Vec<Arc<Event>>,
    subs: Vec<Subscriber>,
}

/// The finalizer the apiserver puts on a CRD being deleted until its objects are gone.
const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

fn crd_type_key() -> TypeKey {
    (
        "apiextensions.k8s.io".to_owned(),
        "customresourcedefinitions".to_owned(),
    )
}

fn is_crd_key(tk: &TypeKey) -> bool {
    tk.0 == "apiextensions.k8s.io" && tk.1 == "customresourcedefinitions"
}

/// The current time as the apiserver writes timestamps (RFC 3339, seconds, UTC).
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A random RFC 4122 v4 uid.
pub(crate) fn new_uid() -> String {
    let mut b = [0u8; 16];
    fill_random(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub(crate) fn fill_random(buf: &mut [u8]) {
    if getrandom::fill(buf).is_err() {
        // Entropy is only used for uniqueness in tests; fall back to the clock.
        let t = jiff::Timestamp::now().as_nanosecond();
        for (i, x) in buf.iter_mut().enumerate() {
            *x = (t >> ((i % 16) * 8)) as u8 ^ (i as u8);
        }
    }
}

fn random_suffix(n: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut b = vec![0u8; n];
    fill_random(&mut b);
    b.iter()
        .map(|x| ALPHABET[*x as usize % ALPHABET.len()] as char)
        .collect()
}

fn meta(obj: &Value) -> &Value {
    &obj["metadata"]
}

/// `metadata` as a map, created when missing. `obj` must be a JSON object.
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    match &mut obj["metadata"] {
        Value::Object(m) => m,
        // Invariant: set to an object just above.
        _ => unreachable!("metadata is an object"),
    }
}

fn str_of<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The field errors of `value` under `field`, one per problem of a `kseal_api::validation`
/// check (apimachinery's rules and messages).
fn field_errors(
    field: &str,
    value: &str,
    check: Result<(), validation::InvalidName>,
) -> Vec<FieldError> {
    match check {
        Ok(()) => Vec::new(),
        Err(e) => e
            .problems()
            .iter()
            .map(|p| FieldError::invalid(field, &format!("{value:?}"), p))
            .collect(),
    }
}

/// The errors of an object's name: a DNS-1123 label for namespaces, else a subdomain.
fn name_errors(name: &str, label: bool) -> Vec<FieldError> {
    let check = if label {
        validation::validate_namespace_name(name)
    } else {
        validation::validate_secret_name(name)
    };
    field_errors("metadata.name", name, check)
}

/// Compares two objects the way the apiserver's no-op detection does: resourceVersion and
/// managedFields timestamps do not count.
fn same_ignoring_bookkeeping(a: &Value, b: &Value) -> bool {
    // Compared in place: this runs under the server's one lock on every write.
    let (Some(am), Some(bm)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let same_meta = match (
        am.get("metadata").and_then(Value::as_object),
        bm.get("metadata").and_then(Value::as_object),
    ) {
        (Some(x), Some(y)) => {
            same_except(x, y, |k| matches!(k, "resourceVersion" | "managedFields"))
                && same_managed_fields(x.get("managedFields"), y.get("managedFields"))
        }
        _ => am.get("metadata") == bm.get("metadata"),
    };
    same_meta && same_except(am, bm, |k| k == "metadata")
}

/// Two `managedFields` alike but for each entry's `time`.
fn same_managed_fields(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(e, f)| match (e.as_object(), f.as_object()) {
                        (Some(e), Some(f)) => same_except(e, f, |k| k == "time"),
                        _ => e == f,
                    })
        }
        _ => a == b,
    }
}

/// Two maps with the same entries, those whose key `skip` names aside.
fn same_except(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    skip: impl Fn(&str) -> bool,
) -> bool {
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Whether two objects have the same content that counts for `metadata.generation`: everything
/// but metadata (and status when the type has a status subresource).
fn same_spec(a: &Value, b: &Value, status_sub: bool) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => same_except(a, b, |k| {
            matches!(k, "metadata" | "apiVersion" | "kind") || (status_sub && k == "status")
        }),
        _ => a == b,
    }
}

/// Fields (as a fieldsV1 set) that differ from `old` in `new`; additions and changes only.
fn changed_fields(
    old: &Value,
    new: &Value,
    path: &mut Vec<String>,
    builtin: bool,
) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = Map::new();
            for (k, nv) in n {
                if path.is_empty() && (k == "apiVersion" || k == "kind") {
                    continue;
                }
                if path.len() == 1
                    && path[0] == "metadata"
                    && !matches!(
                        k.as_str(),
                        "labels" | "annotations" | "finalizers" | "ownerReferences"
                    )
                {
                    continue;
                }
                let ov = o.get(k).unwrap_or(&Value::Null);
                if ov == nv {
                    continue;
                }
                path.push(k.clone());
                let sub = if ov.is_object() && nv.is_object() {
                    changed_fields(ov, nv, path, builtin)
                } else if nv.is_object() {
                    Some(merge::fields_v1(nv, path, builtin))
                } else {
                    Some(json!({}))
                };
                path.pop();
                if let Some(sub) = sub {
                    out.insert(format!("f:{k}"), sub);
                }
            }
            if out.is_empty() {
                None
            } else {
                Some(Value::Object(out))
            }
        }
        _ => None,
    }
}

/// The applied configuration: what the manager set, minus identity fields (and minus status,
/// or only status, for types with a status subresource).
fn applied_config(body: &Value, rt: &ResourceType, status: bool) -> Value {
    let mut cfg = body.clone();
    if let Some(m) = cfg.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        if rt.status {
            if status {
                m.retain(|k, _| k == "status");
            } else {
                m.remove("status");
            }
        }
        if let Some(md) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            md.retain(|k, _| {
                matches!(
                    k.as_str(),
                    "labels" | "annotations" | "finalizers" | "ownerReferences"
                )
            });
        }
        if m.get("metadata")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        {
            m.remove("metadata");
        }
    }
    cfg
}

impl State {
    pub(crate) fn new() -> Self {
        let mut s = Self {
            rv: 0,
            types: BTreeMap::new(),
            objects: HashMap::new(),
            uids: HashMap::new(),
            log: VecDeque::new(),
            compacted: 0,
            log_limit: 10_000,
            retired: Vec::new(),
            subs: Vec::new(),
        };
        for t in registry::builtins() {
            s.types.insert(t.type_key(), t);
        }
        let ns_type = s.types[&(String::new(), "namespaces".to_owned())].clone();
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            // Invariant: the built-in namespaces are valid and do not exist yet.
            if let Err(e) = s.create(&ns_type, None, obj, "kseal-testkit", "Update", "v1", false) {
                tracing::error!(error = %e.message, "creating built-in namespace failed");
            }
        }
        s
    }

    /// The current (latest) resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    pub(crate) fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.types
            .get(&(group.to_owned(), plural.to_owned()))
            .filter(|t| t.versions.iter().any(|v| v == version))
            .cloned()
    }

    /// Finds a type by `apiVersion` and `kind`.
    pub(crate) fn resolve_kind(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Option<(ResourceType, String)> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.types
            .values()
            .find(|t| t.group == group && t.kind == kind && t.versions.iter().any(|v| v == version))
            .map(|t| (t.clone(), version.to_owned()))
    }

    pub(crate) fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.types
            .values()
            .any(|t| t.group == group && t.versions.iter().any(|v| v == version))
    }

    pub(crate) fn type_list(&self) -> Vec<&ResourceType> {
        self.types.values().collect()
    }

    pub(crate) fn get(&self, tk: &TypeKey, ns: &str, name: &str) -> Option<&Value> {
        self.shared(tk, ns, name).map(|o| &**o)
    }

    /// The stored object itself, to read after the lock is released.
    pub(crate) fn shared(&self, tk: &TypeKey, ns: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects.get(tk)?.get(&(ns.to_owned(), name.to_owned()))
    }

    /// The objects of a type (in `ns`, if given) after the (namespace, name) key `after`, in
    /// key order: a page of a paged list starts where the last one ended instead of walking
    /// the objects before it.
    pub(crate) fn list_after<'a>(
        &'a self,
        tk: &TypeKey,
        ns: Option<&'a str>,
        after: Option<&ObjName>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.shared_after(tk, ns, after).map(|o| &**o)
    }

    /// [`State::list_after`]'s stored objects themselves, to keep past the lock.
    pub(crate) fn shared_after<'a>(
        &'a self,
        tk: &TypeKey,
        ns: Option<&'a str>,
        after: Option<&ObjName>,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        use std::ops::Bound;
        let lower = after.map_or(Bound::Unbounded, |k| Bound::Excluded(k.clone()));
        self.objects
            .get(tk)
            .into_iter()
            .flat_map(move |m| m.range((lower.clone(), Bound::Unbounded)))
            .filter(move |((n, _), _)| ns.is_none_or(|ns| ns == n))
            .map(|(_, o)| o)
    }

    /// Objects of a type, optionally in one namespace, in (namespace, name) order.
    pub(crate) fn list<'a>(&'a self, tk: &TypeKey, ns: Option<&'a str>) -> Vec<&'a Value> {
        self.list_after(tk, ns, None).collect()
    }

    /// Events that have left the log since the last call, for the caller to drop after it
    /// releases the lock.
    pub(crate) fn take_retired(&mut self) -> Vec<Arc<Event>> {
        std::mem::take(&mut self.retired)
    }

    /// Subscribes to the changes of a type. Call under the same lock as reading the snapshot or
    /// log, so that nothing falls between them.
    pub(crate) fn subscribe(&mut self, tk: &TypeKey) -> mpsc::UnboundedReceiver<Arc<Event>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subs.retain(|s| !s.tx.is_closed());
        self.subs.push(Subscriber {
            tkey: tk.clone(),
            tx,
        });
        rx
    }

    /// Events of a type after `rv`, or `Err` when the log no longer reaches back that far.
    pub(crate) fn events_since(&self, tk: &TypeKey, rv: u64) -> ApiResult<Vec<Arc<Event>>> {
        if rv < self.compacted {
            return Err(ApiError::expired(rv, self.compacted + 1));
        }
        Ok(self
            .log
            .iter()
            .filter(|e| e.rv > rv && &e.tkey == tk)
            .cloned()
            .collect())
    }

    /// Number of watches still connected.
    pub(crate) fn open_watches(&self) -> usize {
        self.subs.iter().filter(|s| !s.tx.is_closed()).count()
    }

    /// Ends every open watch (the streams close, clients re-watch).
    pub(crate) fn drop_watches(&mut self) {
        self.subs.clear();
    }

    /// Forgets the event log: watches resuming from any older resourceVersion get 410 Expired.
    pub(crate) fn compact(&mut self) {
        self.log.clear();
        self.compacted = self.rv;
    }

    fn emit(
        &mut self,
        etype: &'static str,
        tk: &TypeKey,
        ns: &str,
        obj: Arc<Value>,
        old: Option<Arc<Value>>,
    ) {
        let ev = Arc::new(Event {
            rv: self.rv,
            tkey: tk.clone(),
            ns: ns.to_owned(),
            etype,
            obj,
            old,
        });
        self.log.push_back(ev.clone());
        if self.retired.len() >= RETIRED_MAX {
            // Nobody took them (writes made outside a request): dropped here, as before.
            self.retired.clear();
        }
        while self.log.len() > self.log_limit {
            if let Some(e) = self.log.pop_front() {
                self.compacted = e.rv;
                self.retired.push(e);
            }
        }
        self.subs
            .retain(|s| s.tkey != *tk || s.tx.send(ev.clone()).is_ok());
    }

    fn bump(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    fn ns_check(&self, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<()> {
        if !rt.namespaced {
            return Ok(());
        }
        let nsk = (String::new(), "namespaces".to_owned());
        match self.get(&nsk, "", ns) {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(n) if meta(n).get("deletionTimestamp").is_some() => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    crate::error::qualified(&rt.group, &rt.plural),
                ),
            )
            .with_details(&rt.group, &rt.plural, name)),
            Some(_) => Ok(()),
        }
    }

    /// Type-specific defaulting and validation, shared by create and update.
    fn type_rules(
        &self,
        rt: &ResourceType,
        old: Option<&Value>,
        obj: &mut Value,
        status: bool,
    ) -> ApiResult<()> {
        let name = str_of(meta(obj), "name").unwrap_or_default().to_owned();
        match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "secrets") => {
                let m = obj
                    .as_object_mut()
                    .ok_or_else(|| ApiError::bad_request("object expected"))?;
                let cannot = |msg: String| {
                    ApiError::bad_request(format!(
                        "Secret in version \"v1\" cannot be handled as a Secret: {msg}"
                    ))
                };
                if let Some(sd) = m.remove("stringData") {
                    let Value::Object(sd) = sd else {
                        return Err(cannot("stringData must be an object".into()));
                    };
                    let data = m.entry("data").or_insert_with(|| json!({}));
                    if !data.is_object() {
                        *data = json!({});
                    }
                    for (k, v) in sd {
                        let s = v
                            .as_str()
                            .ok_or_else(|| cannot(format!("stringData.{k} must be a string")))?;
                        data[k] = base64::engine::general_purpose::STANDARD.encode(s).into();
                    }
                }
                if let Some(data) = m.get("data") {
                    let Some(data) = data.as_object() else {
                        return Err(cannot("data must be an object".into()));
                    };
                    for (k, v) in data {
                        let s = v
                            .as_str()
                            .ok_or_else(|| cannot(format!("data.{k} must be a base64 string")))?;
                        if let Err(e) = base64::engine::general_purpose::STANDARD.decode(s) {
                            return Err(cannot(format!(
                                "v1.Secret.Data: decode base64: illegal base64 data at input byte {}",
                                base64_error_offset(&e)
                            )));
                        }
                        let errs = field_errors(
                            &format!("data[{k}]"),
                            k,
                            validation::is_config_map_key(k),
                        );
                        if !errs.is_empty() {
                            return Err(ApiError::invalid("", "Secret", &name, &errs));
                        }
                    }
                }
                let size: usize = m
                    .get("data")
                    .and_then(Value::as_object)
                    .map(|d| {
                        d.iter()
                            .map(|(k, v)| {
                                k.len()
                                    + v.as_str()
                                        .and_then(|s| {
                                            base64::engine::general_purpose::STANDARD.decode(s).ok()
                                        })
                                        .map_or(0, |b| b.len())
                            })
                            .sum()
                    })
                    .unwrap_or(0);
                if size > 1 << 20 {
                    return Err(ApiError::invalid(
                        "",
                        "Secret",
                        &name,
                        &[FieldError {
                            field: "data".into(),
                            reason: "FieldValueTooLong",
                            detail: "must have at most 1048576 bytes".into(),
                            value: None,
                        }],
                    ));
                }
                if !m.contains_key("type") {
                    m.insert("type".into(), "Opaque".into());
                }
                let type_errs = secret_type_rules(m);
                let mut errs = Vec::new();
                if let Some(old) = old {
                    if old["type"] != obj["type"] {
                        errs.push(FieldError::invalid(
                            "type",
                            &format!("{}", obj["type"]),
                            "field is immutable",
                        ));
                    }
                    immutable_rules(old, obj, &["data"], &mut errs);
                }
                // ValidateSecretUpdate checks the update's rules, then ValidateSecret's.
                errs.extend(type_errs);
                if !errs.is_empty() {
                    return Err(ApiError::invalid("", "Secret", &name, &errs));
                }
            }
            ("", "services") if old.is_none() => {
                // Defaults the apiserver applies (a ClusterIP is allocated from 10.0.0.0/24).
                let spec = obj["spec"].as_object_mut().cloned().unwrap_or_default();
                let mut spec = Value::Object(spec);
                if spec.get("type").is_none() {
                    spec["type"] = "ClusterIP".into();
                }
                if spec.get("clusterIP").is_none() && spec["type"] != "ExternalName" {
                    let ip = format!("10.0.0.{}", 10 + self.rv % 240);
                    spec["clusterIP"] = ip.clone().into();
                    spec["clusterIPs"] = json!([ip]);
                }
                if spec.get("sessionAffinity").is_none() {
                    spec["sessionAffinity"] = "None".into();
                }
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                        p.entry("protocol").or_insert_with(|| "TCP".into());
                        if !p.contains_key("targetPort") {
                            let port = p.get("port").cloned().unwrap_or(Value::Null);
                            p.insert("targetPort".into(), port);
                        }
                    }
                }
                obj["spec"] = spec;
                obj["status"] = json!({"loadBalancer": {}});
            }
            ("", "configmaps") => {
                if let Some(old) = old {
                    let mut errs = Vec::new();
                    immutable_rules(old, obj, &["data", "binaryData"], &mut errs);
                    if !errs.is_empty() {
                        return Err(ApiError::invalid("", "ConfigMap", &name, &errs));
                    }
                }
            }
            ("", "namespaces") => match old {
                None => {
                    obj["spec"] = json!({"finalizers": ["kubernetes"]});
                    obj["status"] = json!({"phase": "Active"});
                }
                Some(old) if !status => {
                    obj["spec"] = old["spec"].clone();
                }
                Some(_) => {}
            },
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                let parsed = registry::from_crd(obj).map_err(|errs| {
                    ApiError::invalid(&rt.group, "CustomResourceDefinition", &name, &errs)
                })?;
                if old.is_none()
                    && let Some(existing) = self.types.get(&parsed.type_key())
                    && existing.builtin
                {
                    return Err(ApiError::invalid(
                        &rt.group,
                        "CustomResourceDefinition",
                        &name,
                        &[FieldError::invalid(
                            "spec.group",
                            &format!("{:?}", parsed.group),
                            "is a built-in group",
                        )],
                    ));
                }
                let names = obj["spec"]["names"].clone();
                let mut accepted = names.clone();
                if accepted.get("singular").is_none() {
                    accepted["singular"] = parsed.singular.clone().into();
                }
                if accepted.get("listKind").is_none() {
                    accepted["listKind"] = parsed.list_kind.clone().into();
                }
                let t = now();
                obj["status"] = json!({
                    "acceptedNames": accepted,
                    "conditions": [
                        {"type": "NamesAccepted", "status": "True", "lastTransitionTime": t, "reason": "NoConflicts", "message": "no conflicts found"},
                        {"type": "Established", "status": "True", "lastTransitionTime": t, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
                    ],
                    "storedVersions": [parsed.storage_version()],
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// Creates an object. `ns` is the namespace of the URL (None for cluster-scoped types).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        mut obj: Value,
        manager: &str,
        operation: &'static str,
        version: &str,
        dry_run: bool,
    ) -> ApiResult<Arc<Value>> {
        self.create_inner(rt, ns, &mut obj, manager, operation, version, None, dry_run)
    }

    #[allow(clippy::too_many_arguments)]
    fn create_inner(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        obj: &mut Value,
        manager: &str,
        operation: &'static str,
        version: &str,
        apply_cfg: Option<Value>,
        dry_run: bool,
    ) -> ApiResult<Arc<Value>> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the object provided is not a JSON object",
            ));
        }
        check_type_meta(rt, version, obj)?;
        let api_version = rt.api_version(version);
        obj["apiVersion"] = api_version.clone().into();
        obj["kind"] = rt.kind.clone().into();
        let m = meta_mut(obj);
        let body_ns = m
            .get("namespace")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let ns = if rt.namespaced {
            let ns = ns.unwrap_or_default().to_owned();
            if body_ns.as_ref().is_some_and(|b| !b.is_empty() && *b != ns) {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            m.insert("namespace".into(), ns.clone().into());
            ns
        } else {
            m.remove("namespace");
            String::new()
        };
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if name.is_empty() {
            if let Some(g) = m
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
            {
                name = format!("{g}{}", random_suffix(5));
                m.insert("name".into(), name.clone().into());
            } else {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    "",
                    &[FieldError::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ));
            }
        }
        let errs = name_errors(&name, rt.plural == "namespaces");
        if !errs.is_empty() {
            return Err(ApiError::invalid(&rt.group, &rt.kind, &name, &errs));
        }
        if m.get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|r| !r.is_empty())
        {
            // The apiserver answers exactly this: a 500 without a reason.
            return Err(ApiError::new(
                500,
                "",
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let errs = metadata_errors(obj);
        if !errs.is_empty() {
            return Err(ApiError::invalid(&rt.group, &rt.kind, &name, &errs));
        }
        let m = meta_mut(obj);
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
            "managedFields",
        ] {
            m.remove(k);
        }
        self.ns_check(rt, &ns, &name)?;
        if !rt.builtin
            && self
                .get(&crd_type_key(), "", &format!("{}.{}", rt.plural, rt.group))
                .is_some_and(|c| meta(c).get("deletionTimestamp").is_some())
        {
            let mut e = ApiError::new(
                405,
                "MethodNotAllowed",
                "create not allowed while custom resource definition is terminating",
            );
            e.details = Some(Box::default());
            return Err(e);
        }
        let tk = rt.key();
        if self.get(&tk, &ns, &name).is_some() {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        if rt.status
            && !rt.builtin
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        self.type_rules(rt, None, obj, false)?;
        let fields = {
            let mut f = obj.clone();
            if let Some(md) = f.get_mut("metadata").and_then(Value::as_object_mut) {
                md.retain(|k, _| {
                    matches!(
                        k.as_str(),
                        "labels" | "annotations" | "finalizers" | "ownerReferences"
                    )
                });
            }
            if let Some(o) = f.as_object_mut() {
                o.remove("apiVersion");
                o.remove("kind");
                if o.get("metadata")
                    .and_then(Value::as_object)
                    .is_some_and(Map::is_empty)
                {
                    o.remove("metadata");
                }
            }
            match &apply_cfg {
                Some(cfg) => merge::fields_v1(cfg, &mut Vec::new(), rt.builtin),
                None => merge::fields_v1(&f, &mut Vec::new(), rt.builtin),
            }
        };
        let uid = new_uid();
        let m = meta_mut(obj);
        m.insert("uid".into(), uid.clone().into());
        m.insert("creationTimestamp".into(), now().into());
        if rt.generation {
            m.insert("generation".into(), 1.into());
        }
        m.insert(
            "managedFields".into(),
            json!([{
                "manager": manager,
                "operation": operation,
                "apiVersion": api_version,
                "time": now(),
                "fieldsType": "FieldsV1",
                "fieldsV1": fields,
            }]),
        );
        if dry_run {
            return Ok(Arc::new(std::mem::take(obj)));
        }
        let rv = self.bump();
        meta_mut(obj).insert("resourceVersion".into(), rv.into());
        let stored = Arc::new(std::mem::take(obj));
        self.objects
            .entry(tk.clone())
            .or_default()
            .insert((ns.clone(), name.clone()), stored.clone());
        self.uids.insert(uid, (tk.clone(), (ns.clone(), name)));
        if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
            self.register_crd(&stored);
        }
        self.emit("ADDED", &tk, &ns, stored.clone(), None);
        Ok(stored)
    }

    fn register_crd(&mut self, crd: &Value) {
        if let Ok(t) = registry::from_crd(crd) {
            self.types.insert(t.type_key(), t);
        }
    }

    /// Writes a new state of an existing object (PUT, patches, apply to an existing object).
    pub(crate) fn write_existing(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        mut new: Value,
        req: WriteReq<'_>,
    ) -> ApiResult<Arc<Value>> {
        let tk = rt.key();
        let key = (ns.to_owned(), name.to_owned());
        let stored = self
            .objects
            .get(&tk)
            .and_then(|m| m.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        let old: &Value = &stored;
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the object provided is not a JSON object",
            ));
        }
        check_type_meta(rt, req.version, &new)?;
        let body_name = str_of(meta(&new), "name").unwrap_or_default().to_owned();
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if rt.namespaced {
            let body_ns = str_of(meta(&new), "namespace").unwrap_or_default();
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        match str_of(meta(&new), "resourceVersion").filter(|r| !r.is_empty()) {
            Some(rv) if Some(rv) != str_of(meta(old), "resourceVersion") => {
                return Err(ApiError::conflict(&rt.group, &rt.plural, name));
            }
            None if req.is_put && !rt.unconditional_update => {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    name,
                    &[FieldError::invalid(
                        "metadata.resourceVersion",
                        "0x0",
                        "must be specified for an update",
                    )],
                ));
            }
            _ => {}
        }
        // uid and deletionTimestamp cannot be changed by writes (creationTimestamp and
        // generation are silently kept instead).
        for field in ["uid", "deletionTimestamp"] {
            let given = meta(&new)
                .get(field)
                .filter(|v| !v.is_null() && v.as_str() != Some(""));
            if let Some(v) = given
                && Some(v) != meta(old).get(field)
            {
                let shown = match v.as_str() {
                    Some(s) if field == "uid" => format!("{s:?}"),
                    Some(s) => s.to_owned(),
                    None => v.to_string(),
                };
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    name,
                    &[FieldError::invalid(
                        &format!("metadata.{field}"),
                        &shown,
                        "field is immutable",
                    )],
                ));
            }
        }
        // Subresource split.
        if rt.status {
            if req.status {
                let status = new.get("status").cloned();
                let mut merged = old.clone();
                match status {
                    Some(s) => merged["status"] = s,
                    None => {
                        if let Some(o) = merged.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                new = merged;
            } else {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
        }
        // System fields come from storage.
        new["apiVersion"] = old["apiVersion"].clone();
        new["kind"] = old["kind"].clone();
        {
            let om = meta(old).clone();
            let nm = meta_mut(&mut new);
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "selfLink",
                "namespace",
                "managedFields",
            ] {
                match om.get(k) {
                    Some(v) => nm.insert(k.to_owned(), v.clone()),
                    None => nm.remove(k),
                };
            }
            nm.insert("resourceVersion".into(), om["resourceVersion"].clone());
        }
        let errs = metadata_errors(&new);
        if !errs.is_empty() {
            return Err(ApiError::invalid(&rt.group, &rt.kind, name, &errs));
        }
        self.type_rules(rt, Some(old), &mut new, req.status)?;
        if rt.plural == "customresourcedefinitions" && !req.status {
            new["status"] = old["status"].clone();
        }
        // No new finalizers while deleting.
        if meta(old).get("deletionTimestamp").is_some() {
            let before = finalizers(old);
            let added: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                let list = added
                    .iter()
                    .map(|f| format!("{f:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    name,
                    &[FieldError::forbidden(
                        "metadata.finalizers",
                        &format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
                        ),
                    )],
                ));
            }
        }
        if rt.generation && !same_spec(old, &new, rt.status) {
            let g = meta(old)["generation"].as_i64().unwrap_or(0) + 1;
            meta_mut(&mut new).insert("generation".into(), g.into());
        }
        // managedFields.
        let sub = req.status.then_some("status");
        let entries = match req.managed {
            Some(entries) => entries,
            None => {
                let mut entries = managed::entries_of(old);
                let changed = changed_fields(old, &new, &mut Vec::new(), rt.builtin)
                    .map(|f| managed::set_of(&f))
                    .unwrap_or_default();
                let api_version = rt.api_version(req.version);
                managed::record_update(
                    &mut entries,
                    old,
                    &new,
                    changed,
                    req.manager,
                    &api_version,
                    sub,
                );
                entries
            }
        };
        if entries.is_empty() {
            meta_mut(&mut new).remove("managedFields");
        } else {
            meta_mut(&mut new).insert("managedFields".into(), managed::entries_to_value(&entries));
        }
        if same_ignoring_bookkeeping(old, &new) {
            return Ok(stored);
        }
        if req.dry_run {
            return Ok(Arc::new(new));
        }
        let rv = self.bump();
        meta_mut(&mut new).insert("resourceVersion".into(), rv.clone().into());
        let deleting = meta(&new).get("deletionTimestamp").is_some() && finalizers(&new).is_empty();
        if deleting {
            // As the apiserver does: the object is deleted instead of updated; the DELETED event
            // carries the last stored state at the deletion's resourceVersion, the response the
            // new state at the previous one.
            let mut gone = old.clone();
            meta_mut(&mut gone).insert("resourceVersion".into(), rv.into());
            if let Some(s) = self.objects.get_mut(&tk).and_then(|m| m.get_mut(&key)) {
                *s = Arc::new(gone);
            }
            self.remove(&tk, &key);
            meta_mut(&mut new).insert(
                "resourceVersion".into(),
                old["metadata"]["resourceVersion"].clone(),
            );
            return Ok(Arc::new(new));
        }
        let new = Arc::new(new);
        if let Some(s) = self.objects.get_mut(&tk).and_then(|m| m.get_mut(&key)) {
            *s = new.clone();
        }
        if rt.plural == "customresourcedefinitions" && rt.group == "apiextensions.k8s.io" {
            self.register_crd(&new);
        }
        self.emit("MODIFIED", &tk, ns, new.clone(), Some(stored));
        Ok(new)
    }

    /// Server-side apply. Returns the object and whether it was created.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        body: Value,
        manager: &str,
        status: bool,
        force: bool,
        version: &str,
        dry_run: bool,
    ) -> ApiResult<(Arc<Value>, bool)> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the object provided is not a JSON object",
            ));
        }
        check_type_meta(rt, version, &body)?;
        if body.get("apiVersion").is_none() || body.get("kind").is_none() {
            return Err(ApiError::bad_request(
                "apply patches must specify apiVersion and kind",
            ));
        }
        if let Some(n) = str_of(meta(&body), "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let cfg = applied_config(&body, rt, status);
        let tk = rt.key();
        let key = (ns.to_owned(), name.to_owned());
        let Some(stored) = self.objects.get(&tk).and_then(|m| m.get(&key)).cloned() else {
            if status {
                return Err(ApiError::not_found(&rt.group, &rt.plural, name));
            }
            let mut obj = body;
            meta_mut(&mut obj).insert("name".into(), name.into());
            let nsarg = if rt.namespaced { Some(ns) } else { None };
            let created = self.create_inner(
                rt,
                nsarg,
                &mut obj,
                manager,
                "Apply",
                version,
                Some(cfg),
                dry_run,
            )?;
            return Ok((created, true));
        };
        let newset = managed::set_of(&merge::fields_v1(&cfg, &mut Vec::new(), rt.builtin));
        let mut new = Value::clone(&stored);
        let mut entries = managed::entries_of(&new);
        let sub = status.then_some("status");
        let api_version = rt.api_version(version);
        managed::apply(
            &mut entries,
            &mut new,
            &cfg,
            newset,
            manager,
            force,
            &api_version,
            sub,
            rt.builtin,
        )
        .map_err(|conflicts| {
            let mut e = ApiError::new(409, "Conflict", managed::conflict_message(&conflicts));
            e.details = Some(Box::new(crate::error::Details {
                causes: conflicts
                    .iter()
                    .map(|c| {
                        json!({
                            "reason": "FieldManagerConflict",
                            "message": format!("conflict with {:?}", c.manager),
                            "field": managed::display(&c.path),
                        })
                    })
                    .collect(),
                ..Default::default()
            }));
            e
        })?;
        match str_of(meta(&body), "resourceVersion") {
            Some(rv) => meta_mut(&mut new).insert("resourceVersion".into(), rv.into()),
            None => meta_mut(&mut new).insert(
                "resourceVersion".into(),
                stored["metadata"]["resourceVersion"].clone(),
            ),
        };
        let out = self.write_existing(
            rt,
            ns,
            name,
            new,
            WriteReq {
                status,
                manager,
                is_put: false,
                version,
                managed: Some(entries),
                dry_run,
            },
        )?;
        Ok((out, false))
    }

    /// Removes an object for good: DELETED event, garbage collection, namespace finalization.
    fn remove(&mut self, tk: &TypeKey, key: &ObjName) {
        let Some(stored) = self.objects.get_mut(tk).and_then(|m| m.remove(key)) else {
            return;
        };
        let obj = stored;
        let uid = str_of(meta(&obj), "uid").unwrap_or_default().to_owned();
        self.uids.remove(&uid);
        if tk.0 == "apiextensions.k8s.io"
            && tk.1 == "customresourcedefinitions"
            && let Ok(t) = registry::from_crd(&obj)
        {
            let ctk = t.key();
            let names: Vec<ObjName> = self
                .objects
                .get(&ctk)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            for n in names {
                self.force_remove(&ctk, &n);
            }
            self.types.remove(&ctk);
        }
        self.emit("DELETED", tk, &key.0, obj, None);
        if self.types.get(tk).is_some_and(|t| !t.builtin) {
            self.finish_crd(&format!("{}.{}", tk.1, tk.0));
        }
        self.collect_garbage(&uid);
        if !key.0.is_empty() {
            self.finish_namespace(&key.0);
        }
    }

    /// Removes an object at a new resourceVersion, regardless of finalizers.
    fn force_remove(&mut self, tk: &TypeKey, key: &ObjName) {
        let rv = self.bump();
        if let Some(s) = self.objects.get_mut(tk).and_then(|m| m.get_mut(key)) {
            meta_mut(Arc::make_mut(s)).insert("resourceVersion".into(), rv.into());
        }
        self.remove(tk, key);
    }

    /// Objects with an ownerReference to `uid`.
    fn dependents_of(&self, uid: &str) -> Vec<(TypeKey, ObjName)> {
        let mut out = Vec::new();
        for (tk, m) in &self.objects {
            for (k, o) in m {
                let refs = meta(o)["ownerReferences"].as_array();
                if refs.is_some_and(|r| r.iter().any(|o| str_of(o, "uid") == Some(uid))) {
                    out.push((tk.clone(), k.clone()));
                }
            }
        }
        out
    }

    fn owner_refs(&self, tk: &TypeKey, k: &ObjName) -> Vec<Value> {
        self.objects
            .get(tk)
            .and_then(|m| m.get(k))
            .and_then(|o| meta(o)["ownerReferences"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Garbage collection for owner `uid`, which is gone or being deleted: dependents without
    /// another live owner are deleted (background), the others lose their dangling references.
    fn collect_garbage(&mut self, uid: &str) {
        if uid.is_empty() {
            return;
        }
        for (tk, k) in self.dependents_of(uid) {
            let live: Vec<Value> = self
                .owner_refs(&tk, &k)
                .into_iter()
                .filter(|o| str_of(o, "uid").is_some_and(|u| u != uid && self.uids.contains_key(u)))
                .collect();
            if live.is_empty() {
                let _ = self.delete_key(&tk, &k, &DeleteOpts::default());
            } else {
                self.set_owner_refs(&tk, &k, live);
            }
        }
    }

    /// Orphan propagation: dependents of `uid` lose their reference to it.
    fn orphan_dependents(&mut self, uid: &str) {
        for (tk, k) in self.dependents_of(uid) {
            let rest = self
                .owner_refs(&tk, &k)
                .into_iter()
                .filter(|o| str_of(o, "uid") != Some(uid))
                .collect();
            self.set_owner_refs(&tk, &k, rest);
        }
    }

    /// Removes one finalizer; the object goes when it was the last one of a deleted object.
    fn remove_finalizer(&mut self, tk: &TypeKey, key: &ObjName, finalizer: &str) {
        let Some(old) = self.objects.get(tk).and_then(|m| m.get(key)).cloned() else {
            return;
        };
        let rest: Vec<String> = finalizers(&old)
            .into_iter()
            .filter(|f| f != finalizer)
            .collect();
        if rest.is_empty() && meta(&old).get("deletionTimestamp").is_some() {
            self.force_remove(tk, key);
            return;
        }
        let mut new = Value::clone(&old);
        meta_mut(&mut new).insert("finalizers".into(), json!(rest));
        self.store_modified(tk, key, old, new);
    }

    fn set_owner_refs(&mut self, tk: &TypeKey, k: &ObjName, refs: Vec<Value>) {
        let Some(old) = self.objects.get(tk).and_then(|m| m.get(k)).cloned() else {
            return;
        };
        let mut new = Value::clone(&old);
        let m = meta_mut(&mut new);
        if refs.is_empty() {
            m.remove("ownerReferences");
        } else {
            m.insert("ownerReferences".into(), Value::Array(refs));
        }
        self.store_modified(tk, k, old, new);
    }

    /// Stores a changed object at a new resourceVersion and sends MODIFIED.
    fn store_modified(
        &mut self,
        tk: &TypeKey,
        key: &ObjName,
        old: Arc<Value>,
        mut new: Value,
    ) -> Arc<Value> {
        let rv = self.bump();
        meta_mut(&mut new).insert("resourceVersion".into(), rv.into());
        let new = Arc::new(new);
        if let Some(s) = self.objects.get_mut(tk).and_then(|m| m.get_mut(key)) {
            *s = new.clone();
        }
        self.emit("MODIFIED", tk, &key.0, new.clone(), Some(old));
        new
    }

    /// Removes the cleanup finalizer of a terminating CRD once none of its objects is left.
    fn finish_crd(&mut self, crd_name: &str) {
        let crd_tk = crd_type_key();
        let Some(crd) = self.get(&crd_tk, "", crd_name) else {
            return;
        };
        if meta(crd).get("deletionTimestamp").is_none() {
            return;
        }
        let remaining = registry::from_crd(crd)
            .ok()
            .and_then(|t| self.objects.get(&t.key()).map(|m| !m.is_empty()))
            .unwrap_or(false);
        if !remaining {
            self.remove_finalizer(&crd_tk, &(String::new(), crd_name.to_owned()), CRD_CLEANUP);
        }
    }

    /// Removes a terminating namespace once it is empty and has no finalizers.
    fn finish_namespace(&mut self, ns: &str) {
        let nsk = (String::new(), "namespaces".to_owned());
        let Some(n) = self.get(&nsk, "", ns) else {
            return;
        };
        if meta(n).get("deletionTimestamp").is_none() || !finalizers(n).is_empty() {
            return;
        }
        let empty = self
            .objects
            .iter()
            .all(|(_, m)| !m.keys().any(|(n, _)| n == ns));
        if empty {
            let key = (String::new(), ns.to_owned());
            self.force_remove(&nsk, &key);
        }
    }

    /// DELETE of one object. Returns the object (still present, being finalized) or a Status.
    pub(crate) fn delete(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> ApiResult<Value> {
        let tk = rt.key();
        let key = (ns.to_owned(), name.to_owned());
        let obj = self
            .get(&tk, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        if let Some(u) = &opts.uid {
            let have = str_of(meta(&obj), "uid").unwrap_or_default();
            if u != have {
                return Err(ApiError::conflict_msg(
                    &rt.group,
                    &rt.kind,
                    name,
                    &format!(
                        "the UID in the precondition ({u}) does not match the UID in record ({have}). The object might have been deleted and then recreated"
                    ),
                ));
            }
        }
        if let Some(r) = &opts.resource_version {
            let have = str_of(meta(&obj), "resourceVersion").unwrap_or_default();
            if r != have {
                return Err(ApiError::conflict_msg(
                    &rt.group,
                    &rt.kind,
                    name,
                    &format!(
                        "the ResourceVersion in the precondition ({r}) does not match the ResourceVersion in record ({have}). The object might have been modified"
                    ),
                ));
            }
        }
        if opts.dry_run {
            return Ok(obj);
        }
        let out = self.delete_key(&tk, &key, opts)?;
        Ok(match out {
            Some(o) => Arc::unwrap_or_clone(o),
            None => json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": str_of(meta(&obj), "uid")},
            }),
        })
    }

    /// Deletes by key. `Ok(Some(obj))` when the object stays (finalizers), `Ok(None)` when gone.
    fn delete_key(
        &mut self,
        tk: &TypeKey,
        key: &ObjName,
        opts: &DeleteOpts,
    ) -> ApiResult<Option<Arc<Value>>> {
        let Some(old) = self.objects.get(tk).and_then(|m| m.get(key)).cloned() else {
            return Ok(None);
        };
        let uid = str_of(meta(&old), "uid").unwrap_or_default().to_owned();
        if meta(&old).get("deletionTimestamp").is_some() {
            return Ok(Some(old));
        }
        // Orphan and Foreground deletion work through finalizers, as on the apiserver; the
        // garbage collector's part is done at once.
        // CRDs are finalized the same way: instances first, then the CRD.
        let policy_finalizer = match opts.propagation.as_deref() {
            _ if is_crd_key(tk) => Some(CRD_CLEANUP),
            Some("Orphan") => Some("orphan"),
            Some("Foreground") => Some("foregroundDeletion"),
            _ => None,
        };
        let is_ns = tk.0.is_empty() && tk.1 == "namespaces";
        if policy_finalizer.is_some() || !finalizers(&old).is_empty() || is_ns {
            let mut new = Value::clone(&old);
            let m = meta_mut(&mut new);
            m.insert("deletionTimestamp".into(), now().into());
            m.insert("deletionGracePeriodSeconds".into(), 0.into());
            if let Some(f) = policy_finalizer {
                let mut fs = finalizers(&old);
                if !fs.iter().any(|x| x == f) {
                    fs.push(f.to_owned());
                }
                m.insert("finalizers".into(), json!(fs));
            }
            if let Some(g) = meta(&old)["generation"].as_i64() {
                meta_mut(&mut new).insert("generation".into(), (g + 1).into());
            }
            if is_ns {
                new["status"]["phase"] = "Terminating".into();
            }
            if policy_finalizer == Some(CRD_CLEANUP)
                && let Some(conds) = new["status"]["conditions"].as_array_mut()
            {
                conds.push(json!({
                    "type": "Terminating", "status": "True", "lastTransitionTime": now(),
                    "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress",
                }));
            }
            let marked = self.store_modified(tk, key, old, new);
            if is_ns {
                self.delete_namespace_contents(&key.1);
                self.finish_namespace(&key.1);
            }
            match policy_finalizer {
                Some(CRD_CLEANUP) => {
                    if let Ok(t) = registry::from_crd(&marked) {
                        let ctk = t.key();
                        let names: Vec<ObjName> = self
                            .objects
                            .get(&ctk)
                            .map(|m| m.keys().cloned().collect())
                            .unwrap_or_default();
                        for n in names {
                            let _ = self.delete_key(&ctk, &n, &DeleteOpts::default());
                        }
                    }
                    self.finish_crd(&key.1);
                }
                Some(f) => {
                    if f == "orphan" {
                        self.orphan_dependents(&uid);
                    } else {
                        self.collect_garbage(&uid);
                    }
                    self.remove_finalizer(tk, key, f);
                }
                None => {}
            }
            return Ok(Some(marked));
        }
        self.force_remove(tk, key);
        Ok(None)
    }

    fn delete_namespace_contents(&mut self, ns: &str) {
        let mut keys: Vec<(TypeKey, ObjName)> = Vec::new();
        for (tk, m) in &self.objects {
            for k in m.keys().filter(|(n, _)| n == ns) {
                keys.push((tk.clone(), k.clone()));
            }
        }
        for (tk, k) in keys {
            let _ = self.delete_key(&tk, &k, &DeleteOpts::default());
        }
    }

    /// deletecollection: deletes every object of `names`, returns the list of deleted objects.
    pub(crate) fn delete_many(
        &mut self,
        rt: &ResourceType,
        names: Vec<ObjName>,
        opts: &DeleteOpts,
    ) -> Vec<Value> {
        let tk = rt.key();
        let mut out = Vec::new();
        for k in names {
            let before = self.get(&tk, &k.0, &k.1).cloned();
            if opts.dry_run {
                out.extend(before);
                continue;
            }
            if let (Ok(after), Some(before)) = (self.delete_key(&tk, &k, opts), before) {
                out.push(after.map_or(before, Arc::unwrap_or_clone));
            }
        }
        out
    }
}

/// Offset reported by Go's "illegal base64 data at input byte N".
fn base64_error_offset(e: &base64::DecodeError) -> usize {
    match e {
        base64::DecodeError::InvalidByte(i, _) | base64::DecodeError::InvalidLastSymbol(i, _) => *i,
        base64::DecodeError::InvalidLength(n) => *n,
        base64::DecodeError::InvalidPadding => 0,
    }
}

/// The kube-apiserver's checks of a Secret's `type` (`ValidateSecret`, Kubernetes 1.20),
/// with its messages: the keys each type needs, and JSON for the two Docker types, whose
/// error quotes Go's JSON parser (`invalid character 'H' looking for beginning of value`:
/// a byte of the value). `data[%s][username]` is 1.20's own spelling.
fn secret_type_rules(secret: &serde_json::Map<String, Value>) -> Vec<FieldError> {
    let data = secret.get("data").and_then(Value::as_object);
    let item = |key: &str| {
        data.and_then(|d| d.get(key))
            .and_then(Value::as_str)
            .map(|v| {
                base64::engine::general_purpose::STANDARD
                    .decode(v)
                    .unwrap_or_default()
            })
    };
    let mut errs = Vec::new();
    let docker = |key: &str, errs: &mut Vec<FieldError>| {
        let field = format!("data[{key}]");
        match item(key) {
            None => errs.push(FieldError::required(&field, "")),
            Some(bytes) => {
                if let Some(e) = crate::gojson::unmarshal_map_error(&bytes) {
                    errs.push(FieldError::invalid(
                        &field,
                        "\"<secret contents redacted>\"",
                        &e,
                    ));
                }
            }
        }
    };
    match secret
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
    {
        "kubernetes.io/dockercfg" => docker(".dockercfg", &mut errs),
        "kubernetes.io/dockerconfigjson" => docker(".dockerconfigjson", &mut errs),
        "kubernetes.io/basic-auth" if item("username").is_none() && item("password").is_none() => {
            errs.push(FieldError::required("data[%s][username]", ""));
            errs.push(FieldError::required("data[%s][password]", ""));
        }
        "kubernetes.io/ssh-auth" if item("ssh-privatekey").is_none_or(|v| v.is_empty()) => {
            errs.push(FieldError::required("data[%s][ssh-privatekey]", ""));
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if item(key).is_none() {
                    errs.push(FieldError::required(&format!("data[{key}]"), ""));
                }
            }
        }
        "kubernetes.io/service-account-token" => {
            let named = secret
                .get("metadata")
                .and_then(|m| m.get("annotations"))
                .and_then(|a| a.get("kubernetes.io/service-account.name"))
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if !named {
                errs.push(FieldError::required(
                    "metadata.annotations[kubernetes.io/service-account.name]",
                    "",
                ));
            }
        }
        _ => {}
    }
    errs
}

fn immutable_rules(old: &Value, new: &Value, fields: &[&str], errs: &mut Vec<FieldError>) {
    if old["immutable"].as_bool() != Some(true) {
        return;
    }
    const MSG: &str = "field is immutable when `immutable` is set";
    if new["immutable"].as_bool() != Some(true) {
        errs.push(FieldError::forbidden("immutable", MSG));
    }
    for f in fields {
        let norm = |v: &Value| {
            if v.as_object().is_some_and(Map::is_empty) {
                Value::Null
            } else {
                v.clone()
            }
        };
        if norm(&old[*f]) != norm(&new[*f]) {
            errs.push(FieldError::forbidden(f, MSG));
        }
    }
}

/// Rejects a body whose `apiVersion`/`kind` name another type.
fn check_type_meta(rt: &ResourceType, version: &str, obj: &Value) -> ApiResult<()> {
    if let Some(k) = str_of(obj, "kind").filter(|k| !k.is_empty())
        && k != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({})",
            str_of(obj, "apiVersion").unwrap_or_default(),
            rt.api_version(version)
        )));
    }
    if let Some(av) = str_of(obj, "apiVersion").filter(|a| !a.is_empty()) {
        let (g, _) = av.rsplit_once('/').unwrap_or(("", av));
        if g != rt.group {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                rt.api_version(version)
            )));
        }
    }
    Ok(())
}

/// Validation of labels, annotation keys and ownerReferences.
fn metadata_errors(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let m = meta(obj);
    if let Some(labels) = m["labels"].as_object() {
        for (k, v) in labels {
            errs.extend(field_errors(
                "metadata.labels",
                k,
                validation::is_qualified_name(k),
            ));
            let v = v.as_str().unwrap_or_default();
            errs.extend(field_errors(
                "metadata.labels",
                v,
                validation::is_valid_label_value(v),
            ));
        }
    }
    if let Some(annotations) = m["annotations"].as_object() {
        for k in annotations.keys() {
            errs.extend(field_errors(
                "metadata.annotations",
                k,
                validation::validate_annotation_key(k),
            ));
        }
    }
    if let Some(refs) = m["ownerReferences"].as_array() {
        for r in refs {
            for (f, what) in [
                ("apiVersion", "version"),
                ("kind", "kind"),
                ("name", "name"),
                ("uid", "uid"),
            ] {
                if str_of(r, f).is_none_or(str::is_empty) {
                    errs.push(FieldError::invalid(
                        &format!("metadata.ownerReferences.{f}"),
                        "\"\"",
                        &format!("{what} must not be empty"),
                    ));
                }
            }
        }
        if refs
            .iter()
            .filter(|r| r["controller"].as_bool() == Some(true))
            .count()
            > 1
        {
            errs.push(FieldError::invalid(
                "metadata.ownerReferences",
                &format!("{}", Value::Array(refs.clone())),
                "Only one reference can have Controller set to true",
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(spec: Value, meta: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "X", "metadata": meta, "spec": spec, "status": {"a": 1}})
    }

    #[test]
    fn a_write_changing_only_bookkeeping_is_the_same_object() {
        let mf = |t: &str| json!([{"manager": "m", "time": t, "fieldsV1": {"f:spec": {}}}]);
        let a = obj(
            json!({"x": 1}),
            json!({"name": "n", "resourceVersion": "1", "managedFields": mf("t1")}),
        );
        let b = obj(
            json!({"x": 1}),
            json!({"name": "n", "resourceVersion": "2", "managedFields": mf("t2")}),
        );
        assert!(same_ignoring_bookkeeping(&a, &b));
        // Anything else differing, in or out of metadata, is a change.
        let labelled = obj(
            json!({"x": 1}),
            json!({"name": "n", "labels": {"l": "v"}, "managedFields": mf("t1")}),
        );
        assert!(!same_ignoring_bookkeeping(&a, &labelled));
        let other_manager = obj(
            json!({"x": 1}),
            json!({"name": "n", "managedFields": [{"manager": "o", "time": "t1", "fieldsV1": {"f:spec": {}}}]}),
        );
        assert!(!same_ignoring_bookkeeping(&a, &other_manager));
        let no_fields = obj(
            json!({"x": 1}),
            json!({"name": "n", "resourceVersion": "1"}),
        );
        assert!(!same_ignoring_bookkeeping(&a, &no_fields));
        assert!(!same_ignoring_bookkeeping(
            &a,
            &obj(json!({"x": 2}), meta(&a).clone())
        ));
        let mut extra = a.clone();
        extra["data"] = json!({});
        assert!(!same_ignoring_bookkeeping(&a, &extra));
        assert!(!same_ignoring_bookkeeping(&extra, &a));
    }

    #[test]
    fn only_content_outside_metadata_counts_for_generation() {
        let a = obj(json!({"x": 1}), json!({"name": "n"}));
        let relabelled = obj(json!({"x": 1}), json!({"name": "n", "labels": {"l": "v"}}));
        assert!(same_spec(&a, &relabelled, true));
        let mut new_status = a.clone();
        new_status["status"] = json!({"a": 2});
        assert!(same_spec(&a, &new_status, true));
        assert!(!same_spec(&a, &new_status, false));
        assert!(!same_spec(
            &a,
            &obj(json!({"x": 2}), json!({"name": "n"})),
            true
        ));
        let mut added = a.clone();
        added["data"] = json!({"k": "v"});
        assert!(!same_spec(&a, &added, true));
        assert!(!same_spec(&added, &a, true));
    }
}
