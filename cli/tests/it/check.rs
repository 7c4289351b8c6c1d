//! `kseal check`, the CI gate, over a GitOps tree built at test time: several clusters, a
//! symlinked shared directory and a symlink loop, multi-document YAML with comments and other
//! kinds, JSON, a git-ignored broken file; SealedSecrets sealed with two keys of a ring (the
//! active one and an older one), and one tampered item. Every report format must flag exactly
//! the stale items (and, with the private keys, the tampered one); SARIF is validated against
//! the published SARIF 2.1.0 schema and JUnit read by junitparser (Python, see
//! `scripts/report-validators.sh`).
// Test helpers outside `#[test]` functions: a failed setup step is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::common::{Run, kseal, kseal_env};
use base64::Engine as _;

/// The tree, the two keys and the tampered object.
struct Tree {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    /// The active key's certificate and private key.
    new_crt: String,
    new_key: String,
    /// The older key (the published RSA-2048 test fixture).
    old_crt: String,
    old_key: String,
}

const SECRET: &str = "apiVersion: v1
kind: Secret
metadata:
  name: NAME
  namespace: NS
stringData:
  password: not-a-real-password
  user: admin
";

fn seal(root: &Path, crt: &str, namespace: &str, name: &str, json: bool) -> String {
    let secret = SECRET.replace("NAME", name).replace("NS", namespace);
    let mut args = vec!["seal", "--cert", crt];
    if json {
        args.extend(["-o", "json"]);
    }
    let run = kseal(&args, Some(&secret), root);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
}

/// Flips the last byte of item `password` (its AES-GCM tag): the envelope stays well formed,
/// so only opening it finds out.
fn tamper(doc: &str) -> String {
    let mut out = String::new();
    for line in doc.lines() {
        if let Some(value) = line.trim_start().strip_prefix("password: ") {
            let mut bytes = base64::engine::general_purpose::STANDARD
                .decode(value)
                .unwrap();
            *bytes.last_mut().unwrap() ^= 1;
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(&format!(
                "{indent}password: {}\n",
                base64::engine::general_purpose::STANDARD.encode(bytes)
            ));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn tree() -> Tree {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let run = kseal(&["keys", "generate", "--out-dir", "new"], None, &root);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let fixtures = crate::common::fixtures().join("keys");
    let new_crt = root.join("new/tls.crt").display().to_string();
    let new_key = root.join("new/tls.key").display().to_string();
    let old_crt = fixtures.join("tls.crt").display().to_string();
    let old_key = fixtures.join("tls.key").display().to_string();

    let repo = root.join("repo");
    for dir in [
        ".git",
        "clusters/prod",
        "clusters/staging",
        "shared",
        "ignored",
    ] {
        std::fs::create_dir_all(repo.join(dir)).unwrap();
    }
    std::fs::write(repo.join(".gitignore"), "# build output\nignored/\n").unwrap();
    // prod: a multi-document file with comments and other kinds; `api` still on the old key.
    let db = seal(&root, &new_crt, "prod", "db", false);
    let api = seal(&root, &old_crt, "prod", "api", false);
    let apps = format!(
        "# prod applications\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  \
         namespace: prod\ndata:\n  kind: SealedSecret\n{db}# the API's credentials\n{api}---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\n  namespace: prod\n"
    );
    std::fs::write(repo.join("clusters/prod/apps.yaml"), apps).unwrap();
    std::fs::write(
        repo.join("clusters/prod/cache.json"),
        seal(&root, &new_crt, "prod", "cache", true),
    )
    .unwrap();
    // staging: a good object and a tampered one.
    let web = seal(&root, &new_crt, "staging", "web", false);
    let broken = tamper(&seal(&root, &new_crt, "staging", "queue", false));
    std::fs::write(
        repo.join("clusters/staging/all.yml"),
        format!("{web}{broken}"),
    )
    .unwrap();
    // A shared directory linked into staging, with a link back up the tree.
    std::fs::write(
        repo.join("shared/registry.yaml"),
        seal(&root, &old_crt, "staging", "registry", false),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::symlink;
        symlink("../../shared", repo.join("clusters/staging/shared")).unwrap();
        symlink("..", repo.join("shared/loop")).unwrap();
    }
    // Ignored by .gitignore: not a valid SealedSecret.
    std::fs::write(
        repo.join("ignored/bad.yaml"),
        "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: [not, a, mapping]\n",
    )
    .unwrap();
    Tree {
        _tmp: tmp,
        root,
        new_crt,
        new_key,
        old_crt,
        old_key,
    }
}

impl Tree {
    fn check(&self, extra: &[&str]) -> Run {
        let mut args = vec!["check", "--cert", &self.new_crt, "--cert", &self.old_crt];
        args.extend_from_slice(extra);
        args.push("repo");
        kseal(&args, None, &self.root)
    }

    fn keys(&self) -> String {
        format!("{},{}", self.new_key, self.old_key)
    }
}

/// `(rule, file, item)` of every finding of a JSON report.
fn findings(run: &Run) -> BTreeSet<(String, String, String)> {
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["rule"].as_str().unwrap().to_owned(),
                f["file"].as_str().unwrap().to_owned(),
                format!(
                    "{}:{}",
                    f["object"].as_str().unwrap_or("-"),
                    f["item"].as_str().unwrap_or("-")
                ),
            )
        })
        .collect()
}

