//! End-to-end runs of the `kseal keys` ring commands (push, activate, rotate, list,
//! export-cert, import, retire) and of `kseal seal --cert secretsmanager://R`, against the
//! Secrets Manager emulator (moto, `tests/moto/start.sh`; see `kseal_testkit::sm`).
//!
//! Every test that needs the emulator asks `sm::endpoint()` first and returns when it is not
//! running (it fails under CI=true), and keeps its secrets under its own `unique_prefix`.
//! Every run is checked never to print a private key.

// A test binary: helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use crate::common::*;
use kseal_api::SealedSecret;
use kseal_testkit::sm;

const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: prod\nstringData:\n  password: s3cr3t\n";

/// Snapshots a run with the ring's variable parts filtered: ring prefixes, kids, fingerprints,
/// dates, the emulator's port and the test's directory.
macro_rules! ring_snap {
    ($name:expr, $run:expr, $dir:expr) => {{
        let dir_re = regex_escape(&$dir.display().to_string());
        insta::with_settings!({filters => vec![
            (dir_re.as_str(), "[DIR]"),
            (r"kseal-test/[A-Za-z0-9_+=.@-]+?-[0-9a-f]{16}", "[RING]"),
            (r"\b[0-9a-f]{64}\b", "[KID]"),
            (r"\b[0-9a-f]{12}\b", "[KID12]"),
            (r"SHA256:[A-Za-z0-9+/]{43}", "SHA256:[FINGERPRINT]"),
            (r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "[TIME]"),
            (r"\d{4}-\d\d-\d\d", "[DATE]"),
            (r"127\.0\.0\.1:\d+", "127.0.0.1:[PORT]"),
            (r"\(in \d+ minutes?\)", "(in [N] minutes)"),
        ]}, {
            insta::assert_snapshot!($name, $run.snapshot());
        });
    }};
}

/// The child's environment: dummy credentials for the emulator (moto checks none), a region,
/// no instance metadata, and empty AWS config files so nothing of the user's leaks in.
#[derive(Clone)]
struct Aws {
    vars: Vec<(String, String)>,
    _config: std::rc::Rc<tempfile::TempDir>,
}

impl Aws {
    fn new() -> Self {
        let config = tempfile::tempdir().unwrap();
        let empty = |name: &str| {
            let path = config.path().join(name);
            std::fs::write(&path, "").unwrap();
            path.display().to_string()
        };
        let vars = vec![
            ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
            ("AWS_CONFIG_FILE".into(), empty("config")),
            ("AWS_SHARED_CREDENTIALS_FILE".into(), empty("credentials")),
        ];
        Self {
            vars,
            _config: std::rc::Rc::new(config),
        }
    }

    fn with(mut self, name: &str, value: &str) -> Self {
        self.vars.retain(|(n, _)| n != name);
        self.vars.push((name.into(), value.into()));
        self
    }

    fn without(mut self, name: &str) -> Self {
        self.vars.retain(|(n, _)| n != name);
        self
    }

    /// Runs `kseal args` in `cwd`; no output may hold a private key.
    fn run(&self, cwd: &Path, args: &[&str], stdin: Option<&str>) -> Run {
        let envs: Vec<(&str, &str)> = self
            .vars
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let run = kseal_env(args, stdin, cwd, &envs);
        for text in [&run.stdout, &run.stderr] {
            assert!(
                !text.contains("PRIVATE KEY"),
                "`kseal {}` printed a private key",
                args.join(" ")
            );
        }
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
        run
    }
}

/// One ring of the emulator: `--ring PREFIX --aws-endpoint-url URL` appended to every command.
struct Ring {
    aws: Aws,
    endpoint: String,
    prefix: String,
}

impl Ring {
    fn new(endpoint: &str, prefix: &str) -> Self {
        Self {
            aws: Aws::new(),
            endpoint: endpoint.to_owned(),
            prefix: prefix.to_owned(),
        }
    }

    fn keys(&self, cwd: &Path, args: &[&str]) -> Run {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &self.prefix, "--aws-endpoint-url", &self.endpoint]);
        self.aws.run(cwd, &all, None)
    }

    /// Like `keys`, and it must succeed.
    fn ok(&self, cwd: &Path, args: &[&str]) -> Run {
        let run = self.keys(cwd, args);
        assert_eq!(run.code, 0, "kseal keys {}: {}", args.join(" "), run.stderr);
        run
    }

    /// A command that reads the ring through KSEAL_AWS_ENDPOINT_URL (`seal`, `reseal`).
    fn env_run(&self, cwd: &Path, args: &[&str], stdin: Option<&str>) -> Run {
        self.aws
            .clone()
            .with("KSEAL_AWS_ENDPOINT_URL", &self.endpoint)
            .run(cwd, args, stdin)
    }

    fn cert_url(&self) -> String {
        format!("secretsmanager://{}", self.prefix)
    }

    /// The index as `keys list -o json` prints it.
    fn index(&self, cwd: &Path) -> serde_json::Value {
        let run = self.ok(cwd, &["list", "-o", "json"]);
        serde_json::from_str(&run.stdout).unwrap()
    }

    fn kids(&self, cwd: &Path) -> Vec<String> {
        self.index(cwd)["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_owned())
            .collect()
    }

    fn active(&self, cwd: &Path) -> String {
        self.index(cwd)["active"].as_str().unwrap().to_owned()
    }
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `kseal keys generate --out-dir DIR --key-size 2048` (test-only size); returns the directory.
fn generate_dir(cwd: &Path, name: &str) -> PathBuf {
    let run = kseal(
        &["keys", "generate", "--out-dir", name, "--key-size", "2048"],
        None,
        cwd,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    cwd.join(name)
}

/// The kid (hex SHA-256 of the SubjectPublicKeyInfo) and fingerprint of a PEM certificate.
fn kid_and_fingerprint(cert_pem: &str) -> (String, String) {
    let cert = kseal_keys::Certificate::from_pem(cert_pem).unwrap();
    let kid = kseal_keystore::Kid::of(cert.public_key()).to_string();
    (kid, cert.id().to_string())
}

fn parse_sealed(text: &str) -> SealedSecret {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple_with_options::<serde_json::Value>(text, yaml_1_2())
            .unwrap()
            .into_iter()
            .filter(|v| !v.is_null())
            .collect();
    assert_eq!(docs.len(), 1, "{text}");
    serde_json::from_value(docs[0].clone()).unwrap()
}

/// `kseal unseal --key KEY` of `sealed`: the Secret's decoded `password`.
fn unsealed_password(cwd: &Path, key: &Path, sealed: &str) -> String {
    use base64::Engine as _;
    let run = kseal(
        &["unseal", "--key", s(key), "-o", "json"],
        Some(sealed),
        cwd,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let secret: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let value = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["password"].as_str().unwrap())
        .unwrap();
    String::from_utf8(value).unwrap()
}

#[test]
fn help_texts_of_the_ring_commands() {
    let dir = tempfile::tempdir().unwrap();
    for (name, args) in [
        ("help_keys_push", &["keys", "push", "--help"][..]),
        ("help_keys_rotate", &["keys", "rotate", "--help"][..]),
        ("help_keys_retire", &["keys", "retire", "--help"][..]),
        ("help_keys_list", &["keys", "list", "--help"][..]),
    ] {
        let run = kseal(args, None, dir.path());
        assert_eq!(run.code, 0, "{name}");
        snap!(name, run);
    }
}

#[test]
fn push_activate_rotate_and_list() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = Ring::new(&endpoint, &sm::unique_prefix("cli_push_activate_rotate"));

    // A new ring: its first key seals at once.
    let first = ring.ok(d, &["push", "--key-size", "2048"]);
    ring_snap!("push_new_ring", first, d);
    let list = ring.ok(d, &["list"]);
    assert_eq!(list.stderr, "");
    ring_snap!("list_one_key", list, d);
    let kids = ring.kids(d);
    assert_eq!(kids.len(), 1);
    assert_eq!(ring.active(d), kids[0]);

    // --if-empty: the ring has a key, so nothing happens (a seeding Job running again).
    let again = ring.ok(d, &["push", "--if-empty", "--yes", "--key-size", "2048"]);
    ring_snap!("push_if_empty_noop", again, d);
    assert_eq!(ring.kids(d), kids);
    let second = ring.ok(d, &["push", "--key-size", "2048"]);
    assert!(
        !second.stderr.contains("nothing to do"),
        "{}",
        second.stderr
    );
    let kids = ring.kids(d);
    assert_eq!(kids.len(), 2, "a push without --if-empty adds a key");
    let env_run = Aws::new().with("KSEAL_IF_EMPTY", "true").run(
        d,
        &[
            "keys",
            "push",
            "--ring",
            &ring.prefix,
            "--aws-endpoint-url",
            &endpoint,
        ],
        None,
    );
    assert_eq!(env_run.code, 0, "{}", env_run.stderr);
    assert!(
        env_run.stderr.contains("already has 2 keys: nothing to do"),
        "{}",
        env_run.stderr
    );

    // The second key waits for the activation delay.
    assert_eq!(ring.active(d), kids[0]);
    assert!(
        second.stderr.contains(&format!(
            "kseal keys activate --ring {} {}",
            ring.prefix,
            &kids[1][..12]
        )),
        "{}",
        second.stderr
    );
    let too_young = ring.keys(d, &["activate", &kids[1][..8]]);
    assert_eq!(too_young.code, 1);
    assert!(too_young.stderr.contains("entered the ring less than"));
    ring_snap!("err_activate_too_young", too_young, d);
    assert_eq!(
        ring.active(d),
        kids[0],
        "a refused activation changes nothing"
    );

    let now = ring.ok(d, &["activate", "--now", &kids[1][..8]]);
    ring_snap!("activate_now", now, d);
    assert_eq!(ring.active(d), kids[1]);
    let again = ring.ok(d, &["activate", "--now", &kids[1]]);
    assert!(again.stderr.contains("already seals: nothing to do"));

    // rotate --now: a third key, sealing at once.
    let rotated = ring.ok(d, &["rotate", "--now", "--key-size", "2048"]);
    let kids = ring.kids(d);
    assert_eq!(kids.len(), 3);
    assert_eq!(ring.active(d), kids[2]);
    assert!(
        rotated
            .stderr
            .contains(&format!("key {} seals from now on", &kids[2][..12])),
        "{}",
        rotated.stderr
    );

    // rotate --no-wait: pushed, not active.
    let pushed = ring.ok(d, &["rotate", "--no-wait", "--key-size", "2048"]);
    let kids = ring.kids(d);
    assert_eq!(kids.len(), 4);
    assert_eq!(ring.active(d), kids[2]);
    assert!(
        pushed.stderr.contains("not sealing yet"),
        "{}",
        pushed.stderr
    );

    let list = ring.ok(d, &["list"]);
    ring_snap!("list_four_keys", list, d);
    // Newest first: the key rotate --no-wait pushed, then the sealing one.
    let rows: Vec<&str> = list.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 4);
    assert!(rows[0].starts_with(&kids[3][..12]), "{}", list.stdout);
    assert!(rows[0].contains("pending until"), "{}", list.stdout);
    assert!(rows[1].starts_with(&kids[2][..12]), "{}", list.stdout);
    assert!(rows[1].ends_with("  sealing"), "{}", list.stdout);
    // The keys that sealed before (minutes ago) are not "new".
    assert!(
        rows[2].ends_with("  previous (opens only)"),
        "{}",
        list.stdout
    );
    assert!(
        rows[3].ends_with("  previous (opens only)"),
        "{}",
        list.stdout
    );
    let index = ring.index(d);
    assert_eq!(index["schema"], 2, "a signed history");
    assert_eq!(index["ring"], ring.prefix.as_str());
}

