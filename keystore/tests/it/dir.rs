//! The ring contract on a directory store: the same operations as on Secrets Manager, on a
//! temporary directory, plus the Secrets Store CSI driver's one-file-per-key layout.

use std::path::Path;
use std::time::{Duration, SystemTime};

use kseal_keys::{CertificateOptions, KeyPair, KeySize};
use kseal_keystore::{
    ActivateOutcome, AwsOptions, DirStore, Error, Index, IndexEntry, KeyEntry, Kid, Location, Put,
    Ring, Store,
};

/// A fresh RSA key pair. Test-only 2048-bit keys, do not copy: kseal generates 4096-bit keys.
fn pair() -> KeyPair {
    KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("generate a key")
}

fn kid(p: &KeyPair) -> Kid {
    Kid::of(p.public_key())
}

fn location(dir: &Path) -> Location {
    Location::Directory {
        path: dir.to_owned(),
        insecure_perms: false,
    }
}

async fn ring_in(dir: &Path) -> Ring {
    Ring::open(&location(dir), &AwsOptions::default())
        .await
        .expect("open the ring")
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[tokio::test]
async fn push_writes_the_documented_layout_with_a_private_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let ring = ring_in(dir.path()).await;
    assert!(matches!(ring.store(), Store::Directory(_)));
    assert_eq!(ring.index_name(), "index.json");
    assert_eq!(ring.index_version().await.unwrap(), None);

    let p = pair();
    let out = ring.push(&p).await.unwrap();
    assert_eq!(out.stored, Put::Created);
    assert!(out.indexed && out.activated);

    let key_dir = dir.path().join("keys").join(out.kid.as_str());
    let crt = std::fs::read_to_string(key_dir.join("tls.crt")).unwrap();
    let key = std::fs::read_to_string(key_dir.join("tls.key")).unwrap();
    assert_eq!(crt, p.certificate().to_pem());
    assert!(key.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    #[cfg(unix)]
    {
        assert_eq!(mode(&key_dir.join("tls.key")), 0o600);
        assert_eq!(mode(&key_dir), 0o700);
    }

    let text = std::fs::read_to_string(dir.path().join("index.json")).unwrap();
    assert!(!text.contains("PRIVATE KEY"));
    let index = Index::parse(&text, "kseal/fleet", "index.json").unwrap();
    assert_eq!(index.active, Some(out.kid.clone()));
    assert_eq!(index.keys.len(), 1);
    // No temporary files left behind.
    let leftovers: Vec<_> = walk(dir.path())
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    assert_eq!(ring.read_key(&out.kid).await.unwrap().id(), p.id());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read the directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

#[tokio::test]
async fn push_twice_then_activate_then_retire_on_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let ring = ring_in(dir.path()).await;
    let (a, b) = (pair(), pair());
    let (ka, kb) = (kid(&a), kid(&b));
    ring.push(&a).await.unwrap();
    let v1 = ring.index_version().await.unwrap();

    let again = ring.push(&a).await.unwrap();
    assert_eq!(again.stored, Put::Existed);
    assert!(!again.indexed);
    assert_eq!(ring.index_version().await.unwrap(), v1, "no index write");

    let pushed = ring.push(&b).await.unwrap();
    assert!(pushed.indexed && !pushed.activated);
    let v2 = ring.index_version().await.unwrap();
    assert_ne!(v2, v1);

    match ring
        .activate(kb.as_str(), Duration::from_secs(3600))
        .await
        .unwrap()
    {
        ActivateOutcome::TooYoung { kid, ready_at } => {
            assert_eq!(kid, kb);
            assert!(ready_at > SystemTime::now() + Duration::from_secs(3500));
        }
        other => panic!("expected TooYoung, got {other:?}"),
    }
    assert_eq!(ring.index_version().await.unwrap(), v2);
    assert_eq!(
        ring.activate(&kb.as_str()[..8], Duration::ZERO)
            .await
            .unwrap(),
        ActivateOutcome::Activated {
            kid: kb.clone(),
            previous: Some(ka.clone())
        }
    );
    assert_eq!(
        ring.activate(b.id().as_str(), Duration::ZERO)
            .await
            .unwrap(),
        ActivateOutcome::AlreadyActive(kb.clone())
    );

    let err = ring.retire(kb.as_str(), 7).await.unwrap_err();
    assert!(
        err.to_string().contains("is the active sealing key"),
        "{err}"
    );
    let out = ring.retire(ka.as_str(), 7).await.unwrap();
    assert_eq!(out.kid, ka);
    assert!(out.deletion_scheduled);

    let snap = ring.snapshot(None).await.unwrap().unwrap();
    assert_eq!(snap.index.keys.len(), 1);
    assert_eq!(snap.index.active, Some(kb.clone()));
    assert!(!dir.path().join("keys").join(ka.as_str()).exists());
    let retired: Vec<String> = std::fs::read_dir(dir.path().join("retired"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(retired.len(), 1);
    assert!(
        retired[0].starts_with(&format!("{ka}-")),
        "retired/<kid>-<time>: {retired:?}"
    );
    let err = ring.read_key(&ka).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");

    let err = ring.retire(kb.as_str(), 7).await.unwrap_err();
    assert!(matches!(err, Error::Refused(_)), "{err:?}");
}

#[tokio::test]
async fn directory_compare_and_swap_with_a_stale_version_is_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let ring = ring_in(dir.path()).await;
    let store = ring.store();

    let v1 = store
        .compare_and_swap("doc.json", "one", None, &[])
        .await
        .unwrap();
    let err = store
        .compare_and_swap("doc.json", "again", None, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    let v2 = store
        .compare_and_swap("doc.json", "two", Some(&v1), &[])
        .await
        .unwrap();
    let err = store
        .compare_and_swap("doc.json", "stale", Some(&v1), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    let (text, version) = store.read("doc.json", None).await.unwrap().unwrap();
    assert_eq!((text.as_str(), version), ("two", v2));

    // Names never leave the ring directory.
    let err = store
        .compare_and_swap("../escape", "x", None, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Refused(_)), "{err:?}");
}

#[tokio::test]
async fn csi_driver_layout_with_one_json_file_per_key_is_read() {
    // The Secrets Store CSI driver mounts each Secrets Manager secret as one file: R/index as
    // `index.json` and R/keys/<kid> as `keys/<kid>` holding {"crt","key"}.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (pair(), pair());
    let mut index = Index::empty("acme/fleet", SystemTime::now());
    for p in [&a, &b] {
        index
            .keys
            .push(IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
    }
    index.active = Some(kid(&a));
    std::fs::create_dir_all(dir.path().join("keys")).unwrap();
    std::fs::write(dir.path().join("index.json"), index.to_json()).unwrap();
    // One strict file, one in the reference sample's raw-newline form with a PKCS #8 key.
    std::fs::write(
        dir.path().join("keys").join(kid(&a).as_str()),
        KeyEntry::from_pair(&a).unwrap().to_json().as_bytes(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("keys").join(kid(&b).as_str()),
        format!(
            "{{\n  \"crt\": \"{}\",\n  \"key\": \"{}\"\n}}\n",
            b.certificate().to_pem().trim_end(),
            b.private_key().to_pkcs8_pem().trim_end()
        ),
    )
    .unwrap();
    // Private keys, so 0600 as `kseal keys push` writes them.
    #[cfg(unix)]
    for p in [&a, &b] {
        chmod(&dir.path().join("keys").join(kid(p).as_str()), 0o600);
    }

    let ring = ring_in(dir.path()).await;
    let snap = ring.snapshot(None).await.unwrap().unwrap();
    assert_eq!(snap.index.ring, "acme/fleet", "a copy of any ring is read");
    assert_eq!(snap.index.active, Some(kid(&a)));
    assert_eq!(ring.read_key(&kid(&a)).await.unwrap().id(), a.id());
    assert_eq!(ring.read_key(&kid(&b)).await.unwrap().id(), b.id());
}

#[test]
fn concurrent_pushes_from_two_threads_keep_both_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    for round in 0..5 {
        let (a, b) = (pair(), pair());
        // Two writers, each with its own ring handle and runtime, racing on index.json.
        let barrier = std::sync::Barrier::new(2);
        let push = |p: &KeyPair| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            runtime.block_on(async {
                let ring = ring_in(dir.path()).await;
                barrier.wait();
                ring.push(p).await.unwrap()
            })
        };
        let (ra, rb) = std::thread::scope(|s| {
            let ta = s.spawn(|| push(&a));
            let tb = s.spawn(|| push(&b));
            (ta.join().unwrap(), tb.join().unwrap())
        });
        assert!(ra.indexed && rb.indexed, "round {round}");
        expected.extend([kid(&a), kid(&b)]);

        let text = std::fs::read_to_string(dir.path().join("index.json")).unwrap();
        let index = Index::parse(&text, "kseal/fleet", "index.json").unwrap();
        for k in &expected {
            assert!(index.entry(k).is_some(), "round {round}: key {k} was lost");
        }
        assert_eq!(index.keys.len(), expected.len());
        assert!(index.active.is_some());
    }
}

#[tokio::test]
async fn an_index_past_the_64_kib_value_limit_is_refused_with_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let ring = ring_in(tmp.path()).await;
    let mut pushed = 0;
    let err = loop {
        match ring.push(&pair()).await {
            Ok(_) => pushed += 1,
            Err(e) => break e,
        }
        assert!(pushed < 200, "the index never hit the limit");
    };
    assert!(pushed >= 29, "only {pushed} keys fit");
    let text = err.to_string();
    assert!(text.contains("64 KiB"), "{text}");
    assert!(text.contains("kseal keys retire"), "{text}");
    // The index that is there still parses and lists every key that was accepted.
    let snapshot = ring.require_snapshot().await.unwrap();
    assert_eq!(snapshot.index.keys.len(), pushed);
}

#[tokio::test]
async fn push_if_empty_adds_only_the_first_key_and_retires_a_latecomer() {
    let dir = tempfile::tempdir().unwrap();
    let one = ring_in(dir.path()).await;
    let two = ring_in(dir.path()).await;
    let (a, b) = (pair(), pair());
    // Two writers racing on one directory: the index lock and the compare-and-swap let one in.
    let (ra, rb) = tokio::join!(one.push_if_empty(&a, 7), two.push_if_empty(&b, 7));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(
        ra.is_some() ^ rb.is_some(),
        "exactly one writer adds its key"
    );
    let (winner, loser) = if ra.is_some() { (&a, &b) } else { (&b, &a) };
    let snap = one.snapshot(None).await.unwrap().unwrap();
    assert_eq!(snap.index.keys.len(), 1);
    assert_eq!(snap.index.active, Some(kid(winner)));
    // The latecomer's key directory went to retired/, the winner's stays.
    assert!(!dir.path().join("keys").join(kid(loser).as_str()).exists());
    let retired: Vec<String> = std::fs::read_dir(dir.path().join("retired"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(retired.len(), 1, "{retired:?}");
    assert!(retired[0].starts_with(kid(loser).as_str()), "{retired:?}");
    assert_eq!(one.read_key(&kid(winner)).await.unwrap().id(), winner.id());
    // The same key again: a no-op that reports it.
    let again = one.push_if_empty(winner, 7).await.unwrap().unwrap();
    assert_eq!((again.stored, again.indexed), (Put::Existed, false));
}

/// Runs `op` on its own thread and runtime and fails the test when it has not returned after
/// 60 s (a hang, not a slow machine), instead of hanging the test run.
fn returns<T: Send + 'static>(
    op: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>> + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("start a runtime");
        let _ = tx.send(runtime.block_on(op()));
        // A blocking task that never ends must not keep this thread in the runtime's drop.
        runtime.shutdown_background();
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the directory store hung instead of answering")
}

#[cfg(unix)]
fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A ring with one pushed key in `<tmp>/ring`: (tmp, ring dir, kid).
async fn pushed_ring() -> (tempfile::TempDir, std::path::PathBuf, Kid) {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let root = tmp.path().join("ring");
    let out = ring_in(&root).await.push(&pair()).await.expect("push");
    (tmp, root, out.kid)
}

/// Snapshot and key reads of the ring in `root`, as `insecure_perms` says.
async fn read_all(root: &Path, kid: &Kid, insecure_perms: bool) -> Result<(), Error> {
    let location = Location::Directory {
        path: root.to_owned(),
        insecure_perms,
    };
    let ring = Ring::open(&location, &AwsOptions::default()).await?;
    ring.require_snapshot().await?;
    ring.read_key(kid).await?;
    Ok(())
}

#[cfg(unix)]
#[tokio::test]
async fn files_and_directories_others_may_write_and_readable_private_keys_are_refused() {
    let (_tmp, root, kid) = pushed_ring().await;
    let key_dir = root.join("keys").join(kid.as_str());
    read_all(&root, &kid, false).await.unwrap();
    for (path, bad, good, says) in [
        (
            root.join("index.json"),
            0o666,
            0o644,
            "must not be writable",
        ),
        (root.clone(), 0o777, 0o755, "must not be writable"),
        (root.join("keys"), 0o775, 0o755, "must not be writable"),
        (key_dir.clone(), 0o770, 0o700, "must not be writable"),
        (
            key_dir.join("tls.crt"),
            0o646,
            0o644,
            "must not be writable",
        ),
        (
            key_dir.join("tls.key"),
            0o644,
            0o600,
            "must not be readable",
        ),
        (
            key_dir.join("tls.key"),
            0o640,
            0o600,
            "must not be readable",
        ),
    ] {
        chmod(&path, bad);
        let err = read_all(&root, &kid, false).await.unwrap_err().to_string();
        let name = path.display().to_string();
        assert!(
            err.contains(&format!("{name} has mode {bad:04o}")),
            "{name}: {err}"
        );
        assert!(err.contains(says), "{err}");
        assert!(err.contains("--insecure-perms"), "{err}");
        // The override reads it; writes are refused too without it.
        read_all(&root, &kid, true).await.unwrap();
        if path == root || path == root.join("keys") {
            let err = ring_in(&root).await.push(&pair()).await.unwrap_err();
            assert!(err.to_string().contains("has mode"), "{err}");
        }
        chmod(&path, good);
    }
    read_all(&root, &kid, false).await.unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn the_csi_drivers_one_file_per_key_must_not_be_readable_by_others() {
    let tmp = tempfile::tempdir().unwrap();
    let p = pair();
    let mut index = Index::empty("kseal/fleet", SystemTime::now());
    index
        .keys
        .push(IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
    index.active = Some(kid(&p));
    std::fs::create_dir_all(tmp.path().join("keys")).unwrap();
    std::fs::write(tmp.path().join("index.json"), index.to_json()).unwrap();
    let key_file = tmp.path().join("keys").join(kid(&p).as_str());
    std::fs::write(
        &key_file,
        KeyEntry::from_pair(&p).unwrap().to_json().as_bytes(),
    )
    .unwrap();
    chmod(&key_file, 0o644);
    let err = read_all(tmp.path(), &kid(&p), false).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("a private key must not be readable"),
        "{err}"
    );
    chmod(&key_file, 0o600);
    read_all(tmp.path(), &kid(&p), false).await.unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn no_symbolic_link_out_of_the_ring_is_followed() {
    use std::os::unix::fs::symlink;
    let (tmp, root, kid) = pushed_ring().await;
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    chmod(&outside, 0o700);
    let key_dir = root.join("keys").join(kid.as_str());

    // Each read path, replaced by a link to a copy of itself outside the ring.
    for path in [
        root.join("index.json"),
        key_dir.join("tls.key"),
        key_dir.clone(),
        root.join("keys"),
    ] {
        let copy = outside.join("copy");
        std::fs::rename(&path, &copy).unwrap();
        symlink(&copy, &path).unwrap();
        let err = read_all(&root, &kid, true).await.unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(
            err.contains("through a symbolic link out of the ring directory"),
            "{err}"
        );
        std::fs::remove_file(&path).unwrap();
        std::fs::rename(&copy, &path).unwrap();
        read_all(&root, &kid, false).await.unwrap();
    }
    // /dev/zero is outside too.
    std::fs::rename(root.join("index.json"), outside.join("index.json")).unwrap();
    symlink("/dev/zero", root.join("index.json")).unwrap();
    let err = read_all(&root, &kid, true).await.unwrap_err();
    assert!(
        err.to_string().contains("symbolic link out of the ring"),
        "{err}"
    );
    std::fs::remove_file(root.join("index.json")).unwrap();
    std::fs::rename(outside.join("index.json"), root.join("index.json")).unwrap();

    // Writers neither lock nor retire through a link out of the ring.
    let ring = ring_in(&root).await;
    let b = pair();
    ring.push(&b).await.unwrap();
    ring.activate(Kid::of(b.public_key()).as_str(), Duration::ZERO)
        .await
        .unwrap();
    symlink(&outside, root.join("retired")).unwrap();
    let err = ring.retire(kid.as_str(), 7).await.unwrap_err();
    assert!(
        err.to_string().contains("symbolic link out of the ring"),
        "{err}"
    );
    std::fs::remove_file(root.join("retired")).unwrap();

    std::fs::remove_file(root.join(".lock")).unwrap();
    symlink(outside.join("lock"), root.join(".lock")).unwrap();
    let err = ring.push(&pair()).await.unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(
        std::fs::read_dir(&outside).unwrap().next().is_none(),
        "nothing was written outside the ring"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn csi_driver_links_inside_the_ring_keep_working() {
    use std::os::unix::fs::symlink;
    // The driver's atomic writer: files in a timestamped directory, `..data` pointing at it,
    // and a link per top-level name through `..data`.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let p = pair();
    let mut index = Index::empty("acme/fleet", SystemTime::now());
    index
        .keys
        .push(IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
    index.active = Some(kid(&p));
    let data = root.join("..2026_11_26_02_00_00.123456789");
    std::fs::create_dir_all(data.join("keys")).unwrap();
    std::fs::write(data.join("index.json"), index.to_json()).unwrap();
    let key_file = data.join("keys").join(kid(&p).as_str());
    std::fs::write(
        &key_file,
        KeyEntry::from_pair(&p).unwrap().to_json().as_bytes(),
    )
    .unwrap();
    chmod(&key_file, 0o600);
    symlink(data.file_name().unwrap(), root.join("..data")).unwrap();
    symlink("..data/index.json", root.join("index.json")).unwrap();
    symlink("..data/keys", root.join("keys")).unwrap();

    read_all(root, &kid(&p), false).await.unwrap();
    // The ring reached through a link of its own (a mount point) too.
    let alias = tmp.path().join("..alias");
    symlink(root, &alias).unwrap();
    read_all(&alias, &kid(&p), false).await.unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn special_files_directories_and_oversized_files_are_refused() {
    let (_tmp, root, kid) = pushed_ring().await;
    let index = root.join("index.json");
    let saved = std::fs::read(&index).unwrap();
    let key = root.join("keys").join(kid.as_str()).join("tls.key");

    // A directory where a file is expected.
    std::fs::remove_file(&index).unwrap();
    std::fs::create_dir(&index).unwrap();
    let err = read_all(&root, &kid, false).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("index.json is a directory: a ring holds only regular files"),
        "{err}"
    );
    std::fs::remove_dir(&index).unwrap();

    // Past the 64 KiB cap (padding after the JSON).
    let mut big = saved.clone();
    big.resize(65_537, b' ');
    std::fs::write(&index, &big).unwrap();
    let err = read_all(&root, &kid, false).await.unwrap_err();
    assert!(err.to_string().contains("is 65537 bytes"), "{err}");
    assert!(err.to_string().contains("64 KiB"), "{err}");
    std::fs::write(&index, &saved).unwrap();
    read_all(&root, &kid, false).await.unwrap();

    let saved_key = std::fs::read(&key).unwrap();
    std::fs::remove_file(&key).unwrap();
    std::fs::create_dir(&key).unwrap();
    let err = read_all(&root, &kid, false).await.unwrap_err();
    assert!(err.to_string().contains("tls.key is a directory"), "{err}");
    std::fs::remove_dir(&key).unwrap();
    std::fs::write(&key, &saved_key).unwrap();
    chmod(&key, 0o600);
    read_all(&root, &kid, false).await.unwrap();
}

#[cfg(unix)]
#[test]
fn an_index_that_is_a_fifo_is_an_error_not_a_hang() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index.json");
    let status = std::process::Command::new("mkfifo")
        .arg(&index)
        .status()
        .expect("run mkfifo");
    assert!(status.success());
    let root = tmp.path().to_owned();
    // Nothing ever writes to the FIFO: opening it to read would block forever.
    let err = returns(move || {
        Box::pin(async move {
            let ring = ring_in(&root).await;
            ring.snapshot(None).await.unwrap_err().to_string()
        })
    });
    assert!(err.contains("index.json is a FIFO"), "{err}");
}

#[test]
fn a_writer_waiting_on_a_held_lock_gives_up_after_the_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    let lock = std::fs::File::create(root.join(".lock")).unwrap();
    lock.lock().unwrap();
    let err = returns(move || {
        Box::pin(async move {
            // A short timeout, for the test only.
            let store = DirStore::new(root.clone()).with_timeout(Duration::from_millis(300));
            let ring = Ring::new(Store::Directory(store), &location(&root));
            ring.push(&pair()).await.unwrap_err().to_string()
        })
    });
    assert!(err.contains(".lock"), "{err}");
    assert!(!tmp.path().join("index.json").exists());
    drop(lock);
}
