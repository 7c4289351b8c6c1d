//! `kseal keys export-policy`: the Kyverno allow-list of the ring's key fingerprints, from the
//! ring's verified index, so that a rotation never means editing policies by hand.
//!
//! It writes what `deploy/examples/fleet/kyverno/` holds, for one ring: the ConfigMap
//! `kyverno/kseal-NAME-keys` (`data.fingerprints`, a JSON array of `SHA256:` fingerprints,
//! the value of each SealedSecret's `kseal.dev/sealing-key` annotation) and the
//! `ValidatingPolicy` `kseal-require-NAME-sealing-key` that reads it, optionally bound to
//! namespaces (`matchConstraints.namespaceSelector`). With the default NAME (`fleet`) and no
//! namespace the policy is the example's, field for field (a test compares them), so what
//! `check.py` proves of the example holds for what this writes.
//!
//! Which keys: every key of the index (`keys[]`); retired keys have left it. Pending keys are
//! listed: activation is a ring write that sealers follow at once, while each cluster's copy
//! of the list follows on its own schedule, so a list without the pending key would refuse the
//! first values sealed after the activation until every cluster caught up. Older keys stay
//! until retired: they still open what they sealed, and a new cluster's bootstrap CREATEs
//! every committed SealedSecret.
//!
//! The list decides what a cluster admits, so it is taken only from an index whose signed
//! history verifies against the ring's pin (`.kseal.yaml` or `--ring-anchor`), as `kseal seal`
//! reads the sealing key: an unpinned ring or an unsigned index is refused (whoever can write
//! the index but not sign it must not be able to add a key), and each fingerprint must be the
//! one of its entry's certificate.

use anyhow::{Context as _, Result, bail};
use kseal_keys::Certificate;
use kseal_keystore::{Index, Verified};

use crate::args::{ExportPolicyArgs, PolicyFormat};
use crate::keysource::ring::{
    block_on, open, read_index_vouched, ring_arg, ring_label, unrecorded_refusal,
};
use crate::manifest::write_atomic;
use crate::output;
use crate::text::count;

/// The namespace of the ConfigMap (where the examples and Kyverno's own objects live).
const CONFIG_MAP_NAMESPACE: &str = "kyverno";

/// A validated request: what to write, for which ring.
#[derive(Debug)]
struct Request {
    format: PolicyFormat,
    name: String,
    namespaces: Vec<String>,
    /// The `--cert` value the policy's messages suggest (`kseal seal --cert …`).
    cert: String,
}

impl Request {
    fn from_args(args: &ExportPolicyArgs) -> Result<Self> {
        let name = args.name.trim();
        if let Err(e) = kseal_api::validation::is_dns1123_label(name) {
            bail!(
                "`{name}` is not a usable --name: it names the ConfigMap kseal-NAME-keys and the \
                 policy kseal-require-NAME-sealing-key, so it must be a DNS label ({e})"
            );
        }
        // `kseal-require-` + NAME + `-sealing-key` must stay a valid object name; a label is
        // at most 63 characters, well under a name's 253.
        let mut namespaces: Vec<String> = Vec::new();
        for namespace in &args.namespaces {
            let namespace = namespace.trim();
            if let Err(e) = kseal_api::validation::validate_namespace_name(namespace) {
                bail!("`{namespace}` is not a valid --namespace: {e}");
            }
            if !namespaces.iter().any(|n| n == namespace) {
                namespaces.push(namespace.to_owned());
            }
        }
        if !namespaces.is_empty() && args.format != PolicyFormat::Policy {
            bail!(
                "--namespace binds the policy to namespaces, but --format {} writes no policy: \
                 use --format policy (the default)",
                match args.format {
                    PolicyFormat::Configmap => "configmap",
                    _ => "json",
                }
            );
        }
        let ring = args.ring.ring.as_str();
        let cert = if ring.contains("://") {
            ring.to_owned()
        } else {
            format!("secretsmanager://{ring}")
        };
        Ok(Self {
            format: args.format,
            name: name.to_owned(),
            namespaces,
            cert,
        })
    }

    fn config_map(&self) -> String {
        format!("kseal-{}-keys", self.name)
    }

    fn policy(&self) -> String {
        format!("kseal-require-{}-sealing-key", self.name)
    }
}