#[test]
fn seal_with_the_ring_certificate_round_trips() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = Ring::new(&endpoint, &sm::unique_prefix("cli_seal_with_ring"));
    let keys = generate_dir(d, "keys");
    let cert_pem = std::fs::read_to_string(keys.join("tls.crt")).unwrap();
    let (kid, fingerprint) = kid_and_fingerprint(&cert_pem);

    let pushed = ring.ok(d, &["push", "--from", s(&keys)]);
    assert!(pushed.stderr.contains("is the ring's first key"));
    assert_eq!(ring.active(d), kid);

    // Nothing seals to a ring whose anchor is not pinned; the error says how to pin it.
    let unpinned = ring.env_run(d, &["seal", "--cert", &ring.cert_url()], Some(SECRET));
    assert_eq!(unpinned.code, 1, "{}", unpinned.stderr);
    assert!(
        unpinned.stderr.contains("is not pinned")
            && unpinned.stderr.contains("kseal keys trust --ring"),
        "{}",
        unpinned.stderr
    );
    let trusted = ring.ok(d, &["trust"]);
    assert!(
        trusted.stderr.contains(&format!("anchor: {kid}")),
        "{}",
        trusted.stderr
    );
    assert!(
        std::fs::read_to_string(d.join(".kseal.yaml"))
            .unwrap()
            .contains(&format!("anchor: {kid}"))
    );
    // A wrong pin (another ring's anchor) is refused, naming both anchors.
    let wrong = ring.env_run(
        d,
        &[
            "seal",
            "--cert",
            &ring.cert_url(),
            "--ring-anchor",
            &"0".repeat(64),
        ],
        Some(SECRET),
    );
    assert_eq!(wrong.code, 1);
    assert!(
        wrong
            .stderr
            .contains("does not pass through the pinned root 000000000000"),
        "{}",
        wrong.stderr
    );

    // Sealing reads the index only; unsealing with the pushed key proves the round trip.
    let sealed = ring.env_run(d, &["seal", "--cert", &ring.cert_url()], Some(SECRET));
    assert_eq!(sealed.code, 0, "{}", sealed.stderr);
    assert!(!sealed.stdout.contains("s3cr3t"));
    let object = parse_sealed(&sealed.stdout);
    assert_eq!(
        object.metadata.annotations.as_ref().unwrap()["kseal.dev/sealing-key"],
        fingerprint
    );
    assert_eq!(
        unsealed_password(d, &keys.join("tls.key"), &sealed.stdout),
        "s3cr3t"
    );

    // export-cert writes the active certificate, as generated.
    let exported = ring.ok(d, &["export-cert", "-w", "fleet.crt"]);
    assert_eq!(exported.stdout, "");
    assert!(exported.stderr.contains(&format!(
        "wrote the certificate of key {} to fleet.crt",
        &kid[..12]
    )));
    assert_eq!(
        std::fs::read_to_string(d.join("fleet.crt")).unwrap(),
        cert_pem
    );
    let to_stdout = ring.ok(d, &["export-cert"]);
    assert_eq!(to_stdout.stdout, cert_pem);
    let by_kid = ring.ok(d, &["export-cert", "--kid", &kid[..10]]);
    assert_eq!(by_kid.stdout, cert_pem);

    // Sealing with the exported file gives the same annotation.
    let offline = kseal(&["seal", "--cert", "fleet.crt"], Some(SECRET), d);
    assert_eq!(offline.code, 0, "{}", offline.stderr);
    assert_eq!(
        parse_sealed(&offline.stdout).metadata.annotations.unwrap()["kseal.dev/sealing-key"],
        fingerprint
    );

    // A ring without an index cannot seal.
    let missing = Ring::new(&endpoint, &format!("{}-missing", ring.prefix));
    let run = missing.env_run(
        d,
        &["seal", "--cert", &missing.cert_url(), "--ring-anchor", &kid],
        Some(SECRET),
    );
    assert_eq!(run.code, 1);
    assert_eq!(run.stdout, "");
    ring_snap!("err_seal_with_missing_ring", run, d);
}

/// `kubectl get secret -l sealedsecrets.bitnami.com/sealed-secrets-key -o yaml` of two key
/// Secrets made by `kseal keys generate`: the first one made is the newer by creationTimestamp
/// (Bitnami's order), so the import has to follow the timestamps, not the certificates.
/// Returns the kids, newest first.
fn bitnami_backup(cwd: &Path, file: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut kids = Vec::new();
    for created in ["2025-06-01T00:00:00Z", "2024-06-01T00:00:00Z"] {
        let run = kseal(
            &[
                "keys",
                "generate",
                "--key-size",
                "2048",
                "-n",
                "kube-system",
            ],
            None,
            cwd,
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        let mut secret: serde_json::Value = serde_saphyr::from_str(&run.stdout).unwrap();
        secret["metadata"]["creationTimestamp"] = created.into();
        secret["metadata"]["resourceVersion"] = "1234".into();
        secret["metadata"]["uid"] = "8e1c1a7e-0000-4000-8000-000000000000".into();
        use base64::Engine as _;
        let crt = base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["tls.crt"].as_str().unwrap())
            .unwrap();
        kids.push(kid_and_fingerprint(std::str::from_utf8(&crt).unwrap()).0);
        items.push(secret);
    }
    let list = serde_saphyr::to_string(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": items,
    }))
    .unwrap();
    std::fs::write(cwd.join(file), list).unwrap();
    kids
}

#[test]
fn import_bitnami_backups_reference_secrets_and_json_files() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = sm::unique_prefix("cli_import");

    // A Bitnami backup of two keys: the newest seals in the new ring.
    let kids = bitnami_backup(d, "keys-backup.yaml");
    let bitnami = Ring::new(&endpoint, &format!("{base}/bitnami"));
    let run = bitnami.ok(d, &["import", "keys-backup.yaml"]);
    // The older key only opens what it sealed: no hint to activate it.
    assert!(!run.stderr.contains("activate"), "{}", run.stderr);
    ring_snap!("import_bitnami_backup", run, d);
    let mut got = bitnami.kids(d);
    got.sort();
    let mut want = kids.clone();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(bitnami.active(d), kids[0]);
    // Importing again changes nothing.
    let again = bitnami.ok(d, &["import", "keys-backup.yaml"]);
    assert!(
        again.stderr.contains("already in the index"),
        "{}",
        again.stderr
    );
    assert_eq!(bitnami.active(d), kids[0]);

    // A PEM file (key, then certificate), mirrored to a single secret in the reference
    // sample's format; that secret imported into another ring.
    let keys = generate_dir(d, "pem");
    let cert_pem = std::fs::read_to_string(keys.join("tls.crt")).unwrap();
    let key_pem = std::fs::read_to_string(keys.join("tls.key")).unwrap();
    std::fs::write(d.join("pair.pem"), format!("{key_pem}{cert_pem}")).unwrap();
    let (kid, _) = kid_and_fingerprint(&cert_pem);
    let mirror_name = format!("{base}/sealed-secrets");
    let pem = Ring::new(&endpoint, &format!("{base}/pem"));
    let run = pem.ok(
        d,
        &["import", "pair.pem", "--mirror-current-to", &mirror_name],
    );
    assert!(
        run.stderr
            .contains(&format!("holds the active key {}", &kid[..12])),
        "{}",
        run.stderr
    );
    assert_eq!(pem.active(d), kid);
    let copy = Ring::new(&endpoint, &format!("{base}/copy"));
    let run = copy.ok(d, &["import", &format!("secretsmanager://{mirror_name}")]);
    ring_snap!("import_reference_secret", run, d);
    assert_eq!(copy.kids(d), vec![kid.clone()]);
    assert_eq!(copy.active(d), kid);

    // The reference sample's JSON with raw newlines inside the strings, as `aws secretsmanager
    // get-secret-value --query SecretString --output text` prints it, and the quoted string
    // `--output json` prints.
    let raw = format!("{{\n  \"crt\": \"{cert_pem}\",\n  \"key\": \"{key_pem}\"\n}}\n");
    assert!(raw.contains("-----\nMII"));
    std::fs::write(d.join("raw.json"), &raw).unwrap();
    let strict = serde_json::json!({"crt": cert_pem, "key": key_pem}).to_string();
    std::fs::write(
        d.join("quoted.json"),
        serde_json::to_string(&strict).unwrap(),
    )
    .unwrap();
    for file in ["raw.json", "quoted.json"] {
        let json = Ring::new(&endpoint, &format!("{base}/{}", file.replace('.', "-")));
        json.ok(d, &["import", file]);
        assert_eq!(json.kids(d), vec![kid.clone()], "{file}");
        assert_eq!(json.active(d), kid, "{file}");
    }
    // Broken JSON names the file, never its content.
    std::fs::write(
        d.join("broken.json"),
        format!(
            "{{\"crt\": \"{}\", \"key\": 42}}",
            cert_pem.replace('\n', "\\n")
        ),
    )
    .unwrap();
    let broken = Ring::new(&endpoint, &format!("{base}/broken"));
    let run = broken.keys(d, &["import", "broken.json"]);
    assert_eq!(run.code, 1);
    assert!(!run.stderr.contains("MII"), "{}", run.stderr);
    ring_snap!("err_import_broken_json", run, d);
}

#[test]
fn retire_refuses_keys_that_sealed_secrets_still_need() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = Ring::new(&endpoint, &sm::unique_prefix("cli_retire"));
    let old = generate_dir(d, "old");
    let new = generate_dir(d, "new");
    let (old_kid, _) = kid_and_fingerprint(&std::fs::read_to_string(old.join("tls.crt")).unwrap());
    let (new_kid, _) = kid_and_fingerprint(&std::fs::read_to_string(new.join("tls.crt")).unwrap());

    ring.ok(d, &["push", "--from", s(&old)]);
    ring.ok(d, &["trust"]);
    // A GitOps repository with one SealedSecret sealed with the old (active) key, a file of
    // another kind, and a hidden directory that is not looked at.
    let repo = d.join("repo");
    std::fs::create_dir_all(repo.join("apps/db")).unwrap();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let sealed = ring.env_run(d, &["seal", "--cert", &ring.cert_url()], Some(SECRET));
    assert_eq!(sealed.code, 0, "{}", sealed.stderr);
    std::fs::write(repo.join("apps/db/sealed-secret.yaml"), &sealed.stdout).unwrap();
    std::fs::write(repo.join(".git/old.yaml"), &sealed.stdout).unwrap();
    std::fs::write(
        repo.join("apps/db/deployment.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: db\n",
    )
    .unwrap();
    // A link back up the tree is not followed (it would loop).
    #[cfg(unix)]
    std::os::unix::fs::symlink(&repo, repo.join("apps/loop")).unwrap();

    ring.ok(d, &["push", "--from", s(&new)]);
    ring.ok(d, &["activate", "--now", &new_kid[..12]]);

    // The active key is refused, whatever the repository holds.
    let run = ring.keys(d, &["retire", &new_kid[..12], "--check", "repo", "--yes"]);
    assert_eq!(run.code, 1);
    ring_snap!("err_retire_active_key", run, d);

    // The old key still opens a SealedSecret of the repository.
    let run = ring.keys(d, &["retire", &old_kid[..12], "--check", "repo", "--yes"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("apps/db/sealed-secret.yaml: prod/db (password)")
    );
    assert!(!run.stderr.contains(".git"));
    ring_snap!("err_retire_still_needed", run, d);
    assert_eq!(ring.kids(d).len(), 2, "a refused retire changes nothing");

    // Re-sealed to the ring's active key, it no longer needs the old one.
    let run = ring.env_run(
        d,
        &[
            "reseal",
            "--key",
            s(&old.join("tls.key")),
            "--cert",
            &ring.cert_url(),
            "--in-place",
            "repo/apps/db/sealed-secret.yaml",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let resealed = std::fs::read_to_string(repo.join("apps/db/sealed-secret.yaml")).unwrap();
    assert_eq!(
        unsealed_password(d, &new.join("tls.key"), &resealed),
        "s3cr3t"
    );
    let run = ring.ok(d, &["retire", &old_kid[..12], "--check", "repo", "--yes"]);
    ring_snap!("retire_old_key", run, d);
    assert_eq!(ring.kids(d), vec![new_kid.clone()]);
    let list = ring.ok(d, &["list"]);
    let row = |kid: &str| {
        list.stdout
            .lines()
            .find(|l| l.starts_with(&kid[..12]))
            .unwrap_or_else(|| panic!("no row for {kid}: {}", list.stdout))
            .to_owned()
    };
    assert!(row(&old_kid).contains("  retired "), "{}", list.stdout);
    assert!(row(&new_kid).ends_with("  sealing"), "{}", list.stdout);

    // The last key is refused too.
    let run = ring.keys(d, &["retire", &new_kid[..12], "--check", "repo", "--yes"]);
    assert_eq!(run.code, 1);
    ring_snap!("err_retire_last_key", run, d);
    assert_eq!(ring.kids(d), vec![new_kid]);
}

#[test]
fn racing_if_empty_seeders_leave_one_key_in_the_ring() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("dir://{}", d.join("ring").display());
    let aws = Aws::new();
    let args = [
        "keys",
        "push",
        "--ring",
        &url,
        "--key-size",
        "2048",
        "--if-empty",
    ];
    // Two seeding Jobs started at once (two processes, one ring).
    let runs: Vec<Run> = std::thread::scope(|s| {
        let seeders: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let envs: Vec<(&str, &str)> = aws
                        .vars
                        .iter()
                        .map(|(n, v)| (n.as_str(), v.as_str()))
                        .collect();
                    kseal_env(&args, None, d, &envs)
                })
            })
            .collect();
        seeders.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for run in &runs {
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(!run.stderr.contains("PRIVATE KEY"), "{}", run.stderr);
    }
    let firsts = runs
        .iter()
        .filter(|r| r.stderr.contains("is the ring's first key"))
        .count();
    assert_eq!(
        firsts,
        1,
        "{:?}",
        runs.iter().map(|r| &r.stderr).collect::<Vec<_>>()
    );
    let list = aws.run(d, &["keys", "list", "--ring", &url, "-o", "json"], None);
    assert_eq!(list.code, 0, "{}", list.stderr);
    let index: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(index["keys"].as_array().unwrap().len(), 1, "{index}");
}

