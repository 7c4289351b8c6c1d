//! A small blocking HTTP(S) client for certificates and the Kubernetes API: `ureq` on rustls
//! with the aws-lc-rs crypto provider (the one the rest of kseal uses), no async runtime.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use ureq::tls::{ClientCert, PemItem, RootCerts, TlsConfig, TlsProvider};

/// Certificates larger than this are not certificates.
const MAX_BODY: u64 = 4 * 1024 * 1024;

/// How to verify the server and who we are.
#[derive(Default)]
pub(crate) struct Tls {
    /// PEM CA bundle to trust instead of the system's roots.
    pub(crate) ca_pem: Option<Vec<u8>>,
    /// Client certificate chain and private key, both PEM.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
    /// Skip server verification (kubeconfig `insecure-skip-tls-verify`).
    pub(crate) insecure: bool,
}

/// A response: status and body text.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: String,
}

/// A configured client.
pub(crate) struct Client {
    agent: ureq::Agent,
}

/// The certificates of a PEM text (other blocks, such as keys, are skipped).
fn pem_certificates(pem: &[u8]) -> Result<Vec<ureq::tls::Certificate<'static>>, ureq::Error> {
    ureq::tls::parse_pem(pem)
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(c)) => Some(Ok(c)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect()
}

impl Client {
    pub(crate) fn new(tls: &Tls, https_only: bool) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut builder = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(provider)
            .disable_verification(tls.insecure);
        builder = match &tls.ca_pem {
            Some(pem) => {
                let certs = pem_certificates(pem)
                    .context("failed to parse the certificate authority bundle")?;
                if certs.is_empty() {
                    bail!("the certificate authority bundle holds no PEM certificate");
                }
                builder.root_certs(RootCerts::new_with_certs(&certs))
            }
            None => builder.root_certs(RootCerts::PlatformVerifier),
        };
        if let Some((cert_pem, key_pem)) = &tls.client {
            let chain =
                pem_certificates(cert_pem).context("failed to parse the client certificate")?;
            let key = ureq::tls::PrivateKey::from_pem(key_pem)
                .context("failed to parse the client key")?;
            builder = builder.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        let config = ureq::Agent::config_builder()
            .tls_config(builder.build())
            .https_only(https_only)
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .user_agent(concat!("kseal/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Self {
            agent: ureq::Agent::new_with_config(config),
        })
    }

    /// GETs `url` with optional headers; any status is returned, transport errors fail.
    pub(crate) fn get(&self, url: &str, headers: &[(&str, &str)]) -> Result<Response> {
        let mut request = self.agent.get(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = request.call().map_err(describe)?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(describe)?;
        Ok(Response { status, body })
    }
}

impl Client {
    /// POSTs `body` to `url`; any status is returned, transport errors fail.
    pub(crate) fn post(&self, url: &str, headers: &[(&str, &str)], body: &str) -> Result<Response> {
        let mut request = self.agent.post(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = request.send(body).map_err(describe)?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(describe)?;
        Ok(Response { status, body })
    }
}

/// ureq's errors are terse; keep them, they never contain credentials.
fn describe(e: ureq::Error) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// The path of a `file://` URL, if `text` is one.
pub(crate) fn file_url_path(text: &str) -> Option<&str> {
    text.strip_prefix("file://")
}

/// Whether `text` names an HTTP(S) URL rather than a file.
pub(crate) fn is_http_url(text: &str) -> bool {
    let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_apart_from_paths() {
        assert!(is_http_url("https://example.com/cert.pem"));
        assert!(is_http_url("HTTP://example.com/cert.pem"));
        assert!(!is_http_url("certs/https.pem"));
        assert!(!is_http_url("C:\\certs\\fleet.pem"));
        assert_eq!(file_url_path("file:///etc/c.pem"), Some("/etc/c.pem"));
    }
}
