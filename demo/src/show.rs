//! What the demo prints: explained steps, commands, and tables whose secret values are always
//! masked.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt as _;

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

/// A value as the demo prints it: never the whole value. Private keys show only their kind and
/// size; other values their first 4 characters (none when that would be most of the value),
/// `…` and their size.
pub(crate) fn mask(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    if text.contains("PRIVATE KEY") {
        let kind = if text.contains("OPENSSH PRIVATE KEY") {
            "ssh private key"
        } else {
            "private key"
        };
        return format!("<{kind}, {} bytes>", value.len());
    }
    let chars = text.chars().count();
    if chars <= 8 || text.contains('\u{fffd}') {
        return format!("… ({} bytes)", value.len());
    }
    let head: String = text
        .chars()
        .take(4)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("{head}… ({} bytes)", value.len())
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
            rows.push(vec![name, type_, key.clone(), mask(&value.0)]);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_values_never_show_more_than_four_characters() {
        assert_eq!(
            mask(b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
            "wJal… (40 bytes)"
        );
        assert_eq!(mask(b"s3cr3t"), "… (6 bytes)");
        assert_eq!(
            mask(b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"),
            "<ssh private key, 74 bytes>"
        );
        assert_eq!(mask(b"[default]\naws"), "[def… (13 bytes)");
        assert_eq!(mask(&[0xff; 20]), "… (20 bytes)");
    }

    #[test]
    fn shell_quoting_only_when_needed() {
        assert_eq!(shell_quote("dir:///tmp/a/ring"), "dir:///tmp/a/ring");
        assert_eq!(shell_quote("/tmp/my dir"), "'/tmp/my dir'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }
}