#[test]
fn a_ring_in_a_directory_needs_no_aws() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("dir://{}", d.join("ring").display());
    let aws = Aws::new();
    let push = |extra: &[&str]| {
        let mut args = vec!["keys", "push", "--ring", &url, "--key-size", "2048"];
        args.extend_from_slice(extra);
        let run = aws.run(d, &args, None);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run
    };
    let first = push(&["--if-empty"]);
    assert!(
        first.stderr.contains("is the ring's first key"),
        "{}",
        first.stderr
    );
    let again = push(&["--if-empty"]);
    ring_snap!("dir_push_if_empty_noop", again, d);
    let second = push(&[]);
    // The suggested command names the directory ring, not a Secrets Manager prefix.
    assert!(
        second
            .stderr
            .contains(&format!("run `kseal keys activate --ring {url} ")),
        "{}",
        second.stderr
    );
    let list = aws.run(d, &["keys", "list", "--ring", &url, "-o", "json"], None);
    assert_eq!(list.code, 0, "{}", list.stderr);
    let index: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(index["keys"].as_array().unwrap().len(), 2);
    let missing = format!("dir://{}", d.join("nothing-here").display());
    let run = aws.run(d, &["keys", "list", "--ring", &missing], None);
    assert_eq!(run.code, 1);
    ring_snap!("err_dir_ring_missing", run, d);
}

#[test]
fn error_messages_of_the_ring_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // No emulator needed: nothing answers on port 1.
    let run = Aws::new().run(
        d,
        &[
            "keys",
            "list",
            "--ring",
            "kseal/fleet",
            "--aws-endpoint-url",
            "http://127.0.0.1:1",
        ],
        None,
    );
    assert_eq!(run.code, 1);
    assert_eq!(run.stdout, "");
    ring_snap!("err_endpoint_unreachable", run, d);

    // No credentials anywhere (and no instance metadata to ask).
    let run = Aws::new()
        .without("AWS_ACCESS_KEY_ID")
        .without("AWS_SECRET_ACCESS_KEY")
        .run(
            d,
            &[
                "keys",
                "list",
                "--ring",
                "kseal/fleet",
                "--aws-endpoint-url",
                "http://127.0.0.1:1",
            ],
            None,
        );
    assert_eq!(run.code, 1);
    ring_snap!("err_no_credentials", run, d);

    // Not a ring location.
    let run = Aws::new().run(d, &["keys", "list", "--ring", "s3://x"], None);
    assert_eq!(run.code, 1);
    ring_snap!("err_invalid_ring_location", run, d);

    // --if-empty generates: it makes no sense with --from.
    let run = Aws::new().run(
        d,
        &[
            "keys",
            "push",
            "--if-empty",
            "--from",
            "keys",
            "--ring",
            "x",
        ],
        None,
    );
    assert_eq!(run.code, 2);
    ring_snap!("err_if_empty_with_from", run, d);

    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let missing = Ring::new(&endpoint, &sm::unique_prefix("cli_missing_ring"));
    let run = missing.keys(d, &["list"]);
    assert_eq!(run.code, 1);
    assert_eq!(run.stdout, "");
    ring_snap!("err_unknown_ring", run, d);
    let run = missing.keys(d, &["activate", "--now", "0123456789ab"]);
    assert_eq!(run.code, 1);
    ring_snap!("err_activate_in_unknown_ring", run, d);
    // rotate does not create a ring (a mistyped name would get one).
    let run = missing.keys(d, &["rotate", "--now", "--key-size", "2048"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("does not exist"), "{}", run.stderr);
    assert!(!run.stderr.contains("generating"), "{}", run.stderr);
    assert_eq!(missing.keys(d, &["list"]).code, 1, "nothing was created");
}

/// Puts a copy of the binary `src` at `dst` without this process ever holding it open for
/// writing: a write descriptor that a test thread's concurrent fork inherits makes executing
/// the copy fail with "Text file busy" (ETXTBSY). A hard link where it can, else `cp` in a
/// child process.
fn place_binary(src: &str, dst: &std::path::Path) {
    if std::fs::hard_link(src, dst).is_ok() {
        return;
    }
    let status = std::process::Command::new("cp")
        .arg(src)
        .arg(dst)
        .status()
        .unwrap();
    assert!(status.success(), "cp {src} {}", dst.display());
}

