//! Which keys each file is checked against: the ring or certificate its `.kseal.yaml` creation
//! rule seals it with ([`crate::keysource::rules`], exactly as `kseal seal` chooses), else the
//! ring of the flags (`--cert`, `--key`, `--controller`). A repository whose prod and staging
//! seal to different rings is then checked per group, and an object sealed to another group's
//! ring than its path's is an error (`wrong-ring-for-path`).
//!
//! A rule that names a certificate file that is the active key of the `--cert` ring is checked
//! against that ring, which knows the older keys and when each was added.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};

use super::keys::{RingView, ring_view, rule_view};
use crate::args::CheckArgs;
use crate::keysource::keys::LoadedRing;
use crate::keysource::rules::PathRules;

/// What one file is checked against.
#[derive(Debug, Default)]
pub(super) struct Place {
    /// Its view in [`Groups::views`]; `None` when its creation rule is refused.
    pub(super) view: Option<usize>,
    /// The creation rule that chose the view, for messages (`None`: the flags' ring).
    pub(super) rule: Option<String>,
    /// Why a cluster-wide SealedSecret is forbidden here, if it is.
    pub(super) forbid: Option<String>,
    /// Why the path's creation rule cannot be used (a finding of the file).
    pub(super) refused: Option<String>,
    /// No rule names its ring and no flag gives one: an error if it holds a SealedSecret.
    pub(super) no_keys: bool,
}

/// The views of one run and each file's place.
#[derive(Debug, Default)]
pub(super) struct Groups {
    pub(super) views: Vec<RingView>,
    /// One per file, in the order of the files.
    pub(super) places: Vec<Place>,
}

impl Groups {
    /// The view of every file in `files`; the flags' ring is read when a file needs it or a
    /// flag names it.
    pub(super) fn resolve(
        files: &[PathBuf],
        rules: &mut PathRules,
        args: &CheckArgs,
        keys: Option<&LoadedRing>,
    ) -> Result<Self> {
        let mut groups = Groups::default();
        let flags_given = !args.cert.is_empty() || keys.is_some() || args.use_controller;
        let mut flags: Option<usize> = None;
        if flags_given {
            groups.views.push(ring_view(args, keys)?);
            flags = Some(0);
        }
        // The --cert ring, when its active key is a rule's certificate: the same ring, with
        // the history of its older keys.
        let history = flags.filter(|_| !args.cert.is_empty());
        let mut by_spec: HashMap<String, usize> = HashMap::new();
        for file in files {
            let rule = match rules.rule_for(file) {
                Ok(rule) => rule,
                Err(e) => {
                    groups.places.push(Place {
                        refused: Some(crate::text::chain(&e)),
                        ..Place::default()
                    });
                    continue;
                }
            };
            let forbid = rule
                .as_ref()
                .filter(|r| r.forbid_cluster_wide)
                .map(|r| r.why.clone());
            let Some((spec, rule)) = rule.and_then(|r| r.spec.clone().map(|s| (s, r))) else {
                groups.places.push(Place {
                    view: flags,
                    forbid,
                    no_keys: flags.is_none(),
                    ..Place::default()
                });
                continue;
            };
            let view = match by_spec.get(&spec) {
                Some(view) => *view,
                None => {
                    let loaded = rule_view(&spec, rule.anchor.as_deref())
                        .with_context(|| format!("failed to read the keys of {}", rule.why))?;
                    // The rule's certificate is the --cert ring's active key: that ring knows
                    // the older keys too.
                    let superset = history.filter(|&f| {
                        loaded.keys.len() == 1
                            && loaded.active.is_some()
                            && loaded.active == groups.views[f].active
                    });
                    let view = superset.unwrap_or_else(|| {
                        groups.views.push(loaded);
                        groups.views.len() - 1
                    });
                    by_spec.insert(spec, view);
                    view
                }
            };
            groups.places.push(Place {
                view: Some(view),
                rule: Some(rule.why),
                forbid,
                ..Place::default()
            });
        }
        Ok(groups)
    }

    /// Refuses a run where a file that holds a SealedSecret has no keys to be checked
    /// against: no creation rule names its ring, and no flag gives one.
    pub(super) fn require_keys<'a>(
        &self,
        files: impl Iterator<Item = (&'a std::path::Path, bool)>,
    ) -> Result<()> {
        for ((file, holds), place) in files.zip(&self.places) {
            if holds && place.no_keys {
                bail!(
                    "pass the ring's keys: --cert FILE… (the active certificate first), --cert \
                     secretsmanager://… or dir://… (a key ring), --key FILE… or --controller; \
                     or name the ring of `{}` in a .kseal.yaml creation rule",
                    file.display()
                );
            }
        }
        Ok(())
    }

    /// The group views (rings and certificates, not the --key files) other than `view` that
    /// hold key `id`.
    pub(super) fn holding<'a>(
        &'a self,
        view: usize,
        id: &'a kseal_keys::KeyId,
    ) -> impl Iterator<Item = &'a RingView> + 'a {
        // Rule views (after the flags' view) first: they name the group.
        self.views
            .iter()
            .enumerate()
            .rev()
            .filter(move |(i, v)| *i != view && v.group && v.get(id).is_some())
            .map(|(_, v)| v)
    }
}
