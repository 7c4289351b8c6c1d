//! `kseal check`: the CI gate of a GitOps repository. Walks the tree, finds every
//! SealedSecret of every manifest file and reports, per object and item, what would break or
//! needs care once it reaches a cluster.
//!
//! The public tier needs only the ring's certificates (any CI runner): the documents parse, the
//! scope agrees with the metadata, each item's RSA block fits a key of the ring, the
//! `kseal.dev/sealing-key` hint names a key the ring holds (warning when not the active one),
//! templates render. The private tier (`--key` files, or `--controller`) also opens every
//! item; plaintext is dropped (and zeroized) as soon as it has been checked.
//!
//! Each file is checked against the ring or certificate of its `.kseal.yaml` creation rule,
//! exactly as `kseal seal -w FILE` chooses it ([`groups`]); the flags give the keys of the paths
//! no rule covers. An object sealed to another group's ring is `wrong-ring-for-path`; a path a
//! committed link leads under another rule, or below a nested `.kseal.yaml`, is
//! `creation-rule-refused`. The walk never leaves the repository and reads only regular files
//! up to a size cap ([`tree`], `file-not-read`).
//!
//! Paths that `--exclude` or the `excludes:` of `.kseal.yaml` match are skipped; a SealedSecret
//! in a Helm chart's `templates/` (or a document that is a template) is reported as not
//! checked, a warning, rather than as a document that does not parse.
//!
//! Exit codes: 0 clean (warnings allowed unless `--strict`), 1 findings, 2 usage or I/O error,
//! and 2 when a worker panics: the run fails closed, naming the file, rather than reporting
//! without it.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Result;
use kseal_keys::KeyRing;

use self::exclude::Excludes;
use self::finding::{Finding, Level, Rule};
use self::groups::Groups;
use self::report::{human, json, junit, sarif};
use self::rules::{At, check_private_controller, check_private_keys, check_public};
use self::scan::{FileReport, Object, Panicked, parallel_map, read_file};
use crate::args::{CheckArgs, CheckFormat, Progress};
use crate::controller::{Controller, ControllerTarget};
use crate::keysource::rules::PathRules;
use crate::opening::Checker;
use crate::text::count;

mod exclude;
mod finding;
mod groups;
mod keys;
mod report;
mod rules;
mod scan;
pub(crate) mod tree;

/// The exit code a command chose, after printing its own report and errors:
/// [`crate::run`] exits with it and prints nothing more.
#[derive(Debug)]
pub(crate) struct Exit(pub(crate) u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// Totals of a run.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) files: usize,
    pub(super) objects: usize,
    pub(super) items: usize,
    pub(super) errors: usize,
    pub(super) warnings: usize,
    /// Files that `--exclude` or `excludes:` skipped.
    pub(super) excluded: usize,
}

pub(crate) fn run(args: CheckArgs) -> Result<()> {
    match check(&args) {
        Ok(0) => Ok(()),
        Ok(code) => Err(Exit(code).into()),
        Err(e) => {
            eprintln!("error: {}", crate::text::chain(&e));
            Err(Exit(2).into())
        }
    }
}

