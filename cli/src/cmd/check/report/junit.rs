//! The junit report of `kseal check`.

use super::super::finding::{Finding, Level};
use super::super::scan::FileReport;
use super::shown;

/// Text for XML attributes and elements (characters XML 1.0 forbids dropped).
pub(super) fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML that both common schemas accept (Jenkins' junit-4 and Maven Surefire's
/// surefire-test-report-3.0, which wants a single `testsuite` root and a `time` on each case):
/// one test suite, one test case per SealedSecret (and one per document that does not parse),
/// its file as the class name; errors fail, warnings are listed in `system-out` (and fail with
/// `--strict`). No attribute outside both schemas (no `file` or `line`: the failure text has
/// them).
pub(crate) fn junit(reports: &[FileReport], strict: bool) -> String {
    use std::fmt::Write as _;
    let fails = |f: &Finding| f.rule.level() == Level::Error || strict;
    let mut cases = String::new();
    let (mut tests, mut failures) = (0usize, 0usize);
    for report in reports {
        let file = xml(&shown(&report.path));
        let mut case = |name: String, findings: Vec<&Finding>| {
            tests += 1;
            let failing: Vec<&&Finding> = findings.iter().filter(|f| fails(f)).collect();
            let _ = writeln!(
                cases,
                "  <testcase classname=\"{file}\" name=\"{}\" time=\"0\">",
                xml(&name)
            );
            if !failing.is_empty() {
                failures += 1;
                let body: Vec<String> = failing
                    .iter()
                    .map(|f| format!("{}:{}: {} [{}]", file, f.line, xml(&f.message), f.rule.id()))
                    .collect();
                let _ = writeln!(
                    cases,
                    "    <failure type=\"{}\" message=\"{}\">{}</failure>",
                    failing[0].rule.id(),
                    xml(&failing[0].message),
                    body.join("\n")
                );
            }
            let notes: Vec<String> = findings
                .iter()
                .filter(|f| !fails(f))
                .map(|f| {
                    format!(
                        "{}: {}:{}: {} [{}]",
                        f.rule.level().as_str(),
                        file,
                        f.line,
                        xml(&f.message),
                        f.rule.id()
                    )
                })
                .collect();
            if !notes.is_empty() {
                let _ = writeln!(cases, "    <system-out>{}</system-out>", notes.join("\n"));
            }
            cases.push_str("  </testcase>\n");
        };
        for f in &report.findings {
            case(format!("line {}", f.line), vec![f]);
        }
        for object in &report.objects {
            case(
                format!("{} (document {})", object.name, object.document),
                object.findings.iter().collect(),
            );
        }
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"kseal check\" \
         tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"0\">\n\
         {cases}</testsuite>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_text_is_escaped() {
        assert_eq!(xml("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;");
    }
}
