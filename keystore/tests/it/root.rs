//! Dedicated roots and expiry: a ring's history signed by a key no cluster holds (an offline
//! file, or an AWS KMS key on the emulator), and indexes that stop being current.
//!
//! The attacker of these tests holds every private key any cluster ever held (every ring key)
//! and can write `R/index`; once the ring has moved to a dedicated root, a reader pinned at
//! that root, or one that has seen it, accepts nothing they sign.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kseal_keys::{KeyPair, KeySize};
use kseal_keystore::trust::{self, RootRecord};
use kseal_keystore::{AwsOptions, Error, Index, Ring, RootKey, RootSigner, Trust, Verified};
use kseal_testkit::sm;

use crate::trust::{
    CloneWith as _, kid, overwrite_index, pair, raw_index, rings, seeded, untrusted_reason,
};

/// An offline root key file (mode 0600) in `dir`.
async fn file_root(dir: &std::path::Path, name: &str) -> RootSigner {
    let key = kseal_keys::PrivateKey::generate(KeySize::Rsa2048).expect("generate a root key");
    let path = dir.join(name);
    std::fs::write(&path, key.to_pkcs8_pem().as_bytes()).expect("write the root key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    RootSigner::open(&RootKey::File(path), &AwsOptions::default())
        .await
        .expect("open the root key file")
}

async fn verified(ring: &Ring, trust: Trust) -> kseal_keystore::Result<Verified> {
    Ok(ring
        .clone_with(trust)
        .snapshot(None)
        .await?
        .expect("an index")
        .verified)
}

/// The index forged from the real one by someone holding every ring key: the root handed
/// from the ring's anchor `a` to their own key, the index signed by it.
fn fork_from_ring_key(real: &Index, anchor: &KeyPair, evil: &KeyPair) -> Index {
    let mut forged = real.clone();
    forged.roots.truncate(1);
    let record = trust::rotate_root(&forged.ring, &forged.roots[0], anchor, evil).unwrap();
    forged.roots.push(record);
    forged.keys.push(
        kseal_keystore::IndexEntry::new(evil.certificate(), std::time::SystemTime::now()).unwrap(),
    );
    forged.active = Some(kid(evil));
    forged.version = real.version + 10;
    forged.expires = real.expires;
    trust::sign_index(&mut forged, evil).unwrap();
    forged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_moved_to_a_dedicated_root_cannot_be_forked_with_ring_keys() {
    let dir = tempfile::tempdir().unwrap();
    for (ring, _keep) in rings("a_ring_moved_to_a_dedicated_root").await {
        let (a, b, anchor) = seeded(&ring).await;
        let root = file_root(dir.path(), &format!("root-{}.pem", anchor.short())).await;
        let seeder = ring.clone().with_root(root.clone());
        assert!(seeder.re_root(&root).await.unwrap(), "moved");
        assert!(!seeder.re_root(&root).await.unwrap(), "once");
        let moved = raw_index(&ring).await;
        let last = moved.roots.last().unwrap();
        assert!(last.dedicated && &last.kid == root.kid());
        assert!(moved.expires.is_some(), "a dedicated root's index expires");
        let Verified::Signed {
            root: signer,
            dedicated,
            ..
        } = verified(&ring, Trust::anchored(root.kid().clone()))
            .await
            .unwrap()
        else {
            panic!("signed")
        };
        assert!(dedicated && &signer == root.kid());
        // Readers pinned at the old anchor still accept the real history (it passes through it).
        verified(&ring, Trust::anchored(anchor.clone()))
            .await
            .unwrap();

        // A write without the root is refused, and names it; with another root too.
        let e = ring.push(&pair()).await.unwrap_err().to_string();
        assert!(e.contains("dedicated root") && e.contains("--root"), "{e}");
        let other = file_root(dir.path(), &format!("other-{}.pem", anchor.short())).await;
        let e = ring
            .clone()
            .with_root(other)
            .push(&pair())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("is signed by its dedicated root"), "{e}");
        // Retiring the ring's former root keys hands nothing back to a ring key.
        seeder
            .activate(kid(&b).as_str(), Duration::ZERO)
            .await
            .unwrap();
        seeder.retire(kid(&a).as_str(), 7).await.unwrap();
        let after = raw_index(&ring).await;
        assert_eq!(after.roots.len(), moved.roots.len(), "no new root record");
        assert_eq!(after.signature.as_ref().unwrap().kid, *root.kid());

        // The fork: every ring key, including the former root `a`, in the attacker's hands.
        let evil = pair();
        overwrite_index(&ring, &fork_from_ring_key(&after, &a, &evil).to_json()).await;
        let pinned_at_root = untrusted_reason(
            ring.clone_with(Trust::anchored(root.kid().clone()))
                .snapshot(None)
                .await,
        );
        assert!(
            pinned_at_root.contains("does not pass through the pinned root"),
            "{pinned_at_root}"
        );
        let saw_root = untrusted_reason(
            ring.clone_with(
                Trust::anchored(anchor.clone()).seen_root(last.seq, root.kid().clone()),
            )
            .snapshot(None)
            .await,
        );
        assert!(saw_root.contains("a fork from an older root"), "{saw_root}");

        // A ring key dressed up as a dedicated root (signed by the anchor and by itself, both
        // held by the attacker) is refused by every reader, pinned at the anchor or not.
        let mut dressed = after.clone();
        dressed.roots.truncate(1);
        let message =
            trust::dedicated_root_message(&dressed.ring, 2, &kid(&b), Some(&anchor), None).unwrap();
        dressed.roots.push(RootRecord {
            seq: 2,
            kid: kid(&b),
            spki: base64_spki(&b),
            signatures: vec![
                trust::sign_with_pair(&a, &message).unwrap(),
                trust::sign_with_pair(&b, &message).unwrap(),
            ],
            dedicated: true,
            location: None,
        });
        dressed.version += 20;
        trust::sign_index(&mut dressed, &b).unwrap();
        overwrite_index(&ring, &dressed.to_json()).await;
        let reason = untrusted_reason(
            ring.clone_with(Trust::anchored(anchor.clone()))
                .snapshot(None)
                .await,
        );
        assert!(reason.contains("is a key of the ring"), "{reason}");

        // A ring key after the dedicated root (signed by nobody who holds the root) fails too.
        let mut after_root = after.clone();
        let record = trust::rotate_root(
            &after_root.ring,
            after_root.roots.last().unwrap(),
            &evil,
            &evil,
        )
        .map(|r| RootRecord {
            seq: after_root.roots.len() as u64 + 1,
            ..r
        })
        .unwrap();
        after_root.roots.push(record);
        after_root.version += 30;
        trust::sign_index(&mut after_root, &evil).unwrap();
        overwrite_index(&ring, &after_root.to_json()).await;
        let reason = untrusted_reason(
            ring.clone_with(Trust::anchored(root.kid().clone()))
                .snapshot(None)
                .await,
        );
        assert!(
            reason.contains("ring key after the ring moved to the dedicated root"),
            "{reason}"
        );
    }
}

fn base64_spki(p: &KeyPair) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(p.public_key().to_spki_der())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_index_is_refused_until_the_seeder_refreshes_it_and_a_replay_expires() {
    for (ring, _keep) in rings("an_expired_index_is_refused").await {
        let (_a, _b, anchor) = seeded(&ring).await;
        let first = raw_index(&ring).await;
        let expires = first.expires.expect("every signed index expires");
        let lifetime = expires.duration_since(first.updated);
        assert_eq!(
            lifetime.as_secs(),
            7 * 24 * 3600,
            "default lifetime: 7 days"
        );
        let pinned = Trust::anchored(anchor.clone());
        let later = expires
            .checked_add(jiff::SignedDuration::from_secs(1))
            .unwrap();
        let reason = untrusted_reason(
            ring.clone_with(pinned.clone().at(later))
                .snapshot(None)
                .await,
        );
        assert!(
            reason.contains("expired at") && reason.contains("kseal keys refresh"),
            "{reason}"
        );
        // Readers that only open (a controller keeping its last good ring) may still read it.
        let Verified::Signed { expired, .. } =
            verified(&ring, pinned.clone().at(later).accept_expired(true))
                .await
                .unwrap()
        else {
            panic!("signed")
        };
        assert!(expired);

        // Refresh: a new version, a new expiry, nothing else changed; --lifetime changes it.
        let (version, _) = ring
            .clone()
            .with_lifetime(Duration::from_secs(2 * 24 * 3600))
            .refresh()
            .await
            .unwrap();
        let refreshed = raw_index(&ring).await;
        assert_eq!(version, first.version + 1);
        assert_eq!(
            (refreshed.keys.clone(), refreshed.active.clone()),
            (first.keys.clone(), first.active.clone())
        );
        assert_eq!(
            refreshed
                .expires
                .unwrap()
                .duration_since(refreshed.updated)
                .as_secs(),
            2 * 24 * 3600
        );
        // The next write keeps the ring's lifetime.
        ring.refresh().await.unwrap();
        let again = raw_index(&ring).await;
        assert_eq!(
            again
                .expires
                .unwrap()
                .duration_since(again.updated)
                .as_secs(),
            2 * 24 * 3600
        );
        let e = ring
            .clone()
            .with_lifetime(Duration::from_secs(60))
            .refresh()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");

        // The first index replayed: a reader with no floor at all refuses it once it expired.
        overwrite_index(&ring, &first.to_json()).await;
        let reason = untrusted_reason(
            ring.clone_with(Trust::anchored(anchor.clone()).at(later))
                .snapshot(None)
                .await,
        );
        assert!(reason.contains("expired"), "{reason}");
        // Removing the expiry breaks the signature.
        let mut stripped = again.clone();
        stripped.expires = None;
        overwrite_index(&ring, &stripped.to_json()).await;
        let reason = untrusted_reason(
            ring.clone_with(Trust::anchored(anchor.clone()))
                .snapshot(None)
                .await,
        );
        assert!(reason.contains("does not verify"), "{reason}");
    }
}

/// A KMS key on the emulator: RSA_4096, SIGN_VERIFY.
async fn kms_key(endpoint: &str) -> String {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await;
    let kms = aws_sdk_kms::Client::new(&config);
    let out = kms
        .create_key()
        .key_usage(aws_sdk_kms::types::KeyUsageType::SignVerify)
        .key_spec(aws_sdk_kms::types::KeySpec::Rsa4096)
        .description("kseal test root")
        .send()
        .await
        .expect("create a KMS key on the emulator");
    out.key_metadata().unwrap().key_id().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_ring_starts_at_its_kms_root_and_no_ring_key_ever_signs() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let aws = AwsOptions {
        endpoint_url: Some(endpoint.clone()),
        region: Some("us-east-1".into()),
        ..AwsOptions::default()
    };
    let key_id = kms_key(&endpoint).await;
    let root = RootSigner::open(&RootKey::Kms(key_id.clone()), &aws)
        .await
        .unwrap();
    assert_eq!(root.location(), Some(format!("kms://{key_id}")));
    let location = kseal_keystore::Location::SecretsManager {
        prefix: sm::unique_prefix("kms_root"),
        region: None,
    };
    let ring = Ring::open(&location, &aws)
        .await
        .unwrap()
        .with_root(root.clone());
    let a = pair();
    assert!(ring.push(&a).await.unwrap().activated);
    ring.push(&pair()).await.unwrap();
    let index = raw_index(&ring).await;
    assert_eq!(index.roots.len(), 1);
    assert!(index.roots[0].dedicated && &index.roots[0].kid == root.kid());
    assert_eq!(
        index.roots[0].location.as_deref(),
        Some(format!("kms://{key_id}").as_str())
    );
    // The emulator signs PSS with the longest salt; AWS with 32 bytes: both verify.
    let Verified::Signed {
        dedicated, anchor, ..
    } = verified(&ring, Trust::anchored(root.kid().clone()))
        .await
        .unwrap()
    else {
        panic!("signed")
    };
    assert!(dedicated);
    assert_eq!(&anchor, root.kid(), "the root is the anchor");
    assert_ne!(anchor, kid(&a), "no ring key anchors it");
    let (version, _) = ring.refresh().await.unwrap();
    assert_eq!(version, index.version + 1);
    // A reader never needs KMS: the root's public key is in the record.
    let reader = Ring::open(&location, &aws)
        .await
        .unwrap()
        .with_trust(Trust::anchored(root.kid().clone()));
    reader.snapshot(None).await.unwrap().unwrap();
    // Re-rooting to the same key changes nothing.
    assert!(!ring.re_root(&root).await.unwrap());
    // A KMS key that cannot sign is refused as a root, with what to create instead.
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(&endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await;
    let encrypting = aws_sdk_kms::Client::new(&config)
        .create_key()
        .send()
        .await
        .unwrap()
        .key_metadata()
        .unwrap()
        .key_id()
        .to_owned();
    let e = RootSigner::open(&RootKey::Kms(encrypting), &aws)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::BadKey { .. }), "{e}");
    assert!(
        e.to_string().contains("SIGN_VERIFY") || format!("{e:?}").contains("SIGN_VERIFY"),
        "{e:?}"
    );
}

