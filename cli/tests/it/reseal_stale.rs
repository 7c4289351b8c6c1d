//! `kseal reseal --stale`: only the items sealed with another key than the sealing key are
//! re-sealed, every other byte of each file stays as it was, a second run changes nothing,
//! and afterwards the old key is no longer needed (`validate` with the new key alone, and
//! `kseal keys retire OLD --check` on a ring in the Secrets Manager emulator).

// A test binary: helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::*;
use kseal_testkit::sm;

const SECRET: &str = "apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: prod
stringData:
  password: s3cr3t
";

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn generate(cwd: &Path, name: &str) -> PathBuf {
    let run = kseal(
        &["keys", "generate", "--out-dir", name, "--key-size", "2048"],
        None,
        cwd,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    cwd.join(name)
}

fn ok(cwd: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    let run = kseal(args, stdin, cwd);
    assert_eq!(run.code, 0, "kseal {}: {}", args.join(" "), run.stderr);
    run
}

/// Every `encryptedData` value of every SealedSecret of `text`, by `namespace/name/item`.
fn ciphertexts(text: &str) -> BTreeMap<String, String> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).unwrap();
    let mut out = BTreeMap::new();
    for doc in docs.iter().filter(|d| d["kind"] == "SealedSecret") {
        let name = format!(
            "{}/{}",
            doc["metadata"]["namespace"].as_str().unwrap(),
            doc["metadata"]["name"].as_str().unwrap()
        );
        for (item, value) in doc["spec"]["encryptedData"].as_object().unwrap() {
            out.insert(format!("{name}/{item}"), value.as_str().unwrap().to_owned());
        }
    }
    out
}

/// A repository sealed with two keys: `old` and `new` (the sealing key).
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    old: PathBuf,
    new: PathBuf,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let old = generate(&root, "old");
        let new = generate(&root, "new");
        let apps = root.join("repo/apps");
        std::fs::create_dir_all(&apps).unwrap();
        let seal = |cert: &Path, stdin: &str| {
            ok(
                &root,
                &["seal", "--cert", s(&cert.join("tls.crt"))],
                Some(stdin),
            )
            .stdout
        };
        // db.yaml: a comment, a Deployment and a SealedSecret sealed with the old key, with
        // its keys in an unusual order (metadata last).
        let stale = seal(&old, SECRET);
        let (head, metadata_and_rest) = stale.split_once("metadata:\n").unwrap();
        let (metadata, spec) = metadata_and_rest.split_once("spec:\n").unwrap();
        let db = format!(
            "# the database credentials (keep this comment)\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: db   # odd spacing\n\
             {head}spec:\n{spec}metadata:\n{metadata}"
        );
        std::fs::write(apps.join("db.yaml"), db).unwrap();
        // mixed.yaml: `password` with the new key, `token` added with the old one.
        let mixed = apps.join("mixed.yaml");
        std::fs::write(
            &mixed,
            seal(&new, &SECRET.replace("name: db", "name: mixed")),
        )
        .unwrap();
        let run = ok(
            &root,
            &["set", "--cert", s(&old.join("tls.crt")), s(&mixed), "token"],
            Some("t0k3n"),
        );
        assert!(run.stderr.contains("added `token`"), "{}", run.stderr);
        let mut text = std::fs::read_to_string(&mixed).unwrap();
        text.insert_str(0, "# mixed keys\n");
        std::fs::write(&mixed, text).unwrap();
        // fresh.json: only the new key.
        let fresh = ok(
            &root,
            &[
                "seal",
                "--cert",
                s(&new.join("tls.crt")),
                "-o",
                "json",
                "--name",
                "fresh",
            ],
            Some(SECRET),
        );
        std::fs::write(apps.join("fresh.json"), fresh.stdout).unwrap();
        std::fs::write(apps.join("README.md"), "not a manifest\n").unwrap();
        Tree {
            _dir: dir,
            root,
            old,
            new,
        }
    }

    fn files(&self) -> BTreeMap<String, String> {
        ["db.yaml", "mixed.yaml", "fresh.json", "README.md"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.root.join("repo/apps").join(f)).unwrap();
                ((*f).to_owned(), text)
            })
            .collect()
    }

    fn keys(&self) -> String {
        format!(
            "{},{}",
            s(&self.old.join("tls.key")),
            s(&self.new.join("tls.key"))
        )
    }

    fn reseal_stale(&self, extra: &[&str]) -> Run {
        let keys = self.keys();
        let new_cert = self.new.join("tls.crt");
        let mut args = vec!["reseal", "--stale", "--key", &keys, "--cert", s(&new_cert)];
        args.extend_from_slice(extra);
        args.push("repo");
        ok(&self.root, &args, None)
    }

    /// Whether every item of every SealedSecret under `repo` opens with `key` alone (each
    /// SealedSecret copied to a file of its own: `validate` wants nothing else).
    fn opens_with(&self, key: &Path) -> bool {
        let copies = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for (name, text) in self.files() {
            if name.ends_with(".md") {
                continue;
            }
            let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
            for (i, doc) in docs.iter().enumerate() {
                if doc["kind"] == "SealedSecret" {
                    let path = copies.path().join(format!("{name}.{i}.json"));
                    std::fs::write(&path, serde_json::to_string(doc).unwrap()).unwrap();
                    files.push(path.display().to_string());
                }
            }
        }
        assert_eq!(files.len(), 3);
        let key = key.join("tls.key");
        let mut args = vec!["validate", "--key", s(&key)];
        args.extend(files.iter().map(String::as_str));
        kseal(&args, None, &self.root).code == 0
    }
}

