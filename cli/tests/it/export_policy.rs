//! `kseal keys export-policy` on a directory ring: the Kyverno allow-list follows the ring
//! through a rotation, activation and retirement, parses as `kubectl kustomize` reads it, and
//! is never taken from an index that is unpinned, unsigned, forged or inconsistent.
//!
//! `kubectl` is `$KSEAL_KUBECTL` or the one on PATH; without it the kustomize check fails
//! under CI=true and is skipped loudly otherwise.

// A test binary: helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use crate::common::*;

/// A directory ring under a test directory, with its own cache of versions read.
struct DirRing {
    dir: tempfile::TempDir,
    url: String,
    cache: String,
}

impl DirRing {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("dir://{}", dir.path().join("ring").display());
        let cache = dir.path().join("cache").display().to_string();
        Self { dir, url, cache }
    }

    fn d(&self) -> &Path {
        self.dir.path()
    }

    /// `kseal keys ARGS --ring URL` in the test directory; no output holds a private key.
    fn keys(&self, args: &[&str]) -> Run {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &self.url]);
        let run = kseal_env(&all, None, self.d(), &[("KSEAL_CACHE_DIR", &self.cache)]);
        for text in [&run.stdout, &run.stderr] {
            assert!(!text.contains("PRIVATE KEY"), "{}", all.join(" "));
        }
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
        run
    }

    fn ok(&self, args: &[&str]) -> Run {
        let run = self.keys(args);
        assert_eq!(run.code, 0, "kseal keys {}: {}", args.join(" "), run.stderr);
        run
    }

    /// The ring's fingerprints and kids, oldest first, as `keys list -o json` shows them.
    fn keys_listed(&self) -> Vec<(String, String)> {
        let list: serde_json::Value =
            serde_json::from_str(&self.ok(&["list", "-o", "json"]).stdout).unwrap();
        list["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                (
                    k["fingerprint"].as_str().unwrap().to_owned(),
                    k["kid"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    fn fingerprints(&self) -> Vec<String> {
        self.keys_listed().into_iter().map(|(f, _)| f).collect()
    }

    /// The ConfigMap's fingerprints and the policy, from `export-policy` ARGS.
    fn export(&self, args: &[&str]) -> (Vec<String>, Vec<serde_json::Value>) {
        let mut all = vec!["export-policy"];
        all.extend_from_slice(args);
        let run = self.ok(&all);
        let docs = documents(&run.stdout);
        assert_eq!(docs.len(), 2, "{}", run.stdout);
        (listed(&docs[0]), docs)
    }
}

fn documents(text: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The `fingerprints` of a ConfigMap document.
fn listed(config_map: &serde_json::Value) -> Vec<String> {
    assert_eq!(config_map["kind"], "ConfigMap", "{config_map}");
    serde_json::from_str(config_map["data"]["fingerprints"].as_str().unwrap()).unwrap()
}

fn kubectl_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KSEAL_KUBECTL").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

/// `kubectl kustomize` of a kustomization holding `file`: its output, or `None` (skipped
/// loudly, a failure under CI=true) without kubectl.
fn kustomize(dir: &Path, file: &Path) -> Option<Vec<serde_json::Value>> {
    let Some(kubectl) = kubectl_binary() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kubectl is not installed, but CI=true"
        );
        eprintln!("SKIPPED: kubectl is not installed: the export is not kustomized");
        return None;
    };
    let kustomization = dir.join("kustomize");
    std::fs::create_dir_all(&kustomization).unwrap();
    std::fs::copy(file, kustomization.join("kyverno.yaml")).unwrap();
    std::fs::write(
        kustomization.join("kustomization.yaml"),
        "resources:\n- kyverno.yaml\n",
    )
    .unwrap();
    let out = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(&kustomization)
        .env("HOME", dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(documents(&stdout))
}

/// The list follows the ring: a pushed (pending) key is added at once, activation changes
/// nothing, retirement removes the old key. Written with -o, it is what `kubectl kustomize`
/// reads, and --namespace binds the policy.
#[test]
fn the_exported_allow_list_follows_the_ring_through_a_rotation() {
    let ring = DirRing::new();
    ring.ok(&["push", "--key-size", "2048"]);
    ring.ok(&["trust"]);
    let first = ring.fingerprints();
    assert_eq!(first.len(), 1);

    let (list, docs) = ring.export(&[]);
    assert_eq!(list, first);
    assert_eq!(docs[0]["metadata"]["name"], "kseal-fleet-keys");
    assert_eq!(docs[0]["metadata"]["namespace"], "kyverno");
    assert_eq!(docs[1]["kind"], "ValidatingPolicy");
    assert_eq!(
        docs[1]["metadata"]["name"],
        "kseal-require-fleet-sealing-key"
    );
    assert!(
        docs[1]["spec"]["matchConstraints"]
            .get("namespaceSelector")
            .is_none()
    );

    // To a file, bound to two namespaces (repeated and comma-separated, one given twice).
    let written = ring.ok(&[
        "export-policy",
        "--name",
        "prod",
        "-n",
        "payments,orders",
        "--namespace",
        "payments",
        "-o",
        "out/kyverno.yaml",
    ]);
    assert!(written.stdout.is_empty(), "{}", written.stdout);
    assert!(
        written.stderr.contains("1 key of key ring")
            && written.stderr.contains("out/kyverno.yaml")
            && written.stderr.contains("(namespaces payments, orders)"),
        "{}",
        written.stderr
    );
    let file = ring.d().join("out/kyverno.yaml");
    let docs = documents(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(listed(&docs[0]), first);
    assert_eq!(docs[0]["metadata"]["name"], "kseal-prod-keys");
    assert_eq!(
        docs[1]["metadata"]["name"],
        "kseal-require-prod-sealing-key"
    );
    assert_eq!(
        docs[1]["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["payments", "orders"])
    );
    if let Some(built) = kustomize(ring.d(), &file) {
        let kinds: Vec<&str> = built.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["ConfigMap", "ValidatingPolicy"]);
        assert_eq!(listed(&built[0]), first);
        assert_eq!(
            built[1]["spec"]["matchConstraints"]["namespaceSelector"],
            docs[1]["spec"]["matchConstraints"]["namespaceSelector"]
        );
        assert_eq!(
            built[1]["spec"]["validations"],
            docs[1]["spec"]["validations"]
        );
    }

    // A rotation pushes a pending key: listed at once, so values sealed right after its
    // activation are admitted before every cluster's list is updated.
    ring.ok(&["rotate", "--no-wait", "--key-size", "2048"]);
    let keys = ring.keys_listed();
    assert_eq!(keys.len(), 2);
    let (list, _) = ring.export(&[]);
    assert_eq!(list, ring.fingerprints());
    assert!(list.contains(&first[0]), "{list:?}");

    // Activating it changes the sealing key, not the list.
    let (new_fingerprint, new_kid) = keys[1].clone();
    ring.ok(&["activate", "--now", &new_kid[..12]]);
    let (after_activation, _) = ring.export(&[]);
    assert_eq!(after_activation, list);

    // Retiring the old key takes it out.
    let (_, old_kid) = keys[0].clone();
    std::fs::create_dir(ring.d().join("empty")).unwrap();
    ring.ok(&[
        "retire",
        &old_kid[..12],
        "--check",
        "empty",
        "--allow-none",
        "--yes",
    ]);
    let (after_retirement, _) = ring.export(&[]);
    assert_eq!(after_retirement, std::slice::from_ref(&new_fingerprint));

    // The other forms carry the same list.
    let configmap = ring.ok(&["export-policy", "--format", "configmap"]);
    let docs = documents(&configmap.stdout);
    assert_eq!(docs.len(), 1);
    assert_eq!(listed(&docs[0]), std::slice::from_ref(&new_fingerprint));
    let json = ring.ok(&["export-policy", "--format", "json"]);
    let list: Vec<String> = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(list, [new_fingerprint]);
}

/// The allow-list decides what clusters admit: it is never written from a ring without a pin,
/// from an index changed by whoever can write it but not sign it (a fingerprint added or
/// swapped, the signature stripped), nor from a signed index whose fingerprint is not its
/// certificate's. A refused export leaves the -o file as it was.
#[test]
fn an_unpinned_forged_or_unsigned_index_is_refused() {
    let ring = DirRing::new();
    ring.ok(&["push", "--key-size", "2048"]);
    let unpinned = ring.keys(&["export-policy"]);
    assert_eq!(unpinned.code, 1, "{}", unpinned.stderr);
    assert!(
        unpinned.stderr.contains("is not pinned") && unpinned.stderr.contains("kseal keys trust"),
        "{}",
        unpinned.stderr
    );
    assert!(unpinned.stdout.is_empty());

    ring.ok(&["trust"]);
    ring.ok(&["export-policy", "-o", "policy.yaml"]);
    let policy = ring.d().join("policy.yaml");
    let good = std::fs::read_to_string(&policy).unwrap();
    let path = ring.d().join("ring/index.json");
    let signed = std::fs::read_to_string(&path).unwrap();
    let refused = |what: &str, index: &serde_json::Value, expect: &str| {
        std::fs::write(&path, format!("{index:#}\n")).unwrap();
        let run = ring.keys(&["export-policy", "-o", "policy.yaml"]);
        assert_eq!(run.code, 1, "{what}: {}", run.stderr);
        assert!(run.stderr.contains(expect), "{what}: {}", run.stderr);
        assert_eq!(
            std::fs::read_to_string(&policy).unwrap(),
            good,
            "{what}: the file changed"
        );
        std::fs::write(&path, &signed).unwrap();
    };
    let original: serde_json::Value = serde_json::from_str(&signed).unwrap();

    // An attacker's key (a consistent entry, from a ring of the attacker's) added to the
    // index, not signed by the ring's root.
    let other = DirRing::new();
    other.ok(&["push", "--key-size", "2048"]);
    let theirs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(other.d().join("ring/index.json")).unwrap())
            .unwrap();
    let mut added = original.clone();
    added["keys"]
        .as_array_mut()
        .unwrap()
        .push(theirs["keys"][0].clone());
    refused("a key added", &added, "does not verify");

    // The listed fingerprint swapped for the attacker's.
    let mut swapped = original.clone();
    swapped["keys"][0]["fingerprint"] = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into();
    refused(
        "a fingerprint swapped",
        &swapped,
        "is not what its certificate says",
    );
    // The whole entry swapped for the attacker's.
    let mut replaced = original.clone();
    replaced["keys"][0] = theirs["keys"][0].clone();
    replaced["active"] = theirs["active"].clone();
    refused("an entry replaced", &replaced, "does not verify");

    // The signature stripped: an unsigned index of an older kseal.
    let mut stripped = original.clone();
    let object = stripped.as_object_mut().unwrap();
    for field in ["version", "roots", "signature", "retired", "expires"] {
        object.remove(field);
    }
    object.insert("schema".into(), 1.into());
    refused(
        "the signature stripped",
        &stripped,
        "failed to read key ring",
    );

    // Signed by the root, but the fingerprint is not the certificate's: refused too (by the
    // store's reader, and again by export-policy).
    let mut inconsistent = kseal_keystore::Index::parse_any_ring(&signed, "index.json").unwrap();
    inconsistent.keys[0].fingerprint = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into();
    let root = inconsistent.roots.last().unwrap().kid.clone();
    let key_dir = ring.d().join("ring/keys").join(root.as_str());
    let pair = kseal_keys::KeyPair::from_pem(
        &std::fs::read_to_string(key_dir.join("tls.key")).unwrap(),
        &std::fs::read_to_string(key_dir.join("tls.crt")).unwrap(),
    )
    .unwrap();
    kseal_keystore::trust::sign_index(&mut inconsistent, &pair).unwrap();
    let resigned: serde_json::Value = serde_json::from_str(&inconsistent.to_json()).unwrap();
    refused(
        "a signed index with a wrong fingerprint",
        &resigned,
        "is not what its certificate says",
    );

    // The restored index exports again.
    ring.ok(&["export-policy", "-o", "policy.yaml"]);

    // Under a history marker an older kseal wrote (no digest; and one with no version), the
    // index cannot be told from a fork of its version signed with a ring key: no allow-list
    // is written from it, as nothing is sealed to it (attack review, round 16, N1 and N2).
    let marker_path = ring.d().join("ring/root.json");
    let marker = std::fs::read_to_string(&marker_path).unwrap();
    for fields in [&["digest", "next"][..], &["version", "digest", "next"]] {
        let mut old: serde_json::Value = serde_json::from_str(&marker).unwrap();
        for field in fields {
            old.as_object_mut().unwrap().remove(*field);
        }
        std::fs::write(&marker_path, old.to_string()).unwrap();
        let run = ring.keys(&["export-policy", "-o", "policy.yaml"]);
        assert_eq!(run.code, 1, "{fields:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("no allow-list is written")
                && run.stderr.contains("records no digest"),
            "{fields:?}: {}",
            run.stderr
        );
        assert_eq!(std::fs::read_to_string(&policy).unwrap(), good);
    }
    std::fs::write(&marker_path, &marker).unwrap();
}

/// Bad input is named before the ring is read.
#[test]
fn bad_export_policy_input_is_named() {
    let ring = DirRing::new();
    for (args, expect) in [
        (
            &["export-policy", "--name", "Prod_Ring"][..],
            "`Prod_Ring` is not a usable --name",
        ),
        (
            &["export-policy", "-n", "Team A"][..],
            "`Team A` is not a valid --namespace",
        ),
        (
            &["export-policy", "--format", "configmap", "-n", "team-a"][..],
            "--namespace binds the policy to namespaces, but --format configmap writes no policy",
        ),
        (
            &["export-policy", "--format", "yaml"][..],
            "invalid value 'yaml' for '--format <FORMAT>'",
        ),
    ] {
        let run = ring.keys(args);
        // 2: refused by the argument parser; 1: by the command.
        assert!(matches!(run.code, 1 | 2), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(expect), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
    // A ring that does not exist is named.
    let missing = ring.keys(&["export-policy", "--ring-anchor", &"a".repeat(64)]);
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("does not exist"),
        "{}",
        missing.stderr
    );
}

/// The help text, and the refusal of an unpinned ring, as a user sees them.
#[test]
fn export_policy_help_and_refusal_read_well() {
    let ring = DirRing::new();
    let help = kseal(&["keys", "export-policy", "--help"], None, ring.d());
    assert_eq!(help.code, 0, "{}", help.stderr);
    snap!("help_keys_export_policy", help);
    ring.ok(&["push", "--key-size", "2048"]);
    let unpinned = ring.keys(&["export-policy"]);
    assert_eq!(unpinned.code, 1, "{}", unpinned.stderr);
    snap!("err_export_policy_unpinned", unpinned);
}
