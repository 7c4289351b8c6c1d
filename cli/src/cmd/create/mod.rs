//! `kseal create git-credentials` and `kseal create aws-credentials`: the bootstrap secrets a
//! new cluster needs, built in memory and sealed in one step. Plaintext never touches the disk.
//! One file per command ([`git`](mod@git), [`aws`](mod@aws)), and one per format they read or
//! write: OpenSSH keys (`ssh`), PEM files (`pem`), Git URLs (`giturl`) and AWS's INI
//! credentials file (`ini`).

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kseal_api::SealOptions;
use kseal_keys::Plaintext;

use crate::args::OutArgs;
use crate::keysource::cert::CertRequest;
use crate::manifest::{format_for_path, render};

mod aws;
mod git;
mod giturl;
mod ini;
mod pem;
mod ssh;

pub(crate) use aws::aws;
pub(crate) use git::git;

/// Items of the Secret being built; values are zeroized when dropped.
pub(super) type Items = BTreeMap<String, Plaintext>;

/// The certificate request of `cert`, with the `.kseal.yaml` creation rule of the output
/// path filling `--cert` when it is not given.
pub(super) fn cert_request(cert: &crate::args::CertArgs, out: &OutArgs) -> Result<CertRequest> {
    let rule = crate::project::rule_for_output(out.write.as_deref())?;
    let mut cert = cert.clone();
    crate::project::apply_cert(&mut cert.cert, rule.as_ref())?;
    CertRequest::from_args(&cert)
}

/// Where [`seal_and_emit`] seals for: the creation rule of the output path, the namespace
/// and the scope.
fn destination(
    out: &OutArgs,
    default_namespace: Option<&str>,
) -> Result<(
    Option<crate::project::MatchedRule>,
    String,
    kseal_api::Scope,
)> {
    let rule = crate::project::rule_for_output(out.write.as_deref())?;
    // -n, else the consumer's namespace (the one its controller reads, e.g. flux-system),
    // else the creation rule's. Every consumer defines one today, so a rule's namespace
    // does not move a bootstrap Secret away from where its consumer looks for it.
    let namespace = out
        .namespace
        .clone()
        .or_else(|| default_namespace.map(str::to_owned))
        .or_else(|| rule.as_ref().and_then(|r| r.namespace()).map(str::to_owned))
        .unwrap_or_else(|| "default".to_owned());
    let scope = out
        .scope
        .or_else(|| rule.as_ref().and_then(|r| r.scope()))
        .unwrap_or(kseal_api::Scope::Strict);
    Ok((rule, namespace, scope))
}

/// The certificate [`seal_and_emit`] seals with for the same `out` and default namespace:
/// from the controller, the one it serves for that namespace (a controller with rings bound
/// to namespaces seals each namespace with the ring bound there), whatever the scope.
pub(super) fn load_certificate(
    cert: &CertRequest,
    out: &OutArgs,
    default_namespace: Option<&str>,
) -> Result<kseal_keys::Certificate> {
    // Also for a cluster-wide Secret: the ring bound where it is applied (see `seal`).
    let (_, namespace, _) = destination(out, default_namespace)?;
    cert.for_namespace(Some(namespace.as_str())).load_one()
}

/// Seals `items` into a SealedSecret named by `out` (or the defaults) and emits it.
pub(super) fn seal_and_emit(
    certificate: &kseal_keys::Certificate,
    out: &OutArgs,
    default_name: &str,
    default_namespace: Option<&str>,
    labels: BTreeMap<String, String>,
    items: Items,
) -> Result<()> {
    let (rule, namespace, scope) = destination(out, default_namespace)?;
    let name = out.name.clone().unwrap_or_else(|| default_name.to_owned());
    if let Some(rule) = &rule {
        rule.check_scope(scope, &format!("Secret `{namespace}/{name}`"))?;
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: (!labels.is_empty()).then_some(labels),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        // The plaintext leaves its zeroizing buffers only for this in-memory Secret.
        data: Some(
            items
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.expose().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    };
    let options = SealOptions {
        scope,
        ..SealOptions::default()
    };
    let backend = crate::sealing::backend_for(items.len());
    let sealed =
        crate::sealing::seal_secret_with(backend, &secret, certificate.public_key(), &options)
            .with_context(|| format!("failed to seal Secret `{namespace}/{name}`"))?;
    let format = out
        .format
        .or_else(|| out.write.as_deref().and_then(format_for_path))
        .unwrap_or(crate::args::Format::Yaml);
    let text = render(&[sealed], format)?;
    // Written first, reported after: a failed write never follows a success line.
    crate::output::emit(&text, out.write.as_deref())?;
    eprintln!(
        "sealed Secret `{namespace}/{name}` with items {}",
        items
            .keys()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// Reads a hidden value: from a flag or variable, from stdin, or from a prompt (asked when
/// `prompt` is set or stdin is a terminal). `None` when no source applies.
pub(super) fn read_hidden(
    value: Option<&String>,
    from_stdin: bool,
    prompt: bool,
    what: &str,
) -> Result<Option<Plaintext>> {
    use std::io::{IsTerminal as _, Read as _};
    if let Some(v) = value {
        return Ok(Some(Plaintext::new(v.clone().into_bytes())));
    }
    if from_stdin {
        let mut bytes = Plaintext::new(Vec::new()).into_zeroizing();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .with_context(|| format!("failed to read the {what} from standard input"))?;
        // A secret never ends in a newline; `echo` adds one.
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        return Ok(Some(Plaintext::new(std::mem::take(&mut *bytes))));
    }
    if prompt || std::io::stdin().is_terminal() {
        let value = rpassword::prompt_password(format!("{what} (not echoed): "))
            .with_context(|| format!("failed to read the {what} from the terminal"))?;
        return Ok(Some(Plaintext::new(value.into_bytes())));
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// AWS credentials
