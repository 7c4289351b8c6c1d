//! End-to-end runs of the `kseal` binary: seal parity (-w, formats, --merge-into, --raw,
//! several --cert), set, cert sources (file, URL, controller via a fake API server; in
//! `real_apiserver`, kubeconfig authentication against the reference kube-apiserver), the
//! credential helpers, and the offline
//! recovery commands. Outputs are opened in-process with `kseal-api`, so every round trip is
//! CLI-seal → library-unseal.

// A test binary: helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used)]

mod real_apiserver;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::common::*;
use k8s_openapi::api::core::v1::Secret;
use kseal_api::SealedSecret;
use kseal_keys::{CertificateOptions, KeyPair, KeyRing, KeySize};

const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: prod\nstringData:\n  password: s3cr3t\n";

fn fixture_pair() -> KeyPair {
    let f = fixtures();
    KeyPair::from_pem(
        &std::fs::read_to_string(f.join("keys/tls.key")).unwrap(),
        &std::fs::read_to_string(f.join("keys/tls.crt")).unwrap(),
    )
    .unwrap()
}

fn ring(pairs: &[&KeyPair]) -> KeyRing {
    pairs.iter().map(|p| (*p).clone()).collect()
}

/// A fresh RSA-2048 pair (test-only size), written as `NAME.key` / `NAME.crt` in `dir`.
fn new_pair(dir: &Path, name: &str) -> KeyPair {
    let pair = KeyPair::generate(
        KeySize::Rsa2048,
        &CertificateOptions {
            common_name: name.into(),
            ..CertificateOptions::default()
        },
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{name}.key")),
        pair.private_key().to_pkcs1_pem().unwrap().as_bytes(),
    )
    .unwrap();
    std::fs::write(dir.join(format!("{name}.crt")), pair.certificate().to_pem()).unwrap();
    pair
}

fn parse_sealed(text: &str) -> Vec<SealedSecret> {
    serde_saphyr::from_multiple_with_options::<serde_json::Value>(text, yaml_1_2())
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .map(|v| serde_json::from_value(v).unwrap())
        .collect()
}

fn open(sealed: &SealedSecret, ring: &KeyRing) -> BTreeMap<String, String> {
    let secret: Secret = kseal_api::unseal(sealed, ring).unwrap();
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect()
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn help_texts_of_the_new_commands() {
    let dir = tempfile::tempdir().unwrap();
    for (name, args) in [
        ("help_set", &["set", "--help"][..]),
        ("help_cert", &["cert", "--help"][..]),
        ("help_create", &["create", "--help"][..]),
        (
            "help_create_git_credentials",
            &["create", "git-credentials", "--help"][..],
        ),
        (
            "help_create_aws_credentials",
            &["create", "aws-credentials", "--help"][..],
        ),
        ("help_reseal", &["reseal", "--help"][..]),
        ("help_validate", &["validate", "--help"][..]),
        ("help_keys_inspect", &["keys", "inspect", "--help"][..]),
        ("help_completions", &["completions", "--help"][..]),
    ] {
        let run = kseal(args, None, dir.path());
        assert_eq!(run.code, 0, "{name}");
        snap!(name, run);
    }
}

#[test]
fn completions_are_generated_for_every_shell() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let run = kseal(&["completions", shell], None, dir.path());
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        assert!(run.stdout.contains("kseal"), "{shell}");
        assert!(run.stdout.contains("merge-into"), "{shell}");
    }
}

#[test]
fn write_is_atomic_follows_the_extension_and_output_defaults_to_the_input_format() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    let json_secret = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db","namespace":"prod"},"stringData":{"password":"s3cr3t"}}"#;
    // JSON in, JSON out on stdout.
    let run = kseal(&["seal", "--cert", s(&cert)], Some(json_secret), dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("{\n"));
    // JSON in, `-w x.yaml` writes YAML, nothing on stdout.
    let run = kseal(
        &["seal", "--cert", s(&cert), "-w", "out.yaml"],
        Some(json_secret),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    let written = std::fs::read_to_string(dir.path().join("out.yaml")).unwrap();
    assert!(written.starts_with("---\napiVersion: bitnami.com/v1alpha1\n"));
    let sealed = parse_sealed(&written);
    assert_eq!(
        open(&sealed[0], &ring(&[&fixture_pair()]))["password"],
        "s3cr3t"
    );
    // A failure leaves the existing file untouched and writes no temporary file.
    let run = kseal(
        &["seal", "--cert", s(&cert), "-w", "out.yaml"],
        Some("kind: Secret\nmetadata:\n  name: x\n"),
        dir.path(),
    );
    assert_eq!(run.code, 1);
    snap!("err_write_keeps_the_old_file", run);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.yaml")).unwrap(),
        written
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "out.yaml")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn several_certificates_give_one_output_each() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = new_pair(dir.path(), "fleet");
    let dr = new_pair(dir.path(), "dr");
    let run = kseal(
        &[
            "seal",
            "--cert",
            "fleet.crt",
            "--cert",
            "backup=dr.crt",
            "-w",
            "sealed.yaml",
        ],
        Some(SECRET),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    snap!("seal_two_certs_stderr", run);
    assert!(!dir.path().join("sealed.yaml").exists());
    let a = parse_sealed(&std::fs::read_to_string(dir.path().join("sealed.fleet.yaml")).unwrap());
    let b = parse_sealed(&std::fs::read_to_string(dir.path().join("sealed.backup.yaml")).unwrap());
    assert_eq!(open(&a[0], &ring(&[&fleet]))["password"], "s3cr3t");
    assert_eq!(open(&b[0], &ring(&[&dr]))["password"], "s3cr3t");
    assert!(kseal_api::unseal(&a[0], &ring(&[&dr])).is_err());
    // To stdout: one stream, grouped per certificate in --cert order.
    let run = kseal(
        &["seal", "--cert", "fleet.crt,dr.crt"],
        Some(SECRET),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let both = parse_sealed(&run.stdout);
    assert_eq!(both.len(), 2);
    assert_eq!(both[0].sealing_key_hint().unwrap(), *fleet.id());
    assert_eq!(both[1].sealing_key_hint().unwrap(), *dr.id());
    // Two sources with the same derived name.
    std::fs::create_dir(dir.path().join("a")).unwrap();
    std::fs::copy(dir.path().join("fleet.crt"), dir.path().join("a/fleet.crt")).unwrap();
    let run = kseal(
        &["seal", "--cert", "fleet.crt", "--cert", "a/fleet.crt"],
        Some(SECRET),
        dir.path(),
    );
    snap!("err_two_certs_same_name", run);
}

#[test]
fn merge_into_adds_and_replaces_items_and_keeps_the_file_shape() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    for (file, json) in [("sealed.yaml", false), ("sealed.json", true)] {
        let format = if json { "json" } else { "yaml" };
        let run = kseal(
            &["seal", "--cert", s(&cert), "-o", format, "-w", file],
            Some(SECRET),
            dir.path(),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        let update = "kind: Secret\nmetadata:\n  name: db\n  labels:\n    team: a\nstringData:\n  password: n3w\n  api-key: k3y\n";
        let run = kseal(
            &["seal", "--cert", s(&cert), "--merge-into", file],
            Some(update),
            dir.path(),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.stdout, "");
        snap!(format!("merge_into_{format}_stderr"), run);
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert_eq!(text.starts_with('{'), json, "{file} keeps its format");
        let sealed = parse_sealed(&text);
        assert_eq!(sealed[0].metadata.namespace.as_deref(), Some("prod"));
        let data = open(&sealed[0], &ring(&[&fixture_pair()]));
        assert_eq!(data["password"], "n3w");
        assert_eq!(data["api-key"], "k3y");
        let labels = sealed[0]
            .spec
            .template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .clone();
        assert_eq!(labels.unwrap()["team"], "a");
    }
    // Scope mismatch is an error and leaves the file alone.
    let before = std::fs::read_to_string(dir.path().join("sealed.yaml")).unwrap();
    let run = kseal(
        &[
            "seal",
            "--cert",
            s(&cert),
            "--merge-into",
            "sealed.yaml",
            "--scope",
            "cluster-wide",
        ],
        Some(SECRET),
        dir.path(),
    );
    assert_eq!(run.code, 1);
    snap!("err_merge_into_scope_mismatch", run);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("sealed.yaml")).unwrap(),
        before
    );
    // A file with two SealedSecrets is refused.
    std::fs::write(dir.path().join("two.yaml"), format!("{before}{before}")).unwrap();
    let run = kseal(
        &["seal", "--cert", s(&cert), "--merge-into", "two.yaml"],
        Some(SECRET),
        dir.path(),
    );
    snap!("err_merge_into_two_objects", run);
}

#[test]
fn raw_values_are_base64_without_newline_and_warn_about_trailing_newlines() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    let pair = fixture_pair();
    let label = kseal_keys::Scope::Strict.label("prod", "db");
    let run = kseal(
        &[
            "seal",
            "--cert",
            s(&cert),
            "--raw",
            "-n",
            "prod",
            "--name",
            "db",
        ],
        Some("s3cr3t\n"),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.ends_with('\n'));
    snap!(
        "raw_trailing_newline_warning",
        Run {
            stdout: String::new(),
            ..run
        }
    );
    let opened = ring(&[&pair])
        .open_base64(&label, &run.stdout, None)
        .unwrap();
    assert_eq!(opened.plaintext.expose(), b"s3cr3t\n");
    let run = kseal(
        &[
            "seal",
            "--cert",
            s(&cert),
            "--raw",
            "--strip-newline",
            "-n",
            "prod",
            "--name",
            "db",
        ],
        Some("s3cr3t\n"),
        dir.path(),
    );
    assert_eq!(run.stderr, "");
    let opened = ring(&[&pair])
        .open_base64(&label, &run.stdout, None)
        .unwrap();
    assert_eq!(opened.plaintext.expose(), b"s3cr3t");
    std::fs::write(dir.path().join("value.bin"), [0u8, 159, 146, 150]).unwrap();
    let run = kseal(
        &[
            "seal",
            "--cert",
            s(&cert),
            "--raw",
            "--scope",
            "cluster-wide",
            "--from-file",
            "token=value.bin",
        ],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let opened = ring(&[&pair])
        .open_base64(&kseal_keys::Scope::Cluster.label("", ""), &run.stdout, None)
        .unwrap();
    assert_eq!(opened.plaintext.expose(), [0u8, 159, 146, 150]);
    let run = kseal(
        &["seal", "--cert", s(&cert), "--raw", "-n", "prod"],
        Some("x"),
        dir.path(),
    );
    snap!("err_raw_strict_needs_name", run);
    let run = kseal(
        &["seal", "--cert", s(&cert), "--from-file", "x"],
        Some("x"),
        dir.path(),
    );
    snap!("err_from_file_needs_raw", run);
}

