//! `kseal check`: the CI gate of a GitOps repository. Walks the tree, finds every
//! SealedSecret of every manifest file and reports, per object and item, what would break or
//! needs care once it reaches a cluster.
//!
//! The public tier needs only the ring's certificates (any CI runner): the documents parse, the
//! scope agrees with the metadata, each item's RSA block fits a key of the ring, the
//! `kseal.dev/sealing-key` hint names a key the ring holds (warning when not the active one),
//! templates render. The private tier (`--key` files, or `--controller`) also opens every
//! item; plaintext is dropped (and zeroized) as soon as it has been checked.
//!
//! Exit codes: 0 clean (warnings allowed unless `--strict`), 1 findings, 2 usage or I/O error.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail};
use kseal_api::SealedSecret;
use kseal_api::constants::{
    API_VERSION, CLUSTER_WIDE_ANNOTATION, KIND, NAMESPACE_WIDE_ANNOTATION, SEALING_KEY_ANNOTATION,
};
use kseal_keys::{Certificate, KeyId, KeyRing, Scope};

use crate::args::{CheckArgs, CheckFormat, Progress};
use crate::certs::{CertRequest, Controller, ControllerTarget, Source};
use crate::cmd::recovery::{Checker, open_items};
use crate::text::count;

/// The exit code a command chose, after printing its own report and errors:
/// [`crate::run`] exits with it and prints nothing more.
#[derive(Debug)]
pub(crate) struct Exit(pub(crate) u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for Exit {}

// ---------------------------------------------------------------------------------------------
// Per-path rules of the repository.

/// Whether the repository's rules forbid cluster-wide SealedSecrets in `file`.
///
/// Whether the repository's `.kseal.yaml` forbids a cluster-wide SealedSecret in `file`: the
/// rule that does (`crate::project::forbid_cluster_wide`), or why the rules could not be read.
fn forbid_cluster_wide(file: &Path) -> Option<String> {
    match crate::project::forbid_cluster_wide(file) {
        Ok(rule) => rule,
        Err(e) => Some(format!("the creation rules could not be read: {e:#}")),
    }
}

// ---------------------------------------------------------------------------------------------
// The ring's keys.

/// A key of the ring, public part only.
#[derive(Debug, Clone)]
struct RingKey {
    id: KeyId,
    /// Length of its RSA blocks (the modulus size in bytes).
    block_len: usize,
    /// When it entered the ring (its certificate's start without a ring index).
    since: SystemTime,
}

/// What the public tier checks against.
#[derive(Debug, Default)]
struct RingView {
    keys: Vec<RingKey>,
    active: Option<KeyId>,
}

impl RingView {
    fn get(&self, id: &KeyId) -> Option<&RingKey> {
        self.keys.iter().find(|k| &k.id == id)
    }

    fn add(&mut self, cert: &Certificate, since: SystemTime) {
        if self.get(cert.id()).is_none() {
            self.keys.push(RingKey {
                id: cert.id().clone(),
                block_len: cert.public_key().ciphertext_len(),
                since,
            });
        }
    }
}

/// A key ring's verified index: every certificate with the time it was added, and the
/// active key.
pub(crate) struct RingIndex {
    pub(crate) keys: Vec<(Certificate, SystemTime)>,
    pub(crate) active: Option<KeyId>,
}

type IndexReader = fn(&str, Option<&str>) -> Result<RingIndex>;

/// Reads a key ring's index. Set by the full CLI ([`crate::run`]), like the certificate
/// reader of [`crate::certs`], so the key-ring code is not linked into `kseal` itself.
static INDEX_READER: std::sync::OnceLock<IndexReader> = std::sync::OnceLock::new();

pub(crate) fn read_rings_with(reader: IndexReader) {
    let _ = INDEX_READER.set(reader);
}

/// Every key of the verified index of the ring at `location` (the reader [`crate::run`]
/// installs).
pub(crate) fn read_ring_index(location: &str, anchor: Option<&str>) -> Result<RingIndex> {
    let (snapshot, _) = crate::cmd::ring::verified_index(location, anchor)?;
    let mut keys = Vec::new();
    let mut active = None;
    for entry in &snapshot.index.keys {
        let cert = Certificate::from_pem(&entry.crt)
            .with_context(|| format!("key {} of the ring has no valid certificate", entry.kid))?;
        if snapshot.index.active.as_ref() == Some(&entry.kid) {
            active = Some(cert.id().clone());
        }
        keys.push((cert, SystemTime::from(entry.added)));
    }
    Ok(RingIndex { keys, active })
}

/// The ring from `--cert` (files: the first is active; a key ring: its index), else from
/// the `--key` files, else the controller's certificate with `--controller`.
fn ring_view(args: &CheckArgs, keys: Option<&crate::cmd::unseal::LoadedRing>) -> Result<RingView> {
    let mut view = RingView::default();
    if args.cert.is_empty() {
        if let Some(loaded) = keys {
            for pair in loaded.ring.keys() {
                view.add(pair.certificate(), pair.certificate().not_before());
            }
            view.active = loaded.sealing.as_ref().ok().map(|(id, _)| id.clone());
            return Ok(view);
        }
        if !args.use_controller {
            bail!(
                "pass the ring's keys: --cert FILE… (the active certificate first), --cert \
                 secretsmanager://… or dir://… (a key ring), --key FILE… or --controller"
            );
        }
    }
    let request = CertRequest {
        specs: args
            .cert
            .iter()
            .map(|c| crate::certs::parse_spec(c))
            .collect::<Result<Vec<_>>>()?,
        controller: ControllerTarget::from_args(&args.controller),
        allow_http: args.allow_http,
        ring_anchor: args.ring_anchor.clone(),
    };
    if request.specs.is_empty() {
        // --controller without --cert: the ring is the controller's certificate.
        return controller_view(&request);
    }
    for spec in &request.specs {
        if let Source::Ring(location) = &spec.source {
            let Some(read) = INDEX_READER.get() else {
                bail!("reading key ring `{location}` is `kseal-ring`'s job");
            };
            let index = read(location, request.ring_anchor.as_deref())
                .with_context(|| format!("failed to read the keys of key ring `{location}`"))?;
            for (cert, added) in &index.keys {
                view.add(cert, *added);
            }
            if view.active.is_none() {
                view.active = index.active;
            }
            continue;
        }
        let what = request.describe(&spec.source);
        let text = request.fetch_pem(&spec.source)?;
        let cert = Certificate::from_pem(&text)
            .with_context(|| format!("{what} is not a PEM certificate"))?;
        if view.active.is_none() {
            view.active = Some(cert.id().clone());
        }
        view.add(&cert, cert.not_before());
    }
    Ok(view)
}

/// The ring as the controller's certificate (`--controller` without `--cert`).
fn controller_view(request: &CertRequest) -> Result<RingView> {
    let text = request.fetch_pem(&Source::Controller)?;
    let cert = Certificate::from_pem(&text).with_context(|| {
        format!(
            "{} is not a PEM certificate",
            request.describe(&Source::Controller)
        )
    })?;
    let mut view = RingView {
        active: Some(cert.id().clone()),
        ..RingView::default()
    };
    view.add(&cert, cert.not_before());
    Ok(view)
}

// ---------------------------------------------------------------------------------------------
// Findings.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Error,
    Warning,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
        }
    }
}

