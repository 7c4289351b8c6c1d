//! The controller's HTTP API (`/v1/cert.pem`, `/v1/verify`, `/v1/rotate`), reached through
//! the Kubernetes API server's service proxy with the kubeconfig's credentials. Built on the
//! blocking client of [`crate::http`].

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use kseal_api::validation;

use crate::args::ControllerArgs;
use crate::http;
use crate::kubeconfig::{self, Auth};

/// Where the controller is and how to reach its API server.
#[derive(Debug, Clone, Default)]
pub(crate) struct ControllerTarget {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) kubeconfig: Option<PathBuf>,
    pub(crate) context: Option<String>,
    /// `--controller-ring`: the ring whose certificate to fetch from a controller that mirrors
    /// several (`/v1/cert.pem?ring=RING`).
    pub(crate) ring: Option<String>,
    /// The namespace the sealed objects are for, when no ring is named: the controller serves
    /// the certificate of the ring that seals there (`/v1/cert.pem?namespace=NS`; a controller
    /// with one ring, an older kseal and Bitnami's ignore the query and serve their one).
    pub(crate) for_namespace: Option<String>,
}

impl ControllerTarget {
    pub(crate) fn from_args(args: &ControllerArgs) -> Self {
        Self {
            name: args.controller_name.clone(),
            namespace: args.controller_namespace.clone(),
            kubeconfig: args.kubeconfig.clone(),
            context: args.context.clone(),
            ring: None,
            for_namespace: None,
        }
    }

    /// The controller's certificate path: `/v1/cert.pem`, with `?ring=RING` (percent-encoded)
    /// for `--controller-ring`, else `?namespace=NS` for the namespace sealed for.
    pub(crate) fn cert_path(&self) -> String {
        let (key, value) = match (&self.ring, &self.for_namespace) {
            (Some(ring), _) => ("ring", ring),
            (None, Some(namespace)) => ("namespace", namespace),
            (None, None) => return "/v1/cert.pem".to_owned(),
        };
        let mut path = format!("/v1/cert.pem?{key}=");
        for b in value.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                path.push(char::from(b));
            } else {
                path.push_str(&format!("%{b:02X}"));
            }
        }
        path
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

/// The Kubernetes `Status` message of an error body, if it has one.
pub(crate) fn status_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(|m| format!(": {m}")))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_ring_is_asked_for_by_its_percent_encoded_name() {
        let mut target = ControllerTarget {
            name: "kseal-controller".into(),
            namespace: "kseal-system".into(),
            kubeconfig: None,
            context: None,
            ring: None,
            for_namespace: None,
        };
        assert_eq!(target.cert_path(), "/v1/cert.pem");
        target.for_namespace = Some("team-a".into());
        assert_eq!(target.cert_path(), "/v1/cert.pem?namespace=team-a");
        // A ring named on the command line wins over the namespace sealed for.
        target.ring = Some("kseal/team-a+b=c".into());
        assert_eq!(
            target.cert_path(),
            "/v1/cert.pem?ring=kseal%2Fteam-a%2Bb%3Dc"
        );
    }

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
}
