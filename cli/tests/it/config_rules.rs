//! `.kseal.yaml` creation rules: the rule of the output path picks the certificate, scope and
//! namespace of `kseal seal`, `set` and `create`; an explicit flag wins; `kseal config`
//! explains; a bad file is refused with its line and column. Discovery never leaves the
//! repository, a file another user could write is refused, and a rule may name only a
//! certificate inside the repository or a pinned ring.

// Helpers outside #[test] functions set up fixtures: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use crate::common::*;

const SECRET: &str = "apiVersion: v1
kind: Secret
metadata:
  name: db
data:
  password: czNjcjN0
";

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A repository with two key pairs: `keys/a` (the fixture key) and `keys/b` (generated).
struct Repo {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Repo {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let a = root.join("keys/a");
        std::fs::create_dir_all(&a).unwrap();
        for file in ["tls.crt", "tls.key"] {
            std::fs::copy(fixtures().join("keys").join(file), a.join(file)).unwrap();
        }
        let run = kseal(
            &[
                "keys",
                "generate",
                "--out-dir",
                "keys/b",
                "--key-size",
                "2048",
            ],
            None,
            &root,
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        for sub in ["clusters/prod", "clusters/dev", "clusters/shared", "tools"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        // A git repository: discovery stops at its root.
        std::fs::create_dir(root.join(".git")).unwrap();
        write_config(&root, config);
        Repo { _dir: dir, root }
    }

    fn run(&self, cwd: &str, args: &[&str], stdin: Option<&str>) -> Run {
        kseal(args, stdin, &self.root.join(cwd))
    }

    /// Which of the two keys opens every item of `file`.
    fn opened_by(&self, file: &str) -> &'static str {
        let opens = |key: &str| {
            let key = self.root.join("keys").join(key).join("tls.key");
            kseal(&["validate", "--key", s(&key), file], None, &self.root).code == 0
        };
        match (opens("a"), opens("b")) {
            (true, false) => "a",
            (false, true) => "b",
            other => panic!("{file}: opened by a, b: {other:?}"),
        }
    }

    fn sealed(&self, file: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(self.root.join(file)).unwrap();
        serde_saphyr::from_str(&text).unwrap()
    }
}

/// Writes `dir/.kseal.yaml`, writable by its owner only (whatever the umask).
fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join(".kseal.yaml");
    std::fs::write(&path, text).unwrap();
    set_mode(&path, 0o644);
    path
}

fn set_mode(path: &Path, mode: u32) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
}

const RULES: &str = "# the repository's sealing rules
creation_rules:
  - path_regex: ^clusters/prod/
    cert: keys/a/tls.crt
    namespace: prod
    forbid_cluster_wide: true
  - path_regex: ^clusters/dev/
    cert: keys/b/tls.crt
    scope: namespace-wide
    namespace: dev
  - path_regex: \\.yaml$
    cert: keys/b/tls.crt
    scope: cluster-wide
";