#[test]
fn set_adds_one_item_from_stdin() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    let run = kseal(
        &[
            "seal",
            "--cert",
            s(&cert),
            "--scope",
            "namespace-wide",
            "-w",
            "s.yaml",
        ],
        Some(SECRET),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = kseal(
        &[
            "set",
            "--cert",
            s(&cert),
            "s.yaml",
            "token",
            "--strip-newline",
        ],
        Some("t0k3n\n"),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    snap!("set_stderr", run);
    let sealed = parse_sealed(&std::fs::read_to_string(dir.path().join("s.yaml")).unwrap());
    assert_eq!(sealed[0].scope(), kseal_api::Scope::Namespace);
    let data = open(&sealed[0], &ring(&[&fixture_pair()]));
    assert_eq!(data["token"], "t0k3n");
    assert_eq!(data["password"], "s3cr3t");
    let run = kseal(
        &["set", "--cert", s(&cert), "s.yaml", "bad/key"],
        Some("x"),
        dir.path(),
    );
    snap!("err_set_bad_key", run);
    // A key the apiserver refuses ('.', '..', or starting with '..': mounted as a file name).
    for bad in [".", "..", "..data"] {
        let run = kseal(
            &["set", "--cert", s(&cert), "s.yaml", bad],
            Some("x"),
            dir.path(),
        );
        assert_eq!(run.code, 1, "{bad}: {}", run.stderr);
        assert!(
            run.stderr
                .starts_with(&format!("error: `{bad}` is not a valid Secret key: ")),
            "{}",
            run.stderr
        );
    }
    let run = kseal(
        &["set", "--cert", s(&cert), "missing.yaml", "k"],
        Some("x"),
        dir.path(),
    );
    snap!("err_set_missing_file", run);
}

/// A one-thread HTTP server answering `routes` (path → status, body); records requests.
struct FakeServer {
    port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

fn serve(routes: Vec<(&'static str, u16, String)>) -> FakeServer {
    serve_with(routes, None)
}

/// Answers one HTTP/1.1 request on `stream` and closes it.
fn answer<S: std::io::Read + std::io::Write>(
    stream: S,
    routes: &[(&'static str, u16, String)],
    seen: &Mutex<Vec<String>>,
) {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    if head.is_empty() {
        return;
    }
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    if std::io::Read::read_exact(&mut reader, &mut body).is_err() {
        return;
    }
    head.push_str(&String::from_utf8_lossy(&body));
    let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
    seen.lock().unwrap().push(head);
    let (status, body) = routes
        .iter()
        .find(|(p, _, _)| *p == path)
        .map(|(_, s, b)| (*s, b.clone()))
        .unwrap_or((404, r#"{"kind":"Status","message":"not found"}"#.to_owned()));
    let stream = reader.get_mut();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.flush();
}

/// [`serve`], over TLS when a server configuration is given.
fn serve_with(
    routes: Vec<(&'static str, u16, String)>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> FakeServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&requests);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            match &tls {
                None => answer(stream, &routes, &seen),
                Some(config) => {
                    let conn = rustls::ServerConnection::new(Arc::clone(config)).unwrap();
                    let mut tls_stream = rustls::StreamOwned::new(conn, stream);
                    answer(&mut tls_stream, &routes, &seen);
                    tls_stream.conn.send_close_notify();
                    let _ = tls_stream.flush();
                }
            }
        }
    });
    FakeServer { port, requests }
}

/// A TLS server configuration with a fresh self-signed certificate for 127.0.0.1; returns it
/// with the certificate's PEM (the CA to trust).
fn tls_config() -> (Arc<rustls::ServerConfig>, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let cert_pem = certified.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![certified.cert.der().clone()], key)
    .unwrap();
    (Arc::new(config), cert_pem)
}

#[test]
fn https_sources_verify_the_server() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let pem = fixture_pair().certificate().to_pem();
    let (config, ca_pem) = tls_config();
    let server = serve_with(
        vec![
            ("/fleet.pem", 200, pem.clone()),
            (
                "/api/v1/namespaces/kseal-system/services/kseal-controller",
                200,
                r#"{"spec":{"ports":[{"port":8080}]}}"#.to_owned(),
            ),
            (
                "/api/v1/namespaces/kseal-system/services/http:kseal-controller:8080/proxy/v1/cert.pem",
                200,
                pem.clone(),
            ),
        ],
        Some(config),
    );
    // An https URL whose certificate no system root vouches for is refused.
    let url = format!("https://127.0.0.1:{}/fleet.pem", server.port);
    let run = kseal(&["cert", "--cert", &url], None, dir.path());
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("invalid peer certificate") || run.stderr.contains("UnknownIssuer"),
        "{}",
        run.stderr
    );
    // The API server, trusted through the kubeconfig's CA; exec plugin credentials.
    let ca = base64::engine::general_purpose::STANDARD.encode(&ca_pem);
    std::fs::write(
        dir.path().join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: tls\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: sh\n      args: [\"-c\", \"echo '{{\\\"kind\\\":\\\"ExecCredential\\\",\\\"status\\\":{{\\\"token\\\":\\\"ex3c\\\"}}}}'\"]\ncontexts:\n- name: tls\n  context:\n    cluster: c\n    user: u\n",
            server.port
        ),
    )
    .unwrap();
    let run = kseal_env(&["cert"], None, dir.path(), &[("KUBECONFIG", "kubeconfig")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, pem);
    // A relative plugin path is relative to the kubeconfig's directory, as in client-go.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let kube = dir.path().join("kube");
        std::fs::create_dir(&kube).unwrap();
        let plugin = kube.join("token.sh");
        std::fs::write(
            &plugin,
            "#!/bin/sh\necho '{\"kind\":\"ExecCredential\",\"status\":{\"token\":\"ex3c\"}}'\n",
        )
        .unwrap();
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = std::fs::read_to_string(dir.path().join("kubeconfig"))
            .unwrap()
            .replace(
                "command: sh\n      args: [",
                "command: ./token.sh\n      unused: [",
            );
        std::fs::write(kube.join("config"), config).unwrap();
        let run = kseal_env(
            &["cert"],
            None,
            dir.path(),
            &[("KUBECONFIG", "kube/config")],
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.stdout, pem);
    }
    let requests = server.requests.lock().unwrap().clone();
    assert!(
        requests.iter().filter(|r| r.contains("/api/v1/")).all(|r| r
            .to_ascii_lowercase()
            .contains("authorization: bearer ex3c")),
        "{requests:?}"
    );
}

#[test]
fn certificates_come_from_urls_only_over_https_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let pem = fixture_pair().certificate().to_pem();
    let server = serve(vec![("/cert.pem", 200, pem.clone())]);
    let url = format!("http://127.0.0.1:{}/cert.pem", server.port);
    let run = kseal(&["cert", "--cert", &url], None, dir.path());
    snap!("err_cert_over_http", run);
    let run = kseal(&["cert", "--cert", &url, "--allow-http"], None, dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, pem);
    let run = kseal_env(
        &["seal", "--cert", &url],
        Some(SECRET),
        dir.path(),
        &[("KSEAL_ALLOW_HTTP", "true")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let missing = format!("http://127.0.0.1:{}/nope.pem", server.port);
    let run = kseal(
        &["cert", "--cert", &missing, "--allow-http"],
        None,
        dir.path(),
    );
    snap!("err_cert_url_404", run);
    let run = kseal(
        &["cert", "-w", "saved.crt", "--cert", "file://nowhere.crt"],
        None,
        dir.path(),
    );
    snap!("err_cert_file_url_missing", run);
}

fn kubeconfig(dir: &Path, port: u16) {
    std::fs::write(
        dir.join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    token: t0ken\ncontexts:\n- name: test\n  context:\n    cluster: c\n    user: u\n    namespace: team-a\n"
        ),
    )
    .unwrap();
}

#[test]
fn the_controller_certificate_is_fetched_through_the_service_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let pem = fixture_pair().certificate().to_pem();
    let server = serve(vec![
        (
            "/api/v1/namespaces/kseal-system/services/kseal-controller",
            200,
            r#"{"kind":"Service","spec":{"ports":[{"name":"http","port":8080}]}}"#.to_owned(),
        ),
        (
            "/api/v1/namespaces/kseal-system/services/http:kseal-controller:http/proxy/v1/cert.pem",
            200,
            pem.clone(),
        ),
        (
            "/api/v1/namespaces/kseal-system/services/http:kseal-controller:http/proxy/v1/cert.pem?namespace=team-a",
            200,
            pem.clone(),
        ),
    ]);
    kubeconfig(dir.path(), server.port);
    let envs = [("KUBECONFIG", "kubeconfig")];
    let run = kseal_env(&["cert", "-w", "fleet.crt"], None, dir.path(), &envs);
    assert_eq!(run.code, 0, "{}", run.stderr);
    snap!("cert_from_controller_stderr", run);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("fleet.crt")).unwrap(),
        pem
    );
    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert!(
        requests
            .iter()
            .all(|r| r.contains("authorization: Bearer t0ken")
                || r.contains("Authorization: Bearer t0ken")),
        "{requests:?}"
    );
    // The kubeconfig context's namespace is the default namespace when sealing.
    let run = kseal_env(
        &["seal"],
        Some("kind: Secret\nmetadata:\n  name: db\nstringData:\n  a: b\n"),
        dir.path(),
        &envs,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(sealed[0].metadata.namespace.as_deref(), Some("team-a"));
    // Another name: the Service is not found, and the hint names the flags.
    let run = kseal_env(
        &["cert", "--controller-name", "sealed-secrets-controller"],
        None,
        dir.path(),
        &envs,
    );
    snap!("err_controller_service_not_found", run);
    // A name no Service can have is refused before any request: it would change the path.
    let before = server.requests.lock().unwrap().len();
    let run = kseal_env(
        &["cert", "--controller-name", "x/../../secrets/db"],
        None,
        dir.path(),
        &envs,
    );
    snap!("err_controller_name_invalid", run);
    let run = kseal_env(
        &["cert", "--controller-namespace", "kube-system/x"],
        None,
        dir.path(),
        &envs,
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("--controller-namespace `kube-system/x` is not a valid namespace name"),
        "{}",
        run.stderr
    );
    assert_eq!(server.requests.lock().unwrap().len(), before);
    let run = kseal_env(&["cert"], None, dir.path(), &[("KUBECONFIG", "missing")]);
    snap!("err_no_kubeconfig", run);
}

