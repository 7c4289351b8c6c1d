//! Whole-process time of `kseal seal`: start-up, reading the certificate and the input,
//! sealing, rendering and writing, as a user or CI job experiences it.
//!
//! Run with `cargo bench -p kseal-cli --bench seal_process`; figures are recorded in
//! docs/benchmarks.md. Uses a fresh RSA-4096 certificate (the fleet's key size).

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use kseal_keys::{CertificateOptions, KeyPair, KeySize};

fn run_seal(dir: &Path, input: &str) {
    let status = Command::new(env!("CARGO_BIN_EXE_kseal"))
        .args(["seal", "--cert", "fleet.crt", "-f", input])
        .current_dir(dir)
        .env_clear()
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .expect("kseal runs");
    assert!(status.success(), "kseal seal failed");
}

fn secret(i: usize, items: usize) -> String {
    let mut s = format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: app-{i}\n  namespace: team-{}\n  labels:\n    app.kubernetes.io/name: app-{i}\ntype: Opaque\nstringData:\n",
        i % 20
    );
    for k in 0..items {
        // writeln! to a String cannot fail.
        let _ = writeln!(
            s,
            "  key-{k}: value-{i}-{k}-0123456789abcdef0123456789abcdef"
        );
    }
    s
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    eprintln!("generating an RSA-4096 certificate for the benchmark…");
    let pair = KeyPair::generate(KeySize::Rsa4096, &CertificateOptions::default()).expect("keygen");
    std::fs::write(dir.path().join("fleet.crt"), pair.certificate().to_pem()).expect("write cert");
    std::fs::write(dir.path().join("one.yaml"), secret(0, 5)).expect("write input");
    let stream: String = (0..1000).map(|i| secret(i, 2)).collect();
    std::fs::write(dir.path().join("stream.yaml"), stream).expect("write input");

    let mut g = c.benchmark_group("kseal seal (whole process)");
    g.sample_size(50);
    g.bench_function("1 Secret, 5 items", |b| {
        b.iter(|| run_seal(dir.path(), "one.yaml"))
    });
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(15));
    g.bench_function("1,000 Secrets, 2 items each", |b| {
        b.iter(|| run_seal(dir.path(), "stream.yaml"))
    });
    g.finish();
}

criterion_group!(seal_process, benches);
criterion_main!(seal_process);
