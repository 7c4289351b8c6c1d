//! Finding SealedSecrets in a tree: manifest files, their documents and the line each
//! object and item starts on, read in parallel with an optional progress line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use kseal_api::SealedSecret;
use kseal_api::constants::{API_VERSION, KIND};

use super::finding::{Finding, Rule};

/// One SealedSecret found.
#[derive(Debug)]
pub(super) struct Object {
    /// `namespace/name`.
    pub(super) name: String,
    /// Its document (from 1) in the file.
    pub(super) document: usize,
    pub(super) line: usize,
    /// Each item's line.
    pub(super) item_lines: BTreeMap<String, usize>,
    pub(super) findings: Vec<Finding>,
    /// Dropped once the private tier has run.
    pub(super) sealed: Option<SealedSecret>,
}

/// One manifest file with SealedSecrets (or findings).
#[derive(Debug)]
pub(super) struct FileReport {
    pub(super) path: PathBuf,
    /// Findings not about one object (a document that does not parse).
    pub(super) findings: Vec<Finding>,
    pub(super) objects: Vec<Object>,
}

/// The YAML documents of `text` with the line (from 1) each starts on; a JSON file is one.
pub(super) fn documents(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0usize;
    let mut start_line = 1usize;
    let mut offset = 0usize;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t") {
            out.push((start_line, &text[start..offset]));
            start = offset + line.len();
            start_line = i + 2;
        }
        offset += line.len();
    }
    out.push((start_line, &text[start..]));
    out.retain(|(_, doc)| {
        doc.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#') && !t.starts_with('%')
        })
    });
    out
}

/// The line (from 1) of the first line of `doc` (which starts on `first`) matching `pred`
/// at or after line `from`.
pub(super) fn line_of(
    doc: &str,
    first: usize,
    from: usize,
    pred: impl Fn(&str) -> bool,
) -> Option<usize> {
    doc.lines()
        .enumerate()
        .map(|(i, l)| (first + i, l))
        .find(|(n, l)| *n >= from && pred(l))
        .map(|(n, _)| n)
}

/// `key:` or `"key":` at the start of a (trimmed) line.
pub(super) fn is_key_line(line: &str, key: &str) -> bool {
    let t = line.trim_start().trim_start_matches("- ");
    let rest = t
        .strip_prefix('"')
        .and_then(|r| r.strip_prefix(key))
        .and_then(|r| r.strip_prefix('"'))
        .or_else(|| {
            t.strip_prefix('\'')
                .and_then(|r| r.strip_prefix(key))
                .and_then(|r| r.strip_prefix('\''))
        })
        .or_else(|| t.strip_prefix(key));
    rest.is_some_and(|r| r.trim_start().starts_with(':'))
}

/// The most `kseal check` reads of one file: manifests are far smaller, and a committed file
/// (or a link to `/proc`) must not make the gate run out of memory.
pub(super) const MAX_FILE_BYTES: u64 = 16 << 20;

/// A finding for a file that is not read.
fn not_read(report: &mut FileReport, message: String) {
    report.findings.push(Finding {
        rule: Rule::NotRead,
        line: 1,
        item: None,
        message,
    });
}

pub(super) fn read_file(path: &Path) -> Result<FileReport> {
    use std::io::Read as _;
    let mut report = FileReport {
        path: path.to_path_buf(),
        findings: Vec::new(),
        objects: Vec::new(),
    };
    let file = fs_err::File::open(path)?;
    // The open file is inspected, so it cannot be swapped between the check and the read.
    let meta = file.metadata()?;
    if !meta.is_file() {
        not_read(
            &mut report,
            "not a regular file (a FIFO or a device would never end): not read".to_owned(),
        );
        return Ok(report);
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("failed to read `{}`", path.display()))?;
    if meta.len() > MAX_FILE_BYTES
        || u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES
    {
        not_read(
            &mut report,
            format!(
                "larger than the {} MiB kseal check reads of one file: not read, so it may \
                 hide a SealedSecret; split it, or exclude it (--exclude, or `excludes:` in \
                 .kseal.yaml)",
                MAX_FILE_BYTES >> 20
            ),
        );
        return Ok(report);
    }
    let Ok(text) = String::from_utf8(bytes) else {
        if is_manifest_name(path) {
            report.findings.push(Finding {
                rule: Rule::Parse,
                line: 1,
                item: None,
                message: "the file is not UTF-8 text".to_owned(),
            });
        }
        return Ok(report);
    };
    if !text.contains(KIND) {
        return Ok(report);
    }
    if let Some(chart) = chart_of_template(path) {
        let line = text
            .lines()
            .position(|l| l.contains(KIND))
            .map_or(1, |i| i + 1);
        report.findings.push(Finding {
            rule: Rule::HelmTemplate,
            line,
            item: None,
            message: format!(
                "a template of the Helm chart `{}`, not checked: check what `helm template` \
                 renders, and exclude the chart's templates (--exclude, or `excludes:` in \
                 .kseal.yaml)",
                chart.display()
            ),
        });
        return Ok(report);
    }
    for (number, (first, doc)) in documents(&text).into_iter().enumerate() {
        let number = number + 1;
        if !doc.contains(KIND) {
            continue;
        }
        read_document(&mut report, number, first, doc);
    }
    Ok(report)
}

