//! The ring's signed history: whoever can write the index but not read the ring's private keys
//! cannot make a reader accept another sealing key.
//!
//! Each attack runs on a directory ring (always) and on Secrets Manager through the moto
//! emulator (skipped without it outside CI, failing under `CI=true`). The attacker rewrites
//! `R/index` with the store's own compare-and-swap, as a role with `PutSecretValue` on the
//! index could.

use std::time::{Duration, SystemTime};

use kseal_keys::{CertificateOptions, KeyPair, KeySize};
use kseal_keystore::trust::{self, RootRecord};
use kseal_keystore::{
    AwsOptions, Error, INDEX_SCHEMA, Index, IndexEntry, Kid, Location, Ring, SignOutcome, Trust,
    UNSIGNED_INDEX_SCHEMA, Verified,
};
use kseal_testkit::sm;

/// Test-only 2048-bit keys; do not copy (kseal generates 4096-bit keys).
pub(crate) fn pair() -> KeyPair {
    KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("generate a key")
}

pub(crate) fn kid(p: &KeyPair) -> Kid {
    Kid::of(p.public_key())
}

/// The rings a test runs on: a directory, and Secrets Manager when the emulator runs.
pub(crate) async fn rings(test: &str) -> Vec<(Ring, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let location = Location::Directory {
        path: dir.path().to_owned(),
        insecure_perms: false,
    };
    let mut out = vec![(
        Ring::open(&location, &AwsOptions::default())
            .await
            .expect("open the ring"),
        Some(dir),
    )];
    if let Some(endpoint) = sm::endpoint() {
        let location = Location::SecretsManager {
            prefix: sm::unique_prefix(test),
            region: None,
        };
        let aws = AwsOptions {
            endpoint_url: Some(endpoint),
            region: Some("us-east-1".into()),
            ..AwsOptions::default()
        };
        out.push((
            Ring::open(&location, &aws).await.expect("open the ring"),
            None,
        ));
    }
    out
}

/// Replaces the index with `text`, as an attacker holding only write access to it would.
pub(crate) async fn overwrite_index(ring: &Ring, text: &str) {
    let current = ring.index_version().await.expect("the index version");
    ring.store()
        .compare_and_swap(&ring.index_name(), text, current.as_ref(), &[])
        .await
        .expect("write the index");
}

pub(crate) async fn raw_index(ring: &Ring) -> Index {
    ring.clone_with(Trust::legacy())
        .snapshot(None)
        .await
        .expect("read the index")
        .expect("an index")
        .index
}

pub(crate) trait CloneWith {
    fn clone_with(&self, trust: Trust) -> Ring;
}

impl CloneWith for Ring {
    fn clone_with(&self, trust: Trust) -> Ring {
        self.clone().with_trust(trust)
    }
}

/// A seeded ring: `a` (the anchor, active) and `b` pushed, not active.
pub(crate) async fn seeded(ring: &Ring) -> (KeyPair, KeyPair, Kid) {
    let a = pair();
    let b = pair();
    assert!(ring.push(&a).await.expect("push").activated);
    ring.push(&b).await.expect("push");
    let snap = ring
        .snapshot(None)
        .await
        .expect("read the index")
        .expect("an index");
    let Verified::Signed { anchor, .. } = snap.verified else {
        panic!("a new ring is signed")
    };
    assert_eq!(anchor, kid(&a), "the first key anchors the history");
    assert_eq!(snap.index.schema, INDEX_SCHEMA);
    (a, b, anchor)
}

pub(crate) fn untrusted_reason(
    result: kseal_keystore::Result<Option<kseal_keystore::Snapshot>>,
) -> String {
    match result {
        Err(Error::Untrusted { reason, .. }) => reason,
        Err(e) => panic!("expected an untrusted index, got another error: {e}"),
        Ok(_) => panic!("a tampered index was accepted"),
    }
}

