//! The ring contract on AWS Secrets Manager: the real AWS SDK against the moto emulator
//! (`tests/moto/start.sh`; `scripts/test.sh` starts it and sets `KSEAL_TEST_SM_ENDPOINT`).
//!
//! Every test keeps its secrets under its own prefix (`kseal_testkit::sm::unique_prefix`):
//! the emulator's state is shared by every test of a run. Without the emulator each test
//! skips loudly, and fails under `CI=true`. moto accepts any credentials; the test
//! environment sets dummy ones (`AWS_ACCESS_KEY_ID=testing`, see `scripts/test.sh`).
//!
//! What moto cannot show (version purge, size and label limits, IAM resource scoping) is
//! listed in `docs/key-ring.md`, "What only real Secrets Manager can confirm".

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use kseal_keys::{CertificateOptions, KeyPair, KeySize};
use kseal_keystore::{
    ActivateOutcome, AwsOptions, Error, INDEX_SCHEMA, Index, IndexEntry, KeyEntry, Kid, Location,
    Put, Ring,
};
use kseal_testkit::sm::{self, Fault, FaultProxy};
use zeroize::Zeroizing;

// ---------------------------------------------------------------------------------------
// helpers

/// A fresh RSA key pair. Test-only 2048-bit keys, do not copy: kseal generates 4096-bit keys.
fn pair() -> KeyPair {
    KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("generate a key")
}

fn options(endpoint: &str) -> AwsOptions {
    AwsOptions {
        endpoint_url: Some(endpoint.to_owned()),
        region: Some("us-east-1".into()),
        ..Default::default()
    }
}

fn location(prefix: &str) -> Location {
    Location::SecretsManager {
        prefix: prefix.to_owned(),
        region: None,
    }
}

/// The ring `prefix` on the emulator (or on a [`FaultProxy`] in front of it) at `endpoint`.
async fn ring_at(endpoint: &str, prefix: &str) -> Ring {
    Ring::open(&location(prefix), &options(endpoint))
        .await
        .expect("open the ring")
}

/// A plain SDK client, to check what kseal's store does not expose (tags, version ids).
async fn sdk(endpoint: &str) -> aws_sdk_secretsmanager::Client {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .load()
        .await;
    aws_sdk_secretsmanager::Client::new(&config)
}