/// A controller whose rings are bound to namespaces serves each namespace's certificate
/// (`/v1/cert.pem?namespace=NS`): `kseal seal`, `set` and `create` without `--cert` seal each
/// object with the certificate of the namespace it is sealed for, cluster-wide ones with the
/// default; `--controller-ring` still names one ring for all.
#[test]
fn without_a_certificate_each_namespace_is_sealed_with_the_controllers_certificate_there() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, team) = (fixture_pair(), new_pair(dir.path(), "team"));
    let proxy = "/api/v1/namespaces/kseal-system/services/http:kseal-controller:http/proxy";
    let route = |query: &str, status: u16, body: String| {
        let path: &'static str = Box::leak(format!("{proxy}/v1/cert.pem{query}").into_boxed_str());
        (path, status, body)
    };
    let server = serve(vec![
        (
            "/api/v1/namespaces/kseal-system/services/kseal-controller",
            200,
            r#"{"kind":"Service","spec":{"ports":[{"name":"http","port":8080}]}}"#.to_owned(),
        ),
        route("", 200, shared.certificate().to_pem()),
        route("?namespace=team-a", 200, team.certificate().to_pem()),
        route("?namespace=shared", 200, shared.certificate().to_pem()),
        route("?ring=kseal%2Fshared", 200, shared.certificate().to_pem()),
        route(
            "?namespace=loading",
            503,
            "no key seals: ring kseal/team-b seals for namespace loading, and none of its keys is loaded yet\n"
                .to_owned(),
        ),
    ]);
    kubeconfig(dir.path(), server.port);
    let envs = [("KUBECONFIG", "kubeconfig")];
    let (shared_ring, team_ring) = (ring(&[&shared]), ring(&[&team]));
    let input = "kind: Secret\nmetadata:\n  name: a\n  namespace: team-a\nstringData:\n  v: for-team\n---\nkind: Secret\nmetadata:\n  name: b\n  namespace: shared\nstringData:\n  v: for-shared\n---\nkind: Secret\nmetadata:\n  name: c\n  namespace: team-a\n  annotations:\n    sealedsecrets.bitnami.com/cluster-wide: \"true\"\nstringData:\n  v: moved-anywhere\n---\nkind: Secret\nmetadata:\n  name: d\n  annotations:\n    sealedsecrets.bitnami.com/cluster-wide: \"true\"\nstringData:\n  v: no-namespace\n";
    let run = kseal_env(&["seal"], Some(input), dir.path(), &envs);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(sealed.len(), 4);
    assert_eq!(open(&sealed[0], &team_ring)["v"], "for-team");
    assert_eq!(open(&sealed[1], &shared_ring)["v"], "for-shared");
    // Cluster-wide, declared in team-a: team-a's ring, not the first ring's (a scope
    // annotation never moves a value to another tenant's ring).
    assert_eq!(open(&sealed[2], &team_ring)["v"], "moved-anywhere");
    // Cluster-wide with no namespace: the controller's default certificate.
    assert_eq!(open(&sealed[3], &shared_ring)["v"], "no-namespace");
    assert!(
        run.stderr
            .contains("seals these namespaces with different keys")
            && run
                .stderr
                .contains(&format!("team-a → key {}", &team.id().as_str()[..12])),
        "the note names each namespace's key: {}",
        run.stderr
    );
    let asked: Vec<String> = server
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter_map(|r| r.split_whitespace().nth(1).map(str::to_owned))
        .filter(|p| p.contains("cert.pem"))
        .collect();
    assert_eq!(
        asked.len(),
        3,
        "one request per namespace and one cluster-wide: {asked:?}"
    );

    // `--controller-ring` names one ring for every object.
    let run = kseal_env(
        &["seal", "--controller-ring", "kseal/shared"],
        Some(input),
        dir.path(),
        &envs,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(open(&sealed[0], &shared_ring)["v"], "for-team");

    // `set` adds an item sealed for the file's namespace.
    let one =
        "kind: Secret\nmetadata:\n  name: a\n  namespace: team-a\nstringData:\n  v: for-team\n";
    let run = kseal_env(&["seal", "-w", "a.yaml"], Some(one), dir.path(), &envs);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = kseal_env(&["set", "a.yaml", "w"], Some("added"), dir.path(), &envs);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let file = std::fs::read_to_string(dir.path().join("a.yaml")).unwrap();
    let opened = open(&parse_sealed(&file)[0], &team_ring);
    assert_eq!(
        (opened["v"].as_str(), opened["w"].as_str()),
        ("for-team", "added")
    );

    // A namespace whose ring cannot seal yet: the controller's reason, and nothing written.
    let run = kseal_env(
        &["seal"],
        Some("kind: Secret\nmetadata:\n  name: a\n  namespace: loading\nstringData:\n  v: x\n"),
        dir.path(),
        &envs,
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stderr
            .contains("serves no certificate for namespace `loading` (HTTP 503)")
            && run.stderr.contains("none of its keys is loaded yet"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty());
}

#[test]
fn flux_ssh_credentials_with_a_generated_key() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    std::fs::write(
        dir.path().join("known_hosts"),
        "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
    )
    .unwrap();
    let run = kseal(
        &[
            "create",
            "git-credentials",
            "--cert",
            s(&cert),
            "--generate-key",
            "--known-hosts-file",
            "known_hosts",
            "--public-key-out",
            "deploy.pub",
        ],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(sealed[0].metadata.name.as_deref(), Some("flux-system"));
    assert_eq!(sealed[0].metadata.namespace.as_deref(), Some("flux-system"));
    let data = open(&sealed[0], &ring(&[&fixture_pair()]));
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["identity", "identity.pub", "known_hosts"]
    );
    assert!(data["identity"].starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
    let public = std::fs::read_to_string(dir.path().join("deploy.pub")).unwrap();
    assert_eq!(data["identity.pub"], public);
    assert!(run.stderr.contains(public.trim()));
    // Only the public key was written to disk.
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["deploy.pub", "known_hosts"]);
    // ssh-keygen, when installed, accepts the private key and derives the same public key.
    let key_path = dir.path().join("id_check");
    std::fs::write(&key_path, &data["identity"]).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    if let Ok(out) = std::process::Command::new("ssh-keygen")
        .args(["-y", "-f", s(&key_path)])
        .output()
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let derived = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            derived.split_whitespace().nth(1),
            public.split_whitespace().nth(1)
        );
    } else {
        no_ssh_keygen("the OpenSSH format cross-check");
    }
    // The same key from a file: identity.pub comes from the key's own header.
    let run = kseal(
        &[
            "create",
            "git-credentials",
            "--cert",
            s(&cert),
            "--identity-file",
            "id_check",
            "--known-hosts-file",
            "known_hosts",
            "--name",
            "gitops-workloads",
        ],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(sealed[0].metadata.name.as_deref(), Some("gitops-workloads"));
    let from_file = open(&sealed[0], &ring(&[&fixture_pair()]));
    assert_eq!(from_file["identity"], data["identity"]);
    assert_eq!(
        from_file["identity.pub"].split_whitespace().nth(1),
        public.split_whitespace().nth(1)
    );
    // A passphrase-protected key is refused without its passphrase (ssh-keygen needed to make
    // one).
    let protected = dir.path().join("protected");
    let made = std::process::Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "pass phrase",
            "-f",
            s(&protected),
        ])
        .status();
    if made.is_ok_and(|st| st.success()) {
        let run = kseal(
            &[
                "create",
                "git-credentials",
                "--cert",
                s(&cert),
                "--identity-file",
                "protected",
                "--known-hosts-file",
                "known_hosts",
            ],
            None,
            dir.path(),
        );
        snap!("err_git_key_with_passphrase", run);
        // With its passphrase, the key and the passphrase Flux needs are sealed together, and
        // ssh-keygen opens the stored key with the stored passphrase.
        let run = kseal(
            &[
                "create",
                "git-credentials",
                "--cert",
                s(&cert),
                "--identity-file",
                "protected",
                "--known-hosts-file",
                "known_hosts",
                "--ssh-key-passphrase-stdin",
            ],
            Some("pass phrase\n"),
            dir.path(),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        let items = open(&parse_sealed(&run.stdout)[0], &ring(&[&fixture_pair()]));
        assert_eq!(items["password"], "pass phrase");
        assert_eq!(
            items["identity.pub"],
            std::fs::read_to_string(dir.path().join("protected.pub")).unwrap()
        );
        let stored = dir.path().join("stored");
        std::fs::write(&stored, &items["identity"]).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&stored, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let out = std::process::Command::new("ssh-keygen")
            .args(["-y", "-P", &items["password"], "-f", s(&stored)])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::remove_file(&stored).unwrap();
    } else {
        no_ssh_keygen("the protected-key checks");
    }
    let run = kseal(
        &[
            "create",
            "git-credentials",
            "--cert",
            s(&cert),
            "--generate-key",
        ],
        None,
        dir.path(),
    );
    snap!("err_flux_ssh_needs_known_hosts", run);
    let run = kseal(
        &["create", "git-credentials", "--cert", s(&cert)],
        None,
        dir.path(),
    );
    snap!("err_git_no_credentials", run);
}