/// What a finding is about; its id is the SARIF rule id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rule {
    Parse,
    Scope,
    Malformed,
    RsaLength,
    UnknownKey,
    Template,
    DoesNotOpen,
    Stale,
    ClusterWide,
}

const RULES: [Rule; 9] = [
    Rule::Parse,
    Rule::Scope,
    Rule::Malformed,
    Rule::RsaLength,
    Rule::UnknownKey,
    Rule::Template,
    Rule::DoesNotOpen,
    Rule::Stale,
    Rule::ClusterWide,
];

impl Rule {
    fn id(self) -> &'static str {
        match self {
            Rule::Parse => "does-not-parse",
            Rule::Scope => "scope-inconsistent",
            Rule::Malformed => "malformed-item",
            Rule::RsaLength => "rsa-length-mismatch",
            Rule::UnknownKey => "unknown-sealing-key",
            Rule::Template => "template-does-not-render",
            Rule::DoesNotOpen => "item-does-not-open",
            Rule::Stale => "stale-sealing-key",
            Rule::ClusterWide => "cluster-wide-forbidden",
        }
    }

    fn level(self) -> Level {
        match self {
            Rule::Stale | Rule::ClusterWide => Level::Warning,
            _ => Level::Error,
        }
    }

    fn description(self) -> &'static str {
        match self {
            Rule::Parse => "The document is not a valid SealedSecret",
            Rule::Scope => "The scope annotations contradict the object's metadata",
            Rule::Malformed => "An encryptedData item is not a sealed value",
            Rule::RsaLength => "An item's RSA block fits no key of the ring",
            Rule::UnknownKey => {
                "The kseal.dev/sealing-key hint names a key the ring does not hold (or retired)"
            }
            Rule::Template => "spec.template.data does not render",
            Rule::DoesNotOpen => "An item does not open with the ring's private keys",
            Rule::Stale => "Sealed with a key that is not the ring's active key",
            Rule::ClusterWide => "Cluster-wide scope where the repository's rules forbid it",
        }
    }
}