/// Whether `text` is a fingerprint as the policy's syntax check accepts it:
/// `^SHA256:[A-Za-z0-9+/]{43}$`.
fn is_fingerprint(text: &str) -> bool {
    text.strip_prefix("SHA256:").is_some_and(|b64| {
        b64.len() == 43
            && b64
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
    })
}

/// The fingerprints of the index's keys, oldest first, each checked against its certificate.
fn fingerprints(index: &Index) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in &index.keys {
        if index.retired.iter().any(|r| r.kid == entry.kid) {
            continue;
        }
        let cert = Certificate::from_pem(&entry.crt).with_context(|| {
            format!(
                "key {} of the ring has no valid certificate",
                entry.kid.short()
            )
        })?;
        let fingerprint = cert.id().as_str();
        if fingerprint != entry.fingerprint {
            bail!(
                "key {} of the ring is listed with fingerprint `{}`, but its certificate's is \
                 `{fingerprint}`: the index is inconsistent, nothing was written",
                entry.kid.short(),
                entry.fingerprint
            );
        }
        if !is_fingerprint(fingerprint) {
            bail!(
                "key {} has fingerprint `{fingerprint}`, which the policy's syntax check \
                 (SHA256: and 43 base64 characters) would refuse",
                entry.kid.short()
            );
        }
        if !out.iter().any(|f| f == fingerprint) {
            out.push(fingerprint.to_owned());
        }
    }
    Ok(out)
}