#[test]
fn argocd_and_flux_https_credentials() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    let run = kseal(
        &[
            "create",
            "git-credentials",
            "--cert",
            s(&cert),
            "--for",
            "argocd",
            "--url",
            "https://github.com/acme/fleet.git",
            "--username",
            "x-access-token",
            "--password-stdin",
        ],
        Some("ghp_example\n"),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.contains("ghp_example") && !run.stderr.contains("ghp_example"));
    let sealed = parse_sealed(&run.stdout);
    let meta = &sealed[0].metadata;
    assert_eq!(meta.name.as_deref(), Some("repo-github-com-acme-fleet"));
    assert_eq!(meta.namespace.as_deref(), Some("argocd"));
    let template_meta = sealed[0]
        .spec
        .template
        .as_ref()
        .unwrap()
        .metadata
        .as_ref()
        .unwrap();
    assert_eq!(
        template_meta.labels.as_ref().unwrap()["argocd.argoproj.io/secret-type"],
        "repository"
    );
    let data = open(&sealed[0], &ring(&[&fixture_pair()]));
    assert_eq!(data["type"], "git");
    assert_eq!(data["url"], "https://github.com/acme/fleet.git");
    assert_eq!(data["username"], "x-access-token");
    assert_eq!(data["password"], "ghp_example");
    // Flux with a bearer token from the environment.
    let run = kseal_env(
        &[
            "create",
            "git-credentials",
            "--cert",
            s(&cert),
            "--bearer-token",
            "-o",
            "json",
        ],
        None,
        dir.path(),
        &[("KSEAL_GIT_PASSWORD", "b34r3r")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(
        open(&sealed[0], &ring(&[&fixture_pair()]))["bearerToken"],
        "b34r3r"
    );
    let run = kseal(
        &[
            "create",
            "git-credentials",
            "--cert",
            s(&cert),
            "--for",
            "argocd",
            "--generate-key",
        ],
        None,
        dir.path(),
    );
    snap!("err_argocd_needs_url", run);
}

/// Runs `kseal create git-credentials --cert <fixture cert> ARGS…` in `dir`.
fn git_credentials(args: &[&str], stdin: Option<&str>, dir: &Path, envs: &[(&str, &str)]) -> Run {
    let cert = fixtures().join("keys/tls.crt");
    let mut all = vec!["create", "git-credentials", "--cert", s(&cert)];
    all.extend_from_slice(args);
    kseal_env(&all, stdin, dir, envs)
}

/// The items of the one SealedSecret a successful run printed, opened with the fixture key.
fn opened_items(run: &Run) -> BTreeMap<String, String> {
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(sealed.len(), 1);
    open(&sealed[0], &ring(&[&fixture_pair()]))
}

fn keys_of(items: &BTreeMap<String, String>) -> Vec<&str> {
    items.keys().map(String::as_str).collect()
}

/// The Argo CD secret-type label of the one SealedSecret a run printed.
fn argocd_secret_type(run: &Run) -> String {
    let sealed = parse_sealed(&run.stdout);
    let template = sealed[0].spec.template.as_ref().unwrap();
    let labels = template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
    labels["argocd.argoproj.io/secret-type"].clone()
}

/// An OpenSSH private key file whose header says it is encrypted (aes256-ctr, bcrypt). Only
/// the header is real: kseal reads it, never decrypts, so the ciphertext can be filler.
fn encrypted_openssh_key() -> String {
    use base64::Engine as _;
    fn string(out: &mut Vec<u8>, data: &[u8]) {
        out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
        out.extend_from_slice(data);
    }
    let mut public = Vec::new();
    string(&mut public, b"ssh-ed25519");
    string(&mut public, &[7; 32]);
    let mut kdf_options = Vec::new();
    string(&mut kdf_options, &[1; 16]);
    kdf_options.extend_from_slice(&16u32.to_be_bytes());
    let mut file = b"openssh-key-v1\0".to_vec();
    string(&mut file, b"aes256-ctr");
    string(&mut file, b"bcrypt");
    string(&mut file, &kdf_options);
    file.extend_from_slice(&1u32.to_be_bytes());
    string(&mut file, &public);
    string(&mut file, &[9; 144]);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&file);
    let mut pem = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for line in b64.as_bytes().chunks(70) {
        pem.push_str(std::str::from_utf8(line).unwrap());
        pem.push('\n');
    }
    pem.push_str("-----END OPENSSH PRIVATE KEY-----\n");
    pem
}

const KNOWN_HOSTS: &str =
    "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n";

#[test]
fn flux_ssh_key_with_a_passphrase() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("known_hosts"), KNOWN_HOSTS).unwrap();
    let protected = encrypted_openssh_key();
    std::fs::write(d.join("protected"), &protected).unwrap();
    let ssh = [
        "--identity-file",
        "protected",
        "--known-hosts-file",
        "known_hosts",
    ];
    // From stdin: the newline `echo` adds is dropped; the passphrase goes to item `password`.
    let run = git_credentials(
        &[&ssh[..], &["--ssh-key-passphrase-stdin"]].concat(),
        Some("pass phrase\n"),
        d,
        &[],
    );
    assert!(!run.stdout.contains("pass phrase") && !run.stderr.contains("pass phrase"));
    let items = opened_items(&run);
    assert_eq!(
        keys_of(&items),
        ["identity", "identity.pub", "known_hosts", "password"]
    );
    assert_eq!(items["identity"], protected);
    assert_eq!(items["password"], "pass phrase");
    assert_eq!(items["known_hosts"], KNOWN_HOSTS);
    // The public half comes from the key's unencrypted header.
    assert!(
        items["identity.pub"].starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAcHBwcH"),
        "{}",
        items["identity.pub"]
    );
    // From the environment.
    let run = git_credentials(&ssh, None, d, &[("KSEAL_SSH_KEY_PASSPHRASE", "from env")]);
    assert_eq!(opened_items(&run)["password"], "from env");
    // A PKCS #8 PEM key says it is encrypted in its label.
    std::fs::write(
        d.join("protected.pem"),
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    let run = git_credentials(
        &[
            "--identity-file",
            "protected.pem",
            "--known-hosts-file",
            "known_hosts",
            "--ssh-key-passphrase-stdin",
        ],
        Some("pem pass"),
        d,
        &[],
    );
    let items = opened_items(&run);
    assert_eq!(items["password"], "pem pass");
    assert!(!items.contains_key("identity.pub"));

    // Without a passphrase source (and stdin not a terminal), the error names the options.
    let run = git_credentials(&ssh, None, d, &[]);
    snap!("err_flux_protected_key_needs_passphrase", run);
    let run = git_credentials(
        &[&ssh[..], &["--ssh-key-passphrase-stdin"]].concat(),
        Some("\n"),
        d,
        &[],
    );
    snap!("err_flux_empty_passphrase", run);
    // A generated key has no passphrase; an unprotected key must not get one.
    let run = git_credentials(
        &[
            "--generate-key",
            "--known-hosts-file",
            "known_hosts",
            "--ssh-key-passphrase-prompt",
        ],
        None,
        d,
        &[],
    );
    snap!("err_passphrase_with_generated_key", run);
    let run = git_credentials(
        &["--generate-key", "--known-hosts-file", "known_hosts"],
        None,
        d,
        &[],
    );
    let generated = opened_items(&run);
    assert!(!generated.contains_key("password"));
    std::fs::write(d.join("plain"), &generated["identity"]).unwrap();
    let run = git_credentials(
        &[
            "--identity-file",
            "plain",
            "--known-hosts-file",
            "known_hosts",
        ],
        None,
        d,
        &[("KSEAL_SSH_KEY_PASSPHRASE", "not needed")],
    );
    snap!("err_passphrase_for_unprotected_key", run);
    // Argo CD has no passphrase item: protected keys are refused, with or without one.
    let argocd = [
        "--for",
        "argocd",
        "--url",
        "git@github.com:acme/fleet.git",
        "--identity-file",
        "protected",
    ];
    let run = git_credentials(
        &[&argocd[..], &["--ssh-key-passphrase-prompt"]].concat(),
        None,
        d,
        &[],
    );
    snap!("err_argocd_key_passphrase", run);
    let run = git_credentials(&argocd, None, d, &[]);
    snap!("err_argocd_protected_key", run);
}

