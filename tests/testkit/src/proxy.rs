//! The Service proxy subresource:
//! `/api/v1/namespaces/{ns}/services/{[scheme:]name[:port]}/proxy/{path}`, which kubeseal-style
//! clients use to reach a controller's HTTP API (`/v1/cert.pem`, `/v1/verify`, `/v1/rotate`).

use std::collections::HashMap;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method, Uri, header};
use tower::ServiceExt as _;

use crate::error::ApiError;
use crate::server::{Inner, error_response};

/// Where requests to a Service's proxy subresource go.
#[derive(Clone)]
pub enum ProxyTarget {
    /// Handled in-process by this router (for example the controller's HTTP API router).
    Router(axum::Router),
    /// Forwarded over HTTP to this base URL, e.g. `http://127.0.0.1:8080`.
    Url(String),
}

impl std::fmt::Debug for ProxyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Router(_) => f.write_str("ProxyTarget::Router"),
            Self::Url(u) => write!(f, "ProxyTarget::Url({u})"),
        }
    }
}

/// Registered proxy targets by (namespace, service name).
pub(crate) type ProxyTargets = HashMap<(String, String), ProxyTarget>;

/// `(namespace, service name, path after /proxy)` of a service proxy path.
pub(crate) fn parse_proxy_path(path: &str) -> Option<(String, String, String)> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let (ns, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("services/")?;
    let (spec, rest) = rest.split_once('/')?;
    let tail = rest.strip_prefix("proxy")?;
    if !(tail.is_empty() || tail.starts_with('/')) {
        return None;
    }
    // `[scheme:]name[:port]`
    let parts: Vec<&str> = spec.split(':').collect();
    let name = match parts.as_slice() {
        [name] | [name, _] => *name,
        [_, name, _] => *name,
        _ => return None,
    };
    let tail = if tail.is_empty() { "/" } else { tail };
    Some((ns.to_owned(), name.to_owned(), tail.to_owned()))
}

/// Forwards a proxied request to the Service's registered target.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn forward(
    inner: &Inner,
    method: Method,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Bytes,
    ns: &str,
    name: &str,
    tail: &str,
) -> Response {
    let exists = inner
        .lock()
        .get(&(String::new(), "services".to_owned()), ns, name)
        .is_some();
    if !exists {
        return error_response(&ApiError::not_found("", "services", name));
    }
    let target = inner.proxy_target(ns, name);
    let Some(target) = target else {
        return error_response(&ApiError::new(
            503,
            "ServiceUnavailable",
            format!("no endpoints available for service \"{name}\""),
        ));
    };
    let path_and_query = match query {
        Some(q) => format!("{tail}?{q}"),
        None => tail.to_owned(),
    };
    let base = match &target {
        ProxyTarget::Router(_) => String::new(),
        ProxyTarget::Url(u) => u.trim_end_matches('/').to_owned(),
    };
    let uri: Uri = match format!("{base}{path_and_query}").parse() {
        Ok(u) => u,
        Err(e) => {
            return error_response(&ApiError::bad_request(format!("invalid proxy path: {e}")));
        }
    };
    let mut req = http::Request::new(Body::from(body));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    for (k, v) in headers {
        if k != header::HOST && k != header::AUTHORIZATION && k != header::CONTENT_LENGTH {
            req.headers_mut().append(k, v.clone());
        }
    }
    match target {
        ProxyTarget::Router(router) => match router.oneshot(req).await {
            Ok(resp) => resp,
            Err(never) => match never {},
        },
        ProxyTarget::Url(_) => {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<Body>();
            match client.request(req).await {
                Ok(resp) => resp.map(Body::new),
                Err(e) => error_response(&ApiError::new(
                    503,
                    "ServiceUnavailable",
                    format!("error trying to reach service: {e}"),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_paths_name_namespace_service_and_tail() {
        assert_eq!(
            parse_proxy_path(
                "/api/v1/namespaces/kube-system/services/http:sealed-secrets-controller:http/proxy/v1/cert.pem"
            ),
            Some((
                "kube-system".into(),
                "sealed-secrets-controller".into(),
                "/v1/cert.pem".into()
            ))
        );
        assert_eq!(
            parse_proxy_path("/api/v1/namespaces/ns/services/svc/proxy"),
            Some(("ns".into(), "svc".into(), "/".into()))
        );
        assert_eq!(parse_proxy_path("/api/v1/namespaces/ns/services/svc"), None);
        assert_eq!(
            parse_proxy_path("/api/v1/namespaces/ns/services/svc/proxyx"),
            None
        );
    }
}