#[tokio::test]
async fn every_write_is_signed_and_verifies_from_the_anchor() {
    for (ring, _dir) in rings("signed_writes").await {
        let (a, b, anchor) = seeded(&ring).await;
        let pinned = ring.clone_with(Trust::anchored(anchor.clone()));
        let v1 = pinned.snapshot(None).await.unwrap().unwrap();
        pinned
            .activate(kid(&b).as_str(), Duration::ZERO)
            .await
            .unwrap();
        let v2 = pinned.snapshot(None).await.unwrap().unwrap();
        assert_eq!(v2.index.active, Some(kid(&b)));
        assert!(v2.index.version > v1.index.version, "versions grow");
        // Retiring the anchor hands the root to the active key, signed by both.
        pinned.retire(kid(&a).as_str(), 7).await.unwrap();
        let v3 = pinned.snapshot(None).await.unwrap().unwrap();
        assert_eq!(v3.index.roots.len(), 2);
        assert_eq!(
            v3.verified,
            Verified::Signed {
                anchor: anchor.clone(),
                root: kid(&b),
                root_seq: 2,
                dedicated: false,
                version: v3.index.version,
                expires: v3.index.expires,
                expired: false,
            }
        );
        assert_eq!(v3.index.retired[0].kid, kid(&a));
        // And the next write is signed by the new root.
        let c = pair();
        pinned.push(&c).await.unwrap();
        let v4 = pinned.snapshot(None).await.unwrap().unwrap();
        assert_eq!(v4.index.signature.as_ref().unwrap().kid, kid(&b));
    }
}

#[tokio::test]
async fn an_index_writer_cannot_make_its_own_key_active() {
    for (ring, _dir) in rings("attacker_key").await {
        let (_a, _b, anchor) = seeded(&ring).await;
        let pinned = ring.clone_with(Trust::anchored(anchor.clone()));
        let evil = pair();
        let mut index = raw_index(&ring).await;
        index
            .keys
            .push(IndexEntry::new(evil.certificate(), SystemTime::UNIX_EPOCH).unwrap());
        index.active = Some(kid(&evil));
        // Unchanged signature: it no longer verifies.
        overwrite_index(&ring, &index.to_json()).await;
        let reason = untrusted_reason(pinned.snapshot(None).await);
        assert!(
            reason.contains("signature") && reason.contains("does not verify"),
            "{reason}"
        );
        // Signed with the attacker's own key: not the root.
        trust::sign_index(&mut index, &evil).unwrap();
        overwrite_index(&ring, &index.to_json()).await;
        let reason = untrusted_reason(pinned.snapshot(None).await);
        assert!(reason.contains("not by the current root"), "{reason}");
        // Even on first use: a history must verify from its own anchor.
        let reason = untrusted_reason(ring.clone_with(Trust::first_use()).snapshot(None).await);
        assert!(reason.contains("not by the current root"), "{reason}");
        // A writer refuses to build on it.
        let err = pinned.push(&pair()).await.unwrap_err();
        assert!(matches!(err, Error::Untrusted { .. }), "{err}");
    }
}