#[test]
fn flux_https_with_a_private_ca_and_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    new_pair(d, "ca");
    new_pair(d, "client");
    let read = |name: &str| std::fs::read_to_string(d.join(name)).unwrap();
    let run = git_credentials(
        &[
            "--url",
            "https://git.internal/acme/fleet.git",
            "--ca-file",
            "ca.crt",
            "--client-cert",
            "client.crt",
            "--client-key",
            "client.key",
            "--username",
            "flux",
            "--password-stdin",
        ],
        Some("t0ken\n"),
        d,
        &[],
    );
    let items = opened_items(&run);
    assert_eq!(
        keys_of(&items),
        ["ca.crt", "password", "tls.crt", "tls.key", "username"]
    );
    assert_eq!(items["ca.crt"], read("ca.crt"));
    assert_eq!(items["tls.crt"], read("client.crt"));
    assert_eq!(items["tls.key"], read("client.key"));
    assert_eq!(items["username"], "flux");
    assert_eq!(items["password"], "t0ken");
    // A CA alone is a valid Flux secretRef (a public repository on a private CA).
    let run = git_credentials(&["--ca-file", "ca.crt"], None, d, &[]);
    assert_eq!(keys_of(&opened_items(&run)), ["ca.crt"]);
    // A client certificate alone, for Argo CD, is refused: Argo CD presents it only with a
    // password, a bearer token or a GitHub App, and would connect without credentials.
    let argocd_cert = [
        "--for",
        "argocd",
        "--url",
        "https://git.internal/acme/fleet.git",
        "--client-cert",
        "client.crt",
        "--client-key",
        "client.key",
    ];
    let run = git_credentials(&argocd_cert, None, d, &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("Argo CD presents a TLS client certificate only together with"),
        "{}",
        run.stderr
    );
    // With its companion credential: its own item names.
    let mut with_password = argocd_cert.to_vec();
    with_password.extend(["--username", "argocd", "--password-stdin"]);
    let run = git_credentials(&with_password, Some("t0ken\n"), d, &[]);
    let items = opened_items(&run);
    assert_eq!(
        keys_of(&items),
        [
            "password",
            "tlsClientCertData",
            "tlsClientCertKey",
            "type",
            "url",
            "username"
        ]
    );
    assert_eq!(items["tlsClientCertData"], read("client.crt"));
    assert_eq!(items["tlsClientCertKey"], read("client.key"));

    // Argo CD takes CAs from a ConfigMap, never from a repository Secret.
    let run = git_credentials(
        &[
            "--for",
            "argocd",
            "--url",
            "https://git.internal/acme/fleet.git",
            "--username",
            "argocd",
            "--password",
            "pw",
            "--ca-file",
            "ca.crt",
        ],
        None,
        d,
        &[],
    );
    snap!("err_argocd_ca_file", run);
    std::fs::write(d.join("junk.pem"), "not a certificate\n").unwrap();
    std::fs::write(
        d.join("encrypted.key"),
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    for (name, args) in [
        ("err_ca_file_missing", &["--ca-file", "missing.pem"][..]),
        ("err_ca_file_not_pem", &["--ca-file", "junk.pem"][..]),
        ("err_ca_file_is_a_key", &["--ca-file", "ca.key"][..]),
        (
            "err_client_cert_without_key",
            &["--client-cert", "client.crt"][..],
        ),
        (
            "err_client_key_not_a_key",
            &["--client-cert", "client.crt", "--client-key", "client.crt"][..],
        ),
        (
            "err_client_key_encrypted",
            &[
                "--client-cert",
                "client.crt",
                "--client-key",
                "encrypted.key",
            ][..],
        ),
        (
            "err_client_cert_not_a_certificate",
            &["--client-cert", "junk.pem", "--client-key", "client.key"][..],
        ),
        (
            "err_ca_file_with_ssh",
            &[
                "--generate-key",
                "--known-hosts-file",
                "ca.crt",
                "--ca-file",
                "ca.crt",
            ][..],
        ),
        (
            "err_ca_file_with_ssh_url",
            &[
                "--url",
                "ssh://git@github.com/acme/fleet",
                "--ca-file",
                "ca.crt",
            ][..],
        ),
    ] {
        let run = git_credentials(args, None, d, &[]);
        assert_ne!(run.code, 0, "{name}");
        snap!(name, run);
    }
}

