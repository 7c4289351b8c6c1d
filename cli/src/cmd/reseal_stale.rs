//! `kseal reseal --stale [PATH…]`: re-seals in place only the items sealed with a key other
//! than the sealing key, and changes no other byte of the files.
//!
//! Files are not re-serialised: each stale ciphertext (a base64 string unique to its item) is
//! replaced where it stands in the text, so key order, comments, quoting and the other
//! documents of the file stay as they were, and the diff of a GitOps repository shows only
//! the re-sealed values (and the `kseal.dev/sealing-key` annotations that named the old key).
//! A second run finds nothing stale and writes nothing.
//!
//! Each file is re-sealed to the key of its `.kseal.yaml` creation rule, chosen as `kseal seal`
//! and `kseal check` choose it ([`crate::keysource::rules`]); a file that is a symbolic link is
//! never rewritten (writing would replace the committed link with a regular file).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_keys::{Certificate, KeyId, KeyRing};

use crate::args::ResealArgs;
use crate::controller::{Controller, ControllerTarget};
use crate::keysource::cert::{CertRequest, Source, Spec};
use crate::keysource::rules::PathRules;
use crate::keysource::target::cert_for;
use crate::opening::{object_name, open_items};
use crate::text::count;

/// Who re-seals, and to which key.
#[allow(clippy::large_enum_variant)] // one per command run
enum Backing {
    /// Local private keys; the target is `--cert`, else the file's creation rule, else the
    /// key the --key files mark as sealing.
    Keys {
        ring: KeyRing,
        explicit: Option<Certificate>,
        /// The key the --key files mark as the ring's active key (their only key, or the
        /// newest of a Bitnami backup's key Secrets, as Bitnami's controller seals), and why;
        /// or why none is: among several PEM files `--stale` does not guess, since the newest
        /// may be a key pushed to a ring but not activated yet.
        sealing: std::result::Result<(Certificate, String), String>,
        /// Certificates of creation rules, by `--cert` value.
        by_rule: HashMap<String, Certificate>,
        /// Each file's creation rule, as `kseal check` and `kseal seal` choose it.
        rules: PathRules,
    },
    /// The controller's `/v1/rotate`, to its sealing key: with several rings, the key of the
    /// ring that seals in each object's namespace (`/v1/cert.pem?namespace=NS`, as `kseal
    /// seal` asks), so a value of a tenant's ring is not called stale against the first
    /// ring's key.
    Controller {
        controller: Controller,
        /// How the sealing certificates are asked for.
        request: CertRequest,
        /// The sealing key per namespace asked (`""`: cluster-wide with no namespace).
        active: HashMap<String, KeyId>,
    },
}

/// One item to re-seal.
struct Stale {
    object: String,
    item: String,
    /// The key that sealed it (`None`: unknown, with the controller and no annotation).
    old: Option<String>,
    ciphertext: String,
    resealed: String,
}

/// What one file needs.
struct FilePlan {
    path: PathBuf,
    text: String,
    objects: usize,
    stale: Vec<Stale>,
    /// Objects re-sealed: their sealing-key annotations that named another key are updated.
    old_hints: Vec<String>,
    target: KeyId,
    /// Where the target key comes from, for the line that names it.
    why: String,
}