/// `kseal` hands key-ring work to `kseal-ring` beside it (so that it does not link the AWS
/// SDK); without it, the command fails with a message that says what is missing.
#[test]
fn kseal_hands_ring_work_to_kseal_ring_and_names_it_when_missing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("dir://{}", d.join("ring").display());
    let lonely = d.join("bin");
    std::fs::create_dir(&lonely).unwrap();
    let kseal = lonely.join("kseal");
    place_binary(env!("CARGO_BIN_EXE_kseal"), &kseal);
    let run = |args: &[&str]| {
        std::process::Command::new(&kseal)
            .args(args)
            .env("PATH", &lonely)
            .current_dir(d)
            .output()
            .unwrap()
    };
    let out = run(&["keys", "push", "--ring", &url, "--key-size", "2048"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("which `kseal-ring` does; it is installed beside `kseal`"),
        "{stderr}"
    );
    assert!(!d.join("ring").exists(), "nothing was written");
    // Commands without a ring still run in `kseal` alone.
    let out = run(&["keys", "generate", "--out-dir", "k", "--key-size", "2048"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["seal", "--cert", &url, "-f", "-"]);
    assert_eq!(out.status.code(), Some(1));

    // Beside `kseal-ring`, the same commands work, with the ring command's exit code.
    place_binary(env!("CARGO_BIN_EXE_kseal-ring"), &lonely.join("kseal-ring"));
    let out = run(&["keys", "push", "--ring", &url, "--key-size", "2048"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["keys", "list", "--ring", &url]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("sealing"));
    let out = run(&["keys", "activate", "--ring", &url, "ffffffffffff"]);
    assert_eq!(out.status.code(), Some(1));
}

/// `kseal keys ARGS --ring URL` with the environment `vars` (an [`Aws`]'s) plus `extra`; no
/// output may hold a private key. Takes the variables only, so threads can share them.
fn dir_keys(
    vars: &[(String, String)],
    d: &Path,
    url: &str,
    args: &[&str],
    extra: &[(&str, &str)],
) -> Run {
    let mut all = vec!["keys"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--ring", url]);
    let mut envs: Vec<(&str, &str)> = vars.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    envs.extend_from_slice(extra);
    let run = kseal_env(&all, None, d, &envs);
    for text in [&run.stdout, &run.stderr] {
        assert!(
            !text.contains("PRIVATE KEY"),
            "`kseal {}` printed a private key",
            all.join(" ")
        );
    }
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    run
}

/// Every status of `keys list` is true at each moment of a rotation: right after `rotate
/// --now`, the key that sealed a minute earlier is `previous`, not "new"; a key pushed but
/// not active is `pending until T`, then `ready to activate`. The JSON carries the same status.
#[test]
fn list_statuses_stay_true_through_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("dir://{}", d.join("ring").display());
    let aws = Aws::new();
    let ok = |args: &[&str]| {
        let run = dir_keys(&aws.vars, d, &url, args, &[]);
        assert_eq!(run.code, 0, "kseal keys {}: {}", args.join(" "), run.stderr);
        run
    };
    ok(&["push", "--key-size", "2048"]);
    ok(&["rotate", "--now", "--key-size", "2048"]);
    ok(&["rotate", "--no-wait", "--key-size", "2048"]);
    let list = ok(&["list"]);
    ring_snap!("list_statuses_through_a_rotation", list, d);
    let rows: Vec<&str> = list.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{}", list.stdout);
    assert!(rows[0].contains("  pending until "), "{}", list.stdout);
    assert!(rows[1].ends_with("  sealing"), "{}", list.stdout);
    assert!(
        rows[2].ends_with("  previous (opens only)"),
        "{}",
        list.stdout
    );

    let json = ok(&["list", "-o", "json"]);
    let index: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let keys = index["keys"].as_array().unwrap();
    let statuses: Vec<&str> = keys.iter().map(|k| k["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["previous", "sealing", "pending"], "{index}");
    assert_eq!(index["active"], keys[1]["kid"]);
    let until: jiff::Timestamp = keys[2]["pendingUntil"].as_str().unwrap().parse().unwrap();
    let added: jiff::Timestamp = keys[2]["added"].as_str().unwrap().parse().unwrap();
    assert_eq!(until.duration_since(added).as_secs(), 66 * 60);
    assert!(keys[1].get("pendingUntil").is_none());

    // The activation delay has passed (the index's clock moved back two hours): the pushed
    // key is ready to activate; the others keep their status.
    let path = d.join("ring/index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for key in index["keys"].as_array_mut().unwrap() {
        let added: jiff::Timestamp = key["added"].as_str().unwrap().parse().unwrap();
        key["added"] = (added - jiff::SignedDuration::from_hours(2))
            .to_string()
            .into();
    }
    std::fs::write(&path, format!("{:#}\n", index)).unwrap();
    // The index is signed: moved clocks are a forgery until the root key signs them again,
    // as the seeder would.
    resign_dir_index(&d.join("ring"));
    let list = ok(&["list"]);
    let rows: Vec<&str> = list.stdout.lines().skip(1).collect();
    assert!(rows[0].ends_with("  ready to activate"), "{}", list.stdout);
    assert!(rows[1].ends_with("  sealing"), "{}", list.stdout);
    assert!(
        rows[2].ends_with("  previous (opens only)"),
        "{}",
        list.stdout
    );
    let json = ok(&["list", "-o", "json"]);
    let index: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(index["keys"][2]["status"], "ready", "{index}");
}

/// Two `kseal keys rotate --now` racing on one ring: activation is last-writer-wins, so the
/// rotation that activated first must not tell its operator that its key seals. The first
/// rotation pauses between activating and reading the index back (a debug-build test seam)
/// while the second one runs from start to end: the interleaving of a real race, made
/// deterministic.
#[test]
fn the_loser_of_two_racing_rotations_is_told_its_key_does_not_seal() {
    if !cfg!(debug_assertions) {
        kseal_testkit::skipped("SKIPPED: the rotate pause is a test seam of debug builds only");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("dir://{}", d.join("ring").display());
    let aws = Aws::new();
    let vars = &aws.vars;
    let first = dir_keys(vars, d, &url, &["push", "--key-size", "2048"], &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let pause = d.join("pause");
    let reached = d.join("pause.reached");
    let rotate = ["rotate", "--now", "--key-size", "2048"];
    let pause_env = pause.display().to_string();
    let (loser, winner) = std::thread::scope(|s| {
        let loser = s.spawn(|| {
            dir_keys(
                vars,
                d,
                &url,
                &rotate,
                &[("KSEAL_TEST_ROTATE_PAUSE", pause_env.as_str())],
            )
        });
        let start = std::time::Instant::now();
        while !reached.exists() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "the first rotation never paused after activating its key"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let winner = dir_keys(vars, d, &url, &rotate, &[]);
        std::fs::write(&pause, "").unwrap();
        (loser.join().unwrap(), winner)
    });
    let list = dir_keys(vars, d, &url, &["list", "-o", "json"], &[]);
    let index: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let kids: Vec<&str> = index["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(kids.len(), 3, "{index}");
    let (theirs, mine) = (kids[2], kids[1]);
    assert_eq!(index["active"], theirs);

    assert_eq!(winner.code, 0, "{}", winner.stderr);
    assert!(
        winner
            .stderr
            .contains(&format!("key {} seals from now on", &theirs[..12])),
        "{}",
        winner.stderr
    );
    assert_eq!(loser.code, 1, "{}", loser.stderr);
    assert!(
        !loser.stderr.contains("seals from now on"),
        "{}",
        loser.stderr
    );
    assert!(
        loser.stderr.contains(&format!(
            "error: another rotation won: key {} seals, your key {} is in the ring but not active",
            &theirs[..12],
            &mine[..12]
        )),
        "{}",
        loser.stderr
    );
    ring_snap!("rotate_lost_race", loser, d);
}

/// `retire --check` on a directory ring: a linked directory is walked (it may hold the only
/// SealedSecret that needs the key), a link loop ends, finding nothing is refused unless
/// `--allow-none`, and the message says where a directory ring's retired key goes.
#[cfg(unix)]
#[test]
fn retire_check_walks_linked_directories_and_refuses_to_prove_nothing() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("dir://{}", d.join("ring").display());
    let aws = Aws::new();
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        aws.run(d, &all, None)
    };
    let old = generate_dir(d, "old");
    let new = generate_dir(d, "new");
    let (old_kid, _) = kid_and_fingerprint(&std::fs::read_to_string(old.join("tls.crt")).unwrap());
    let (new_kid, _) = kid_and_fingerprint(&std::fs::read_to_string(new.join("tls.crt")).unwrap());
    assert_eq!(keys(&["push", "--from", s(&old)]).code, 0);
    assert_eq!(keys(&["trust"]).code, 0);
    let sealed = aws.run(d, &["seal", "--cert", &url], Some(SECRET));
    assert_eq!(sealed.code, 0, "{}", sealed.stderr);

    // The only SealedSecret sealed with the old key lives in a directory that the repository
    // links in; a link back up the tree makes a loop.
    let repo = d.join("repo");
    std::fs::create_dir_all(repo.join("clusters/prod")).unwrap();
    std::fs::create_dir_all(d.join("shared/db")).unwrap();
    std::fs::write(d.join("shared/db/sealed-secret.yaml"), &sealed.stdout).unwrap();
    symlink(d.join("shared"), repo.join("clusters/prod/shared")).unwrap();
    symlink(&repo, repo.join("clusters/prod/loop")).unwrap();
    std::fs::write(
        repo.join("clusters/prod/deployment.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: db\n",
    )
    .unwrap();
    assert_eq!(keys(&["push", "--from", s(&new)]).code, 0);
    assert_eq!(keys(&["activate", "--now", &new_kid[..12]]).code, 0);

    let run = keys(&["retire", &old_kid[..12], "--check", "repo", "--yes"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("clusters/prod/shared/db/sealed-secret.yaml: prod/db (password)"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("checked 1 SealedSecret in 1 file (of 2 manifest files under --check)"),
        "{}",
        run.stderr
    );
    ring_snap!("err_retire_needed_behind_a_link", run, d);

    // An empty directory proves nothing.
    std::fs::create_dir(d.join("empty")).unwrap();
    let run = keys(&["retire", &old_kid[..12], "--check", "empty", "--yes"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    ring_snap!("err_retire_found_no_sealed_secret", run, d);
    let index = keys(&["list", "-o", "json"]);
    assert!(
        index.stdout.contains(&old_kid),
        "a refused retire changes nothing"
    );

    // Not on a terminal, retiring needs --yes; --dry-run runs every check and changes nothing.
    let unasked = keys(&["retire", &old_kid[..12], "--check", "empty", "--allow-none"]);
    assert_eq!(unasked.code, 1, "{}", unasked.stderr);
    assert!(
        unasked.stderr.contains(&format!(
            "error: not retiring key {} without confirmation: standard input is not a \
             terminal, so pass --yes (or first --dry-run to see what would happen)",
            &old_kid[..12]
        )) || unasked
            .stderr
            .contains("without confirmation: standard input is not a terminal"),
        "{}",
        unasked.stderr
    );
    let dry = keys(&[
        "retire",
        &old_kid[..12],
        "--check",
        "empty",
        "--allow-none",
        "--dry-run",
    ]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stderr.contains("would be retired from key ring")
            && dry.stderr.contains("Nothing was changed"),
        "{}",
        dry.stderr
    );
    let still_needed = keys(&["retire", &old_kid[..12], "--check", "repo", "--dry-run"]);
    assert_eq!(
        still_needed.code, 1,
        "a dry run runs the checks: {}",
        still_needed.stderr
    );
    let index = keys(&["list", "-o", "json"]);
    assert!(index.stdout.contains(&old_kid), "a dry run changes nothing");
    assert!(
        !d.join("ring/retired").exists(),
        "a dry run changes nothing"
    );

    // Unless the operator says so; the key's files stay under retired/.
    let run = keys(&[
        "retire",
        &old_kid[..12],
        "--check",
        "empty",
        "--allow-none",
        "--yes",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("is deleted in"), "{}", run.stderr);
    ring_snap!("retire_from_a_directory_ring_allowing_none", run, d);
    let retired: Vec<_> = std::fs::read_dir(d.join("ring/retired"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(retired.len(), 1);
    assert!(
        retired[0].starts_with(&format!("{old_kid}-")),
        "{retired:?}"
    );
}

/// A directory ring that others may write is refused with the fix, by the ring commands and
/// by `seal --cert dir://`, unless `--insecure-perms`, KSEAL_INSECURE_PERMS or
/// `?insecure-perms=true` says otherwise.
#[cfg(unix)]
#[test]
fn a_directory_ring_others_may_write_is_refused_unless_insecure_perms() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("dir://{}", d.join("ring").display());
    let aws = Aws::new();
    let push = aws.run(
        d,
        &["keys", "push", "--ring", &url, "--key-size", "2048"],
        None,
    );
    assert_eq!(push.code, 0, "{}", push.stderr);
    let trust = aws.run(d, &["keys", "trust", "--ring", &url], None);
    assert_eq!(trust.code, 0, "{}", trust.stderr);
    let index = d.join("ring/index.json");
    std::fs::set_permissions(&index, std::fs::Permissions::from_mode(0o666)).unwrap();

    let run = aws.run(d, &["keys", "list", "--ring", &url], None);
    assert_eq!(run.code, 1);
    ring_snap!("err_dir_ring_world_writable", run, d);
    let run = aws.run(d, &["seal", "--cert", &url], Some(SECRET));
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("has mode 0666"), "{}", run.stderr);

    let ok = |run: Run| assert_eq!(run.code, 0, "{}", run.stderr);
    ok(aws.run(
        d,
        &["keys", "list", "--ring", &url, "--insecure-perms"],
        None,
    ));
    let insecure = aws.clone().with("KSEAL_INSECURE_PERMS", "true");
    ok(insecure.run(d, &["keys", "list", "--ring", &url], None));
    ok(insecure.run(d, &["seal", "--cert", &url], Some(SECRET)));
    let query = format!("{url}?insecure-perms=true");
    ok(aws.run(d, &["seal", "--cert", &query], Some(SECRET)));
}

/// Signs a directory ring's `index.json` again with its root key, after a test changed it.
fn resign_dir_index(ring: &Path) {
    let path = ring.join("index.json");
    let text = std::fs::read_to_string(&path).expect("index.json");
    let mut index = kseal_keystore::Index::parse_any_ring(&text, "index.json").expect("an index");
    let root = index.roots.last().expect("a root").kid.clone();
    let key_dir = ring.join("keys").join(root.as_str());
    let pair = kseal_keys::KeyPair::from_pem(
        &std::fs::read_to_string(key_dir.join("tls.key")).expect("tls.key"),
        &std::fs::read_to_string(key_dir.join("tls.crt")).expect("tls.crt"),
    )
    .expect("the root key");
    kseal_keystore::trust::sign_index(&mut index, &pair).expect("sign");
    std::fs::write(&path, index.to_json()).expect("write index.json");
}

/// An older, unsigned ring: it still lists and its keys still open, but nothing is written on
/// it or sealed to it until the seeder signs it (`kseal keys sign`); then `kseal keys trust`
/// pins it, and a ring replaced by a history rooted at another key is refused.
/// Issue 35, attack 6: a laptop keeps the highest version it read of each pinned ring. The
/// pin in `.kseal.yaml` records the version seen when it was made; an older signed index put
/// back later (at or above that version) is refused as a rollback on a machine that read a
/// newer one, and the message names where that version is kept; on a machine that did not, the
/// history marker (`root.json`, `R/root`) refuses it.
#[test]
fn a_laptop_refuses_an_index_older_than_one_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = d.join("cache");
    let url = format!("dir://{}", d.join("ring").display());
    let aws = Aws::new().with("KSEAL_CACHE_DIR", cache.to_str().unwrap());
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        aws.run(d, &all, None)
    };
    assert_eq!(keys(&["push", "--key-size", "2048"]).code, 0);
    let trust = keys(&["trust"]);
    assert_eq!(trust.code, 0, "{}", trust.stderr);
    let path = d.join("ring/index.json");
    let pinned = std::fs::read_to_string(&path).unwrap();
    assert_eq!(keys(&["push", "--key-size", "2048"]).code, 0);
    let list = keys(&["list"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    std::fs::write(&path, &pinned).unwrap();
    let seal = aws.run(
        d,
        &[
            "seal",
            "--cert",
            &url,
            "--raw",
            "--name",
            "x",
            "--namespace",
            "y",
        ],
        Some("v"),
    );
    assert_eq!(seal.code, 1, "{}", seal.stderr);
    assert!(seal.stderr.contains("rolled-back"), "{}", seal.stderr);
    assert!(
        seal.stderr.contains(cache.to_str().unwrap()),
        "{}",
        seal.stderr
    );
    // Without that memory (another machine, a fresh CI job), the history marker's version
    // refuses it too.
    let elsewhere = Aws::new().run(
        d,
        &[
            "seal",
            "--cert",
            &url,
            "--raw",
            "--name",
            "x",
            "--namespace",
            "y",
        ],
        Some("v"),
    );
    assert_eq!(elsewhere.code, 1, "{}", elsewhere.stderr);
    assert!(
        elsewhere.stderr.contains("an older index was put back")
            && elsewhere.stderr.contains("root.json"),
        "{}",
        elsewhere.stderr
    );
}

/// Issue 35 (attack review): `kseal keys sign` honours the pin. Once the ring is pinned, an
/// index stripped of its signature (written by whoever can write only the index) is refused,
/// never signed into a new history under the same anchor.
#[test]
fn a_pinned_keys_sign_refuses_a_stripped_index() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("dir://{}", d.join("ring").display());
    let aws = Aws::new();
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        aws.run(d, &all, None)
    };
    assert_eq!(keys(&["push", "--key-size", "2048"]).code, 0);
    assert_eq!(keys(&["push", "--key-size", "2048"]).code, 0);
    let trust = keys(&["trust"]);
    assert_eq!(trust.code, 0, "{}", trust.stderr);
    let path = d.join("ring/index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let object = index.as_object_mut().unwrap();
    for field in ["version", "roots", "signature", "retired", "expires"] {
        object.remove(field);
    }
    object.insert("schema".into(), 1.into());
    let stripped = format!("{index:#}\n");
    std::fs::write(&path, &stripped).unwrap();
    for args in [&["sign", "--yes"][..], &["push", "--key-size", "2048"][..]] {
        let out = keys(args);
        assert_eq!(out.code, 1, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("do not sign it"),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), stripped);
}

#[test]
fn an_unsigned_ring_is_signed_once_then_pinned_and_a_replaced_history_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("dir://{}", d.join("ring").display());
    let aws = Aws::new();
    let run = |args: &[&str]| aws.run(d, args, Some(SECRET));
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        aws.run(d, &all, None)
    };
    assert_eq!(keys(&["push", "--key-size", "2048"]).code, 0);
    // Make it look as kseal wrote it before signed histories: schema 1, no signature.
    let path = d.join("ring/index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let object = index.as_object_mut().unwrap();
    for field in ["version", "roots", "signature", "retired", "expires"] {
        object.remove(field);
    }
    object.insert("schema".into(), 1.into());
    std::fs::write(&path, format!("{index:#}\n")).unwrap();
    // An older kseal left no history marker either.
    std::fs::remove_file(d.join("ring/root.json")).unwrap();
    let kid = index["active"].as_str().unwrap().to_owned();

    let list = keys(&["list"]);
    assert_eq!(
        list.code, 0,
        "an unsigned ring still lists: {}",
        list.stderr
    );
    assert!(list.stderr.contains("not signed"), "{}", list.stderr);
    let push = keys(&["push", "--key-size", "2048"]);
    assert_eq!(push.code, 1);
    assert!(push.stderr.contains("kseal keys sign"), "{}", push.stderr);
    let trust = keys(&["trust"]);
    assert_eq!(trust.code, 1);
    assert!(trust.stderr.contains("not signed"), "{}", trust.stderr);
    let seal = run(&["seal", "--cert", &url, "--ring-anchor", &kid]);
    assert_eq!(seal.code, 1);
    assert!(seal.stderr.contains("kseal keys sign"), "{}", seal.stderr);

    let sign = keys(&["sign"]);
    assert_eq!(sign.code, 0, "{}", sign.stderr);
    assert!(
        sign.stderr.contains(&format!("anchor {kid}")),
        "{}",
        sign.stderr
    );
    assert!(keys(&["sign"]).stderr.contains("signed already"));
    let check = keys(&["trust", "--check"]);
    assert_eq!(check.code, 1, "nothing pinned yet: {}", check.stderr);
    assert_eq!(keys(&["trust"]).code, 0);
    let check = keys(&["trust", "--check"]);
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(
        check.stderr.contains("passes through the pin"),
        "{}",
        check.stderr
    );
    assert_eq!(run(&["seal", "--cert", &url]).code, 0);

    // The pin records the version it saw; `trust` again moves it forward; an older index
    // (a valid one the seeder wrote earlier, put back) is then refused as a rollback.
    let before = std::fs::read_to_string(&path).unwrap();
    assert_eq!(keys(&["push", "--key-size", "2048"]).code, 0);
    let again = keys(&["trust"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stderr.contains("recorded version"),
        "{}",
        again.stderr
    );
    std::fs::write(&path, &before).unwrap();
    let seal = run(&["seal", "--cert", &url]);
    assert_eq!(seal.code, 1);
    assert!(seal.stderr.contains("rolled-back"), "{}", seal.stderr);

    // Someone replaces the ring with a valid history of their own.
    let other = d.join("other");
    let other_url = format!("dir://{}", other.display());
    let pushed = aws.run(
        d,
        &["keys", "push", "--ring", &other_url, "--key-size", "2048"],
        None,
    );
    assert_eq!(pushed.code, 0, "{}", pushed.stderr);
    std::fs::copy(other.join("index.json"), &path).unwrap();
    for entry in std::fs::read_dir(other.join("keys")).unwrap() {
        let entry = entry.unwrap();
        std::fs::rename(entry.path(), d.join("ring/keys").join(entry.file_name())).unwrap();
    }
    let seal = run(&["seal", "--cert", &url]);
    assert_eq!(seal.code, 1);
    assert!(
        seal.stderr
            .contains("does not pass through the pinned root"),
        "{}",
        seal.stderr
    );
    let check = keys(&["trust"]);
    assert_eq!(check.code, 1);
    assert!(
        check.stderr.contains("history was replaced"),
        "{}",
        check.stderr
    );
    assert!(
        std::fs::read_to_string(d.join(".kseal.yaml"))
            .unwrap()
            .contains(&kid),
        "the pin is unchanged"
    );
}

/// YAML 1.2 plain scalars, as kseal and `kubectl` read them (`no` is a string).
fn yaml_1_2() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options
}

/// Issue 35: a ring moved to a dedicated root (an offline key file here) that no cluster holds.
/// `kseal keys trust` moves the repository's pin from the ring key to the root; writes need
/// `--root`; a fork signed with every ring key (all a compromised cluster holds) is refused by
/// `kseal seal`, with the pin at the root, and on a machine that saw the root even with the
/// old pin; `kseal keys refresh` signs it again with the lifetime asked for.
#[test]
fn a_dedicated_root_moves_the_pin_and_refuses_forks_signed_with_ring_keys() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = d.join("ring");
    let url = format!("dir://{}", ring.display());
    let aws = Aws::new().with("KSEAL_CACHE_DIR", d.join("cache").to_str().unwrap());
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        aws.run(d, &all, None)
    };
    let ok = |out: Run| {
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    ok(keys(&["push", "--key-size", "2048"]));
    ok(keys(&["trust", "--yes"]));
    let anchor = pinned_anchor(d);
    let root_file = d.join("root.pem");
    let made = ok(aws.run(d, &["keys", "new-root", "--out", s(&root_file)], None));
    assert!(made.stderr.contains("mode 0600"), "{}", made.stderr);
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&root_file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let again = aws.run(d, &["keys", "new-root", "--out", s(&root_file)], None);
    assert_eq!(again.code, 1, "never overwritten: {}", again.stderr);
    let root_arg = format!("file://{}", root_file.display());
    let moved = ok(keys(&["re-root", "--to", &root_arg, "--yes"]));
    assert!(moved.stderr.contains("dedicated root"), "{}", moved.stderr);

    // A write without the root is refused and says what to pass.
    let refused = keys(&["push", "--key-size", "2048"]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("--root"), "{}", refused.stderr);
    ok(keys(&["push", "--key-size", "2048", "--root", &root_arg]));

    // `trust --check` says the pin is at a ring key; `trust` moves it to the root.
    let check = keys(&["trust", "--check"]);
    assert_eq!(check.code, 1, "{}", check.stderr);
    assert!(
        check.stderr.contains("a ring key that clusters held"),
        "{}",
        check.stderr
    );
    let seal = |aws: &Aws| {
        aws.run(
            d,
            &[
                "seal",
                "--cert",
                &url,
                "--raw",
                "--name",
                "x",
                "--namespace",
                "y",
            ],
            Some("v"),
        )
    };
    // Sealing still works under the old pin, with a warning to move it; the machine
    // remembers the root.
    let warned = ok(seal(&aws));
    assert!(warned.stderr.contains("--root-kid"), "{}", warned.stderr);
    // Moving the pin needs the root's kid, confirmed out of band: a pin at a ring key cannot
    // tell a real move from a fork signed with a cluster's keys.
    let unconfirmed = keys(&["trust"]);
    assert_eq!(unconfirmed.code, 1, "{}", unconfirmed.stderr);
    assert!(
        unconfirmed.stderr.contains("--root-kid"),
        "{}",
        unconfirmed.stderr
    );
    let root_kid = kseal_keystore::Kid::of(
        kseal_keys::PrivateKey::from_pem(&std::fs::read_to_string(&root_file).unwrap())
            .unwrap()
            .public_key(),
    );
    let wrong = keys(&["trust", "--root-kid", &anchor]);
    assert_eq!(wrong.code, 1, "{}", wrong.stderr);
    assert!(wrong.stderr.contains("Do not seal"), "{}", wrong.stderr);
    let trusted = ok(keys(&["trust", "--root-kid", root_kid.as_str()]));
    assert!(
        trusted.stderr.contains("moved the pin"),
        "{}",
        trusted.stderr
    );
    let root = pinned_anchor(d);
    assert_eq!(root, root_kid.as_str());
    ok(seal(&aws));

    // The fork: every ring key is in the attacker's hands (a cluster's mirror holds them all),
    // the anchor among them; they hand the root from the anchor to their own key.
    let path = ring.join("index.json");
    let real = std::fs::read_to_string(&path).unwrap();
    let mut index = kseal_keystore::Index::parse_any_ring(&real, "index.json").unwrap();
    let anchor_dir = ring.join("keys").join(&anchor);
    let anchor_pair = kseal_keys::KeyPair::from_pem(
        &std::fs::read_to_string(anchor_dir.join("tls.key")).unwrap(),
        &std::fs::read_to_string(anchor_dir.join("tls.crt")).unwrap(),
    )
    .unwrap();
    let evil = kseal_keys::KeyPair::generate(
        kseal_keys::KeySize::Rsa2048,
        &kseal_keys::CertificateOptions::default(),
    )
    .unwrap();
    index.roots.truncate(1);
    let record =
        kseal_keystore::trust::rotate_root(&index.ring, &index.roots[0], &anchor_pair, &evil)
            .unwrap();
    index.roots.push(record);
    index.keys.push(
        kseal_keystore::IndexEntry::new(evil.certificate(), std::time::SystemTime::now()).unwrap(),
    );
    index.active = Some(kseal_keystore::Kid::of(evil.public_key()));
    index.version += 5;
    kseal_keystore::trust::sign_index(&mut index, &evil).unwrap();
    std::fs::write(&path, index.to_json()).unwrap();
    let forked = seal(&aws);
    assert_eq!(forked.code, 1, "{}", forked.stderr);
    assert!(
        forked
            .stderr
            .contains("does not pass through the pinned root"),
        "{}",
        forked.stderr
    );
    // Pinned at the old anchor on this machine, which saw the root: refused as a fork.
    let old_pin = aws.run(
        d,
        &[
            "seal",
            "--cert",
            &url,
            "--ring-anchor",
            &anchor,
            "--raw",
            "--name",
            "x",
            "--namespace",
            "y",
        ],
        Some("v"),
    );
    assert_eq!(old_pin.code, 1, "{}", old_pin.stderr);
    assert!(old_pin.stderr.contains("fork"), "{}", old_pin.stderr);
    // A fresh CI job (an empty cache) pinned at the old anchor never saw the root: the
    // history marker root.json names it (attack review, round 3: this one sealed to the fork).
    let fresh = Aws::new().with("KSEAL_CACHE_DIR", d.join("ci-cache").to_str().unwrap());
    let fresh_pin = fresh.run(
        d,
        &[
            "seal",
            "--cert",
            &url,
            "--ring-anchor",
            &anchor,
            "--raw",
            "--name",
            "x",
            "--namespace",
            "y",
        ],
        Some("v"),
    );
    assert_eq!(fresh_pin.code, 1, "{}", fresh_pin.stderr);
    assert!(
        fresh_pin
            .stderr
            .contains("does not pass through the dedicated root"),
        "{}",
        fresh_pin.stderr
    );
    assert!(
        fresh_pin.stderr.contains("root.json"),
        "{}",
        fresh_pin.stderr
    );

    // Refresh: the real index back, signed again by the root with a lifetime of one hour.
    std::fs::write(&path, &real).unwrap();
    ok(keys(&["refresh", "--root", &root_arg, "--lifetime", "1h"]));
    let refreshed = kseal_keystore::Index::parse_any_ring(
        &std::fs::read_to_string(&path).unwrap(),
        "index.json",
    )
    .unwrap();
    assert_eq!(
        refreshed
            .expires
            .unwrap()
            .duration_since(refreshed.updated)
            .as_secs(),
        3600
    );
    // The index from before the refresh put back: a fresh CI job's pin (the version
    // .kseal.yaml records) does not refuse it, the history marker's version does.
    let newest = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, &real).unwrap();
    let fresh = Aws::new().with("KSEAL_CACHE_DIR", d.join("ci-cache-2").to_str().unwrap());
    let replayed = seal(&fresh);
    assert_eq!(replayed.code, 1, "{}", replayed.stderr);
    assert!(
        replayed.stderr.contains("an older index was put back"),
        "{}",
        replayed.stderr
    );
    std::fs::write(&path, &newest).unwrap();
    ok(seal(&fresh));
}

/// The anchor pinned in `d/.kseal.yaml`.
/// Attack review (issue 35): a fresh CI job pinned at the old ring-key anchor reads a fork
/// whose dedicated root is the attacker's before it ever read the real one (the documented
/// "can still"); its cache then held the fork's version and root and refused the real history
/// for good, and `kseal keys trust --root-kid REAL` was refused as a rollback. A root kid
/// confirmed out of band now replaces the cache entry. And a first pin at a dedicated root off
/// a terminal needs that kid: nobody can be asked there.
#[test]
fn a_confirmed_root_kid_recovers_from_a_fork_read_first_and_a_first_pin_needs_it() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = d.join("ring");
    let url = format!("dir://{}", ring.display());
    let aws = Aws::new().with("KSEAL_CACHE_DIR", d.join("cache").to_str().unwrap());
    let ok = |out: Run| {
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    ok(aws.run(
        d,
        &["keys", "push", "--key-size", "2048", "--ring", &url],
        None,
    ));
    ok(aws.run(d, &["keys", "trust", "--yes", "--ring", &url], None));
    let anchor = pinned_anchor(d);
    let root_file = d.join("root.pem");
    ok(aws.run(d, &["keys", "new-root", "--out", s(&root_file)], None));
    let root_arg = format!("file://{}", root_file.display());
    ok(aws.run(
        d,
        &[
            "keys", "re-root", "--to", &root_arg, "--yes", "--ring", &url,
        ],
        None,
    ));
    let root_kid = kseal_keystore::Kid::of(
        kseal_keys::PrivateKey::from_pem(&std::fs::read_to_string(&root_file).unwrap())
            .unwrap()
            .public_key(),
    );

    // The fork: from the anchor (a ring key every cluster holds) to the attacker's own
    // "dedicated" root A, with their key X active, at a high version.
    let path = ring.join("index.json");
    let real = std::fs::read_to_string(&path).unwrap();
    let mut index = kseal_keystore::Index::parse_any_ring(&real, "index.json").unwrap();
    let anchor_dir = ring.join("keys").join(&anchor);
    let anchor_pair = kseal_keys::KeyPair::from_pem(
        &std::fs::read_to_string(anchor_dir.join("tls.key")).unwrap(),
        &std::fs::read_to_string(anchor_dir.join("tls.crt")).unwrap(),
    )
    .unwrap();
    let generate = || {
        kseal_keys::KeyPair::generate(
            kseal_keys::KeySize::Rsa2048,
            &kseal_keys::CertificateOptions::default(),
        )
        .unwrap()
    };
    let (fake_root, x) = (generate(), generate());
    let fake_kid = kseal_keystore::Kid::of(fake_root.public_key());
    index.roots.truncate(1);
    let message = kseal_keystore::trust::dedicated_root_message(
        &index.ring,
        2,
        &fake_kid,
        Some(&index.roots[0].kid),
        None,
    )
    .unwrap();
    index.roots.push(kseal_keystore::trust::RootRecord {
        seq: 2,
        kid: fake_kid.clone(),
        spki: base64::engine::general_purpose::STANDARD
            .encode(fake_root.public_key().to_spki_der()),
        signatures: vec![
            kseal_keystore::trust::sign_with_pair(&anchor_pair, &message).unwrap(),
            kseal_keystore::trust::sign_with_pair(&fake_root, &message).unwrap(),
        ],
        dedicated: true,
        location: None,
    });
    index.keys.push(
        kseal_keystore::IndexEntry::new(x.certificate(), std::time::SystemTime::now()).unwrap(),
    );
    index.active = Some(kseal_keystore::Kid::of(x.public_key()));
    index.version += 50;
    kseal_keystore::trust::sign_index(&mut index, &fake_root).unwrap();
    std::fs::write(&path, index.to_json()).unwrap();

    // A fresh CI job (its own cache) pinned at the old anchor reads the fork first. The
    // history marker root.json names the real root: refused.
    let ci = Aws::new().with("KSEAL_CACHE_DIR", d.join("ci-cache").to_str().unwrap());
    let seal = |aws: &Aws| {
        aws.run(
            d,
            &[
                "seal",
                "--cert",
                &url,
                "--raw",
                "--name",
                "x",
                "--namespace",
                "y",
            ],
            Some("v"),
        )
    };
    let refused = seal(&ci);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("history marker root.json"),
        "{}",
        refused.stderr
    );
    // A marker that cannot be read (here: not a file) fails closed under a ring-key pin.
    let marker = ring.join("root.json");
    let marker_text = std::fs::read_to_string(&marker).unwrap();
    std::fs::remove_file(&marker).unwrap();
    std::fs::create_dir(&marker).unwrap();
    let unreadable = seal(&ci);
    assert_eq!(unreadable.code, 1, "{}", unreadable.stderr);
    assert!(
        unreadable.stderr.contains("could not be read")
            && unreadable.stderr.contains("nothing is sealed"),
        "{}",
        unreadable.stderr
    );
    std::fs::remove_dir(&marker).unwrap();
    // Where there is no marker (a directory writer removed it; on Secrets Manager only the
    // seeder could), the fork is read first, with a warning that says so: the residual. Its
    // cache now names the fork.
    let forked = seal(&ci);
    assert_eq!(forked.code, 0, "{}", forked.stderr);
    assert!(
        forked.stderr.contains("has no history marker") && forked.stderr.contains("--root-kid"),
        "{}",
        forked.stderr
    );
    std::fs::write(&marker, &marker_text).unwrap();
    std::fs::write(&path, &real).unwrap();
    let locked = seal(&ci);
    assert!(locked.stderr.contains("fork"), "{}", locked.stderr);
    assert_eq!(
        locked.code, 1,
        "the cache holds the fork: {}",
        locked.stderr
    );
    // Without the kid, or with the fork's, nothing moves.
    let unconfirmed = ci.run(d, &["keys", "trust", "--ring", &url], None);
    assert_eq!(unconfirmed.code, 1, "{}", unconfirmed.stderr);
    let wrong = ci.run(
        d,
        &[
            "keys",
            "trust",
            "--ring",
            &url,
            "--root-kid",
            fake_kid.as_str(),
        ],
        None,
    );
    assert_eq!(wrong.code, 1, "{}", wrong.stderr);
    // The real root's kid, confirmed out of band, replaces the cache entry and moves the pin.
    let trusted = ok(ci.run(
        d,
        &[
            "keys",
            "trust",
            "--ring",
            &url,
            "--root-kid",
            root_kid.as_str(),
        ],
        None,
    ));
    assert!(
        trusted.stderr.contains("replaced by the confirmed root"),
        "{}",
        trusted.stderr
    );
    assert_eq!(pinned_anchor(d), root_kid.as_str());
    let sealed = ok(seal(&ci));
    assert!(!sealed.stdout.is_empty());

    // A first pin at a dedicated root, off a terminal: the kid is required.
    let other = tempfile::tempdir().unwrap();
    let o = other.path();
    let first = aws.run(o, &["keys", "trust", "--yes", "--ring", &url], None);
    assert_eq!(first.code, 1, "{}", first.stderr);
    assert!(first.stderr.contains("--root-kid"), "{}", first.stderr);
    assert!(!o.join(".kseal.yaml").exists());
    let first = aws.run(
        o,
        &[
            "keys",
            "trust",
            "--yes",
            "--ring",
            &url,
            "--root-kid",
            &anchor,
        ],
        None,
    );
    assert_eq!(first.code, 1, "{}", first.stderr);
    ok(aws.run(
        o,
        &[
            "keys",
            "trust",
            "--yes",
            "--ring",
            &url,
            "--root-kid",
            root_kid.as_str(),
        ],
        None,
    ));
    assert_eq!(pinned_anchor(o), root_kid.as_str());
}

/// Issue 35: a repository pin that lags the ring by more than ten versions is named by
/// readers (a fresh clone refuses replays only below the pin's version).
#[test]
fn a_pin_lagging_the_ring_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("dir://{}", d.join("ring").display());
    let aws = Aws::new().with("KSEAL_CACHE_DIR", d.join("cache").to_str().unwrap());
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        let out = aws.run(d, &all, None);
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    keys(&["push", "--key-size", "2048"]);
    keys(&["trust", "--yes"]);
    let seal = || {
        aws.run(
            d,
            &[
                "seal",
                "--cert",
                &url,
                "--raw",
                "--name",
                "x",
                "--namespace",
                "y",
            ],
            Some("v"),
        )
    };
    let fresh = seal();
    assert_eq!(fresh.code, 0, "{}", fresh.stderr);
    assert!(
        !fresh.stderr.contains("versions behind"),
        "{}",
        fresh.stderr
    );
    for _ in 0..11 {
        keys(&["refresh"]);
    }
    let lagging = seal();
    assert_eq!(lagging.code, 0, "{}", lagging.stderr);
    assert!(
        lagging.stderr.contains("versions behind"),
        "{}",
        lagging.stderr
    );
    assert!(
        lagging.stderr.contains("kseal keys trust"),
        "{}",
        lagging.stderr
    );
    keys(&["trust", "--yes"]);
    let raised = seal();
    assert!(
        !raised.stderr.contains("versions behind"),
        "{}",
        raised.stderr
    );
}

fn pinned_anchor(d: &Path) -> String {
    let text = std::fs::read_to_string(d.join(".kseal.yaml")).unwrap();
    let value: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let rings = value["rings"].as_array().cloned().unwrap_or_default();
    rings
        .iter()
        .find_map(|r| r["anchor"].as_str().map(str::to_owned))
        .or_else(|| value["anchor"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no anchor in {text}"))
}

/// Issue 35, attack review round 9: before a ring's first re-root its history is rooted at a
/// ring key that clusters hold. A fork signed with it, put in the index at the version the
/// history marker records (or the next), is refused by a fresh CI job pinned at the anchor
/// (an empty cache) and by the seeder's routine `re-root`, which would otherwise sign it under
/// the new dedicated root; both name the fork's active key. The real index put back is taken.
#[test]
fn a_ring_key_fork_at_the_markers_version_is_refused_by_ci_and_re_root() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = d.join("ring");
    let url = format!("dir://{}", ring.display());
    let aws = Aws::new().with("KSEAL_CACHE_DIR", d.join("cache").to_str().unwrap());
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        aws.run(d, &all, None)
    };
    let ok = |out: Run| {
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    ok(keys(&["push", "--key-size", "2048"]));
    ok(keys(&["push", "--key-size", "2048"]));
    ok(keys(&["trust", "--yes"]));
    let anchor = pinned_anchor(d);
    let path = ring.join("index.json");
    let real = std::fs::read_to_string(&path).unwrap();
    let anchor_dir = ring.join("keys").join(&anchor);
    let anchor_pair = kseal_keys::KeyPair::from_pem(
        &std::fs::read_to_string(anchor_dir.join("tls.key")).unwrap(),
        &std::fs::read_to_string(anchor_dir.join("tls.crt")).unwrap(),
    )
    .unwrap();
    let evil = kseal_keys::KeyPair::generate(
        kseal_keys::KeySize::Rsa2048,
        &kseal_keys::CertificateOptions::default(),
    )
    .unwrap();
    let evil_kid = kseal_keystore::Kid::of(evil.public_key());
    let root_file = d.join("root.pem");
    ok(aws.run(d, &["keys", "new-root", "--out", s(&root_file)], None));
    let root_arg = format!("file://{}", root_file.display());
    for offset in [0, 1] {
        let mut fork = kseal_keystore::Index::parse_any_ring(&real, "index.json").unwrap();
        fork.keys.push(
            kseal_keystore::IndexEntry::new(evil.certificate(), std::time::SystemTime::now())
                .unwrap(),
        );
        fork.active = Some(evil_kid.clone());
        fork.version += offset;
        kseal_keystore::trust::sign_index(&mut fork, &anchor_pair).unwrap();
        std::fs::write(&path, fork.to_json()).unwrap();
        // A fresh CI job: the pin from .kseal.yaml, no cache of its own.
        let fresh = Aws::new().with(
            "KSEAL_CACHE_DIR",
            d.join(format!("ci-{offset}")).to_str().unwrap(),
        );
        let sealed = fresh.run(
            d,
            &[
                "seal",
                "--cert",
                &url,
                "--raw",
                "--name",
                "x",
                "--namespace",
                "y",
            ],
            Some("v"),
        );
        assert_eq!(sealed.code, 1, "marker + {offset}: {}", sealed.stderr);
        assert!(
            sealed.stderr.contains("not the one its writers wrote")
                && sealed.stderr.contains(evil_kid.short()),
            "{}",
            sealed.stderr
        );
        let rerooted = keys(&["re-root", "--to", &root_arg, "--yes"]);
        assert_eq!(rerooted.code, 1, "marker + {offset}: {}", rerooted.stderr);
        assert!(
            rerooted.stderr.contains("its writers did not write it"),
            "{}",
            rerooted.stderr
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            fork.to_json(),
            "nothing signed"
        );
    }
    std::fs::write(&path, &real).unwrap();
    let moved = ok(keys(&["re-root", "--to", &root_arg, "--yes"]));
    // It says what the new root signs: the active key (the anchor, pushed first) and the keys.
    assert!(
        moved
            .stderr
            .contains(&format!("active key {}", &anchor[..12])),
        "{}",
        moved.stderr
    );
}

/// Issue 35, attack review round 12 (A4): under a history marker an older kseal wrote (no
/// digest), a laptop whose cache had read the real index sealed to a fork signed with a ring
/// key at that same version. Its cache now keeps the SHA-256 of the index read at the newest
/// version and refuses another index of that version, naming both digests; an index the
/// marker vouches for replaces a fork read before (with a warning). A cache file an older
/// kseal wrote (no digest) still loads. Since round 13, nothing is sealed under such a marker
/// at all (as the controllers withhold sealing): the listing reads it, with a warning.
#[test]
fn a_laptop_that_read_the_real_index_refuses_a_fork_of_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = d.join("ring");
    let url = format!("dir://{}", ring.display());
    let cache = d.join("cache");
    let aws = Aws::new().with("KSEAL_CACHE_DIR", cache.to_str().unwrap());
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        aws.run(d, &all, None)
    };
    let ok = |out: Run| {
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    ok(keys(&["push", "--key-size", "2048"]));
    ok(keys(&["push", "--key-size", "2048"]));
    ok(keys(&["trust", "--yes"]));
    let anchor = pinned_anchor(d);
    let path = ring.join("index.json");
    let real_text = std::fs::read_to_string(&path).unwrap();
    let real = kseal_keystore::Index::parse_any_ring(&real_text, "index.json").unwrap();
    let marker_path = ring.join("root.json");
    let vouching = std::fs::read_to_string(&marker_path).unwrap();
    // The marker as an older kseal wrote it: no digest.
    let mut legacy: serde_json::Value = serde_json::from_str(&vouching).unwrap();
    legacy.as_object_mut().unwrap().remove("digest");
    legacy.as_object_mut().unwrap().remove("next");
    std::fs::write(&marker_path, legacy.to_string()).unwrap();
    let seal = |env: &Aws| {
        env.run(
            d,
            &[
                "seal",
                "--cert",
                &url,
                "--raw",
                "--name",
                "x",
                "--namespace",
                "y",
            ],
            Some("v"),
        )
    };
    // The cache file as an older kseal left it (a version, no digest): loaded, and given the
    // digest of the index read at that version.
    let cached = cache.join("rings").join(&anchor);
    std::fs::create_dir_all(cached.parent().unwrap()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let private = std::fs::Permissions::from_mode(0o700);
        std::fs::set_permissions(cached.parent().unwrap(), private).unwrap();
    }
    std::fs::write(&cached, format!("{}\n", real.version)).unwrap();
    let list = |env: &Aws| env.run(d, &["keys", "list", "--ring", &url], None);
    // Under a marker without a digest nothing is sealed to the ring (as its controllers
    // withhold sealing): the index cannot be told from a fork of its version.
    let withheld = seal(&aws);
    assert_eq!(withheld.code, 1, "{}", withheld.stderr);
    assert!(
        withheld.stderr.contains("records no digest")
            && withheld.stderr.contains("nothing is sealed to it")
            && withheld.stderr.contains(&real.digest())
            && withheld.stdout.is_empty(),
        "{}",
        withheld.stderr
    );
    // Nor is its certificate exported for offline sealing (round 16, N1).
    let exported = keys(&["export-cert"]);
    assert_eq!(exported.code, 1, "{}", exported.stderr);
    assert!(
        exported.stderr.contains("nothing is sealed to it") && exported.stdout.is_empty(),
        "{}",
        exported.stderr
    );
    // Reading still works, with a warning, and records what was read.
    ok(list(&aws));
    assert_eq!(
        std::fs::read_to_string(&cached).unwrap(),
        format!("{}\ndigest {}\n", real.version, real.digest())
    );
    // A fork at the same version, signed with the anchor (a ring key clusters hold).
    let anchor_dir = ring.join("keys").join(&anchor);
    let anchor_pair = kseal_keys::KeyPair::from_pem(
        &std::fs::read_to_string(anchor_dir.join("tls.key")).unwrap(),
        &std::fs::read_to_string(anchor_dir.join("tls.crt")).unwrap(),
    )
    .unwrap();
    let evil = kseal_keys::KeyPair::generate(
        kseal_keys::KeySize::Rsa2048,
        &kseal_keys::CertificateOptions::default(),
    )
    .unwrap();
    let evil_kid = kseal_keystore::Kid::of(evil.public_key());
    let mut fork = real.clone();
    fork.keys.push(
        kseal_keystore::IndexEntry::new(evil.certificate(), std::time::SystemTime::now()).unwrap(),
    );
    fork.active = Some(evil_kid.clone());
    kseal_keystore::trust::sign_index(&mut fork, &anchor_pair).unwrap();
    std::fs::write(&path, fork.to_json()).unwrap();
    let refused = seal(&aws);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    for part in [
        real.digest(),
        fork.digest(),
        evil_kid.short().to_owned(),
        "forked".to_owned(),
        cached.display().to_string(),
    ] {
        assert!(refused.stderr.contains(&part), "{part}: {}", refused.stderr);
    }
    assert!(
        refused.stdout.is_empty(),
        "nothing sealed: {}",
        refused.stdout
    );
    let listed = keys(&["list"]);
    assert_eq!(listed.code, 1, "{}", listed.stderr);
    assert!(listed.stderr.contains(&fork.digest()), "{}", listed.stderr);
    // A second laptop read the fork first (nothing could tell it then: a listing warns, and
    // sealing is refused)…
    let other_cache = d.join("other");
    let other = Aws::new().with("KSEAL_CACHE_DIR", other_cache.to_str().unwrap());
    let first = ok(list(&other));
    assert!(
        first.stderr.contains("records no digest"),
        "{}",
        first.stderr
    );
    // …then the real index is back, with a marker that vouches for it: taken, and the fork's
    // digest replaced, with a warning; the cache file keeps its mode.
    std::fs::write(&path, &real_text).unwrap();
    std::fs::write(&marker_path, &vouching).unwrap();
    let replaced = ok(seal(&other));
    assert!(
        replaced.stderr.contains("had read another index")
            && replaced.stderr.contains(&fork.digest()),
        "{}",
        replaced.stderr
    );
    let other_file = other_cache.join("rings").join(&anchor);
    assert!(
        std::fs::read_to_string(&other_file)
            .unwrap()
            .contains(&format!("digest {}", real.digest()))
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&other_file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let again = ok(seal(&other));
    assert!(
        !again.stderr.contains("had read another index"),
        "{}",
        again.stderr
    );
    // The first laptop seals to the real index again.
    ok(seal(&aws));
}

/// Issue 35, attack review round 12 (U1): a write the history marker records as pending over
/// the index at its version (a writer that failed before its index write, or a write undone
/// by putting the older index back, whatever the store's previous version says) stops the
/// seeder's next write until it is restored or dropped with `--drop-pending <SHA-256>`
/// (`KSEAL_DROP_PENDING`), after checking; pinned readers seal, with one warning. Round 13
/// (U2): the flag takes the whole digest it drops, one left set from an earlier drop drops
/// nothing, and a drop is said on stderr.
#[test]
fn a_pending_write_stops_the_seeder_until_dropped_and_readers_warn() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = d.join("ring");
    let url = format!("dir://{}", ring.display());
    let aws = Aws::new().with("KSEAL_CACHE_DIR", d.join("cache").to_str().unwrap());
    let keys = |env: &Aws, args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        env.run(d, &all, None)
    };
    let ok = |out: Run| {
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    ok(keys(&aws, &["push", "--key-size", "2048"]));
    ok(keys(&aws, &["trust", "--yes"]));
    let marker_path = ring.join("root.json");
    let index_path = ring.join("index.json");
    let mut dropped_before: Option<String> = None;
    for n in [1u8, 2] {
        let index = kseal_keystore::Index::parse_any_ring(
            &std::fs::read_to_string(&index_path).unwrap(),
            "index.json",
        )
        .unwrap();
        // What a write that crashed after recording its digest leaves.
        let lost = format!("{n:x}").repeat(64);
        let mut marker: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&marker_path).unwrap()).unwrap();
        marker["next"] = serde_json::json!([lost]);
        std::fs::write(&marker_path, marker.to_string()).unwrap();
        let sealed = ok(aws.run(
            d,
            &[
                "seal",
                "--cert",
                &url,
                "--raw",
                "--name",
                "x",
                "--namespace",
                "y",
            ],
            Some("v"),
        ));
        assert_eq!(
            sealed.stderr.matches("as pending").count(),
            1,
            "one warning: {}",
            sealed.stderr
        );
        assert!(sealed.stderr.contains(&lost), "{}", sealed.stderr);
        let refused = keys(&aws, &["refresh"]);
        assert_eq!(refused.code, 1, "{}", refused.stderr);
        for part in [
            lost.clone(),
            index.digest(),
            format!("--drop-pending {lost}"),
            format!("version {}", index.version),
        ] {
            assert!(refused.stderr.contains(&part), "{part}: {}", refused.stderr);
        }
        // A prefix of the digest, or the old boolean, is no digest.
        for bad in [&lost[..16], "true"] {
            let refused = keys(&aws, &["refresh", "--drop-pending", bad]);
            assert_eq!(refused.code, 2, "{}", refused.stderr);
            assert!(refused.stderr.contains("64 hex"), "{}", refused.stderr);
        }
        // A variable left set by the earlier drop names another write: it drops nothing.
        if let Some(before) = &dropped_before {
            let env = aws.clone().with("KSEAL_DROP_PENDING", before);
            let refused = keys(&env, &["refresh"]);
            assert_eq!(refused.code, 1, "{}", refused.stderr);
            assert!(refused.stderr.contains(&lost), "{}", refused.stderr);
        }
        let dropped = if n == 1 {
            ok(keys(&aws, &["refresh", "--drop-pending", &lost]))
        } else {
            let env = aws.clone().with("KSEAL_DROP_PENDING", &lost.to_uppercase());
            ok(keys(&env, &["refresh"]))
        };
        assert!(
            dropped.stderr.contains("warning:")
                && dropped.stderr.contains("dropped the write of version")
                && dropped.stderr.contains(&lost),
            "the drop is said: {}",
            dropped.stderr
        );
        dropped_before = Some(lost.clone());
        let marker: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&marker_path).unwrap()).unwrap();
        assert_eq!(marker["version"], serde_json::json!(index.version + 1));
        assert!(marker.get("next").is_none(), "{marker}");
        ok(keys(&aws, &["refresh"]));
    }
}

/// Issue 35, attack review round 13 (U2): a write went through, its marker write failed
/// (the marker records it as pending), and whoever can write the index wrote the older index
/// twice, so that AWSPREVIOUS no longer shows it. It is still among the index's stored
/// versions: every refresh names its VersionId, `--drop-pending <its digest>` is refused, a
/// wrong digest is refused, and a variable left set with another digest drops nothing.
#[test]
fn a_pending_write_the_store_still_holds_is_never_dropped() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let prefix = sm::unique_prefix("cli_pending_stored");
    let cli = Ring::new(&endpoint, &prefix);
    cli.ok(d, &["push", "--key-size", "2048"]);
    cli.ok(d, &["push", "--key-size", "2048"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ring = rt
        .block_on(kseal_keystore::Ring::open(
            &kseal_keystore::Location::SecretsManager {
                prefix: prefix.clone(),
                region: None,
            },
            &kseal_keystore::AwsOptions {
                endpoint_url: Some(endpoint.clone()),
                region: Some("us-east-1".into()),
                ..Default::default()
            },
        ))
        .unwrap();
    let index = || rt.block_on(ring.require_snapshot()).unwrap().index;
    let store = ring.store();
    let overwrite = |text: &str| {
        let current = rt.block_on(ring.index_version()).unwrap();
        rt.block_on(store.compare_and_swap(&ring.index_name(), text, current.as_ref(), &[]))
            .unwrap();
    };
    let older = index();
    let other = older
        .keys
        .iter()
        .map(|e| e.kid.clone())
        .find(|k| Some(k) != older.active.as_ref())
        .unwrap();
    rt.block_on(ring.activate(other.as_str(), std::time::Duration::ZERO))
        .unwrap();
    let written = index();
    let written_id = rt.block_on(ring.index_version()).unwrap().unwrap();
    // The marker as its failed write left it: the older version, the activation pending.
    let (text, version) = rt
        .block_on(store.read(&ring.root_name(), None))
        .unwrap()
        .unwrap();
    let mut marker: serde_json::Value = serde_json::from_str(&text).unwrap();
    marker["version"] = serde_json::json!(older.version);
    marker["digest"] = serde_json::json!(older.digest());
    marker["next"] = serde_json::json!([written.digest()]);
    rt.block_on(store.compare_and_swap(
        &ring.root_name(),
        &marker.to_string(),
        Some(&version),
        &[],
    ))
    .unwrap();
    let marker = rt.block_on(ring.history_marker()).unwrap();
    overwrite(&older.to_json());
    overwrite(&older.to_json());
    let held = rt.block_on(ring.index_version()).unwrap();
    let leftover = "ab".repeat(32);
    for (what, args, env) in [
        ("no flag", vec!["refresh"], None),
        (
            "its digest",
            vec!["refresh", "--drop-pending", &written.digest()],
            None,
        ),
        (
            "a wrong digest",
            vec!["refresh", "--drop-pending", &leftover],
            None,
        ),
        ("a variable left set", vec!["refresh"], Some(&leftover)),
    ] {
        let mut run = Ring::new(&endpoint, &prefix);
        if let Some(value) = env {
            run.aws = run.aws.with("KSEAL_DROP_PENDING", value);
        }
        let refused = run.keys(d, &args);
        assert_eq!(refused.code, 1, "{what}: {}", refused.stderr);
        for part in [
            format!("VersionId {written_id}"),
            format!("version {}", written.version),
            written.digest(),
            "nothing dropped".to_owned(),
            "--move-to-version-id".to_owned(),
        ] {
            assert!(
                refused.stderr.contains(&part),
                "{what}: {part} missing from: {}",
                refused.stderr
            );
        }
        assert!(
            !refused.stderr.contains("dropped the write"),
            "{}",
            refused.stderr
        );
        assert_eq!(
            rt.block_on(ring.index_version()).unwrap(),
            held,
            "{what}: nothing written"
        );
        assert_eq!(
            rt.block_on(ring.history_marker()).unwrap(),
            marker,
            "{what}: the pending write is still recorded"
        );
    }
}

/// Attack review, round 15 (PG): the seeder's cache had read the real index of the marker's
/// version (an older kseal's marker, no digest), and `kseal keys refresh` offered and took
/// the adoption of a fork of that version that `kseal keys list` with the same cache refused
/// (the store's versions no longer held the real one). Now the adoption counts the index this
/// machine read as another index of that version: it is named, and `--adopt-index` with the
/// fork's digest alone adopts nothing; the real index put back is adopted.
#[test]
fn the_seeders_adoption_counts_the_index_its_cache_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = d.join("ring");
    let url = format!("dir://{}", ring.display());
    let cache = d.join("cache");
    let aws = Aws::new().with("KSEAL_CACHE_DIR", cache.to_str().unwrap());
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        aws.run(d, &all, None)
    };
    let ok = |out: Run| {
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    ok(keys(&["push", "--key-size", "2048"]));
    ok(keys(&["push", "--key-size", "2048"]));
    ok(keys(&["trust", "--yes"]));
    let anchor = pinned_anchor(d);
    let path = ring.join("index.json");
    let real_text = std::fs::read_to_string(&path).unwrap();
    let real = kseal_keystore::Index::parse_any_ring(&real_text, "index.json").unwrap();
    let marker_path = ring.join("root.json");
    let mut legacy: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&marker_path).unwrap()).unwrap();
    legacy.as_object_mut().unwrap().remove("digest");
    legacy.as_object_mut().unwrap().remove("next");
    std::fs::write(&marker_path, legacy.to_string()).unwrap();
    // The seeder lists the ring: its cache keeps the real index's digest at its version.
    ok(keys(&["list"]));
    let cached = std::fs::read_to_string(cache.join("rings").join(&anchor)).unwrap();
    assert!(cached.contains(&real.digest()), "{cached}");
    // A fork of that version signed with the anchor, listing only keys the ring stores.
    let anchor_dir = ring.join("keys").join(&anchor);
    let anchor_pair = kseal_keys::KeyPair::from_pem(
        &std::fs::read_to_string(anchor_dir.join("tls.key")).unwrap(),
        &std::fs::read_to_string(anchor_dir.join("tls.crt")).unwrap(),
    )
    .unwrap();
    let mut fork = real.clone();
    fork.keys.retain(|e| e.kid.as_str() == anchor);
    fork.active = Some(kseal_keystore::Kid::of(anchor_pair.public_key()));
    kseal_keystore::trust::sign_index(&mut fork, &anchor_pair).unwrap();
    assert_ne!(fork.digest(), real.digest());
    std::fs::write(&path, fork.to_json()).unwrap();
    for adopt in [None, Some(fork.digest())] {
        let mut args = vec!["refresh"];
        if let Some(a) = &adopt {
            args.extend_from_slice(&["--adopt-index", a]);
        }
        let refused = keys(&args);
        assert_eq!(refused.code, 1, "{adopt:?}: {}", refused.stderr);
        for part in [
            format!("SHA-256 {}, which the store no longer holds", real.digest()),
            fork.digest(),
            "nothing adopted".to_owned(),
        ] {
            assert!(
                refused.stderr.contains(&part),
                "{adopt:?}: {part} missing: {}",
                refused.stderr
            );
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), fork.to_json());
    }
    // The real index put back: adopted by its digest.
    std::fs::write(&path, &real_text).unwrap();
    ok(keys(&["refresh", "--adopt-index", &real.digest()]));
    let now = kseal_keystore::Index::parse_any_ring(
        &std::fs::read_to_string(&path).unwrap(),
        "index.json",
    )
    .unwrap();
    assert_eq!((now.version, now.active), (real.version + 1, real.active));
}