#[tokio::test]
async fn each_forged_field_of_the_index_is_refused() {
    for (ring, _dir) in rings("tamper_matrix").await {
        let (_a, b, anchor) = seeded(&ring).await;
        let pinned = ring.clone_with(Trust::anchored(anchor.clone()));
        let good = raw_index(&ring).await;
        let other = pair();
        type Forge = Box<dyn Fn(&mut Index)>;
        let b_kid = kid(&b);
        let other_entry = IndexEntry::new(other.certificate(), SystemTime::now()).unwrap();
        let forgeries: Vec<(&str, Forge)> = vec![
            (
                "active",
                Box::new(move |i: &mut Index| i.active = Some(b_kid.clone())),
            ),
            ("no active key", Box::new(|i: &mut Index| i.active = None)),
            ("version", Box::new(|i: &mut Index| i.version += 10)),
            (
                "updated",
                Box::new(|i: &mut Index| {
                    i.updated = jiff::Timestamp::UNIX_EPOCH;
                }),
            ),
            (
                "added (skips the activation delay)",
                Box::new(|i: &mut Index| {
                    i.keys[1].added = jiff::Timestamp::UNIX_EPOCH;
                }),
            ),
            (
                "a key removed",
                Box::new(|i: &mut Index| {
                    i.keys.pop();
                }),
            ),
            (
                "a key added",
                Box::new(move |i: &mut Index| i.keys.push(other_entry.clone())),
            ),
            (
                "retired list",
                Box::new(|i: &mut Index| {
                    i.retired.push(kseal_keystore::trust::RetiredEntry {
                        kid: Kid::parse(&"e".repeat(64)).unwrap(),
                        retired: jiff::Timestamp::UNIX_EPOCH,
                    });
                }),
            ),
            ("ring name", Box::new(|i: &mut Index| i.ring.push('x'))),
            (
                "signature removed",
                Box::new(|i: &mut Index| i.signature = None),
            ),
            (
                "signature bytes",
                Box::new(|i: &mut Index| {
                    let s = i.signature.as_mut().unwrap();
                    s.sig = format!("AAAA{}", &s.sig[4..]);
                }),
            ),
            (
                "root chain emptied",
                Box::new(|i: &mut Index| i.roots.clear()),
            ),
            (
                "root key swapped",
                Box::new(move |i: &mut Index| {
                    i.roots[0].spki = {
                        use base64::Engine as _;
                        base64::engine::general_purpose::STANDARD
                            .encode(other.public_key().to_spki_der())
                    };
                }),
            ),
            (
                "downgraded to the unsigned schema",
                Box::new(|i: &mut Index| {
                    i.schema = UNSIGNED_INDEX_SCHEMA;
                }),
            ),
        ];
        for (what, forge) in &forgeries {
            let mut index = good.clone();
            forge(&mut index);
            overwrite_index(&ring, &index.to_json()).await;
            match pinned.snapshot(None).await {
                Err(Error::Untrusted { .. } | Error::Malformed { .. }) => {}
                Err(e) => panic!("{what}: refused with an unexpected error: {e}"),
                Ok(_) => panic!("{what}: a forged index was accepted"),
            }
        }
        // The fields checked against the certificate, each in turn.
        for field in ["fingerprint", "bits", "notBefore", "notAfter"] {
            let mut index = good.clone();
            let e = &mut index.keys[0];
            match field {
                "fingerprint" => e.fingerprint = "SHA256:forged".into(),
                "bits" => e.bits = 8192,
                "notBefore" => e.not_before = jiff::Timestamp::UNIX_EPOCH,
                _ => e.not_after = jiff::Timestamp::MAX,
            }
            overwrite_index(&ring, &index.to_json()).await;
            match pinned.snapshot(None).await {
                Err(Error::Malformed { reason, .. }) => assert!(reason.contains(field), "{reason}"),
                other => panic!("{field}: expected a malformed index, got {other:?}"),
            }
        }
        // Back to the good one: it verifies again.
        overwrite_index(&ring, &good.to_json()).await;
        pinned.snapshot(None).await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn a_history_rooted_at_another_key_is_refused_by_a_pinned_reader() {
    for (ring, _dir) in rings("replaced_history").await {
        let (_a, _b, anchor) = seeded(&ring).await;
        let evil = pair();
        // A complete, valid history of the attacker's own.
        let mut index = Index::empty(&raw_index(&ring).await.ring, SystemTime::now());
        index
            .keys
            .push(IndexEntry::new(evil.certificate(), SystemTime::now()).unwrap());
        index.active = Some(kid(&evil));
        index
            .roots
            .push(trust::genesis(&index.ring, &evil).unwrap());
        index.schema = INDEX_SCHEMA;
        index.version = 1000;
        trust::sign_index(&mut index, &evil).unwrap();
        overwrite_index(&ring, &index.to_json()).await;
        let reason = untrusted_reason(
            ring.clone_with(Trust::anchored(anchor.clone()))
                .snapshot(None)
                .await,
        );
        assert!(
            reason.contains("does not pass through the pinned root")
                && reason.contains(anchor.short()),
            "{reason}"
        );
        // Unpinned, it is a valid history: which is why sealing requires a pin.
        let snap = ring
            .clone_with(Trust::first_use())
            .snapshot(None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(snap.verified.anchor(), Some(&kid(&evil)));
    }
}

#[tokio::test]
async fn a_rolled_back_index_is_refused() {
    for (ring, _dir) in rings("rollback").await {
        let (_a, b, anchor) = seeded(&ring).await;
        let old = raw_index(&ring).await;
        ring.activate(kid(&b).as_str(), Duration::ZERO)
            .await
            .unwrap();
        let new = raw_index(&ring).await;
        overwrite_index(&ring, &old.to_json()).await;
        let reader = ring.clone_with(Trust::anchored(anchor).min_version(new.version));
        let reason = untrusted_reason(reader.snapshot(None).await);
        assert!(reason.contains("rolled-back"), "{reason}");
    }
}

#[tokio::test]
async fn a_root_record_not_signed_by_its_predecessor_is_refused() {
    for (ring, _dir) in rings("root_chain").await {
        let (_a, _b, anchor) = seeded(&ring).await;
        let evil = pair();
        let mut index = raw_index(&ring).await;
        // The attacker appends a root record for their key, signed by their key only, and signs
        // the index with it.
        let forged = trust::rotate_root(&index.ring, &index.roots[0], &evil, &evil).unwrap();
        index.roots.push(RootRecord {
            kid: kid(&evil),
            ..forged
        });
        trust::sign_index(&mut index, &evil).unwrap();
        overwrite_index(&ring, &index.to_json()).await;
        let reason = untrusted_reason(
            ring.clone_with(Trust::anchored(anchor.clone()))
                .snapshot(None)
                .await,
        );
        assert!(reason.contains("previous root"), "{reason}");
    }
}

#[tokio::test]
async fn an_unsigned_index_opens_but_is_refused_where_a_pin_is_required_until_signed() {
    for (ring, _dir) in rings("migration").await {
        // An index as kseal wrote it before signed histories (schema 1), with its key secret.
        let a = pair();
        let stored = ring
            .store()
            .create_immutable(
                &ring.key_name(&kid(&a)),
                &kseal_keystore::KeyEntry::from_pair(&a).unwrap().to_json(),
                kid(&a).as_str(),
                &[],
                &|_| true,
            )
            .await;
        stored.unwrap();
        let intruder = pair();
        let mut index = Index::empty(
            match ring.store() {
                kseal_keystore::Store::Directory(_) => kseal_keystore::DEFAULT_RING,
                kseal_keystore::Store::SecretsManager(_) => ring.name(),
            },
            SystemTime::now(),
        );
        for p in [&a, &intruder] {
            index
                .keys
                .push(IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
        }
        index.active = Some(kid(&a));
        assert_eq!(index.schema, UNSIGNED_INDEX_SCHEMA);
        overwrite_index(&ring, &index.to_json()).await;

        let legacy = ring.clone_with(Trust::legacy());
        assert_eq!(
            legacy.snapshot(None).await.unwrap().unwrap().verified,
            Verified::Unsigned
        );
        let reason = untrusted_reason(ring.clone_with(Trust::first_use()).snapshot(None).await);
        assert!(reason.contains("kseal keys sign"), "{reason}");
        // Writers refuse to build on it, and say how to sign.
        let err = legacy.activate(kid(&a).as_str(), Duration::ZERO).await;
        assert!(matches!(
            err,
            Ok(kseal_keystore::ActivateOutcome::AlreadyActive(_))
        ));
        let err = legacy.push(&pair()).await.unwrap_err();
        assert!(err.to_string().contains("kseal keys sign"), "{err}");

        // The seeder signs it: anchored at the active key; the entry with no key secret is
        // left out.
        let SignOutcome::Signed { anchor, dropped } = legacy.sign().await.unwrap() else {
            panic!("signed")
        };
        assert_eq!(anchor, kid(&a));
        assert_eq!(dropped, vec![kid(&intruder)]);
        let snap = ring
            .clone_with(Trust::anchored(anchor.clone()))
            .snapshot(None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(snap.index.keys.len(), 1);
        assert_eq!(snap.index.active, Some(kid(&a)));
        assert_eq!(
            legacy.sign().await.unwrap(),
            SignOutcome::AlreadySigned(anchor)
        );
    }
}

#[tokio::test]
async fn of_two_rotations_from_the_same_active_key_only_the_first_activation_lands() {
    for (ring, _dir) in rings("activate_if").await {
        let (a, b, _anchor) = seeded(&ring).await;
        let c = pair();
        ring.push(&c).await.unwrap();
        let before = Some(kid(&a));
        let first = ring
            .activate_if(kid(&b).as_str(), Duration::ZERO, Some(&before))
            .await
            .unwrap();
        assert!(matches!(
            first,
            kseal_keystore::ActivateOutcome::Activated { .. }
        ));
        let second = ring
            .activate_if(kid(&c).as_str(), Duration::ZERO, Some(&before))
            .await
            .unwrap();
        assert_eq!(
            second,
            kseal_keystore::ActivateOutcome::Superseded {
                kid: kid(&c),
                active: Some(kid(&b)),
            }
        );
        let snap = ring.snapshot(None).await.unwrap().unwrap();
        assert_eq!(
            snap.index.active,
            Some(kid(&b)),
            "the first activation stays"
        );
    }
}

/// Issue 35, attack 1: whoever can write only the index rewrites the signed index as schema 1
/// (no signature) but keeps its roots, adds their own key and makes it active. No reader takes
/// it, and no routine writer signs it: push, activate, sign and push --if-empty all refuse
/// and name the downgrade.
#[tokio::test]
async fn a_signed_index_rewritten_as_unsigned_is_refused_by_every_reader_and_writer() {
    for (ring, _dir) in rings("downgrade").await {
        let (a, _b, anchor) = seeded(&ring).await;
        let mut forged = raw_index(&ring).await;
        let attacker = pair();
        forged
            .keys
            .push(IndexEntry::new(attacker.certificate(), SystemTime::now()).unwrap());
        forged.active = Some(kid(&attacker));
        forged.schema = UNSIGNED_INDEX_SCHEMA;
        forged.signature = None;
        assert!(!forged.roots.is_empty(), "the real roots are kept");
        // The same downgrade with only one of the signed history's fields left.
        let mut only_version = forged.clone();
        only_version.roots.clear();
        for text in [forged.to_json(), only_version.to_json()] {
            overwrite_index(&ring, &text).await;
            for trust in [
                Trust::legacy(),
                Trust::first_use().allow_unsigned(true),
                Trust::anchored(anchor.clone()),
            ] {
                let reader = ring.clone_with(trust);
                let err = reader.snapshot(None).await.unwrap_err();
                assert!(
                    err.to_string().contains("rewritten as unsigned"),
                    "reader: {err}"
                );
                let err = reader.push(&pair()).await.unwrap_err();
                assert!(err.to_string().contains("rewritten as unsigned"), "{err}");
                let err = reader
                    .activate(kid(&attacker).as_str(), Duration::ZERO)
                    .await
                    .unwrap_err();
                assert!(err.to_string().contains("rewritten as unsigned"), "{err}");
                let err = reader.sign().await.unwrap_err();
                assert!(err.to_string().contains("rewritten as unsigned"), "{err}");
                let err = reader.push_if_empty(&pair(), 7).await.unwrap_err();
                assert!(err.to_string().contains("rewritten as unsigned"), "{err}");
            }
        }
        // Nothing was signed over the forgery: restoring needs the store's previous version,
        // and the key the attacker added never became part of a signed index.
        drop(a);
    }
}

/// Issue 35, attack 1 (`--if-empty`): the index emptied of keys and history. A routine
/// `push --if-empty` (or push) must not start a new history over it: that would hand the
/// ring to a new key and drop every earlier one.
#[tokio::test]
async fn push_if_empty_refuses_an_index_that_was_emptied() {
    for (ring, _dir) in rings("emptied").await {
        let (_a, _b, _anchor) = seeded(&ring).await;
        let emptied = Index::empty(&raw_index(&ring).await.ring, SystemTime::now());
        overwrite_index(&ring, &emptied.to_json()).await;
        let writer = ring.clone_with(Trust::first_use().allow_unsigned(true));
        for result in [
            writer.push_if_empty(&pair(), 7).await.map(|_| ()),
            writer.push(&pair()).await.map(|_| ()),
        ] {
            // Refused by the seeder's floor in the history marker (an index older than the
            // last one written), or, for a ring without one, as an index kseal never writes.
            let err = result.unwrap_err().to_string();
            assert!(
                err.contains("an older index was put back")
                    || err.contains("holds no key and no signed history"),
                "{err}"
            );
        }
        // The index is still the emptied one: nothing signed it.
        assert!(!raw_index(&ring).await.is_signed());
    }
}

/// Issue 35, attack 1 (pinned `keys sign`): a pinned seeder never signs an unsigned index: the
/// ring was signed once, so an unsigned index now is a replacement, and the refusal says not to
/// sign it (instead of sending the seeder to `kseal keys sign`).
#[tokio::test]
async fn a_pinned_seeder_refuses_to_sign_a_replaced_unsigned_index() {
    for (ring, _dir) in rings("pinned-sign").await {
        let (_a, b, anchor) = seeded(&ring).await;
        // The index stripped of every signed field: a plain legacy-looking index whose active
        // key is the not-yet-activated `b`.
        let mut stripped = raw_index(&ring).await;
        stripped.schema = UNSIGNED_INDEX_SCHEMA;
        stripped.signature = None;
        stripped.roots.clear();
        stripped.retired.clear();
        stripped.version = 0;
        stripped.expires = None;
        stripped.active = Some(kid(&b));
        overwrite_index(&ring, &stripped.to_json()).await;
        let pinned = ring.clone_with(Trust::anchored(anchor.clone()));
        let err = pinned.sign().await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("pinned at anchor"), "{text}");
        assert!(text.contains("do not sign it"), "{text}");
        assert!(!raw_index(&ring).await.is_signed());
    }
}

/// Issue 35, attack 1 (overflow): a signed index at version 2^64-1 (only the root could sign
/// one) is never re-signed as version 0, which every reader's floor would then refuse or, worse,
/// a fresh reader would take as older than it is.
#[tokio::test]
async fn an_index_at_the_last_version_is_not_written_again() {
    for (ring, _dir) in rings("overflow").await {
        let (a, _b, anchor) = seeded(&ring).await;
        let mut index = raw_index(&ring).await;
        index.version = u64::MAX;
        index.signature = None;
        trust::sign_index(&mut index, &a).unwrap();
        overwrite_index(&ring, &index.to_json()).await;
        let pinned = ring.clone_with(Trust::anchored(anchor));
        assert_eq!(
            pinned.snapshot(None).await.unwrap().unwrap().index.version,
            u64::MAX
        );
        // Refused as far ahead of the history marker (its writers wrote version 2; round 8),
        // and, were the marker there too, as the last version there is.
        let err = pinned.push(&pair()).await.unwrap_err().to_string();
        assert!(
            err.contains("the last one there is") || err.contains("were not written by them"),
            "{err}"
        );
        assert_eq!(raw_index(&ring).await.version, u64::MAX);
    }
}

/// Issue 35: key secrets are read at their immutable first version. Whoever can put a new
/// value on a key secret (PutSecretValue on `R/keys/<kid>`) changes nothing a reader sees.
/// Secrets Manager only: a directory store has no versions (its key files are the operator's).
#[tokio::test]
async fn a_value_put_on_a_key_secret_later_changes_nothing() {
    for (ring, _dir) in rings("key-put").await {
        if matches!(ring.store(), kseal_keystore::Store::Directory(_)) {
            continue;
        }
        let (a, _b, _anchor) = seeded(&ring).await;
        let other = pair();
        ring.store()
            .put(
                &ring.key_name(&kid(&a)),
                &kseal_keystore::KeyEntry::from_pair(&other)
                    .unwrap()
                    .to_json(),
                &[],
            )
            .await
            .expect("put a new value on the key secret");
        let read = ring
            .read_key(&kid(&a))
            .await
            .expect("the key secret's first version is read");
        assert_eq!(kid(&read), kid(&a));
    }
}

/// Issue 35 (attack review): the migration of an unsigned index does not take the `added` its
/// writer chose: a key not active yet waits its activation delay from the migration, so a
/// back-dated `added` cannot skip it.
#[tokio::test]
async fn a_migrated_index_does_not_skip_the_activation_delay() {
    for (ring, _dir) in rings("backdate").await {
        let a = pair();
        let c = pair();
        ring.push(&a).await.unwrap();
        ring.push(&c).await.unwrap();
        let pinned = ring.clone_with(Trust::anchored(kid(&a)));
        let mut forged = raw_index(&ring).await;
        forged.schema = UNSIGNED_INDEX_SCHEMA;
        forged.signature = None;
        forged.roots.clear();
        forged.version = 0;
        forged.expires = None;
        for e in &mut forged.keys {
            e.added = jiff::Timestamp::UNIX_EPOCH;
        }
        overwrite_index(&ring, &forged.to_json()).await;
        // As for a ring an older kseal wrote (no history marker), which is what a migration
        // is for.
        ring.store()
            .schedule_deletion(&ring.root_name(), 7)
            .await
            .unwrap();
        ring.clone_with(Trust::legacy()).sign().await.unwrap();
        let out = pinned
            .activate(kid(&c).as_str(), kseal_keystore::DEFAULT_ACTIVATION_DELAY)
            .await
            .unwrap();
        assert!(
            matches!(out, kseal_keystore::ActivateOutcome::TooYoung { .. }),
            "the activation delay was skipped: {out:?}"
        );
    }
}

/// Issue 35 (attack review): on Secrets Manager a key secret with no version under its kid
/// (recreated, or written by something else) is refused, never read at its current version,
/// which whoever holds PutSecretValue on it chose.
#[tokio::test]
async fn a_key_secret_without_its_first_version_is_refused() {
    for (ring, _dir) in rings("key-recreated").await {
        if matches!(ring.store(), kseal_keystore::Store::Directory(_)) {
            continue;
        }
        let a = pair();
        ring.store()
            .create_immutable(
                &ring.key_name(&kid(&a)),
                &kseal_keystore::KeyEntry::from_pair(&a).unwrap().to_json(),
                "a-client-request-token-that-is-not-the-kid-0001",
                &[],
                &|_| true,
            )
            .await
            .unwrap();
        let err = ring.read_key(&kid(&a)).await.unwrap_err();
        assert!(
            err.to_string().contains("no version under its kid"),
            "{err}"
        );
    }
}

/// Issue 35 (attack review): an unpinned `kseal keys sign` never migrates a ring that was
/// signed before. The first signed write leaves a marker (`R/root`, a directory's `root.json`)
/// that whoever can write only the index cannot remove; an index stripped of every signed
/// field is then refused by the migration, pin or no pin.
#[tokio::test]
async fn a_ring_signed_once_is_never_migrated_again() {
    for (ring, _dir) in rings("marker").await {
        let (_a, b, _anchor) = seeded(&ring).await;
        let marker = ring
            .store()
            .read(&ring.root_name(), None)
            .await
            .unwrap()
            .expect("the first signed write leaves the marker");
        assert!(
            marker.0.contains(kid(&_a).as_str()),
            "{}",
            marker.0.as_str()
        );
        let mut stripped = raw_index(&ring).await;
        stripped.schema = UNSIGNED_INDEX_SCHEMA;
        stripped.signature = None;
        stripped.roots.clear();
        stripped.retired.clear();
        stripped.version = 0;
        stripped.expires = None;
        stripped.active = Some(kid(&b));
        overwrite_index(&ring, &stripped.to_json()).await;
        let err = ring.clone_with(Trust::legacy()).sign().await.unwrap_err();
        assert!(err.to_string().contains("was signed before"), "{err}");
        assert!(!raw_index(&ring).await.is_signed(), "nothing was signed");
    }
}

/// A pinned writer never creates a pinned ring again: with its index gone (deleted, or a
/// directory copy without it), a push under the pin refuses instead of starting a new history
/// under another root.
#[tokio::test]
async fn a_pinned_writer_does_not_recreate_a_ring_whose_index_is_gone() {
    let (ring, dir) = rings("recreate").await.remove(0);
    let dir = dir.expect("a directory ring");
    let (_a, _b, anchor) = seeded(&ring).await;
    std::fs::remove_file(dir.path().join("index.json")).unwrap();
    let err = ring
        .clone_with(Trust::anchored(anchor))
        .push(&pair())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("never created again"), "{err}");
    assert!(!dir.path().join("index.json").exists());
}
