//! `kseal config`: the `.kseal.yaml` that applies here, and which creation rule picks the
//! ring or certificate, scope and namespace for a path (and which flags would override it).

use std::fmt::Write as _;

use anyhow::Result;

use crate::args::ConfigArgs;
use crate::project::Project;

pub(crate) fn run(args: ConfigArgs) -> Result<()> {
    if args.schema {
        return crate::output::stdout(&crate::project::json_schema()?);
    }
    let (discovery, project) = Project::discover_from_cwd_with()?;
    let searched = format!("discovery: {}\n", discovery.describe());
    let Some(project) = project else {
        return crate::output::stdout(&format!(
            "{searched}no {} found: no ring is pinned and no creation rule applies (flags and \
             KSEAL_* variables only)\n",
            crate::project::FILE_NAME
        ));
    };
    crate::output::stdout(&(searched + &report(&project, args.for_path.as_deref())))
}

/// What `kseal config` prints for `project` and an output path.
fn report(project: &Project, output: Option<&std::path::Path>) -> String {
    let mut out = String::new();
    let rules = &project.file.creation_rules;
    let _ = writeln!(
        out,
        "file: {} ({} pinned, {})",
        project.path.display(),
        crate::text::count(project.file.rings.len(), "ring"),
        crate::text::count(rules.len(), "creation rule")
    );
    let shown = match output {
        Some(path) => match project.relative(path) {
            Some(relative) => format!("`{relative}`"),
            None => {
                let _ = writeln!(
                    out,
                    "path: `{}` lies outside the directory of {}: no creation rule applies",
                    path.display(),
                    crate::project::FILE_NAME
                );
                return out;
            }
        },
        None => "output to stdout (no --for PATH)".to_owned(),
    };
    let _ = writeln!(out, "path: {shown}");
    let matched = project.rule_for(output);
    let tried = matched.as_ref().map_or(rules.len(), |m| m.index);
    for (i, rule) in rules.iter().take(tried).enumerate() {
        let regex = rule.path_regex.as_deref().unwrap_or_default();
        let _ = writeln!(
            out,
            "  creation rule {}: path_regex `{regex}` does not match",
            i + 1
        );
    }
    let Some(matched) = matched else {
        let _ = writeln!(
            out,
            "rule: none matches; flags and KSEAL_* variables only (default scope strict)"
        );
        return out;
    };
    let _ = writeln!(out, "rule: {}", matched.describe());
    let overridden = |flag: &str, var: &str| {
        if std::env::var_os(var).is_some() {
            format!("{var} is set and wins; so would {flag}")
        } else {
            format!("{flag} or {var} overrides it")
        }
    };
    let cert = match matched.cert_spec() {
        Ok(Some(spec)) => spec,
        Ok(None) => "not set: the controller's certificate, fetched through the cluster".into(),
        Err(e) => format!("invalid: {e:#}"),
    };
    let _ = writeln!(
        out,
        "  cert:      {cert} ({})",
        overridden("--cert", crate::env::KSEAL_CERT)
    );
    let scope = matched
        .scope()
        .map_or("not set: the input's annotation, else strict", |s| {
            s.as_str()
        });
    let _ = writeln!(
        out,
        "  scope:     {scope} ({})",
        overridden("--scope", crate::env::KSEAL_SCOPE)
    );
    let namespace = matched
        .namespace()
        .unwrap_or("not set: the Secret's, else the kubeconfig context's, else `default`");
    let _ = writeln!(
        out,
        "  namespace: {namespace} ({})",
        overridden("-n", crate::env::KSEAL_NAMESPACE)
    );
    let _ = writeln!(
        out,
        "  forbid_cluster_wide: {}",
        if matched.rule.forbid_cluster_wide {
            "true (a policy: no flag lifts it)"
        } else {
            "false"
        }
    );
    out
}