/// The secret's tags, sorted.
async fn tags_of(endpoint: &str, name: &str) -> Vec<(String, String)> {
    let out = sdk(endpoint)
        .await
        .describe_secret()
        .secret_id(name)
        .send()
        .await
        .expect("DescribeSecret");
    let mut tags: Vec<(String, String)> = out
        .tags()
        .iter()
        .map(|t| {
            (
                t.key().unwrap_or_default().to_owned(),
                t.value().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    tags.sort();
    tags
}

fn kid(p: &KeyPair) -> Kid {
    Kid::of(p.public_key())
}

/// The raw text of secret `name`, which must exist.
async fn raw(ring: &Ring, name: &str) -> Zeroizing<String> {
    ring.store()
        .read(name, None)
        .await
        .expect("read")
        .unwrap_or_else(|| panic!("{name} does not exist"))
        .0
}

/// A JSON object's property names.
fn property_names(value: &serde_json::Value) -> BTreeSet<&str> {
    value
        .as_object()
        .expect("a JSON object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// The reference sample's `secret.json`, made by a shell heredoc that pastes the PEM files
/// between quotes: raw newlines inside the strings, and no trailing newline in either value
/// (`$(cat file.pem)` strips it).
fn sample_secret_json(crt: &str, key: &str) -> String {
    format!(
        "{{\n  \"crt\": \"{}\",\n  \"key\": \"{}\"\n}}\n",
        crt.trim_end(),
        key.trim_end()
    )
}

/// An index for `ring` listing `pairs`, the first one active.
fn index_of(ring: &str, pairs: &[&KeyPair]) -> Index {
    let mut index = Index::empty(ring, SystemTime::now());
    for p in pairs {
        index
            .keys
            .push(IndexEntry::new(p.certificate(), SystemTime::now()).expect("index entry"));
    }
    index.active = pairs.first().map(|p| kid(p));
    index
}

// ---------------------------------------------------------------------------------------
// push, activate, index contents

#[tokio::test]
async fn first_push_stores_strict_json_indexes_and_activates_the_key() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("first_push");
    let ring = ring_at(&endpoint, &prefix).await;
    assert_eq!(
        ring.index_version().await.unwrap(),
        None,
        "a new ring has no index"
    );
    assert!(ring.snapshot(None).await.unwrap().is_none());

    let p = pair();
    let out = ring.push(&p).await.unwrap();
    assert_eq!(out.kid, kid(&p));
    assert_eq!(out.fingerprint, p.id().as_str());
    assert_eq!(out.stored, Put::Created);
    assert!(out.indexed);
    assert!(out.activated, "the first key of a ring seals at once");

    // The key secret: strict JSON with exactly "crt" and "key".
    let key_name = ring.key_name(&out.kid);
    assert_eq!(key_name, format!("{prefix}/keys/{}", out.kid));
    let text = raw(&ring, &key_name).await;
    let value: serde_json::Value =
        serde_json::from_str(&text).expect("the key secret is strict JSON");
    assert_eq!(property_names(&value), BTreeSet::from(["crt", "key"]));
    assert_eq!(value["crt"], p.certificate().to_pem());
    assert!(
        value["key"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN RSA PRIVATE KEY-----\n"),
        "PKCS #1, as Bitnami writes tls.key"
    );
    let back = KeyEntry::parse(&text, &key_name)
        .unwrap()
        .to_pair(&key_name)
        .unwrap();
    assert_eq!(back.id(), p.id());

    // The index lists it, active.
    let snap = ring.snapshot(None).await.unwrap().expect("an index");
    assert_eq!(snap.index.schema, INDEX_SCHEMA);
    assert_eq!(snap.index.ring, prefix);
    assert_eq!(snap.index.active, Some(out.kid.clone()));
    assert_eq!(snap.index.keys.len(), 1);
    let entry = &snap.index.keys[0];
    assert_eq!(entry.kid, out.kid);
    assert_eq!(entry.fingerprint, p.id().as_str());
    assert_eq!(entry.bits, 2048);
    assert_eq!(entry.crt, p.certificate().to_pem());
    assert_eq!(
        ring.index_version().await.unwrap(),
        Some(snap.version.clone())
    );
    assert_eq!(ring.read_key(&out.kid).await.unwrap().id(), p.id());
}

#[tokio::test]
async fn key_secrets_use_the_kid_as_request_token_and_carry_the_ring_tags() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("push_tags");
    let ring = ring_at(&endpoint, &prefix).await;
    let p = pair();
    let k = ring.push(&p).await.unwrap().kid;

    let key_name = ring.key_name(&k);
    let (_, version) = ring.store().read(&key_name, None).await.unwrap().unwrap();
    assert_eq!(
        version.0,
        k.as_str(),
        "ClientRequestToken = kid, so the version id is the kid"
    );
    assert_eq!(
        tags_of(&endpoint, &key_name).await,
        vec![
            ("kseal.dev/kid".to_owned(), k.to_string()),
            ("kseal.dev/part".to_owned(), "key".to_owned()),
            ("kseal.dev/ring".to_owned(), prefix.clone()),
        ]
    );
    assert_eq!(
        tags_of(&endpoint, &ring.index_name()).await,
        vec![
            ("kseal.dev/part".to_owned(), "index".to_owned()),
            ("kseal.dev/ring".to_owned(), prefix.clone()),
        ]
    );
}

#[tokio::test]
async fn pushing_the_same_key_again_changes_nothing() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let ring = ring_at(&endpoint, &sm::unique_prefix("push_twice")).await;
    let p = pair();
    let first = ring.push(&p).await.unwrap();
    let before = ring.snapshot(None).await.unwrap().unwrap();

    let again = ring.push(&p).await.unwrap();
    assert_eq!(again.kid, first.kid);
    assert_eq!(again.stored, Put::Existed);
    assert!(!again.indexed);
    assert!(!again.activated);

    let after = ring.snapshot(None).await.unwrap().unwrap();
    assert_eq!(after.version, before.version, "no index write");
    assert_eq!(after.index, before.index);
    assert_eq!(
        ring.index_version().await.unwrap(),
        Some(before.version.clone())
    );
}

#[tokio::test]
async fn second_key_seals_only_after_the_activation_delay() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let ring = ring_at(&endpoint, &sm::unique_prefix("activate")).await;
    let (a, b) = (pair(), pair());
    let (ka, kb) = (kid(&a), kid(&b));
    assert!(ring.push(&a).await.unwrap().activated);
    let pushed = ring.push(&b).await.unwrap();
    assert!(pushed.indexed);
    assert!(!pushed.activated, "a later key never seals on push");

    let snap = ring.snapshot(None).await.unwrap().unwrap();
    assert_eq!(snap.index.active, Some(ka.clone()));
    let added = SystemTime::from(snap.index.entry(&kb).unwrap().added);

    // Too young: nothing written.
    let delay = Duration::from_secs(3600);
    match ring.activate(kb.as_str(), delay).await.unwrap() {
        ActivateOutcome::TooYoung { kid, ready_at } => {
            assert_eq!(kid, kb);
            assert_eq!(ready_at, added + delay);
            let from_now = ready_at.duration_since(SystemTime::now()).unwrap();
            assert!(
                from_now > Duration::from_secs(3500) && from_now <= delay,
                "{from_now:?}"
            );
        }
        other => panic!("expected TooYoung, got {other:?}"),
    }
    assert_eq!(
        ring.index_version().await.unwrap(),
        Some(snap.version.clone()),
        "a refused activation writes nothing"
    );

    // No delay: activated.
    assert_eq!(
        ring.activate(kb.as_str(), Duration::ZERO).await.unwrap(),
        ActivateOutcome::Activated {
            kid: kb.clone(),
            previous: Some(ka.clone())
        }
    );
    let snap2 = ring.snapshot(None).await.unwrap().unwrap();
    assert_eq!(snap2.index.active, Some(kb.clone()));
    assert_ne!(snap2.version, snap.version);

    // Again: nothing to do, nothing written.
    assert_eq!(
        ring.activate(kb.as_str(), Duration::ZERO).await.unwrap(),
        ActivateOutcome::AlreadyActive(kb.clone())
    );
    assert_eq!(ring.index_version().await.unwrap(), Some(snap2.version));

    // By an 8-character prefix of the kid, and by Bitnami's fingerprint.
    assert_eq!(
        ring.activate(&ka.as_str()[..8], Duration::ZERO)
            .await
            .unwrap(),
        ActivateOutcome::Activated {
            kid: ka.clone(),
            previous: Some(kb.clone())
        }
    );
    assert_eq!(
        ring.activate(b.id().as_str(), Duration::ZERO)
            .await
            .unwrap(),
        ActivateOutcome::Activated {
            kid: kb.clone(),
            previous: Some(ka.clone())
        }
    );
    let snap3 = ring.snapshot(None).await.unwrap().unwrap();
    assert_eq!(snap3.index.active, Some(kb));
    assert_eq!(snap3.index.keys.len(), 2);

    let err = ring
        .activate(&"f".repeat(12), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownKey(_)), "{err:?}");
}

#[tokio::test]
async fn index_holds_only_public_data_in_the_documented_shape() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let ring = ring_at(&endpoint, &sm::unique_prefix("index_public")).await;
    let (a, b) = (pair(), pair());
    ring.push(&a).await.unwrap();
    ring.push(&b).await.unwrap();

    let text = raw(&ring, &ring.index_name()).await;
    assert!(
        !text.contains("PRIVATE KEY"),
        "the index holds a private key"
    );
    let value: serde_json::Value = serde_json::from_str(&text).expect("strict JSON");
    assert_eq!(
        property_names(&value),
        BTreeSet::from([
            "schema",
            "ring",
            "version",
            "active",
            "updated",
            "expires",
            "keys",
            "roots",
            "signature"
        ])
    );
    assert_eq!(value["schema"], 2);
    assert_eq!(value["version"], 2, "one version per write");
    assert_eq!(value["roots"][0]["kid"], kid(&a).as_str());
    assert_eq!(value["signature"]["kid"], kid(&a).as_str());
    assert_eq!(value["active"], kid(&a).as_str());
    let keys = value["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    for (entry, p) in keys.iter().zip([&a, &b]) {
        assert_eq!(
            property_names(entry),
            BTreeSet::from([
                "kid",
                "fingerprint",
                "added",
                "notBefore",
                "notAfter",
                "bits",
                "crt"
            ])
        );
        assert_eq!(entry["kid"], kid(p).as_str());
        assert_eq!(entry["bits"], 2048);
        assert!(
            entry["crt"]
                .as_str()
                .unwrap()
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        // RFC 3339 timestamps in UTC.
        for field in ["added", "notBefore", "notAfter"] {
            let t = entry[field].as_str().unwrap();
            assert!(t.ends_with('Z'), "{field}: {t}");
            t.parse::<jiff::Timestamp>().unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------
// compare-and-swap

#[tokio::test]
async fn compare_and_swap_with_a_stale_version_is_a_conflict() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("cas");
    let ring = ring_at(&endpoint, &prefix).await;
    let store = ring.store();
    let name = format!("{prefix}/doc");

    let v1 = store
        .compare_and_swap(&name, "one", None, &[])
        .await
        .unwrap();
    let err = store
        .compare_and_swap(&name, "again", None, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    assert_eq!(err.reason(), "conflict");
    assert!(err.is_transient());

    let v2 = store
        .compare_and_swap(&name, "two", Some(&v1), &[])
        .await
        .unwrap();
    assert_ne!(v2, v1);
    let err = store
        .compare_and_swap(&name, "stale", Some(&v1), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");

    let (text, version) = store.read(&name, None).await.unwrap().unwrap();
    assert_eq!((text.as_str(), &version), ("two", &v2));
    assert_eq!(
        store.current_version(&name).await.unwrap(),
        Some(v2.clone())
    );
    // The older version stays readable by id (moto keeps every version; so does Secrets
    // Manager while it is labelled AWSPREVIOUS).
    let (old, _) = store.read(&name, Some(&v1)).await.unwrap().unwrap();
    assert_eq!(old.as_str(), "one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushes_of_different_keys_both_land_in_the_index() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("concurrent_push");
    // Both writers go through a proxy (no faults) only to count the calls.
    let proxy = FaultProxy::start(&endpoint).await;
    let one = ring_at(&proxy.url(), &prefix).await;
    let two = ring_at(&proxy.url(), &prefix).await;

    const ROUNDS: usize = 5;
    let mut expected = Vec::new();
    for round in 0..ROUNDS {
        let (a, b) = (pair(), pair());
        let (ra, rb) = tokio::join!(one.push(&a), two.push(&b));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert!(ra.indexed && rb.indexed, "round {round}");
        if round == 0 {
            assert!(
                ra.activated ^ rb.activated,
                "exactly one of the first two keys seals"
            );
        } else {
            assert!(!ra.activated && !rb.activated);
        }
        expected.extend([kid(&a), kid(&b)]);
        let snap = one.snapshot(None).await.unwrap().unwrap();
        let listed: BTreeSet<&Kid> = snap.index.keys.iter().map(|e| &e.kid).collect();
        for k in &expected {
            assert!(listed.contains(k), "round {round}: key {k} was lost");
        }
        assert_eq!(snap.index.keys.len(), expected.len());
    }
    // One index write wins per CAS; every loser re-reads and re-applies. A put that lost at
    // the label move shows as more PutSecretValue calls than successful updates.
    let puts = proxy.count("PutSecretValue");
    let creates = proxy.count("CreateSecret");
    eprintln!(
        "concurrent pushes: {creates} CreateSecret, {puts} PutSecretValue, {} UpdateSecretVersionStage, {} DescribeSecret for {} index updates",
        proxy.count("UpdateSecretVersionStage"),
        proxy.count("DescribeSecret"),
        2 * ROUNDS
    );
    assert!(puts >= 2 * ROUNDS - 1);
}

#[tokio::test]
async fn racing_if_empty_pushes_leave_exactly_one_key() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("if_empty_race");
    let one = ring_at(&endpoint, &prefix).await;
    let two = ring_at(&endpoint, &prefix).await;
    let (a, b) = (pair(), pair());
    // Two seeders start at once: both find the ring empty, both store their key secret, and
    // the index's compare-and-swap lets one key in.
    let (ra, rb) = tokio::join!(one.push_if_empty(&a, 7), two.push_if_empty(&b, 7));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(
        ra.is_some() ^ rb.is_some(),
        "exactly one seeder adds its key"
    );
    let (winner, loser) = if ra.is_some() { (&a, &b) } else { (&b, &a) };
    let won = ra.or(rb).unwrap();
    assert!(won.indexed && won.activated);
    let snap = one.snapshot(None).await.unwrap().unwrap();
    let listed: Vec<&Kid> = snap.index.keys.iter().map(|e| &e.kid).collect();
    assert_eq!(listed, vec![&kid(winner)]);
    assert_eq!(snap.index.active, Some(kid(winner)));
    // The loser's key secret, indexed nowhere, is scheduled for deletion; the winner's stays.
    let loser_name = one.key_name(&kid(loser));
    assert_eq!(
        one.store().current_version(&loser_name).await.unwrap(),
        None
    );
    assert_eq!(one.read_key(&kid(winner)).await.unwrap().id(), winner.id());

    // Later: a ring with a key takes no other, and the same key again is a no-op.
    let version = one.index_version().await.unwrap();
    let c = pair();
    assert!(one.push_if_empty(&c, 7).await.unwrap().is_none());
    let again = one.push_if_empty(winner, 7).await.unwrap().unwrap();
    assert_eq!((again.stored, again.indexed), (Put::Existed, false));
    assert_eq!(one.index_version().await.unwrap(), version);
    assert_eq!(one.read_key(&kid(winner)).await.unwrap().id(), winner.id());
}

// ---------------------------------------------------------------------------------------
// retire

#[tokio::test]
async fn retire_refuses_the_active_key_and_schedules_deletion_of_another() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let ring = ring_at(&endpoint, &sm::unique_prefix("retire")).await;
    let (a, b, c) = (pair(), pair(), pair());
    for p in [&a, &b, &c] {
        ring.push(p).await.unwrap();
    }
    let before = ring.index_version().await.unwrap();

    let err = ring.retire(kid(&a).as_str(), 7).await.unwrap_err();
    assert!(matches!(err, Error::Refused(_)), "{err:?}");
    assert!(
        err.to_string().contains("is the active sealing key"),
        "{err}"
    );
    assert_eq!(ring.index_version().await.unwrap(), before);

    let out = ring.retire(&kid(&b).as_str()[..10], 7).await.unwrap();
    assert_eq!(out.kid, kid(&b));
    assert!(out.deletion_scheduled);

    let snap = ring.snapshot(None).await.unwrap().unwrap();
    let listed: Vec<&Kid> = snap.index.keys.iter().map(|e| &e.kid).collect();
    assert_eq!(listed, vec![&kid(&a), &kid(&c)]);
    assert_eq!(snap.index.active, Some(kid(&a)));

    // The key secret is pending deletion: no current version, and reading it is "not found"
    // (a reader's retry would never succeed), never the key.
    let b_name = ring.key_name(&kid(&b));
    assert_eq!(ring.store().current_version(&b_name).await.unwrap(), None);
    let err = ring.read_key(&kid(&b)).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert_eq!(err.reason(), "not_found");
    // The others are untouched.
    assert_eq!(ring.read_key(&kid(&c)).await.unwrap().id(), c.id());

    // Gone from the index: retiring it again names no key.
    let err = ring.retire(kid(&b).as_str(), 7).await.unwrap_err();
    assert!(matches!(err, Error::UnknownKey(_)), "{err:?}");

    // Pushing it again is refused until its secret is restored (moto would accept the
    // repeated CreateSecret; Secrets Manager refuses a name scheduled for deletion).
    let version = ring.index_version().await.unwrap();
    let err = ring.push(&b).await.unwrap_err();
    assert!(matches!(err, Error::Refused(_)), "{err:?}");
    assert!(err.to_string().contains("scheduled for deletion"), "{err}");
    assert!(err.to_string().contains("restore-secret"), "{err}");
    assert_eq!(ring.index_version().await.unwrap(), version);
}

#[tokio::test]
async fn retire_refuses_the_last_key_of_a_ring() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("retire_last");
    let ring = ring_at(&endpoint, &prefix).await;
    // A ring whose only key is not active (written by hand: kseal activates a first key).
    let p = pair();
    let mut index = index_of(&prefix, &[&p]);
    index.active = None;
    ring.store()
        .compare_and_swap(&ring.index_name(), &index.to_json(), None, &[])
        .await
        .unwrap();
    let version = ring.index_version().await.unwrap();

    let err = ring.retire(kid(&p).as_str(), 7).await.unwrap_err();
    assert!(matches!(err, Error::Refused(_)), "{err:?}");
    assert!(
        err.to_string().contains("is the last key of the ring"),
        "{err}"
    );
    assert_eq!(ring.index_version().await.unwrap(), version);
}

// ---------------------------------------------------------------------------------------
// the reference sample's single secret

#[tokio::test]
async fn sample_secret_with_raw_newlines_is_read_with_pkcs1_and_pkcs8_keys() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let base = sm::unique_prefix("sample_format");
    let ring = ring_at(&endpoint, &format!("{base}/ring")).await;
    let p = pair();
    let crt = p.certificate().to_pem();
    let pkcs1 = p.private_key().to_pkcs1_pem().unwrap();
    let pkcs8 = p.private_key().to_pkcs8_pem();
    assert!(pkcs8.starts_with("-----BEGIN PRIVATE KEY-----"));

    for (flavour, key) in [("pkcs1", &pkcs1), ("pkcs8", &pkcs8)] {
        let name = format!("{base}/{flavour}/sealed-secrets");
        let text = sample_secret_json(&crt, key);
        assert!(text.contains("\"crt\": \"-----BEGIN CERTIFICATE-----\nMII"));
        assert!(
            serde_json::from_str::<serde_json::Value>(&text).is_err(),
            "the sample's JSON is not strict JSON"
        );
        ring.store().put(&name, &text, &[]).await.unwrap();

        let (stored, _) = ring.store().read(&name, None).await.unwrap().unwrap();
        assert_eq!(stored.as_str(), text, "{flavour}: stored verbatim");
        let entry = KeyEntry::parse(&stored, &name).unwrap();
        assert_eq!(
            entry.to_pair(&name).unwrap().id(),
            p.id(),
            "{flavour}: the pair"
        );
    }
}

#[tokio::test]
async fn mirror_of_the_active_key_is_strict_json_and_follows_activation() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let base = sm::unique_prefix("mirror");
    let ring = ring_at(&endpoint, &format!("{base}/ring")).await;
    // Not "<prefix>-legacy": a name ending in "-" and six characters looks like the random
    // suffix of a Secrets Manager ARN, which the ring contract avoids.
    let mirror = format!("{base}/sealed-secrets");
    let (a, b) = (pair(), pair());
    ring.push(&a).await.unwrap();

    assert_eq!(ring.mirror_active_to(&mirror).await.unwrap(), kid(&a));
    let text = raw(&ring, &mirror).await;
    let value: serde_json::Value = serde_json::from_str(&text).expect("strict JSON");
    assert_eq!(property_names(&value), BTreeSet::from(["crt", "key"]));
    assert_eq!(
        KeyEntry::parse(&text, &mirror)
            .unwrap()
            .to_pair(&mirror)
            .unwrap()
            .id(),
        a.id()
    );
    assert_eq!(
        tags_of(&endpoint, &mirror).await,
        vec![
            ("kseal.dev/part".to_owned(), "mirror".to_owned()),
            ("kseal.dev/ring".to_owned(), format!("{base}/ring")),
        ]
    );
    // Unchanged: no new version.
    let v1 = ring.store().current_version(&mirror).await.unwrap();
    ring.mirror_active_to(&mirror).await.unwrap();
    assert_eq!(ring.store().current_version(&mirror).await.unwrap(), v1);

    // After a rotation the mirror follows (a new AWSCURRENT version of the same secret).
    ring.push(&b).await.unwrap();
    ring.activate(kid(&b).as_str(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(ring.mirror_active_to(&mirror).await.unwrap(), kid(&b));
    let text = raw(&ring, &mirror).await;
    serde_json::from_str::<serde_json::Value>(&text).expect("strict JSON");
    assert_eq!(
        KeyEntry::parse(&text, &mirror)
            .unwrap()
            .to_pair(&mirror)
            .unwrap()
            .id(),
        b.id()
    );
    assert_ne!(ring.store().current_version(&mirror).await.unwrap(), v1);
}

// ---------------------------------------------------------------------------------------
// bad documents

#[tokio::test]
async fn key_secret_with_a_foreign_certificate_is_a_bad_key() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let ring = ring_at(&endpoint, &sm::unique_prefix("bad_key_cert")).await;
    let (a, b) = (pair(), pair());
    let name = ring.key_name(&kid(&a));
    let entry = KeyEntry::from_pem(
        b.certificate().to_pem(),
        a.private_key().to_pkcs1_pem().unwrap(),
    );
    // Created as kseal creates key secrets (the kid as the request token), so the
    // content checks are what refuses it.
    ring.store()
        .create_immutable(&name, &entry.to_json(), kid(&a).as_str(), &[], &|_| true)
        .await
        .unwrap();

    let err = ring.read_key(&kid(&a)).await.unwrap_err();
    assert!(matches!(err, Error::BadKey { .. }), "{err:?}");
    assert_eq!(err.reason(), "bad_key");
    let (display, debug) = (err.to_string(), format!("{err:?}"));
    assert!(
        display.contains("the certificate does not belong to the private key"),
        "{display}"
    );
    assert!(display.contains(&name), "{display}");
    for text in [&display, &debug] {
        assert!(!text.contains("PRIVATE"), "{text}");
        assert!(!text.contains("-----BEGIN"), "{text}");
    }
}

#[tokio::test]
async fn key_secret_holding_another_key_than_its_name_is_a_bad_key() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let ring = ring_at(&endpoint, &sm::unique_prefix("bad_key_name")).await;
    let (a, b) = (pair(), pair());
    let name = ring.key_name(&kid(&a));
    let entry = KeyEntry::from_pair(&b).unwrap();
    // Created as kseal creates key secrets (the kid as the request token), so the
    // content checks are what refuses it.
    ring.store()
        .create_immutable(&name, &entry.to_json(), kid(&a).as_str(), &[], &|_| true)
        .await
        .unwrap();

    let err = ring.read_key(&kid(&a)).await.unwrap_err();
    assert!(matches!(err, Error::BadKey { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("it holds another key than its name says"),
        "{err}"
    );
    assert!(!format!("{err:?}").contains("PRIVATE"));

    // And kseal refuses to push `a` over it rather than trust or overwrite it.
    let err = ring.push(&a).await.unwrap_err();
    assert!(matches!(err, Error::Refused(_)), "{err:?}");
    assert!(err.to_string().contains("holds another key"), "{err}");
}

#[tokio::test]
async fn key_secret_that_is_not_json_is_malformed_without_quoting_it() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let ring = ring_at(&endpoint, &sm::unique_prefix("bad_key_json")).await;
    let a = pair();
    let name = ring.key_name(&kid(&a));
    let pem = a.private_key().to_pkcs1_pem().unwrap();
    // Created as kseal creates key secrets (the kid as the request token), so the
    // content checks are what refuses it.
    ring.store()
        .create_immutable(&name, &pem, kid(&a).as_str(), &[], &|_| true)
        .await
        .unwrap();

    let err = ring.read_key(&kid(&a)).await.unwrap_err();
    assert!(matches!(err, Error::Malformed { .. }), "{err:?}");
    assert!(!format!("{err:?}").contains("PRIVATE"), "{err:?}");
}

#[tokio::test]
async fn malformed_indexes_are_refused() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let base = sm::unique_prefix("bad_index");
    let (a, b) = (pair(), pair());

    let future = index_of(&format!("{base}/schema"), &[&a])
        .to_json()
        .replace("\"schema\": 1", "\"schema\": 3");
    let foreign = index_of("some/other/ring", &[&a]).to_json();
    let mut wrong_kid = index_of(&format!("{base}/kid"), &[&a]);
    wrong_kid.keys[0].kid = kid(&b);
    wrong_kid.active = Some(kid(&b));
    let mut dangling = index_of(&format!("{base}/active"), &[&a]);
    dangling.active = Some(kid(&b));
    let mut twice = index_of(&format!("{base}/twice"), &[&a]);
    twice.keys.push(twice.keys[0].clone());

    let cases = [
        ("schema", future, "upgrade kseal"),
        ("ring", foreign, "belongs to ring \"some/other/ring\""),
        ("kid", wrong_kid.to_json(), "does not match its certificate"),
        ("active", dangling.to_json(), "is not one of its keys"),
        ("twice", twice.to_json(), "is listed twice"),
        ("json", "{\"schema\": 1, ".to_owned(), "not JSON"),
    ];
    for (case, text, expected) in cases {
        let ring = ring_at(&endpoint, &format!("{base}/{case}")).await;
        ring.store()
            .put(&ring.index_name(), &text, &[])
            .await
            .unwrap();
        let err = ring.snapshot(None).await.unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{case}: {err:?}");
        assert_eq!(err.reason(), "malformed");
        assert!(!err.is_transient());
        assert!(err.to_string().contains(expected), "{case}: {err}");
        assert!(
            err.to_string().contains(&ring.index_name()),
            "{case}: names the secret: {err}"
        );
        // A writer refuses to build on it.
        let err = ring.push(&b).await.unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{case}: {err:?}");
    }
}

// ---------------------------------------------------------------------------------------
// service failures, through a fault-injecting proxy

/// A ring with one key behind a fresh [`FaultProxy`], counts reset.
async fn faulty_ring(endpoint: &str, test: &str) -> (FaultProxy, Ring) {
    let proxy = FaultProxy::start(endpoint).await;
    let ring = ring_at(&proxy.url(), &sm::unique_prefix(test)).await;
    ring.push(&pair()).await.expect("push a key");
    proxy.reset_counts();
    (proxy, ring)
}

#[tokio::test]
async fn throttling_and_server_errors_are_retried() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let (proxy, ring) = faulty_ring(&endpoint, "retried").await;

    proxy.inject("GetSecretValue", Fault::Throttle, 2);
    let snap = ring.snapshot(None).await.unwrap().expect("the index");
    assert_eq!(
        proxy.count("GetSecretValue"),
        3,
        "two throttles, then served"
    );

    proxy.inject("DescribeSecret", Fault::ServerError, 2);
    assert_eq!(ring.index_version().await.unwrap(), Some(snap.version));
    assert_eq!(proxy.count("DescribeSecret"), 3, "two 500s, then served");
}