/// The `kseal.dev/sealing-key` annotation `kseal seal --cert CERT` writes.
fn kid_of(cert: &Path) -> String {
    let sealed = ok(
        cert.parent().unwrap(),
        &["seal", "--cert", s(cert)],
        Some(SECRET),
    );
    let doc: serde_json::Value = serde_saphyr::from_str(&sealed.stdout).unwrap();
    doc["metadata"]["annotations"]["kseal.dev/sealing-key"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn only_stale_items_are_resealed_and_every_other_byte_is_kept() {
    let tree = Tree::new();
    let before = tree.files();
    assert!(!tree.opens_with(&tree.new));
    let old_kid = kid_of(&tree.old.join("tls.crt"));
    let new_kid = kid_of(&tree.new.join("tls.crt"));

    // --dry-run lists what would change and writes nothing.
    let dry = tree.reseal_stale(&["--dry-run"]);
    assert_eq!(tree.files(), before);
    assert!(
        dry.stdout
            .contains("repo/apps/db.yaml: prod/db: password\n")
            && dry
                .stdout
                .contains("repo/apps/mixed.yaml: prod/mixed: token\n")
            && dry
                .stdout
                .contains("would re-seal 2 items of 2 SealedSecrets in 2 files"),
        "{}",
        dry.stdout
    );
    assert!(!dry.stdout.contains("fresh"), "{}", dry.stdout);

    let run = tree.reseal_stale(&[]);
    assert!(
        run.stdout.contains(
            "re-sealed 2 items of 2 SealedSecrets in 2 files (3 SealedSecrets read in 3 of 3 \
             manifest files)"
        ) && run.stdout.contains("2 items sealed with"),
        "{}",
        run.stdout
    );
    let after = tree.files();
    // Untouched files are byte-identical.
    assert_eq!(after["fresh.json"], before["fresh.json"]);
    assert_eq!(after["README.md"], before["README.md"]);
    // In the others, exactly the stale ciphertexts (and the hints naming the old key) differ.
    for (file, stale) in [
        ("db.yaml", "prod/db/password"),
        ("mixed.yaml", "prod/mixed/token"),
    ] {
        let (old_ct, new_ct) = (ciphertexts(&before[file]), ciphertexts(&after[file]));
        assert_eq!(old_ct.len(), new_ct.len());
        let mut expected = before[file].clone();
        for (item, value) in &old_ct {
            if item == stale {
                assert_ne!(&new_ct[item], value, "{file}: {item} was not re-sealed");
                expected = expected.replace(value.as_str(), &new_ct[item]);
            } else {
                assert_eq!(&new_ct[item], value, "{file}: {item} changed");
            }
        }
        expected = expected.replace(
            &format!("kseal.dev/sealing-key: {old_kid}"),
            &format!("kseal.dev/sealing-key: {new_kid}"),
        );
        assert_eq!(after[file], expected, "{file}");
    }
    assert!(after["db.yaml"].starts_with("# the database credentials (keep this comment)\n"));
    assert!(after["db.yaml"].contains(&format!("kseal.dev/sealing-key: {new_kid}")));
    // The new key alone opens everything; the values are intact.
    assert!(tree.opens_with(&tree.new));
    let unsealed = ok(
        &tree.root,
        &[
            "unseal",
            "--key",
            s(&tree.new.join("tls.key")),
            "-o",
            "json",
            "repo/apps/mixed.yaml",
        ],
        None,
    );
    let secret: serde_json::Value = serde_json::from_str(&unsealed.stdout).unwrap();
    // base64("t0k3n")
    assert_eq!(secret["data"]["token"], "dDBrM24=");

    // A second run finds nothing stale and changes nothing.
    let again = tree.reseal_stale(&[]);
    assert!(
        again.stdout.contains("nothing is stale"),
        "{}",
        again.stdout
    );
    assert_eq!(tree.files(), after);
}

#[test]
fn a_key_that_opens_nothing_is_an_error_and_nothing_is_written() {
    let tree = Tree::new();
    let before = tree.files();
    let run = kseal(
        &[
            "reseal",
            "--stale",
            "--key",
            s(&tree.new.join("tls.key")),
            "repo",
        ],
        None,
        &tree.root,
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("repo/apps/db.yaml") && run.stderr.contains("no --key opens"),
        "{}",
        run.stderr
    );
    assert_eq!(tree.files(), before);
    let stdin = kseal(
        &["reseal", "--stale", "--key", s(&tree.new.join("tls.key"))],
        Some(SECRET),
        &tree.root,
    );
    assert_eq!(stdin.code, 1);
    assert!(
        stdin.stderr.contains("--stale rewrites files in place"),
        "{}",
        stdin.stderr
    );
}

/// A key Secret as kseal's controller mirrors a fleet ring's key: the mirror label, and
/// whether the ring's index names it active.
fn mirror_secret(dir: &Path, name: &str, active: bool) -> String {
    key_secret(
        dir,
        name,
        &format!(
            "  labels:\n    kseal.dev/mirror: \"true\"\n  annotations:\n    \
             kseal.dev/active: \"{active}\"\n"
        ),
    )
}

/// A key Secret of `dir`'s key with `metadata` lines appended to its name and namespace.
fn key_secret(dir: &Path, name: &str, metadata: &str) -> String {
    use base64::Engine as _;
    let b64 = |file: &str| {
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(dir.join(file)).unwrap())
    };
    format!(
        "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\nmetadata:\n  name: {name}\n  \
         namespace: kseal-system\n{metadata}data:\n  tls.crt: {}\n  tls.key: {}\n",
        b64("tls.crt"),
        b64("tls.key")
    )
}

/// With the ring's private keys and no --cert, --stale re-seals to the key the ring marks
/// active, never to a newer key pushed but not activated, and says which; among unmarked keys
/// it does not guess.
#[test]
fn without_cert_stale_items_go_to_the_rings_active_key_only_and_it_is_named() {
    let tree = Tree::new();
    let before = tree.files();
    // Unmarked PEM keys: the newest may be pending, so no guess; nothing is written.
    let guess = kseal(
        &["reseal", "--stale", "--key", &tree.keys(), "repo"],
        None,
        &tree.root,
    );
    assert_eq!(guess.code, 1, "{}", guess.stderr);
    let new_kid = kid_of(&tree.new.join("tls.crt"));
    let old_kid = kid_of(&tree.old.join("tls.crt"));
    // Both keys were made in the same second or so: either may count as the newest.
    assert!(
        guess.stderr.contains("--stale does not guess")
            && (guess
                .stderr
                .contains(&format!("the newest, {new_kid}, may be a key pushed"))
                || guess
                    .stderr
                    .contains(&format!("the newest, {old_kid}, may be a key pushed")))
            && guess.stderr.contains("pass --cert with the ring"),
        "{}",
        guess.stderr
    );
    assert_eq!(tree.files(), before);

    // A backup of the controller's mirrors: `old` is the ring's active key, `new` was pushed
    // but not activated. The items sealed with `new` are the stale ones.
    let backup = tree.root.join("backup.yaml");
    std::fs::write(
        &backup,
        format!(
            "{}---\n{}",
            mirror_secret(&tree.old, "ring-old", true),
            mirror_secret(&tree.new, "ring-new", false)
        ),
    )
    .unwrap();
    let run = ok(
        &tree.root,
        &["reseal", "--stale", "--key", s(&backup), "repo"],
        None,
    );
    assert!(
        run.stderr.contains(&format!(
            "re-sealing to key {old_kid} (the ring's active key, as the --key files mark it"
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.contains(&format!("item sealed with {new_kid}"))
            || run.stdout.contains(&format!("items sealed with {new_kid}")),
        "{}",
        run.stdout
    );
    assert!(
        !run.stdout.contains(&format!("sealed with {old_kid}")),
        "{}",
        run.stdout
    );
    // Everything opens with the active key alone: nothing went to the pending one.
    assert!(tree.opens_with(&tree.old));
    assert!(!tree.opens_with(&tree.new));

    // A plain Bitnami backup (key Secrets, no kseal marks): the newest by creation time seals,
    // as in Bitnami's controller, and the line says so.
    let bitnami = tree.root.join("bitnami-backup.yaml");
    let label = "  labels:\n    sealedsecrets.bitnami.com/sealed-secrets-key: active\n";
    std::fs::write(
        &bitnami,
        format!(
            "{}---\n{}",
            key_secret(
                &tree.old,
                "sealed-secrets-keyold",
                &format!("  creationTimestamp: \"2020-01-01T00:00:00Z\"\n{label}")
            ),
            key_secret(
                &tree.new,
                "sealed-secrets-keynew",
                &format!("  creationTimestamp: \"2024-01-01T00:00:00Z\"\n{label}")
            )
        ),
    )
    .unwrap();
    let run = ok(
        &tree.root,
        &["reseal", "--stale", "--key", s(&bitnami), "repo"],
        None,
    );
    assert!(
        run.stderr.contains(&format!(
            "re-sealing to key {new_kid} (the newest of the --key files' key Secrets, none \
             marked as a fleet ring's active key: the key Bitnami's controller seals with)"
        )),
        "{}",
        run.stderr
    );
    assert!(tree.opens_with(&tree.new));
}

/// On a ring in the emulator: sealed with the old key, rotated, `reseal --stale --cert
/// secretsmanager://R` re-seals to the ring's active key, and `keys retire OLD --check`
/// then passes.
#[test]
fn after_reseal_stale_the_old_key_of_a_ring_retires() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let tree = Tree::new();
    let d = &tree.root;
    let config = tempfile::tempdir().unwrap();
    let empty = |name: &str| {
        let path = config.path().join(name);
        std::fs::write(&path, "").unwrap();
        path.display().to_string()
    };
    let (aws_config, aws_credentials) = (empty("config"), empty("credentials"));
    let envs = [
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_CONFIG_FILE", aws_config.as_str()),
        ("AWS_SHARED_CREDENTIALS_FILE", aws_credentials.as_str()),
        ("KSEAL_AWS_ENDPOINT_URL", endpoint.as_str()),
    ];
    let prefix = sm::unique_prefix("cli_reseal_stale");
    let ring = format!("secretsmanager://{prefix}");
    let run = |args: &[&str]| {
        let run = kseal_env(args, None, d, &envs);
        assert!(!run.stdout.contains("PRIVATE KEY") && !run.stderr.contains("PRIVATE KEY"));
        run
    };
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &prefix]);
        let r = run(&all);
        assert_eq!(r.code, 0, "kseal {}: {}", all.join(" "), r.stderr);
        r
    };
    keys(&["push", "--from", s(&tree.old)]);
    keys(&["trust"]);
    keys(&["push", "--from", s(&tree.new)]);
    let new_kid = kid_of(&tree.new.join("tls.crt"));
    let list: serde_json::Value =
        serde_json::from_str(&keys(&["list", "-o", "json"]).stdout).unwrap();
    let kids: Vec<String> = list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kids.len(), 2);
    let old_ring_kid = list["active"].as_str().unwrap().to_owned();
    let new_ring_kid = kids.iter().find(|k| **k != old_ring_kid).unwrap().clone();
    keys(&["activate", "--now", &new_ring_kid[..12]]);

    // The old key is still needed.
    let mut retire = vec![
        "keys",
        "retire",
        &old_ring_kid[..12],
        "--check",
        "repo",
        "--yes",
    ];
    retire.extend_from_slice(&["--ring", &prefix]);
    assert_eq!(run(&retire).code, 1);

    let key_files = tree.keys();
    let resealed = run(&[
        "reseal", "--stale", "--key", &key_files, "--cert", &ring, "repo",
    ]);
    assert_eq!(resealed.code, 0, "{}", resealed.stderr);
    assert!(
        resealed.stdout.contains("re-sealed 2 items"),
        "{}",
        resealed.stdout
    );
    let files = tree.files();
    assert!(files["db.yaml"].contains(&new_kid));
    let again = run(&[
        "reseal", "--stale", "--key", &key_files, "--cert", &ring, "repo",
    ]);
    assert!(
        again.stdout.contains("nothing is stale"),
        "{}",
        again.stdout
    );
    assert_eq!(tree.files(), files);

    let retired = run(&retire);
    assert_eq!(retired.code, 0, "{}", retired.stderr);
}

