//! Sealing, shared by the commands that write SealedSecrets (`seal`, `set`, `create`,
//! `quickstart`): the backend for a process, the checks the API server would make at apply
//! time, size warnings, reading a value to seal, and editing a SealedSecret document's items.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use kseal_api::{SealOptions, SealedSecret};
use kseal_keys::{Backend, Certificate, Plaintext};

use crate::args::Format;
use crate::manifest::{Input, mapping_at, render};

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
pub(crate) fn value_count(secret: &Secret) -> usize {
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

#[cfg(test)]
mod tests {
    use kseal_api::Scope;

    use super::*;

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
}
