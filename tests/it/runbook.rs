//! `scripts/runbook.py`, which runs the shell blocks of README.md, docs/key-ring.md and
//! deploy/README.md in CI (scripts/runbook.sh), must be able to fail: a broken command fails
//! the run with its document line, a stale `not-here` marker is refused, and `skip`,
//! `not-here`, `before` and `after` do what they say. These documents use only the shell, so
//! the test needs python3 and bash, nothing else.

use std::path::Path;
use std::process::{Command, Output};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the repository")
}

/// Runs the runner on `doc` (written into a temporary git repository) and returns its output.
fn run(doc: &str) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("git runs");
        assert!(status.status.success(), "git {args:?}: {status:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(dir.path().join("doc.md"), doc).expect("write doc");
    std::fs::write(dir.path().join("input.txt"), "from the repository\n").expect("write input");
    Command::new("python3")
        .arg(repo().join("scripts/runbook.py"))
        .args(["--repo", &dir.path().to_string_lossy(), "doc.md"])
        .output()
        .expect("python3 runs scripts/runbook.py")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn blocks_run_in_one_session_and_a_failing_command_names_its_line() {
    let doc = "# Title\n\n```sh\nexport GREETING=hello\ncd sub 2>/dev/null || mkdir sub\ncd sub\n```\n\nText.\n\n```sh\ntest \"$GREETING\" = hello\ntest \"$(basename \"$PWD\")\" = sub\ncat ../input.txt\nfalse\necho never\n```\n";
    let out = run(doc);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("doc.md:3: ok (3 commands)"), "{all}");
    // `false` is line 15 of doc.md.
    assert!(all.contains("doc.md:15: exit 1: false"), "{all}");
    assert!(all.contains("from the repository"), "{all}");
    assert!(!all.contains("never"), "{all}");
}

#[test]
fn markers_skip_replace_and_prepare() {
    let doc = "<!-- runbook skip: needs Docker -->\n```sh\nexit 3\n```\n\n<!--\n runbook\n-->\n<!-- runbook\nnot-here: \\bdocker\\b -- no Docker here\nbefore: echo prepared > made.txt\nafter: test -f after-me\n-->\n```bash\ndocker build \\\n   -t x .\ngrep -q prepared made.txt\nfor f in a b; do\n  docker run $f\ndone\ntouch after-me\n```\n";
    let out = run(doc);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(all.contains("not run here: needs Docker"), "{all}");
    assert!(all.contains("line 15: docker build"), "{all}");
    assert!(all.contains("line 18: for f in a b; do"), "{all}");
    assert!(all.contains("ok (2 commands)"), "{all}");
}

#[test]
fn a_stale_marker_and_a_failed_hidden_step_are_refused() {
    let stale = "<!-- runbook\nnot-here: ^docker -- no Docker here\n-->\n```sh\necho hi\n```\n";
    let out = run(stale);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("matches no command"), "{}", text(&out));

    let before = "<!-- runbook\nbefore: false\n-->\n```sh\necho hi\n```\n";
    let out = run(before);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("hidden 'before:' step failed"),
        "{}",
        text(&out)
    );

    let unknown = "<!-- runbook\nskip-lines: x\n-->\n```sh\necho hi\n```\n";
    let out = run(unknown);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("unknown runbook directive"),
        "{}",
        text(&out)
    );
}
