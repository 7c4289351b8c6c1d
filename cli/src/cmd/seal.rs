//! `kseal seal`: Secrets in, SealedSecrets out.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_api::{Scope, SealOptions, SealedSecret};
use kseal_keys::{Backend, Certificate, Plaintext};

use crate::args::{Format, SealArgs};
use crate::certs::CertRequest;
use crate::manifest::{Input, SealedFile, format_for_path, mapping_at, render};

/// Reads a certificate file and refuses one that cannot be used for sealing.
pub(crate) fn read_certificate(path: &Path) -> Result<Certificate> {
    let text = fs_err::read_to_string(path).context("failed to read the sealing certificate")?;
    crate::certs::check(&text, &format!("`{}`", path.display()))
}

/// Formats a time as `YYYY-MM-DD HH:MM:SS UTC` (a certificate's validity, for people).
pub(crate) fn utc_time(t: SystemTime) -> String {
    utc_civil(t, "%Y-%m-%d %H:%M:%S UTC")
}

/// Formats a time in UTC with a `strftime` pattern. Civil time, not `jiff::Timestamp`: a
/// timestamp's range ends a day before 9999-12-31 23:59:59 UTC, the notAfter of certificates
/// without a well-defined expiration (RFC 5280, 4.1.2.5).
pub(crate) fn utc_civil(t: SystemTime, pattern: &str) -> String {
    let since_epoch = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => jiff::SignedDuration::try_from(d).ok(),
        Err(e) => jiff::SignedDuration::try_from(e.duration())
            .ok()
            .map(|d| -d),
    };
    since_epoch
        .and_then(|d| {
            jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0)
                .checked_add(d)
                .ok()
        })
        .map(|t| t.strftime(pattern).to_string())
        .unwrap_or_else(|| "a date out of range".into())
}

/// Up to this many values a process seals with the pure-Rust backend. AWS-LC's first use of
/// its random generator seeds a CPU-jitter entropy source: about 20 ms of CPU once per
/// process, nearly all of a small `kseal seal`. Past this count AWS-LC's faster RSA (about
/// 140 µs less per value) wins it back. Both backends write the same envelope format.
const PURE_RUST_MAX_VALUES: usize = 128;

/// The sealing backend for a process that seals `values` values.
pub(crate) fn backend_for(values: usize) -> Backend {
    if values <= PURE_RUST_MAX_VALUES {
        Backend::PureRust
    } else {
        Backend::AwsLc
    }
}

/// Number of values a Secret holds (`data` and `stringData`).
fn value_count(secret: &Secret) -> usize {
    secret.data.as_ref().map_or(0, |d| d.len()) + secret.string_data.as_ref().map_or(0, |d| d.len())
}

/// [`kseal_api::seal_secret`] with a chosen backend.
pub(crate) fn seal_secret_with(
    backend: Backend,
    secret: &Secret,
    key: &kseal_keys::PublicKey,
    options: &SealOptions,
) -> Result<SealedSecret> {
    let options = SealOptions {
        backend,
        ..options.clone()
    };
    let sealed = kseal_api::seal_secret(secret, key, &options)?;
    check_names(
        sealed.metadata.name.as_deref(),
        sealed.metadata.namespace.as_deref(),
        sealed.spec.encrypted_data.keys().map(String::as_str),
    )?;
    Ok(sealed)
}

/// Refuses what the API server would refuse at apply time, before a file is written: a
/// Secret name that is not a DNS-1123 subdomain, a namespace that is not a DNS-1123 label,
/// or an item key that is not a valid Secret key (apimachinery's rules and words). A value
/// sealed for a name that cannot exist could never be opened.
pub(crate) fn check_names<'a>(
    name: Option<&str>,
    namespace: Option<&str>,
    keys: impl IntoIterator<Item = &'a str>,
) -> Result<()> {
    use kseal_api::validation;
    if let Some(name) = name.filter(|n| !n.is_empty()) {
        validation::validate_secret_name(name)
            .map_err(|e| anyhow::anyhow!("`{name}` is not a valid Secret name: {e}"))?;
    }
    if let Some(namespace) = namespace.filter(|n| !n.is_empty()) {
        validation::validate_namespace_name(namespace)
            .map_err(|e| anyhow::anyhow!("`{namespace}` is not a valid namespace name: {e}"))?;
    }
    for key in keys {
        validation::is_config_map_key(key)
            .map_err(|e| anyhow::anyhow!("item `{key}` is not a valid Secret key: {e}"))?;
    }
    Ok(())
}

/// Kubernetes' limit on an object, as a SealedSecret should respect it: the API server caps
/// a Secret's `data` at 1 MiB (`MaxSecretSize`), and etcd takes at most 1.5 MiB per request
/// (`--max-request-bytes`) for the stored object, which also carries its status and
/// `managedFields`. A SealedSecret is always larger than the Secret it makes (each value is
/// base64 of the value plus a 530-byte-or-more envelope, so 4/3 of it and more), so one over
/// 1 MiB as JSON is close to or over both limits: the controller could not create its Secret
/// even if the API server stored it.
const OBJECT_LIMIT: usize = 1024 * 1024;

