//! Runs the `kseal` binary on fixtures and snapshots stdout, stderr and the exit code.

use crate::common::*;

#[test]
fn help_texts() {
    let dir = tempfile::tempdir().unwrap();
    for (name, args) in [
        ("help", &["--help"][..]),
        ("help_seal", &["seal", "--help"][..]),
        ("help_unseal", &["unseal", "--help"][..]),
        ("help_keys_generate", &["keys", "generate", "--help"][..]),
        ("help_quickstart", &["quickstart", "--help"][..]),
    ] {
        let run = kseal(args, None, dir.path());
        assert_eq!(run.code, 0, "{name}");
        snap!(name, run);
    }
}

#[test]
fn seal_then_unseal_through_the_binary() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    let key = f.join("keys/tls.key");
    let secret = f.join("secret.yaml");
    let sealed = kseal(
        &[
            "seal",
            "--cert",
            cert.to_str().unwrap(),
            "-f",
            secret.to_str().unwrap(),
        ],
        None,
        dir.path(),
    );
    assert_eq!(sealed.code, 0, "{}", sealed.stderr);
    assert!(
        sealed
            .stdout
            .starts_with("---\napiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\n")
    );
    assert!(!sealed.stdout.contains("golden-password"));
    assert_eq!(sealed.stderr, "");

    let unsealed = kseal(
        &["unseal", "--key", key.to_str().unwrap(), "-o", "json"],
        Some(&sealed.stdout),
        dir.path(),
    );
    assert_eq!(unsealed.code, 0, "{}", unsealed.stderr);
    let secret: serde_json::Value = serde_json::from_str(&unsealed.stdout).unwrap();
    assert_eq!(secret["kind"], "Secret");
    // base64("golden-password")
    assert_eq!(secret["data"]["password"], "Z29sZGVuLXBhc3N3b3Jk");
}

#[test]
fn seal_error_messages() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    let cert = cert.to_str().unwrap();
    let key = f.join("keys/tls.key");
    let key = key.to_str().unwrap();
    let cases: Vec<(&str, Vec<&str>, Option<&str>)> = vec![
        (
            "err_missing_cert",
            vec!["seal", "--cert", "missing.crt"],
            Some(""),
        ),
        ("err_cert_is_a_key", vec!["seal", "--cert", key], Some("")),
        ("err_empty_input", vec!["seal", "--cert", cert], Some("")),
        (
            "err_not_yaml",
            vec!["seal", "--cert", cert],
            Some("{ this is: [not yaml"),
        ),
        (
            "err_wrong_kind",
            vec!["seal", "--cert", cert],
            Some("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n"),
        ),
        (
            "err_no_data",
            vec!["seal", "--cert", cert],
            Some("kind: Secret\nmetadata:\n  name: x\n"),
        ),
        (
            "err_no_name",
            vec!["seal", "--cert", cert],
            Some("kind: Secret\nstringData:\n  a: b\n"),
        ),
        (
            "err_namespace_mismatch",
            vec!["seal", "--cert", cert, "-n", "prod"],
            Some("kind: Secret\nmetadata:\n  name: x\n  namespace: dev\nstringData:\n  a: b\n"),
        ),
        (
            "err_bad_scope",
            vec!["seal", "--cert", cert, "--scope", "global"],
            Some(""),
        ),
        (
            "err_bad_base64_data",
            vec!["seal", "--cert", cert],
            Some("kind: Secret\nmetadata:\n  name: x\ndata:\n  a: '%%%'\n"),
        ),
        (
            "err_unseal_wrong_key_kind",
            vec!["unseal", "--key", cert],
            Some(""),
        ),
        (
            "err_keys_generate_bad_size",
            vec!["keys", "generate", "--out-dir", "k", "--key-size", "1024"],
            None,
        ),
    ];
    for (name, args, stdin) in cases {
        let run = kseal(&args, stdin, dir.path());
        assert_ne!(run.code, 0, "{name} must fail");
        assert_eq!(run.stdout, "", "{name}: errors never write to stdout");
        assert!(!run.stderr.contains("panicked"), "{name}: {}", run.stderr);
        snap!(name, run);
    }
}

#[test]
fn unseal_with_the_wrong_key_names_the_items_only() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let gen_run = kseal(
        &[
            "keys",
            "generate",
            "--out-dir",
            "other",
            "--key-size",
            "2048",
        ],
        None,
        dir.path(),
    );
    assert_eq!(gen_run.code, 0, "{}", gen_run.stderr);
    let golden = f.join("sealed-secret.strict.golden.yaml");
    let run = kseal(
        &[
            "unseal",
            "--key",
            "other/tls.key",
            "-f",
            golden.to_str().unwrap(),
        ],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 1);
    assert!(!run.stderr.contains("golden-password"));
    snap!("err_unseal_wrong_key", run);
}