/// Issue 35, attack review round 16, N2: a history marker with no version at all (builds from
/// before versions were recorded) was read as one with nothing to check, so a laptop sealed to
/// a fork signed with a ring key at any version. Now it fails closed like a marker with a
/// version and no digest: nothing is sealed or exported, the refusal says the marker bounds no
/// version, and once the seeder adopts its index (after putting it back) sealing resumes.
#[test]
fn under_a_marker_without_a_version_nothing_is_sealed_before_an_adoption() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = d.join("ring");
    let url = format!("dir://{}", ring.display());
    let aws = Aws::new().with("KSEAL_CACHE_DIR", d.join("cache").to_str().unwrap());
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        aws.run(d, &all, None)
    };
    let seal = || {
        aws.run(
            d,
            &[
                "seal",
                "--cert",
                &url,
                "--raw",
                "--name",
                "x",
                "--namespace",
                "y",
            ],
            Some("v"),
        )
    };
    let ok = |out: Run| {
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    ok(keys(&["push", "--key-size", "2048"]));
    ok(keys(&["push", "--key-size", "2048"]));
    ok(keys(&["trust", "--yes"]));
    let anchor = pinned_anchor(d);
    let path = ring.join("index.json");
    let real_text = std::fs::read_to_string(&path).unwrap();
    let real = kseal_keystore::Index::parse_any_ring(&real_text, "index.json").unwrap();
    // A SealedSecret sealed before, for `kseal check` to read.
    let before = ok(aws.run(d, &["seal", "--cert", &url], Some(SECRET)));
    std::fs::write(d.join("db.yaml"), &before.stdout).unwrap();
    let marker_path = ring.join("root.json");
    let mut old: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&marker_path).unwrap()).unwrap();
    for field in ["version", "digest", "next"] {
        old.as_object_mut().unwrap().remove(field);
    }
    std::fs::write(&marker_path, old.to_string()).unwrap();
    let check = aws.run(d, &["check", "--cert", &url, "db.yaml"], None);
    assert_ne!(check.code, 0, "{}", check.stderr);
    assert!(
        format!("{}{}", check.stdout, check.stderr).contains("not checked against this index"),
        "{}{}",
        check.stdout,
        check.stderr
    );
    for out in [seal(), keys(&["export-cert"])] {
        assert_eq!(out.code, 1, "{}", out.stderr);
        assert!(
            out.stderr.contains("records no digest")
                && out.stderr.contains("nothing is sealed to it")
                && out.stdout.is_empty(),
            "{}",
            out.stderr
        );
    }
    // A fork ahead of the real index, signed with the anchor (a key clusters hold).
    let anchor_dir = ring.join("keys").join(&anchor);
    let anchor_pair = kseal_keys::KeyPair::from_pem(
        &std::fs::read_to_string(anchor_dir.join("tls.key")).unwrap(),
        &std::fs::read_to_string(anchor_dir.join("tls.crt")).unwrap(),
    )
    .unwrap();
    let evil = kseal_keys::KeyPair::generate(
        kseal_keys::KeySize::Rsa2048,
        &kseal_keys::CertificateOptions::default(),
    )
    .unwrap();
    let mut fork = real.clone();
    fork.keys.push(
        kseal_keystore::IndexEntry::new(evil.certificate(), std::time::SystemTime::now()).unwrap(),
    );
    fork.active = Some(kseal_keystore::Kid::of(evil.public_key()));
    fork.version = real.version + 5;
    kseal_keystore::trust::sign_index(&mut fork, &anchor_pair).unwrap();
    std::fs::write(&path, fork.to_json()).unwrap();
    let refused = seal();
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&fork.digest()) && refused.stdout.is_empty(),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("any version"),
        "the warning says the marker bounds no version: {}",
        refused.stderr
    );
    let refused = keys(&["refresh", "--adopt-index", &fork.digest()]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("no key secret"),
        "{}",
        refused.stderr
    );
    // The real index put back and adopted: sealed to again, with a marker that records it.
    // (This machine read the fork five versions ahead: under a marker with no version nothing
    // it cannot vouch for raises its cache's floor, or the real index would be a rollback.)
    std::fs::write(&path, &real_text).unwrap();
    ok(keys(&["refresh", "--adopt-index", &real.digest()]));
    let sealed = ok(seal());
    assert!(!sealed.stdout.is_empty());
    let marker: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&marker_path).unwrap()).unwrap();
    assert_eq!(marker["version"], serde_json::json!(real.version + 1));
}

