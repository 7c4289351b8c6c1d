//! What the signed ring history costs a reader and a writer: parsing the index (what readers
//! did before signatures), verifying its history (what they do now on top), and signing it.
//!
//! `cargo bench -p kseal-keystore --bench trust`; figures in docs/benchmarks.md.

use std::hint::black_box;
use std::time::SystemTime;

use criterion::{Criterion, criterion_group, criterion_main};
use kseal_keys::{CertificateOptions, KeyPair, KeySize};
use kseal_keystore::trust::{self, Trust};
use kseal_keystore::{INDEX_SCHEMA, Index, IndexEntry, Kid};

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
        eprintln!("index/{n}keys/{roots}roots: {} bytes", text.len());
    }
}

criterion_group! {
    name = trust_benches;
    config = Criterion::default().sample_size(30);
    targets = benches
}
criterion_main!(trust_benches);
