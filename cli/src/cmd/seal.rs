//! `kseal seal`: Secrets in, SealedSecrets out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_api::{Scope, SealOptions, SealedSecret};

use crate::args::{Format, SealArgs};
use crate::keysource::cert::{CertRequest, NamedCert};
use crate::manifest::{Input, SealedFile, format_for_path, mapping_at, render};
use crate::sealing::{
    backend_for, check_names, describe_changes, read_value, seal_secret_with, seal_value, set_item,
    size_warning, value_count,
};

/// `namespace/name` of a SealedSecret, for messages.
fn sealed_name(sealed: &SealedSecret) -> String {
    format!(
        "{}/{}",
        sealed.metadata.namespace.as_deref().unwrap_or("-"),
        sealed.metadata.name.as_deref().unwrap_or("-")
    )
}

/// "Secret `db` (document 1 of `secret.yaml`)", for messages.
fn describe_secret(secret: &Secret, index: usize, source: &crate::manifest::Source) -> String {
    let name = secret
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or("<unnamed>");
    format!("Secret `{name}` (document {} of {source})", index + 1)
}

/// What `--raw` seals.
struct RawRequest {
    from_file: Option<PathBuf>,
    strip_newline: bool,
    allow_empty: bool,
}

/// How the seal command runs.
enum Mode {
    Normal,
    Merge(PathBuf),
    Raw(RawRequest),
}

/// A validated `kseal seal` request.
struct SealRequest {
    certs: CertRequest,
    inputs: Vec<PathBuf>,
    write: Option<PathBuf>,
    format: Option<Format>,
    scope: Option<Scope>,
    name: Option<String>,
    namespace: Option<String>,
    default_namespace: DefaultNamespace,
    allow_empty_data: bool,
    /// `--bind-template`: the values commit to the SealedSecret's template.
    bind_template: bool,
    mode: Mode,
    /// The `.kseal.yaml` creation rule for the output path, if one applies.
    rule: Option<crate::project::MatchedRule>,
    /// `--key` files: with --merge-into, unchanged items keep their ciphertext.
    keys: Vec<PathBuf>,
}

/// The namespace assumed for a Secret without one when no `-n` is given, and where it
/// comes from (as kubeseal: the kubeconfig context's namespace, else `default`).
struct DefaultNamespace {
    namespace: String,
    origin: String,
}

impl DefaultNamespace {
    fn find(controller: &crate::args::ControllerArgs) -> Self {
        match crate::kubeconfig::context_namespace(
            controller.kubeconfig.as_deref(),
            controller.context.as_deref(),
        ) {
            Some(found) => Self {
                namespace: found.namespace,
                origin: format!(
                    "the namespace of kubeconfig context `{}` in `{}`",
                    found.context,
                    found.file.display()
                ),
            },
            None => Self {
                namespace: "default".to_owned(),
                origin: "the default, as kubeseal: no kubeconfig context names a namespace"
                    .to_owned(),
            },
        }
    }
}

impl SealRequest {
    fn from_args(mut args: SealArgs) -> Result<Self> {
        // The creation rule of the output path: -w, else --merge-into, else stdout.
        let output = args.write.as_deref().or(args.merge_into.as_deref());
        let rule = crate::project::rule_for_output(output)?;
        crate::project::apply_cert(&mut args.cert.cert, rule.as_ref())?;
        if args.namespace.is_none() {
            args.namespace = rule.as_ref().and_then(|r| r.namespace()).map(str::to_owned);
        }
        let certs = CertRequest::from_args(&args.cert)?;
        if args.raw && !args.files.all().is_empty() {
            bail!(
                "--raw seals one value, from --from-file or standard input; -f and FILE \
                 arguments name Secret manifests"
            );
        }
        let mode = if let Some(path) = args.merge_into {
            Mode::Merge(path)
        } else if args.raw {
            let from_file = args.from_file.map(|spec| {
                // kubeseal's `[key=]path`: the key is ignored.
                match spec.split_once('=') {
                    Some((_, path)) if !Path::new(&spec).exists() => PathBuf::from(path),
                    _ => PathBuf::from(spec),
                }
            });
            Mode::Raw(RawRequest {
                from_file,
                strip_newline: args.strip_newline,
                allow_empty: args.allow_empty_data,
            })
        } else {
            Mode::Normal
        };
        if !matches!(mode, Mode::Normal) && certs.specs.len() > 1 {
            bail!(
                "--merge-into and --raw seal with one certificate; got {}",
                certs.specs.len()
            );
        }
        let default_namespace = DefaultNamespace::find(&args.cert.controller);
        Ok(Self {
            certs,
            inputs: args.files.all(),
            write: args.write,
            format: args.format,
            scope: args.scope,
            name: args.name,
            namespace: args.namespace,
            default_namespace,
            allow_empty_data: args.allow_empty_data,
            bind_template: args.bind_template,
            mode,
            rule,
            keys: args.keys,
        })
    }