/// Attack review (issue 35): an expired old index put back must not be laundered by the
/// seeder's next routine write (a refresh above all), which would re-sign it with a fresh
/// version and expiry. The seeder records the last version written in `R/root`, which an index
/// writer cannot touch, and every write refuses an older index. A ring whose index vanished
/// is never started over while that marker exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeders_writes_refuse_an_old_index_put_back_and_never_restart_a_ring() {
    for (ring, dir) in rings("writes_refuse_an_old_index").await {
        let (_a, _b, _anchor) = seeded(&ring).await;
        let old = raw_index(&ring).await;
        ring.refresh().await.unwrap();
        ring.push(&pair()).await.unwrap();
        let newest = raw_index(&ring).await.version;
        overwrite_index(&ring, &old.to_json()).await;
        for (what, result) in [
            ("refresh", ring.refresh().await.map(|_| ())),
            ("push", ring.push(&pair()).await.map(|_| ())),
        ] {
            let e = result.expect_err(what).to_string();
            assert!(
                e.contains("an older index was put back") && e.contains(&newest.to_string()),
                "{what}: {e}"
            );
        }
        assert_eq!(raw_index(&ring).await, old, "nothing written");
        if let Some(dir) = dir {
            // The index removed: `push --if-empty` (the seed Job) does not start a new history.
            std::fs::remove_file(dir.path().join("index.json")).unwrap();
            let e = ring
                .push_if_empty(&pair(), 7)
                .await
                .expect_err("a new history over a ring that had one")
                .to_string();
            assert!(e.contains("never created again"), "{e}");
        }
    }
}

/// Attack review, round 2: a fork made with ring keys (cut back to the anchor, the attacker's
/// key active) is not blessed by the seeder's routine `re-root` to the ring's own dedicated
/// root (which would re-add the root record and sign the fork), because the history marker
/// records the dedicated root every write must pass through; and a routine write on an
/// expired index needs `--allow-expired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_is_not_blessed_by_re_root_and_expired_indexes_need_a_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (ring, _keep) in rings("fork_not_blessed").await {
        let (a, _b, anchor) = seeded(&ring).await;
        let root = file_root(dir.path(), &format!("r2-{}.pem", anchor.short())).await;
        let seeder = ring.clone().with_root(root.clone());
        seeder.re_root(&root).await.unwrap();
        let real = raw_index(&ring).await;
        let evil = pair();
        overwrite_index(&ring, &fork_from_ring_key(&real, &a, &evil).to_json()).await;
        for (what, result) in [
            ("re-root", seeder.re_root(&root).await.map(|_| ())),
            ("refresh", seeder.refresh().await.map(|_| ())),
        ] {
            let e = result.expect_err(what).to_string();
            assert!(
                e.contains("does not pass through the dedicated root"),
                "{what}: {e}"
            );
        }
        overwrite_index(&ring, &real.to_json()).await;
        // Read two weeks later: expired. A routine write refuses; with the flag it refreshes.
        let later = real
            .expires
            .unwrap()
            .checked_add(jiff::SignedDuration::from_hours(24 * 7))
            .unwrap();
        let late = seeder.clone_with(Trust::anchored(root.kid().clone()).at(later));
        let e = late.refresh().await.unwrap_err().to_string();
        assert!(
            e.contains("--allow-expired") && e.contains("expired at"),
            "{e}"
        );
        late.clone()
            .with_allow_expired(true)
            .refresh()
            .await
            .unwrap();
    }
}