#[test]
fn argocd_repository_settings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = git_credentials(
        &[
            "--for",
            "argocd",
            "--url",
            "https://git.test.internal/acme/fleet.git",
            "--project",
            "platform",
            "--repo-name",
            "fleet",
            "--insecure",
            "--enable-lfs",
            "--username",
            "argocd",
            "--password-stdin",
        ],
        Some("s3cr3t"),
        d,
        &[],
    );
    let items = opened_items(&run);
    assert_eq!(argocd_secret_type(&run), "repository");
    assert_eq!(
        items,
        BTreeMap::from(
            [
                ("enableLfs", "true"),
                ("insecure", "true"),
                ("name", "fleet"),
                ("password", "s3cr3t"),
                ("project", "platform"),
                ("type", "git"),
                ("url", "https://git.test.internal/acme/fleet.git"),
                ("username", "argocd"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        )
    );
    snap!(
        "argocd_insecure_stderr",
        Run {
            stdout: String::new(),
            ..run
        }
    );
    // The same settings from the environment, over SSH.
    std::fs::write(d.join("known_hosts"), KNOWN_HOSTS).unwrap();
    let run = git_credentials(
        &[
            "--for",
            "argocd",
            "--url",
            "git@github.com:acme/fleet.git",
            "--generate-key",
        ],
        None,
        d,
        &[
            ("KSEAL_ARGOCD_PROJECT", "apps"),
            ("KSEAL_ARGOCD_ENABLE_LFS", "true"),
        ],
    );
    let items = opened_items(&run);
    assert_eq!(
        keys_of(&items),
        ["enableLfs", "project", "sshPrivateKey", "type", "url"]
    );
    assert_eq!(items["project"], "apps");

    let run = git_credentials(
        &[
            "--project",
            "platform",
            "--insecure",
            "--username",
            "git",
            "--password",
            "pw",
        ],
        None,
        d,
        &[],
    );
    snap!("err_flux_argocd_only_flags", run);
    let run = git_credentials(
        &[
            "--for",
            "argocd",
            "--argocd-type",
            "repo-creds",
            "--url",
            "https://github.com/acme",
            "--repo-name",
            "acme",
            "--username",
            "git",
            "--password",
            "pw",
        ],
        None,
        d,
        &[],
    );
    snap!("err_repo_creds_repository_only_flags", run);
}

#[test]
fn github_app_credentials_for_argocd_and_flux() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    new_pair(d, "app");
    let app_key = std::fs::read_to_string(d.join("app.key")).unwrap();
    let app = [
        "--github-app-id",
        "42",
        "--github-app-installation-id",
        "7",
        "--github-app-private-key",
        "app.key",
    ];
    let run = git_credentials(
        &[
            &[
                "--for",
                "argocd",
                "--argocd-type",
                "repo-creds",
                "--url",
                "https://ghe.example.com/acme",
                "--github-app-enterprise-base-url",
                "https://ghe.example.com/api/v3",
            ][..],
            &app,
        ]
        .concat(),
        None,
        d,
        &[],
    );
    assert_eq!(argocd_secret_type(&run), "repo-creds");
    let items = opened_items(&run);
    assert_eq!(
        items,
        BTreeMap::from(
            [
                (
                    "githubAppEnterpriseBaseUrl",
                    "https://ghe.example.com/api/v3"
                ),
                ("githubAppID", "42"),
                ("githubAppInstallationID", "7"),
                ("githubAppPrivateKey", app_key.as_str()),
                ("type", "git"),
                ("url", "https://ghe.example.com/acme"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        )
    );
    assert!(!run.stdout.contains("PRIVATE KEY") && !run.stderr.contains("PRIVATE KEY"));
    // Flux: its own name for the Enterprise URL, and a note about `provider: github`.
    let run = git_credentials(
        &[
            &app[..],
            &[
                "--github-app-enterprise-base-url",
                "https://ghe.example.com/api/v3",
            ],
        ]
        .concat(),
        None,
        d,
        &[],
    );
    let items = opened_items(&run);
    assert_eq!(
        keys_of(&items),
        [
            "githubAppBaseURL",
            "githubAppID",
            "githubAppInstallationID",
            "githubAppPrivateKey"
        ]
    );
    assert_eq!(items["githubAppPrivateKey"], app_key);
    snap!(
        "flux_github_app_stderr",
        Run {
            stdout: String::new(),
            ..run
        }
    );

    std::fs::write(d.join("known_hosts"), KNOWN_HOSTS).unwrap();
    let argocd = [
        "--for",
        "argocd",
        "--url",
        "https://github.com/acme/fleet.git",
    ];
    for (name, args) in [
        (
            "err_github_app_with_password",
            [
                &argocd[..],
                &app,
                &["--username", "git", "--password-prompt"],
            ]
            .concat(),
        ),
        (
            "err_github_app_with_ssh",
            [
                &app[..],
                &["--generate-key", "--known-hosts-file", "known_hosts"],
            ]
            .concat(),
        ),
        (
            "err_github_app_incomplete",
            [&argocd[..], &["--github-app-id", "42"]].concat(),
        ),
        (
            "err_github_app_id_not_a_number",
            [
                &argocd[..],
                &[
                    "--github-app-id",
                    "app",
                    "--github-app-installation-id",
                    "7",
                    "--github-app-private-key",
                    "app.key",
                ],
            ]
            .concat(),
        ),
        (
            "err_github_app_key_not_a_key",
            [
                &argocd[..],
                &[
                    "--github-app-id",
                    "42",
                    "--github-app-installation-id",
                    "7",
                    "--github-app-private-key",
                    "app.crt",
                ],
            ]
            .concat(),
        ),
        (
            "err_github_app_ssh_url",
            [
                &["--for", "argocd", "--url", "git@github.com:acme/fleet.git"][..],
                &app,
            ]
            .concat(),
        ),
        (
            "err_github_app_base_url",
            [
                &argocd[..],
                &app,
                &[
                    "--github-app-enterprise-base-url",
                    "http://ghe.example.com/api/v3",
                ],
            ]
            .concat(),
        ),
    ] {
        let run = git_credentials(&args, None, d, &[]);
        assert_ne!(run.code, 0, "{name}");
        snap!(name, run);
    }
}

#[test]
fn aws_credentials_for_crossplane_and_eso() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    let envs = [
        ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE00"),
        (
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
    ];
    // Never implicitly from the shell's own AWS variables: the source must be named.
    let run = kseal_env(
        &["create", "aws-credentials", "--cert", s(&cert)],
        None,
        dir.path(),
        &envs,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr
            .contains("AWS_ACCESS_KEY_ID is set in this shell")
            && run.stderr.contains("--from-env"),
        "{}",
        run.stderr
    );
    let run = kseal_env(
        &[
            "create",
            "aws-credentials",
            "--cert",
            s(&cert),
            "--from-env",
        ],
        None,
        dir.path(),
        &envs,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    snap!(
        "aws_crossplane_stderr",
        Run {
            stdout: String::new(),
            ..run
        }
    );
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(sealed[0].metadata.name.as_deref(), Some("aws-credentials"));
    assert_eq!(
        sealed[0].metadata.namespace.as_deref(),
        Some("crossplane-system")
    );
    let data = open(&sealed[0], &ring(&[&fixture_pair()]));
    assert_eq!(
        data["credentials"],
        "[default]\naws_access_key_id = AKIAEXAMPLEEXAMPLE00\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
    );
    // From a profile, for ESO.
    std::fs::write(
        dir.path().join("creds"),
        "[default]\naws_access_key_id = AKIAOTHER\naws_secret_access_key = x\n[ci]\naws_access_key_id = ASIACI\naws_secret_access_key = y\naws_session_token = z\n",
    )
    .unwrap();
    let run = kseal_env(
        &[
            "create",
            "aws-credentials",
            "--cert",
            s(&cert),
            "--for",
            "eso",
            "--profile",
            "ci",
            "-n",
            "team-a",
        ],
        None,
        dir.path(),
        &[("AWS_SHARED_CREDENTIALS_FILE", "creds")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(sealed[0].metadata.name.as_deref(), Some("awssm-secret"));
    assert_eq!(sealed[0].metadata.namespace.as_deref(), Some("team-a"));
    let data = open(&sealed[0], &ring(&[&fixture_pair()]));
    assert_eq!(data["access-key"], "ASIACI");
    assert_eq!(data["secret-access-key"], "y");
    assert_eq!(data["session-token"], "z");
    let run = kseal_env(
        &[
            "create",
            "aws-credentials",
            "--cert",
            s(&cert),
            "--from-env",
        ],
        None,
        dir.path(),
        &[("AWS_ACCESS_KEY_ID", "AKIAONLY")],
    );
    snap!("err_aws_incomplete", run);
    // The secret key from stdin, never as a flag; an empty one is named as such.
    let run = kseal_env(
        &[
            "create",
            "aws-credentials",
            "--cert",
            s(&cert),
            "--access-key-id",
            "AKIAEXAMPLEEXAMPLE00",
            "--secret-access-key-stdin",
        ],
        Some("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"),
        dir.path(),
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    let data = open(&sealed[0], &ring(&[&fixture_pair()]));
    assert_eq!(
        data["credentials"],
        "[default]\naws_access_key_id = AKIAEXAMPLEEXAMPLE00\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
    );
    let run = kseal_env(
        &[
            "create",
            "aws-credentials",
            "--cert",
            s(&cert),
            "--access-key-id",
            "AKIAEXAMPLEEXAMPLE00",
            "--secret-access-key-stdin",
        ],
        Some(""),
        dir.path(),
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("the secret access key is empty"),
        "{}",
        run.stderr
    );
    let run = kseal_env(
        &["create", "aws-credentials", "--cert", s(&cert)],
        None,
        dir.path(),
        &[("HOME", s(dir.path()))],
    );
    snap!(
        "err_aws_none",
        Run {
            stderr: run.stderr.replace(s(dir.path()), "[HOME]"),
            ..run
        }
    );
}

/// The fixture key as a key Secret, and as a `v1 List` of key Secrets.
fn key_secret_manifests(dir: &Path) {
    use base64::Engine as _;
    let f = fixtures();
    let b64 = |p: &str| {
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(f.join(p)).unwrap())
    };
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: sealed-secrets-key8x2k\n  namespace: kseal-system\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\n  labels:\n    sealedsecrets.bitnami.com/sealed-secrets-key: active\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n",
        b64("keys/tls.crt"),
        b64("keys/tls.key")
    );
    std::fs::write(dir.join("key-secret.yaml"), &secret).unwrap();
    let item = secret
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("- {l}")
            } else {
                format!("  {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(
        dir.join("key-list.yaml"),
        format!("apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\nitems:\n{item}\n"),
    )
    .unwrap();
}

#[test]
fn unseal_takes_key_secret_backups_and_lists() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    key_secret_manifests(dir.path());
    let golden = f.join("sealed-secret.strict.golden.yaml");
    for keys in ["key-secret.yaml", "key-list.yaml"] {
        let run = kseal(
            &["unseal", "--key", keys, "-f", s(&golden), "-o", "json"],
            None,
            dir.path(),
        );
        assert_eq!(run.code, 0, "{keys}: {}", run.stderr);
        let secret: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(secret["data"]["password"], "Z29sZGVuLXBhc3N3b3Jk");
    }
    std::fs::write(
        dir.path().join("no-key.yaml"),
        "kind: Secret\nmetadata:\n  name: k\ndata:\n  tls.crt: eA==\n",
    )
    .unwrap();
    let run = kseal(
        &["unseal", "--key", "no-key.yaml", "-f", s(&golden)],
        None,
        dir.path(),
    );
    snap!("err_unseal_secret_without_tls_key", run);
}

#[test]
fn keys_inspect_describes_certificates_keys_and_key_secrets() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    key_secret_manifests(dir.path());
    let run = kseal(
        &[
            "keys",
            "inspect",
            s(&f.join("keys/tls.crt")),
            s(&f.join("keys/tls.key")),
            "key-list.yaml",
        ],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.contains("PRIVATE"));
    snap!("keys_inspect", run);
    std::fs::write(dir.path().join("junk.pem"), "-----BEGIN NOTHING-----\n").unwrap();
    let run = kseal(&["keys", "inspect", "junk.pem"], None, dir.path());
    snap!("err_keys_inspect_junk", run);
}

#[test]
fn reseal_moves_every_item_to_the_new_key_and_keeps_template_data() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let new = new_pair(dir.path(), "new");
    let old = fixture_pair();
    let golden = std::fs::read_to_string(f.join("sealed-secret.strict.golden.yaml")).unwrap();
    let with_template = golden.replace(
        "    type: Opaque",
        "    type: Opaque\n    data:\n      url: 'https://git:{{ .password }}@example.com'",
    );
    std::fs::write(dir.path().join("s.yaml"), &with_template).unwrap();
    let run = kseal(
        &[
            "reseal",
            "--key",
            s(&f.join("keys/tls.key")),
            "--cert",
            "new.crt",
            "s.yaml",
        ],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("url: https://git:{{ .password }}@example.com")
    );
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(sealed[0].sealing_key_hint().unwrap(), *new.id());
    let label = kseal_keys::Scope::Strict.label("flux-system", "git-credentials");
    let new_ring = ring(&[&new]);
    for (item, value) in &sealed[0].spec.encrypted_data {
        let opened = new_ring.open_base64(&label, value, None).unwrap();
        if item == "password" {
            assert_eq!(opened.plaintext.expose(), b"golden-password");
        }
        assert!(ring(&[&old]).open_base64(&label, value, None).is_err());
    }
    // In place, to the newest of the --key files (both keys given).
    std::fs::write(dir.path().join("g.yaml"), &golden).unwrap();
    let run = kseal(
        &[
            "reseal",
            "--key",
            s(&f.join("keys/tls.key")),
            "--key",
            "new.key",
            "--in-place",
            "g.yaml",
        ],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&std::fs::read_to_string(dir.path().join("g.yaml")).unwrap());
    assert_eq!(
        open(&sealed[0], &ring(&[&new]))["password"],
        "golden-password"
    );
    // Wrong key: error, file untouched.
    let run = kseal(
        &["reseal", "--key", "new.key", "--in-place", "s.yaml"],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 1);
    snap!("err_reseal_wrong_key", run);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("s.yaml")).unwrap(),
        with_template
    );
}

#[test]
fn validate_reports_per_object() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    new_pair(dir.path(), "other");
    let key = f.join("keys/tls.key");
    let files = [
        f.join("sealed-secret.strict.golden.yaml"),
        f.join("sealed-secret.namespace-wide.golden.yaml"),
        f.join("sealed-secret.cluster-wide.golden.json"),
    ];
    let mut args = vec!["validate", "--key", s(&key)];
    args.extend(files.iter().map(|p| s(p)));
    let run = kseal(&args, None, dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    snap!("validate_ok", run);
    // A renamed strict object no longer opens.
    let golden = std::fs::read_to_string(&files[0]).unwrap();
    std::fs::write(
        dir.path().join("renamed.yaml"),
        golden.replacen(
            "  name: git-credentials\n  namespace",
            "  name: renamed\n  namespace",
            1,
        ),
    )
    .unwrap();
    let run = kseal(
        &["validate", "--key", s(&key), "renamed.yaml", s(&files[1])],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 1);
    snap!("validate_renamed_fails", run);
    let run = kseal(
        &["validate", "--key", "other.key", s(&files[1])],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 1);
    snap!("validate_wrong_key", run);
}

#[test]
fn bad_inputs_fail_cleanly() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    // A huge value seals and round-trips.
    let big = "x".repeat(2 * 1024 * 1024);
    let secret = format!(
        "kind: Secret\nmetadata:\n  name: big\n  namespace: n\nstringData:\n  blob: {big}\n"
    );
    let run = kseal(&["seal", "--cert", s(&cert)], Some(&secret), dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(
        open(&sealed[0], &ring(&[&fixture_pair()]))["blob"].len(),
        big.len()
    );
    // Not a certificate at all, and an EC-like garbage PEM.
    std::fs::write(dir.path().join("garbage.crt"), "hello\n").unwrap();
    let run = kseal(&["seal", "--cert", "garbage.crt"], Some(SECRET), dir.path());
    snap!("err_cert_garbage", run);
    // An ECDSA certificate cannot seal.
    let ec = rcgen::generate_simple_self_signed(vec!["ec.example".to_owned()]).unwrap();
    std::fs::write(dir.path().join("ec.crt"), ec.cert.pem()).unwrap();
    let run = kseal(&["seal", "--cert", "ec.crt"], Some(SECRET), dir.path());
    snap!("err_cert_not_rsa", run);
    // Unseal input that is a Secret, not a SealedSecret.
    let run = kseal(
        &["unseal", "--key", s(&f.join("keys/tls.key"))],
        Some(SECRET),
        dir.path(),
    );
    snap!("err_unseal_wrong_kind", run);
    let run = kseal(
        &["validate", "--key", s(&f.join("keys/tls.key"))],
        Some(""),
        dir.path(),
    );
    snap!("err_validate_empty", run);
    let run = kseal(&["reseal", "--key", "nowhere.key"], Some(""), dir.path());
    snap!("err_reseal_missing_key_file", run);
}