#[tokio::test]
async fn persistent_throttling_is_reported_as_throttled() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let (proxy, ring) = faulty_ring(&endpoint, "throttled").await;

    proxy.inject("GetSecretValue", Fault::Throttle, 5);
    let err = ring.snapshot(None).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Throttled {
                operation: "GetSecretValue",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.reason(), "throttled");
    assert!(err.is_transient());
    assert!(err.to_string().contains(&ring.index_name()), "{err}");
    assert_eq!(
        proxy.count("GetSecretValue"),
        3,
        "the SDK's standard retry: 3 attempts"
    );
    proxy.clear_faults();
    assert!(ring.snapshot(None).await.unwrap().is_some());
}

#[tokio::test]
async fn unreachable_service_is_a_network_error_and_recovers() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let (proxy, ring) = faulty_ring(&endpoint, "network").await;

    proxy.set_down(true);
    let err = ring.index_version().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Network {
                operation: "DescribeSecret",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.reason(), "network");
    assert!(err.is_transient());
    assert!(proxy.count("DescribeSecret") >= 2, "retried");

    proxy.set_down(false);
    assert!(ring.index_version().await.unwrap().is_some());
}

#[tokio::test]
async fn access_denied_is_reported_and_not_retried() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let (proxy, ring) = faulty_ring(&endpoint, "denied").await;

    proxy.inject("GetSecretValue", Fault::AccessDenied, 1);
    let err = ring.snapshot(None).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::AccessDenied {
                operation: "GetSecretValue",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.reason(), "access_denied");
    assert!(!err.is_transient());
    assert_eq!(proxy.count("GetSecretValue"), 1);

    // A bare HTTP 403 with an XML body (a proxy, or the emulator's IAM enforcement) carries no
    // error code: it is still an access denial, not a retryable service error.
    proxy.reset_counts();
    proxy.inject("DescribeSecret", Fault::Forbidden, 1);
    let err = ring.index_version().await.unwrap_err();
    assert_eq!(err.reason(), "access_denied", "{err:?}");
    assert!(
        err.to_string().contains("access denied: DescribeSecret"),
        "{err}"
    );
    assert!(!err.is_transient());
}

