//! Where the sealing certificate comes from: a file, an https URL, or the controller's
//! `/v1/cert.pem` through the Kubernetes API server's service proxy.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use kseal_keys::Certificate;

use crate::args::CertArgs;
use crate::controller::{Controller, ControllerTarget, status_message};
use crate::http;

/// One certificate source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    File(PathBuf),
    Url(String),
    Controller,
    /// A fleet key ring's index (`secretsmanager://R`, `dir:///path`): its sealing key.
    Ring(String),
}

/// A source with the name used to tell its outputs apart (`--cert NAME=SOURCE`).
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) name: String,
    pub(crate) source: Source,
}

/// A validated certificate request: the sources plus how to reach the controller.
#[derive(Debug, Clone)]
pub(crate) struct CertRequest {
    pub(crate) specs: Vec<Spec>,
    pub(crate) controller: ControllerTarget,
    pub(crate) allow_http: bool,
    /// `--ring-anchor`, for key-ring sources.
    pub(crate) ring_anchor: Option<String>,
}

/// A certificate ready to seal with.
pub(crate) struct NamedCert {
    pub(crate) name: String,
    pub(crate) cert: Certificate,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Parses `[NAME=]SOURCE`. `NAME` is optional; without it the name is derived from the source.
pub(crate) fn parse_spec(text: &str) -> Result<Spec> {
    let (name, source_text) = match text.split_once('=') {
        Some((name, rest)) if valid_name(name) && !rest.is_empty() => (Some(name), rest),
        _ => (None, text),
    };
    if source_text.is_empty() {
        bail!("empty --cert value");
    }
    let source = if is_ring_url(source_text) {
        Source::Ring(source_text.to_owned())
    } else if http::is_http_url(source_text) {
        Source::Url(source_text.to_owned())
    } else if let Some(path) = http::file_url_path(source_text) {
        Source::File(PathBuf::from(path))
    } else {
        Source::File(PathBuf::from(source_text))
    };
    let name = match name {
        Some(n) => n.to_owned(),
        None => default_name(&source),
    };
    Ok(Spec { name, source })
}

/// `secretsmanager://…` or `dir://…`: a key ring rather than a file.
fn is_ring_url(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.starts_with("secretsmanager://") || lower.starts_with("dir://")
}

fn default_name(source: &Source) -> String {
    match source {
        Source::Ring(location) => {
            let rest = location
                .split_once("://")
                .map_or(location.as_str(), |(_, r)| r);
            let rest = rest.split('?').next().unwrap_or(rest).trim_end_matches('/');
            sanitize(rest.rsplit('/').next().unwrap_or("ring"))
        }
        Source::File(path) => {
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("cert");
            // `kseal keys generate --out-dir prod` makes `prod/tls.crt`: name it `prod`.
            if stem == "tls"
                && let Some(dir) = path
                    .parent()
                    .and_then(Path::file_name)
                    .and_then(|d| d.to_str())
            {
                return sanitize(dir);
            }
            sanitize(stem)
        }
        Source::Url(url) => {
            let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
            sanitize(rest.split(['/', ':', '?']).next().unwrap_or("url"))
        }
        Source::Controller => "controller".to_owned(),
    }
}

fn sanitize(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if s.is_empty() { "cert".to_owned() } else { s }
}

impl CertRequest {
    pub(crate) fn from_args(args: &CertArgs) -> Result<Self> {
        let mut specs = args
            .cert
            .iter()
            .map(|c| parse_spec(c))
            .collect::<Result<Vec<_>>>()?;
        if specs.is_empty() {
            specs.push(Spec {
                name: "controller".to_owned(),
                source: Source::Controller,
            });
        }
        for (i, spec) in specs.iter().enumerate() {
            if specs[..i].iter().any(|s| s.name == spec.name) {
                bail!(
                    "two certificates are both named `{}`: name them with --cert NAME=SOURCE",
                    spec.name
                );
            }
        }
        Ok(Self {
            specs,
            controller: ControllerTarget {
                ring: args
                    .controller_ring
                    .clone()
                    .filter(|r| !r.trim().is_empty()),
                ..ControllerTarget::from_args(&args.controller)
            },
            allow_http: args.allow_http,
            ring_anchor: args.ring_anchor.clone(),
        })
    }