/// The interop vectors: kseal's own (`keys/tests/vectors/go-stdlib.json`, Go's standard
/// library), then Bitnami's (`../shared/interop/set-a.json`) where that folder is beside the
/// checkout. Each vector becomes a one-item SealedSecret; `unseal` must return the plaintext of
/// the positive ones and `validate` must accept exactly those.
#[test]
fn interop_vectors_unseal_and_validate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sets = vec![root.join("../keys/tests/vectors/go-stdlib.json")];
    let shared = root.join("../../shared/interop/set-a.json");
    if shared.exists() {
        sets.push(shared);
    } else {
        kseal_testkit::skipped(
            "SKIPPED: interop_vectors_unseal_and_validate: Bitnami's set-a (../../shared/interop) is not beside the checkout; kseal's own set ran",
        );
    }
    for path in sets {
        interop_set_unseals_and_validates(&path);
    }
}

fn interop_set_unseals_and_validates(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let set: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("interop.key"),
        set["key"]["private_key_pkcs1_pem"].as_str().unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for vector in set["vectors"].as_array().unwrap() {
        let id = vector["id"].as_str().unwrap();
        let scope = vector["scope"].as_str().unwrap_or("strict");
        let annotation = match scope {
            "namespace-wide" => {
                "\n  annotations:\n    sealedsecrets.bitnami.com/namespace-wide: \"true\""
            }
            "cluster-wide" => {
                "\n  annotations:\n    sealedsecrets.bitnami.com/cluster-wide: \"true\""
            }
            _ => "",
        };
        // Each vector names the object it is opened as (negative label vectors: another
        // name or scope than it was sealed for).
        let manifest = format!(
            "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: {}\n  namespace: {}{annotation}\nspec:\n  encryptedData:\n    value: {}\n",
            vector["name"].as_str().unwrap(),
            vector["namespace"].as_str().unwrap(),
            vector["sealed_b64"].as_str().unwrap()
        );
        let file = dir.path().join("v.yaml");
        std::fs::write(&file, &manifest).unwrap();
        let validate = kseal(
            &["validate", "--key", "interop.key", "v.yaml"],
            None,
            dir.path(),
        );
        let expect_ok = vector["expect"] == "ok";
        assert_eq!(
            validate.code == 0,
            expect_ok,
            "{id}: {}{}",
            validate.stdout,
            validate.stderr
        );
        if expect_ok {
            let run = kseal(
                &[
                    "unseal",
                    "--key",
                    "interop.key",
                    "-f",
                    "v.yaml",
                    "-o",
                    "json",
                ],
                None,
                dir.path(),
            );
            assert_eq!(run.code, 0, "{id}: {}", run.stderr);
            let secret: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
            let got = secret["data"]["value"].as_str().unwrap_or("");
            assert_eq!(got, vector["plaintext_b64"].as_str().unwrap(), "{id}");
        }
        checked += 1;
    }
    assert_eq!(
        checked,
        set["vectors"].as_array().unwrap().len(),
        "every vector of {} is checked",
        path.display()
    );
    assert!(checked >= 20, "{}: {checked} vectors", path.display());
}

#[test]
fn validate_asks_the_controller_when_told_to() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let service = (
        "/api/v1/namespaces/kseal-system/services/kseal-controller",
        200,
        r#"{"spec":{"ports":[{"name":"http","port":8080}]}}"#.to_owned(),
    );
    let verify =
        "/api/v1/namespaces/kseal-system/services/http:kseal-controller:http/proxy/v1/verify";
    let golden = f.join("sealed-secret.strict.golden.yaml");
    for (status, body, name) in [
        (
            200,
            "ok: 3 sealed values decrypt\n",
            "validate_controller_ok",
        ),
        (
            409,
            "no key could decrypt secret\n",
            "validate_controller_fails",
        ),
    ] {
        let server = serve(vec![service.clone(), (verify, status, body.to_owned())]);
        kubeconfig(dir.path(), server.port);
        let run = kseal_env(
            &["validate", "--controller", s(&golden)],
            None,
            dir.path(),
            &[("KUBECONFIG", "kubeconfig")],
        );
        assert_eq!(run.code, i32::from(status != 200), "{}", run.stderr);
        snap!(name, run);
        let requests = server.requests.lock().unwrap().clone();
        let post = requests.iter().find(|r| r.starts_with("POST ")).unwrap();
        assert!(post.contains(r#""kind":"SealedSecret""#), "{post}");
        assert!(post.contains("git-credentials"), "{post}");
    }
    let run = kseal(&["validate", s(&golden)], None, dir.path());
    snap!("err_validate_needs_keys_or_controller", run);
}

#[test]
fn keys_generate_prints_a_key_secret_that_unseals() {
    let dir = tempfile::tempdir().unwrap();
    let run = kseal(
        &[
            "keys",
            "generate",
            "--key-size",
            "2048",
            "-n",
            "kube-system",
        ],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("sealedsecrets.bitnami.com/sealed-secrets-key: active")
    );
    assert!(run.stdout.contains("namespace: kube-system"));
    std::fs::write(dir.path().join("key.yaml"), &run.stdout).unwrap();
    let run = kseal(&["keys", "inspect", "key.yaml"], None, dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("private key  present, matches the certificate")
    );
    let run = kseal(&["keys", "generate", "-n", "Bad_NS"], None, dir.path());
    snap!("err_keys_generate_bad_namespace", run);
    // Kubernetes' rule, not only its alphabet: a namespace cannot start or end with '-'.
    for bad in ["-ns", "ns-", "team.a"] {
        let flag = format!("--namespace={bad}");
        let run = kseal(&["keys", "generate", &flag], None, dir.path());
        assert_eq!(run.code, 1, "{bad}: {}", run.stderr);
        assert!(
            run.stderr
                .starts_with(&format!("error: `{bad}` is not a valid namespace name: ")),
            "{}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "{bad}: no key is printed");
    }
}

#[test]
fn reseal_asks_the_controller_when_told_to() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let golden = std::fs::read_to_string(f.join("sealed-secret.strict.golden.yaml")).unwrap();
    std::fs::write(dir.path().join("s.yaml"), &golden).unwrap();
    let rotated = r#"{"apiVersion":"bitnami.com/v1alpha1","kind":"SealedSecret","metadata":{"name":"git-credentials","namespace":"flux-system","annotations":{"kseal.dev/sealing-key":"SHA256:rotated"}},"spec":{"encryptedData":{"password":"AgBnew"}}}"#;
    let server = serve(vec![
        (
            "/api/v1/namespaces/kseal-system/services/kseal-controller",
            200,
            r#"{"spec":{"ports":[{"name":"http","port":8080}]}}"#.to_owned(),
        ),
        (
            "/api/v1/namespaces/kseal-system/services/http:kseal-controller:http/proxy/v1/rotate",
            200,
            rotated.to_owned(),
        ),
    ]);
    kubeconfig(dir.path(), server.port);
    let run = kseal_env(
        &["reseal", "--controller", "--in-place", "s.yaml"],
        None,
        dir.path(),
        &[("KUBECONFIG", "kubeconfig")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    snap!("reseal_controller_stderr", run);
    let text = std::fs::read_to_string(dir.path().join("s.yaml")).unwrap();
    assert!(text.starts_with("---\n"), "stays YAML: {text}");
    assert!(text.contains("SHA256:rotated") && text.contains("password: AgBnew"));
    let requests = server.requests.lock().unwrap().clone();
    let post = requests.iter().find(|r| r.starts_with("POST ")).unwrap();
    assert!(
        post.contains("golden") || post.contains("encryptedData"),
        "{post}"
    );
    let run = kseal(&["reseal", "s.yaml"], None, dir.path());
    snap!("err_reseal_needs_keys_or_controller", run);
}

#[test]
fn validate_and_unseal_render_template_data() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let key = f.join("keys/tls.key");
    let golden = std::fs::read_to_string(f.join("sealed-secret.strict.golden.yaml")).unwrap();
    let with = |template: &str| {
        golden.replace(
            "    type: Opaque",
            &format!("    type: Opaque\n    data:\n      url: '{template}'"),
        )
    };
    std::fs::write(
        dir.path().join("good.yaml"),
        with("https://{{ .username }}:{{ .password }}@example.com"),
    )
    .unwrap();
    std::fs::write(dir.path().join("bad.yaml"), with("{{ .password ")).unwrap();
    let run = kseal(
        &["validate", "--key", s(&key), "good.yaml", "bad.yaml"],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 1);
    assert!(!run.stdout.contains("golden-password") && !run.stderr.contains("golden-password"));
    snap!("validate_templates", run);
    let run = kseal(
        &["unseal", "--key", s(&key), "-f", "good.yaml", "-o", "json"],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let secret: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    use base64::Engine as _;
    let url = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["url"].as_str().unwrap())
        .unwrap();
    assert_eq!(url, b"https://git:golden-password@example.com");
}

/// A key backup as `kubectl get secret -l sealedsecrets.bitnami.com/sealed-secrets-key -o
/// yaml` prints it: one key Secret per `(pair, creationTimestamp, marker)`. A marker makes it
/// a mirror of kseal's controller (`kseal.dev/mirror: "true"`, `kseal.dev/active` set to it);
/// `None` a plain Bitnami key Secret.
fn key_backup(keys: &[(&KeyPair, &str, Option<bool>)]) -> String {
    use base64::Engine as _;
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let items: Vec<serde_json::Value> = keys
        .iter()
        .enumerate()
        .map(|(i, (pair, created, marker))| {
            let mut labels =
                serde_json::json!({"sealedsecrets.bitnami.com/sealed-secrets-key": "active"});
            let mut annotations = serde_json::json!({});
            if let Some(active) = marker {
                labels["kseal.dev/mirror"] = "true".into();
                annotations["kseal.dev/active"] = active.to_string().into();
            }
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/tls",
                "metadata": {
                    "name": format!("kseal-ring-{i:016x}"),
                    "namespace": "kseal-system",
                    "creationTimestamp": created,
                    "labels": labels,
                    "annotations": annotations,
                },
                "data": {
                    "tls.key": b64(&pair.private_key().to_pkcs1_pem().unwrap()),
                    "tls.crt": b64(&pair.certificate().to_pem()),
                },
            })
        })
        .collect();
    serde_saphyr::to_string(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": items,
    }))
    .unwrap()
}