impl Backing {
    fn new(args: &ResealArgs) -> Result<Self> {
        if args.use_controller {
            let target = ControllerTarget::from_args(&args.controller);
            let request = CertRequest {
                specs: vec![Spec {
                    name: "controller".to_owned(),
                    source: Source::Controller,
                }],
                controller: target.clone(),
                allow_http: false,
                ring_anchor: None,
            };
            return Ok(Backing::Controller {
                controller: Controller::connect(&target)?,
                request,
                active: HashMap::new(),
            });
        }
        if args.keys.is_empty() {
            bail!(
                "pass --key FILE (local private keys) or --controller (ask the controller in \
                 the cluster)"
            );
        }
        let loaded = crate::keysource::keys::load_keys(&args.keys)?;
        let explicit = args
            .cert
            .as_deref()
            .map(|text| cert_for(text, args.allow_http))
            .transpose()?;
        // PEM files say nothing of which key is active: the newest may be a key pushed to a
        // ring and not activated yet. Bitnami's key Secrets do: its controller seals with the
        // newest.
        let pem_given = args.keys.iter().any(|path| {
            fs_err::read_to_string(path).is_ok_and(|text| crate::keysource::keys::is_pem(&text))
        });
        // Needed only when neither --cert nor a rule names the target: an error then.
        let sealing = match loaded.sealing {
            Ok((id, Some(_))) if pem_given => Err(format!(
                "none of the {} keys of the --key files is marked as the ring's active key \
                 (`kseal.dev/active`, as kseal's controller marks its mirrors), and the newest, \
                 {id}, may be a key pushed to the ring but not activated yet, which some \
                 clusters cannot open: --stale does not guess",
                loaded.ring.len()
            )),
            Ok((id, note)) => match loaded.ring.get(&id) {
                Some(key) => Ok((
                    crate::keysource::cert::check(
                        &key.certificate().to_pem(),
                        &format!("of the sealing key {id}"),
                    )?,
                    if note.is_some() {
                        "the newest of the --key files' key Secrets, none marked as a fleet \
                         ring's active key: the key Bitnami's controller seals with"
                            .to_owned()
                    } else if loaded.ring.len() == 1 {
                        "the only key of the --key files".to_owned()
                    } else {
                        "the ring's active key, as the --key files mark it (`kseal.dev/active`)"
                            .to_owned()
                    },
                )),
                None => Err(format!("no private key {id} among the --key files")),
            },
            Err(e) => Err(format!("{e:#}")),
        };
        Ok(Backing::Keys {
            ring: loaded.ring,
            explicit,
            sealing,
            by_rule: HashMap::new(),
            rules: PathRules::new(),
        })
    }

    /// The key items of `path` should be sealed with, and its certificate (none with the
    /// controller, which seals itself: the key that seals in the namespace of the file's
    /// objects, which must agree).
    fn target(
        &mut self,
        path: &Path,
        sealed: &[SealedSecret],
    ) -> Result<(KeyId, Option<Certificate>, String)> {
        if let Backing::Controller {
            request, active, ..
        } = self
        {
            let named = |ns: &str| if ns.is_empty() { "no namespace" } else { ns }.to_owned();
            let mut target: Option<(KeyId, &str)> = None;
            for s in sealed {
                let namespace = s.metadata.namespace.as_deref().unwrap_or("");
                let key = match active.get(namespace) {
                    Some(key) => key.clone(),
                    None => {
                        let key = request
                            .for_namespace(Some(namespace))
                            .load_one()?
                            .id()
                            .clone();
                        active.insert(namespace.to_owned(), key.clone());
                        key
                    }
                };
                match &target {
                    None => target = Some((key, namespace)),
                    Some((first, ns)) if *first != key => bail!(
                        "`{}` holds SealedSecrets of namespaces the controller seals with \
                         different keys ({} → key {first}, {} → key {key}): re-seal them from \
                         one file per namespace",
                        path.display(),
                        named(ns),
                        named(namespace),
                    ),
                    Some(_) => {}
                }
            }
            let (key, namespace) = target.context("no SealedSecret to re-seal")?;
            let why = if namespace.is_empty() || active.values().all(|k| *k == key) {
                "the controller's sealing key".to_owned()
            } else {
                format!("the controller's sealing key for namespace `{namespace}`")
            };
            return Ok((key, None, why));
        }
        let (cert, why) = self.certificate(path)?;
        Ok((cert.id().clone(), Some(cert), why))
    }