#[test]
fn rules_choose_the_certificate_scope_and_namespace_per_path() {
    let repo = Repo::new(RULES);
    // Found from a subdirectory; paths are relative to the directory of .kseal.yaml.
    let run = repo.run(
        "clusters",
        &["seal", "-f", "-", "-w", "prod/db.yaml"],
        Some(SECRET),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = repo.run(
        "clusters",
        &["seal", "-f", "-", "-w", "dev/db.yaml"],
        Some(SECRET),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = repo.run(".", &["seal", "-w", "tools/db.yaml"], Some(SECRET));
    assert_eq!(run.code, 0, "{}", run.stderr);

    assert_eq!(repo.opened_by("clusters/prod/db.yaml"), "a");
    assert_eq!(repo.opened_by("clusters/dev/db.yaml"), "b");
    assert_eq!(repo.opened_by("tools/db.yaml"), "b");

    let prod = repo.sealed("clusters/prod/db.yaml");
    assert_eq!(prod["metadata"]["namespace"], "prod");
    assert!(prod["metadata"]["annotations"]["sealedsecrets.bitnami.com/namespace-wide"].is_null());
    let dev = repo.sealed("clusters/dev/db.yaml");
    assert_eq!(dev["metadata"]["namespace"], "dev");
    assert_eq!(
        dev["metadata"]["annotations"]["sealedsecrets.bitnami.com/namespace-wide"],
        "true"
    );
    let tools = repo.sealed("tools/db.yaml");
    assert_eq!(
        tools["metadata"]["annotations"]["sealedsecrets.bitnami.com/cluster-wide"],
        "true"
    );

    // `kseal set` on a file follows its rule too.
    let run = repo.run(
        ".",
        &["set", "clusters/dev/db.yaml", "token"],
        Some("t0k3n"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.opened_by("clusters/dev/db.yaml"), "b");
}

#[test]
fn an_explicit_flag_wins_over_the_rule() {
    let repo = Repo::new(RULES);
    let b = repo.root.join("keys/b/tls.crt");
    let run = repo.run(
        ".",
        &[
            "seal",
            "--cert",
            s(&b),
            "-n",
            "other",
            "-w",
            "clusters/prod/db.yaml",
        ],
        Some(SECRET),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.opened_by("clusters/prod/db.yaml"), "b");
    assert_eq!(
        repo.sealed("clusters/prod/db.yaml")["metadata"]["namespace"],
        "other"
    );
    let run = repo.run(
        ".",
        &["seal", "--scope", "strict", "-w", "clusters/dev/db.yaml"],
        Some(SECRET),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        repo.sealed("clusters/dev/db.yaml")["metadata"]["annotations"]
            ["sealedsecrets.bitnami.com/namespace-wide"]
            .is_null()
    );
    // The environment variable is as explicit as the flag.
    let run = kseal_env(
        &["seal", "-w", "clusters/dev/env.yaml"],
        Some(SECRET),
        &repo.root,
        &[("KSEAL_CERT", s(&repo.root.join("keys/a/tls.crt")))],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.opened_by("clusters/dev/env.yaml"), "a");
}

#[test]
fn forbid_cluster_wide_is_a_policy_no_flag_lifts() {
    let repo = Repo::new(RULES);
    let run = repo.run(
        ".",
        &[
            "seal",
            "--scope",
            "cluster-wide",
            "-w",
            "clusters/prod/db.yaml",
        ],
        Some(SECRET),
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("forbid_cluster_wide")
            && run.stderr.contains("creation rule 1 of")
            && run
                .stderr
                .contains("path_regex `^clusters/prod/` matches `clusters/prod/db.yaml`"),
        "{}",
        run.stderr
    );
    assert!(!repo.root.join("clusters/prod/db.yaml").exists());
    // An input annotated cluster-wide is refused too.
    let annotated = SECRET.replace(
        "  name: db\n",
        "  name: db\n  annotations:\n    sealedsecrets.bitnami.com/cluster-wide: \"true\"\n",
    );
    let run = repo.run(
        ".",
        &["seal", "-w", "clusters/prod/db.yaml"],
        Some(&annotated),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("forbid_cluster_wide"), "{}", run.stderr);
}

#[test]
fn kseal_config_shows_the_rule_and_why() {
    let repo = Repo::new(RULES);
    let run = repo.run("clusters", &["config", "--for", "dev/db.yaml"], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let file = repo.root.join(".kseal.yaml");
    let expected = format!(
        "discovery: looked from {} up to the repository root {} (the first directory holding .git), and never above it
file: {} (0 rings pinned, 3 creation rules)
path: `clusters/dev/db.yaml`
  creation rule 1: path_regex `^clusters/prod/` does not match
rule: creation rule 2 of `{}` (path_regex `^clusters/dev/` matches `clusters/dev/db.yaml`)
  cert:      {} (--cert or KSEAL_CERT overrides it)
  scope:     namespace-wide (--scope or KSEAL_SCOPE overrides it)
  namespace: dev (-n or KSEAL_NAMESPACE overrides it)
  forbid_cluster_wide: false
",
        repo.root.join("clusters").display(),
        repo.root.display(),
        file.display(),
        file.display(),
        repo.root.join("keys/b/tls.crt").display()
    );
    assert_eq!(run.stdout, expected);
    let run = repo.run(".", &["config"], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("rule: none matches"), "{}", run.stdout);
}

#[test]
fn a_bad_file_is_refused_with_line_and_column() {
    let repo = Repo::new(RULES);
    let cases: [(&str, &[&str]); 4] = [
        (
            "creation_rules:\n  - path_regex: ^a/\n    scpoe: strict\n",
            &["unknown field `scpoe`", "line 3, column 5"],
        ),
        (
            "creation_rules:\n  - path_regex: ^a/\n    scope: cluster\n",
            &["unknown variant `cluster`", "line 3, column 12"],
        ),
        ("creation_rules:\n  - path_regex: [a\n", &["line 2"]),
        (
            "creation_rules:\n  - path_regex: ^a/(\n",
            &[
                "creation rule 1",
                "path_regex `^a/(` at line 2, column 17 is not a valid regex",
            ],
        ),
    ];
    for (text, wanted) in cases {
        std::fs::write(repo.root.join(".kseal.yaml"), text).unwrap();
        for args in [
            &["seal", "-w", "a/db.yaml"][..],
            &["config", "--for", "a/db.yaml"][..],
        ] {
            let run = repo.run(".", args, Some(SECRET));
            assert_eq!(run.code, 1, "{text}: {}", run.stderr);
            assert!(run.stderr.contains(".kseal.yaml"), "{}", run.stderr);
            for w in wanted {
                assert!(run.stderr.contains(w), "{text}: want {w}: {}", run.stderr);
            }
        }
    }
}

#[test]
fn the_committed_json_schema_is_what_the_types_generate() {
    let dir = tempfile::tempdir().unwrap();
    let run = kseal(&["config", "--schema"], None, dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let committed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/kseal-config.schema.json"),
    )
    .unwrap();
    assert_eq!(
        committed, run.stdout,
        "schemas/kseal-config.schema.json is stale: regenerate it with \
         `kseal config --schema > schemas/kseal-config.schema.json`"
    );
    let schema: serde_json::Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(
        schema["$defs"]["CreationRule"]["additionalProperties"],
        false
    );
}

/// A rule that names a key ring in the Secrets Manager emulator: `kseal seal` without
/// --cert seals to the ring's active key (the `kseal` executable hands the command to
/// `kseal-ring`), under the anchor pinned in the same file.
#[test]
fn a_rule_may_name_a_key_ring() {
    let Some(endpoint) = kseal_testkit::sm::endpoint() else {
        return;
    };
    let repo = Repo::new("");
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
    let prefix = kseal_testkit::sm::unique_prefix("cli_rule_ring");
    let run = |args: &[&str], stdin: Option<&str>| {
        let run = kseal_env(args, stdin, &repo.root, &envs);
        assert_eq!(run.code, 0, "kseal {}: {}", args.join(" "), run.stderr);
        run
    };
    let b = repo.root.join("keys/b");
    run(&["keys", "push", "--ring", &prefix, "--from", s(&b)], None);
    // `keys trust` writes the pin into .kseal.yaml; the rules go into the same file.
    run(&["keys", "trust", "--ring", &prefix], None);
    let mut text = std::fs::read_to_string(repo.root.join(".kseal.yaml")).unwrap();
    text.push_str(&format!(
        "creation_rules:\n  - path_regex: ^clusters/\n    ring: secretsmanager://{prefix}\n"
    ));
    std::fs::write(repo.root.join(".kseal.yaml"), text).unwrap();
    run(
        &["seal", "-w", "clusters/prod/db.yaml", "-n", "prod"],
        Some(SECRET),
    );
    assert_eq!(repo.opened_by("clusters/prod/db.yaml"), "b");
    let shown = run(&["config", "--for", "clusters/prod/db.yaml"], None);
    assert!(
        shown
            .stdout
            .contains(&format!("cert:      secretsmanager://{prefix} ")),
        "{}",
        shown.stdout
    );
    // Writing a pin again keeps the rules.
    run(&["keys", "trust", "--ring", &prefix], None);
    let text = std::fs::read_to_string(repo.root.join(".kseal.yaml")).unwrap();
    assert!(text.contains("creation_rules:"), "{text}");
}

#[test]
fn create_follows_the_rule_of_its_output_path() {
    let repo = Repo::new(RULES);
    let envs = [
        ("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE"),
        (
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
    ];
    let run = kseal_env(
        &[
            "create",
            "aws-credentials",
            "--from-env",
            "-w",
            "clusters/dev/aws.yaml",
        ],
        None,
        &repo.root,
        &envs,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.opened_by("clusters/dev/aws.yaml"), "b");
    let sealed = repo.sealed("clusters/dev/aws.yaml");
    // The consumer's namespace wins over the rule's (`dev`): Crossplane reads its
    // credentials in crossplane-system.
    assert_eq!(sealed["metadata"]["namespace"], "crossplane-system");
    // An explicit -n wins over both.
    let run = kseal_env(
        &[
            "create",
            "aws-credentials",
            "--from-env",
            "-n",
            "infra",
            "-w",
            "clusters/dev/aws-infra.yaml",
        ],
        None,
        &repo.root,
        &envs,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        repo.sealed("clusters/dev/aws-infra.yaml")["metadata"]["namespace"],
        "infra"
    );
    assert_eq!(
        sealed["metadata"]["annotations"]["sealedsecrets.bitnami.com/namespace-wide"],
        "true"
    );
    // The policy holds for create too.
    let run = kseal_env(
        &[
            "create",
            "aws-credentials",
            "--from-env",
            "--scope",
            "cluster-wide",
            "-w",
            "clusters/prod/aws.yaml",
        ],
        None,
        &repo.root,
        &envs,
    );
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("forbid_cluster_wide"), "{}", run.stderr);
    assert!(!run.stderr.contains("wJalrXUtnFEMI"), "{}", run.stderr);
}

#[test]
fn reseal_reseals_to_the_certificate_of_the_rule() {
    let repo = Repo::new(RULES);
    let a = repo.root.join("keys/a/tls.crt");
    // Sealed with a; the rule of clusters/dev/ names b.
    let run = repo.run(
        ".",
        &["seal", "--cert", s(&a), "-w", "clusters/dev/db.yaml"],
        Some(SECRET),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.opened_by("clusters/dev/db.yaml"), "a");
    let keys = format!(
        "{},{}",
        s(&repo.root.join("keys/a/tls.key")),
        s(&repo.root.join("keys/b/tls.key"))
    );
    let run = repo.run(
        ".",
        &[
            "reseal",
            "--key",
            &keys,
            "--in-place",
            "clusters/dev/db.yaml",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("creation rule 2"), "{}", run.stderr);
    assert_eq!(repo.opened_by("clusters/dev/db.yaml"), "b");
    // Files whose rules name different certificates are refused together.
    std::fs::copy(
        repo.root.join("clusters/dev/db.yaml"),
        repo.root.join("clusters/prod/db.yaml"),
    )
    .unwrap();
    let run = repo.run(
        ".",
        &[
            "reseal",
            "--key",
            &keys,
            "--in-place",
            "clusters/dev/db.yaml",
            "clusters/prod/db.yaml",
        ],
        None,
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("different certificates"),
        "{}",
        run.stderr
    );
}

/// A planted rule: every certificate path is the fixture key `a`, so sealing with it is
/// told apart from sealing with nothing (which needs a controller, absent here).
const PLANTED: &str = "creation_rules:\n  - cert: planted.crt\n    namespace: planted\n";

/// A directory with a planted `.kseal.yaml` and its certificate.
fn planted_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::copy(fixtures().join("keys/tls.crt"), root.join("planted.crt")).unwrap();
    write_config(&root, PLANTED);
    (dir, root)
}

/// `kseal seal -w out.yaml` in `cwd` without --cert must not seal (no controller is
/// reachable) and must not name the planted file.
fn assert_not_sealed_by_plant(cwd: &Path, planted: &Path) {
    let run = kseal(&["seal", "-w", "out.yaml"], Some(SECRET), cwd);
    assert_ne!(run.code, 0, "sealed with the planted rule: {}", run.stderr);
    assert!(!cwd.join("out.yaml").exists());
    assert!(
        !run.stderr.contains(s(planted)) && !run.stderr.contains("planted.crt"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_file_planted_above_the_repository_is_not_used() {
    let (_dir, root) = planted_dir();
    let planted = root.join(".kseal.yaml");
    let repo = root.join("work");
    std::fs::create_dir_all(repo.join("apps")).unwrap();
    // A worktree or submodule has a `.git` file: it marks the root as well.
    std::fs::write(repo.join(".git"), "gitdir: /elsewhere\n").unwrap();
    assert_not_sealed_by_plant(&repo.join("apps"), &planted);
    let run = kseal(&["config"], None, &repo.join("apps"));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!(
            "discovery: looked from {} up to the repository root {} (the first directory \
             holding .git), and never above it\nno .kseal.yaml found: no ring is pinned and no \
             creation rule applies (flags and KSEAL_* variables only)\n",
            repo.join("apps").display(),
            repo.display()
        )
    );

    // The repository's own file applies, not the planted one.
    let b = Repo::new("creation_rules:\n  - cert: keys/b/tls.crt\n");
    let inner = root.join("repo");
    std::fs::rename(&b.root, &inner).unwrap();
    let run = kseal(&["seal", "-w", "tools/db.yaml"], Some(SECRET), &inner);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let opened = |key: &str| {
        let key = inner.join("keys").join(key).join("tls.key");
        kseal(
            &["validate", "--key", s(&key), "tools/db.yaml"],
            None,
            &inner,
        )
        .code
            == 0
    };
    assert!(opened("b") && !opened("a"));
}

#[test]
fn outside_a_repository_only_the_current_directory_counts() {
    let (_dir, root) = planted_dir();
    let planted = root.join(".kseal.yaml");
    let sub = root.join("work/sub");
    std::fs::create_dir_all(&sub).unwrap();
    assert_not_sealed_by_plant(&sub, &planted);
    let run = kseal(&["config"], None, &sub);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with(&format!(
            "discovery: {} is in no git repository: only its own .kseal.yaml counts, none \
             above it\nno .kseal.yaml found",
            sub.display()
        )),
        "{}",
        run.stdout
    );
    // The directory's own file counts.
    let run = kseal(&["seal", "-w", "out.yaml"], Some(SECRET), &root);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let key = fixtures().join("keys/tls.key");
    let run = kseal(&["validate", "--key", s(&key), "out.yaml"], None, &root);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// A group that holds another user than root, from /etc/passwd: the primary group (not root's)
/// of a user other than root, and that user's name.
fn group_shared_with_another_user() -> Option<(u32, String)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 4 && f[2] != "0" && f[3] != "0")
            .then(|| Some((f[3].parse().ok()?, f[0].to_owned())))
            .flatten()
    })
}

/// Whether root's group (gid 0) is root's alone: no other user has it as primary group and
/// /etc/group lists no member.
fn root_group_is_private() -> bool {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .all(|f| f.len() < 4 || f[3] != "0" || f[2] == "0")
        && group.lines().any(|l| l == "root:x:0:")
}

#[cfg(unix)]
#[test]
fn a_file_others_could_write_is_refused() {
    use std::os::unix::fs::MetadataExt as _;
    let repo = Repo::new(RULES);
    let path = repo.root.join(".kseal.yaml");
    let refused = |who: &str, advice: &str| {
        for args in [
            &["seal", "-w", "clusters/prod/db.yaml"][..],
            &["config"][..],
        ] {
            let run = repo.run("clusters", args, Some(SECRET));
            assert_eq!(run.code, 1, "{}", run.stderr);
            assert!(
                run.stderr.contains(&format!(
                    "refusing {}: it is writable by {who}",
                    path.display()
                )) && run.stderr.contains(advice),
                "{}",
                run.stderr
            );
        }
    };
    set_mode(&path, 0o646);
    refused("others (mode 0646)", "chmod go-w");
    // Group-writable: fine when the group is the owner's alone (OpenSSH's rule, what umask
    // 002 gives a clone), refused when another user is in it. Root can hand the file to
    // either kind of group; other users test the message only.
    let as_root = std::fs::metadata(&path).unwrap().uid() == 0;
    if as_root && root_group_is_private() {
        std::os::unix::fs::chown(&path, None, Some(0)).unwrap();
        set_mode(&path, 0o664);
        let run = repo.run("clusters", &["config"], None);
        assert_eq!(
            run.code, 0,
            "a private group's write bit is fine: {}",
            run.stderr
        );
    }
    if let (true, Some((gid, user))) = (as_root, group_shared_with_another_user()) {
        std::os::unix::fs::chown(&path, None, Some(gid)).unwrap();
        set_mode(&path, 0o664);
        refused("its group (mode 0664) and group `", "chmod g-w");
        let run = repo.run("clusters", &["config"], None);
        assert!(
            run.stderr
                .contains(&format!("is also the primary group of user `{user}`"))
                || run.stderr.contains(&format!("has member `{user}`")),
            "{}",
            run.stderr
        );
        std::os::unix::fs::chown(&path, None, Some(0)).unwrap();
    }
    assert!(!repo.root.join("clusters/prod/db.yaml").exists());
    set_mode(&path, 0o644);
    let run = repo.run(".", &["seal", "-w", "clusters/prod/db.yaml"], Some(SECRET));
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// Root can give the file away: a file owned by another user is refused (skipped when the
/// tests do not run as root).
#[cfg(unix)]
#[test]
fn a_file_owned_by_another_user_is_refused() {
    use std::os::unix::fs::MetadataExt as _;
    let repo = Repo::new(RULES);
    let path = repo.root.join(".kseal.yaml");
    if std::fs::metadata(&repo.root).unwrap().uid() != 0 {
        return;
    }
    std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
    let run = repo.run(".", &["seal", "-w", "clusters/prod/db.yaml"], Some(SECRET));
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "refusing {}: it is owned by uid 65534",
            path.display()
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn a_rule_may_not_name_a_certificate_outside_the_repository() {
    let outside = tempfile::tempdir().unwrap();
    let evil = outside.path().canonicalize().unwrap().join("evil.crt");
    std::fs::copy(fixtures().join("keys/tls.crt"), &evil).unwrap();
    let repo = Repo::new("");
    // ../outside.crt: the parent of the repository.
    let parent = repo.root.parent().unwrap().join("outside.crt");
    std::fs::copy(fixtures().join("keys/tls.crt"), &parent).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&evil, repo.root.join("keys/link.crt")).unwrap();
    let mut cases = vec![
        (format!("cert: {}", s(&evil)), "is an absolute path"),
        ("cert: ../outside.crt".to_owned(), "outside"),
        (format!("cert: file://{}", s(&evil)), "is refused"),
        (
            "cert: http://certs.example.com/fleet.pem".to_owned(),
            "is refused",
        ),
    ];
    if cfg!(unix) {
        cases.push(("cert: keys/link.crt".to_owned(), "outside"));
    }
    for (line, wanted) in cases {
        write_config(
            &repo.root,
            &format!("creation_rules:\n  - path_regex: ^clusters/\n    {line}\n"),
        );
        let run = repo.run(".", &["seal", "-w", "clusters/prod/db.yaml"], Some(SECRET));
        assert_eq!(run.code, 1, "{line}: {}", run.stderr);
        assert!(
            run.stderr.contains(wanted) && run.stderr.contains("creation rule 1"),
            "{line}: want {wanted}: {}",
            run.stderr
        );
        assert!(!repo.root.join("clusters/prod/db.yaml").exists());
        let run = repo.run(".", &["config", "--for", "clusters/prod/db.yaml"], None);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(run.stdout.contains("cert:      invalid:"), "{}", run.stdout);
        // An explicit --cert still wins: the rule's certificate is not even looked at.
        let a = repo.root.join("keys/a/tls.crt");
        let run = repo.run(
            ".",
            &["seal", "--cert", s(&a), "-w", "clusters/prod/db.yaml"],
            Some(SECRET),
        );
        assert_eq!(run.code, 0, "{line}: {}", run.stderr);
        assert_eq!(repo.opened_by("clusters/prod/db.yaml"), "a");
        std::fs::remove_file(repo.root.join("clusters/prod/db.yaml")).unwrap();
    }
    std::fs::remove_file(parent).unwrap();
}

#[test]
fn a_rule_may_not_name_a_ring_it_does_not_pin() {
    let repo = Repo::new("");
    let ring = repo.root.join("ring");
    std::fs::create_dir(&ring).unwrap();
    for line in [
        "ring: secretsmanager://kseal/unpinned",
        "cert: secretsmanager://kseal/unpinned",
        "ring: dir://ring",
    ] {
        write_config(
            &repo.root,
            &format!(
                "rings:\n  - ring: kseal/other\n    anchor: {}\ncreation_rules:\n  - {line}\n",
                "a".repeat(64)
            ),
        );
        let run = repo.run(".", &["seal", "-w", "clusters/prod/db.yaml"], Some(SECRET));
        assert_eq!(run.code, 1, "{line}: {}", run.stderr);
        assert!(
            run.stderr.contains("pins no anchor for it")
                && run.stderr.contains("kseal keys trust --ring"),
            "{line}: {}",
            run.stderr
        );
        assert!(!repo.root.join("clusters/prod/db.yaml").exists());
    }
}
