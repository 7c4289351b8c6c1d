//! What the signed ring history costs a reader and a writer: parsing the index (what readers
//! did before signatures), verifying its history (what they do now on top), and signing it.
//!
//! `cargo bench -p kseal-keystore --bench trust`; figures in docs/benchmarks.md.

use std::hint::black_box;
use std::time::SystemTime;

use criterion::{Criterion, criterion_group, criterion_main};
use kseal_keys::{CertificateOptions, KeyPair, KeySize};
use kseal_keystore::trust::{self, Trust};
use kseal_keystore::{AwsOptions, INDEX_SCHEMA, Index, IndexEntry, Kid, RootKey, RootSigner};

/// A ring of `n` RSA-4096 keys rotated `n - 1` times, its root handed on `roots - 1` times, as
/// `kseal keys` writes it.
fn ring(n: usize, roots: usize) -> (Index, Vec<KeyPair>) {
    eprintln!("generating {n} RSA-4096 key pairs…");
    let pairs: Vec<KeyPair> = (0..n)
        .map(|_| {
            KeyPair::generate(KeySize::Rsa4096, &CertificateOptions::default()).expect("keygen")
        })
        .collect();
    let mut index = Index::empty("kseal/fleet", SystemTime::now());
    for p in &pairs {
        index
            .keys
            .push(IndexEntry::new(p.certificate(), SystemTime::now()).expect("entry"));
    }
    index.active = Some(Kid::of(pairs[n - 1].public_key()));
    index
        .roots
        .push(trust::genesis(&index.ring, &pairs[0]).expect("genesis"));
    for i in 1..roots {
        let previous = index.roots[i - 1].clone();
        index.roots.push(
            trust::rotate_root(&index.ring, &previous, &pairs[i - 1], &pairs[i]).expect("rotate"),
        );
    }
    index.schema = INDEX_SCHEMA;
    index.version = 2 * n as u64;
    trust::sign_index(&mut index, &pairs[roots - 1]).expect("sign");
    (index, pairs)
}

fn benches(c: &mut Criterion) {
    for (n, roots) in [(1, 1), (24, 1), (24, 4)] {
        let (index, pairs) = ring(n, roots);
        let text = index.to_json();
        let anchor = index.roots[0].kid.clone();
        let trust_anchor = Trust::anchored(anchor);
        let mut g = c.benchmark_group(format!("index/{n}keys/{roots}roots"));
        g.bench_function("parse (before signatures)", |b| {
            b.iter(|| Index::parse(black_box(&text), "kseal/fleet", "bench").expect("parse"))
        });
        g.bench_function("verify the history", |b| {
            b.iter(|| trust::verify(black_box(&index), &trust_anchor, "bench").expect("verify"))
        });
        g.bench_function("parse + verify (now)", |b| {
            b.iter(|| {
                let parsed = Index::parse(black_box(&text), "kseal/fleet", "bench").expect("parse");
                trust::verify(&parsed, &trust_anchor, "bench").expect("verify")
            })
        });
        let root = &pairs[roots - 1];
        g.bench_function("sign (a write)", |b| {
            let mut copy = index.clone();
            b.iter(|| trust::sign_index(black_box(&mut copy), root).expect("sign"))
        });
        g.finish();
        eprintln!(
            "index/{n}keys/{roots}roots: {} bytes, signed message {} bytes",
            text.len(),
            trust::index_message(&index).expect("message").len()
        );
    }
}

/// A ring of 1 and of 24 keys moved to a dedicated root (an offline RSA-4096 file root): one
/// more root record, the index signed by the root. What a reader verifies after `kseal keys
/// re-root`, and what a writer's signature costs with a file root (a KMS root adds one
/// `kms:Sign` call, tens of ms over the network, per write). Then one root signature alone:
/// an RSA-4096 PSS-SHA-256 sign and verify of the 24-key index's signed message, and that
/// message's size (a KMS `Sign` of a RAW message takes at most 4096 bytes).
fn dedicated(c: &mut Criterion) {
    for n in [1, 24] {
        dedicated_ring(c, n);
    }
}

fn dedicated_ring(c: &mut Criterion, n: usize) {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (mut index, pairs) = ring(n, 1);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("root.pem");
    let key = kseal_keys::PrivateKey::generate(KeySize::Rsa4096).expect("keygen");
    std::fs::write(&path, key.to_pkcs8_pem().as_bytes()).expect("write the root");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let root = runtime
        .block_on(RootSigner::open(
            &RootKey::File(path),
            &AwsOptions::default(),
        ))
        .expect("open the root");
    let previous = index.roots[0].kid.clone();
    let anchor = pairs[0].clone();
    let record = runtime
        .block_on(trust::dedicated_record(
            &index.ring,
            2,
            Some(&previous),
            &root,
            async |m| Ok(Some(trust::sign_with_pair(&anchor, m)?)),
        ))
        .expect("hand-over");
    index.roots.push(record);
    index.expires = Some(jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * 7));
    runtime
        .block_on(trust::sign_index_dedicated(&mut index, &root))
        .expect("sign");
    let pinned = Trust::anchored(root.kid().clone());
    let text = index.to_json();
    let mut g = c.benchmark_group(format!("index/{n}keys/dedicated root"));
    g.bench_function("verify the history", |b| {
        b.iter(|| trust::verify(black_box(&index), &pinned, "bench").expect("verify"))
    });
    g.bench_function("parse + verify (now)", |b| {
        b.iter(|| {
            let parsed = Index::parse(black_box(&text), "kseal/fleet", "bench").expect("parse");
            trust::verify(&parsed, &pinned, "bench").expect("verify")
        })
    });
    g.bench_function("sign (a write, file root)", |b| {
        let mut copy = index.clone();
        b.iter(|| {
            runtime
                .block_on(trust::sign_index_dedicated(black_box(&mut copy), &root))
                .expect("sign")
        })
    });
    g.finish();
    let message = trust::index_message(&index).expect("message");
    eprintln!(
        "index/{n}keys/dedicated root: {} bytes, signed message {} bytes",
        text.len(),
        message.len()
    );
    if n > 1 {
        let signature = key.sign_pss_sha256(&message).expect("sign");
        let public = root.public_key().clone();
        let mut g = c.benchmark_group("root signature (RSA-4096 PSS-SHA-256)");
        g.bench_function("sign the index message (file root)", |b| {
            b.iter(|| key.sign_pss_sha256(black_box(&message)).expect("sign"))
        });
        g.bench_function("verify one signature", |b| {
            b.iter(|| {
                public
                    .verify_pss_sha256(black_box(&message), &signature)
                    .expect("verify")
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = trust_benches;
    config = Criterion::default().sample_size(30);
    targets = benches, dedicated
}
criterion_main!(trust_benches);