/// Attack review, round 6: a `re-root` whose marker write failed after its index write left
/// the marker without the new root, and the retried `re-root` ("nothing to do") never wrote
/// it: a fresh reader pinned at a ring key then took a fork signed with that key. Now a write
/// that adds a dedicated root records it in the marker before the index; a retry after an
/// index write that did not happen goes through (its pending root is no fork) while another
/// root is refused; and every write first brings a marker that is behind the verified index
/// up to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_marker_names_a_new_root_before_the_index_and_a_stale_marker_is_repaired() {
    for (ring, dir) in rings("marker_names_a_new_root_first").await {
        let Some(dir) = dir else {
            continue; // the marker file is edited by hand here
        };
        let (_a, _b, _anchor) = seeded(&ring).await;
        let roots = tempfile::tempdir().unwrap();
        let root = file_root(roots.path(), "root.pem").await;
        let other = file_root(roots.path(), "other.pem").await;
        let marker_file = dir.path().join("root.json");
        let before = std::fs::read_to_string(&marker_file).unwrap();
        let before_index = raw_index(&ring).await;

        // The marker already names the new root (its write went ahead), the index write did
        // not happen: later writes, a retried re-root among them, are refused (a pending
        // root is honoured only within the write that recorded it, from the very index it
        // started from: attack review, round 7), until the marker is put back.
        let mut ahead: serde_json::Value = serde_json::from_str(&before).unwrap();
        ahead["root"] = serde_json::json!({
            "seq": before_index.roots.len() + 1,
            "kid": root.kid().as_str(),
        });
        std::fs::write(&marker_file, ahead.to_string()).unwrap();
        for signer in [&other, &root] {
            let refused = ring
                .clone()
                .with_root(signer.clone())
                .re_root(signer)
                .await
                .expect_err("the index does not pass through the root the marker names");
            assert!(
                refused
                    .to_string()
                    .contains("does not pass through the dedicated root"),
                "{refused}"
            );
        }
        assert_eq!(raw_index(&ring).await, before_index, "nothing written");
        std::fs::write(&marker_file, &before).unwrap();
        assert!(
            ring.clone()
                .with_root(root.clone())
                .re_root(&root)
                .await
                .unwrap()
        );
        let marker = ring.history_marker().await.unwrap().unwrap();
        assert_eq!(
            marker.root,
            Some((before_index.roots.len() as u64 + 1, root.kid().clone()))
        );
        assert_eq!(marker.version, raw_index(&ring).await.version);

        // The marker falls behind (as after a failed marker write): it stands as the re-root
        // left it before its index write, naming the new root and the digest of the index
        // about to be written. The retried re-root has nothing to do to the index, but brings
        // the marker up to it.
        let written = raw_index(&ring).await;
        let mut behind: serde_json::Value = serde_json::from_str(&before).unwrap();
        behind["root"] = serde_json::json!({
            "seq": before_index.roots.len() + 1,
            "kid": root.kid().as_str(),
        });
        // Without the digest recorded, the same index is one its writers did not write (a
        // fork at the next version, attack review round 9): refused, nothing written.
        std::fs::write(&marker_file, behind.to_string()).unwrap();
        let refused = ring
            .clone()
            .with_root(root.clone())
            .re_root(&root)
            .await
            .expect_err("an index the marker does not vouch for");
        assert!(
            refused
                .to_string()
                .contains("does not record as written after version"),
            "{refused}"
        );
        assert_eq!(raw_index(&ring).await, written, "nothing written");
        behind["next"] = serde_json::json!([written.digest()]);
        std::fs::write(&marker_file, behind.to_string()).unwrap();
        assert!(
            !ring
                .clone()
                .with_root(root.clone())
                .re_root(&root)
                .await
                .unwrap(),
            "nothing to do"
        );
        let repaired = ring.history_marker().await.unwrap().unwrap();
        assert_eq!(
            repaired.root, marker.root,
            "the marker names the root again"
        );
        assert_eq!(repaired.version, marker.version);
    }
}

/// Attack review, round 8: a history forked with ring keys, put in the index at a version
/// far ahead of the marker (whose writers write it after every index write), was raised into
/// the marker by the seeder's next write and then signed under the new dedicated root by a
/// routine `re-root`. An index more than one version ahead of the marker now stops every
/// write, with what it is and what to restore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_signs_an_index_more_than_one_version_ahead_of_the_marker() {
    for (ring, _dir) in rings("index_ahead_of_marker").await {
        let (a, _b, _anchor) = seeded(&ring).await;
        let real = raw_index(&ring).await;
        let evil = pair();
        let evil_kid = kid(&evil).short().to_owned();
        let fork = fork_from_ring_key(&real, &a, &evil);
        overwrite_index(&ring, &fork.to_json()).await;
        let roots = tempfile::tempdir().unwrap();
        let root = file_root(roots.path(), "root.pem").await;
        for (what, result) in [
            (
                "re-root",
                ring.clone()
                    .with_root(root.clone())
                    .re_root(&root)
                    .await
                    .map(|_| ()),
            ),
            ("refresh", ring.refresh().await.map(|_| ())),
            ("push", ring.push(&pair()).await.map(|_| ())),
        ] {
            let e = result.expect_err(what).to_string();
            assert!(
                e.contains("were not written by them") && e.contains(&evil_kid),
                "{what}: {e}"
            );
        }
        assert_eq!(raw_index(&ring).await, fork, "nothing signed");
        let marker = ring.history_marker().await.unwrap().unwrap();
        assert_eq!(marker.version, real.version, "the marker was not raised");
    }
}

/// Attack review, round 9: a history forked with ring keys and put in the index at the
/// marker's own version (or the next), before the ring's first re-root, was signed under the
/// new dedicated root by the routine `re-root`: the marker recorded a version but not which
/// index. Now every write records the digest of the index it is about to write before
/// writing it, and no write builds on an index at that version or the next that the marker
/// does not vouch for, whatever signs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_signs_a_fork_at_the_markers_version_or_the_next() {
    for (ring, _dir) in rings("fork_at_marker_version").await {
        let (a, _b, _anchor) = seeded(&ring).await;
        let real = raw_index(&ring).await;
        let marker = ring.history_marker().await.unwrap().unwrap();
        assert_eq!(marker.version, real.version);
        assert_eq!(marker.digest.as_deref(), Some(real.digest().as_str()));
        assert_eq!(marker.vouches(&real), kseal_keystore::Vouch::Written);
        assert!(marker.next.is_empty(), "cleared once the index was written");
        let evil = pair();
        let evil_kid = kid(&evil).short().to_owned();
        for offset in [0, 1] {
            let mut fork = fork_from_ring_key(&real, &a, &evil);
            fork.version = real.version + offset;
            trust::sign_index(&mut fork, &evil).unwrap();
            assert_eq!(marker.vouches(&fork), kseal_keystore::Vouch::NotWritten);
            overwrite_index(&ring, &fork.to_json()).await;
            let roots = tempfile::tempdir().unwrap();
            let root = file_root(roots.path(), "root.pem").await;
            for (what, result) in [
                (
                    "re-root",
                    ring.clone()
                        .with_root(root.clone())
                        .re_root(&root)
                        .await
                        .map(|_| ()),
                ),
                ("refresh", ring.refresh().await.map(|_| ())),
                ("push", ring.push(&pair()).await.map(|_| ())),
            ] {
                let e = result.expect_err(what).to_string();
                assert!(
                    e.contains("its writers did not write it")
                        && e.contains(&evil_kid)
                        && e.contains(&real.digest()[..16]),
                    "{what} at marker + {offset}: {e}"
                );
            }
            assert_eq!(raw_index(&ring).await, fork, "nothing signed");
            assert_eq!(
                ring.history_marker().await.unwrap().unwrap(),
                marker,
                "the marker is unchanged"
            );
        }
        // The real index put back (as the refusal says) is written on again.
        overwrite_index(&ring, &real.to_json()).await;
        ring.refresh().await.expect("the vouched index is built on");
    }
}

