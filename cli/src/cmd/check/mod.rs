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

use self::finding::Level;
use self::keys::ring_view;
use self::report::{human, json, junit, sarif};
use self::rules::{check_private_controller, check_private_keys, check_public};
use self::scan::{Object, Panicked, parallel_map, read_file};
use crate::args::{CheckArgs, CheckFormat, Progress};
use crate::controller::{Controller, ControllerTarget};
use crate::opening::Checker;
use crate::text::count;

mod exclude;
mod finding;
mod keys;
mod report;
mod rules;
mod scan;

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

/// Whether the repository's rules forbid cluster-wide SealedSecrets in `file`.
///
/// Whether the repository's `.kseal.yaml` forbids a cluster-wide SealedSecret in `file`: the
/// rule that does (`crate::project::forbid_cluster_wide`), or why the rules could not be read.
pub(super) fn forbid_cluster_wide(file: &Path) -> Option<String> {
    match crate::project::forbid_cluster_wide(file) {
        Ok(rule) => rule,
        Err(e) => Some(format!("the creation rules could not be read: {e:#}")),
    }
}

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
    let view = ring_view(args, loaded.as_ref())?;
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
    let excludes = exclude::Excludes::load(&args.excludes, &paths)?;
    let mut files = crate::walk::walk(
        &paths,
        &crate::walk::Walk {
            gitignore: !args.no_ignore,
            what: "path",
        },
    )?;
    let walked = files.len();
    files.retain(|f| !excludes.excludes(f));
    let excluded = walked - files.len();
    let progress = args.progress == Progress::Auto && std::io::stderr().is_terminal();
    let now = SystemTime::now();
    let names = files.clone();
    let mut reports = Vec::with_capacity(files.len());
    for (path, result) in names
        .iter()
        .zip(parallel_map(files, "reading", progress, |path| {
            let mut report = read_file(&path)?;
            for object in &mut report.objects {
                check_public(&report.path, object, &view, now);
            }
            anyhow::Ok(report)
        }))
    {
        reports.push(result.map_err(|Panicked(why)| {
            anyhow::anyhow!(
                "checking `{}` failed unexpectedly (a bug in kseal: {why}); no report, since \
                 a file left out could hide a finding",
                path.display()
            )
        })??);
    }
    if let Some(loaded) = &loaded {
        let objects: Vec<(&Path, &mut Object)> = reports
            .iter_mut()
            .flat_map(|r| r.objects.iter_mut().map(|o| (r.path.as_path(), o)))
            .collect();
        let names: Vec<String> = objects
            .iter()
            .map(|(path, o)| format!("{} in `{}`", o.name, path.display()))
            .collect();
        let opened = parallel_map(objects, "opening", progress, |(_, object)| {
            check_private_keys(object, &loaded.ring, &view);
        });
        for (name, result) in names.iter().zip(opened) {
            result.map_err(|Panicked(why)| {
                anyhow::anyhow!(
                    "opening {name} failed unexpectedly (a bug in kseal: {why}); no report, \
                     since an object left out could hide a finding"
                )
            })?;
        }
    }
    if let Some(checker) = &checker {
        for object in reports.iter_mut().flat_map(|r| r.objects.iter_mut()) {
            check_private_controller(object, checker)?;
        }
    }
    let mut totals = Totals {
        excluded,
        ..Totals::default()
    };
    for report in &mut reports {
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