/// One document (number `number`, from line `first`) that mentions a SealedSecret: each
/// SealedSecret of it (a `List`'s items included) as an object, or why it is not one.
fn read_document(report: &mut FileReport, number: usize, first: usize, doc: &str) {
    let value: serde_json::Value = match crate::yaml::from_str(doc) {
        Ok(v) => v,
        Err(_) if doc.contains("{{") => {
            report.findings.push(Finding {
                rule: Rule::HelmTemplate,
                line: first,
                item: None,
                message: format!(
                    "document {number} is a template (`{{{{ … }}}}`), not YAML: not \
                     checked; check what it renders to, and exclude the file (--exclude, \
                     or `excludes:` in .kseal.yaml)"
                ),
            });
            return;
        }
        Err(e) => {
            let line = e
                .location()
                .and_then(|l| usize::try_from(l.line()).ok())
                .map_or(first, |l| first + l.saturating_sub(1));
            report.findings.push(Finding {
                rule: Rule::Parse,
                line,
                item: None,
                message: format!("document {number} does not parse: {e}"),
            });
            return;
        }
    };
    let values = crate::manifest::list_items(value);
    let mut from = first;
    for value in values {
        if value.get("kind").and_then(|k| k.as_str()) != Some(KIND)
            || value.get("apiVersion").and_then(|k| k.as_str()) != Some(API_VERSION)
        {
            continue;
        }
        let line = line_of(doc, first, from, |l| {
            is_key_line(l, "kind") && l.contains(KIND)
        })
        .unwrap_or(first);
        from = line + 1;
        match serde_json::from_value::<SealedSecret>(value) {
            Err(e) => report.findings.push(Finding {
                rule: Rule::Parse,
                line,
                item: None,
                message: format!("document {number} is not a valid SealedSecret: {e}"),
            }),
            Ok(sealed) => report
                .objects
                .push(object_of(sealed, doc, first, line, number)),
        }
    }
}

/// The object for `sealed`, found on `line` of document `number` (`doc`, from line
/// `first`), with the line of each of its items.
fn object_of(sealed: SealedSecret, doc: &str, first: usize, line: usize, number: usize) -> Object {
    let data_line = line_of(doc, first, first, |l| is_key_line(l, "encryptedData"));
    let item_lines = sealed
        .spec
        .encrypted_data
        .keys()
        .map(|item| {
            let at = data_line
                .and_then(|d| line_of(doc, first, d, |l| is_key_line(l, item)))
                .unwrap_or(line);
            (item.clone(), at)
        })
        .collect();
    Object {
        name: format!(
            "{}/{}",
            sealed.metadata.namespace.as_deref().unwrap_or("-"),
            sealed.metadata.name.as_deref().unwrap_or("-")
        ),
        document: number,
        line,
        item_lines,
        findings: Vec::new(),
        sealed: Some(sealed),
    }
}

/// The chart directory when `path` lies under the `templates/` directory of a Helm chart
/// (the directory above it holds `Chart.yaml`): a template, not a manifest.
pub(super) fn chart_of_template(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|dir| dir.file_name().is_some_and(|n| n == "templates"))
        .and_then(Path::parent)
        .filter(|chart| chart.join("Chart.yaml").is_file())
        .map(|chart| {
            if chart.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                chart.to_path_buf()
            }
        })
}