    /// The certificate to seal `path`'s items to with local keys, and where it comes from.
    fn certificate(&mut self, path: &Path) -> Result<(Certificate, String)> {
        let Backing::Keys {
            explicit,
            sealing,
            by_rule,
            rules,
            ..
        } = self
        else {
            bail!("the controller seals with its own key");
        };
        if let Some(cert) = explicit {
            return Ok((cert.clone(), "--cert".to_owned()));
        }
        let rule = rules.rule_for(path)?;
        if let Some((spec, rule)) = rule.and_then(|r| r.spec.clone().map(|s| (s, r))) {
            if let Some(cert) = by_rule.get(&spec) {
                return Ok((cert.clone(), rule.why));
            }
            let cert = CertRequest {
                specs: vec![crate::keysource::cert::parse_spec(&spec)?],
                controller: ControllerTarget::default(),
                allow_http: false,
                ring_anchor: rule.anchor.clone(),
            }
            .load_one()
            .with_context(|| format!("failed to load the certificate of {}", rule.why))?;
            by_rule.insert(spec, cert.clone());
            return Ok((cert, rule.why));
        }
        sealing.clone().map_err(|why| {
            anyhow::anyhow!(
                "no key to reseal `{}` to ({why}); pass --cert with the ring \
                 (secretsmanager://… or dir://…, whose index names its active key) or its \
                 active certificate, or name one in a .kseal.yaml creation rule",
                path.display()
            )
        })
    }
}

/// Finds the stale items of one file and re-seals them in memory.
fn plan_file(path: &Path, backing: &mut Backing) -> Result<Option<FilePlan>> {
    let text = fs_err::read_to_string(path)?;
    let sealed = crate::manifest::sealed_secrets_in(path, &text, "")?;
    if sealed.is_empty() {
        return Ok(None);
    }
    let (target, cert, why) = backing.target(path, &sealed)?;
    let mut plan = FilePlan {
        path: path.to_owned(),
        text,
        objects: sealed.len(),
        stale: Vec::new(),
        old_hints: Vec::new(),
        target: target.clone(),
        why,
    };
    for s in &sealed {
        let name = object_name(s);
        let hint = s
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SEALING_KEY_ANNOTATION))
            .cloned();
        let before = plan.stale.len();
        match (&*backing, &cert) {
            (Backing::Keys { ring, .. }, Some(cert)) => {
                let opened = open_items(s, ring)
                    .with_context(|| format!("cannot reseal {name} in `{}`", path.display()))?;
                if !opened.failed.is_empty() {
                    bail!(
                        "cannot reseal {name} in `{}`: no --key opens {}",
                        path.display(),
                        opened.failed.join(", ")
                    );
                }
                // The labels the items opened with: bound to the template and each item's name
                // when the object is template-bound, so the re-sealed items keep the binding.
                let (label, _) = crate::opening::label_of(s)
                    .with_context(|| format!("cannot reseal {name} in `{}`", path.display()))?;
                for (item, key) in &opened.keys {
                    if *key == target {
                        continue;
                    }
                    let plaintext = &opened.items[item];
                    let resealed = kseal_keys::seal_base64(
                        cert.public_key(),
                        &label.item(item),
                        plaintext.expose(),
                    )?;
                    plan.stale.push(Stale {
                        object: name.clone(),
                        item: item.clone(),
                        old: Some(key.to_string()),
                        ciphertext: s.spec.encrypted_data[item].clone(),
                        resealed,
                    });
                }
            }
            (Backing::Controller { controller, .. }, _) => {
                let Some(hint) = hint.clone() else {
                    eprintln!(
                        "warning: {name} in `{}` has no {SEALING_KEY_ANNOTATION} annotation, so \
                         without private keys it cannot be told stale: skipped (use --key, or \
                         `kseal reseal --controller --in-place` on the file)",
                        path.display()
                    );
                    continue;
                };
                if KeyId::parse(&hint).as_ref() == Some(&target) {
                    continue;
                }
                let rotated = rotate(controller, s)
                    .with_context(|| format!("cannot reseal {name} in `{}`", path.display()))?;
                for (item, ciphertext) in &s.spec.encrypted_data {
                    let resealed = rotated
                        .spec
                        .encrypted_data
                        .get(item)
                        .cloned()
                        .with_context(|| {
                            format!("the controller's answer for {name} lacks item `{item}`")
                        })?;
                    plan.stale.push(Stale {
                        object: name.clone(),
                        item: item.clone(),
                        old: Some(hint.clone()),
                        ciphertext: ciphertext.clone(),
                        resealed,
                    });
                }
            }
            (Backing::Keys { .. }, None) => bail!("no certificate to reseal to"),
        }
        if plan.stale.len() > before
            && let Some(hint) = hint.filter(|h| KeyId::parse(h).as_ref() != Some(&target))
        {
            plan.old_hints.push(hint);
        }
    }
    Ok(Some(plan))
}

