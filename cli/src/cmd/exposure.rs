//! `kseal keys exposure KEY [PATH…] [--git-history]`: every SealedSecret item sealed to a key,
//! in the working tree and (with `--git-history`) in every commit, grouped by
//! namespace/name/item with the commit that introduced each value. After a key or a cluster
//! holding it is compromised, these are the values to change at their source: re-sealing and
//! retiring the key do not take back the ciphertexts git history keeps.
//!
//! An item is attributed by its object's `kseal.dev/sealing-key` annotation, as `kseal check`
//! identifies the key of each item; the Bitnami envelope names no key, so an object without
//! the annotation cannot be attributed offline and is listed apart ("unattributed"), as
//! possibly sealed to the key. History is read with the `git` command line (`git log --all`,
//! `git ls-tree`, `git cat-file --batch`): each blob is parsed once, however many commits hold
//! it. Only ciphertext and public metadata are read and printed; nothing is opened.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{BufRead as _, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_keys::{Certificate, KeyId};
use serde::Serialize;

use crate::args::{ExposureArgs, ExposureFormat};
use crate::cmd::check::tree::{Capped, read_capped, walk};
use crate::text::count;

/// The most read of one file or blob: `kseal check`'s cap (manifests are far smaller).
const MAX_BYTES: u64 = crate::cmd::check::tree::MAX_FILE_BYTES;

/// Where one value was seen first.
#[derive(Debug, Clone, Serialize)]
struct Seen {
    /// Its path (relative to the repository root in history, as given in the tree).
    path: String,
    /// The commit that introduced it (`None`: only in the working tree).
    #[serde(skip_serializing_if = "Option::is_none")]
    commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    date: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subject: Option<String>,
    /// Whether the working tree still holds it.
    in_tree: bool,
}

/// One exposed item and each value it had.
#[derive(Debug, Serialize)]
struct Item {
    namespace: String,
    name: String,
    item: String,
    values: Vec<Seen>,
}

/// An object without the annotation: possibly sealed to the key.
#[derive(Debug, Serialize)]
struct Unattributed {
    namespace: String,
    name: String,
    items: Vec<String>,
    #[serde(flatten)]
    seen: Seen,
}

/// What the search found.
#[derive(Debug, Default)]
struct Found {
    /// `(namespace, name, item)` → ciphertext → where it was seen first.
    items: BTreeMap<(String, String, String), Vec<(String, Seen)>>,
    /// `(namespace, name)` → where an unannotated version was seen first.
    unattributed: BTreeMap<(String, String), (Vec<String>, Seen)>,
    /// Files or blobs that did not parse, with why (a warning: they may hold more).
    unreadable: Vec<String>,
    files: usize,
    commits: usize,
}

impl Found {
    /// Records the SealedSecrets of one file or blob seen at `at`.
    fn record(&mut self, key: &KeyId, sealed: &[SealedSecret], at: &Seen) {
        for s in sealed {
            let namespace = s.metadata.namespace.clone().unwrap_or_default();
            let name = s.metadata.name.clone().unwrap_or_default();
            let hint = s
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SEALING_KEY_ANNOTATION));
            match hint.map(|h| h.trim()) {
                Some(h) if h == key.as_str() => {
                    for (item, ciphertext) in &s.spec.encrypted_data {
                        let values = self
                            .items
                            .entry((namespace.clone(), name.clone(), item.clone()))
                            .or_default();
                        match values.iter_mut().find(|(c, _)| c == ciphertext) {
                            Some((_, seen)) => seen.in_tree |= at.in_tree,
                            None => values.push((ciphertext.clone(), at.clone())),
                        }
                    }
                }
                Some(_) => {}
                None => {
                    let entry = self
                        .unattributed
                        .entry((namespace, name))
                        .or_insert_with(|| (Vec::new(), at.clone()));
                    entry.1.in_tree |= at.in_tree;
                    for item in s.spec.encrypted_data.keys() {
                        if !entry.0.contains(item) {
                            entry.0.push(item.clone());
                        }
                    }
                }
            }
        }
    }
}