fn set(items: &[(&str, &str, &str)]) -> BTreeSet<(String, String, String)> {
    items
        .iter()
        .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
        .collect()
}

const PROD: &str = "repo/clusters/prod/apps.yaml";
const SHARED: &str = "repo/clusters/staging/shared/registry.yaml";
const STAGING: &str = "repo/clusters/staging/all.yml";

fn stale() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        ("stale-sealing-key", PROD, "prod/api:password"),
        ("stale-sealing-key", PROD, "prod/api:user"),
        ("stale-sealing-key", SHARED, "staging/registry:password"),
        ("stale-sealing-key", SHARED, "staging/registry:user"),
    ]
}

#[test]
fn public_tier_flags_exactly_the_stale_items_and_passes() {
    let tree = tree();
    let run = tree.check(&["--format", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(findings(&run), set(&stale()));
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    // db, api, cache, web, queue, registry: the loop and the second way to `shared` add none.
    assert_eq!(report["sealedSecrets"], 6);
    assert_eq!(report["errors"], 0);
    assert_eq!(report["warnings"], 4);
    assert!(
        run.stderr.contains("checked 6 SealedSecrets"),
        "{}",
        run.stderr
    );
    // Line numbers point at the items.
    let first = &report["findings"][0];
    let text = std::fs::read_to_string(tree.root.join(PROD)).unwrap();
    let line = text
        .lines()
        .nth(usize::try_from(first["line"].as_u64().unwrap()).unwrap() - 1)
        .unwrap();
    assert!(line.trim_start().starts_with("password: "), "{line}");
}

#[test]
fn strict_makes_stale_items_fail() {
    let tree = tree();
    assert_eq!(tree.check(&["--strict"]).code, 1);
}

#[test]
fn private_tier_also_flags_the_tampered_item() {
    let tree = tree();
    let keys = tree.keys();
    let run = tree.check(&["--key", &keys, "--format", "json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let mut expected = stale();
    expected.push(("item-does-not-open", STAGING, "staging/queue:password"));
    assert_eq!(findings(&run), set(&expected));
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let tampered = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "item-does-not-open")
        .unwrap();
    assert!(
        tampered["message"]
            .as_str()
            .unwrap()
            .contains("tried strict scope \"staging/queue\""),
        "{tampered}"
    );
    // No plaintext anywhere.
    assert!(!run.stdout.contains("not-a-real-password"));
    assert!(!run.stderr.contains("not-a-real-password"));
}

#[test]
fn human_report_groups_by_file_without_colour_when_piped() {
    let tree = tree();
    let keys = tree.keys();
    let run = tree.check(&["--key", &keys]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(!run.stdout.contains('\x1b'), "{}", run.stdout);
    let files: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with("checked"))
        .collect();
    assert_eq!(files, vec![PROD, STAGING, SHARED]);
    assert_eq!(run.stdout.matches("[stale-sealing-key]").count(), 4);
    assert_eq!(run.stdout.matches("[item-does-not-open]").count(), 1);
    assert!(
        run.stdout
            .contains("staging/queue: item `password` does not open")
    );
    assert!(
        run.stdout
            .contains("checked 6 SealedSecrets (12 items) in 4 files: 1 error, 4 warnings")
    );
}

#[test]
fn gitignored_files_are_checked_with_no_ignore() {
    let tree = tree();
    let run = tree.check(&["--no-ignore", "--format", "json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let mut expected = stale();
    expected.push(("does-not-parse", "repo/ignored/bad.yaml", "-:-"));
    assert_eq!(findings(&run), set(&expected));
}

#[test]
fn a_hint_the_ring_does_not_hold_and_a_block_no_key_makes_are_errors() {
    let tree = tree();
    // Only the active key: the old key's objects name a key the ring lacks, and their RSA-2048
    // blocks fit no RSA-4096 key.
    let run = kseal(
        &["check", "--cert", &tree.new_crt, "--format", "json", "repo"],
        None,
        &tree.root,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let mut expected = Vec::new();
    for (file, object) in [(PROD, "prod/api"), (SHARED, "staging/registry")] {
        expected.push(("unknown-sealing-key", file, format!("{object}:-")));
        for item in ["password", "user"] {
            expected.push(("rsa-length-mismatch", file, format!("{object}:{item}")));
        }
    }
    let expected: BTreeSet<_> = expected
        .into_iter()
        .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c))
        .collect();
    assert_eq!(findings(&run), expected);
}

#[test]
fn usage_and_io_errors_exit_2() {
    let tree = tree();
    let missing = kseal(
        &["check", "--cert", &tree.new_crt, "no/such/dir"],
        None,
        &tree.root,
    );
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("error: failed to read a path"),
        "{}",
        missing.stderr
    );
    let no_ring = kseal(&["check", "repo"], None, &tree.root);
    assert_eq!(no_ring.code, 2, "{}", no_ring.stderr);
    assert!(
        no_ring.stderr.contains("pass the ring's keys"),
        "{}",
        no_ring.stderr
    );
    // Nothing to check passes, with a warning (a wrong path would pass the gate too).
    std::fs::create_dir(tree.root.join("empty")).unwrap();
    let empty = kseal(
        &["check", "--cert", &tree.new_crt, "empty"],
        None,
        &tree.root,
    );
    assert_eq!(empty.code, 0, "{}", empty.stderr);
    assert!(
        empty
            .stderr
            .contains("warning: found no SealedSecret under `empty`"),
        "{}",
        empty.stderr
    );
    let bad_flag = kseal(&["check", "--format", "xml", "repo"], None, &tree.root);
    assert_eq!(bad_flag.code, 2);
    // The format also comes from its environment variable.
    let env = kseal_env(
        &[
            "check",
            "--cert",
            &tree.new_crt,
            "--cert",
            &tree.old_crt,
            "repo",
        ],
        None,
        &tree.root,
        &[("KSEAL_CHECK_FORMAT", "json")],
    );
    assert_eq!(env.code, 0);
    assert!(env.stdout.starts_with('{'));
}

/// The Python that has the report validators (scripts/report-validators.sh), or `None` after
/// recording a skip (a failure under CI=true).
fn report_python() -> Option<String> {
    match std::env::var("KSEAL_REPORT_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "KSEAL_REPORT_PYTHON is not set, but CI=true: the SARIF and JUnit reports must \
                 be validated (run through scripts/test.sh, which installs the validators)"
            );
            kseal_testkit::skipped(
                "SKIPPED: kseal check SARIF/JUnit validation: KSEAL_REPORT_PYTHON is not set \
                 (eval \"$(bash scripts/report-validators.sh)\")",
            );
            None
        }
    }
}

#[test]
fn sarif_is_valid_sarif_2_1_0_junit_parses_and_pre_commit_reads_the_hook() {
    let tree = tree();
    let keys = tree.keys();
    let sarif = tree.check(&["--key", &keys, "--format", "sarif"]);
    let junit = tree.check(&["--key", &keys, "--format", "junit"]);
    assert_eq!(
        (sarif.code, junit.code),
        (1, 1),
        "{}{}",
        sarif.stderr,
        junit.stderr
    );
    // Without Python, at least the structure the validators read: one result per object and
    // rule (the two stale items of an object are one result, counted in its properties).
    let parsed: serde_json::Value = serde_json::from_str(&sarif.stdout).unwrap();
    assert_eq!(parsed["version"], "2.1.0");
    let results = parsed["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{results:#?}");
    let api = results
        .iter()
        .find(|r| {
            r["message"]["text"]
                .as_str()
                .unwrap()
                .starts_with("prod/api: ")
        })
        .unwrap();
    assert_eq!(api["ruleId"], "stale-sealing-key");
    assert_eq!(api["properties"]["items"], 2);
    assert!(
        api["message"]["text"]
            .as_str()
            .unwrap()
            .ends_with("(2 items: `password`, `user`)"),
        "{api}"
    );
    assert_eq!(
        api["partialFingerprints"]["ksealResult/v1"]
            .as_str()
            .unwrap()
            .len(),
        64
    );
    // Errors come first.
    assert_eq!(results[0]["ruleId"], "item-does-not-open");
    assert!(junit.stdout.starts_with("<?xml"));
    // Only what both JUnit schemas allow: no `file` or `line` attributes, one testsuite root.
    assert!(!junit.stdout.contains(" file=\""), "{}", junit.stdout);
    assert!(!junit.stdout.contains(" line=\""), "{}", junit.stdout);
    assert!(!junit.stdout.contains("<testsuites"), "{}", junit.stdout);

    let Some(python) = report_python() else {
        return;
    };
    let sarif_file = tree.root.join("report.sarif");
    let junit_file = tree.root.join("report.xml");
    std::fs::write(&sarif_file, &sarif.stdout).unwrap();
    std::fs::write(&junit_file, &junit.stdout).unwrap();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/check/validate_reports.py");
    let hooks = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.pre-commit-hooks.yaml");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(&sarif_file)
        .arg(&junit_file)
        .arg(&hooks)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results: BTreeSet<(String, String, String)> = seen["sarif"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rule"].as_str().unwrap().to_owned(),
                r["level"].as_str().unwrap().to_owned(),
                r["file"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: BTreeSet<(String, String, String)> = [
        ("stale-sealing-key", "warning", PROD),
        ("stale-sealing-key", "warning", SHARED),
        ("item-does-not-open", "error", STAGING),
    ]
    .iter()
    .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
    .collect();
    assert_eq!(results, expected);
    assert_eq!(seen["sarif"].as_array().unwrap().len(), 3);

    // JUnit: one case per SealedSecret; the tampered one fails, the stale ones only note it.
    let cases = seen["junit"].as_array().unwrap();
    assert_eq!(cases.len(), 6);
    assert!(
        cases.iter().all(|c| c["suite"] == "kseal check"),
        "{cases:?}"
    );
    let failed: Vec<&str> = cases
        .iter()
        .filter(|c| !c["failure"].is_null())
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(failed, vec!["staging/queue (document 2)"]);
    let noted: BTreeSet<&str> = cases
        .iter()
        .filter(|c| {
            c["system_out"]
                .as_str()
                .unwrap()
                .contains("[stale-sealing-key]")
        })
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        noted,
        BTreeSet::from(["prod/api (document 3)", "staging/registry (document 1)"])
    );

    // The pre-commit hook, as pre-commit loads it: `kseal check` on the staged YAML and JSON
    // files, given as arguments (what the tests above run). The manifest says `system`, which
    // every pre-commit version runs; the pinned 4.7 reports it as `unsupported`.
    assert_eq!(
        seen["hooks"],
        serde_json::json!([{
            "id": "kseal-check",
            "entry": "kseal check",
            "language": "unsupported",
            "types_or": ["yaml", "json"],
            "pass_filenames": true,
        }])
    );
}

#[cfg(unix)]
#[test]
fn a_key_ring_gives_every_key_and_its_active_one() {
    use std::os::unix::fs::PermissionsExt as _;
    let tree = tree();
    let ring_dir = tree.root.join("ring");
    std::fs::create_dir(&ring_dir).unwrap();
    std::fs::set_permissions(&ring_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let ring = format!("dir://{}", ring_dir.display());
    // The older key is the ring's first, so it seals; the newer one is only added.
    let old_dir = crate::common::fixtures().join("keys");
    for from in [
        old_dir.display().to_string(),
        tree.root.join("new").display().to_string(),
    ] {
        let run = kseal(
            &["keys", "push", "--ring", &ring, "--from", &from],
            None,
            &tree.root,
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let list = kseal(
        &["keys", "list", "--ring", &ring, "-o", "json"],
        None,
        &tree.root,
    );
    let listed: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let anchor = listed["active"].as_str().unwrap().to_owned();

    // Not pinned: refused, as for sealing (exit 2).
    let unpinned = kseal(&["check", "--cert", &ring, "repo"], None, &tree.root);
    assert_eq!(unpinned.code, 2, "{}", unpinned.stderr);
    assert!(
        unpinned.stderr.contains("is not pinned"),
        "{}",
        unpinned.stderr
    );

    let run = kseal(
        &[
            "check",
            "--cert",
            &ring,
            "--ring-anchor",
            &anchor,
            "--format",
            "json",
            "repo",
        ],
        None,
        &tree.root,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Now what the newer key sealed is stale.
    let mut expected = Vec::new();
    for (file, object) in [
        (PROD, "prod/db"),
        ("repo/clusters/prod/cache.json", "prod/cache"),
        (STAGING, "staging/web"),
        (STAGING, "staging/queue"),
    ] {
        for item in ["password", "user"] {
            expected.push((
                "stale-sealing-key".to_owned(),
                file.to_owned(),
                format!("{object}:{item}"),
            ));
        }
    }
    assert_eq!(findings(&run), expected.into_iter().collect());
}

/// A Kubernetes API server stand-in whose service proxy reaches a controller that opens every
/// SealedSecret but `staging/queue` (the tampered one); returns its port and the requests.
fn fake_controller() -> (u16, crate::common::Requests) {
    crate::common::fake_http(|_, path, body| {
        if path.ends_with("/services/kseal-controller") {
            (
                200,
                r#"{"spec":{"ports":[{"name":"http","port":8080}]}}"#.to_owned(),
            )
        } else if path.ends_with("/proxy/v1/verify") && body.contains(r#""name":"queue""#) {
            (409, "no key could decrypt secret\n".to_owned())
        } else if path.ends_with("/proxy/v1/verify") {
            (200, "ok: 2 sealed values decrypt\n".to_owned())
        } else {
            (404, r#"{"kind":"Status","message":"not found"}"#.to_owned())
        }
    })
}

#[test]
fn with_controller_the_controller_opens_every_sealed_secret() {
    let tree = tree();
    let (port, requests) = fake_controller();
    std::fs::write(
        tree.root.join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  \
             cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    \
             token: t0ken\ncontexts:\n- name: test\n  context:\n    cluster: c\n    user: u\n"
        ),
    )
    .unwrap();
    let run = kseal_env(
        &[
            "check",
            "--cert",
            &tree.new_crt,
            "--cert",
            &tree.old_crt,
            "--controller",
            "--format",
            "json",
            "repo",
        ],
        None,
        &tree.root,
        &[("KUBECONFIG", "kubeconfig")],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let mut expected = stale();
    expected.push(("item-does-not-open", STAGING, "staging/queue:-"));
    assert_eq!(findings(&run), set(&expected));
    assert!(
        run.stdout
            .contains("controller: no key could decrypt secret"),
        "{}",
        run.stdout
    );
    // One verify request per SealedSecret.
    let verified = requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.contains("/proxy/v1/verify"))
        .count();
    assert_eq!(verified, 6);
}

#[test]
fn scope_template_and_malformed_items_are_errors_with_their_lines() {
    let tree = tree();
    // A real value (sealed for prod/db), reused where only the public checks matter.
    let sealed = seal(&tree.root, &tree.new_crt, "prod", "db", false);
    let value = sealed
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("password: "))
        .unwrap()
        .to_owned();
    let object = |name: &str, metadata: &str, spec: &str| {
        format!(
            "---\napiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: \
             {name}\n{metadata}spec:\n  encryptedData:\n    password: {value}\n{spec}"
        )
    };
    let text = [
        object(
            "both",
            "  namespace: dev\n  annotations:\n    sealedsecrets.bitnami.com/cluster-wide: \"true\"\n    \
             sealedsecrets.bitnami.com/namespace-wide: \"true\"\n",
            "",
        ),
        object("nowhere", "", ""),
        object(
            "yes",
            "  namespace: dev\n  annotations:\n    sealedsecrets.bitnami.com/namespace-wide: \"yes\"\n",
            "",
        ),
        object(
            "moved",
            "  namespace: dev\n",
            "  template:\n    metadata:\n      namespace: other\n",
        ),
        object(
            "template",
            "  namespace: dev\n",
            "  template:\n    data:\n      url: \"{{ .password \"\n",
        ),
        "---\napiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: bad\n  \
         namespace: dev\nspec:\n  encryptedData:\n    # not sealed\n    password: not base64!\n"
            .to_owned(),
    ]
    .concat();
    std::fs::create_dir_all(tree.root.join("odd")).unwrap();
    std::fs::write(tree.root.join("odd/odd.yaml"), &text).unwrap();
    let run = kseal(
        &["check", "--cert", &tree.new_crt, "--format", "json", "odd"],
        None,
        &tree.root,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let file = "odd/odd.yaml";
    let expected = [
        ("scope-inconsistent", "dev/both:-"),
        ("scope-inconsistent", "-/nowhere:-"),
        ("scope-inconsistent", "dev/yes:-"),
        ("scope-inconsistent", "dev/moved:-"),
        ("template-does-not-render", "dev/template:-"),
        ("malformed-item", "dev/bad:password"),
    ]
    .iter()
    .map(|(rule, what)| ((*rule).to_owned(), file.to_owned(), (*what).to_owned()))
    .collect::<BTreeSet<_>>();
    assert_eq!(findings(&run), expected);
    // The malformed item's line is its own, below a comment.
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let bad = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "malformed-item")
        .unwrap();
    let line = usize::try_from(bad["line"].as_u64().unwrap()).unwrap();
    assert_eq!(
        text.lines().nth(line - 1),
        Some("    password: not base64!")
    );
}

#[test]
fn cluster_wide_scope_is_flagged_where_a_creation_rule_forbids_it() {
    let tree = tree();
    let repo = tree.root.join("gitops");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    for dir in ["prod", "dev"] {
        std::fs::create_dir_all(repo.join(dir)).unwrap();
    }
    let rules = repo.join(".kseal.yaml");
    std::fs::write(
        &rules,
        "creation_rules:\n  - path_regex: ^prod/\n    forbid_cluster_wide: true\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&rules, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let secret = SECRET.replace("NAME", "shared").replace("NS", "default");
    let sealed = kseal(
        &["seal", "--cert", &tree.new_crt, "--scope", "cluster-wide"],
        Some(&secret),
        &tree.root,
    );
    assert_eq!(sealed.code, 0, "{}", sealed.stderr);
    std::fs::write(repo.join("prod/shared.yaml"), &sealed.stdout).unwrap();
    std::fs::write(repo.join("dev/shared.yaml"), &sealed.stdout).unwrap();
    let run = kseal(
        &[
            "check",
            "--cert",
            &tree.new_crt,
            "--format",
            "json",
            "gitops",
        ],
        None,
        &tree.root,
    );
    // A warning (exit 0), only where the rule applies; --strict makes it fail.
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        findings(&run),
        set(&[(
            "cluster-wide-forbidden",
            "gitops/prod/shared.yaml",
            "default/shared:-"
        )])
    );
    assert!(run.stdout.contains("creation rule"), "{}", run.stdout);
    let strict = kseal(
        &["check", "--cert", &tree.new_crt, "--strict", "gitops"],
        None,
        &tree.root,
    );
    assert_eq!(strict.code, 1, "{}{}", strict.stdout, strict.stderr);
}

/// `count` SealedSecrets of two items each, sealed once with `crt` and copied under new names
/// (the public tier reads the sealing-key hint and the RSA block sizes, so the copies are as
/// stale as the original), in files of 50 documents under directories whose names need
/// percent-encoding in a URI.
fn many_sealed_secrets(root: &Path, crt: &str, count: usize) -> PathBuf {
    let one = seal(root, crt, "fleet", "app-template", false);
    let repo = root.join("big");
    for (i, chunk) in (0..count).collect::<Vec<_>>().chunks(50).enumerate() {
        let dir = repo.join(format!("team {}/100%#{}", i % 7, i % 3));
        std::fs::create_dir_all(&dir).unwrap();
        let text: String = chunk
            .iter()
            .map(|n| format!("---\n{}", one.replace("app-template", &format!("app-{n}"))))
            .collect();
        std::fs::write(dir.join(format!("secrets {i}.yaml")), text).unwrap();
    }
    repo
}

#[test]
fn sarif_stays_within_code_scanning_limits_on_20000_sealed_secrets_after_a_rotation() {
    let tree = tree();
    // Sealed with the old key; the new one is now active: 40,000 stale items.
    many_sealed_secrets(&tree.root, &tree.old_crt, 20_000);
    let run = kseal(
        &[
            "check",
            "--cert",
            &tree.new_crt,
            "--cert",
            &tree.old_crt,
            "-o",
            "sarif",
            "big",
        ],
        None,
        &tree.root,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "checked 20000 SealedSecrets (40000 items) in 400 files: 0 errors, 40000 warnings"
        ),
        "{}",
        run.stderr
    );
    let parsed: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let results = parsed["runs"][0]["results"].as_array().unwrap();
    // The cap (5,000), far below GitHub's 25,000, plus the one summary.
    assert_eq!(results.len(), 5_001);
    let summary = results.last().unwrap();
    assert_eq!(summary["ruleId"], "results-omitted");
    assert_eq!(summary["level"], "note");
    assert_eq!(summary["properties"]["omittedResults"], 15_000);
    assert_eq!(summary["properties"]["omittedWarnings"], 15_000);
    assert_eq!(summary["properties"]["omittedItems"], 30_000);
    assert!(
        summary["message"]["text"].as_str().unwrap().starts_with(
            "15000 results left out (0 errors, 15000 warnings; 30000 items): a report \
                 keeps at most 5000 results"
        ),
        "{summary}"
    );
    let rules = parsed["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap();
    assert_eq!(
        rules[usize::try_from(summary["ruleIndex"].as_u64().unwrap()).unwrap()]["id"],
        "results-omitted"
    );
    // One result per object, each with both its items, a percent-encoded URI and its own
    // fingerprint.
    let mut fingerprints = BTreeSet::new();
    for r in &results[..5_000] {
        assert_eq!(r["ruleId"], "stale-sealing-key");
        assert_eq!(r["properties"]["items"], 2);
        let uri = r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            .as_str()
            .unwrap();
        assert!(uri.starts_with("big/team%20"), "{uri}");
        assert!(uri.contains("/100%25%23"), "{uri}");
        assert!(!uri.contains(' ') && !uri.contains('#'), "{uri}");
        assert!(fingerprints.insert(r["partialFingerprints"]["ksealResult/v1"].to_string()));
    }
    // Well below GitHub's 10 MB upload (gzip) even uncompressed.
    assert!(run.stdout.len() < 10_000_000, "{}", run.stdout.len());

    let Some(python) = report_python() else {
        return;
    };
    let sarif_file = tree.root.join("big.sarif");
    let junit = kseal(
        &[
            "check",
            "--cert",
            &tree.new_crt,
            "--cert",
            &tree.old_crt,
            "-o",
            "junit",
            "big",
        ],
        None,
        &tree.root,
    );
    assert_eq!(junit.code, 0, "{}", junit.stderr);
    let junit_file = tree.root.join("big.xml");
    std::fs::write(&sarif_file, &run.stdout).unwrap();
    std::fs::write(&junit_file, &junit.stdout).unwrap();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/check/validate_reports.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(&sarif_file)
        .arg(&junit_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["sarif"].as_array().unwrap().len(), 5_001);
    assert_eq!(seen["junit"].as_array().unwrap().len(), 20_000);
}

#[test]
fn helm_templates_are_reported_and_excludes_skip_them() {
    let tree = tree();
    let repo = tree.root.join("repo");
    let chart = repo.join("charts/app");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: app\nversion: 0.1.0\n",
    )
    .unwrap();
    let sealed = seal(&tree.root, &tree.new_crt, "prod", "chart-secret", false);
    // A chart's template that happens to parse, and one that does not (a template outside a
    // chart's templates/ directory).
    std::fs::write(chart.join("templates/sealed.yaml"), &sealed).unwrap();
    std::fs::create_dir_all(repo.join("kustomize")).unwrap();
    std::fs::write(
        repo.join("kustomize/tpl.yaml"),
        sealed.replace(
            "name: chart-secret",
            "name: {{ .Values.name }}\n  {{- if .Values.x }}",
        ),
    )
    .unwrap();
    let run = tree.check(&["-o", "json"]);
    // Reported as warnings, not parse errors: the gate still passes.
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut expected = stale();
    expected.push((
        "helm-template-not-checked",
        "repo/charts/app/templates/sealed.yaml",
        "-:-",
    ));
    expected.push((
        "helm-template-not-checked",
        "repo/kustomize/tpl.yaml",
        "-:-",
    ));
    assert_eq!(findings(&run), set(&expected));
    let human = tree.check(&[]);
    assert!(
        human
            .stdout
            .contains("a template of the Helm chart `repo/charts/app`, not checked"),
        "{}",
        human.stdout
    );

    // --exclude (relative to the current directory), repeatable.
    let excluded = tree.check(&[
        "--output",
        "json",
        "--exclude",
        "repo/charts/*/templates/",
        "--exclude",
        "tpl.yaml",
    ]);
    assert_eq!(excluded.code, 0, "{}", excluded.stderr);
    assert_eq!(findings(&excluded), set(&stale()));
    assert!(
        excluded.stderr.contains("in 4 files (2 files excluded):"),
        "{}",
        excluded.stderr
    );
    // `excludes:` in .kseal.yaml, relative to its directory.
    let config = repo.join(".kseal.yaml");
    std::fs::write(
        &config,
        "excludes:\n  - charts/*/templates/\n  - /kustomize/\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let configured = tree.check(&["-o", "json"]);
    assert_eq!(configured.code, 0, "{}", configured.stderr);
    assert_eq!(findings(&configured), set(&stale()));
    // A file named directly (as pre-commit passes them) is skipped too.
    let named = kseal(
        &[
            "check",
            "--cert",
            &tree.new_crt,
            "repo/charts/app/templates/sealed.yaml",
        ],
        None,
        &tree.root,
    );
    assert_eq!(named.code, 0, "{}", named.stderr);
    assert!(
        named.stderr.contains("warning: found no SealedSecret"),
        "{}",
        named.stderr
    );
    // An empty glob is a usage error naming where it came from.
    std::fs::write(&config, "excludes:\n  - \"\"\n").unwrap();
    let bad = tree.check(&[]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("error: `excludes` of ")
            && bad.stderr.contains(".kseal.yaml: an exclude glob is empty"),
        "{}",
        bad.stderr
    );
}