/// Refuses to rewrite a file that is a symbolic link: writing it would replace the committed
/// link with a regular file (and the file it leads to would keep its stale values).
fn refuse_link(path: &Path) -> Result<()> {
    let meta = fs_err::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        let target = fs_err::read_link(path)?;
        bail!(
            "refusing to re-seal `{}` in place: it is a symbolic link (to `{}`), which writing \
             would replace with a regular file; re-seal the file it leads to instead",
            path.display(),
            target.display()
        );
    }
    Ok(())
}

/// `POST /v1/rotate` of one SealedSecret.
fn rotate(controller: &Controller, sealed: &SealedSecret) -> Result<SealedSecret> {
    let body = serde_json::to_string(sealed).context("failed to encode the SealedSecret")?;
    let answer = controller.rotate(&body)?;
    serde_json::from_str(&answer).context("the controller's answer is not a SealedSecret")
}

fn is_base64_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_')
}

/// Replaces every whole occurrence of `old` (not part of a longer base64 string) by `new`;
/// returns how many there were.
fn replace_token(text: &mut String, old: &str, new: &str) -> usize {
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    let mut replaced = 0;
    while let Some(at) = rest.find(old) {
        let before = rest.as_bytes()[..at].last().copied();
        let after = rest.as_bytes().get(at + old.len()).copied();
        out.push_str(&rest[..at]);
        if before.is_some_and(is_base64_byte) || after.is_some_and(is_base64_byte) {
            out.push_str(old);
        } else {
            out.push_str(new);
            replaced += 1;
        }
        rest = &rest[at + old.len()..];
    }
    out.push_str(rest);
    *text = out;
    replaced
}

/// Points the `kseal.dev/sealing-key` annotations that name one of `old` at `new`, on the
/// annotation's own line (YAML or JSON).
fn replace_hints(text: &mut String, old: &[String], new: &str) {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match line.find(SEALING_KEY_ANNOTATION) {
            Some(at) => {
                let (head, tail) = line.split_at(at + SEALING_KEY_ANNOTATION.len());
                let mut tail = tail.to_owned();
                if let Some(hint) = old.iter().find(|h| tail.contains(h.as_str())) {
                    tail = tail.replacen(hint.as_str(), new, 1);
                }
                out.push_str(head);
                out.push_str(&tail);
            }
            None => out.push_str(line),
        }
    }
    *text = out;
}

impl FilePlan {
    /// The file's new text: only the stale ciphertexts (and old hints) replaced.
    fn rewrite(&self) -> Result<String> {
        let mut text = self.text.clone();
        let mut done: HashMap<&str, &str> = HashMap::new();
        for stale in &self.stale {
            // The same ciphertext twice (a copied object) opens under the same label: one
            // re-sealed value serves both.
            if done.contains_key(stale.ciphertext.as_str()) {
                continue;
            }
            if replace_token(&mut text, &stale.ciphertext, &stale.resealed) == 0 {
                bail!(
                    "`{}`: the ciphertext of {} item `{}` is not written on one line, so it \
                     cannot be replaced in place; reseal the file with `kseal reseal \
                     --in-place` (which rewrites it whole)",
                    self.path.display(),
                    stale.object,
                    stale.item
                );
            }
            done.insert(&stale.ciphertext, &stale.resealed);
        }
        if !self.old_hints.is_empty() {
            replace_hints(&mut text, &self.old_hints, self.target.as_str());
        }
        Ok(text)
    }
}