#[test]
fn expired_certificates_are_refused() {
    // A certificate valid for one day starting in 2001 (made by kseal itself, test-only).
    let dir = tempfile::tempdir().unwrap();
    let key = kseal_keys::PrivateKey::generate(kseal_keys::KeySize::Rsa2048).unwrap();
    let cert = key
        .self_signed_certificate(&kseal_keys::CertificateOptions {
            common_name: "expired".into(),
            not_before: std::time::SystemTime::UNIX_EPOCH
                + std::time::Duration::from_secs(978_307_200),
            validity: std::time::Duration::from_secs(86_400),
        })
        .unwrap();
    std::fs::write(dir.path().join("old.crt"), cert.to_pem()).unwrap();
    let run = kseal(
        &["seal", "--cert", "old.crt"],
        Some("kind: Secret\nmetadata:\n  name: x\nstringData:\n  a: b\n"),
        dir.path(),
    );
    assert_eq!(run.code, 1);
    snap!("err_expired_cert", run);
}

#[test]
fn keys_generate_refuses_to_overwrite_and_protects_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let first = kseal(
        &["keys", "generate", "--out-dir", "k", "--key-size", "2048"],
        None,
        dir.path(),
    );
    assert_eq!(first.code, 0, "{}", first.stderr);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join("k/tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let before = std::fs::read(dir.path().join("k/tls.key")).unwrap();
    let second = kseal(
        &["keys", "generate", "--out-dir", "k", "--key-size", "2048"],
        None,
        dir.path(),
    );
    assert_eq!(second.code, 1);
    snap!("err_keys_generate_exists", second);
    assert_eq!(std::fs::read(dir.path().join("k/tls.key")).unwrap(), before);
}

#[test]
fn key_validity_is_key_ttl_as_in_the_controller_and_validity_days_still_works() {
    let dir = tempfile::tempdir().unwrap();
    let not_after = |sub: &str| {
        let run = kseal(
            &["keys", "inspect", &format!("{sub}/tls.crt")],
            None,
            dir.path(),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        let line = run
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with("not after"))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no validity in {}", run.stdout));
        let before = run
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with("not before"))
            .map(str::to_owned)
            .unwrap();
        (before, line)
    };
    let ttl = kseal(
        &[
            "keys",
            "generate",
            "--out-dir",
            "a",
            "--key-size",
            "2048",
            "--key-ttl",
            "48h",
        ],
        None,
        dir.path(),
    );
    assert_eq!(ttl.code, 0, "{}", ttl.stderr);
    assert!(!ttl.stderr.contains("deprecated"), "{}", ttl.stderr);
    let days = kseal(
        &[
            "keys",
            "generate",
            "--out-dir",
            "b",
            "--key-size",
            "2048",
            "--validity-days",
            "2",
        ],
        None,
        dir.path(),
    );
    assert_eq!(days.code, 0, "{}", days.stderr);
    assert!(
        days.stderr
            .contains("warning: --validity-days is deprecated; use --key-ttl"),
        "{}",
        days.stderr
    );
    // Two days after "not before", for both spellings (dates only: the runs are a second apart).
    for sub in ["a", "b"] {
        let (before, after) = not_after(sub);
        let date = |l: &str| l.split_whitespace().nth(2).unwrap().to_owned();
        let parse = |d: &str| {
            let p: Vec<i64> = d.split('-').map(|x| x.parse().unwrap()).collect();
            p[0] * 372 + p[1] * 31 + p[2]
        };
        let (b, a) = (parse(&date(&before)), parse(&date(&after)));
        assert!(a > b, "{sub}: {before} / {after}");
        assert!(a - b <= 4, "{sub}: {before} / {after}");
    }
    let short = kseal(
        &["keys", "generate", "--out-dir", "c", "--key-ttl", "10m"],
        None,
        dir.path(),
    );
    assert_eq!(short.code, 2, "{}", short.stderr);
    assert!(
        short.stderr.contains("not a usable certificate validity"),
        "{}",
        short.stderr
    );
}

#[test]
fn quickstart_runs_the_whole_flow_and_can_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let first = kseal(&["quickstart", "--dir", "qs"], None, dir.path());
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(first.stdout.contains("kind: SealedSecret"));
    assert!(!first.stdout.contains("quickstart-not-a-real-token"));
    snap!(
        "quickstart_first_run_stderr",
        Run {
            stdout: String::new(),
            ..first
        }
    );
    for file in [
        "keys/tls.key",
        "keys/tls.crt",
        "secret.yaml",
        "sealed-secret.yaml",
        "unsealed-secret.yaml",
    ] {
        assert!(dir.path().join("qs").join(file).is_file(), "{file}");
    }
    let second = kseal(&["quickstart", "--dir", "qs"], None, dir.path());
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(second.stderr.contains("reusing the existing key"));
}