#[derive(Debug, Clone)]
struct Finding {
    rule: Rule,
    line: usize,
    item: Option<String>,
    message: String,
}

/// One SealedSecret found.
#[derive(Debug)]
struct Object {
    /// `namespace/name`.
    name: String,
    /// Its document (from 1) in the file.
    document: usize,
    line: usize,
    /// Each item's line.
    item_lines: BTreeMap<String, usize>,
    findings: Vec<Finding>,
    /// Dropped once the private tier has run.
    sealed: Option<SealedSecret>,
}

/// One manifest file with SealedSecrets (or findings).
#[derive(Debug)]
struct FileReport {
    path: PathBuf,
    /// Findings not about one object (a document that does not parse).
    findings: Vec<Finding>,
    objects: Vec<Object>,
}

// ---------------------------------------------------------------------------------------------
// Reading files.

/// The YAML documents of `text` with the line (from 1) each starts on; a JSON file is one.
fn documents(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0usize;
    let mut start_line = 1usize;
    let mut offset = 0usize;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t") {
            out.push((start_line, &text[start..offset]));
            start = offset + line.len();
            start_line = i + 2;
        }
        offset += line.len();
    }
    out.push((start_line, &text[start..]));
    out.retain(|(_, doc)| {
        doc.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#') && !t.starts_with('%')
        })
    });
    out
}

/// The line (from 1) of the first line of `doc` (which starts on `first`) matching `pred`
/// at or after line `from`.
fn line_of(doc: &str, first: usize, from: usize, pred: impl Fn(&str) -> bool) -> Option<usize> {
    doc.lines()
        .enumerate()
        .map(|(i, l)| (first + i, l))
        .find(|(n, l)| *n >= from && pred(l))
        .map(|(n, _)| n)
}

/// `key:` or `"key":` at the start of a (trimmed) line.
fn is_key_line(line: &str, key: &str) -> bool {
    let t = line.trim_start().trim_start_matches("- ");
    let rest = t
        .strip_prefix('"')
        .and_then(|r| r.strip_prefix(key))
        .and_then(|r| r.strip_prefix('"'))
        .or_else(|| {
            t.strip_prefix('\'')
                .and_then(|r| r.strip_prefix(key))
                .and_then(|r| r.strip_prefix('\''))
        })
        .or_else(|| t.strip_prefix(key));
    rest.is_some_and(|r| r.trim_start().starts_with(':'))
}

fn read_file(path: &Path) -> Result<FileReport> {
    let bytes = fs_err::read(path)?;
    let mut report = FileReport {
        path: path.to_path_buf(),
        findings: Vec::new(),
        objects: Vec::new(),
    };
    let Ok(text) = String::from_utf8(bytes) else {
        if is_manifest_name(path) {
            report.findings.push(Finding {
                rule: Rule::Parse,
                line: 1,
                item: None,
                message: "the file is not UTF-8 text".to_owned(),
            });
        }
        return Ok(report);
    };
    if !text.contains(KIND) {
        return Ok(report);
    }
    for (number, (first, doc)) in documents(&text).into_iter().enumerate() {
        let number = number + 1;
        if !doc.contains(KIND) {
            continue;
        }
        let value: serde_json::Value = match crate::yaml::from_str(doc) {
            Ok(v) => v,
            Err(e) => {
                let line = e
                    .location()
                    .and_then(|l| usize::try_from(l.line()).ok())
                    .map_or(first, |l| first + l.saturating_sub(1));
                report.findings.push(Finding {
                    rule: Rule::Parse,
                    line,
                    item: None,
                    message: format!("document {number} does not parse: {e}"),
                });
                continue;
            }
        };
        let values = crate::manifest::list_items(value);
        let mut from = first;
        for value in values {
            if value.get("kind").and_then(|k| k.as_str()) != Some(KIND)
                || value.get("apiVersion").and_then(|k| k.as_str()) != Some(API_VERSION)
            {
                continue;
            }
            let line = line_of(doc, first, from, |l| {
                is_key_line(l, "kind") && l.contains(KIND)
            })
            .unwrap_or(first);
            from = line + 1;
            match serde_json::from_value::<SealedSecret>(value) {
                Err(e) => report.findings.push(Finding {
                    rule: Rule::Parse,
                    line,
                    item: None,
                    message: format!("document {number} is not a valid SealedSecret: {e}"),
                }),
                Ok(sealed) => {
                    let data_line = line_of(doc, first, first, |l| is_key_line(l, "encryptedData"));
                    let item_lines = sealed
                        .spec
                        .encrypted_data
                        .keys()
                        .map(|item| {
                            let at = data_line
                                .and_then(|d| line_of(doc, first, d, |l| is_key_line(l, item)))
                                .unwrap_or(line);
                            (item.clone(), at)
                        })
                        .collect();
                    report.objects.push(Object {
                        name: format!(
                            "{}/{}",
                            sealed.metadata.namespace.as_deref().unwrap_or("-"),
                            sealed.metadata.name.as_deref().unwrap_or("-")
                        ),
                        document: number,
                        line,
                        item_lines,
                        findings: Vec::new(),
                        sealed: Some(sealed),
                    });
                }
            }
        }
    }
    Ok(report)
}