pub(crate) fn run(args: &ResealArgs) -> Result<()> {
    let paths = args.files.all();
    if paths.is_empty() || paths.iter().any(|p| p == Path::new("-")) {
        bail!("--stale rewrites files in place: name files or directories (not standard input)");
    }
    let mut backing = Backing::new(args)?;
    let files = crate::walk::manifest_files(&paths)?;
    // Everything is planned and re-sealed in memory first: one failure writes nothing.
    let mut plans = Vec::new();
    for file in &files {
        if let Some(plan) = plan_file(file, &mut backing)? {
            plans.push(plan);
        }
    }
    let mut rewrites = Vec::new();
    for plan in plans.iter().filter(|p| !p.stale.is_empty()) {
        refuse_link(&plan.path)?;
        rewrites.push((plan, plan.rewrite()?));
    }
    // Say which key the items go to, once per key.
    let mut targets: BTreeMap<&KeyId, &str> = BTreeMap::new();
    for (plan, _) in &rewrites {
        targets.entry(&plan.target).or_insert(&plan.why);
    }
    for (key, why) in targets {
        let verb = if args.dry_run {
            "would re-seal"
        } else {
            "re-sealing"
        };
        eprintln!("{verb} to key {key} ({why})");
    }
    let mut report = String::new();
    let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
    for (plan, _) in &rewrites {
        let mut objects: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for stale in &plan.stale {
            objects
                .entry(stale.object.as_str())
                .or_default()
                .push(stale.item.as_str());
            *by_key
                .entry(stale.old.clone().unwrap_or_else(|| "unknown".to_owned()))
                .or_default() += 1;
        }
        for (object, items) in objects {
            let _ = writeln!(
                report,
                "{}: {object}: {}",
                plan.path.display(),
                items.join(", ")
            );
        }
    }
    let stale_objects: usize = rewrites
        .iter()
        .map(|(p, _)| {
            let mut names: Vec<&str> = p.stale.iter().map(|s| s.object.as_str()).collect();
            names.dedup();
            names.len()
        })
        .sum();
    let items: usize = rewrites.iter().map(|(p, _)| p.stale.len()).sum();
    let verb = if args.dry_run {
        "would re-seal"
    } else {
        "re-sealed"
    };
    let _ = write!(
        report,
        "{verb} {} of {} in {} ({} read in {} of {} manifest files)",
        count(items, "item"),
        count(stale_objects, "SealedSecret"),
        count(rewrites.len(), "file"),
        count(
            plans.iter().map(|p| p.objects).sum::<usize>(),
            "SealedSecret"
        ),
        plans.len(),
        files.len()
    );
    if by_key.is_empty() {
        report.push_str(": nothing is stale\n");
    } else {
        let keys: Vec<String> = by_key
            .iter()
            .map(|(k, n)| format!("{} sealed with {k}", count(*n, "item")))
            .collect();
        let _ = writeln!(report, "; {}", keys.join(", "));
    }
    if !args.dry_run {
        for (plan, text) in &rewrites {
            crate::manifest::write_atomic(&plan.path, text.as_bytes(), false)?;
        }
    }
    crate::output::stdout(&report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_tokens_are_replaced() {
        let mut text = "a: QUJD\nb: xQUJD\nc: \"QUJD\"\n".to_owned();
        assert_eq!(replace_token(&mut text, "QUJD", "WFla"), 2);
        assert_eq!(text, "a: WFla\nb: xQUJD\nc: \"WFla\"\n");
    }

    #[test]
    fn hints_are_replaced_on_their_own_line_only() {
        let mut text =
            "    kseal.dev/sealing-key: old # keep\nother: old\n    \"kseal.dev/sealing-key\": \"old\",\n"
                .to_owned();
        replace_hints(&mut text, &["old".to_owned()], "new");
        assert_eq!(
            text,
            "    kseal.dev/sealing-key: new # keep\nother: old\n    \"kseal.dev/sealing-key\": \"new\",\n"
        );
    }
}
