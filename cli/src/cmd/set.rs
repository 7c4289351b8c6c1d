//! `kseal set FILE KEY`: add or replace one item of a SealedSecret file.

use anyhow::{Context as _, Result, bail};

use crate::args::SetArgs;
use crate::keysource::cert::CertRequest;
use crate::manifest::{SealedFile, mapping_at};
use crate::sealing::{describe_changes, read_value, set_item};

pub(crate) fn run(args: SetArgs) -> Result<()> {
    if let Err(e) = kseal_api::validation::is_config_map_key(&args.key) {
        bail!("`{}` is not a valid Secret key: {e}", args.key);
    }
    // The creation rule of the file picks the certificate when --cert does not.
    let rule = crate::project::rule_for_output(Some(&args.file))?;
    let mut cert_args = args.cert.clone();
    crate::project::apply_cert(&mut cert_args.cert, rule.as_ref())?;
    let certs = CertRequest::from_args(&cert_args)?;
    let mut file =
        SealedFile::read_one(&args.file).context("failed to read the SealedSecret to update")?;
    let sealed = &file.sealed[0];
    let scope = sealed.scope();
    if let Some(rule) = &rule {
        rule.check_scope(scope, &format!("`{}`", args.file.display()))?;
    }
    let name = sealed
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .with_context(|| format!("the SealedSecret in `{}` has no name", args.file.display()))?;
    let namespace = sealed.metadata.namespace.clone().unwrap_or_default();
    if namespace.is_empty() && scope != kseal_api::Scope::Cluster {
        bail!(
            "the SealedSecret in `{}` has no namespace",
            args.file.display()
        );
    }
    // The certificate of the file's namespace, also for a cluster-wide file (see `seal`).
    let cert = certs.for_namespace(Some(namespace.as_str())).load_one()?;
    let prompt = format!("value for `{}` (not echoed): ", args.key);
    let value = read_value(
        args.from_file.as_deref(),
        args.strip_newline,
        Some(prompt.as_str()),
        args.allow_empty_data,
    )?;
    // The file's own label: bound to its current template and to the item's name when the
    // file is template-bound, so the new item opens with the others (and, like them, only
    // with this template and under this name).
    let (label, _) = kseal_api::items_label(sealed, &namespace, &name)
        .with_context(|| format!("cannot add to `{}`", args.file.display()))?;
    let sealed_b64 = crate::sealing::seal_value(cert.public_key(), &label.item(&args.key), &value)?;
    let (mut added, mut replaced) = (Vec::new(), Vec::new());
    let doc = &mut file.values[0];
    set_item(doc, &args.key, &sealed_b64, &mut added, &mut replaced)?;
    mapping_at(doc, &["metadata", "annotations"])?.insert(
        kseal_api::constants::SEALING_KEY_ANNOTATION.into(),
        cert.id().to_string().into(),
    );
    let text = file.render()?;
    crate::manifest::write_atomic(&args.file, text.as_bytes(), false)?;
    eprintln!(
        "updated `{}`: {}",
        args.file.display(),
        describe_changes(&added, &replaced)
    );
    let shown = format!(
        "{}/{name}",
        if namespace.is_empty() {
            "-"
        } else {
            &namespace
        }
    );
    if let Some(warning) = crate::sealing::size_warning(&file.values[0], &shown) {
        eprintln!("{warning}");
    }
    Ok(())
}