/// Issue 35, attack review round 17 (UNPIN, TRUST): with no pin, `kseal keys export-cert`
/// wrote the certificate of whatever history the index held (one rooted at a key of an index
/// writer's own, with no ring key at all), and `kseal keys trust` recorded a fork's version
/// as the pin's, after which every fresh CI job refused the real index as a rollback. Both
/// now check the index against the history marker first, taking its own anchor as the pin.
#[test]
fn unpinned_export_and_trust_check_the_index_against_the_history_marker() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ring = d.join("ring");
    let url = format!("dir://{}", ring.display());
    let aws = Aws::new().with("KSEAL_CACHE_DIR", d.join("cache").to_str().unwrap());
    let keys = |args: &[&str]| {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &url]);
        aws.run(d, &all, None)
    };
    let ok = |out: Run| {
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    ok(keys(&["push", "--key-size", "2048"]));
    ok(keys(&["push", "--key-size", "2048"]));
    let path = ring.join("index.json");
    let real_text = std::fs::read_to_string(&path).unwrap();
    let real = kseal_keystore::Index::parse_any_ring(&real_text, "index.json").unwrap();
    let real_cert = ok(keys(&["export-cert"])).stdout;
    let evil = kseal_keys::KeyPair::generate(
        kseal_keys::KeySize::Rsa2048,
        &kseal_keys::CertificateOptions::default(),
    )
    .unwrap();
    let evil_entry =
        kseal_keystore::IndexEntry::new(evil.certificate(), std::time::SystemTime::now()).unwrap();
    // A history of the index writer's own, rooted at their key (no ring key needed).
    let mut own = real.clone();
    own.roots = vec![kseal_keystore::trust::genesis(&real.ring, &evil).unwrap()];
    own.keys = vec![evil_entry.clone()];
    own.active = Some(evil_entry.kid.clone());
    own.version = real.version + 1;
    kseal_keystore::trust::sign_index(&mut own, &evil).unwrap();
    // A fork ahead of the marker, signed with the anchor (a key clusters hold).
    let anchor_kid = real.roots[0].kid.as_str().to_owned();
    let anchor_dir = ring.join("keys").join(&anchor_kid);
    let anchor_pair = kseal_keys::KeyPair::from_pem(
        &std::fs::read_to_string(anchor_dir.join("tls.key")).unwrap(),
        &std::fs::read_to_string(anchor_dir.join("tls.crt")).unwrap(),
    )
    .unwrap();
    let mut fork = real.clone();
    fork.keys.push(evil_entry.clone());
    fork.active = Some(evil_entry.kid.clone());
    fork.version = real.version + 1;
    kseal_keystore::trust::sign_index(&mut fork, &anchor_pair).unwrap();
    for (what, index, expect) in [
        ("own history", &own, "a history rooted elsewhere"),
        ("ring-key fork", &fork, "not the one its writers wrote"),
    ] {
        std::fs::write(&path, index.to_json()).unwrap();
        let exported = keys(&["export-cert"]);
        assert_eq!(exported.code, 1, "{what}: {}", exported.stderr);
        assert!(
            exported.stderr.contains(expect) && exported.stdout.is_empty(),
            "{what}: {}",
            exported.stderr
        );
        let trusted = keys(&["trust", "--yes"]);
        assert_eq!(trusted.code, 1, "{what}: {}", trusted.stderr);
        assert!(
            trusted.stderr.contains(expect),
            "{what}: {}",
            trusted.stderr
        );
        assert!(!d.join(".kseal.yaml").exists(), "{what}: a pin was written");
        // Listing decides nothing: it lists, and says what the check found (round 18, LIST).
        let listed = ok(keys(&["list"]));
        assert!(listed.stderr.contains(expect), "{what}: {}", listed.stderr);
    }
    // With no pin, a marker that cannot be read fails closed (round 18, UNPIN-D: a role
    // denied `R/root` exported and pinned an index writer's own history).
    std::fs::write(&path, own.to_json()).unwrap();
    let marker_path = ring.join("root.json");
    let marker = std::fs::read_to_string(&marker_path).unwrap();
    std::fs::write(&marker_path, "not json").unwrap();
    for args in [&["export-cert"][..], &["trust", "--yes"]] {
        let out = keys(args);
        assert_eq!(out.code, 1, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("could not be read") && out.stdout.is_empty(),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert!(!d.join(".kseal.yaml").exists());
    std::fs::write(&marker_path, marker).unwrap();
    // The real index back: exported and pinned at its own version.
    std::fs::write(&path, &real_text).unwrap();
    assert_eq!(ok(keys(&["export-cert"])).stdout, real_cert);
    ok(keys(&["trust", "--yes"]));
    assert_eq!(pinned_anchor(d), anchor_kid);
}
