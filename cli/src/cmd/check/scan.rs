//! Finding SealedSecrets in a tree: manifest files, their documents and the line each
//! object and item starts on, read in parallel with an optional progress line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
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

pub(super) fn read_file(path: &Path) -> Result<FileReport> {
    let bytes = fs_err::read(path)?;
    let mut report = FileReport {
        path: path.to_path_buf(),
        findings: Vec::new(),
        objects: Vec::new(),
    };
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
    for (number, (first, doc)) in documents(&text).into_iter().enumerate() {
        let number = number + 1;
        if !doc.contains(KIND) {
            continue;
        }
        let value: serde_json::Value = match crate::yaml::from_str(doc) {
            Ok(v) => v,
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
                continue;
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
                Ok(sealed) => {
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
                    report.objects.push(Object {
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
                    });
                }
            }
        }
    }
    Ok(report)
}

pub(super) fn is_manifest_name(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

/// `f` over `inputs` on every core, in order; draws a progress bar on stderr after a second
/// when `progress`.
pub(super) fn parallel_map<T: Send, U: Send>(
    inputs: Vec<T>,
    label: &str,
    progress: bool,
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    let total = inputs.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(total.max(1));
    let slots: Vec<std::sync::Mutex<Option<T>>> = inputs
        .into_iter()
        .map(|t| std::sync::Mutex::new(Some(t)))
        .collect();
    let results: Vec<std::sync::Mutex<Option<U>>> =
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
                        let input = slots[i].lock().ok().and_then(|mut s| s.take());
                        if let Some(input) = input {
                            let out = f(input);
                            if let Ok(mut r) = results[i].lock() {
                                *r = Some(out);
                            }
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
        .filter_map(|r| r.into_inner().ok().flatten())
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
    fn key_lines_are_found_in_yaml_and_json() {
        assert!(is_key_line("  password: AgB", "password"));
        assert!(is_key_line("    \"password\": \"AgB\"", "password"));
        assert!(!is_key_line("  password2: AgB", "password"));
    }
}
