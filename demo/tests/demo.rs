//! Runs the `kseal-demo` binary end to end: every step runs, every SealedSecret opens in both
//! clusters, and no secret value is ever printed whole.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs the demo in `dir`, with variables the `kseal` commands would read if the demo let them.
fn demo(dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kseal-demo"))
        .arg("--dir")
        .arg(dir)
        .env_remove("RUST_LOG")
        .env(
            "AWS_SESSION_TOKEN",
            "a-real-session-token-from-an-aws-login",
        )
        .env("KSEAL_NAMESPACE", "elsewhere")
        .env("KSEAL_KEY_SIZE", "4096")
        .output()
        .expect("kseal-demo runs")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_demo_tells_the_whole_story_without_printing_a_secret() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let output = demo(&dir);
    let (stdout, stderr) = text(&output);
    assert!(
        output.status.success(),
        "kseal-demo failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );

    for (n, what) in [
        (1, "Seed the fleet key ring"),
        (2, "Seal bootstrap credentials offline"),
        (3, "Cluster A is born"),
        (4, "Rotate"),
        (5, "Cluster B is born after the rotation"),
    ] {
        assert!(
            stderr.contains(&format!("[{n}/5] {what}")),
            "step {n} missing:\n{stderr}"
        );
    }
    for command in [
        "$ kseal keys push --ring dir://$DEMO/ring --key-size 2048",
        "$ kseal keys trust --ring dir://$DEMO/ring",
        "$ kseal create git-credentials --cert dir://$DEMO/ring",
        "$ kseal create aws-credentials --cert dir://$DEMO/ring",
        "$ kseal keys rotate --ring dir://$DEMO/ring --now",
        "$ kseal seal --cert dir://$DEMO/ring",
        "$ kseal-controller --controller-namespace kseal-system --leader-elect false --key-source dir://$DEMO/ring",
    ] {
        assert!(stderr.contains(command), "`{command}` missing:\n{stderr}");
    }

    // The summary: each SealedSecret, opened in cluster A and in cluster B.
    let summary = stderr.split("summary:").nth(1).expect("a summary table");
    for name in [
        "flux-system/flux-system",
        "crossplane-system/aws-credentials",
        "apps/db",
    ] {
        let row = summary
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no summary row for {name}:\n{summary}"));
        assert_eq!(
            row.matches("✓ opened").count(),
            2,
            "{name} not opened in both clusters: {row}"
        );
    }
    assert!(!stderr.contains('✗'), "{stderr}");
    // The Crossplane INI holds the example keys only: no session token from the environment.
    let credentials = stderr
        .lines()
        .find(|l| l.contains(" credentials ") && l.contains("•••"))
        .expect("the Crossplane credentials row");
    assert!(credentials.ends_with("(116 bytes)"), "{credentials}");
    assert!(stderr.contains("(before rotation)") && stderr.contains("(after rotation)"));

    // Values are masked everywhere: the example secret key, the app password, private keys.
    for secret in [
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_secret_access_key",
        "correct-horse-battery-staple",
        "PRIVATE KEY",
    ] {
        assert!(
            !stdout.contains(secret),
            "stdout shows {secret:?}:\n{stdout}"
        );
        assert!(
            !stderr.contains(secret),
            "stderr shows {secret:?}:\n{stderr}"
        );
    }

    // What a user would commit, and the marker that lets a re-run start afresh.
    for file in [
        "git/flux-system.yaml",
        "git/aws-credentials.yaml",
        "git/db.yaml",
        ".kseal-demo",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    assert!(
        !dir.join("db-secret.yaml").exists(),
        "the plaintext was left behind"
    );
}

#[test]
fn a_directory_the_demo_did_not_make_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let precious = tmp.path().join("notes.txt");
    std::fs::write(&precious, "mine").unwrap();
    let output = demo(tmp.path());
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("was not made by kseal-demo") && stderr.contains("refusing to empty it"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "mine");
}