    /// The scope to seal with: `--scope`, else the creation rule's, else strict.
    fn default_scope(&self) -> Scope {
        self.scope
            .or_else(|| self.rule.as_ref().and_then(|r| r.scope()))
            .unwrap_or(Scope::Strict)
    }

    /// Refuses a cluster-wide `scope` where the creation rule forbids it.
    fn check_scope(&self, scope: Scope, what: &str) -> Result<()> {
        self.rule
            .as_ref()
            .map_or(Ok(()), |r| r.check_scope(scope, what))
    }

    fn options(&self) -> SealOptions {
        SealOptions {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            default_namespace: None,
            scope: self.default_scope(),
            allow_empty_data: self.allow_empty_data,
            bind_template: self.bind_template,
            ..SealOptions::default()
        }
    }

    /// The `-n` namespace, if one was given.
    fn explicit_namespace(&self) -> Option<&str> {
        self.namespace.as_deref().filter(|n| !n.is_empty())
    }

    /// Readies one input Secret for sealing, with the messages that tell what the user did
    /// not ask for explicitly: an explicit `--scope` replaces the input's scope annotations
    /// (with a warning when they asked for another scope), and a Secret that needs a
    /// namespace and has none gets the default one (with a note naming it and where it
    /// comes from).
    fn prepare(&self, secret: &Secret, what: &str) -> (Secret, SealOptions, Vec<String>) {
        let mut notes = Vec::new();
        let mut secret = secret.clone();
        let mut options = self.options();
        let declared = kseal_api::scope_of(&secret.metadata);
        // A creation rule's scope applies to Secrets that declare none (an explicit --scope
        // replaces any).
        let asked = self.scope.or_else(|| {
            self.rule
                .as_ref()
                .and_then(|r| r.scope())
                .filter(|_| declared == Scope::Strict)
        });
        if let Some(asked) = asked {
            if declared != Scope::Strict && declared != asked {
                notes.push(format!(
                    "warning: {what} is annotated {declared}; sealing it {asked} as --scope asks \
                     (the annotation is replaced)"
                ));
            }
            let annotations = secret
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            kseal_api::set_scope_annotations(annotations, asked);
            if annotations.is_empty() {
                secret.metadata.annotations = None;
            }
        }
        let scope = kseal_api::scope_of(&secret.metadata);
        let has_namespace = secret
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|n| !n.is_empty());
        if scope != Scope::Cluster && !has_namespace && self.explicit_namespace().is_none() {
            notes.push(format!(
                "note: {what} has no namespace: sealing it for `{}` (no -n; {})",
                self.default_namespace.namespace, self.default_namespace.origin
            ));
            options.default_namespace = Some(self.default_namespace.namespace.clone());
        }
        (secret, options, notes)
    }
}

pub(crate) fn run(args: SealArgs) -> Result<()> {
    let request = SealRequest::from_args(args)?;
    match &request.mode {
        Mode::Normal => seal_normal(&request),
        Mode::Merge(path) => seal_merge(&request, path),
        Mode::Raw(raw) => seal_raw(&request, raw),
    }
}

