//! `kseal reseal` and `kseal validate`: offline maintenance with local private keys.
//!
//! `validate` also holds each file to its `.kseal.yaml` creation rule, chosen as `kseal check`
//! chooses it: an object sealed with a key outside the ring or certificate its path's rule
//! names (`wrong-ring-for-path`), or whose rule is refused (a redirecting link, a nested
//! `.kseal.yaml`), gets a warning; whether it opens is still what passes or fails.
//!
//! Both open `spec.encryptedData` item by item with the key ring instead of unsealing whole
//! objects, so a SealedSecret with `spec.template.data` is handled too: its templates only
//! refer to item names, which resealing keeps.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_keys::{Certificate, KeyId, KeyRing};

use crate::args::{ResealArgs, ValidateArgs};
use crate::controller::Controller;
use crate::keysource::rules::{PathRules, spec_key_ids};
use crate::keysource::target::{Backing, keys_or_controller, rule_certificate, target_certificate};
use crate::manifest::{Input, SealedFile, mapping_at};
use crate::opening::{Checker, label_of, object_name, open_items};
use crate::text::count;

pub(crate) fn validate(args: ValidateArgs) -> Result<()> {
    let checker = match keys_or_controller(args.use_controller, &args.controller, &args.keys)? {
        // The ring tries the sealing key first when the --key files name one; validating seals
        // nothing, so keys that name none (or two) only keep the default order.
        Backing::Keys(loaded) => Checker::Keys(loaded.ring),
        Backing::Controller(controller) => Checker::Controller(controller),
    };
    let mut report = String::new();
    let (mut total, mut bad) = (0usize, 0usize);
    let mut rules = PathRules::new();
    let mut by_spec: HashMap<String, Vec<KeyId>> = HashMap::new();
    for input in Input::read_all(&args.files.all())? {
        let sealed: Vec<SealedSecret> =
            input.objects("SealedSecret", kseal_api::constants::API_VERSION)?;
        // The keys the file's creation rule seals with, chosen as `kseal check` chooses them.
        let group = match &input.source {
            crate::manifest::Source::File(path) if !sealed.is_empty() => {
                rule_keys(&mut rules, &mut by_spec, path).map_err(|e| crate::text::chain(&e))
            }
            _ => Ok(None),
        };
        for (i, s) in sealed.iter().enumerate() {
            total += 1;
            let name = object_name(s);
            let place = format!("{} document {}", input.source, i + 1);
            // Whether it opens is what validate answers; the rule is a warning beside it (it
            // is an error of `kseal check`).
            match &group {
                Err(why) => {
                    eprintln!("warning: {name} ({place}): its creation rule cannot be used: {why}")
                }
                Ok(Some((why, keys))) => {
                    if let Some(key) = outside_group(s, &checker, keys)? {
                        eprintln!(
                            "warning: {name} ({place}) is sealed with key {key}, which is not a \
                             key of {why} (wrong-ring-for-path: kseal check fails on it)"
                        );
                    }
                }
                Ok(None) => {}
            }
            let line = match checker.check(s)? {
                Err(reason) => {
                    bad += 1;
                    format!("FAIL {name} ({place}): {reason}")
                }
                Ok(summary) => format!("ok   {name} ({place}): {summary}"),
            };
            report.push_str(&line);
            report.push('\n');
        }
    }
    crate::output::stdout(&report)?;
    if bad > 0 {
        bail!(
            "{bad} of {} failed to validate",
            count(total, "SealedSecret")
        );
    }
    Ok(())
}

/// The keys of the ring or certificate the creation rule of `path` names, and the rule (for
/// messages); `None` when no rule names one.
fn rule_keys(
    rules: &mut PathRules,
    by_spec: &mut HashMap<String, Vec<KeyId>>,
    path: &Path,
) -> Result<Option<(String, Vec<KeyId>)>> {
    let Some(rule) = rules.rule_for(path)? else {
        return Ok(None);
    };
    let Some(spec) = rule.spec else {
        return Ok(None);
    };
    let keys = match by_spec.get(&spec) {
        Some(keys) => keys.clone(),
        None => {
            let keys = spec_key_ids(&spec, rule.anchor.as_deref())
                .with_context(|| format!("failed to read the keys of {}", rule.why))?;
            by_spec.insert(spec.clone(), keys.clone());
            keys
        }
    };
    Ok(Some((format!("`{spec}`, which {} names", rule.why), keys)))
}