/// A backup of kseal's mirrors taken mid-rotation: the active key is older than a key pushed
/// but not activated yet. `reseal` and `seal` must seal to the active key (every cluster has
/// it), never to the newest (which some clusters may not have fetched yet).
#[test]
fn reseal_and_seal_use_the_key_a_backup_marks_active_not_the_newest() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let active = new_pair(d, "active");
    let pending = new_pair(d, "pending");
    let backup = key_backup(&[
        (&active, "2026-11-24T00:00:00Z", Some(true)),
        (&pending, "2026-11-25T00:00:00Z", Some(false)),
    ]);
    std::fs::write(d.join("backup.yaml"), &backup).unwrap();
    let golden = std::fs::read_to_string(f.join("sealed-secret.strict.golden.yaml")).unwrap();
    std::fs::write(d.join("s.yaml"), &golden).unwrap();
    // The fixture key (notBefore 2026-11-22) opens the golden file and is older than both.
    let fixture_key = f.join("keys/tls.key");
    let keys = format!("{},backup.yaml", s(&fixture_key));

    let run = kseal(&["reseal", "--key", &keys, "s.yaml"], None, d);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr, "", "a marked backup needs no note");
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(sealed[0].sealing_key_hint().unwrap(), *active.id());
    assert_eq!(
        open(&sealed[0], &ring(&[&active]))["password"],
        "golden-password"
    );
    assert!(kseal_api::unseal(&sealed[0], &ring(&[&pending])).is_err());
    std::fs::write(d.join("resealed.yaml"), &run.stdout).unwrap();

    // seal --cert <backup>: its sealing key, from the public tls.crt.
    let run = kseal(&["seal", "--cert", "backup.yaml"], Some(SECRET), d);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sealed = parse_sealed(&run.stdout);
    assert_eq!(sealed[0].sealing_key_hint().unwrap(), *active.id());
    assert_eq!(open(&sealed[0], &ring(&[&active]))["password"], "s3cr3t");

    // validate with the backup: the resealed file opens with the active key.
    let run = kseal(
        &["validate", "--key", "backup.yaml", "resealed.yaml"],
        None,
        d,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!(" with {}", active.id())),
        "{}",
        run.stdout
    );

    // Two keys marked active (a backup taken while the controller switched keys): refused,
    // naming both, and nothing is written.
    std::fs::write(
        d.join("two.yaml"),
        key_backup(&[
            (&active, "2026-11-24T00:00:00Z", Some(true)),
            (&pending, "2026-11-25T00:00:00Z", Some(true)),
        ]),
    )
    .unwrap();
    let keys_two = format!("{},two.yaml", s(&fixture_key));
    for args in [
        &["reseal", "--key", &keys_two, "--in-place", "s.yaml"][..],
        &["seal", "--cert", "two.yaml"][..],
    ] {
        let run = kseal(args, Some(SECRET), d);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert_eq!(run.stdout, "");
        for id in [active.id(), pending.id()] {
            assert!(run.stderr.contains(id.as_str()), "{}", run.stderr);
        }
        assert!(
            run.stderr
                .contains("2 keys are marked as the ring's active key"),
            "{}",
            run.stderr
        );
    }
    assert_eq!(std::fs::read_to_string(d.join("s.yaml")).unwrap(), golden);

    // Mirrors without the active one (a partial backup): the newest may be a pending key.
    std::fs::write(
        d.join("partial.yaml"),
        key_backup(&[(&pending, "2026-11-25T00:00:00Z", Some(false))]),
    )
    .unwrap();
    let run = kseal(&["seal", "--cert", "partial.yaml"], Some(SECRET), d);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("not the one marked active"),
        "{}",
        run.stderr
    );

    // A plain Bitnami backup: the newest seals, as in Bitnami, and a note says which and why.
    std::fs::write(
        d.join("bitnami.yaml"),
        key_backup(&[
            (&active, "2026-11-24T00:00:00Z", None),
            (&pending, "2026-11-25T00:00:00Z", None),
        ]),
    )
    .unwrap();
    let keys_plain = format!("{},bitnami.yaml", s(&fixture_key));
    let run = kseal(&["reseal", "--key", &keys_plain, "s.yaml"], None, d);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        parse_sealed(&run.stdout)[0].sealing_key_hint().unwrap(),
        *pending.id()
    );
    assert!(
        run.stderr
            .starts_with("note: none of the 3 keys given is marked")
            && run.stderr.contains(&format!(
                "the newest seals, as in Bitnami: {} (Secret `kseal-ring-0000000000000001` in \
                 `bitnami.yaml`, dated 2026-11-25 00:00:00 UTC)",
                pending.id()
            )),
        "{}",
        run.stderr
    );
}

/// Importing a backup of kseal's mirrors into an empty ring keeps the key that sealed where
/// it came from (the one marked active), not the newest (pushed there but never activated).
#[test]
fn import_of_a_marked_backup_into_an_empty_ring_keeps_its_active_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let active = new_pair(d, "active");
    let pending = new_pair(d, "pending");
    let backup = key_backup(&[
        (&active, "2026-11-24T00:00:00Z", Some(true)),
        (&pending, "2026-11-25T00:00:00Z", Some(false)),
    ]);
    std::fs::write(d.join("backup.yaml"), &backup).unwrap();
    let url = format!("dir://{}", d.join("ring").display());
    let run = kseal(&["keys", "import", "--ring", &url, "backup.yaml"], None, d);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let list = kseal(&["keys", "list", "--ring", &url, "-o", "json"], None, d);
    assert_eq!(list.code, 0, "{}", list.stderr);
    let index: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let kid = |pair: &KeyPair| kseal_keystore::Kid::of(pair.public_key()).to_string();
    assert_eq!(index["active"], kid(&active), "{}", list.stdout);
    assert_eq!(index["keys"].as_array().unwrap().len(), 2);
}

/// Empty values are refused (an unset `$TOKEN` piped in), `-w` creates missing directories
/// and a key pair never lands in a directory that holds other files.
#[test]
fn first_hour_foot_guns_are_refused_or_handled() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let cert = f.join("keys/tls.crt");
    let raw = [
        "seal",
        "--cert",
        s(&cert),
        "--raw",
        "-n",
        "prod",
        "--name",
        "db",
    ];
    let run = kseal(&raw, Some(""), dir.path());
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr.contains("refusing to seal an empty value")
            && run.stderr.contains("--allow-empty-data"),
        "{}",
        run.stderr
    );
    let mut allowed = raw.to_vec();
    allowed.push("--allow-empty-data");
    let run = kseal(&allowed, Some(""), dir.path());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let opened = ring(&[&fixture_pair()])
        .open_base64(
            &kseal_keys::Scope::Strict.label("prod", "db"),
            &run.stdout,
            None,
        )
        .unwrap();
    assert!(opened.plaintext.expose().is_empty());

    // `-w` into directories that do not exist yet, as in a new GitOps repository.
    let run = kseal(
        &[
            "seal",
            "--cert",
            s(&cert),
            "-w",
            "clusters/prod/db.sealed.yaml",
        ],
        Some(SECRET),
        dir.path(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("created directory `clusters/prod`"));
    let path = dir.path().join("clusters/prod/db.sealed.yaml");
    let sealed = parse_sealed(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(sealed[0].metadata.name.as_deref(), Some("db"));

    // `set` with an empty value leaves the file as it was.
    let before = std::fs::read(&path).unwrap();
    let run = kseal(
        &[
            "set",
            "--cert",
            s(&cert),
            "clusters/prod/db.sealed.yaml",
            "token",
        ],
        Some(""),
        dir.path(),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("refusing to seal an empty value"));
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // `keys generate --out-dir keys` in a clone would write into the `keys/` crate.
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    std::fs::write(dir.path().join("keys/Cargo.toml"), "[package]\n").unwrap();
    let run = kseal(
        &[
            "keys",
            "generate",
            "--out-dir",
            "keys",
            "--key-size",
            "2048",
        ],
        None,
        dir.path(),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("already holds other files (`Cargo.toml`)"),
        "{}",
        run.stderr
    );
    assert!(!dir.path().join("keys/tls.key").exists());
}

/// ssh-keygen is missing: a failure under CI=true (scripts/test.sh installs openssh-client),
/// a counted skip elsewhere.
fn no_ssh_keygen(what: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "ssh-keygen is not installed, but CI=true: {what} must run (install openssh-client)"
    );
    kseal_testkit::skipped(&format!("SKIPPED: {what}: ssh-keygen is not installed"));
}

/// YAML 1.2 plain scalars, as kseal and `kubectl` read them (`no` is a string).
fn yaml_1_2() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options
}
