//! `kseal reseal` and `kseal validate`: offline maintenance with local private keys.
//!
//! Both open `spec.encryptedData` item by item with the key ring instead of unsealing whole
//! objects, so a SealedSecret with `spec.template.data` is handled too: its templates only
//! refer to item names, which resealing keeps.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_keys::{Certificate, KeyRing};

use crate::args::{ResealArgs, ValidateArgs};
use crate::controller::Controller;
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
    for input in Input::read_all(&args.files.all())? {
        let sealed: Vec<SealedSecret> =
            input.objects("SealedSecret", kseal_api::constants::API_VERSION)?;
        for (i, s) in sealed.iter().enumerate() {
            total += 1;
            let name = object_name(s);
            let place = format!("{} document {}", input.source, i + 1);
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
                    let value =
                        kseal_keys::seal_base64(cert.public_key(), &label, plaintext.expose())?;
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