/// The key named on the command line: a fingerprint, or a certificate file.
fn key_of(text: &str) -> Result<KeyId> {
    if let Some(id) = KeyId::parse(text.trim()) {
        return Ok(id);
    }
    let path = Path::new(text);
    if !path.is_file() {
        bail!(
            "`{text}` is neither a key fingerprint (SHA256:…, as the {SEALING_KEY_ANNOTATION} \
             annotation and `kseal keys inspect` show it) nor a certificate file"
        );
    }
    let pem = fs_err::read_to_string(path).context("failed to read the key's certificate")?;
    // An expired certificate still names its key: no expiry check here.
    let cert = Certificate::from_pem(&pem)
        .with_context(|| format!("`{text}` is not a PEM certificate"))?;
    Ok(cert.id().clone())
}

/// The SealedSecrets of `text` (none when it holds none); an error when it does not parse.
fn sealed_in(name: &Path, text: &str) -> Result<Vec<SealedSecret>> {
    crate::manifest::sealed_secrets_in(name, text, "")
}

fn is_manifest(path: &str) -> bool {
    Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

/// Searches the working tree under `paths`, walked as `kseal check` walks it: links are
/// followed inside the repository and each file once (a loop ends), a link out of the
/// repository (or to `/proc`) is reported by name and not followed, and only regular files
/// up to the size cap are read.
fn search_tree(key: &KeyId, paths: &[PathBuf], found: &mut Found) -> Result<()> {
    let mut rules = crate::keysource::rules::PathRules::new();
    let walked = walk(paths, false, &mut rules)?;
    found
        .unreadable
        .extend(walked.refused.into_iter().map(|(_, why)| why));
    for file in walked.files {
        let text = match read_capped(&file) {
            Ok(Capped::Text(text)) => text,
            Ok(Capped::NotRead(why)) => {
                found.unreadable.push(why);
                continue;
            }
            Err(e) => {
                found.unreadable.push(crate::text::chain(&e));
                continue;
            }
        };
        found.files += 1;
        match sealed_in(&file, &text) {
            Ok(sealed) => found.record(
                key,
                &sealed,
                &Seen {
                    path: file.display().to_string(),
                    commit: None,
                    date: None,
                    subject: None,
                    in_tree: true,
                },
            ),
            Err(e) => found.unreadable.push(crate::text::chain(&e)),
        }
    }
    Ok(())
}

/// Runs `git` in `dir`; its standard output.
fn git(dir: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("failed to run git (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "`git {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// A `git cat-file --batch` process: blobs by id, one at a time.
struct Blobs {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl Blobs {
    fn start(dir: &Path) -> Result<Self> {
        let mut child = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("failed to run git cat-file (is git installed?)")?;
        let input = child.stdin.take().context("git cat-file has no input")?;
        let output = child.stdout.take().context("git cat-file has no output")?;
        Ok(Self {
            child,
            input,
            output: std::io::BufReader::new(output),
        })
    }

    /// The blob `id` (`None`: larger than the cap, skipped).
    fn read(&mut self, id: &str) -> Result<Option<Vec<u8>>> {
        writeln!(self.input, "{id}").context("failed to ask git cat-file for a blob")?;
        self.input
            .flush()
            .context("failed to ask git cat-file for a blob")?;
        let mut header = String::new();
        self.output
            .read_line(&mut header)
            .context("failed to read git cat-file's answer")?;
        let size: u64 = header
            .split_whitespace()
            .nth(2)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("git cat-file answered `{}`", header.trim()))?;
        // The content and its trailing newline are read whole, or skipped whole (a blob
        // over the cap is never held in memory).
        if size > MAX_BYTES {
            let skipped =
                std::io::copy(&mut (&mut self.output).take(size + 1), &mut std::io::sink())
                    .context("failed to read a blob from git cat-file")?;
            if skipped != size + 1 {
                bail!("git cat-file ended in the middle of blob {id}");
            }
            return Ok(None);
        }
        let mut content = Vec::new();
        let read = (&mut self.output)
            .take(size + 1)
            .read_to_end(&mut content)
            .context("failed to read a blob from git cat-file")?;
        if u64::try_from(read).unwrap_or(u64::MAX) != size + 1 {
            bail!("git cat-file ended in the middle of blob {id}");
        }
        content.pop();
        Ok(Some(content))
    }
}

impl Drop for Blobs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Searches every commit of the repository holding `paths` (oldest first, so each value is
/// attributed to the commit that introduced it).
fn search_history(key: &KeyId, paths: &[PathBuf], found: &mut Found) -> Result<()> {
    let first = paths.first().map_or(Path::new("."), PathBuf::as_path);
    let dir = if first.is_dir() {
        first
    } else {
        first.parent().unwrap_or(Path::new("."))
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let root = String::from_utf8(git(dir, &["rev-parse", "--show-toplevel"])?)
        .context("git printed a repository root that is not UTF-8")?;
    let root = fs_err::canonicalize(root.trim())?;
    // The paths, relative to the root, as `git ls-tree` names files.
    let mut prefixes = Vec::new();
    for path in paths {
        let absolute = fs_err::canonicalize(path)?;
        let relative = absolute.strip_prefix(&root).map_err(|_| {
            anyhow::anyhow!(
                "`{}` is not in the git repository `{}`: --git-history searches one repository",
                path.display(),
                root.display()
            )
        })?;
        prefixes.push(relative.to_string_lossy().replace('\\', "/"));
    }
    let under = |path: &str| {
        prefixes.iter().any(|p| {
            p.is_empty()
                || path == p.as_str()
                || path
                    .strip_prefix(p.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
    };
    let log = git(
        &root,
        &[
            "log",
            "--all",
            "--reverse",
            "--date-order",
            "--format=%H%x09%cs%x09%s",
        ],
    )?;
    let log = String::from_utf8_lossy(&log);
    let mut blobs = Blobs::start(&root)?;
    // Each blob's SealedSecrets, parsed once.
    let mut parsed: HashMap<String, std::rc::Rc<Vec<SealedSecret>>> = HashMap::new();
    for line in log.lines() {
        let mut fields = line.splitn(3, '\t');
        let (Some(commit), Some(date), subject) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        found.commits += 1;
        let tree = git(&root, &["ls-tree", "-r", "-z", "--full-tree", commit])?;
        for entry in tree.split(|b| *b == 0).filter(|e| !e.is_empty()) {
            let entry = String::from_utf8_lossy(entry);
            // `<mode> blob <id>\t<path>`
            let Some((meta, path)) = entry.split_once('\t') else {
                continue;
            };
            let mut meta = meta.split(' ');
            let (Some(mode), Some("blob"), Some(id)) = (meta.next(), meta.next(), meta.next())
            else {
                continue;
            };
            // A committed link is a blob holding its target: not a manifest.
            if mode == "120000" || !is_manifest(path) || !under(path) {
                continue;
            }
            let sealed = match parsed.get(id) {
                Some(sealed) => std::rc::Rc::clone(sealed),
                None => {
                    let sealed = match blobs.read(id)? {
                        None => {
                            found.unreadable.push(format!(
                                "`{path}` in {}: too large, not read",
                                &commit[..12]
                            ));
                            Vec::new()
                        }
                        Some(bytes) => {
                            let text = String::from_utf8_lossy(&bytes);
                            sealed_in(Path::new(path), &text).unwrap_or_else(|e| {
                                found.unreadable.push(format!(
                                    "in {}: {}",
                                    &commit[..12],
                                    crate::text::chain(&e)
                                ));
                                Vec::new()
                            })
                        }
                    };
                    let sealed = std::rc::Rc::new(sealed);
                    parsed.insert(id.to_owned(), std::rc::Rc::clone(&sealed));
                    sealed
                }
            };
            if sealed.is_empty() {
                continue;
            }
            found.record(
                key,
                &sealed,
                &Seen {
                    path: path.to_owned(),
                    commit: Some(commit[..12].to_owned()),
                    date: Some(date.to_owned()),
                    subject: subject.map(str::to_owned),
                    in_tree: false,
                },
            );
        }
    }
    Ok(())
}

pub(crate) fn run(args: &ExposureArgs) -> Result<()> {
    let key = key_of(&args.key)?;
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let mut found = Found::default();
    // History first: each value is attributed to the commit that introduced it, and the
    // working tree then marks which are still there (or only there, uncommitted).
    if args.git_history {
        search_history(&key, &paths, &mut found)?;
    }
    search_tree(&key, &paths, &mut found)?;
    for why in &found.unreadable {
        eprintln!("warning: {why}");
    }
    let items: Vec<Item> = std::mem::take(&mut found.items)
        .into_iter()
        .map(|((namespace, name, item), values)| Item {
            namespace,
            name,
            item,
            values: values.into_iter().map(|(_, seen)| seen).collect(),
        })
        .collect();
    let unattributed: Vec<Unattributed> = std::mem::take(&mut found.unattributed)
        .into_iter()
        .map(|((namespace, name), (items, seen))| Unattributed {
            namespace,
            name,
            items,
            seen,
        })
        .collect();
    let values: usize = items.iter().map(|i| i.values.len()).sum();
    let summary = format!(
        "key {key}: {} sealed to it ({} of {}){}, {} without a {SEALING_KEY_ANNOTATION} \
         annotation (possibly sealed to it); searched {}{}",
        count(items.len(), "item"),
        count(values, "value"),
        count(
            items
                .iter()
                .map(|i| (&i.namespace, &i.name))
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            "SealedSecret"
        ),
        if args.git_history {
            " in the tree and its git history"
        } else {
            " in the tree"
        },
        count(unattributed.len(), "SealedSecret"),
        count(found.files, "manifest file"),
        if args.git_history {
            format!(" and {}", count(found.commits, "commit"))
        } else {
            String::new()
        }
    );
    let text = match args.format {
        ExposureFormat::Json => {
            let mut text = serde_json::to_string_pretty(&serde_json::json!({
                "key": key.as_str(),
                "items": items,
                "unattributed": unattributed,
                "commits": found.commits,
                "files": found.files,
            }))
            .context("failed to write the report")?;
            text.push('\n');
            text
        }
        ExposureFormat::Text => text_report(&items, &unattributed),
    };
    crate::output::stdout(&text)?;
    eprintln!("{summary}");
    Ok(())
}

fn where_seen(seen: &Seen) -> String {
    let mut out = format!("`{}`", seen.path);
    if let Some(commit) = &seen.commit {
        let _ = write!(
            out,
            ", introduced in {commit} ({}{})",
            seen.date.as_deref().unwrap_or("-"),
            seen.subject
                .as_deref()
                .map(|s| format!(" \"{s}\""))
                .unwrap_or_default()
        );
    }
    out.push_str(if seen.in_tree {
        ", in the tree"
    } else {
        ", in history only"
    });
    out
}

fn text_report(items: &[Item], unattributed: &[Unattributed]) -> String {
    let mut out = String::new();
    let mut last: Option<(&str, &str)> = None;
    for item in items {
        if last != Some((&item.namespace, &item.name)) {
            let _ = writeln!(out, "{}/{}", item.namespace, item.name);
            last = Some((&item.namespace, &item.name));
        }
        for seen in &item.values {
            let _ = writeln!(out, "  {}: {}", item.item, where_seen(seen));
        }
    }
    if !unattributed.is_empty() {
        let _ = writeln!(
            out,
            "without a {SEALING_KEY_ANNOTATION} annotation (possibly sealed to the key):"
        );
        for u in unattributed {
            let _ = writeln!(
                out,
                "  {}/{} ({}): {}",
                u.namespace,
                u.name,
                u.items.join(", "),
                where_seen(&u.seen)
            );
        }
    }
    out
}