#[test]
fn version_names_the_commit_and_both_binaries_agree() {
    let dir = tempfile::tempdir().unwrap();
    let run = kseal(&["--version"], None, dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, format!("kseal {}\n", kseal_cli::VERSION));
    let prefix = format!("kseal {} (commit ", env!("CARGO_PKG_VERSION"));
    let rest = run
        .stdout
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("`{}` does not start with `{prefix}`", run.stdout));
    let commit = rest.split(',').next().unwrap();
    assert!(
        commit == "unknown" || (commit.len() >= 7 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "not a commit id: `{commit}`"
    );
    // A subcommand's --version gives the same version (propagate_version).
    assert_eq!(
        kseal(&["seal", "--version"], None, dir.path()).stdout,
        format!("kseal-seal {}\n", kseal_cli::VERSION)
    );
    // kseal-ring is built from the same commit, says so, and names itself.
    let ring = std::process::Command::new(env!("CARGO_BIN_EXE_kseal-ring"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(ring.status.success());
    assert_eq!(
        String::from_utf8_lossy(&ring.stdout),
        run.stdout.replacen("kseal ", "kseal-ring ", 1)
    );
}

/// `seal -o json` of `input` with `args`; the parsed SealedSecrets and the run.
fn seal_json(
    args: &[&str],
    input: &str,
    dir: &std::path::Path,
    envs: &[(&str, &str)],
) -> (Vec<serde_json::Value>, Run) {
    let cert = fixtures().join("keys/tls.crt");
    let mut all = vec![
        "seal",
        "--cert",
        cert.to_str().expect("utf-8 path"),
        "-o",
        "json",
    ];
    all.extend_from_slice(args);
    let run = kseal_env(&all, Some(input), dir, envs);
    assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    let objects = serde_json::Deserializer::from_str(&run.stdout)
        .into_iter::<serde_json::Value>()
        .map(|o| o.expect("JSON objects"))
        .collect();
    (objects, run)
}

fn annotation<'a>(object: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][key].as_str()
}

fn stderr_only(run: Run) -> Run {
    Run {
        stdout: String::new(),
        ..run
    }
}

const CLUSTER_WIDE: &str = "sealedsecrets.bitnami.com/cluster-wide";
const NAMESPACE_WIDE: &str = "sealedsecrets.bitnami.com/namespace-wide";

#[test]
fn an_explicit_scope_wins_over_the_inputs_annotation_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let annotated = "kind: Secret\nmetadata:\n  name: db\n  namespace: prod\n  annotations:\n    \
                     sealedsecrets.bitnami.com/cluster-wide: \"true\"\nstringData:\n  a: b\n";

    // Without --scope the input's annotation stands, silently.
    let (sealed, run) = seal_json(&[], annotated, dir.path(), &[]);
    assert_eq!(annotation(&sealed[0], CLUSTER_WIDE), Some("true"));
    assert_eq!(run.stderr, "");

    // --scope strict (the default value) still wins over the annotation, with a warning.
    let (sealed, run) = seal_json(&["--scope", "strict"], annotated, dir.path(), &[]);
    assert_eq!(annotation(&sealed[0], CLUSTER_WIDE), None);
    assert_eq!(annotation(&sealed[0], NAMESPACE_WIDE), None);
    let template = &sealed[0]["spec"]["template"];
    assert_eq!(annotation(template, CLUSTER_WIDE), None, "{template}");
    snap!("seal_explicit_scope_replaces_annotation", stderr_only(run));

    let (sealed, run) = seal_json(&["--scope", "namespace-wide"], annotated, dir.path(), &[]);
    assert_eq!(annotation(&sealed[0], NAMESPACE_WIDE), Some("true"));
    assert_eq!(annotation(&sealed[0], CLUSTER_WIDE), None);
    assert!(run.stderr.contains("warning:"), "{}", run.stderr);

    // Asking for the scope the input already has is no news.
    let (sealed, run) = seal_json(&["--scope", "cluster-wide"], annotated, dir.path(), &[]);
    assert_eq!(annotation(&sealed[0], CLUSTER_WIDE), Some("true"));
    assert_eq!(run.stderr, "");

    // The strict result opens as prod/db only.
    let key = fixtures().join("keys/tls.key");
    let (sealed, _) = seal_json(&["--scope", "strict"], annotated, dir.path(), &[]);
    let text = serde_json::to_string(&sealed[0]).unwrap();
    let run = kseal(
        &["unseal", "--key", key.to_str().unwrap()],
        Some(&text),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let moved = text.replace("\"namespace\":\"prod\"", "\"namespace\":\"dev\"");
    let run = kseal(
        &["unseal", "--key", key.to_str().unwrap()],
        Some(&moved),
        dir.path(),
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("tried strict scope \"dev/db\""),
        "{}",
        run.stderr
    );
}

#[test]
fn the_namespace_assumed_is_said_on_stderr_and_cluster_wide_needs_none() {
    let dir = tempfile::tempdir().unwrap();
    let bare = "kind: Secret\nmetadata:\n  name: db\nstringData:\n  a: b\n";

    // No -n, no namespace in the input, no kubeconfig: `default`, as kubeseal, and said so.
    let (sealed, run) = seal_json(&[], bare, dir.path(), &[]);
    assert_eq!(sealed[0]["metadata"]["namespace"], "default");
    snap!("seal_namespace_assumed_default", stderr_only(run));

    // The kubeconfig context's namespace, naming the context and the file.
    std::fs::write(
        dir.path().join("kubeconfig"),
        "apiVersion: v1\nkind: Config\ncurrent-context: dev\ncontexts:\n- name: dev\n  \
         context:\n    cluster: c\n    namespace: team\nclusters:\n- name: c\n  cluster:\n    \
         server: https://127.0.0.1:1\n",
    )
    .unwrap();
    let (sealed, run) = seal_json(&[], bare, dir.path(), &[("KUBECONFIG", "kubeconfig")]);
    assert_eq!(sealed[0]["metadata"]["namespace"], "team");
    snap!("seal_namespace_assumed_from_kubeconfig", stderr_only(run));

    // -n or a namespace in the input: nothing to say.
    let (sealed, run) = seal_json(&["-n", "prod"], bare, dir.path(), &[]);
    assert_eq!(sealed[0]["metadata"]["namespace"], "prod");
    assert_eq!(run.stderr, "");

    // Cluster-wide without a namespace stays without one (as Bitnami: apply it anywhere).
    for input in [
        bare.to_owned(),
        bare.replace(
            "  name: db\n",
            "  name: db\n  annotations:\n    sealedsecrets.bitnami.com/cluster-wide: \"true\"\n",
        ),
    ] {
        let args: &[&str] = if input == bare {
            &["--scope", "cluster-wide"]
        } else {
            &[]
        };
        let (sealed, run) = seal_json(args, &input, dir.path(), &[]);
        assert_eq!(annotation(&sealed[0], CLUSTER_WIDE), Some("true"));
        assert_eq!(
            sealed[0]["metadata"].get("namespace"),
            None,
            "{}",
            sealed[0]
        );
        assert_eq!(
            sealed[0]["spec"]["template"]["metadata"].get("namespace"),
            None,
            "{}",
            sealed[0]
        );
        assert_eq!(run.stderr, "");
    }

    // --raw takes the same default instead of refusing, and says so.
    let cert = fixtures().join("keys/tls.crt");
    let key = fixtures().join("keys/tls.key");
    let raw = kseal(
        &[
            "seal",
            "--cert",
            cert.to_str().unwrap(),
            "--raw",
            "--name",
            "db",
        ],
        Some("s3cr3t"),
        dir.path(),
    );
    assert_eq!(raw.code, 0, "{}", raw.stderr);
    assert_eq!(
        raw.stderr,
        "note: sealing for namespace `default` (no -n; the default, as kubeseal: no kubeconfig \
         context names a namespace)\n"
    );
    let sealed = format!(
        "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: db\n  \
         namespace: default\nspec:\n  encryptedData:\n    a: {}\n",
        raw.stdout
    );
    let run = kseal(
        &["unseal", "--key", key.to_str().unwrap()],
        Some(&sealed),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let raw = kseal_env(
        &[
            "seal",
            "--cert",
            cert.to_str().unwrap(),
            "--raw",
            "--scope",
            "namespace-wide",
        ],
        Some("s3cr3t"),
        dir.path(),
        &[("KUBECONFIG", "kubeconfig")],
    );
    assert_eq!(raw.code, 0, "{}", raw.stderr);
    assert!(raw.stderr.contains("`team`"), "{}", raw.stderr);
}

#[test]
fn a_stream_of_concatenated_json_objects_is_read_as_kubeseal_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let secret = |name: &str| {
        format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{{\"name\":\"{name}\",\
             \"namespace\":\"prod\"}},\"stringData\":{{\"a\":\"b\"}}}}"
        )
    };
    for stream in [
        format!("{}{}", secret("one"), secret("two")),
        format!("{}\n{}\n", secret("one"), secret("two")),
        format!("  {}\n\n  {}", secret("one"), secret("two")),
    ] {
        let (sealed, run) = seal_json(&[], &stream, dir.path(), &[]);
        let names: Vec<&str> = sealed
            .iter()
            .map(|s| s["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["one", "two"], "{stream}");
        assert_eq!(run.stderr, "");
        // kseal's own JSON output (one indented object after another) reads back too.
        let key = fixtures().join("keys/tls.key");
        let run = kseal(
            &["unseal", "--key", key.to_str().unwrap()],
            Some(&run.stdout),
            dir.path(),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.stdout.matches("\"kind\": \"Secret\"").count(), 2);
    }
    let cert = fixtures().join("keys/tls.crt");
    let broken = format!("{}{{\"kind\": \"Secret\", ", secret("one"));
    let run = kseal(
        &["seal", "--cert", cert.to_str().unwrap()],
        Some(&broken),
        dir.path(),
    );
    assert_eq!(run.code, 1);
    snap!("err_json_stream_truncated", run);
}

#[test]
fn non_utf8_input_names_the_document_and_the_item() {
    let dir = tempfile::tempdir().unwrap();
    let cert = fixtures().join("keys/tls.crt");
    let mut bytes =
        b"kind: Secret\nmetadata:\n  name: ok\n  namespace: prod\nstringData:\n  a: b\n---\n"
            .to_vec();
    bytes.extend_from_slice(
        b"kind: Secret\nmetadata:\n  name: db\n  namespace: prod\nstringData:\n  user: admin\n  \
          password: caf\xe9\n",
    );
    std::fs::write(dir.path().join("latin1.yaml"), &bytes).unwrap();
    let run = kseal(
        &[
            "seal",
            "--cert",
            cert.to_str().unwrap(),
            "-f",
            "latin1.yaml",
        ],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 1);
    snap!("err_non_utf8_string_data", run);
}

#[test]
fn sealed_secrets_too_large_for_kubernetes_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let secret = |kib: usize| {
        format!(
            "kind: Secret\nmetadata:\n  name: big\n  namespace: prod\nstringData:\n  blob: {}\n",
            "x".repeat(kib * 1024)
        )
    };
    // 800 KiB of data seals to more than 1 MiB (base64 of the value plus its envelope).
    let (sealed, run) = seal_json(&[], &secret(800), dir.path(), &[]);
    assert!(serde_json::to_vec(&sealed[0]).unwrap().len() > 1024 * 1024);
    snap!("seal_warns_over_one_mib", stderr_only(run));
    // 300 KiB fits Kubernetes, but not kubectl's client-side last-applied annotation.
    let (sealed, run) = seal_json(&[], &secret(300), dir.path(), &[]);
    assert!(serde_json::to_vec(&sealed[0]).unwrap().len() > 256 * 1024);
    snap!("seal_notes_over_256_kib", stderr_only(run));
    // Small ones say nothing.
    let (_, run) = seal_json(&[], &secret(100), dir.path(), &[]);
    assert_eq!(run.stderr, "");

    // Merging items into a file checks the merged result.
    let (_, run) = seal_json(&[], &secret(100), dir.path(), &[]);
    std::fs::write(dir.path().join("big.json"), &run.stdout).unwrap();
    let cert = fixtures().join("keys/tls.crt");
    let more = secret(700).replace("blob:", "more:");
    let run = kseal(
        &[
            "seal",
            "--cert",
            cert.to_str().unwrap(),
            "--merge-into",
            "big.json",
        ],
        Some(&more),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("warning: SealedSecret `prod/big` is 1."),
        "{}",
        run.stderr
    );
}

#[test]
fn every_command_takes_files_with_repeatable_f_or_as_arguments() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    let cert = cert.to_str().unwrap();
    let key = f.join("keys/tls.key");
    let key = key.to_str().unwrap();
    let secret = f.join("secret.yaml");
    let secret = secret.to_str().unwrap();
    let strict = f.join("sealed-secret.strict.golden.yaml");
    let strict = strict.to_str().unwrap();
    let cluster = f.join("sealed-secret.cluster-wide.golden.json");
    let cluster = cluster.to_str().unwrap();
    let other = "kind: Secret\nmetadata:\n  name: other\n  namespace: prod\nstringData:\n  a: b\n";
    std::fs::write(dir.path().join("other.yaml"), other).unwrap();
    let count = |run: &Run, kind: &str| {
        run.stdout.matches(&format!("kind: {kind}\n")).count()
            + run.stdout.matches(&format!("\"kind\": \"{kind}\"")).count()
    };

    // seal: positional, repeated -f, `-f -` for stdin among files.
    for args in [
        vec!["seal", "--cert", cert, secret],
        vec!["seal", "--cert", cert, "-f", secret, "-f", "other.yaml"],
        vec!["seal", "--cert", cert, "-f", secret, "other.yaml"],
        vec!["seal", "--cert", cert, "-f", "-", "-f", secret],
    ] {
        let stdin = args.contains(&"-").then_some(other);
        let run = kseal(&args, stdin, dir.path());
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        let expected = if args.len() == 4 { 1 } else { 2 };
        assert_eq!(count(&run, "SealedSecret"), expected, "{args:?}");
    }

    // unseal: the same forms.
    for (args, expected) in [
        (vec!["unseal", "--key", key, strict], 1),
        (vec!["unseal", "--key", key, "-f", strict, "-f", cluster], 2),
        (vec!["unseal", "--key", key, "-f", strict, cluster], 2),
        (vec!["unseal", "--key", key, "-f", "-"], 1),
    ] {
        let stdin = args
            .contains(&"-")
            .then(|| std::fs::read_to_string(strict).unwrap());
        let run = kseal(&args, stdin.as_deref(), dir.path());
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        assert_eq!(count(&run, "Secret"), expected, "{args:?}");
    }

    // validate and reseal: -f too.
    let run = kseal(
        &["validate", "--key", key, "-f", strict, "-f", cluster],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        2
    );
    let run = kseal(
        &["validate", "--key", key, "-f", strict, cluster],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.lines().count(), 2);
    let run = kseal(&["reseal", "--key", key, "-f", strict], None, dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(count(&run, "SealedSecret"), 1);

    // Standard input is read once.
    let run = kseal(
        &["unseal", "--key", key, "-f", "-", "-"],
        Some(""),
        dir.path(),
    );
    assert_eq!(run.code, 1);
    snap!("err_stdin_twice", run);

    // --raw seals a value, not manifests: a file argument is a mistake, not ignored.
    let run = kseal(
        &["seal", "--cert", cert, "--raw", "--name", "x", secret],
        Some("v"),
        dir.path(),
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("--raw seals one value"),
        "{}",
        run.stderr
    );
}

/// Issue 35 (the template oracle, attack review): `kseal validate --key` renders templates
/// against the plaintext, and its output may land where the template's author reads it (a pull
/// request's CI log): a template that fails while rendering shows only that it failed.
#[test]
fn validate_shows_nothing_a_failing_template_computed_from_the_values() {
    let dir = tempfile::tempdir().unwrap();
    let cert = fixtures().join("keys/tls.crt");
    let key = fixtures().join("keys/tls.key");
    let secret = "kind: Secret\nmetadata:\n  name: one\n  namespace: prod\nstringData:\n  password: Hunter2\n";
    let sealed = kseal(
        &["seal", "--cert", cert.to_str().unwrap(), "-o", "json"],
        Some(secret),
        dir.path(),
    );
    assert_eq!(sealed.code, 0, "{}", sealed.stderr);
    let mut object: serde_json::Value = serde_json::from_str(&sealed.stdout).unwrap();
    object["spec"]["template"]["data"] = serde_json::json!({
        "out": r#"{{ if hasPrefix "H" .password }}{{ fail "starts with H" }}{{ end }}"#,
    });
    std::fs::write(dir.path().join("one.json"), object.to_string()).unwrap();
    let run = kseal(
        &["validate", "--key", key.to_str().unwrap(), "one.json"],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(all.contains("failed while rendering"), "{all}");
    for leak in ["starts with H", "Hunter2", "line 1", "column"] {
        assert!(!all.contains(leak), "{leak:?} in {all}");
    }
}

#[test]
fn counts_in_messages_agree_with_their_number() {
    let dir = tempfile::tempdir().unwrap();
    let cert = fixtures().join("keys/tls.crt");
    let key = fixtures().join("keys/tls.key");
    let key = key.to_str().unwrap();
    let one = "kind: Secret\nmetadata:\n  name: one\n  namespace: prod\nstringData:\n  a: b\n";
    let sealed = kseal(
        &["seal", "--cert", cert.to_str().unwrap()],
        Some(one),
        dir.path(),
    );
    assert_eq!(sealed.code, 0, "{}", sealed.stderr);
    std::fs::write(dir.path().join("one.yaml"), &sealed.stdout).unwrap();
    let run = kseal(&["validate", "--key", key, "one.yaml"], None, dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(": 1 item opens with "),
        "{}",
        run.stdout
    );
    let run = kseal(
        &["reseal", "--key", key, "--in-place", "one.yaml"],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.starts_with("resealed 1 SealedSecret in"),
        "{}",
        run.stderr
    );

    let truncated = "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: one\n  \
                     namespace: prod\nspec:\n  encryptedData:\n    a: AA==\n";
    let run = kseal(&["validate", "--key", key], Some(truncated), dir.path());
    assert_eq!(run.code, 1);
    snap!("err_validate_one_truncated_item", run);
}

#[test]
fn keys_inspect_takes_f_and_standard_input_too() {
    let dir = tempfile::tempdir().unwrap();
    let crt = fixtures().join("keys/tls.crt");
    let crt_path = crt.to_str().unwrap();
    let pem = std::fs::read_to_string(&crt).unwrap();
    let positional = kseal(&["keys", "inspect", crt_path], None, dir.path());
    assert_eq!(positional.code, 0, "{}", positional.stderr);
    let with_f = kseal(&["keys", "inspect", "-f", crt_path], None, dir.path());
    assert_eq!(with_f.stdout, positional.stdout);
    let body = positional.stdout.split_once(":\n").unwrap().1;
    let stdin = kseal(&["keys", "inspect"], Some(&pem), dir.path());
    assert_eq!(stdin.code, 0, "{}", stdin.stderr);
    assert_eq!(stdin.stdout, format!("standard input:\n{body}"));
    let both = kseal(
        &["keys", "inspect", "-f", "-", crt_path],
        Some(&pem),
        dir.path(),
    );
    assert_eq!(both.code, 0, "{}", both.stderr);
    assert_eq!(
        both.stdout,
        format!("standard input:\n{body}{}", positional.stdout)
    );
}

#[test]
fn seal_refuses_names_the_api_server_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let crt = fixtures().join("keys/tls.crt");
    let crt = crt.to_str().unwrap();
    let secret = |name: &str, namespace: &str, key: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {namespace}\n\
             stringData:\n  {key:?}: x\n"
        )
    };
    // Valid names seal.
    let ok = kseal(
        &["seal", "--cert", crt],
        Some(&secret("db.prod-1", "prod", "tls.crt")),
        dir.path(),
    );
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    for (input, expected) in [
        (
            secret("Db_1", "prod", "a"),
            "`Db_1` is not a valid Secret name: a lowercase RFC 1123 subdomain",
        ),
        (
            secret("db", "Bad_NS", "a"),
            "`Bad_NS` is not a valid namespace name: a lowercase RFC 1123 label",
        ),
        (
            secret("db", "prod", "a b"),
            "item `a b` is not a valid Secret key: a valid config key",
        ),
    ] {
        let run = kseal(&["seal", "--cert", crt], Some(&input), dir.path());
        assert_eq!(run.code, 1, "{input}");
        assert!(run.stdout.is_empty(), "{}", run.stdout);
        assert!(run.stderr.contains(expected), "{}", run.stderr);
    }
    // --raw: the namespace and name it seals for.
    let raw = kseal(
        &[
            "seal", "--raw", "--cert", crt, "-n", "Bad_NS", "--name", "db",
        ],
        Some("x"),
        dir.path(),
    );
    assert_eq!(raw.code, 1);
    assert!(
        raw.stderr
            .contains("`Bad_NS` is not a valid namespace name"),
        "{}",
        raw.stderr
    );
}

/// kubeseal users typing kubeseal's flags are told kseal's spelling.
#[test]
fn kubeseal_flags_get_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expect) in [
        (&["--fetch-cert"][..], "kseal cert"),
        (&["seal", "--re-encrypt"][..], "kseal reseal"),
        (
            &["--recovery-unseal", "--recovery-private-key", "k"][..],
            "kseal unseal --key",
        ),
    ] {
        let run = kseal(args, None, dir.path());
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("is a kubeseal flag; in kseal: ") && run.stderr.contains(expect),
            "{args:?}: {}",
            run.stderr
        );
    }
}

