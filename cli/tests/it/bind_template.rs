//! `kseal seal --bind-template` (issue 35): the sealed file opens offline with its own
//! template; every edit of the template, whatever it would compute from the values, makes
//! `kseal unseal` and `kseal validate` refuse it with the same words; `kseal set` and
//! `kseal reseal --stale` keep the binding; `--merge-into` refuses a bound file.

// A test binary: helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used)]
use std::path::Path;

use crate::common::*;

const SECRET: &str = "apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: prod
  labels:
    app: db
stringData:
  password: Hunter2
";

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn ok(cwd: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    let run = kseal(args, stdin, cwd);
    assert_eq!(run.code, 0, "kseal {}: {}", args.join(" "), run.stderr);
    run
}

fn generate(cwd: &Path, name: &str) {
    ok(
        cwd,
        &["keys", "generate", "--out-dir", name, "--key-size", "2048"],
        None,
    );
}

/// The sealed document with `spec.template.data.out` set to `source`.
fn with_template_data(sealed: &str, source: &str) -> String {
    let mut doc: serde_json::Value = serde_saphyr::from_str(sealed).unwrap();
    doc["spec"]["template"]["data"] = serde_json::json!({ "out": source });
    serde_json::to_string(&doc).unwrap()
}

fn password_of(unsealed: &str) -> String {
    let secret: serde_json::Value = serde_json::from_str(unsealed).unwrap();
    secret["data"]["password"].as_str().unwrap().to_owned()
}

#[test]
fn template_edits_whose_outcome_differs_by_a_guess_are_all_refused_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    generate(root, "k");
    let (cert, key) = (root.join("k/tls.crt"), root.join("k/tls.key"));
    let sealed = ok(
        root,
        &["seal", "--cert", s(&cert), "--bind-template"],
        Some(SECRET),
    )
    .stdout;
    assert!(
        sealed.contains("kseal.dev/template-binding: v1"),
        "{sealed}"
    );
    // Opens offline with its own template (base64 of Hunter2).
    let unsealed = ok(
        root,
        &["unseal", "--key", s(&key), "-o", "json"],
        Some(&sealed),
    );
    assert_eq!(password_of(&unsealed.stdout), "SHVudGVyMg==");

    let guesses = [
        r#"{{ if eq .password "Hunter2" }}yes{{ else }}{{ fail "no" }}{{ end }}"#,
        r#"{{ if eq .password "wrong" }}yes{{ else }}{{ fail "no" }}{{ end }}"#,
        r#"{{ if hasPrefix "H" .password }}{{ fail "H" }}{{ end }}"#,
        r#"{{ index (list 1 2 3 4 5 6 7 8) (len .password) }}"#,
        "{{ .password }}",
    ];
    let mut unseal_errors = Vec::new();
    let mut validate_errors = Vec::new();
    for guess in guesses {
        let edited = with_template_data(&sealed, guess);
        let run = kseal(&["unseal", "--key", s(&key)], Some(&edited), root);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(run.stdout.is_empty());
        assert!(
            run.stderr.contains(
                "the template does not match the one the values were sealed with (template binding)"
            ),
            "{}",
            run.stderr
        );
        unseal_errors.push(run.stderr);
        let file = root.join("edited.json");
        std::fs::write(&file, &edited).unwrap();
        let run = kseal(&["validate", "--key", s(&key), s(&file)], None, root);
        assert_ne!(run.code, 0, "{}", run.stdout);
        validate_errors.push((run.code, run.stdout, run.stderr));
    }
    assert!(
        unseal_errors.iter().all(|e| e == &unseal_errors[0]),
        "{unseal_errors:#?}"
    );
    assert!(
        validate_errors.iter().all(|e| e == &validate_errors[0]),
        "{validate_errors:#?}"
    );
    for e in &unseal_errors {
        assert!(!e.contains("Hunter2") && !e.contains("line"), "{e}");
    }

    // Removing the marker does not bring rendering back: the label no longer matches.
    let stripped = with_template_data(&sealed, guesses[0])
        .replace(r#""kseal.dev/template-binding":"v1""#, r#""other":"x""#);
    assert!(!stripped.contains("template-binding"));
    let run = kseal(&["unseal", "--key", s(&key)], Some(&stripped), root);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("failed to decrypt items `password`"),
        "{}",
        run.stderr
    );
}

