//! PEM scanning: finding a block with a wanted label, telling encrypted keys, and reading
//! certificate and private-key files for the credentials Secrets.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use kseal_keys::Plaintext;

/// The decoded body of the first PEM block whose label is one of `labels`, and that label.
/// The base64 text and the decoded bytes stay in zeroizing buffers.
pub(super) fn pem_block<'l>(text: &str, labels: &[&'l str]) -> Option<(&'l str, Plaintext)> {
    let mut lines = text.lines().map(str::trim);
    let label = loop {
        let line = lines.next()?;
        if let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
            .and_then(|l| labels.iter().find(|want| **want == l))
        {
            break *label;
        }
    };
    let end = format!("-----END {label}-----");
    let mut body = Plaintext::new(Vec::new()).into_zeroizing();
    loop {
        let line = lines.next()?;
        if line == end {
            break;
        }
        body.extend(line.bytes().filter(|b| !b.is_ascii_whitespace()));
    }
    let der = Plaintext::new(
        base64::engine::general_purpose::STANDARD
            .decode(&*body)
            .ok()?,
    );
    (!der.is_empty()).then_some((label, der))
}

/// Whether a PEM private key is encrypted: PKCS #8 says so in its label, PKCS #1 in a
/// `Proc-Type: 4,ENCRYPTED` header.
pub(super) fn pem_is_encrypted(text: &str) -> bool {
    text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || text.contains("Proc-Type: 4,ENCRYPTED")
}

/// Reads a PEM file of certificates (a CA bundle or a client certificate chain).
pub(super) fn read_pem_certificates(path: &Path, what: &str) -> Result<Plaintext> {
    use ureq::tls::PemItem;
    let bytes =
        Plaintext::new(fs_err::read(path).with_context(|| format!("failed to read {what}"))?);
    let text = std::str::from_utf8(bytes.expose()).with_context(|| {
        format!(
            "`{}` is not a PEM file (expected {what}: -----BEGIN CERTIFICATE-----)",
            path.display()
        )
    })?;
    // Checked before parsing, so a key is never decoded outside a zeroizing buffer.
    if text.contains("PRIVATE KEY-----") {
        bail!(
            "`{}` holds a private key, but {what} must hold only certificates",
            path.display()
        );
    }
    let mut certificates = 0;
    for item in ureq::tls::parse_pem(bytes.expose()) {
        match item {
            Ok(PemItem::Certificate(_)) => certificates += 1,
            Ok(_) => {}
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "`{}` is not a valid PEM file (expected {what})",
                    path.display()
                )));
            }
        }
    }
    if certificates == 0 {
        bail!(
            "`{}` holds no PEM certificate (expected {what}: -----BEGIN CERTIFICATE-----)",
            path.display()
        );
    }
    Ok(bytes)
}

/// Reads an unencrypted PEM private key whose label is one of `labels`.
pub(super) fn read_pem_private_key(path: &Path, what: &str, labels: &[&str]) -> Result<Plaintext> {
    let bytes =
        Plaintext::new(fs_err::read(path).with_context(|| format!("failed to read {what}"))?);
    let expected = labels
        .iter()
        .map(|l| format!("-----BEGIN {l}-----"))
        .collect::<Vec<_>>()
        .join(" or ");
    let text = std::str::from_utf8(bytes.expose()).with_context(|| {
        format!(
            "`{}` is not a PEM file (expected {what}: {expected})",
            path.display()
        )
    })?;
    if pem_is_encrypted(text) {
        bail!(
            "`{}` is an encrypted private key: {what} must be unencrypted (the sealed Secret \
             protects it); export one with `openssl pkey -in FILE -out COPY`",
            path.display()
        );
    }
    if pem_block(text, labels).is_none() {
        bail!(
            "`{}` is not a PEM private key (expected {what}: {expected})",
            path.display()
        );
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks_need_a_wanted_label_a_matching_end_and_base64() {
        let key =
            "junk\n-----BEGIN RSA PRIVATE KEY-----\nAAEC\nAw==\n-----END RSA PRIVATE KEY-----\n";
        let (label, der) = pem_block(key, &["PRIVATE KEY", "RSA PRIVATE KEY"]).unwrap();
        assert_eq!(label, "RSA PRIVATE KEY");
        assert_eq!(der.expose(), [0, 1, 2, 3]);
        assert!(pem_block(key, &["PRIVATE KEY"]).is_none());
        let unterminated = "-----BEGIN PRIVATE KEY-----\nAAEC\n";
        assert!(pem_block(unterminated, &["PRIVATE KEY"]).is_none());
        let not_base64 = "-----BEGIN PRIVATE KEY-----\n#!?\n-----END PRIVATE KEY-----\n";
        assert!(pem_block(not_base64, &["PRIVATE KEY"]).is_none());
        let empty = "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n";
        assert!(pem_block(empty, &["PRIVATE KEY"]).is_none());
    }

    #[test]
    fn encrypted_pem_keys_are_recognised_by_label_or_header() {
        assert!(pem_is_encrypted(
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAA==\n-----END ENCRYPTED PRIVATE KEY-----\n"
        ));
        assert!(pem_is_encrypted(
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n"
        ));
        assert!(!pem_is_encrypted(
            "-----BEGIN RSA PRIVATE KEY-----\nENCRYPTEDAAAA\n-----END RSA PRIVATE KEY-----\n"
        ));
    }
}