fn is_manifest_name(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

// ---------------------------------------------------------------------------------------------
// The public tier.

fn days(age: Duration) -> String {
    count(age.as_secs() / 86_400, "day")
}

/// The scope findings of one object.
fn check_scope(sealed: &SealedSecret, line: usize, out: &mut Vec<Finding>) {
    let mut problem = |message: String| {
        out.push(Finding {
            rule: Rule::Scope,
            line,
            item: None,
            message,
        });
    };
    let annotations = sealed.metadata.annotations.as_ref();
    let value = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    for key in [CLUSTER_WIDE_ANNOTATION, NAMESPACE_WIDE_ANNOTATION] {
        if let Some(v) = value(key)
            && v != "true"
            && v != "false"
        {
            problem(format!(
                "annotation `{key}` is `{v}`: the controller reads only `true`, so it seals and \
                 opens with another scope than the annotation suggests"
            ));
        }
    }
    if value(CLUSTER_WIDE_ANNOTATION) == Some("true")
        && value(NAMESPACE_WIDE_ANNOTATION) == Some("true")
    {
        problem(
            "both the cluster-wide and the namespace-wide annotations are `true`: the controller \
             opens it cluster-wide"
                .to_owned(),
        );
    }
    let scope = sealed.scope();
    let name = sealed.metadata.name.as_deref().unwrap_or_default();
    let namespace = sealed.metadata.namespace.as_deref().unwrap_or_default();
    if scope == Scope::Strict && name.is_empty() {
        problem(
            "a strict-scope SealedSecret needs metadata.name (its items are bound to it)"
                .to_owned(),
        );
    }
    if scope != Scope::Cluster && namespace.is_empty() {
        problem(format!(
            "a {scope} SealedSecret needs metadata.namespace (its items are bound to it)"
        ));
    }
    if let Some(meta) = sealed
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
    {
        if scope != Scope::Cluster
            && let Some(ns) = meta.namespace.as_deref()
            && !ns.is_empty()
            && ns != namespace
        {
            problem(format!(
                "spec.template.metadata.namespace `{ns}` differs from metadata.namespace \
                 `{namespace}`, which the items are bound to"
            ));
        }
        if scope == Scope::Strict
            && let Some(n) = meta.name.as_deref()
            && !n.is_empty()
            && n != name
        {
            problem(format!(
                "spec.template.metadata.name `{n}` differs from metadata.name `{name}`, which \
                 the items are bound to"
            ));
        }
        let template_scope = kseal_api::scope_of(meta);
        let sets_scope = meta.annotations.as_ref().is_some_and(|a| {
            a.contains_key(CLUSTER_WIDE_ANNOTATION) || a.contains_key(NAMESPACE_WIDE_ANNOTATION)
        });
        if sets_scope && template_scope != scope {
            problem(format!(
                "the template's annotations say {template_scope}, the object's {scope}: the \
                 controller binds the items to the object's"
            ));
        }
    }
}

/// The public-tier findings of one object of `file`.
fn check_public(file: &Path, object: &mut Object, ring: &RingView, now: SystemTime) {
    let Some(sealed) = object.sealed.as_ref() else {
        return;
    };
    let mut out = Vec::new();
    check_scope(sealed, object.line, &mut out);
    if sealed.scope() == Scope::Cluster
        && let Some(rule) = forbid_cluster_wide(file)
    {
        out.push(Finding {
            rule: Rule::ClusterWide,
            line: object.line,
            item: None,
            message: format!(
                "cluster-wide scope, which the repository's rules forbid here ({rule})"
            ),
        });
    }
    // The hint.
    let raw_hint = sealed
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SEALING_KEY_ANNOTATION));
    let mut hinted: Option<&RingKey> = None;
    if let Some(raw) = raw_hint {
        match KeyId::parse(raw) {
            None => out.push(Finding {
                rule: Rule::UnknownKey,
                line: object.line,
                item: None,
                message: format!("annotation `{SEALING_KEY_ANNOTATION}` is not a key fingerprint"),
            }),
            Some(id) => match ring.get(&id) {
                None => out.push(Finding {
                    rule: Rule::UnknownKey,
                    line: object.line,
                    item: None,
                    message: format!(
                        "sealed with key {id}, which the ring does not hold (never did, or \
                         retired it): no controller can open it"
                    ),
                }),
                Some(key) => {
                    hinted = Some(key);
                    if ring.active.as_ref().is_some_and(|a| a != &key.id) {
                        let age = now.duration_since(key.since).unwrap_or_default();
                        for (item, line) in &object.item_lines {
                            out.push(Finding {
                                rule: Rule::Stale,
                                line: *line,
                                item: Some(item.clone()),
                                message: format!(
                                    "sealed with key {} ({} old), not the active key {}: \
                                     re-seal it",
                                    key.id,
                                    days(age),
                                    ring.active.as_ref().map_or("-", KeyId::as_str)
                                ),
                            });
                        }
                    }
                }
            },
        }
    }
    // The items' envelopes.
    for (item, value) in &sealed.spec.encrypted_data {
        let line = object.item_lines.get(item).copied().unwrap_or(object.line);
        let mut finding = |rule: Rule, message: String| {
            out.push(Finding {
                rule,
                line,
                item: Some(item.clone()),
                message,
            });
        };
        let bytes = match kseal_keys::envelope::decode_base64(value) {
            Ok(b) => b,
            Err(e) => {
                finding(
                    Rule::Malformed,
                    format!("item `{item}` is not a sealed value: {e}"),
                );
                continue;
            }
        };
        let envelope = match kseal_keys::envelope::Envelope::parse(&bytes) {
            Ok(e) => e,
            Err(e) => {
                finding(
                    Rule::Malformed,
                    format!("item `{item}` is not a sealed value: {e}"),
                );
                continue;
            }
        };
        let len = envelope.rsa_ciphertext().len();
        match hinted {
            Some(key) if key.block_len != len => finding(
                Rule::RsaLength,
                format!(
                    "item `{item}` has a {len}-byte RSA block, but its hinted key {} makes \
                     {}-byte blocks",
                    key.id, key.block_len
                ),
            ),
            _ if !ring.keys.iter().any(|k| k.block_len == len) => finding(
                Rule::RsaLength,
                format!("item `{item}` has a {len}-byte RSA block, which no key of the ring makes"),
            ),
            _ => {}
        }
    }
    // Templates, rendered against placeholders (their syntax and the items they name).
    if let Some(templates) = sealed
        .spec
        .template
        .as_ref()
        .and_then(|t| t.data.as_ref())
        .filter(|d| !d.is_empty())
    {
        let items = sealed
            .spec
            .encrypted_data
            .keys()
            .map(|k| (k.clone(), k8s_openapi::ByteString(b"placeholder".to_vec())))
            .collect();
        if let Err(e) = kseal_api::render_template_data(templates, &items) {
            out.push(Finding {
                rule: Rule::Template,
                line: object.line,
                item: None,
                message: format!("spec.template.data does not render: {e}"),
            });
        }
    }
    object.findings.extend(out);
}