pub(super) fn is_manifest_name(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

/// A worker's `f` panicked on one input: what it said.
#[derive(Debug)]
pub(super) struct Panicked(pub(super) String);

impl Panicked {
    fn of(payload: &(dyn std::any::Any + Send)) -> Self {
        let text = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned());
        Self(text)
    }
}

/// `f` over `inputs` on every core, in order; draws a progress bar on stderr after a second
/// when `progress`. One result per input, always: an input on which `f` panicked gives
/// [`Panicked`] (the caller fails closed), never a dropped result.
pub(super) fn parallel_map<T: Send, U: Send>(
    inputs: Vec<T>,
    label: &str,
    progress: bool,
    f: impl Fn(T) -> U + Sync,
) -> Vec<Result<U, Panicked>> {
    let total = inputs.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(total.max(1));
    let slots: Vec<std::sync::Mutex<Option<T>>> = inputs
        .into_iter()
        .map(|t| std::sync::Mutex::new(Some(t)))
        .collect();
    let results: Vec<std::sync::Mutex<Option<Result<U, Panicked>>>> =
        (0..total).map(|_| std::sync::Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        if progress {
            scope.spawn(|| draw_progress(label, total, &done, &finished));
        }
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= total {
                            break;
                        }
                        // A poisoned slot still holds its input: a panic is caught below,
                        // never while a lock is held.
                        let input = slots[i]
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .take();
                        if let Some(input) = input {
                            let out =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(input)))
                                    .map_err(|payload| Panicked::of(payload.as_ref()));
                            *results[i]
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(out);
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for w in workers {
            let _ = w.join();
        }
        finished.store(true, Ordering::Relaxed);
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .unwrap_or_else(|| Err(Panicked("its worker stopped before it".to_owned())))
        })
        .collect()
}

pub(super) fn draw_progress(label: &str, total: usize, done: &AtomicUsize, finished: &AtomicBool) {
    let start = Instant::now();
    let mut drawn = false;
    while !finished.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if start.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let n = done.load(Ordering::Relaxed);
        let width = 30;
        let filled = (n * width).checked_div(total).unwrap_or(width).min(width);
        eprint!(
            "\r{label} [{}{}] {n}/{total}",
            "=".repeat(filled),
            " ".repeat(width - filled)
        );
        drawn = true;
    }
    if drawn {
        eprint!("\r{}\r", " ".repeat(label.len() + 50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_start_on_their_lines_and_empty_ones_are_dropped() {
        let text = "# head\n---\na: 1\n---\n# only a comment\n---\nb: 2\n";
        let docs = documents(text);
        assert_eq!(docs, vec![(3, "a: 1\n"), (7, "b: 2\n")]);
    }

    #[test]
    fn a_panicking_input_gives_its_own_error_and_the_others_their_results() {
        let inputs: Vec<usize> = (0..40).collect();
        let out = parallel_map(inputs, "testing", false, |i| {
            assert!(i != 17, "input {i} is cursed");
            i * 2
        });
        assert_eq!(out.len(), 40);
        for (i, r) in out.iter().enumerate() {
            match r {
                Ok(v) => assert_eq!(*v, i * 2),
                Err(Panicked(message)) => {
                    assert_eq!(i, 17);
                    assert_eq!(message, "input 17 is cursed");
                }
            }
        }
        assert_eq!(out.iter().filter(|r| r.is_err()).count(), 1);
    }

    #[test]
    fn files_under_a_charts_templates_are_templates() {
        let tmp = tempfile::tempdir().unwrap();
        let chart = tmp.path().join("charts/app");
        std::fs::create_dir_all(chart.join("templates/sub")).unwrap();
        std::fs::create_dir_all(tmp.path().join("plain/templates")).unwrap();
        std::fs::write(chart.join("Chart.yaml"), "name: app\n").unwrap();
        assert_eq!(
            chart_of_template(&chart.join("templates/sub/secret.yaml")),
            Some(chart.clone())
        );
        assert_eq!(chart_of_template(&chart.join("values.yaml")), None);
        assert_eq!(
            chart_of_template(&tmp.path().join("plain/templates/secret.yaml")),
            None
        );
    }

    #[test]
    fn key_lines_are_found_in_yaml_and_json() {
        assert!(is_key_line("  password: AgB", "password"));
        assert!(is_key_line("    \"password\": \"AgB\"", "password"));
        assert!(!is_key_line("  password2: AgB", "password"));
    }
}