/// Runs the check; the exit code (0 or 1), or an error (exit 2).
fn check(args: &CheckArgs) -> Result<u8> {
    let loaded = if args.keys.is_empty() {
        None
    } else {
        Some(crate::keysource::keys::load_keys(&args.keys)?)
    };
    let checker = if args.use_controller {
        Some(Checker::Controller(Controller::connect(
            &ControllerTarget::from_args(&args.controller),
        )?))
    } else {
        None
    };
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let excludes = Excludes::load(&args.excludes, &paths)?;
    let mut rules = PathRules::new();
    let mut walked = tree::walk(&paths, !args.no_ignore, &mut rules)?;
    let redirected = redirected(&walked, &mut rules, &excludes);
    let mut files = std::mem::take(&mut walked.files);
    let mut links_out = std::mem::take(&mut walked.refused);
    let found = files.len() + links_out.len();
    files.retain(|f| !excludes.excludes(f));
    links_out.retain(|(f, _)| !excludes.excludes(f));
    let excluded = found - files.len() - links_out.len();
    // Each file's ring: its creation rule's, exactly as `kseal seal -w FILE` picks it.
    let groups = Groups::resolve(&files, &mut rules, args, loaded.as_ref())?;
    let progress = args.progress == Progress::Auto && std::io::stderr().is_terminal();
    let now = SystemTime::now();
    let mut reports = Vec::with_capacity(files.len() + links_out.len());
    read_all(&mut reports, files, &groups, progress, now)?;
    groups.require_keys(
        reports
            .iter()
            .map(|r| (r.path.as_path(), !r.objects.is_empty())),
    )?;
    if let Some(loaded) = &loaded {
        open_all(&mut reports, &groups, &loaded.ring, progress)?;
    }
    if let Some(checker) = &checker {
        for object in reports.iter_mut().flat_map(|r| r.objects.iter_mut()) {
            check_private_controller(object, checker)?;
        }
    }
    reports.extend(redirected);
    // Links out of the repository: reported, never read.
    for (path, why) in links_out {
        reports.push(FileReport {
            path,
            findings: vec![Finding {
                rule: Rule::NotRead,
                line: 1,
                item: None,
                message: why,
            }],
            objects: Vec::new(),
        });
    }
    let totals = tally(&mut reports, excluded);
    reports.retain(|r| !r.objects.is_empty() || !r.findings.is_empty());
    let text = match args.format {
        CheckFormat::Human => human(&reports, &totals),
        CheckFormat::Json => json(&reports, &totals)?,
        CheckFormat::Sarif => sarif(&reports)?,
        CheckFormat::Junit => junit(&reports, args.strict),
    };
    crate::output::stdout(&text)?;
    if args.format != CheckFormat::Human {
        eprintln!("{}", summary(&totals));
    }
    if totals.objects == 0 {
        // Not an error (a repository may hold none), but a wrong path passes the gate too.
        eprintln!(
            "warning: found no SealedSecret under {}",
            paths
                .iter()
                .map(|p| format!("`{}`", p.display()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let failed = totals.errors > 0 || (args.strict && totals.warnings > 0);
    Ok(u8::from(failed))
}

/// A path a link gives a file, under another creation rule than its own: refused.
fn redirected(
    walked: &tree::Walked,
    rules: &mut PathRules,
    excludes: &Excludes,
) -> Vec<FileReport> {
    let mut redirected = Vec::new();
    for alias in walked.aliases() {
        if let Err(e) = rules.rule_for(&alias)
            && !excludes.excludes(&alias)
        {
            redirected.push(FileReport {
                path: alias,
                findings: vec![Finding {
                    rule: Rule::RulesRefused,
                    line: 1,
                    item: None,
                    message: crate::text::chain(&e),
                }],
                objects: Vec::new(),
            });
        }
    }
    redirected
}

/// Reads `files` in parallel and runs the public tier on each, against its place's ring;
/// a worker that panicked fails the run, naming the file.
fn read_all(
    reports: &mut Vec<FileReport>,
    files: Vec<PathBuf>,
    groups: &Groups,
    progress: bool,
    now: SystemTime,
) -> Result<()> {
    let names = files.clone();
    for (path, result) in names.iter().zip(parallel_map(
        files.into_iter().zip(&groups.places).collect(),
        "reading",
        progress,
        |(path, place)| {
            let mut report = read_file(&path)?;
            if let Some(why) = &place.refused {
                report.findings.push(Finding {
                    rule: Rule::RulesRefused,
                    line: 1,
                    item: None,
                    message: why.clone(),
                });
            }
            let at = At { groups, place };
            for object in &mut report.objects {
                check_public(object, at, now);
            }
            anyhow::Ok(report)
        },
    )) {
        reports.push(result.map_err(|Panicked(why)| {
            anyhow::anyhow!(
                "checking `{}` failed unexpectedly (a bug in kseal: {why}); no report, since \
                 a file left out could hide a finding",
                path.display()
            )
        })??);
    }
    Ok(())
}

/// The private tier with `--key` files: opens every object's items in parallel; a worker
/// that panicked fails the run, naming the object.
fn open_all(
    reports: &mut [FileReport],
    groups: &Groups,
    ring: &KeyRing,
    progress: bool,
) -> Result<()> {
    let objects: Vec<(&Path, &mut Object, At<'_>)> = reports
        .iter_mut()
        .zip(&groups.places)
        .flat_map(|(r, place)| {
            let at = At { groups, place };
            let path = r.path.as_path();
            r.objects.iter_mut().map(move |o| (path, o, at))
        })
        .collect();
    let names: Vec<String> = objects
        .iter()
        .map(|(path, o, _)| format!("{} in `{}`", o.name, path.display()))
        .collect();
    let opened = parallel_map(objects, "opening", progress, |(_, object, at)| {
        check_private_keys(object, ring, at);
    });
    for (name, result) in names.iter().zip(opened) {
        result.map_err(|Panicked(why)| {
            anyhow::anyhow!(
                "opening {name} failed unexpectedly (a bug in kseal: {why}); no report, \
                 since an object left out could hide a finding"
            )
        })?;
    }
    Ok(())
}

/// Counts files, objects, items and findings (dropping each object's SealedSecret and
/// sorting its findings by line).
fn tally(reports: &mut [FileReport], excluded: usize) -> Totals {
    let mut totals = Totals {
        excluded,
        ..Totals::default()
    };
    for report in reports {
        if !report.objects.is_empty() || !report.findings.is_empty() {
            totals.files += 1;
        }
        for object in &mut report.objects {
            totals.objects += 1;
            if let Some(sealed) = object.sealed.take() {
                totals.items += sealed.spec.encrypted_data.len();
            }
            object.findings.sort_by_key(|f| (f.line, f.rule));
        }
        for f in report
            .findings
            .iter()
            .chain(report.objects.iter().flat_map(|o| &o.findings))
        {
            match f.rule.level() {
                Level::Error => totals.errors += 1,
                Level::Warning => totals.warnings += 1,
            }
        }
    }
    totals
}

pub(super) fn summary(t: &Totals) -> String {
    let excluded = if t.excluded > 0 {
        format!(" ({} excluded)", count(t.excluded, "file"))
    } else {
        String::new()
    };
    format!(
        "checked {} ({}) in {}{excluded}: {}, {}",
        count(t.objects, "SealedSecret"),
        count(t.items, "item"),
        count(t.files, "file"),
        count(t.errors, "error"),
        count(t.warnings, "warning")
    )
}