/// A local file may hold far more than serde-saphyr's default 1,024 documents; a limit that is
/// reached (here the aliases of a "billion laughs" file) reads as a sentence, not `Debug`.
#[test]
fn large_local_files_are_read_and_a_parser_limit_reads_as_a_sentence() {
    let dir = tempfile::tempdir().unwrap();
    let cert = fixtures().join("keys/tls.crt");
    let many: String = (0..1_100)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db-{i}\n  namespace: prod\n\
                 stringData:\n  password: s3cr3t\n---\n"
            )
        })
        .collect();
    std::fs::write(dir.path().join("many.yaml"), many).unwrap();
    let run = kseal(
        &["seal", "--cert", cert.to_str().unwrap(), "many.yaml"],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.matches("kind: SealedSecret").count(), 1_100);

    let bomb = format!("a: &a [1]\nb: [{}]\n", vec!["*a"; 2_000].join(", "));
    std::fs::write(dir.path().join("bomb.yaml"), bomb).unwrap();
    let run = kseal(
        &["seal", "--cert", cert.to_str().unwrap(), "bomb.yaml"],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "as YAML or JSON: too large to read: more than 10 aliases per anchor (2000 aliases, \
             1 anchor)"
        ),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("budget breached"), "{}", run.stderr);
}

/// kubeseal's form (flags without a command, `--secret-file`) and sops's commands and flags
/// get one line naming what kseal does instead, after clap's usage error.
#[test]
fn kubeseal_and_sops_habits_get_a_one_line_hint() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expect) in [
        (
            &["--cert", "fleet.crt"][..],
            "hint: kseal takes a command first; kubeseal's `kubeseal --cert …` is `kseal seal \
             --cert …`",
        ),
        (
            &["seal", "--secret-file", "s.yaml"][..],
            "hint: `--secret-file` is a kubeseal flag; in kseal, name the file: kseal seal",
        ),
        (
            &["encrypt", "s.yaml"][..],
            "hint: `encrypt` is a sops command; in kseal: kseal seal --cert CERT FILE",
        ),
        (
            &["-e", "s.yaml"][..],
            "hint: `-e` is a sops flag; in kseal: kseal seal --cert CERT FILE",
        ),
        (
            &["decrypt", "s.yaml"][..],
            "hint: `decrypt` is a sops command; in kseal: kseal unseal --key KEY_FILE FILE",
        ),
        (
            &["-d", "s.yaml"][..],
            "hint: `-d` is a sops flag; in kseal: kseal unseal --key KEY_FILE FILE",
        ),
        (
            &["seal", "-i", "s.yaml"][..],
            "hint: `-i` is a sops flag; in kseal: kseal seal FILE -w FILE",
        ),
        (
            &["updatekeys", "s.yaml"][..],
            "hint: `updatekeys` is a sops command; in kseal: kseal reseal --stale PATH…",
        ),
    ] {
        let run = kseal(args, Some("x"), dir.path());
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(expect), "{args:?}: {}", run.stderr);
        assert_eq!(
            run.stderr.matches("hint: ").count(),
            1,
            "{args:?}: {}",
            run.stderr
        );
    }
    // No hint where there is nothing to say.
    let run = kseal(&["sael"], None, dir.path());
    assert_eq!(run.code, 2);
    assert!(!run.stderr.contains("hint: `"), "{}", run.stderr);
}