/// Attack review, round 10 (N5): a write went through but its marker write failed (the
/// marker still records it as pending); whoever can write the index puts the older index
/// back, and the next routine refresh would sign on top of it, undoing the write. The store's
/// previous version is that pending write: the refresh refuses and names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_write_undone_by_putting_the_older_index_back_is_refused() {
    for (ring, dir) in rings("pending_write_undone").await {
        if dir.is_some() {
            continue; // a directory keeps no previous version
        }
        let (_a, b, _anchor) = seeded(&ring).await;
        let older = raw_index(&ring).await;
        ring.activate(kid(&b).as_str(), Duration::ZERO)
            .await
            .unwrap();
        let written = raw_index(&ring).await;
        assert_eq!(written.version, older.version + 1);
        // The marker as the failed marker write left it: the older version, the new one
        // pending.
        let (text, version) = ring
            .store()
            .read(&ring.root_name(), None)
            .await
            .unwrap()
            .unwrap();
        let mut pending: serde_json::Value = serde_json::from_str(&text).unwrap();
        pending["version"] = serde_json::json!(older.version);
        pending["digest"] = serde_json::json!(older.digest());
        pending["next"] = serde_json::json!([written.digest()]);
        ring.store()
            .compare_and_swap(&ring.root_name(), &pending.to_string(), Some(&version), &[])
            .await
            .unwrap();
        overwrite_index(&ring, &older.to_json()).await;
        let refused = ring.refresh().await.expect_err("the undone write is named");
        let text = refused.to_string();
        assert!(
            text.contains("was undone") && text.contains(&written.digest()),
            "{text}"
        );
        assert_eq!(raw_index(&ring).await, older, "nothing signed");
        // The store shows the write went through: it is restored, never dropped.
        let refused = ring
            .clone()
            .with_drop_pending([written.digest()])
            .refresh()
            .await
            .expect_err("an undone write the store shows is not dropped")
            .to_string();
        assert!(refused.contains("was undone"), "{refused}");
        assert_eq!(raw_index(&ring).await, older, "nothing signed");
        // Put back as the refusal says: the refresh finishes the write.
        overwrite_index(&ring, &written.to_json()).await;
        ring.refresh().await.unwrap();
        assert_eq!(raw_index(&ring).await.active, Some(kid(&b)));
    }
}

/// Sets the history marker of `ring` to `version`, vouching for `digest`, with `next` pending:
/// what a write that recorded its digest and then failed (or whose index write was undone)
/// leaves.
async fn mark_pending(ring: &Ring, version: u64, digest: &str, next: &[String]) {
    let (text, current) = ring
        .store()
        .read(&ring.root_name(), None)
        .await
        .unwrap()
        .unwrap();
    let mut marker: serde_json::Value = serde_json::from_str(&text).unwrap();
    marker["version"] = serde_json::json!(version);
    marker["digest"] = serde_json::json!(digest);
    marker["next"] = serde_json::json!(next);
    ring.store()
        .compare_and_swap(&ring.root_name(), &marker.to_string(), Some(&current), &[])
        .await
        .unwrap();
}

/// Attack review, round 12 (U1): the check above read the store's previous version, which
/// whoever can write the index moves by writing it twice: the routine refresh then signed on
/// top of the older index, silently erasing the activation. Now no write builds on the
/// index at the marker's version while the marker records a write after it as pending,
/// whatever the store's previous version is: the refusal names the pending digest and the
/// index's version, active key and digest, and says what to do in either case. Restoring
/// the pending write (the marker catches up to it) or `--drop-pending` (after checking) lets
/// writes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_write_undone_by_writing_the_index_twice_is_refused_until_restored_or_dropped() {
    for (ring, dir) in rings("pending_write_twice").await {
        let (a, b, _anchor) = seeded(&ring).await;
        let older = raw_index(&ring).await;
        ring.activate(kid(&b).as_str(), Duration::ZERO)
            .await
            .unwrap();
        let written = raw_index(&ring).await;
        mark_pending(&ring, older.version, &older.digest(), &[written.digest()]).await;
        // The older index put back, twice: the store's previous version is no longer the
        // activation.
        overwrite_index(&ring, &older.to_json()).await;
        overwrite_index(&ring, &older.to_json()).await;
        for (what, result) in [
            ("refresh", ring.refresh().await.map(|_| ())),
            ("push", ring.push(&pair()).await.map(|_| ())),
        ] {
            let e = result.expect_err(what).to_string();
            for part in [
                written.digest(),
                older.digest(),
                format!("version {}", older.version),
                kid(&a).short().to_owned(),
                "--drop-pending".to_owned(),
                "restore".to_owned(),
            ] {
                assert!(e.contains(&part), "{what}: {part} missing from: {e}");
            }
        }
        assert_eq!(raw_index(&ring).await, older, "nothing signed");
        // Restored as the refusal says: the marker catches up to the pending write and the
        // refresh goes on from it.
        overwrite_index(&ring, &written.to_json()).await;
        ring.refresh().await.expect("the pending write caught up");
        let now = raw_index(&ring).await;
        assert_eq!(
            (now.version, now.active.clone()),
            (written.version + 1, Some(kid(&b)))
        );
        let marker = ring.history_marker().await.unwrap().unwrap();
        assert_eq!(marker.digest, Some(now.digest()));
        assert!(marker.next.is_empty());
        if dir.is_none() {
            // Secrets Manager keeps the undone write among the index's versions: it is never
            // dropped (`a_pending_write_the_store_holds_is_never_dropped`).
            continue;
        }
        // Undone again on a directory (no versions to search), and this time the seeder drops
        // it by its digest after checking: the write goes on from the older index and its
        // own marker update clears the pending digest.
        let undone = raw_index(&ring).await;
        ring.activate(kid(&a).as_str(), Duration::ZERO)
            .await
            .unwrap();
        let activation = raw_index(&ring).await;
        mark_pending(
            &ring,
            undone.version,
            &undone.digest(),
            &[activation.digest()],
        )
        .await;
        overwrite_index(&ring, &undone.to_json()).await;
        overwrite_index(&ring, &undone.to_json()).await;
        ring.refresh().await.expect_err("pending");
        ring.clone()
            .with_drop_pending([activation.digest()])
            .refresh()
            .await
            .expect("dropped after checking");
        let now = raw_index(&ring).await;
        assert_eq!(
            (now.version, now.active.clone()),
            (undone.version + 1, Some(kid(&b))),
            "built on the index put back"
        );
        let marker = ring.history_marker().await.unwrap().unwrap();
        assert_eq!(marker.digest, Some(now.digest()));
        assert!(marker.next.is_empty(), "the pending digest is cleared");
        ring.refresh().await.expect("nothing pending any more");
    }
}