/// The output path for one of several certificates: `{cert}` replaced by its name, or the
/// name inserted before the extension (`sealed.yaml` → `sealed.dr.yaml`).
pub(crate) fn path_for_cert(path: &Path, name: &str) -> PathBuf {
    let text = path.to_string_lossy();
    if text.contains("{cert}") {
        return PathBuf::from(text.replace("{cert}", name));
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let file = match (stem, path.extension()) {
        (Some(stem), Some(ext)) => format!("{stem}.{name}.{}", ext.to_string_lossy()),
        (Some(stem), None) => format!("{stem}.{name}"),
        (None, _) => name.to_owned(),
    };
    path.with_file_name(file)
}

/// The namespace whose certificate a prepared Secret is sealed with: the one it is sealed
/// for, as [`kseal_api::seal`] decides it, and for a cluster-wide one the namespace it
/// declares or is given, if any (`None`: the controller's default certificate). A
/// cluster-wide value can be moved to any namespace, but with rings bound to namespaces it
/// opens only where its ring is bound: the ring bound where it is going to be applied, never
/// the first ring's because of a scope annotation (attack review round 13, N1: a team's
/// cluster-wide value went to another tenant's ring, listed first).
fn sealed_for(secret: &Secret, options: &SealOptions) -> Option<String> {
    [
        &secret.metadata.namespace,
        &options.namespace,
        &options.default_namespace,
    ]
    .into_iter()
    .flatten()
    .find(|n| !n.is_empty())
    .cloned()
}

/// The certificates to seal each namespace's objects with. From the controller without
/// `--controller-ring`, each namespace's own (a controller with rings bound to namespaces
/// seals each with the ring bound there); otherwise one set for all.
fn certs_by_namespace(
    request: &SealRequest,
    loaded: Option<Vec<NamedCert>>,
    namespaces: impl IntoIterator<Item = Option<String>>,
    notes: &mut Vec<String>,
) -> Result<BTreeMap<Option<String>, Vec<NamedCert>>> {
    let mut by_ns = BTreeMap::new();
    if let Some(certs) = loaded {
        by_ns.insert(None, certs);
        return Ok(by_ns);
    }
    for ns in namespaces {
        if let std::collections::btree_map::Entry::Vacant(slot) = by_ns.entry(ns) {
            let certs = request.certs.for_namespace(slot.key().as_deref()).load()?;
            slot.insert(certs);
        }
    }
    let kids: BTreeSet<String> = by_ns
        .values()
        .flat_map(|certs| certs.iter().map(|c| c.cert.id().as_str().to_owned()))
        .collect();
    if kids.len() > 1 {
        let each = by_ns
            .iter()
            .map(|(ns, certs)| {
                let kid = certs.first().map_or("-", |c| {
                    let kid = c.cert.id().as_str();
                    kid.get(..12).unwrap_or(kid)
                });
                format!("{} → key {kid}", ns.as_deref().unwrap_or("no namespace"))
            })
            .collect::<Vec<_>>()
            .join(", ");
        notes.push(format!(
            "note: the controller seals these namespaces with different keys (its rings are \
             bound to namespaces): {each}"
        ));
    }
    Ok(by_ns)
}

fn seal_normal(request: &SealRequest) -> Result<()> {
    // The certificates first (a bad --cert is said before anything is read), unless the
    // controller is asked for each namespace's: then the inputs say which.
    let loaded = if request.certs.per_namespace() {
        None
    } else {
        Some(request.certs.load()?)
    };
    let inputs = Input::read_all(&request.inputs)?;
    let format = request
        .format
        .or_else(|| request.write.as_deref().and_then(format_for_path))
        .unwrap_or_else(|| inputs[0].format());
    let mut notes = Vec::new();
    let mut prepared: Vec<(Secret, SealOptions, String)> = Vec::new();
    for input in &inputs {
        let secrets: Vec<Secret> = input.objects("Secret", "v1")?;
        for (i, secret) in secrets.iter().enumerate() {
            let what = describe_secret(secret, i, &input.source);
            let (secret, options, mut more) = request.prepare(secret, &what);
            request.check_scope(kseal_api::scope_of(&secret.metadata), &what)?;
            notes.append(&mut more);
            prepared.push((secret, options, what));
        }
    }
    let by_ns = certs_by_namespace(
        request,
        loaded,
        prepared.iter().map(|(s, o, _)| sealed_for(s, o)),
        &mut notes,
    )?;
    let cert_for = |secret: &Secret, options: &SealOptions, i: usize| {
        let key = if request.certs.per_namespace() {
            sealed_for(secret, options)
        } else {
            None
        };
        by_ns
            .get(&key)
            .and_then(|certs| certs.get(i))
            .map(|c| &c.cert)
    };
    let certs = by_ns.values().next().context("no certificate source")?;
    let backend = backend_for(prepared.iter().map(|(s, _, _)| value_count(s)).sum());
    // Seal everything before writing anything: a failure leaves no output behind.
    let outputs = certs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let text = prepared
                .iter()
                .map(|(secret, options, what)| {
                    let cert = cert_for(secret, options, i)
                        .context("no certificate loaded for this namespace")?;
                    seal_secret_with(backend, secret, cert.public_key(), options)
                        .with_context(|| format!("failed to seal {what}"))
                })
                .collect::<Result<Vec<SealedSecret>>>()
                .and_then(|sealed| {
                    for s in &sealed {
                        let warning = size_warning(s, &sealed_name(s));
                        // Once per object: every certificate gives about the same size.
                        if let Some(w) = warning.filter(|w| !notes.contains(w)) {
                            notes.push(w);
                        }
                    }
                    render(&sealed, format)
                });
            let text = if certs.len() > 1 {
                text.with_context(|| format!("failed to seal for certificate `{}`", c.name))?
            } else {
                text?
            };
            Ok((c.name.as_str(), text))
        })
        .collect::<Result<Vec<_>>>()?;
    // Said once everything sealed: with an error, the error is what matters.
    for note in notes {
        eprintln!("{note}");
    }
    match &request.write {
        None => {
            let all: String = outputs.into_iter().map(|(_, text)| text).collect();
            crate::output::stdout(&all)
        }
        Some(path) if outputs.len() == 1 => crate::output::emit(&outputs[0].1, Some(path)),
        Some(path) => {
            for (name, text) in &outputs {
                crate::output::emit(text, Some(&path_for_cert(path, name)))?;
            }
            Ok(())
        }
    }
}