/// One spelling for one thing: the controller's `--aws-region`/`--aws-assume-role` and
/// `keys list -o/--format`; the old spellings still work, with a warning; a ring prefix given
/// to `--cert` is pointed at `secretsmanager://`.
#[test]
fn old_flag_spellings_warn_and_a_ring_prefix_as_cert_gets_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let ring = format!("dir://{}", dir.path().join("ring").display());
    for args in [
        vec!["keys", "list", "--ring", &ring, "--output", "json"],
        vec!["keys", "list", "--ring", &ring, "--region", "eu-west-1"],
        vec![
            "keys",
            "list",
            "--ring",
            &ring,
            "--endpoint-url",
            "http://127.0.0.1:9",
        ],
    ] {
        let run = kseal(&args, None, dir.path());
        assert!(
            run.stderr.contains("is deprecated; use --"),
            "{args:?}: {}",
            run.stderr
        );
    }
    let run = kseal(
        &["keys", "list", "--ring", &ring, "--format", "json"],
        None,
        dir.path(),
    );
    assert!(!run.stderr.contains("deprecated"), "{}", run.stderr);
    let run = kseal(
        &[
            "keys",
            "list",
            "--ring",
            &ring,
            "--endpoint-url",
            "http://127.0.0.1:9",
        ],
        None,
        dir.path(),
    );
    assert!(
        run.stderr.contains(
            "warning: --endpoint-url is deprecated; use --aws-endpoint-url (the same flag as \
             the controller's)"
        ),
        "{}",
        run.stderr
    );
    // The advice when no region is known names the flag that exists.
    let run = kseal(
        &["keys", "list", "--ring", "secretsmanager://kseal/fleet"],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("no AWS region: pass --aws-region,"),
        "{}",
        run.stderr
    );
    let run = kseal(&["seal", "--cert", "kseal/fleet"], Some("x"), dir.path());
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("pass --cert secretsmanager://kseal/fleet"),
        "{}",
        run.stderr
    );
}