/// A fake API server: answers each request by its path from `routes` (404 otherwise) and
/// records the request lines and bodies.
fn serve(routes: Vec<(String, String)>) -> (u16, crate::common::Requests) {
    crate::common::fake_http(move |_, path, _| {
        routes
            .iter()
            .find(|(p, _)| p == path)
            .map_or((404, "{}".to_owned()), |(_, b)| (200, b.clone()))
    })
}

#[test]
fn through_the_controller_objects_whose_annotation_names_another_key_are_rotated() {
    let tree = Tree::new();
    let d = &tree.root;
    let dir = d.join("ctl");
    std::fs::create_dir_all(&dir).unwrap();
    let old_cert = tree.old.join("tls.crt");
    let new_cert = tree.new.join("tls.crt");
    let stale = ok(d, &["seal", "--cert", s(&old_cert)], Some(SECRET)).stdout;
    let stale = format!("# keep me\n{stale}");
    std::fs::write(dir.join("stale.yaml"), &stale).unwrap();
    let fresh = ok(d, &["seal", "--cert", s(&new_cert)], Some(SECRET)).stdout;
    std::fs::write(dir.join("fresh.yaml"), &fresh).unwrap();
    let old_kid = kid_of(&old_cert);
    let new_kid = kid_of(&new_cert);
    let unannotated: String = stale
        .lines()
        .filter(|l| !l.contains("kseal.dev/sealing-key") && !l.trim_end().ends_with("annotations:"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(!unannotated.contains(&old_kid));
    std::fs::write(dir.join("unannotated.yaml"), &unannotated).unwrap();
    // Namespace `team` is another ring's, which the controller seals with the old key there:
    // not stale (before, every object was compared with the plain `/v1/cert.pem`).
    let team = ok(
        d,
        &["seal", "--cert", s(&old_cert)],
        Some(&SECRET.replace("namespace: prod", "namespace: team")),
    )
    .stdout;
    std::fs::write(dir.join("team.yaml"), &team).unwrap();

    // What the controller's /v1/rotate answers: the object re-sealed with its sealing key.
    let rotated_yaml = kseal(
        &[
            "reseal",
            "--key",
            s(&tree.old.join("tls.key")),
            "--cert",
            s(&new_cert),
            "ctl/stale.yaml",
        ],
        None,
        d,
    );
    assert_eq!(rotated_yaml.code, 0, "{}", rotated_yaml.stderr);
    let rotated: serde_json::Value = serde_saphyr::from_str(&rotated_yaml.stdout).unwrap();
    let proxy = "/api/v1/namespaces/kseal-system/services/http:kseal-controller:http/proxy";
    let (port, seen) = serve(vec![
        (
            "/api/v1/namespaces/kseal-system/services/kseal-controller".to_owned(),
            r#"{"kind":"Service","spec":{"ports":[{"name":"http","port":8080}]}}"#.to_owned(),
        ),
        (
            format!("{proxy}/v1/cert.pem?namespace=prod"),
            std::fs::read_to_string(&new_cert).unwrap(),
        ),
        (
            format!("{proxy}/v1/cert.pem?namespace=team"),
            std::fs::read_to_string(&old_cert).unwrap(),
        ),
        (format!("{proxy}/v1/rotate"), rotated.to_string()),
    ]);
    std::fs::write(
        d.join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  \
             cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    \
             token: t0ken\ncontexts:\n- name: test\n  context:\n    cluster: c\n    user: u\n"
        ),
    )
    .unwrap();
    let envs = [("KUBECONFIG", "kubeconfig")];
    let run = kseal_env(
        &["reseal", "--stale", "--controller", "ctl"],
        None,
        d,
        &envs,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("ctl/stale.yaml: prod/db: password\n")
            && run
                .stdout
                .contains(&format!("1 item sealed with {old_kid}")),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("ctl/unannotated.yaml") && run.stderr.contains("skipped"),
        "{}",
        run.stderr
    );
    let posts: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.starts_with("POST "))
        .cloned()
        .collect();
    assert_eq!(posts.len(), 1, "only the stale object is sent: {posts:?}");
    // Only its ciphertext and its annotation changed.
    let new_value = rotated["spec"]["encryptedData"]["password"]
        .as_str()
        .unwrap();
    let old_value = ciphertexts(&stale)["prod/db/password"].clone();
    let expected = stale
        .replace(&old_value, new_value)
        .replace(&old_kid, &new_kid);
    assert_eq!(
        std::fs::read_to_string(dir.join("stale.yaml")).unwrap(),
        expected
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("fresh.yaml")).unwrap(),
        fresh
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("unannotated.yaml")).unwrap(),
        unannotated
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("team.yaml")).unwrap(),
        team
    );
    // Again: nothing is stale, nothing is sent.
    let again = kseal_env(
        &["reseal", "--stale", "--controller", "ctl"],
        None,
        d,
        &envs,
    );
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stdout.contains("nothing is stale"),
        "{}",
        again.stdout
    );
    let posts = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.starts_with("POST "))
        .count();
    assert_eq!(posts, 1);
    // One file holding objects of namespaces sealed with different keys: named, not guessed.
    std::fs::create_dir_all(d.join("mixed")).unwrap();
    std::fs::write(d.join("mixed/both.yaml"), format!("{stale}---\n{team}")).unwrap();
    let mixed = kseal_env(
        &["reseal", "--stale", "--controller", "mixed"],
        None,
        d,
        &envs,
    );
    assert_eq!(mixed.code, 1, "{}", mixed.stderr);
    assert!(
        mixed.stderr.contains("different keys")
            && mixed.stderr.contains("prod")
            && mixed.stderr.contains("team"),
        "{}",
        mixed.stderr
    );
}