/// A key outside `group` that `s` is sealed with: the one its `kseal.dev/sealing-key`
/// annotation names, else (with local keys) one that opens an item. The controller cannot
/// say which key opened an item, so without the annotation nothing is found.
fn outside_group(s: &SealedSecret, checker: &Checker, group: &[KeyId]) -> Result<Option<KeyId>> {
    if let Some(hint) = s.sealing_key_hint() {
        return Ok((!group.contains(&hint)).then_some(hint));
    }
    let Checker::Keys(ring) = checker else {
        return Ok(None);
    };
    // An object that does not open is reported by the check itself.
    let Ok(opened) = open_items(s, ring) else {
        return Ok(None);
    };
    Ok(opened.keys.into_values().find(|key| !group.contains(key)))
}

/// Who re-encrypts.
enum Resealer {
    Local { ring: KeyRing, cert: Certificate },
    Controller(Controller),
}

impl Resealer {
    fn describe(&self) -> String {
        match self {
            Resealer::Local { cert, .. } => format!("for {}", cert.id()),
            Resealer::Controller(c) => format!("by the controller `{}`", c.describe()),
        }
    }

    /// Re-encrypts one SealedSecret document in place.
    fn reseal(&self, doc: &mut crate::yaml::Doc, sealed: &SealedSecret) -> Result<()> {
        match self {
            Resealer::Local { ring, cert } => {
                let opened = open_items(sealed, ring)?;
                if !opened.failed.is_empty() {
                    bail!("{}", opened.failure());
                }
                let (label, _) = label_of(sealed)?;
                let mut resealed = Vec::new();
                for (item, plaintext) in &opened.items {
                    let value = kseal_keys::seal_base64(
                        cert.public_key(),
                        &label.item(item),
                        plaintext.expose(),
                    )?;
                    resealed.push((item.clone(), value));
                }
                let data = mapping_at(doc, &["spec", "encryptedData"])?;
                for (item, value) in resealed {
                    data.insert(item, value.into());
                }
                mapping_at(doc, &["metadata", "annotations"])?
                    .insert(SEALING_KEY_ANNOTATION.into(), cert.id().to_string().into());
            }
            Resealer::Controller(controller) => {
                let body = serde_json::to_string(doc).context("failed to encode the document")?;
                let answer = controller.rotate(&body)?;
                let rotated: crate::yaml::Doc = crate::yaml::from_str(&answer)
                    .context("the controller's answer is not a SealedSecret")?;
                if rotated.get("kind").and_then(|k| k.as_str()) != Some(kseal_api::constants::KIND)
                {
                    bail!("the controller's answer is not a SealedSecret");
                }
                *doc = rotated;
            }
        }
        Ok(())
    }
}

fn reseal_file(input: &Input, resealer: &Resealer) -> Result<(SealedFile, usize)> {
    let mut file = SealedFile::parse(input)?;
    for i in 0..file.values.len() {
        let sealed = &file.sealed[i];
        let what = format!(
            "failed to reseal `{}` (document {} of {})",
            object_name(sealed),
            i + 1,
            input.source
        );
        resealer.reseal(&mut file.values[i], sealed).context(what)?;
    }
    let count = file.values.len();
    Ok((file, count))
}

pub(crate) fn reseal(mut args: ResealArgs) -> Result<()> {
    if !args.use_controller && args.cert.is_none() {
        args.cert = rule_certificate(&args.files.all())?;
    }
    let resealer = match keys_or_controller(args.use_controller, &args.controller, &args.keys)? {
        Backing::Keys(loaded) => {
            let (ring, cert) = target_certificate(&args, loaded)?;
            Resealer::Local { ring, cert }
        }
        Backing::Controller(controller) => Resealer::Controller(controller),
    };
    let paths = args.files.all();
    if args.in_place && (paths.is_empty() || paths.iter().any(|f| f == Path::new("-"))) {
        bail!("--in-place needs FILE arguments (not standard input)");
    }
    let inputs = Input::read_all(&paths)?;
    // Everything is resealed in memory first: one bad object leaves every file untouched.
    let files = inputs
        .iter()
        .map(|input| reseal_file(input, &resealer))
        .collect::<Result<Vec<_>>>()?;
    let mut out = String::new();
    for ((file, changed), path) in files
        .iter()
        .zip(paths.iter().map(Some).chain(std::iter::repeat(None)))
    {
        let text = file.render()?;
        match path {
            Some(path) if args.in_place => {
                crate::manifest::write_atomic(path, text.as_bytes(), false)?;
                eprintln!(
                    "resealed {} in `{}` {}",
                    count(*changed, "SealedSecret"),
                    path.display(),
                    resealer.describe()
                );
            }
            _ => out.push_str(&text),
        }
    }
    crate::output::stdout(&out)
}
