//! The sarif report of `kseal check`, within what code-scanning services accept: at most one
//! result per object and rule (how many findings and items it stands for is in its
//! `properties`), at most [`MAX_RESULTS`] results (errors kept first) plus one summary result
//! saying how many were left out, file URIs percent-encoded, and a `partialFingerprints`
//! entry on each result that follows the object rather than its line.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::Result;

use super::super::finding::{Finding, Level, RULES, Rule};
use super::super::scan::{FileReport, Object};
use super::shown;
use crate::text::count;

/// The most results a run holds, far below GitHub code scanning's 25,000 per run, so that
/// the file also stays well below its 10 MB (gzip) upload limit.
pub(crate) const MAX_RESULTS: usize = 5_000;

/// The id of the one result that says how many were left out.
const OMITTED_RULE: &str = "results-omitted";

/// The item names a result's message lists, at most.
const MAX_NAMED_ITEMS: usize = 10;

/// `path` as a URI reference (RFC 3986): relative as walked, `file://` when absolute; every
/// byte but the unreserved characters and `/` percent-encoded (a space, `%` or `#` in a file
/// name would otherwise change what the URI names).
pub(super) fn uri(path: &Path) -> String {
    let shown = shown(path);
    let mut out = String::with_capacity(shown.len() + 8);
    if shown.starts_with('/') {
        out.push_str("file://");
    }
    for byte in shown.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A stable id for a result: the same object, rule and file give the same fingerprint
/// wherever its lines move.
fn fingerprint(parts: &[&str]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, parts.join("\0").as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// One result before the cap.
struct Pending {
    rule: Rule,
    uri: String,
    line: usize,
    message: String,
    findings: usize,
    items: usize,
    fingerprint: String,
}

impl Pending {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "ruleId": self.rule.id(),
            "ruleIndex": RULES.iter().position(|r| *r == self.rule).unwrap_or(0),
            "level": self.rule.level().as_str(),
            "message": { "text": self.message },
            "locations": [location(&self.uri, self.line)],
            "partialFingerprints": { "ksealResult/v1": self.fingerprint },
            "properties": { "findings": self.findings, "items": self.items },
        })
    }
}

fn location(uri: &str, line: usize) -> serde_json::Value {
    serde_json::json!({
        "physicalLocation": {
            "artifactLocation": { "uri": uri },
            "region": { "startLine": line.max(1) },
        }
    })
}

/// The one result for `findings` (all of `rule`) of `object`.
fn object_result(
    uri: &str,
    object: &Object,
    rule: Rule,
    findings: &[&Finding],
    nth: usize,
) -> Pending {
    let first = findings[0];
    let mut items: Vec<&str> = findings.iter().filter_map(|f| f.item.as_deref()).collect();
    items.dedup();
    let mut message = format!("{}: {}", object.name, first.message);
    match items.as_slice() {
        [] => {}
        [one] => message.push_str(&format!(" (item `{one}`)")),
        many => {
            let named: Vec<String> = many
                .iter()
                .take(MAX_NAMED_ITEMS)
                .map(|i| format!("`{i}`"))
                .collect();
            let more = if many.len() > MAX_NAMED_ITEMS {
                ", …"
            } else {
                ""
            };
            message.push_str(&format!(
                " ({}: {}{more})",
                count(many.len(), "item"),
                named.join(", ")
            ));
        }
    }
    if findings.len() > items.len().max(1) {
        message.push_str(&format!(" [{}]", count(findings.len(), "finding")));
    }
    Pending {
        rule,
        uri: uri.to_owned(),
        line: findings.iter().map(|f| f.line).min().unwrap_or(object.line),
        message,
        findings: findings.len(),
        items: items.len(),
        fingerprint: fingerprint(&[rule.id(), uri, &object.name, &nth.to_string()]),
    }
}

fn pending(reports: &[FileReport]) -> Vec<Pending> {
    let mut out = Vec::new();
    for report in reports {
        let uri = uri(&report.path);
        for f in &report.findings {
            out.push(Pending {
                rule: f.rule,
                uri: uri.clone(),
                line: f.line,
                message: f.message.clone(),
                findings: 1,
                items: 0,
                fingerprint: fingerprint(&[f.rule.id(), &uri, &f.line.to_string()]),
            });
        }
        // Two objects of one name in a file keep apart by their order.
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for object in &report.objects {
            let nth = seen.entry(object.name.as_str()).or_default();
            let mut by_rule: BTreeMap<Rule, Vec<&Finding>> = BTreeMap::new();
            for f in &object.findings {
                by_rule.entry(f.rule).or_default().push(f);
            }
            for (rule, findings) in by_rule {
                out.push(object_result(&uri, object, rule, &findings, *nth));
            }
            *nth += 1;
        }
    }
    // Per file in order, by line; errors before warnings, so the cap drops warnings first.
    out.sort_by_key(|p| p.rule.level());
    out
}

pub(crate) fn sarif(reports: &[FileReport]) -> Result<String> {
    let mut rules: Vec<serde_json::Value> = RULES
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.id(),
                "shortDescription": { "text": r.description() },
                "defaultConfiguration": { "level": r.level().as_str() },
            })
        })
        .collect();
    rules.push(serde_json::json!({
        "id": OMITTED_RULE,
        "shortDescription": {
            "text": "Results left out to stay within what code-scanning services accept"
        },
        "defaultConfiguration": { "level": "note" },
    }));
    let all = pending(reports);
    let mut results: Vec<serde_json::Value> =
        all.iter().take(MAX_RESULTS).map(Pending::json).collect();
    if let Some(first) = all.get(MAX_RESULTS) {
        let left = &all[MAX_RESULTS..];
        let errors = left
            .iter()
            .filter(|p| p.rule.level() == Level::Error)
            .count();
        let items: usize = left.iter().map(|p| p.items).sum();
        results.push(serde_json::json!({
            "ruleId": OMITTED_RULE,
            "ruleIndex": RULES.len(),
            "level": "note",
            "message": { "text": format!(
                "{} left out ({}, {}; {}): a report keeps at most {MAX_RESULTS} results; \
                 `kseal check -o json` lists every finding",
                count(left.len(), "result"),
                count(errors, "error"),
                count(left.len() - errors, "warning"),
                count(items, "item"),
            )},
            "locations": [location(&first.uri, first.line)],
            "partialFingerprints": { "ksealResult/v1": fingerprint(&[OMITTED_RULE]) },
            "properties": {
                "omittedResults": left.len(),
                "omittedErrors": errors,
                "omittedWarnings": left.len() - errors,
                "omittedItems": items,
            },
        }));
    }
    let value = serde_json::json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "kseal",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/kseal-dev/kseal",
                "rules": rules,
            }},
            "results": results,
        }],
    });
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_percent_encoded_relative_or_file_uris() {
        assert_eq!(
            uri(Path::new("./clusters/my app/100%#1.yaml")),
            "clusters/my%20app/100%25%231.yaml"
        );
        assert_eq!(uri(Path::new("/repo/é.yaml")), "file:///repo/%C3%A9.yaml");
        assert_eq!(uri(Path::new("a-b_c~d.e/f.json")), "a-b_c~d.e/f.json");
    }
}
