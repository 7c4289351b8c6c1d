//! The json report of `kseal check`.

use anyhow::Result;

use super::super::Totals;
use super::super::finding::Finding;
use super::super::scan::{FileReport, Object};
use super::{findings_of, shown};

pub(super) fn finding_json(
    report: &FileReport,
    object: Option<&Object>,
    f: &Finding,
) -> serde_json::Value {
    serde_json::json!({
        "rule": f.rule.id(),
        "level": f.rule.level().as_str(),
        "file": shown(&report.path),
        "line": f.line,
        "document": object.map(|o| o.document),
        "object": object.map(|o| o.name.clone()),
        "item": f.item,
        "message": f.message,
    })
}

pub(crate) fn json(reports: &[FileReport], totals: &Totals) -> Result<String> {
    let findings: Vec<serde_json::Value> = reports
        .iter()
        .flat_map(|r| {
            findings_of(r)
                .into_iter()
                .map(move |(o, f)| finding_json(r, o, f))
        })
        .collect();
    let value = serde_json::json!({
        "files": totals.files,
        "sealedSecrets": totals.objects,
        "items": totals.items,
        "errors": totals.errors,
        "warnings": totals.warnings,
        "findings": findings,
    });
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}