/// Attack review, round 13 (U2): the undone write of round 12 (the marker write failed after
/// the index write, then the older index was written twice so that AWSPREVIOUS no longer
/// shows it) was still among the index's stored versions, yet `--drop-pending`, which the
/// refusal offered, erased it silently. Now every write, and every drop above all, first
/// searches the store's versions (deprecated ones included): a pending write found there is
/// named by its VersionId and never dropped. A drop names the digest it drops, so a flag
/// left set (another digest) drops nothing, and every pending write must be named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_write_the_store_holds_is_never_dropped() {
    for (ring, dir) in rings("pending_write_stored").await {
        let (_a, b, _anchor) = seeded(&ring).await;
        let older = raw_index(&ring).await;
        if dir.is_some() {
            // A directory keeps no versions: every pending write must be named to drop.
            let mut lost = [older.clone(), older.clone()];
            for (n, l) in lost.iter_mut().enumerate() {
                l.version += 1;
                l.updated = l
                    .updated
                    .checked_add(jiff::SignedDuration::from_secs(n as i64 + 1))
                    .unwrap();
            }
            let digests = [lost[0].digest(), lost[1].digest()];
            mark_pending(&ring, older.version, &older.digest(), &digests).await;
            let e = ring
                .clone()
                .with_drop_pending([digests[0].clone()])
                .refresh()
                .await
                .expect_err("one pending write not named")
                .to_string();
            assert!(
                e.contains(&format!("--drop-pending {},{}", digests[0], digests[1])),
                "{e}"
            );
            assert_eq!(raw_index(&ring).await, older, "nothing signed");
            ring.clone()
                .with_drop_pending(digests.clone())
                .refresh()
                .await
                .expect("both named");
            continue;
        }
        ring.activate(kid(&b).as_str(), Duration::ZERO)
            .await
            .unwrap();
        let written = raw_index(&ring).await;
        let written_id = ring.index_version().await.unwrap().unwrap();
        mark_pending(&ring, older.version, &older.digest(), &[written.digest()]).await;
        let marker = ring.history_marker().await.unwrap().unwrap();
        overwrite_index(&ring, &older.to_json()).await;
        overwrite_index(&ring, &older.to_json()).await;
        let previous = ring
            .store()
            .read_previous(&ring.index_name())
            .await
            .unwrap();
        assert_ne!(
            previous.map(|(_, v)| v),
            Some(written_id.clone()),
            "AWSPREVIOUS moved"
        );
        let leftover = "ab".repeat(32);
        for (what, drop) in [
            ("no flag", vec![]),
            ("its digest", vec![written.digest()]),
            ("a leftover digest", vec![leftover.clone()]),
        ] {
            let e = ring
                .clone()
                .with_drop_pending(drop)
                .refresh()
                .await
                .expect_err(what)
                .to_string();
            for part in [
                format!("VersionId {written_id}"),
                format!("version {}", written.version),
                kid(&b).short().to_owned(),
                written.digest(),
                "nothing dropped".to_owned(),
                "--move-to-version-id".to_owned(),
            ] {
                assert!(e.contains(&part), "{what}: {part} missing from: {e}");
            }
            assert_eq!(raw_index(&ring).await, older, "{what}: nothing signed");
            assert_eq!(
                ring.history_marker().await.unwrap().unwrap(),
                marker,
                "{what}: the pending write is still recorded"
            );
        }
        // Restored as the refusal says: the refresh builds on it.
        overwrite_index(&ring, &written.to_json()).await;
        ring.clone()
            .with_drop_pending([leftover])
            .refresh()
            .await
            .expect("restored");
        let now = raw_index(&ring).await;
        assert_eq!(
            (now.version, now.active.clone()),
            (written.version + 1, Some(kid(&b)))
        );
    }
}

/// A drop searches the store first, and a search that fails refuses the drop (a seeder role
/// without `ListSecretVersionIds`, an outage): the routine refusal then keeps its general
/// advice. Once the store answers, the drop goes on and counts the versions it searched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_whose_search_of_the_store_fails_is_refused() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let proxy = sm::FaultProxy::start(&endpoint).await;
    let location = kseal_keystore::Location::SecretsManager {
        prefix: sm::unique_prefix("pending_search_fails"),
        region: None,
    };
    let aws = AwsOptions {
        endpoint_url: Some(proxy.url()),
        region: Some("us-east-1".into()),
        ..AwsOptions::default()
    };
    let ring = Ring::open(&location, &aws).await.unwrap();
    let (_a, b, _anchor) = seeded(&ring).await;
    let real = raw_index(&ring).await;
    let mut lost = real.clone();
    lost.version += 1;
    lost.active = Some(kid(&b));
    mark_pending(&ring, real.version, &real.digest(), &[lost.digest()]).await;
    proxy.inject("ListSecretVersionIds", sm::Fault::AccessDenied, 100);
    let e = ring
        .clone()
        .with_drop_pending([lost.digest()])
        .refresh()
        .await
        .expect_err("the search failed")
        .to_string();
    assert!(
        e.contains("a drop first searches") && e.contains("ListSecretVersionIds"),
        "{e}"
    );
    let e = ring.refresh().await.expect_err("pending").to_string();
    assert!(
        e.contains(&format!("--drop-pending {}", lost.digest()))
            && e.contains("list-secret-version-ids"),
        "{e}"
    );
    assert_eq!(raw_index(&ring).await, real, "nothing signed");
    proxy.clear_faults();
    let warnings = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let said = warnings.clone();
    ring.clone()
        .with_drop_pending([lost.digest()])
        .with_warnings(move |w| said.lock().unwrap().push(w.to_owned()))
        .refresh()
        .await
        .expect("dropped once searched");
    let said = warnings.lock().unwrap().clone();
    assert!(
        matches!(said.as_slice(), [w] if w.contains("stored versions of the index holds it")),
        "{said:?}"
    );
}

/// The store lists every stored version of a secret, those with no staging label (deprecated)
/// included, each readable by its id; at most one past the limit asked; none on a directory
/// (no history).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_lists_every_stored_version_of_the_index() {
    for (ring, dir) in rings("store_versions").await {
        let name = ring.index_name();
        let store = ring.store();
        let mut written = Vec::new();
        let mut current = None;
        for n in 0..5 {
            let text = format!("{{\"n\":{n}}}");
            current = Some(
                store
                    .compare_and_swap(&name, &text, current.as_ref(), &[])
                    .await
                    .unwrap(),
            );
            written.push((current.clone().unwrap(), text));
        }
        let listed = store.versions(&name, 100).await.unwrap();
        if dir.is_some() {
            assert!(listed.is_empty(), "{listed:?}");
            continue;
        }
        assert_eq!(listed.len(), 5, "{listed:?}");
        for (id, text) in &written {
            assert!(listed.contains(id), "{id} not listed");
            let (read, _) = store.read(&name, Some(id)).await.unwrap().unwrap();
            assert_eq!(read.as_str(), text);
        }
        assert_eq!(store.versions(&name, 2).await.unwrap().len(), 3);
        // (A secret that does not exist lists nothing on Secrets Manager; moto answers a 500.)
    }
}

/// A write that recorded its digest in the marker and then failed before its index write (a
/// crash, a network error): the next write is refused (the store cannot tell it from a write
/// undone), and goes on with `--drop-pending`. A write in flight, whose index and marker
/// writes land a moment later, is waited for and built on, with no flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_needs_drop_pending_and_one_in_flight_is_awaited() {
    for (ring, _dir) in rings("pending_write_failed").await {
        let (a, b, _anchor) = seeded(&ring).await;
        let real = raw_index(&ring).await;
        // The crashed write's index never reached the store: only its digest is recorded.
        let mut lost = real.clone();
        lost.version += 1;
        lost.active = Some(kid(&b));
        mark_pending(&ring, real.version, &real.digest(), &[lost.digest()]).await;
        let e = ring.refresh().await.expect_err("pending").to_string();
        assert!(
            e.contains(&format!("--drop-pending {}", lost.digest())),
            "{e}"
        );
        assert_eq!(raw_index(&ring).await, real, "nothing signed");
        // Only the very digest drops it: another one (the index's own) drops nothing.
        let e = ring
            .clone()
            .with_drop_pending([real.digest()])
            .refresh()
            .await
            .expect_err("another digest")
            .to_string();
        assert!(e.contains(&lost.digest()), "{e}");
        assert_eq!(raw_index(&ring).await, real, "nothing signed");
        let warnings = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let said = warnings.clone();
        ring.clone()
            .with_drop_pending([lost.digest().to_uppercase()])
            .with_warnings(move |w| said.lock().unwrap().push(w.to_owned()))
            .push(&pair())
            .await
            .expect("dropped");
        let now = raw_index(&ring).await;
        assert_eq!(now.version, real.version + 1);
        // The drop is said, naming the version and digest dropped.
        let said = warnings.lock().unwrap().clone();
        assert!(
            matches!(said.as_slice(), [w] if w.contains(&lost.digest())
                && w.contains(&format!("version {}", lost.version))),
            "{said:?}"
        );
        let marker = ring.history_marker().await.unwrap().unwrap();
        assert_eq!(
            (marker.version, marker.digest.clone()),
            (now.version, Some(now.digest()))
        );
        assert!(marker.next.is_empty());

        // A write in flight: its digest recorded, its index and marker writes a moment away.
        let older = now;
        ring.activate(kid(&b).as_str(), Duration::ZERO)
            .await
            .unwrap();
        let flying = raw_index(&ring).await;
        mark_pending(&ring, older.version, &older.digest(), &[flying.digest()]).await;
        overwrite_index(&ring, &older.to_json()).await;
        overwrite_index(&ring, &older.to_json()).await;
        let writer = {
            let ring = ring.clone();
            let flying = flying.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(600)).await;
                overwrite_index(&ring, &flying.to_json()).await;
                mark_pending(&ring, flying.version, &flying.digest(), &[]).await;
            })
        };
        ring.refresh()
            .await
            .expect("the write in flight is awaited");
        writer.await.unwrap();
        let now = raw_index(&ring).await;
        assert_eq!(
            (now.version, now.active.clone()),
            (flying.version + 1, Some(kid(&b))),
            "built on the write that landed"
        );
        // --drop-pending never drops a pending write that landed: the marker catches up to it
        // and the write builds on it.
        let before = now;
        ring.activate(kid(&a).as_str(), Duration::ZERO)
            .await
            .unwrap();
        let landed = raw_index(&ring).await;
        mark_pending(&ring, before.version, &before.digest(), &[landed.digest()]).await;
        ring.clone()
            .with_drop_pending([landed.digest()])
            .refresh()
            .await
            .expect("built on the pending write");
        let now = raw_index(&ring).await;
        assert_eq!(
            (now.version, now.active.clone()),
            (landed.version + 1, Some(kid(&a)))
        );
    }
}

