//! Crypto benchmarks: seal (both backends), open (first key, 24 keys with and without a
//! hint), key generation, and AWS-LC's raw RSA-OAEP decrypt as the physical limit of open.
//!
//! Run with `cargo bench -p kseal-keys --all-features`; figures are recorded in
//! docs/benchmarks.md.

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use aws_lc_rs::rsa::{OAEP_SHA256_MGF1SHA256, OaepPrivateDecryptingKey, PrivateDecryptingKey};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kseal_keys::{Backend, CertificateOptions, KeyPair, KeyRing, KeySize, PrivateKey, Scope};

fn key_pairs(n: usize) -> Vec<KeyPair> {
    eprintln!("generating {n} RSA-4096 key pairs for the benchmarks…");
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    (0..n)
        .map(|i| {
            KeyPair::generate(KeySize::Rsa4096, &CertificateOptions::default())
                .expect("keygen")
                .with_order_time(t0 + Duration::from_secs(i as u64 * 86_400 * 30))
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let pairs = key_pairs(24);
    let newest = pairs.last().expect("24 keys").clone();
    let oldest = pairs.first().expect("24 keys").clone();
    let label = Scope::Strict.label("bench", "some-secret");
    let value = [0x5au8; 32];

    let mut g = c.benchmark_group("seal");
    g.throughput(Throughput::Elements(1));
    for &backend in Backend::ALL {
        g.bench_function(format!("{backend:?}/32B"), |b| {
            b.iter(|| {
                kseal_keys::seal_with(backend, newest.public_key(), &label, black_box(&value))
                    .expect("seal")
            })
        });
    }
    g.finish();

    let one: KeyRing = [newest.clone()].into_iter().collect();
    let all: KeyRing = pairs.iter().cloned().collect();
    let by_newest = kseal_keys::seal(newest.public_key(), &label, &value).expect("seal");
    let by_oldest = kseal_keys::seal(oldest.public_key(), &label, &value).expect("seal");

    let mut g = c.benchmark_group("open");
    g.throughput(Throughput::Elements(1));
    g.sample_size(40);
    g.bench_function("1 key, hit on first", |b| {
        b.iter(|| one.open(&label, black_box(&by_newest), None).expect("open"))
    });
    g.bench_function("24 keys, sealing key, no hint", |b| {
        b.iter(|| all.open(&label, black_box(&by_newest), None).expect("open"))
    });
    g.bench_function("24 keys, oldest key, hint", |b| {
        b.iter(|| {
            all.open(&label, black_box(&by_oldest), Some(oldest.id()))
                .expect("open")
        })
    });
    g.sample_size(10);
    g.bench_function("24 keys, oldest key, no hint (24 RSA ops)", |b| {
        b.iter(|| all.open(&label, black_box(&by_oldest), None).expect("open"))
    });
    g.finish();

    // The physical limit: one AWS-LC RSA-OAEP decrypt, no envelope, no AES.
    let raw = OaepPrivateDecryptingKey::new(
        PrivateDecryptingKey::from_pkcs8(&newest.private_key().to_pkcs8_der()).expect("import"),
    )
    .expect("oaep key");
    let envelope = kseal_keys::envelope::Envelope::parse(&by_newest).expect("parse");
    let rsa_block = envelope.rsa_ciphertext().to_vec();
    let mut g = c.benchmark_group("raw");
    g.throughput(Throughput::Elements(1));
    g.sample_size(40);
    g.bench_function("aws-lc RSA-4096 OAEP-SHA256 decrypt", |b| {
        let mut out = vec![0u8; raw.min_output_size()];
        b.iter(|| {
            raw.decrypt(
                &OAEP_SHA256_MGF1SHA256,
                black_box(&rsa_block),
                &mut out,
                Some(label.as_bytes()),
            )
            .expect("decrypt")
            .len()
        })
    });
    g.finish();

    let mut g = c.benchmark_group("keygen");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("RSA-4096 + certificate", |b| {
        b.iter(|| {
            KeyPair::generate(KeySize::Rsa4096, &CertificateOptions::default()).expect("keygen")
        })
    });
    g.bench_function("RSA-4096 key only", |b| {
        b.iter(|| PrivateKey::generate(KeySize::Rsa4096).expect("keygen"))
    });
    g.finish();
}

criterion_group!(crypto, benches);
criterion_main!(crypto);