    /// Whether the certificate may depend on the namespace sealed for: it comes from the
    /// controller and no `--controller-ring` names the ring.
    pub(crate) fn per_namespace(&self) -> bool {
        self.controller.ring.is_none() && self.specs.iter().any(|s| s.source == Source::Controller)
    }

    /// The same request for objects sealed for `namespace` (`None`: cluster-wide): the
    /// controller is asked for the certificate that seals there (`/v1/cert.pem?namespace=NS`).
    /// Other sources are unchanged.
    pub(crate) fn for_namespace(&self, namespace: Option<&str>) -> Self {
        let mut request = self.clone();
        if self.per_namespace() {
            request.controller.for_namespace =
                namespace.filter(|n| !n.is_empty()).map(str::to_owned);
        }
        request
    }

    /// A description of a source for messages.
    pub(crate) fn describe(&self, source: &Source) -> String {
        match source {
            Source::File(p) => format!("`{}`", p.display()),
            Source::Url(u) => format!("`{u}`"),
            Source::Controller => match &self.controller.for_namespace {
                None => format!(
                    "the controller `{}/{}`",
                    self.controller.namespace, self.controller.name
                ),
                Some(ns) => format!(
                    "the controller `{}/{}` (its certificate for namespace `{ns}`)",
                    self.controller.namespace, self.controller.name
                ),
            },
            Source::Ring(location) => format!("the sealing key of key ring `{location}`"),
        }
    }

    /// The certificate text, exactly as the source serves it.
    pub(crate) fn fetch_pem(&self, source: &Source) -> Result<String> {
        match source {
            Source::File(path) => {
                if !path.exists() && looks_like_a_ring_prefix(path) {
                    bail!(
                        "certificate file `{}` does not exist; --cert takes a file, an URL or a \
                         ring URL: to seal to the key ring `{0}`, pass --cert \
                         secretsmanager://{0}",
                        path.display()
                    );
                }
                Ok(fs_err::read_to_string(path)
                    .context("failed to read the sealing certificate")?)
            }
            Source::Url(url) => self.fetch_url(url),
            Source::Controller => self.fetch_from_controller(),
            Source::Ring(location) => match super::ring_certificate_reader() {
                Some(read) => read(location, self.ring_anchor.as_deref()).with_context(|| {
                    format!("failed to read the sealing certificate of `{location}`")
                }),
                None => bail!(
                    "reading key ring `{location}` is `kseal-ring`'s job, and this program does \
                     not include it"
                ),
            },
        }
    }

    fn fetch_url(&self, url: &str) -> Result<String> {
        let https = url.to_ascii_lowercase().starts_with("https://");
        if !https && !self.allow_http {
            bail!(
                "refusing to fetch certificate `{url}` over plain http: anyone on the path could \
                 swap it and read every secret sealed with it; use https, or --allow-http on a \
                 trusted network"
            );
        }
        let client = http::Client::new(&http::Tls::default(), !self.allow_http)?;
        let response = client
            .get(url, &[("Accept", "application/x-pem-file, */*")])
            .with_context(|| format!("failed to fetch certificate `{url}`"))?;
        if response.status != 200 {
            bail!(
                "failed to fetch certificate `{url}`: the server answered HTTP {}",
                response.status
            );
        }
        Ok(response.body)
    }