/// A YAML scalar for any string: a JSON string is a valid YAML double-quoted scalar.
fn quoted(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// The fingerprints as the ConfigMap holds them: a compact JSON array.
fn json_list(fingerprints: &[String]) -> String {
    serde_json::Value::from(fingerprints.to_vec()).to_string()
}

fn config_map(request: &Request, fingerprints: &[String], source: &str) -> String {
    format!(
        "# The fingerprints of every key of key ring {source}, for the policy\n\
         # {policy}. Written by `kseal keys export-policy`: write it again after each push,\n\
         # rotate or retire instead of editing it.\n\
         apiVersion: v1\n\
         kind: ConfigMap\n\
         metadata:\n  \
           name: {name}\n  \
           namespace: {CONFIG_MAP_NAMESPACE}\n\
         data:\n  \
           fingerprints: {list}\n",
        source = source.replace('\n', " "),
        policy = request.policy(),
        name = request.config_map(),
        list = quoted(&json_list(fingerprints)),
    )
}

/// The `ValidatingPolicy` of `deploy/examples/fleet/kyverno/require-fleet-sealing-key.yaml`,
/// with this request's names, namespaces and `--cert`.
fn validating_policy(request: &Request) -> String {
    let selector = if request.namespaces.is_empty() {
        String::new()
    } else {
        let mut out = String::from(
            "    # Only SealedSecrets in these namespaces (`kseal keys export-policy --namespace`).\n    \
             namespaceSelector:\n      \
             matchExpressions:\n      \
             - key: kubernetes.io/metadata.name\n        \
             operator: In\n        \
             values:\n",
        );
        for namespace in &request.namespaces {
            out.push_str(&format!("        - {}\n", quoted(namespace)));
        }
        out
    };
    let seal_with = format!("seal with `kseal seal --cert {}`.", request.cert);
    format!(
        r#"# Every SealedSecret{scope} must say which key sealed it, and that key must be one of the
# ring's: its top-level annotation kseal.dev/sealing-key (written by `kseal seal`, `kseal
# create` and `kseal reseal`) must be listed in the ConfigMap {cm_ns}/{cm}. Judged: a
# CREATE, and an UPDATE that changes the spec or this annotation; never a DELETE, nor an object
# being deleted. See deploy/examples/fleet/kyverno/README.md. Kyverno 1.17 or later.
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: {policy}
  annotations:
    policies.kyverno.io/title: SealedSecrets sealed with a key of the {name} ring
    policies.kyverno.io/category: kseal
    policies.kyverno.io/subject: SealedSecret
    policies.kyverno.io/minversion: 1.17.0
spec:
  validationActions:
  - Deny
  matchConstraints:
{selector}    resourceRules:
    - apiGroups:
      - bitnami.com
      apiVersions:
      - v1alpha1
      resources:
      - sealedsecrets
      operations:
      - CREATE
      - UPDATE
  matchConditions:
  - name: not-being-deleted
    expression: "!has(object.metadata.deletionTimestamp)"
  - name: creates-or-changes-spec-or-sealing-key
    expression: >-
      request.operation != "UPDATE" || object.spec != oldObject.spec ||
      (has(object.metadata.annotations) &&
      "kseal.dev/sealing-key" in object.metadata.annotations
      ? object.metadata.annotations["kseal.dev/sealing-key"] : "") !=
      (has(oldObject.metadata.annotations) &&
      "kseal.dev/sealing-key" in oldObject.metadata.annotations
      ? oldObject.metadata.annotations["kseal.dev/sealing-key"] : "")
  variables:
  - name: sealingKey
    expression: >-
      has(object.metadata.annotations) &&
      "kseal.dev/sealing-key" in object.metadata.annotations
      ? object.metadata.annotations["kseal.dev/sealing-key"] : ""
  - name: fleetKeys
    expression: >-
      json.unmarshal(resource.Get("v1", "configmaps", "{cm_ns}", "{cm}").data.fingerprints)
  validations:
  - expression: variables.sealingKey.matches("^SHA256:[A-Za-z0-9+/]{{43}}$")
    message: {syntax}
  - expression: variables.sealingKey in variables.fleetKeys
    message: {listed}
"#,
        scope = if request.namespaces.is_empty() {
            String::new()
        } else {
            format!(" in {}", request.namespaces.join(", "))
        },
        cm_ns = CONFIG_MAP_NAMESPACE,
        cm = request.config_map(),
        policy = request.policy(),
        name = request.name,
        selector = selector,
        syntax = quoted(&format!(
            "the annotation kseal.dev/sealing-key must be a key fingerprint (SHA256: and 43 \
             base64 characters); {seal_with}"
        )),
        listed = quoted(&format!(
            "the annotation kseal.dev/sealing-key must name a key of the {} ring (one of \
             ConfigMap {CONFIG_MAP_NAMESPACE}/{}); {seal_with}",
            request.name,
            request.config_map()
        )),
    )
}

/// What `request` writes for `fingerprints` of the ring described by `source`.
fn render(request: &Request, fingerprints: &[String], source: &str) -> String {
    match request.format {
        PolicyFormat::Json => format!("{}\n", json_list(fingerprints)),
        PolicyFormat::Configmap => config_map(request, fingerprints, source),
        PolicyFormat::Policy => format!(
            "{}---\n{}",
            config_map(request, fingerprints, source),
            validating_policy(request)
        ),
    }
}

pub(crate) fn export_policy(args: &ExportPolicyArgs) -> Result<()> {
    let request = Request::from_args(args)?;
    let (fingerprints, source, version) = block_on(async {
        let ring = open(&args.ring, None).await?;
        if ring.trust().anchor().is_none() {
            bail!(
                "key ring {} is not pinned: the allow-list decides what clusters admit, so it is \
                 taken only from an index verified against the ring's trust anchor. Pin it in \
                 the GitOps repository with `kseal keys trust --ring {}` (commit .kseal.yaml), \
                 or pass --ring-anchor KID",
                ring_label(&ring),
                ring_arg(&args.ring)
            );
        }
        // Not from an index the ring's history marker cannot vouch for (an older kseal's
        // marker: a fork at its version would put its key on the list; round 16, N1).
        let (snapshot, unrecorded) = read_index_vouched(&ring).await?;
        if unrecorded {
            return Err(unrecorded_refusal(&ring_label(&ring), &snapshot)
                .context("no allow-list is written from this index"));
        }
        let Verified::Signed { version, .. } = snapshot.verified else {
            bail!(
                "the index of key ring {} is not signed: no allow-list is written from it (the \
                 seeder signs it with `kseal keys sign --ring {}`)",
                ring_label(&ring),
                ring_arg(&args.ring)
            );
        };
        let fingerprints = fingerprints(&snapshot.index)?;
        if fingerprints.is_empty() {
            bail!(
                "key ring {} has no keys: a policy listing none would refuse every SealedSecret \
                 (push one first)",
                ring_label(&ring)
            );
        }
        anyhow::Ok((fingerprints, ring_label(&ring), version))
    })??;
    let text = render(&request, &fingerprints, &source);
    let what = match request.format {
        PolicyFormat::Policy => format!(
            "the ConfigMap {CONFIG_MAP_NAMESPACE}/{} and the ValidatingPolicy {}{}",
            request.config_map(),
            request.policy(),
            if request.namespaces.is_empty() {
                String::new()
            } else {
                format!(" (namespaces {})", request.namespaces.join(", "))
            }
        ),
        PolicyFormat::Configmap => format!(
            "the ConfigMap {CONFIG_MAP_NAMESPACE}/{}",
            request.config_map()
        ),
        PolicyFormat::Json => "the fingerprint list".to_owned(),
    };
    let summary = format!(
        "{what}: {} of key ring {source} (index version {version})",
        count(fingerprints.len(), "key")
    );
    match &args.output {
        Some(path) => {
            write_atomic(path, text.as_bytes(), false)?;
            eprintln!("wrote {summary} to {}", path.display());
            Ok(())
        }
        None => {
            output::stdout(&text)?;
            eprintln!("wrote {summary}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(format: PolicyFormat, name: &str, namespaces: &[&str]) -> Request {
        Request {
            format,
            name: name.to_owned(),
            namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
            cert: "secretsmanager://kseal/fleet".to_owned(),
        }
    }

    #[test]
    fn fingerprints_are_checked_for_the_policy_syntax() {
        assert!(is_fingerprint(
            "SHA256:meniGnLvii7q+MB9GWxXDSWfpClPB+QaFe/QgemuXqw"
        ));
        for bad in [
            "",
            "SHA256:",
            "SHA256:*",
            "sha256:meniGnLvii7q+MB9GWxXDSWfpClPB+QaFe/QgemuXqw",
            "SHA256:meniGnLvii7q+MB9GWxXDSWfpClPB+QaFe/QgemuXq=",
            "SHA256:meniGnLvii7q+MB9GWxXDSWfpClPB+QaFe/QgemuXqwA",
        ] {
            assert!(!is_fingerprint(bad), "{bad}");
        }
    }

    /// Parses `text` as the YAML documents Kubernetes would read.
    fn documents(text: &str) -> Vec<serde_json::Value> {
        serde_saphyr::from_multiple(text).unwrap()
    }

    /// With the default name and no namespace, the policy is the example's, field for field:
    /// what check.py proves of the example holds for what `export-policy` writes.
    #[test]
    fn the_default_policy_is_the_examples() {
        let example_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/examples/fleet/kyverno");
        let example =
            fs_err::read_to_string(example_dir.join("require-fleet-sealing-key.yaml")).unwrap();
        let example: serde_json::Value = serde_saphyr::from_str(&example).unwrap();
        let fingerprints = vec!["SHA256:meniGnLvii7q+MB9GWxXDSWfpClPB+QaFe/QgemuXqw".to_owned()];
        let text = render(
            &request(PolicyFormat::Policy, "fleet", &[]),
            &fingerprints,
            "`kseal/fleet` in Secrets Manager",
        );
        let docs = documents(&text);
        assert_eq!(docs.len(), 2, "{text}");
        assert_eq!(docs[1], example, "{text}");
        // And the ConfigMap is the example's.
        let config_map = fs_err::read_to_string(example_dir.join("fleet-keys.yaml")).unwrap();
        let config_map: serde_json::Value = serde_saphyr::from_str(&config_map).unwrap();
        assert_eq!(docs[0], config_map, "{text}");
    }

    #[test]
    fn namespaces_bind_the_policy_and_names_keep_rings_apart() {
        let fingerprints = vec!["SHA256:meniGnLvii7q+MB9GWxXDSWfpClPB+QaFe/QgemuXqw".to_owned()];
        let text = render(
            &request(PolicyFormat::Policy, "prod", &["payments", "orders"]),
            &fingerprints,
            "`kseal/prod` in Secrets Manager",
        );
        let docs = documents(&text);
        assert_eq!(docs[0]["metadata"]["name"], "kseal-prod-keys");
        assert_eq!(
            docs[1]["metadata"]["name"],
            "kseal-require-prod-sealing-key"
        );
        let constraints = &docs[1]["spec"]["matchConstraints"];
        assert_eq!(
            constraints["namespaceSelector"]["matchExpressions"],
            serde_json::json!([{
                "key": "kubernetes.io/metadata.name",
                "operator": "In",
                "values": ["payments", "orders"],
            }])
        );
        assert!(constraints["resourceRules"].is_array());
        let read = docs[1]["spec"]["variables"][1]["expression"]
            .as_str()
            .unwrap();
        assert!(read.contains(r#""kyverno", "kseal-prod-keys""#), "{read}");

        let json = render(&request(PolicyFormat::Json, "prod", &[]), &fingerprints, "");
        let list: Vec<String> = serde_json::from_str(&json).unwrap();
        assert_eq!(list, fingerprints);
    }
}