#[test]
fn set_and_reseal_stale_keep_the_binding_and_merge_into_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    generate(root, "old");
    generate(root, "new");
    let file = root.join("db.yaml");
    let sealed = ok(
        root,
        &[
            "seal",
            "--cert",
            s(&root.join("old/tls.crt")),
            "--bind-template",
        ],
        Some(SECRET),
    )
    .stdout;
    std::fs::write(&file, &sealed).unwrap();

    // `set` seals the new item with the file's bound label.
    ok(
        root,
        &[
            "set",
            "--cert",
            s(&root.join("old/tls.crt")),
            s(&file),
            "token",
        ],
        Some("t0k3n"),
    );
    // `reseal --stale` re-seals for the new key, keeping the binding.
    let keys = format!(
        "{},{}",
        s(&root.join("old/tls.key")),
        s(&root.join("new/tls.key"))
    );
    ok(
        root,
        &[
            "reseal",
            "--stale",
            "--key",
            &keys,
            "--cert",
            s(&root.join("new/tls.crt")),
            s(&file),
        ],
        None,
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("kseal.dev/template-binding: v1"), "{text}");
    let new_key = root.join("new/tls.key");
    let run = ok(
        root,
        &["unseal", "--key", s(&new_key), "-o", "json"],
        Some(&text),
    );
    let secret: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(secret["data"]["password"], "SHVudGVyMg==");
    assert_eq!(secret["data"]["token"], "dDBrM24=");
    // Still bound: an edited template refuses.
    let run = kseal(
        &["unseal", "--key", s(&new_key)],
        Some(&with_template_data(&text, "x")),
        root,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("(template binding)"), "{}", run.stderr);

    // --merge-into would rewrite the template: refused, the file untouched.
    let run = kseal(
        &[
            "seal",
            "--cert",
            s(&root.join("new/tls.crt")),
            "--merge-into",
            s(&file),
        ],
        Some(SECRET),
        root,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("is bound to its template (kseal.dev/template-binding)"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);

    // --bind-template seals whole Secrets: not with --raw or --merge-into.
    let run = kseal(
        &[
            "seal",
            "--cert",
            s(&root.join("new/tls.crt")),
            "--raw",
            "--bind-template",
            "-n",
            "prod",
            "--name",
            "db",
        ],
        Some("v"),
        root,
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--bind-template"), "{}", run.stderr);
}

/// A contributor who cannot open anything moves the `token` item's ciphertext into
/// `.dockerconfigjson` of a bound `kubernetes.io/dockerconfigjson` object (template
/// untouched), hoping the API server's validation of that key describes the token: the moved
/// value no longer opens, offline or in `validate`, with the fixed template-binding words.
#[test]
fn a_bound_value_moved_to_another_item_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    generate(root, "k");
    let (cert, key) = (root.join("k/tls.crt"), root.join("k/tls.key"));
    let secret = "apiVersion: v1
kind: Secret
type: kubernetes.io/dockerconfigjson
metadata:
  name: pull
  namespace: prod
stringData:
  token: 1234-t0k3n
  .dockerconfigjson: '{\"auths\":{}}'
";
    let sealed = ok(
        root,
        &["seal", "--cert", s(&cert), "--bind-template"],
        Some(secret),
    )
    .stdout;
    ok(root, &["unseal", "--key", s(&key)], Some(&sealed));

    let mut doc: serde_json::Value = serde_saphyr::from_str(&sealed).unwrap();
    let token = doc["spec"]["encryptedData"]["token"].clone();
    doc["spec"]["encryptedData"][".dockerconfigjson"] = token;
    let moved = serde_json::to_string(&doc).unwrap();
    let run = kseal(&["unseal", "--key", s(&key)], Some(&moved), root);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr.contains(
            "the template does not match the one the values were sealed with (template binding)"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("`.dockerconfigjson`"), "{}", run.stderr);
    assert!(!run.stderr.contains("`token`"), "{}", run.stderr);
    assert!(!run.stderr.contains("1234"), "{}", run.stderr);

    let file = root.join("moved.json");
    std::fs::write(&file, &moved).unwrap();
    let run = kseal(&["validate", "--key", s(&key), s(&file)], None, root);
    assert_ne!(run.code, 0, "{}", run.stdout);
    let out = format!("{}{}", run.stdout, run.stderr);
    assert!(out.contains("(template binding)"), "{out}");
    assert!(!out.contains("1234"), "{out}");

    // `kseal reseal` re-seals each item under its own name: the result opens, and a value
    // moved in it is refused as before.
    let original = root.join("pull.yaml");
    std::fs::write(&original, &sealed).unwrap();
    let resealed = ok(
        root,
        &["reseal", "--key", s(&key), "-f", s(&original)],
        None,
    )
    .stdout;
    assert_ne!(resealed, sealed);
    let run = ok(
        root,
        &["unseal", "--key", s(&key), "-o", "json"],
        Some(&resealed),
    );
    let opened: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(opened["data"]["token"], "MTIzNC10MGszbg==");
    let mut doc: serde_json::Value = serde_saphyr::from_str(&resealed).unwrap();
    let token = doc["spec"]["encryptedData"]["token"].clone();
    doc["spec"]["encryptedData"][".dockerconfigjson"] = token;
    let run = kseal(
        &["unseal", "--key", s(&key)],
        Some(&serde_json::to_string(&doc).unwrap()),
        root,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("(template binding)"), "{}", run.stderr);
}