// ---------------------------------------------------------------------------------------------
// The private tier.

fn check_private_keys(object: &mut Object, ring: &KeyRing, view: &RingView) {
    let Some(sealed) = object.sealed.as_ref() else {
        return;
    };
    let opened = match open_items(sealed, ring) {
        Ok(o) => o,
        Err(e) => {
            object.findings.push(Finding {
                rule: Rule::DoesNotOpen,
                line: object.line,
                item: None,
                message: format!("cannot be opened: {e:#}"),
            });
            return;
        }
    };
    for item in &opened.failed {
        object.findings.push(Finding {
            rule: Rule::DoesNotOpen,
            line: object.item_lines.get(item).copied().unwrap_or(object.line),
            item: Some(item.clone()),
            message: format!(
                "item `{item}` does not open with any --key (tried {})",
                opened.tried
            ),
        });
    }
    // Stale by the key that really opened it, where the hint did not say so already.
    let warned: Vec<String> = object
        .findings
        .iter()
        .filter(|f| f.rule == Rule::Stale)
        .filter_map(|f| f.item.clone())
        .collect();
    if let Some(active) = &view.active {
        for (item, key) in &opened.keys {
            if key != active && !warned.contains(item) {
                object.findings.push(Finding {
                    rule: Rule::Stale,
                    line: object.item_lines.get(item).copied().unwrap_or(object.line),
                    item: Some(item.clone()),
                    message: format!(
                        "opens with key {key}, not the active key {active}: re-seal it"
                    ),
                });
            }
        }
    }
    // `opened` (and its plaintext, zeroized) is dropped here.
}