/// Attack review, round 11 (L1): under a history marker an older kseal wrote (no digest), a
/// fork signed with a ring key at the marker's own version was adopted by the upgraded
/// seeder's first write, its digest recorded for good. Now no write builds on an index such
/// a marker cannot vouch for unless the seeder adopts it by its digest (`--adopt-index`), and
/// the refusal prints the version, active key and keys to check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_marker_without_a_digest_only_an_adopted_index_is_written_on() {
    for (ring, dir) in rings("legacy_marker_adopt").await {
        let (a, _b, _anchor) = seeded(&ring).await;
        let real = raw_index(&ring).await;
        // The marker as an older kseal wrote it: no digest.
        legacy_marker(&ring).await;
        // A fork at the marker's own version, signed with the anchor (a ring key).
        let evil = pair();
        let mut fork = fork_from_ring_key(&real, &a, &evil);
        fork.version = real.version;
        trust::sign_index(&mut fork, &evil).unwrap();
        overwrite_index(&ring, &fork.to_json()).await;
        let refused = ring.refresh().await.expect_err("not adopted").to_string();
        assert!(
            refused.contains("--adopt-index") && refused.contains(kid(&evil).short()),
            "{refused}"
        );
        // Adopting the digest of the index the seeder wrote does not adopt the fork.
        let wrong = ring
            .clone()
            .with_adopt_index(Some(real.digest()))
            .refresh()
            .await
            .expect_err("another index's digest")
            .to_string();
        // Secrets Manager's versions hold the real index beside the fork: both are named
        // (round 14, AF1: `an_adoption_is_refused_while_the_store_holds_another_index_…`).
        // A directory holds the fork alone, whose key `evil` has no key secret (round 15, PG:
        // `a_fork_listing_a_key_without_its_key_secret_is_never_adopted`).
        let told = if dir.is_some() {
            "with no key secret"
        } else {
            "nothing adopted"
        };
        assert!(wrong.contains(told), "{wrong}");
        assert_eq!(raw_index(&ring).await, fork, "nothing signed");
        assert!(
            ring.history_marker()
                .await
                .unwrap()
                .unwrap()
                .digest
                .is_none(),
            "a refused adoption records nothing in the marker"
        );
        // The real index back, adopted: written on, and the marker records digests again.
        overwrite_index(&ring, &real.to_json()).await;
        let adopt = if dir.is_some() {
            real.digest()
        } else {
            format!("{},{}", real.digest(), fork.digest())
        };
        ring.clone()
            .with_adopt_index(Some(adopt))
            .refresh()
            .await
            .unwrap();
        let marker = ring.history_marker().await.unwrap().unwrap();
        assert_eq!(
            marker.digest,
            Some(raw_index(&ring).await.digest()),
            "the marker vouches by digest again"
        );
        ring.refresh().await.expect("no adoption needed any more");
    }
}

/// Attack review, round 16 (N2): a history marker with no version at all (written by builds
/// from before versions were recorded) was read as "nothing to check": every check of a
/// marker without a digest was guarded by `version > 0`, so a fork at any version, signed with
/// a ring key, was written on. Now such a marker fails closed as one with a version does: no
/// write builds on an index it cannot vouch for until the seeder adopts one, a fork whose key
/// has no key secret is never adopted, and the adopted write leaves a marker that records its
/// version and digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_marker_without_a_version_only_an_adopted_index_is_written_on() {
    for (ring, dir) in rings("versionless_marker_adopt").await {
        let (a, _b, _anchor) = seeded(&ring).await;
        let real = raw_index(&ring).await;
        strip_marker(&ring, &["version", "digest", "next"]).await;
        let marker = ring.history_marker().await.unwrap().unwrap();
        assert_eq!((marker.version, marker.digest.as_deref()), (0, None));
        // The real index itself is not written on before it is adopted.
        let refused = ring.refresh().await.expect_err("not adopted").to_string();
        assert!(
            refused.contains("--adopt-index") && refused.contains(&real.digest()),
            "{refused}"
        );
        // A fork ahead of it (the marker bounds no version), signed with the anchor.
        let evil = pair();
        let mut fork = fork_from_ring_key(&real, &a, &evil);
        fork.roots.truncate(1);
        fork.version = real.version + 1;
        trust::sign_index(&mut fork, &a).unwrap();
        overwrite_index(&ring, &fork.to_json()).await;
        for adopt in [None, Some(fork.digest())] {
            let refused = ring
                .clone()
                .with_adopt_index(adopt)
                .refresh()
                .await
                .expect_err("a fork is never written on")
                .to_string();
            assert!(
                refused.contains(kid(&evil).short()) && refused.contains("no key secret"),
                "{refused}"
            );
            assert_eq!(raw_index(&ring).await, fork, "nothing signed");
        }
        // On Secrets Manager, a fork that skips versions past the newest older index stored
        // is refused even when it lists only keys the ring stores (`a` active, `b` retired
        // here): the seeder's writes raise the version by one.
        if dir.is_none() {
            let mut skip = real.clone();
            skip.version = real.version + 5;
            skip.active = Some(kid(&a));
            trust::sign_index(&mut skip, &a).unwrap();
            overwrite_index(&ring, &skip.to_json()).await;
            let refused = ring
                .clone()
                .with_adopt_index(Some(skip.digest()))
                .refresh()
                .await
                .expect_err("a fork that skips versions")
                .to_string();
            assert!(
                refused.contains("skips versions") && refused.contains("no --adopt-index"),
                "{refused}"
            );
            assert_eq!(raw_index(&ring).await, skip, "nothing signed");
        }
        assert_eq!(
            ring.history_marker().await.unwrap().unwrap().digest,
            None,
            "a refused adoption records nothing in the marker"
        );
        // The real index put back and adopted: written on, and the marker records a version
        // and a digest from then on.
        overwrite_index(&ring, &real.to_json()).await;
        ring.clone()
            .with_adopt_index(Some(real.digest()))
            .refresh()
            .await
            .unwrap();
        let now = raw_index(&ring).await;
        let marker = ring.history_marker().await.unwrap().unwrap();
        assert_eq!(
            (marker.version, marker.digest),
            (now.version, Some(now.digest())),
            "on {}",
            if dir.is_some() {
                "a directory"
            } else {
                "Secrets Manager"
            }
        );
        ring.refresh().await.expect("no adoption needed any more");
    }
}

/// Rewrites the history marker of `ring` as an older kseal wrote it: its version, no digest.
async fn legacy_marker(ring: &Ring) {
    strip_marker(ring, &["digest", "next"]).await;
}

/// Rewrites the history marker of `ring` without `fields`, as older builds wrote it (no
/// digest: an older kseal; no version either: builds from before versions were recorded).
async fn strip_marker(ring: &Ring, fields: &[&str]) {
    let (text, version) = ring
        .store()
        .read(&ring.root_name(), None)
        .await
        .unwrap()
        .unwrap();
    let mut old: serde_json::Value = serde_json::from_str(&text).unwrap();
    for field in fields {
        old.as_object_mut().unwrap().remove(*field);
    }
    ring.store()
        .compare_and_swap(&ring.root_name(), &old.to_string(), Some(&version), &[])
        .await
        .unwrap();
}

