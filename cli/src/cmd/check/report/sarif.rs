//! The sarif report of `kseal check`.

use anyhow::Result;

use super::super::finding::RULES;
use super::super::scan::FileReport;
use super::{findings_of, shown};

pub(crate) fn sarif(reports: &[FileReport]) -> Result<String> {
    let rules: Vec<serde_json::Value> = RULES
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.id(),
                "shortDescription": { "text": r.description() },
                "defaultConfiguration": { "level": r.level().as_str() },
            })
        })
        .collect();
    let mut results = Vec::new();
    for report in reports {
        for (object, f) in findings_of(report) {
            let mut message = f.message.clone();
            if let Some(o) = object {
                message = format!("{}: {message}", o.name);
            }
            let index = RULES.iter().position(|r| *r == f.rule).unwrap_or(0);
            results.push(serde_json::json!({
                "ruleId": f.rule.id(),
                "ruleIndex": index,
                "level": f.rule.level().as_str(),
                "message": { "text": message },
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": { "uri": shown(&report.path) },
                        "region": { "startLine": f.line },
                    }
                }],
            }));
        }
    }
    let value = serde_json::json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "kseal",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/kseal/kseal",
                "rules": rules,
            }},
            "results": results,
        }],
    });
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}