/// `seal --merge-into FILE --key KEYS`: an item whose value is unchanged keeps its
/// ciphertext (no spurious diff), a changed one is sealed anew, a new one is added.
#[test]
fn merge_into_with_the_key_keeps_the_ciphertext_of_unchanged_items() {
    let tree = Tree::new();
    let d = &tree.root;
    let cert = tree.new.join("tls.crt");
    let key = tree.new.join("tls.key");
    let two = SECRET.replace(
        "  password: s3cr3t\n",
        "  password: s3cr3t\n  user: admin\n",
    );
    let sealed = ok(d, &["seal", "--cert", s(&cert), "-w", "m.yaml"], Some(&two));
    assert!(sealed.stdout.is_empty());
    let before = std::fs::read_to_string(d.join("m.yaml")).unwrap();
    let old = ciphertexts(&before);

    // The same values: the file is left as it was.
    let run = ok(
        d,
        &[
            "seal",
            "--cert",
            s(&cert),
            "--merge-into",
            "m.yaml",
            "--key",
            s(&key),
        ],
        Some(&two),
    );
    assert!(run.stderr.contains("is unchanged"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(d.join("m.yaml")).unwrap(), before);

    // One value changed, one added: only those ciphertexts change.
    let changed = two
        .replace("password: s3cr3t", "password: n3w")
        .replace("  user: admin\n", "  user: admin\n  extra: e\n");
    let run = ok(
        d,
        &[
            "seal",
            "--cert",
            s(&cert),
            "--merge-into",
            "m.yaml",
            "--key",
            s(&key),
        ],
        Some(&changed),
    );
    assert!(
        run.stderr
            .contains("added `extra`; replaced `password`; kept `user`"),
        "{}",
        run.stderr
    );
    let after = ciphertexts(&std::fs::read_to_string(d.join("m.yaml")).unwrap());
    assert_eq!(after["prod/db/user"], old["prod/db/user"]);
    assert_ne!(after["prod/db/password"], old["prod/db/password"]);
    assert!(after.contains_key("prod/db/extra"));

    // Without --key every merged item is sealed anew (as before).
    let run = ok(
        d,
        &["seal", "--cert", s(&cert), "--merge-into", "m.yaml"],
        Some(&changed),
    );
    assert!(run.stderr.contains("replaced"), "{}", run.stderr);
    let again = ciphertexts(&std::fs::read_to_string(d.join("m.yaml")).unwrap());
    assert_ne!(again["prod/db/user"], after["prod/db/user"]);
}
