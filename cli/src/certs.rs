//! Where the sealing certificate comes from: a file, an https URL, or the controller's
//! `/v1/cert.pem` through the Kubernetes API server's service proxy.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use kseal_keys::Certificate;

use crate::args::{CertArgs, ControllerArgs};
use crate::http;
use crate::kubeconfig::{self, Auth};
use kseal_api::validation;

/// Reads a key ring's sealing certificate. Set by the full CLI ([`crate::run`]); `kseal`
/// itself hands every key-ring source to `kseal-ring` before any certificate is read, so the
/// key-ring code (and the AWS SDK) is not linked into it.
static RING_READER: std::sync::OnceLock<RingReader> = std::sync::OnceLock::new();

/// Reads a ring's sealing certificate: the location, and the anchor given on the command line.
type RingReader = fn(&str, Option<&str>) -> Result<String>;

/// Installs the key-ring certificate reader.
pub(crate) fn read_rings_with(reader: RingReader) {
    let _ = RING_READER.set(reader);
}

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

/// Where the controller is and how to reach its API server.
#[derive(Debug, Clone, Default)]
pub(crate) struct ControllerTarget {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) kubeconfig: Option<PathBuf>,
    pub(crate) context: Option<String>,
}

impl ControllerTarget {
    pub(crate) fn from_args(args: &ControllerArgs) -> Self {
        Self {
            name: args.controller_name.clone(),
            namespace: args.controller_namespace.clone(),
            kubeconfig: args.kubeconfig.clone(),
            context: args.context.clone(),
        }
    }
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
            controller: ControllerTarget::from_args(&args.controller),
            allow_http: args.allow_http,
            ring_anchor: args.ring_anchor.clone(),
        })
    }

    /// A description of a source for messages.
    pub(crate) fn describe(&self, source: &Source) -> String {
        match source {
            Source::File(p) => format!("`{}`", p.display()),
            Source::Url(u) => format!("`{u}`"),
            Source::Controller => format!(
                "the controller `{}/{}`",
                self.controller.namespace, self.controller.name
            ),
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
            Source::Ring(location) => match RING_READER.get() {
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
        let response = controller.request("GET", "/v1/cert.pem", None)?;
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
                    && !crate::cmd::unseal::is_pem(&text)
                    && let Some(pem) = crate::cmd::unseal::backup_certificate(path, &text)?
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

/// The controller's HTTP API, reached through the API server's service proxy.
pub(crate) struct Controller {
    client: http::Client,
    auth_header: Option<String>,
    /// `https://api…/api/v1/namespaces/NS/services/http:NAME:PORT/proxy`
    proxy: String,
    server: String,
    context: String,
    namespace: String,
    name: String,
}

impl Controller {
    /// Resolves the kubeconfig and the controller Service's port (its first port's name, as
    /// kubeseal does).
    pub(crate) fn connect(target: &ControllerTarget) -> Result<Self> {
        let (ns, name) = (&target.namespace, &target.name);
        // Both go into the request path: refuse what no Service could be called before
        // anything is sent (a `/` or `?` would address another resource).
        if let Err(e) = validation::validate_namespace_name(ns) {
            bail!("--controller-namespace `{ns}` is not a valid namespace name: {e}");
        }
        if let Err(e) = validation::validate_service_name(name) {
            bail!("--controller-name `{name}` is not a valid Service name: {e}");
        }
        let conn = kubeconfig::connect(target.kubeconfig.as_deref(), target.context.as_deref())?;
        let client = http::Client::new(&conn.tls, false)?;
        let auth_header = match &conn.auth {
            Auth::None => None,
            Auth::Bearer(t) => Some(format!("Bearer {t}")),
            Auth::Basic(u, p) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )),
        };
        let mut controller = Self {
            client,
            auth_header,
            proxy: String::new(),
            server: conn.server,
            context: conn.context,
            namespace: ns.clone(),
            name: name.clone(),
        };
        let service_url = format!(
            "{}/api/v1/namespaces/{ns}/services/{name}",
            controller.server
        );
        let response = controller.send("GET", &service_url, "application/json", None)?;
        match response.status {
            200 => {}
            404 => bail!(
                "no Service `{name}` in namespace `{ns}` (context `{}`): if the controller is \
                 installed under another name, pass --controller-name and \
                 --controller-namespace (or KSEAL_CONTROLLER_NAME / \
                 KSEAL_CONTROLLER_NAMESPACE); to seal offline, pass --cert FILE",
                controller.context
            ),
            status => bail!(
                "failed to read Service `{ns}/{name}` (context `{}`): HTTP {status}{}",
                controller.context,
                status_message(&response.body)
            ),
        }
        let service: serde_json::Value = serde_json::from_str(&response.body)
            .with_context(|| format!("Service `{ns}/{name}` is not valid JSON"))?;
        let port = &service["spec"]["ports"][0];
        let port = port["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .or_else(|| port["port"].as_u64().map(|p| p.to_string()))
            .with_context(|| format!("Service `{ns}/{name}` has no port"))?;
        controller.proxy = format!(
            "{}/api/v1/namespaces/{ns}/services/http:{name}:{port}/proxy",
            controller.server
        );
        Ok(controller)
    }

    /// `namespace/name` of the controller, for messages.
    pub(crate) fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn send(
        &self,
        method: &str,
        url: &str,
        accept: &str,
        body: Option<&str>,
    ) -> Result<http::Response> {
        let mut headers = vec![("Accept", accept)];
        if let Some(a) = &self.auth_header {
            headers.push(("Authorization", a.as_str()));
        }
        let result = match body {
            Some(body) => {
                headers.push(("Content-Type", "application/json"));
                self.client.post(url, &headers, body)
            }
            None => self.client.get(url, &headers),
        };
        result.with_context(|| {
            format!(
                "failed to reach the Kubernetes API server `{}` (context `{}`) for {method} {url}",
                self.server, self.context
            )
        })
    }

    /// `POST /v1/rotate` of one SealedSecret (`body`, JSON): the controller's answer, the
    /// SealedSecret re-sealed to its sealing key; a refusal is an error with its message.
    pub(crate) fn rotate(&self, body: &str) -> Result<String> {
        let response = self.request("POST", "/v1/rotate", Some(body))?;
        if response.status != 200 {
            let message = match status_message(&response.body) {
                m if m.is_empty() => response.body.trim().to_owned(),
                m => m.trim_start_matches(": ").to_owned(),
            };
            bail!(
                "the controller refused (HTTP {}): {message}",
                response.status
            );
        }
        Ok(response.body)
    }

    /// Calls the controller's `path` (e.g. `/v1/verify`) through the service proxy.
    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<http::Response> {
        let accept = if body.is_some() {
            "application/json, */*"
        } else {
            "application/x-pem-file, */*"
        };
        let response = self.send(method, &format!("{}{path}", self.proxy), accept, body)?;
        if let Some(problem) = proxy_failure(&response) {
            bail!(
                "the API server (context `{}`) could not reach the controller behind Service \
                 `{}`: {problem}. The Service exists, but no ready controller Pod backs it: is \
                 the controller running and ready? (`kubectl -n {} get pods,endpoints`){}",
                self.context,
                self.describe(),
                self.namespace,
                if body.is_none() {
                    "; to seal offline, pass --cert FILE"
                } else {
                    ""
                }
            );
        }
        Ok(response)
    }
}

/// The API server's own answer when its service proxy found no ready endpoint (the controller
/// answers in plain text; the proxy with a JSON `Status`): `no endpoints available for service
/// …` (503), or a 404 naming the Service or its Endpoints, which servers give when the
/// Endpoints object does not exist yet.
fn proxy_failure(response: &http::Response) -> Option<String> {
    if !matches!(response.status, 404 | 502 | 503) {
        return None;
    }
    let status: serde_json::Value = serde_json::from_str(&response.body).ok()?;
    if status["kind"].as_str() != Some("Status") {
        return None;
    }
    Some(
        status["message"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map_or_else(
                || format!("HTTP {}", response.status),
                |m| format!("HTTP {}: {m}", response.status),
            ),
    )
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

/// The Kubernetes `Status` message of an error body, if it has one.
pub(crate) fn status_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(|m| format!(": {m}")))
        .unwrap_or_default()
}

/// Parses a PEM certificate and refuses one that cannot be used for sealing.
pub(crate) fn check(text: &str, what: &str) -> Result<Certificate> {
    let cert = Certificate::from_pem(text)
        .with_context(|| format!("failed to read certificate {what}"))?;
    if cert.is_expired_at(SystemTime::now()) {
        bail!(
            "certificate {what} expired on {}: refusing to seal with it",
            crate::cmd::seal::utc_time(cert.not_after())
        );
    }
    Ok(cert)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_failures_are_told_from_controller_answers() {
        let response = |status, body: &str| http::Response {
            status,
            body: body.to_owned(),
        };
        let no_endpoints = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no endpoints available for service \"http:kseal-controller:http\"","reason":"ServiceUnavailable","code":503}"#;
        assert_eq!(
            proxy_failure(&response(503, no_endpoints)).as_deref(),
            Some("HTTP 503: no endpoints available for service \"http:kseal-controller:http\"")
        );
        let not_found = r#"{"kind":"Status","status":"Failure","message":"services \"kseal-controller\" not found","reason":"NotFound","code":404}"#;
        assert!(proxy_failure(&response(404, not_found)).is_some());
        // The controller's own answers are plain text: never taken for the proxy's.
        assert_eq!(
            proxy_failure(&response(503, "no sealing key is loaded yet\n")),
            None
        );
        assert_eq!(proxy_failure(&response(409, not_found)), None);
        assert_eq!(
            proxy_failure(&response(200, "-----BEGIN CERTIFICATE-----")),
            None
        );
    }

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