fn check_private_controller(object: &mut Object, checker: &Checker) -> Result<()> {
    let Some(sealed) = object.sealed.as_ref() else {
        return Ok(());
    };
    if let Err(reason) = checker.check(sealed)? {
        object.findings.push(Finding {
            rule: Rule::DoesNotOpen,
            line: object.line,
            item: None,
            message: reason,
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Work on every core, with a progress bar on a terminal.

/// `f` over `inputs` on every core, in order; draws a progress bar on stderr after a second
/// when `progress`.
fn parallel_map<T: Send, U: Send>(
    inputs: Vec<T>,
    label: &str,
    progress: bool,
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    let total = inputs.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(total.max(1));
    let slots: Vec<std::sync::Mutex<Option<T>>> = inputs
        .into_iter()
        .map(|t| std::sync::Mutex::new(Some(t)))
        .collect();
    let results: Vec<std::sync::Mutex<Option<U>>> =
        (0..total).map(|_| std::sync::Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        if progress {
            scope.spawn(|| draw_progress(label, total, &done, &finished));
        }
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= total {
                            break;
                        }
                        let input = slots[i].lock().ok().and_then(|mut s| s.take());
                        if let Some(input) = input {
                            let out = f(input);
                            if let Ok(mut r) = results[i].lock() {
                                *r = Some(out);
                            }
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for w in workers {
            let _ = w.join();
        }
        finished.store(true, Ordering::Relaxed);
    });
    results
        .into_iter()
        .filter_map(|r| r.into_inner().ok().flatten())
        .collect()
}

fn draw_progress(label: &str, total: usize, done: &AtomicUsize, finished: &AtomicBool) {
    let start = Instant::now();
    let mut drawn = false;
    while !finished.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if start.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let n = done.load(Ordering::Relaxed);
        let width = 30;
        let filled = (n * width).checked_div(total).unwrap_or(width).min(width);
        eprint!(
            "\r{label} [{}{}] {n}/{total}",
            "=".repeat(filled),
            " ".repeat(width - filled)
        );
        drawn = true;
    }
    if drawn {
        eprint!("\r{}\r", " ".repeat(label.len() + 50));
    }
}

// ---------------------------------------------------------------------------------------------
// The command.

/// Totals of a run.
#[derive(Debug, Default)]
struct Totals {
    files: usize,
    objects: usize,
    items: usize,
    errors: usize,
    warnings: usize,
}

pub(crate) fn run(args: CheckArgs) -> Result<()> {
    match check(&args) {
        Ok(0) => Ok(()),
        Ok(code) => Err(Exit(code).into()),
        Err(e) => {
            eprintln!("error: {e:#}");
            Err(Exit(2).into())
        }
    }
}

/// Runs the check; the exit code (0 or 1), or an error (exit 2).
fn check(args: &CheckArgs) -> Result<u8> {
    let loaded = if args.keys.is_empty() {
        None
    } else {
        Some(crate::cmd::unseal::load_keys(&args.keys)?)
    };
    let view = ring_view(args, loaded.as_ref())?;
    let checker = if args.use_controller {
        Some(Checker::Controller(Controller::connect(
            &ControllerTarget::from_args(&args.controller),
        )?))
    } else {
        None
    };
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let files = crate::walk::walk(
        &paths,
        &crate::walk::Walk {
            gitignore: !args.no_ignore,
            what: "path",
        },
    )?;
    let progress = args.progress == Progress::Auto && std::io::stderr().is_terminal();
    let now = SystemTime::now();
    let mut reports = parallel_map(files, "reading", progress, |path| {
        let mut report = read_file(&path)?;
        for object in &mut report.objects {
            check_public(&report.path, object, &view, now);
        }
        anyhow::Ok(report)
    })
    .into_iter()
    .collect::<Result<Vec<_>>>()?;
    if let Some(loaded) = &loaded {
        let objects: Vec<&mut Object> = reports
            .iter_mut()
            .flat_map(|r| r.objects.iter_mut())
            .collect();
        parallel_map(objects, "opening", progress, |object| {
            check_private_keys(object, &loaded.ring, &view);
        });
    }
    if let Some(checker) = &checker {
        for object in reports.iter_mut().flat_map(|r| r.objects.iter_mut()) {
            check_private_controller(object, checker)?;
        }
    }
    let mut totals = Totals::default();
    for report in &mut reports {
        if !report.objects.is_empty() || !report.findings.is_empty() {
            totals.files += 1;
        }
        for object in &mut report.objects {
            totals.objects += 1;
            if let Some(sealed) = object.sealed.take() {
                totals.items += sealed.spec.encrypted_data.len();
            }
            object.findings.sort_by_key(|f| (f.line, f.rule));
        }
        for f in report
            .findings
            .iter()
            .chain(report.objects.iter().flat_map(|o| &o.findings))
        {
            match f.rule.level() {
                Level::Error => totals.errors += 1,
                Level::Warning => totals.warnings += 1,
            }
        }
    }
    reports.retain(|r| !r.objects.is_empty() || !r.findings.is_empty());
    let text = match args.format {
        CheckFormat::Human => human(&reports, &totals),
        CheckFormat::Json => json(&reports, &totals)?,
        CheckFormat::Sarif => sarif(&reports)?,
        CheckFormat::Junit => junit(&reports, args.strict),
    };
    crate::output::stdout(&text)?;
    if args.format != CheckFormat::Human {
        eprintln!("{}", summary(&totals));
    }
    if totals.objects == 0 {
        // Not an error (a repository may hold none), but a wrong path passes the gate too.
        eprintln!(
            "warning: found no SealedSecret under {}",
            paths
                .iter()
                .map(|p| format!("`{}`", p.display()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let failed = totals.errors > 0 || (args.strict && totals.warnings > 0);
    Ok(u8::from(failed))
}

fn summary(t: &Totals) -> String {
    format!(
        "checked {} ({}) in {}: {}, {}",
        count(t.objects, "SealedSecret"),
        count(t.items, "item"),
        count(t.files, "file"),
        count(t.errors, "error"),
        count(t.warnings, "warning")
    )
}

/// A path for reports: as walked, with `/` separators and no leading `./`.
fn shown(path: &Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    text.strip_prefix("./").map(str::to_owned).unwrap_or(text)
}

/// Every finding of a file with the object it is about.
fn findings_of(report: &FileReport) -> Vec<(Option<&Object>, &Finding)> {
    let mut all: Vec<(Option<&Object>, &Finding)> =
        report.findings.iter().map(|f| (None, f)).collect();
    for object in &report.objects {
        all.extend(object.findings.iter().map(|f| (Some(object), f)));
    }
    all.sort_by_key(|(_, f)| (f.line, f.rule));
    all
}

fn human(reports: &[FileReport], totals: &Totals) -> String {
    use std::fmt::Write as _;
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let paint = |code: &str, text: &str| {
        if colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    };
    let mut out = String::new();
    for report in reports {
        let all = findings_of(report);
        if all.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{}", paint("1", &shown(&report.path)));
        for (object, f) in all {
            let level = match f.rule.level() {
                Level::Error => paint("31", "error"),
                Level::Warning => paint("33", "warning"),
            };
            let what = object.map_or_else(String::new, |o| format!("{}: ", o.name));
            let _ = writeln!(
                out,
                "  {}: {level}: {what}{} [{}]",
                f.line,
                f.message,
                f.rule.id()
            );
        }
    }
    let _ = writeln!(out, "{}", summary(totals));
    out
}

fn finding_json(report: &FileReport, object: Option<&Object>, f: &Finding) -> serde_json::Value {
    serde_json::json!({
        "rule": f.rule.id(),
        "level": f.rule.level().as_str(),
        "file": shown(&report.path),
        "line": f.line,
        "document": object.map(|o| o.document),
        "object": object.map(|o| o.name.clone()),
        "item": f.item,
        "message": f.message,
    })
}

fn json(reports: &[FileReport], totals: &Totals) -> Result<String> {
    let findings: Vec<serde_json::Value> = reports
        .iter()
        .flat_map(|r| {
            findings_of(r)
                .into_iter()
                .map(move |(o, f)| finding_json(r, o, f))
        })
        .collect();
    let value = serde_json::json!({
        "files": totals.files,
        "sealedSecrets": totals.objects,
        "items": totals.items,
        "errors": totals.errors,
        "warnings": totals.warnings,
        "findings": findings,
    });
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}

fn sarif(reports: &[FileReport]) -> Result<String> {
    let rules: Vec<serde_json::Value> = RULES
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.id(),
                "shortDescription": { "text": r.description() },
                "defaultConfiguration": { "level": r.level().as_str() },
            })
        })
        .collect();
    let mut results = Vec::new();
    for report in reports {
        for (object, f) in findings_of(report) {
            let mut message = f.message.clone();
            if let Some(o) = object {
                message = format!("{}: {message}", o.name);
            }
            let index = RULES.iter().position(|r| *r == f.rule).unwrap_or(0);
            results.push(serde_json::json!({
                "ruleId": f.rule.id(),
                "ruleIndex": index,
                "level": f.rule.level().as_str(),
                "message": { "text": message },
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": { "uri": shown(&report.path) },
                        "region": { "startLine": f.line },
                    }
                }],
            }));
        }
    }
    let value = serde_json::json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "kseal",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/kseal/kseal",
                "rules": rules,
            }},
            "results": results,
        }],
    });
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}

