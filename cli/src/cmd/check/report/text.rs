//! The text report of `kseal check`.

use std::io::IsTerminal as _;

use super::super::Totals;
use super::super::finding::Level;
use super::super::scan::FileReport;
use super::super::summary;
use super::{findings_of, shown};

pub(crate) fn human(reports: &[FileReport], totals: &Totals) -> String {
    use std::fmt::Write as _;
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let paint = |code: &str, text: &str| {
        if colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    };
    let mut out = String::new();
    for report in reports {
        let all = findings_of(report);
        if all.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{}", paint("1", &shown(&report.path)));
        for (object, f) in all {
            let level = match f.rule.level() {
                Level::Error => paint("31", "error"),
                Level::Warning => paint("33", "warning"),
            };
            let what = object.map_or_else(String::new, |o| format!("{}: ", o.name));
            let _ = writeln!(
                out,
                "  {}: {level}: {what}{} [{}]",
                f.line,
                f.message,
                f.rule.id()
            );
        }
    }
    let _ = writeln!(out, "{}", summary(totals));
    out
}
