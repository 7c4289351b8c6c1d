//! The four report formats of `kseal check`: text for people ([`text`]), JSON
//! ([`json`](mod@json)), SARIF for code-scanning UIs ([`sarif`](mod@sarif)) and JUnit XML for
//! CI test reports ([`junit`](mod@junit)).

mod json;
mod junit;
mod sarif;
mod text;

pub(super) use json::json;
pub(super) use junit::junit;
pub(super) use sarif::sarif;
pub(super) use text::human;

use std::path::Path;

use super::finding::Finding;
use super::scan::{FileReport, Object};

/// A path for reports: as walked, with `/` separators and no leading `./`.
pub(super) fn shown(path: &Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    text.strip_prefix("./").map(str::to_owned).unwrap_or(text)
}

/// Every finding of a file with the object it is about.
pub(super) fn findings_of(report: &FileReport) -> Vec<(Option<&Object>, &Finding)> {
    let mut all: Vec<(Option<&Object>, &Finding)> =
        report.findings.iter().map(|f| (None, f)).collect();
    for object in &report.objects {
        all.extend(object.findings.iter().map(|f| (Some(object), f)));
    }
    all.sort_by_key(|(_, f)| (f.line, f.rule));
    all
}
