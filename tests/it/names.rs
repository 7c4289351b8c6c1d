//! `kseal_api::validation` against the reference kube-apiserver: for every name of a table,
//! the apiserver (server-side dry run) accepts exactly what kseal accepts, and its message
//! carries each of kseal's problems word for word.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kseal_api::validation::{
    InvalidName, is_config_map_key, is_qualified_name, is_valid_label_value,
    validate_annotation_key, validate_namespace_name, validate_secret_name,
};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// Names and keys around every rule: lengths at and over the limits, case, dots, dashes,
/// underscores, slashes, `..`, non-ASCII.
fn table() -> Vec<String> {
    let mut names: Vec<String> = [
        "a",
        "kube-system",
        "0-9",
        "a.b",
        "a..b",
        "-a",
        "a-",
        ".a",
        "a.",
        "A",
        "Mixed_Case.1",
        "a_b",
        "a b",
        "é",
        "..x",
        "..",
        ".",
        "x..",
        "tls.crt",
        "example.com/name",
        "Example.COM/Name",
        "example_com/name",
        "example.com/",
        "/name",
        "a/b/c",
        "example.com/-x",
        "sealedsecrets.bitnami.com/sealed-secrets-key",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for n in [63, 64, 253, 254] {
        names.push("a".repeat(n));
    }
    names.push(format!("{}.b", "a".repeat(70)));
    names.push(format!("{}/x", "p".repeat(253)));
    names.push(format!("{}/x", "p".repeat(254)));
    names.push(format!("p/{}", "x".repeat(64)));
    names
}

const LABEL_PATTERN: &str = "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

async fn real_client() -> Option<Client> {
    let path = match std::env::var("KSEAL_REFAPI_KUBECONFIG") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "KSEAL_REFAPI_KUBECONFIG is not set, but CI=true: the name rules must be checked against the reference kube-apiserver"
            );
            kseal_testkit::skipped(
                "SKIPPED: names against a real kube-apiserver needs KSEAL_REFAPI_KUBECONFIG (scripts/test.sh sets it)",
            );
            return None;
        }
    };
    let kc = kube::config::Kubeconfig::read_from(path).expect("read the kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("a client config from the kubeconfig");
    Some(Client::try_from(cfg).expect("a client"))
}

/// Compares the apiserver's verdict on one object with kseal's on one name.
fn compare(
    what: &str,
    name: &str,
    server: Result<(), kube::Error>,
    kseal: Result<(), InvalidName>,
    failures: &mut Vec<String>,
) {
    // "already exists": the name passed validation.
    let server = match server {
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        other => other,
    };
    match (server, kseal) {
        (Ok(()), Ok(())) => {}
        (Ok(()), Err(e)) => {
            failures.push(format!("{what} {name:?}: apiserver accepts, kseal: {e}"));
        }
        (Err(kube::Error::Api(status)), Ok(())) => failures.push(format!(
            "{what} {name:?}: kseal accepts, apiserver: {}",
            status.message
        )),
        (Err(kube::Error::Api(status)), Err(e)) => {
            for problem in e.problems() {
                // Newer apimachinery says why a subdomain is not a label; apiservers
                // before it (the reference one, 1.20) give the label pattern instead.
                let older =
                    problem == "must not contain dots" && status.message.contains(LABEL_PATTERN);
                if !status.message.contains(problem.as_str()) && !older {
                    failures.push(format!(
                        "{what} {name:?}: apiserver's message lacks kseal's {problem:?}: {}",
                        status.message
                    ));
                }
            }
        }
        (Err(other), _) => panic!("{what} {name:?}: {other}"),
    }
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

fn secret(name: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            ..ObjectMeta::default()
        },
        ..Secret::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiserver_accepts_exactly_the_names_kseal_accepts_and_says_why_in_the_same_words() {
    let Some(client) = real_client().await else {
        return;
    };
    check_names(client).await;
}

/// The in-process test API server checks names with `kseal_api::validation`: the same
/// table, so its answers stay those of the real apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_api_server_checks_names_as_the_apiserver_does() {
    let server = kseal_testkit::TestApiServer::new();
    check_names(server.client()).await;
}

async fn check_names(client: Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    let mut failures = Vec::new();
    for name in table() {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let server = namespaces.create(&dry_run(), &ns).await.map(drop);
        compare(
            "namespace",
            &name,
            server,
            validate_namespace_name(&name),
            &mut failures,
        );

        let server = secrets.create(&dry_run(), &secret(&name)).await.map(drop);
        compare(
            "Secret name",
            &name,
            server,
            validate_secret_name(&name),
            &mut failures,
        );

        let mut s = secret("names");
        s.data = Some(BTreeMap::from([(name.clone(), ByteString(b"x".to_vec()))]));
        let server = secrets.create(&dry_run(), &s).await.map(drop);
        compare(
            "Secret key",
            &name,
            server,
            is_config_map_key(&name),
            &mut failures,
        );

        let mut s = secret("names");
        s.metadata.labels = Some(BTreeMap::from([(name.clone(), "v".to_owned())]));
        let server = secrets.create(&dry_run(), &s).await.map(drop);
        compare(
            "label key",
            &name,
            server,
            is_qualified_name(&name),
            &mut failures,
        );

        let mut s = secret("names");
        s.metadata.annotations = Some(BTreeMap::from([(name.clone(), "v".to_owned())]));
        let server = secrets.create(&dry_run(), &s).await.map(drop);
        compare(
            "annotation key",
            &name,
            server,
            validate_annotation_key(&name),
            &mut failures,
        );

        let mut s = secret("names");
        s.metadata.labels = Some(BTreeMap::from([("k".to_owned(), name.clone())]));
        let server = secrets.create(&dry_run(), &s).await.map(drop);
        compare(
            "label value",
            &name,
            server,
            is_valid_label_value(&name),
            &mut failures,
        );
    }
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