/// A seeded ring whose active key is `b` (K2), with a third key retired, under a marker an
/// older kseal wrote; and the fork of its index that its anchor `a` (K1, a ring key) signs at
/// the same version: `a` active, `b` retired (attack review, round 14, AF1).
async fn real_and_k1_fork(ring: &Ring) -> (KeyPair, KeyPair, Index, Index) {
    let (a, b, _anchor) = seeded(ring).await;
    let c = pair();
    ring.push(&c).await.unwrap();
    ring.activate(kid(&b).as_str(), Duration::ZERO)
        .await
        .unwrap();
    ring.retire(kid(&c).as_str(), 7).await.unwrap();
    let real = raw_index(ring).await;
    assert_eq!(real.retired.len(), 1);
    legacy_marker(ring).await;
    let mut fork = real.clone();
    fork.active = Some(kid(&a));
    fork.keys.retain(|e| e.kid == kid(&a));
    let mut gone = real.retired[0].clone();
    gone.kid = kid(&b);
    fork.retired.push(gone);
    trust::sign_index(&mut fork, &a).unwrap();
    assert_eq!(fork.version, real.version);
    (a, b, real, fork)
}

/// Attack review, round 14 (AF1): under a marker an older kseal wrote (no digest), a fork at
/// the marker's version signed with the anchor (a ring key; `a` active, the real active key
/// `b` retired) was offered for adoption with its keys alone, adopted, and signed on: `b`'s
/// mirror then left every cluster. The store's versions held the real index beside it. Now
/// the adoption is neither offered nor taken while the store holds two indexes of that
/// version, flag or not: each is named by its VersionId, active key, keys, retired keys and
/// SHA-256, with the command that restores it, and an adoption names the adopted index first
/// and every other one after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adoption_is_refused_while_the_store_holds_another_index_of_its_version() {
    for (ring, dir) in rings("adopt_beside_real").await {
        if dir.is_some() {
            continue; // a directory keeps no versions: `under_a_marker_without_a_digest_…`
        }
        let (a, b, real, fork) = real_and_k1_fork(&ring).await;
        let real_id = ring.index_version().await.unwrap().unwrap();
        overwrite_index(&ring, &fork.to_json()).await;
        let fork_id = ring.index_version().await.unwrap().unwrap();
        for (what, adopt) in [
            ("no flag", None),
            ("the fork's digest", Some(fork.digest())),
            ("the real digest", Some(real.digest())),
            (
                "the real one first",
                Some(format!("{},{}", real.digest(), fork.digest())),
            ),
        ] {
            let e = ring
                .clone()
                .with_adopt_index(adopt)
                .refresh()
                .await
                .expect_err(what)
                .to_string();
            for part in [
                format!("VersionId {real_id}: version {}", real.version),
                format!("VersionId {fork_id} (current)"),
                format!("active key {}", kid(&b).short()),
                format!("active key {}", kid(&a).short()),
                format!(
                    "retired keys {}, {}",
                    real.retired[0].kid.short(),
                    kid(&b).short()
                ),
                real.digest(),
                fork.digest(),
                format!("--move-to-version-id {real_id} --remove-from-version-id {fork_id}"),
                "nothing adopted".to_owned(),
            ] {
                assert!(e.contains(&part), "{what}: {part} missing from: {e}");
            }
            assert_eq!(raw_index(&ring).await, fork, "{what}: nothing signed");
            let marker = ring.history_marker().await.unwrap().unwrap();
            assert!(marker.digest.is_none(), "{what}: nothing recorded");
        }
        // Restored as the refusal says: the adoption must still name both.
        overwrite_index(&ring, &real.to_json()).await;
        let e = ring
            .clone()
            .with_adopt_index(Some(real.digest()))
            .refresh()
            .await
            .expect_err("the fork not named")
            .to_string();
        let both = format!("--adopt-index {},{}", real.digest(), fork.digest());
        assert!(e.contains(&both), "{e}");
        ring.clone()
            .with_adopt_index(Some(both.trim_start_matches("--adopt-index ").to_owned()))
            .refresh()
            .await
            .expect("adopted, every other index named");
        let now = raw_index(&ring).await;
        assert_eq!(
            (now.version, now.active.clone()),
            (real.version + 1, Some(kid(&b)))
        );
        let marker = ring.history_marker().await.unwrap().unwrap();
        assert_eq!(marker.digest, Some(now.digest()));
    }
}

/// Attack review, round 14 (AF1b): the attacker writes a K1 fork at the marker's version and
/// then one at the next; the refusal said "restore to version 3 from the store's previous
/// versions", and the seeder restored the latest version 3: the fork. Now the refusal names
/// every index of the marker's version the store holds, each with its keys, retired keys,
/// SHA-256, the command that restores it and the adoption to give then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_ahead_of_a_digest_less_marker_names_every_stored_index_of_its_version() {
    for (ring, dir) in rings("adopt_fork_ahead").await {
        if dir.is_some() {
            continue; // a directory keeps no versions to name
        }
        let (a, b, real, fork) = real_and_k1_fork(&ring).await;
        let real_id = ring.index_version().await.unwrap().unwrap();
        overwrite_index(&ring, &fork.to_json()).await;
        let fork_id = ring.index_version().await.unwrap().unwrap();
        let mut ahead = fork.clone();
        ahead.version += 1;
        trust::sign_index(&mut ahead, &a).unwrap();
        overwrite_index(&ring, &ahead.to_json()).await;
        let ahead_id = ring.index_version().await.unwrap().unwrap();
        let e = ring.refresh().await.expect_err("ahead").to_string();
        for part in [
            "the store holds 2 of that version".to_owned(),
            format!("VersionId {real_id}: version {}", real.version),
            format!("VersionId {fork_id}: version {}", fork.version),
            format!("active key {}", kid(&b).short()),
            format!(
                "retired keys {}, {}",
                real.retired[0].kid.short(),
                kid(&b).short()
            ),
            format!("--move-to-version-id {real_id} --remove-from-version-id {ahead_id}"),
            format!("--adopt-index {},{}", real.digest(), fork.digest()),
        ] {
            assert!(e.contains(&part), "{part} missing from: {e}");
        }
        assert_eq!(raw_index(&ring).await, ahead, "nothing signed");
        // Further ahead: named the same way.
        let mut further = ahead.clone();
        further.version += 1;
        trust::sign_index(&mut further, &a).unwrap();
        overwrite_index(&ring, &further.to_json()).await;
        let further_id = ring.index_version().await.unwrap().unwrap();
        let e = ring.refresh().await.expect_err("further ahead").to_string();
        for part in [
            format!("VersionId {real_id}: version {}", real.version),
            format!("VersionId {fork_id}: version {}", fork.version),
            format!("--move-to-version-id {real_id} --remove-from-version-id {further_id}"),
        ] {
            assert!(e.contains(&part), "{part} missing from: {e}");
        }
        // Restored as it says, and adopted naming the fork as not written.
        overwrite_index(&ring, &real.to_json()).await;
        ring.clone()
            .with_adopt_index(Some(format!("{},{}", real.digest(), fork.digest())))
            .refresh()
            .await
            .expect("adopted");
        assert_eq!(raw_index(&ring).await.active, Some(kid(&b)));
    }
}

/// The happy path of an adoption: a single index of the marker's version, stored once or
/// written again unchanged, is offered with its active key, keys and retired keys, and
/// adopted by its digest alone, as before round 14.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_index_of_the_markers_version_is_adopted_by_its_digest_alone() {
    for (ring, _dir) in rings("adopt_single").await {
        let (_a, b, real, _fork) = real_and_k1_fork(&ring).await;
        // Written again unchanged: the same digest, one index.
        overwrite_index(&ring, &real.to_json()).await;
        let e = ring.refresh().await.expect_err("not adopted").to_string();
        for part in [
            format!("version {}, active key {}", real.version, kid(&b).short()),
            format!("retired keys {}", real.retired[0].kid.short()),
            format!("--adopt-index {}", real.digest()),
        ] {
            assert!(e.contains(&part), "{part} missing from: {e}");
        }
        ring.clone()
            .with_adopt_index(Some(real.digest()))
            .refresh()
            .await
            .expect("adopted");
        let now = raw_index(&ring).await;
        assert_eq!(
            (now.version, now.active.clone()),
            (real.version + 1, Some(kid(&b)))
        );
        assert_eq!(
            ring.history_marker().await.unwrap().unwrap().digest,
            Some(now.digest())
        );
    }
}

