//! Runs the `kseal` binary on fixtures and snapshots stdout, stderr and the exit code.

#[macro_use]
mod common;

use common::*;

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
    // kseal-ring is built from the same commit and says so.
    let ring = std::process::Command::new(env!("CARGO_BIN_EXE_kseal-ring"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(ring.status.success());
    assert_eq!(String::from_utf8_lossy(&ring.stdout), run.stdout);
}
