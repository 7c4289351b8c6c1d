//! `kseal cert` against the reference kube-apiserver (tests/refapi, Kubernetes 1.20): client
//! certificate authentication from a kubeconfig (inline `client-certificate-data` and files),
//! a bearer token for parity, and a client certificate from a CA the server does not know.
//!
//! Fetching the certificate end to end through the real service proxy is not tested here: the
//! 1.20 apiserver refuses loopback Endpoints addresses, and these tests listen on 127.0.0.1
//! only. The proxy path itself is covered against the in-process test server.
//!
//! The apiserver comes from `KSEAL_REFAPI_*` (tests/refapi/start.sh prints them and
//! scripts/test.sh sets them). Without them these tests fail under `CI=true` and skip loudly
//! otherwise.

use std::path::PathBuf;

use super::*;

/// The reference apiserver's kubeconfigs.
struct RefApi {
    /// Bearer token of a `system:masters` user.
    token: PathBuf,
    /// Inline client certificate of a `system:masters` user.
    cert: PathBuf,
    /// The same client certificate as files named relative to the kubeconfig.
    cert_files: PathBuf,
}

/// The reference apiserver, or `None` (skip loudly; fail under `CI=true`).
fn refapi(test: &str) -> Option<RefApi> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let names = [
        "KSEAL_REFAPI_KUBECONFIG",
        "KSEAL_REFAPI_KUBECONFIG_CERT",
        "KSEAL_REFAPI_KUBECONFIG_CERT_FILES",
    ];
    let missing: Vec<&str> = names.into_iter().filter(|n| var(n).is_none()).collect();
    if !missing.is_empty() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{} not set, but CI=true: the CLI must be tested against the reference kube-apiserver",
            missing.join(", ")
        );
        kseal_testkit::skipped(&format!(
            "SKIPPED: {test} against a real kube-apiserver needs {} (scripts/test.sh sets them)",
            missing.join(", ")
        ));
        return None;
    }
    Some(RefApi {
        token: var(names[0])?,
        cert: var(names[1])?,
        cert_files: var(names[2])?,
    })
}

/// A controller name no test creates, so `kseal cert` must end in "Service not found". Named
/// explicitly because deploy/check.sh creates (and deletes in the background) the default
/// `kseal-system/kseal-controller` on the same apiserver.
fn absent_controller() -> String {
    format!("kseal-absent-{}", std::process::id())
}

fn cert_args<'a>(kubeconfig: &'a Path, controller: &'a str) -> Vec<&'a str> {
    vec![
        "cert",
        "--kubeconfig",
        s(kubeconfig),
        "--controller-name",
        controller,
        "--controller-namespace",
        "default",
    ]
}

/// Reaching "no Service" means the apiserver authenticated the request (and authorized
/// `get services`): a rejected credential reads "HTTP 401" or "HTTP 403" instead.
#[test]
fn client_certificates_and_tokens_authenticate_to_a_real_apiserver() {
    let Some(api) = refapi("client_certificates_and_tokens_authenticate_to_a_real_apiserver")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let name = absent_controller();
    let mut stderrs = Vec::new();
    for (what, kubeconfig) in [
        ("client-certificate-data", &api.cert),
        ("client-certificate files", &api.cert_files),
        ("bearer token", &api.token),
    ] {
        let run = kseal(&cert_args(kubeconfig, &name), None, dir.path());
        assert_eq!(run.code, 1, "{what}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{what}");
        assert!(
            run.stderr.contains(&format!(
                "no Service `{name}` in namespace `default` (context `kseal-refapi`): if the \
                 controller is installed under another name, pass --controller-name and \
                 --controller-namespace"
            )),
            "{what}: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("HTTP 401") && !run.stderr.contains("HTTP 403"),
            "{what}: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("PRIVATE KEY"),
            "{what}: {}",
            run.stderr
        );
        stderrs.push(run.stderr);
    }
    // The credential does not show in the message: all three read the same.
    assert!(stderrs.windows(2).all(|w| w[0] == w[1]), "{stderrs:?}");
}

/// A client certificate for the same user and group, signed by a fresh CA the apiserver does not
/// trust (`--client-ca-file` is the cluster CA). The CA even has the cluster CA's name, so only
/// the signature tells them apart.
fn foreign_client_certificate() -> (String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, "kseal-refapi-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_key = KeyPair::generate().unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client
        .distinguished_name
        .push(DnType::CommonName, "kseal-cert-admin");
    client
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    client.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().unwrap();
    let cert = client.signed_by(&key, &issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

#[test]
fn a_client_certificate_from_an_unknown_ca_is_rejected_as_unauthorized() {
    use base64::Engine as _;
    let Some(api) = refapi("a_client_certificate_from_an_unknown_ca_is_rejected_as_unauthorized")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The cluster (server, CA) of the good kubeconfig, with the foreign certificate as its user.
    let mut config: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&api.cert).unwrap()).unwrap();
    let (cert_pem, key_pem) = foreign_client_certificate();
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let user = serde_json::to_value(BTreeMap::from([
        ("client-certificate-data", b64(&cert_pem)),
        ("client-key-data", b64(&key_pem)),
    ]))
    .unwrap();
    config["users"][0]["user"] = user;
    let kubeconfig = dir.path().join("kubeconfig-foreign");
    std::fs::write(&kubeconfig, serde_saphyr::to_string(&config).unwrap()).unwrap();

    let name = absent_controller();
    let run = kseal(&cert_args(&kubeconfig, &name), None, dir.path());
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.starts_with("error: ")
            && run.stderr.contains(&format!(
                "failed to read Service `default/{name}` (context `kseal-refapi`): HTTP 401: \
                 Unauthorized"
            )),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    // Nothing of the key: not its PEM, not a line of its body, not the kubeconfig's base64.
    let key_body = key_pem.lines().nth(1).unwrap();
    for secret in ["PRIVATE KEY", key_body, &b64(&key_pem)] {
        assert!(!run.stderr.contains(secret), "{}", run.stderr);
    }
}