/// An adoption searches the store's versions first, flag or not, and a search that fails (a
/// seeder role without `ListSecretVersionIds`, an outage) neither offers nor takes it: an
/// index of that version left unseen could be the seeder's (attack review, round 14, AF1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adoption_whose_search_of_the_store_fails_is_refused() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let proxy = sm::FaultProxy::start(&endpoint).await;
    let location = kseal_keystore::Location::SecretsManager {
        prefix: sm::unique_prefix("adopt_search_fails"),
        region: None,
    };
    let aws = AwsOptions {
        endpoint_url: Some(proxy.url()),
        region: Some("us-east-1".into()),
        ..AwsOptions::default()
    };
    let ring = Ring::open(&location, &aws).await.unwrap();
    let (_a, _b, real, _fork) = real_and_k1_fork(&ring).await;
    proxy.inject("ListSecretVersionIds", sm::Fault::AccessDenied, 100);
    for adopt in [None, Some(real.digest())] {
        let e = ring
            .clone()
            .with_adopt_index(adopt.clone())
            .refresh()
            .await
            .expect_err("the search failed")
            .to_string();
        assert!(
            e.contains("before an adoption is offered or taken")
                && e.contains("ListSecretVersionIds")
                && !e.contains("--adopt-index"),
            "{adopt:?}: {e}"
        );
        assert_eq!(raw_index(&ring).await, real, "nothing signed");
    }
    proxy.clear_faults();
    ring.clone()
        .with_adopt_index(Some(real.digest()))
        .refresh()
        .await
        .expect("adopted once searched");
}

/// Attack review, round 15 (PG): under a marker an older kseal wrote (no digest), with the
/// real index of the marker's version gone from the store's versions (Secrets Manager purges
/// unlabelled versions past 100 once a day old), a fork signed with the anchor (a ring key)
/// was the only index of its version, offered and adopted: its active key `e` had no key
/// secret, which no writer of the ring leaves. Now such an index is neither offered nor
/// adopted, flag or not, and the missing key secret is named; the real index restored is
/// adopted. Simulated by a marker at the version after the real index (whose index the store
/// no longer holds), as moto never purges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_listing_a_key_without_its_key_secret_is_never_adopted() {
    for (ring, dir) in rings("adopt_no_key_secret").await {
        let (a, b, real, _k1_fork) = real_and_k1_fork(&ring).await;
        // The marker at the next version, as the seeder's purged write left it.
        let (text, version) = ring
            .store()
            .read(&ring.root_name(), None)
            .await
            .unwrap()
            .unwrap();
        let mut marker: serde_json::Value = serde_json::from_str(&text).unwrap();
        marker["version"] = serde_json::json!(real.version + 1);
        ring.store()
            .compare_and_swap(&ring.root_name(), &marker.to_string(), Some(&version), &[])
            .await
            .unwrap();
        // The fork: `e` listed and active, its key secret never stored.
        let e = pair();
        let mut fork = real.clone();
        fork.version = real.version + 1;
        fork.keys.push(
            kseal_keystore::IndexEntry::new(e.certificate(), std::time::SystemTime::now()).unwrap(),
        );
        fork.active = Some(kid(&e));
        trust::sign_index(&mut fork, &a).unwrap();
        overwrite_index(&ring, &fork.to_json()).await;
        for adopt in [None, Some(fork.digest())] {
            let refused = ring
                .clone()
                .with_adopt_index(adopt.clone())
                .refresh()
                .await
                .expect_err("a key without its key secret")
                .to_string();
            for part in [
                format!("lists key {} with no key secret", kid(&e).short()),
                ring.key_name(&kid(&e)),
                "no --adopt-index adopts it".to_owned(),
            ] {
                assert!(
                    refused.contains(&part),
                    "{dir:?} {adopt:?}: {part} missing: {refused}"
                );
            }
            assert!(
                !refused.contains(&format!("--adopt-index {}", fork.digest())),
                "{dir:?} {adopt:?}: the fork is not offered: {refused}"
            );
            assert_eq!(raw_index(&ring).await, fork, "nothing signed");
            assert!(
                ring.history_marker()
                    .await
                    .unwrap()
                    .unwrap()
                    .digest
                    .is_none(),
                "nothing adopted"
            );
        }
        // The real index of that version restored: every key it lists has its key secret,
        // and it is adopted (naming the fork the store still holds, on Secrets Manager).
        let mut restored = real.clone();
        restored.version = real.version + 1;
        trust::sign_index(&mut restored, &a).unwrap();
        overwrite_index(&ring, &restored.to_json()).await;
        let adopt = if dir.is_some() {
            restored.digest()
        } else {
            format!("{},{}", restored.digest(), fork.digest())
        };
        ring.clone()
            .with_adopt_index(Some(adopt))
            .refresh()
            .await
            .expect("adopted");
        let now = raw_index(&ring).await;
        assert_eq!(
            (now.version, now.active.clone()),
            (real.version + 2, Some(kid(&b)))
        );
        assert_eq!(
            ring.history_marker().await.unwrap().unwrap().digest,
            Some(now.digest())
        );
    }
}

/// Attack review, round 15 (PG): the seeder's own cache had read the real index of the
/// marker's version (its digest), which the store no longer held, and the adoption of a fork
/// of that version (every key of it stored) ignored it. Now the index this machine read is
/// another index of that version: named, and the adoption is neither offered nor taken unless
/// it names it too; the real index restored is adopted as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adoption_counts_the_index_this_machine_read_at_its_version() {
    for (ring, dir) in rings("adopt_seen_index").await {
        let (a, b, real, k1_fork) = real_and_k1_fork(&ring).await;
        let (text, version) = ring
            .store()
            .read(&ring.root_name(), None)
            .await
            .unwrap()
            .unwrap();
        let mut marker: serde_json::Value = serde_json::from_str(&text).unwrap();
        marker["version"] = serde_json::json!(real.version + 1);
        ring.store()
            .compare_and_swap(&ring.root_name(), &marker.to_string(), Some(&version), &[])
            .await
            .unwrap();
        // The real index of the next version, read by this machine, then purged; the fork
        // (`a` active, `b` retired: every key it lists has its key secret) alone in the store.
        let mut restored = real.clone();
        restored.version = real.version + 1;
        trust::sign_index(&mut restored, &a).unwrap();
        let mut fork = k1_fork.clone();
        fork.version = real.version + 1;
        trust::sign_index(&mut fork, &a).unwrap();
        overwrite_index(&ring, &fork.to_json()).await;
        let seeder = ring
            .clone()
            .with_seen_index(restored.version, &restored.digest());
        for adopt in [None, Some(fork.digest())] {
            let refused = seeder
                .clone()
                .with_adopt_index(adopt.clone())
                .refresh()
                .await
                .expect_err("the index this machine read")
                .to_string();
            for part in [
                format!(
                    "SHA-256 {}, which the store no longer holds",
                    restored.digest()
                ),
                format!("SHA-256 {}", fork.digest()),
                "nothing adopted".to_owned(),
            ] {
                assert!(
                    refused.contains(&part),
                    "{dir:?} {adopt:?}: {part} missing: {refused}"
                );
            }
            assert_eq!(raw_index(&ring).await, fork, "nothing signed");
        }
        // Without what this machine read, the fork is offered: the cache is what tells.
        let offered = ring.refresh().await.expect_err("not adopted").to_string();
        assert!(
            offered.contains(&format!("--adopt-index {}", fork.digest())),
            "{offered}"
        );
        // The real index restored: adopted, naming the fork the store still holds.
        overwrite_index(&ring, &restored.to_json()).await;
        let adopt = if dir.is_some() {
            restored.digest()
        } else {
            format!("{},{}", restored.digest(), fork.digest())
        };
        seeder
            .with_adopt_index(Some(adopt))
            .refresh()
            .await
            .expect("adopted");
        let now = raw_index(&ring).await;
        assert_eq!(
            (now.version, now.active.clone()),
            (real.version + 2, Some(kid(&b)))
        );
    }
}
