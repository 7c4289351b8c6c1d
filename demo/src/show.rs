//! What the demo prints: explained steps, commands, and tables whose secret values are always
//! masked.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt as _;

/// The demo's directory, as the tool prints it; shown as `$DEMO`, as in the narration.
static DEMO_DIR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the directory that [`with_demo_var`] replaces (once; later calls are ignored).
pub(crate) fn set_demo_dir(dir: &std::path::Path) {
    let _ = DEMO_DIR.set(dir.display().to_string());
}

/// `line` with the demo's directory written `$DEMO`.
pub(crate) fn with_demo_var(line: &str) -> String {
    match DEMO_DIR.get() {
        Some(dir) if !dir.is_empty() => line.replace(dir.as_str(), "$DEMO"),
        _ => line.to_owned(),
    }
}

/// Indentation of everything under a step's line.
pub(crate) const INDENT: &str = "      ";

/// A step's one explaining line.
pub(crate) fn step(n: usize, total: usize, text: &str) {
    eprintln!("\n[{n}/{total}] {text}");
}

/// A line under a step.
pub(crate) fn note(text: &str) {
    eprintln!("{INDENT}{text}");
}

/// Quotes `arg` for a POSIX shell when it needs it, so printed commands can be pasted.
pub(crate) fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_+=.@:,-".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// A value as the demo prints it: never any of a secret value. Private keys show their kind and
/// size, items that are public by nature (an SSH public key, known hosts) their first characters,
/// every other value only its size.
pub(crate) fn mask(key: &str, value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    if text.contains("PRIVATE KEY") {
        let kind = if text.contains("OPENSSH PRIVATE KEY") {
            "ssh private key"
        } else {
            "private key"
        };
        return format!("<{kind}, {} bytes>", value.len());
    }
    let public = key.ends_with(".pub") || key == "known_hosts";
    if public && !text.contains('\u{fffd}') {
        let head: String = text
            .chars()
            .take(16)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        return format!("{head}… ({} bytes, public)", value.len());
    }
    format!("•••••• ({} bytes)", value.len())
}

/// A table with left-aligned columns, indented.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                out.push_str(cell);
                out.push_str(&" ".repeat(pad + 2));
            }
        }
        eprintln!("{INDENT}{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// Rows of Secrets: `namespace/name`, type, then one row per item with its value masked.
pub(crate) fn secret_rows(secrets: &[Secret]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for secret in secrets {
        let mut first = true;
        for (key, value) in secret.data.iter().flatten() {
            let (name, type_) = if first {
                (
                    format!(
                        "{}/{}",
                        secret.namespace().unwrap_or_default(),
                        secret.name_any()
                    ),
                    secret.type_.clone().unwrap_or_else(|| "Opaque".to_owned()),
                )
            } else {
                (String::new(), String::new())
            };
            first = false;
            rows.push(vec![name, type_, key.clone(), mask(key, &value.0)]);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_show_nothing_but_their_size() {
        assert_eq!(
            mask(
                "aws_secret_access_key",
                b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
            ),
            "•••••• (40 bytes)"
        );
        assert_eq!(
            mask("password", b"correct-horse-battery-staple"),
            "•••••• (28 bytes)"
        );
        assert_eq!(mask("password", b"s3cr3t"), "•••••• (6 bytes)");
        assert_eq!(
            mask(
                "identity",
                b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"
            ),
            "<ssh private key, 74 bytes>"
        );
        assert_eq!(mask("credentials", b"[default]\naws"), "•••••• (13 bytes)");
        assert_eq!(mask("x", &[0xff; 20]), "•••••• (20 bytes)");
        // Public by nature: the start shows, so a reader can tell what it is.
        assert_eq!(
            mask(
                "identity.pub",
                b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA kseal"
            ),
            "ssh-ed25519 AAAA… (42 bytes, public)"
        );
    }

    #[test]
    fn shell_quoting_only_when_needed() {
        assert_eq!(shell_quote("dir:///tmp/a/ring"), "dir:///tmp/a/ring");
        assert_eq!(shell_quote("/tmp/my dir"), "'/tmp/my dir'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }
}