// ---------------------------------------------------------------------------------------
// replica regions

#[tokio::test]
async fn replicated_ring_is_readable_in_the_replica_region_and_retires() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("replicated");
    let writer = Ring::open(
        &location(&prefix),
        &AwsOptions {
            replica_regions: vec!["us-west-2".into()],
            ..options(&endpoint)
        },
    )
    .await
    .unwrap();
    let (a, b) = (pair(), pair());
    writer.push(&a).await.unwrap();
    writer.push(&b).await.unwrap();
    let status = sdk(&endpoint)
        .await
        .describe_secret()
        .secret_id(writer.key_name(&kid(&b)))
        .send()
        .await
        .unwrap();
    let regions: Vec<&str> = status
        .replication_status()
        .iter()
        .filter_map(|r| r.region())
        .collect();
    assert_eq!(regions, vec!["us-west-2"]);

    // Clusters in the replica region read their replica (`?region=`).
    let reader = Ring::open(
        &Location::SecretsManager {
            prefix: prefix.clone(),
            region: Some("us-west-2".into()),
        },
        &options(&endpoint),
    )
    .await
    .unwrap();
    let snap = reader
        .snapshot(None)
        .await
        .unwrap()
        .expect("the replicated index");
    assert_eq!(snap.index.keys.len(), 2);
    assert_eq!(reader.read_key(&kid(&a)).await.unwrap().id(), a.id());

    // A replicated secret cannot be deleted before its replicas are removed.
    let out = writer.retire(kid(&b).as_str(), 7).await.unwrap();
    assert!(out.deletion_scheduled);
    let b_name = writer.key_name(&kid(&b));
    assert_eq!(writer.store().current_version(&b_name).await.unwrap(), None);
    assert!(
        reader.read_key(&kid(&b)).await.is_err(),
        "the replica is gone"
    );
    let snap = reader.snapshot(None).await.unwrap().unwrap();
    assert_eq!(snap.index.keys.len(), 1);

    // Scheduling it again (a retire re-run after a failure) changes nothing.
    writer.store().schedule_deletion(&b_name, 7).await.unwrap();
}