fn seal_merge(request: &SealRequest, path: &Path) -> Result<()> {
    let mut target =
        SealedFile::read_one(path).context("failed to read the SealedSecret to merge into")?;
    if request.format.is_some_and(|f| f != target.format) {
        eprintln!(
            "note: --format is ignored with --merge-into: `{}` keeps its format",
            path.display()
        );
    }
    let existing = &target.sealed[0];
    let name = existing
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .with_context(|| format!("the SealedSecret in `{}` has no name", path.display()))?;
    let namespace = existing.metadata.namespace.clone();
    let file_scope = existing.scope();
    request.check_scope(file_scope, &format!("`{}`", path.display()))?;
    let cert = request
        .certs
        .for_namespace(namespace.as_deref())
        .load_one()?;
    if kseal_api::binding::template_binding(&existing.metadata)? {
        // Merging rewrites the template's labels and annotations: the items already there
        // are bound to the old template and would refuse to open.
        bail!(
            "`{}` is bound to its template (kseal.dev/template-binding), which merging would \
             change: seal the whole Secret again with --bind-template instead",
            path.display()
        );
    }
    let secrets = read_merge_inputs(&request.inputs)?;
    let backend = backend_for(secrets.iter().map(|(_, s)| value_count(s)).sum());
    let mut added = Vec::new();
    let mut replaced = Vec::new();
    let mut kept = Vec::new();
    let opener = if request.keys.is_empty() {
        None
    } else {
        let label = file_scope.label(namespace.as_deref().unwrap_or_default(), &name);
        Some((crate::keysource::keys::load_ring(&request.keys)?, label))
    };
    for (place, secret) in &secrets {
        let what = || place.clone();
        check_merge_input(
            request,
            path,
            place,
            secret,
            file_scope,
            namespace.as_deref(),
            &name,
        )?;
        let mut secret = secret.clone();
        secret.metadata.namespace.clone_from(&namespace);
        if let Some((ring, label)) = &opener {
            let before = kept.len();
            keep_unchanged(&mut secret, &target.sealed[0], ring, label, &mut kept);
            if kept.len() > before && value_count(&secret) == 0 {
                // Every item is unchanged: nothing of this Secret is sealed or merged.
                continue;
            }
        }
        let options = SealOptions {
            name: Some(name.clone()),
            namespace: None,
            default_namespace: None,
            scope: file_scope,
            allow_empty_data: request.allow_empty_data,
            ..SealOptions::default()
        };
        let sealed = seal_secret_with(backend, &secret, cert.public_key(), &options)
            .with_context(|| format!("failed to seal {}", what()))?;
        merge_into_value(&mut target.values[0], &sealed, &mut added, &mut replaced)
            .with_context(|| format!("failed to update `{}`", path.display()))?;
    }
    if !kept.is_empty() && added.is_empty() && replaced.is_empty() {
        eprintln!(
            "`{}` is unchanged: {} kept (same values)",
            path.display(),
            kept.iter()
                .map(|i| format!("`{i}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(());
    }
    let text = target.render()?;
    crate::manifest::write_atomic(path, text.as_bytes(), false)?;
    let kept_note = if kept.is_empty() {
        String::new()
    } else {
        format!(
            "; kept {} (same values)",
            kept.iter()
                .map(|i| format!("`{i}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    eprintln!(
        "updated `{}`: {}{kept_note}",
        path.display(),
        describe_changes(&added, &replaced)
    );
    let ns = namespace.as_deref().unwrap_or("-");
    if let Some(warning) = size_warning(&target.values[0], &format!("{ns}/{name}")) {
        eprintln!("{warning}");
    }
    Ok(())
}

/// The Secrets of the input files, with where each was read (`document N of SOURCE`).
fn read_merge_inputs(inputs: &[PathBuf]) -> Result<Vec<(String, Secret)>> {
    let mut secrets = Vec::new();
    for input in Input::read_all(inputs)? {
        let objects: Vec<Secret> = input.objects("Secret", "v1")?;
        secrets.extend(
            objects
                .into_iter()
                .enumerate()
                .map(|(i, secret)| (format!("document {} of {}", i + 1, input.source), secret)),
        );
    }
    Ok(secrets)
}

/// Refuses an input Secret that asks for another scope than the file's, and notes one whose
/// own name or namespace differs from the file's (its items are sealed for the file's).
fn check_merge_input(
    request: &SealRequest,
    path: &Path,
    place: &str,
    secret: &Secret,
    file_scope: Scope,
    namespace: Option<&str>,
    name: &str,
) -> Result<()> {
    let input_scope = kseal_api::scope_of(&secret.metadata);
    let asked = request
        .scope
        .or((input_scope != Scope::Strict).then_some(input_scope));
    if let Some(asked) = asked
        && asked != file_scope
    {
        bail!(
            "scope mismatch: `{}` is sealed {}, but {} asks for {}; items of one \
             SealedSecret must share its scope (pass --scope {} or reseal the file)",
            path.display(),
            file_scope.as_str(),
            place,
            asked.as_str(),
            file_scope.as_str()
        );
    }
    let declared_ns = secret
        .metadata
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty());
    let declared_name = secret.metadata.name.as_deref().filter(|n| !n.is_empty());
    if declared_ns.is_some_and(|n| Some(n) != namespace) || declared_name.is_some_and(|n| n != name)
    {
        eprintln!(
            "note: {} is `{}/{}`; its items are sealed for `{}/{}` as in `{}`",
            place,
            declared_ns.unwrap_or("-"),
            declared_name.unwrap_or("-"),
            namespace.unwrap_or("-"),
            name,
            path.display()
        );
    }
    Ok(())
}

/// Drops from `secret` every item whose value equals what the existing item of the same
/// name in `existing` opens to (with `ring`, under `label`), and names it in `kept`: its
/// ciphertext stays as it is. An item that does not open is sealed anew.
fn keep_unchanged(
    secret: &mut Secret,
    existing: &SealedSecret,
    ring: &kseal_keys::KeyRing,
    label: &kseal_keys::Label,
    kept: &mut Vec<String>,
) {
    let hint = existing.sealing_key_hint();
    let mut names: Vec<String> = secret
        .data
        .iter()
        .flat_map(|d| d.keys())
        .chain(secret.string_data.iter().flat_map(|d| d.keys()))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    for item in names {
        let Some(current) = existing.spec.encrypted_data.get(&item) else {
            continue;
        };
        // stringData wins over data, as the API server merges them.
        let new: &[u8] = match (
            secret.string_data.as_ref().and_then(|d| d.get(&item)),
            secret.data.as_ref().and_then(|d| d.get(&item)),
        ) {
            (Some(text), _) => text.as_bytes(),
            (None, Some(bytes)) => &bytes.0,
            (None, None) => continue,
        };
        let Ok(opened) = ring.open_base64(label, current, hint.as_ref()) else {
            continue;
        };
        if opened.plaintext.expose() == new {
            if let Some(d) = secret.data.as_mut() {
                d.remove(&item);
            }
            if let Some(d) = secret.string_data.as_mut() {
                d.remove(&item);
            }
            kept.push(item);
        }
    }
}

/// Adds `sealed`'s items and template labels/annotations to the SealedSecret document
/// `target` (nothing is removed), and points the sealing-key hint at the new key.
fn merge_into_value(
    target: &mut crate::yaml::Doc,
    sealed: &SealedSecret,
    added: &mut Vec<String>,
    replaced: &mut Vec<String>,
) -> Result<()> {
    for (item, value) in &sealed.spec.encrypted_data {
        set_item(target, item, value, added, replaced)?;
    }
    if let Some(meta) = sealed
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
    {
        for (field, map) in [("labels", &meta.labels), ("annotations", &meta.annotations)] {
            let Some(map) = map.as_ref().filter(|m| !m.is_empty()) else {
                continue;
            };
            let dest = mapping_at(target, &["spec", "template", "metadata", field])?;
            for (k, v) in map {
                dest.insert(k.as_str().into(), v.as_str().into());
            }
        }
    }
    if let Some(hint) = sealed
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SEALING_KEY_ANNOTATION))
    {
        mapping_at(target, &["metadata", "annotations"])?
            .insert(SEALING_KEY_ANNOTATION.into(), hint.as_str().into());
    }
    Ok(())
}

fn seal_raw(request: &SealRequest, raw: &RawRequest) -> Result<()> {
    let scope = request.default_scope();
    request.check_scope(scope, "the raw value")?;
    let name = request.name.as_deref().filter(|n| !n.is_empty());
    if scope == Scope::Strict && name.is_none() {
        bail!("--raw with strict scope needs the name (--name)");
    }
    // As for whole Secrets (and kubeseal): without -n, the default namespace.
    let namespace = match (scope, request.explicit_namespace()) {
        (Scope::Cluster, _) => "",
        (_, Some(ns)) => ns,
        (_, None) => {
            eprintln!(
                "note: sealing for namespace `{}` (no -n; {})",
                request.default_namespace.namespace, request.default_namespace.origin
            );
            &request.default_namespace.namespace
        }
    };
    let name = if scope == Scope::Strict {
        name.unwrap_or_default()
    } else {
        ""
    };
    check_names(Some(name), Some(namespace), [])?;
    let cert = request
        .certs
        .for_namespace(Some(namespace).filter(|n| !n.is_empty()))
        .load_one()?;
    let value = read_value(
        raw.from_file.as_deref(),
        raw.strip_newline,
        None,
        raw.allow_empty,
    )?;
    let label = scope.label(namespace, name);
    let sealed = seal_value(cert.public_key(), &label, &value)?;
    crate::output::emit(&sealed, request.write.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_per_certificate_get_the_name_before_the_extension() {
        assert_eq!(
            path_for_cert(Path::new("out/sealed.yaml"), "dr"),
            PathBuf::from("out/sealed.dr.yaml")
        );
        assert_eq!(
            path_for_cert(Path::new("sealed"), "dr"),
            PathBuf::from("sealed.dr")
        );
        assert_eq!(
            path_for_cert(Path::new("{cert}/db.yaml"), "prod"),
            PathBuf::from("prod/db.yaml")
        );
    }
}