/// Text for XML attributes and elements (characters XML 1.0 forbids dropped).
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one test suite per file, one test case per SealedSecret (and one per document
/// that does not parse); errors fail, warnings are listed in `system-out` (and fail with
/// `--strict`).
fn junit(reports: &[FileReport], strict: bool) -> String {
    use std::fmt::Write as _;
    let fails = |f: &Finding| f.rule.level() == Level::Error || strict;
    let mut suites = String::new();
    let (mut tests, mut failures) = (0usize, 0usize);
    for report in reports {
        let file = xml(&shown(&report.path));
        let mut cases = String::new();
        let (mut suite_tests, mut suite_failures) = (0usize, 0usize);
        let mut case = |name: String, line: usize, findings: Vec<&Finding>| {
            suite_tests += 1;
            let failing: Vec<&&Finding> = findings.iter().filter(|f| fails(f)).collect();
            let _ = writeln!(
                cases,
                "    <testcase classname=\"{file}\" name=\"{}\" file=\"{file}\" line=\"{line}\">",
                xml(&name)
            );
            if !failing.is_empty() {
                suite_failures += 1;
                let body: Vec<String> = failing
                    .iter()
                    .map(|f| format!("{}:{}: {} [{}]", file, f.line, xml(&f.message), f.rule.id()))
                    .collect();
                let _ = writeln!(
                    cases,
                    "      <failure type=\"{}\" message=\"{}\">{}</failure>",
                    failing[0].rule.id(),
                    xml(&failing[0].message),
                    body.join("\n")
                );
            }
            let notes: Vec<String> = findings
                .iter()
                .filter(|f| !fails(f))
                .map(|f| {
                    format!(
                        "{}: {}:{}: {} [{}]",
                        f.rule.level().as_str(),
                        file,
                        f.line,
                        xml(&f.message),
                        f.rule.id()
                    )
                })
                .collect();
            if !notes.is_empty() {
                let _ = writeln!(cases, "      <system-out>{}</system-out>", notes.join("\n"));
            }
            cases.push_str("    </testcase>\n");
        };
        for f in &report.findings {
            case(format!("line {}", f.line), f.line, vec![f]);
        }
        for object in &report.objects {
            case(
                format!("{} (document {})", object.name, object.document),
                object.line,
                object.findings.iter().collect(),
            );
        }
        tests += suite_tests;
        failures += suite_failures;
        let _ = write!(
            suites,
            "  <testsuite name=\"{file}\" tests=\"{suite_tests}\" failures=\"{suite_failures}\" \
             errors=\"0\" skipped=\"0\">\n{cases}  </testsuite>\n"
        );
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kseal check\" \
         tests=\"{tests}\" failures=\"{failures}\" errors=\"0\">\n{suites}</testsuites>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_start_on_their_lines_and_empty_ones_are_dropped() {
        let text = "# head\n---\na: 1\n---\n# only a comment\n---\nb: 2\n";
        let docs = documents(text);
        assert_eq!(docs, vec![(3, "a: 1\n"), (7, "b: 2\n")]);
    }

    #[test]
    fn key_lines_are_found_in_yaml_and_json() {
        assert!(is_key_line("  password: AgB", "password"));
        assert!(is_key_line("    \"password\": \"AgB\"", "password"));
        assert!(!is_key_line("  password2: AgB", "password"));
    }

    #[test]
    fn xml_text_is_escaped() {
        assert_eq!(xml("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;");
    }
}