/// The most `kubectl apply` (client-side, Argo CD's default) can store: it copies the whole
/// object into the `last-applied-configuration` annotation, and an object's annotations
/// total at most 256 KiB.
const CLIENT_SIDE_APPLY_LIMIT: usize = 256 * 1024;

/// "1.04 MiB" / "300.0 KiB".
fn human_size(bytes: usize) -> String {
    #[allow(clippy::cast_precision_loss)] // sizes far below 2^52
    let b = bytes as f64;
    if bytes >= 1024 * 1024 {
        format!("{:.2} MiB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

/// The warning for a SealedSecret (any serializable form of it) too large for Kubernetes or
/// for client-side `kubectl apply`, sized as the JSON the API server receives.
pub(crate) fn size_warning(object: &impl serde::Serialize, name: &str) -> Option<String> {
    let size = serde_json::to_vec(object).map_or(0, |json| json.len());
    if size > OBJECT_LIMIT {
        Some(format!(
            "warning: SealedSecret `{name}` is {} as JSON, over Kubernetes' 1 MiB object size \
             limit: the API server may refuse it (etcd takes at most 1.5 MiB per request, \
             metadata included) and the Secret it makes must stay under 1 MiB of data; split \
             its items into several Secrets",
            human_size(size)
        ))
    } else if size > CLIENT_SIDE_APPLY_LIMIT {
        Some(format!(
            "note: SealedSecret `{name}` is {} as JSON, over the 256 KiB that client-side \
             `kubectl apply` (and Argo CD's default sync) can copy into its last-applied \
             annotation; apply it server-side (kubectl apply --server-side, Argo CD \
             ServerSideApply=true)",
            human_size(size)
        ))
    } else {
        None
    }
}

/// `namespace/name` of a SealedSecret, for messages.
fn sealed_name(sealed: &SealedSecret) -> String {
    format!(
        "{}/{}",
        sealed.metadata.namespace.as_deref().unwrap_or("-"),
        sealed.metadata.name.as_deref().unwrap_or("-")
    )
}

/// Seals every Secret of `input` and renders the SealedSecrets.
pub(crate) fn seal_input(
    input: &Input,
    cert: &Certificate,
    options: &SealOptions,
    format: Format,
) -> Result<String> {
    let secrets: Vec<Secret> = input.objects("Secret", "v1")?;
    let backend = backend_for(secrets.iter().map(value_count).sum());
    let sealed = secrets
        .iter()
        .enumerate()
        .map(|(i, secret)| {
            let name = secret.metadata.name.as_deref().unwrap_or("<unnamed>");
            seal_secret_with(backend, secret, cert.public_key(), options).with_context(|| {
                format!(
                    "failed to seal secret `{name}` (document {} of {})",
                    i + 1,
                    input.source
                )
            })
        })
        .collect::<Result<Vec<SealedSecret>>>()?;
    render(&sealed, format)
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

fn seal_normal(request: &SealRequest) -> Result<()> {
    let certs = request.certs.load()?;
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
    let backend = backend_for(prepared.iter().map(|(s, _, _)| value_count(s)).sum());
    // Seal everything before writing anything: a failure leaves no output behind.
    let outputs = certs
        .iter()
        .map(|c| {
            let text = prepared
                .iter()
                .map(|(secret, options, what)| {
                    seal_secret_with(backend, secret, c.cert.public_key(), options)
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
    let cert = request.certs.load_one()?;
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
    let mut secrets = Vec::new();
    for input in Input::read_all(&request.inputs)? {
        let objects: Vec<Secret> = input.objects("Secret", "v1")?;
        secrets.extend(
            objects
                .into_iter()
                .enumerate()
                .map(|(i, secret)| (format!("document {} of {}", i + 1, input.source), secret)),
        );
    }
    let backend = backend_for(secrets.iter().map(|(_, s)| value_count(s)).sum());
    let mut added = Vec::new();
    let mut replaced = Vec::new();
    let mut kept = Vec::new();
    let opener = if request.keys.is_empty() {
        None
    } else {
        let label = file_scope.label(namespace.as_deref().unwrap_or_default(), &name);
        Some((crate::cmd::unseal::load_ring(&request.keys)?, label))
    };
    for (place, secret) in &secrets {
        let what = || place.clone();
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
                what(),
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
        if declared_ns.is_some_and(|n| Some(n) != namespace.as_deref())
            || declared_name.is_some_and(|n| n != name)
        {
            eprintln!(
                "note: {} is `{}/{}`; its items are sealed for `{}/{}` as in `{}`",
                what(),
                declared_ns.unwrap_or("-"),
                declared_name.unwrap_or("-"),
                namespace.as_deref().unwrap_or("-"),
                name,
                path.display()
            );
        }
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

/// "added `a`, `b`; replaced `c`".
pub(crate) fn describe_changes(added: &[String], replaced: &[String]) -> String {
    let list = |items: &[String]| {
        items
            .iter()
            .map(|i| format!("`{i}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if !added.is_empty() {
        parts.push(format!("added {}", list(added)));
    }
    if !replaced.is_empty() {
        parts.push(format!("replaced {}", list(replaced)));
    }
    if parts.is_empty() {
        "no items".to_owned()
    } else {
        parts.join("; ")
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

/// Sets `spec.encryptedData.<item>` in a SealedSecret document.
pub(crate) fn set_item(
    target: &mut crate::yaml::Doc,
    item: &str,
    sealed_b64: &str,
    added: &mut Vec<String>,
    replaced: &mut Vec<String>,
) -> Result<()> {
    let data = mapping_at(target, &["spec", "encryptedData"])?;
    let previous = data.insert(item.into(), sealed_b64.into());
    if previous.is_some() {
        replaced.push(item.to_owned());
    } else {
        added.push(item.to_owned());
    }
    Ok(())
}

/// Reads a value to seal: a file, or all of stdin (bytes, not trimmed). Warns when stdin
/// ends in a newline that will be sealed too. An empty value is refused unless
/// `allow_empty`: it is almost always an unset variable (`printf %s "$TOKEN" |`) or an empty
/// file, and sealing it would hide the mistake until the consumer fails.
pub(crate) fn read_value(
    from_file: Option<&Path>,
    strip_newline: bool,
    prompt: Option<&str>,
    allow_empty: bool,
) -> Result<Plaintext> {
    use std::io::{IsTerminal as _, Read as _};
    let mut bytes = match from_file {
        Some(path) => fs_err::read(path).context("failed to read the value to seal")?,
        None => match prompt {
            Some(prompt) if std::io::stdin().is_terminal() => rpassword::prompt_password(prompt)
                .context("failed to read the value from the terminal")?
                .into_bytes(),
            _ => {
                if std::io::stdin().is_terminal() {
                    eprintln!("(reading the value from standard input; end it with Ctrl-D)");
                }
                let mut bytes = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut bytes)
                    .context("failed to read the value from standard input")?;
                if !strip_newline && bytes.ends_with(b"\n") {
                    eprintln!(
                        "warning: the value from standard input ends with a newline, which is \
                         sealed too; pass --strip-newline to drop it (or use printf %s)"
                    );
                }
                bytes
            }
        },
    };
    if strip_newline && bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    if bytes.is_empty() && !allow_empty {
        let source = match from_file {
            Some(path) => format!("`{}` is empty", path.display()),
            None => {
                "standard input was empty (an unset variable in `printf %s \"$VAR\" |`?)".to_owned()
            }
        };
        bail!(
            "refusing to seal an empty value: {source}; pass --allow-empty-data to seal an \
             empty value on purpose"
        );
    }
    Ok(Plaintext::new(bytes))
}

/// Seals one value (base64), on the backend that starts fastest.
pub(crate) fn seal_value(
    key: &kseal_keys::PublicKey,
    label: &kseal_keys::Label,
    value: &Plaintext,
) -> Result<String> {
    let envelope = kseal_keys::seal_with(backend_for(1), key, label, value.expose())
        .context("failed to seal the value")?;
    Ok(kseal_keys::envelope::encode_base64(&envelope))
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
    let cert = request.certs.load_one()?;
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

    #[test]
    fn both_backends_give_the_same_sealed_secret_shape() {
        let secret: Secret = crate::yaml::from_str(
            "metadata:\n  name: db\n  namespace: prod\n  labels:\n    a: b\ntype: Opaque\ndata:\n  x: eA==\n  y: eQ==\nstringData:\n  y: z\n",
        )
        .unwrap();
        let pair = kseal_keys::KeyPair::generate(
            kseal_keys::KeySize::Rsa2048,
            &kseal_keys::CertificateOptions::default(),
        )
        .unwrap();
        let options = SealOptions {
            scope: Scope::Namespace,
            ..SealOptions::default()
        };
        let fast =
            seal_secret_with(Backend::PureRust, &secret, pair.public_key(), &options).unwrap();
        let reference = kseal_api::seal_secret(&secret, pair.public_key(), &options).unwrap();
        let strip = |s: &SealedSecret| {
            let mut s = s.clone();
            s.spec.encrypted_data.values_mut().for_each(String::clear);
            serde_json::to_value(&s).unwrap()
        };
        assert_eq!(strip(&fast), strip(&reference));
        let ring: kseal_keys::KeyRing = [pair].into_iter().collect();
        let opened = kseal_api::unseal(&fast, &ring).unwrap();
        let data = opened.data.unwrap();
        assert_eq!(data["x"].0, b"x");
        assert_eq!(data["y"].0, b"z");
    }

    #[test]
    fn dates_render_in_utc() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_763_769_600);
        assert_eq!(utc_time(t), "2025-11-22 00:00:00 UTC");
        assert_eq!(utc_time(SystemTime::UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        // A certificate may start before 1970 or end at X.509's "no well-defined expiry".
        let before = SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(1);
        assert_eq!(utc_time(before), "1969-12-31 23:59:59 UTC");
        let end = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(253_402_300_799);
        assert_eq!(utc_time(end), "9999-12-31 23:59:59 UTC");
    }
}