    fn fetch_from_controller(&self) -> Result<String> {
        let controller = Controller::connect(&self.controller)
            .context("no --cert given, so the certificate is fetched from the controller")?;
        let response = controller.request("GET", &self.controller.cert_path(), None)?;
        let asked = match (&self.controller.ring, &self.controller.for_namespace) {
            (Some(ring), _) => Some(format!("ring `{ring}`")),
            (None, Some(ns)) => Some(format!("namespace `{ns}`")),
            (None, None) => None,
        };
        if let (Some(asked), 404 | 503) = (asked, response.status) {
            // kseal's controller answers in plain text: `no ring "…" here (this controller's
            // rings: …)`, `no key of ring … seals: …` or `no key seals: ring … seals for
            // namespace …`.
            let said = response.body.lines().next().unwrap_or_default().trim();
            let said: String = said.chars().take(300).collect();
            bail!(
                "the controller `{}` serves no certificate for {asked} (HTTP {}){}",
                controller.describe(),
                response.status,
                if said.is_empty() {
                    String::new()
                } else {
                    format!(": {said}")
                }
            );
        }
        if response.status != 200 {
            bail!(
                "the controller `{}` did not return its certificate (HTTP {}{}): is it \
                 running? To seal offline, pass --cert FILE",
                controller.describe(),
                response.status,
                status_message(&response.body)
            );
        }
        Ok(response.body)
    }

    /// Fetches, parses and checks every certificate (RSA, not expired).
    pub(crate) fn load(&self) -> Result<Vec<NamedCert>> {
        self.specs
            .iter()
            .map(|spec| {
                let mut text = self.fetch_pem(&spec.source)?;
                let mut what = self.describe(&spec.source);
                // A key backup (`kubectl get secret -l …sealed-secrets-key -o yaml`): its
                // sealing key, by the same rule as `reseal --key`.
                if let Source::File(path) = &spec.source
                    && !crate::keysource::keys::is_pem(&text)
                    && let Some(pem) = crate::keysource::keys::backup_certificate(path, &text)?
                {
                    text = pem;
                    what = format!("of the sealing key of {what}");
                }
                let cert = check(&text, &what)?;
                Ok(NamedCert {
                    name: spec.name.clone(),
                    cert,
                })
            })
            .collect()
    }

    /// Exactly one certificate (for commands that seal once).
    pub(crate) fn load_one(&self) -> Result<Certificate> {
        if self.specs.len() > 1 {
            bail!(
                "this command seals with one certificate; got {}",
                self.specs.len()
            );
        }
        let mut certs = self.load()?;
        certs.pop().map(|c| c.cert).context("no certificate source")
    }
}

/// `kseal/fleet`: what `--ring` takes for a Secrets Manager prefix, relative, without a file
/// extension. Given to `--cert` (where it would be a file) it is almost certainly meant as the
/// ring.
fn looks_like_a_ring_prefix(path: &std::path::Path) -> bool {
    let text = path.to_string_lossy();
    path.is_relative()
        && path.extension().is_none()
        && text.contains('/')
        && !text.starts_with('.')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_+=.@-".contains(c))
}

/// Parses a PEM certificate and refuses one that cannot be used for sealing.
pub(crate) fn check(text: &str, what: &str) -> Result<Certificate> {
    let cert = Certificate::from_pem(text)
        .with_context(|| format!("failed to read certificate {what}"))?;
    if cert.is_expired_at(SystemTime::now()) {
        bail!(
            "certificate {what} expired on {}: refusing to seal with it",
            crate::time::utc_time(cert.not_after())
        );
    }
    Ok(cert)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cert_specs_take_an_optional_name() {
        let s = parse_spec("dr=keys/backup.pem").unwrap();
        assert_eq!(s.name, "dr");
        assert_eq!(s.source, Source::File("keys/backup.pem".into()));
        let s = parse_spec("keys/prod/tls.crt").unwrap();
        assert_eq!(s.name, "prod");
        let s = parse_spec("fleet.crt").unwrap();
        assert_eq!(s.name, "fleet");
        let s = parse_spec("https://certs.example.com:8443/fleet.pem").unwrap();
        assert_eq!(s.name, "certs.example.com");
        assert_eq!(
            s.source,
            Source::Url("https://certs.example.com:8443/fleet.pem".into())
        );
        let s = parse_spec("b=https://x.example/c.pem?a=b").unwrap();
        assert_eq!(s.name, "b");
        // A path with `=` after a slash is a path.
        let s = parse_spec("./a=b.pem").unwrap();
        assert_eq!(s.source, Source::File("./a=b.pem".into()));
    }
}
