//! The controller (key loader + reconciler, as `main` wires them) against kseal-testkit's API
//! server: Bitnami's integration scenarios (reference §6) plus kseal's own behaviour.
//! Assertions are on resulting state, with polling deadlines.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use crate::common::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kseal_api::SealedSecret;
use kseal_api::constants::{
    CLUSTER_WIDE_ANNOTATION, MANAGED_ANNOTATION, NAMESPACE_WIDE_ANNOTATION, PATCH_ANNOTATION,
    SEALING_KEY_LABEL, SKIP_SET_OWNER_REFERENCES_ANNOTATION,
};
use kseal_controller::reconcile::{DATA_MAC_ANNOTATION, SPEC_DIGEST_ANNOTATION};
use kseal_testkit::scenarios::eventually;
use kseal_testkit::{FaultRule, TestApiServer};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

async fn fake() -> (TestApiServer, Cluster) {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    (server, cluster)
}

fn with_template(
    mut ss: SealedSecret,
    f: impl FnOnce(&mut kseal_api::SecretTemplateSpec),
) -> SealedSecret {
    f(ss.spec.template.get_or_insert_with(Default::default));
    ss
}

fn template_annotations(ss: SealedSecret, pairs: &[(&str, &str)]) -> SealedSecret {
    with_template(ss, |t| {
        t.metadata
            .get_or_insert_with(Default::default)
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(map(pairs));
    })
}

/// The controller-level subset that also runs against a real kube-apiserver: create,
/// update, owned delete → re-create, unmanaged refusal, garbage collection.
pub(crate) async fn core_scenario(client: Client) {
    let cluster = Cluster::new(client.clone()).await;
    let ns = cluster.app.clone();
    let running = Running::start(&client, cluster.config()).await;

    // Create: data, labels, owner reference, status, event.
    let mut plain = secret(&ns, "db", &[("password", "hunter2"), ("user", "admin")]);
    plain.metadata.labels = Some(map(&[("app", "db")]));
    let ss = create_ss(&client, &seal(&plain, key(0))).await;
    let s = wait_secret(&client, &ns, "db", "secret created", |_| true).await;
    assert_eq!(
        data_of(&s),
        map(&[("password", "hunter2"), ("user", "admin")])
    );
    assert_eq!(s.labels().get("app").map(String::as_str), Some("db"));
    assert!(owned_by(&s, &ss), "owner reference");
    assert!(s.annotations().contains_key(SPEC_DIGEST_ANNOTATION));
    let mac = &s.annotations()[DATA_MAC_ANNOTATION];
    assert!(!mac.contains("hunter2"));
    let synced = wait_synced(&client, &ns, "db", "True", "Unsealed").await;
    let c = synced.synced_condition().unwrap();
    assert_eq!(c.last_transition_time, c.last_update_time);
    assert_eq!(synced.status.as_ref().unwrap().observed_generation, Some(1));
    let event = wait_event(&client, &ns, "db", "Unsealed").await;
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(event.action.as_deref(), Some("Unseal"));
    assert_eq!(
        event.reporting_controller.as_deref(),
        Some("kseal-controller")
    );
    assert!(event.event_time.is_some() && event.series.is_none());
    let regarding = event.regarding.as_ref().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("SealedSecret"));
    assert_eq!(regarding.uid, ss.metadata.uid);
    assert!(event.metadata.name.as_deref().unwrap().starts_with("db."));

    // Update: new value, renamed and appended items; observedGeneration 2.
    let updated = seal(
        &secret(
            &ns,
            "db",
            &[("pass", "hunter3"), ("user", "admin"), ("host", "db.local")],
        ),
        key(0),
    );
    let ssapi: Api<SealedSecret> = Api::namespaced(client.clone(), &ns);
    let mut items = serde_json::to_value(&updated.spec.encrypted_data).unwrap();
    items["password"] = serde_json::Value::Null;
    ssapi
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"encryptedData": items}})),
        )
        .await
        .unwrap();
    wait_secret(&client, &ns, "db", "secret updated", |s| {
        data_of(s) == map(&[("pass", "hunter3"), ("user", "admin"), ("host", "db.local")])
    })
    .await;
    let synced = wait_synced(&client, &ns, "db", "True", "Unsealed").await;
    assert_eq!(synced.status.as_ref().unwrap().observed_generation, Some(2));

    // Owned Secret deleted → re-created.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let before = secrets.get("db").await.unwrap();
    secrets
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    wait_secret(&client, &ns, "db", "secret re-created", |s| {
        s.uid() != before.uid()
    })
    .await;

    // An unmanaged Secret of the same name is never touched.
    let foreign = secrets
        .create(
            &PostParams::default(),
            &secret(&ns, "theirs", &[("k", "mine")]),
        )
        .await
        .unwrap();
    create_ss(
        &client,
        &seal(&secret(&ns, "theirs", &[("k", "controller")]), key(0)),
    )
    .await;
    let failed = wait_synced(&client, &ns, "theirs", "False", "Unmanaged").await;
    let message = failed.synced_condition().unwrap().message.clone().unwrap();
    assert!(message.contains("not managed by SealedSecret"), "{message}");
    wait_event(&client, &ns, "theirs", "ErrUpdateFailed").await;
    let now = secrets.get("theirs").await.unwrap();
    assert_eq!(now.resource_version(), foreign.resource_version());
    assert_eq!(data_of(&now), map(&[("k", "mine")]));

    // Deleting the SealedSecret garbage-collects its Secret (not the unmanaged one).
    ssapi.delete("db", &DeleteParams::default()).await.unwrap();
    ssapi
        .delete("theirs", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&client, &ns, "db").await;
    assert!(secrets.get_opt("theirs").await.unwrap().is_some());

    running.stop().await;
    cluster.cleanup().await;
}

/// Runs a scenario against the in-process test server and against the reference
/// kube-apiserver.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_the_test_server() {
                super::$name(TestApiServer::new().client()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_a_real_apiserver() {
                if let Some(client) = real_client(stringify!($name)).await {
                    super::$name(client).await;
                }
            }
        }
    )*};
}

on_both!(
    core_scenario,
    existing_secrets_are_taken_over_merged_or_left_alone_per_annotation,
    deleted_secrets_are_recreated_only_when_owned_or_managed,
    wrong_key_fails_with_a_warning_and_recovers_when_the_key_is_added,
    custom_type_and_immutable_secrets,
    scope_decides_where_a_sealed_secret_may_be_unsealed,
    edited_secret_data_is_reverted,
    key_ring_follows_key_secrets_and_skips_bad_ones,
    unmanaged_secret_is_left_alone_until_marked_managed,
    the_resync_period_rechecks_every_object,
);

/// Without the Secret watch (`--skip-recreate`), only the resync notices a deleted Secret:
/// every SealedSecret is queued again each period, and each deleted Secret comes back.
async fn the_resync_period_rechecks_every_object(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let mut config = cl.config();
    config.skip_recreate = true;
    config.resync_period = Some(std::time::Duration::from_secs(2));
    let running = Running::start(&client, config).await;
    let names = ["r1", "r2", "r3"];
    for name in names {
        create_ss(&client, &seal(&secret(&ns, name, &[("k", name)]), key(0))).await;
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let mut uids = BTreeMap::new();
    for name in names {
        let s = wait_secret(&client, &ns, name, "written", |_| true).await;
        uids.insert(name, s.uid());
    }
    for name in names {
        secrets.delete(name, &Default::default()).await.unwrap();
    }
    for name in names {
        let s = wait_secret(&client, &ns, name, "re-created by the resync", |s| {
            s.uid() != uids[name]
        })
        .await;
        assert_eq!(data_of(&s), map(&[("k", name)]));
    }
    running.stop().await;
}

async fn existing_secrets_are_taken_over_merged_or_left_alone_per_annotation(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let existing = |name: &str, annotations: &[(&str, &str)], data: &[(&str, &str)]| {
        let mut s = secret(&ns, name, data);
        s.metadata.annotations = Some(map(annotations));
        s.metadata.labels = Some(map(&[("keep", "label")]));
        if data.is_empty() {
            s.data = None;
        }
        s
    };
    for s in [
        existing("managed", &[(MANAGED_ANNOTATION, "true")], &[("old", "x")]),
        existing(
            "managed-patch",
            &[(MANAGED_ANNOTATION, "true"), (PATCH_ANNOTATION, "true")],
            &[("old", "x")],
        ),
        existing("patch", &[(PATCH_ANNOTATION, "true")], &[("old", "x")]),
        existing("patch-empty", &[(PATCH_ANNOTATION, "true")], &[]),
    ] {
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    let running = Running::start(&client, cl.config()).await;
    let mut owners = BTreeMap::new();
    for name in ["managed", "managed-patch", "patch", "patch-empty"] {
        let ss = create_ss(&client, &seal(&secret(&ns, name, &[("new", "y")]), key(0))).await;
        owners.insert(name, ss);
    }
    let s = wait_secret(&client, &ns, "managed", "managed taken over", |s| {
        data_of(s) == map(&[("new", "y")])
    })
    .await;
    assert!(owned_by(&s, &owners["managed"]), "managed: ownership taken");
    assert!(s.labels().get("keep").is_none(), "managed: replaced labels");

    let s = wait_secret(&client, &ns, "managed-patch", "managed+patch merged", |s| {
        data_of(s) == map(&[("new", "y"), ("old", "x")])
    })
    .await;
    assert!(
        owned_by(&s, &owners["managed-patch"]),
        "managed+patch: ownership"
    );
    assert_eq!(s.labels().get("keep").map(String::as_str), Some("label"));

    let s = wait_secret(&client, &ns, "patch", "patch merged", |s| {
        data_of(s) == map(&[("new", "y"), ("old", "x")])
    })
    .await;
    assert!(s.owner_references().is_empty(), "patch only: no ownership");
    assert_eq!(s.labels().get("keep").map(String::as_str), Some("label"));

    let s = wait_secret(&client, &ns, "patch-empty", "patch on empty", |s| {
        data_of(s) == map(&[("new", "y")])
    })
    .await;
    assert!(s.owner_references().is_empty());
    for name in ["managed", "managed-patch", "patch", "patch-empty"] {
        wait_synced(&client, &ns, name, "True", "Unsealed").await;
    }
    running.stop().await;
    cl.cleanup().await;
}

async fn deleted_secrets_are_recreated_only_when_owned_or_managed(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let running = Running::start(&client, cl.config()).await;
    let skip = &[(SKIP_SET_OWNER_REFERENCES_ANNOTATION, "true")];
    let objects = [
        ("owned", seal(&secret(&ns, "owned", &[("a", "1")]), key(0))),
        (
            "unowned-managed",
            template_annotations(
                seal(&secret(&ns, "unowned-managed", &[("a", "1")]), key(0)),
                &[
                    (SKIP_SET_OWNER_REFERENCES_ANNOTATION, "true"),
                    (MANAGED_ANNOTATION, "true"),
                ],
            ),
        ),
        (
            "unowned",
            template_annotations(seal(&secret(&ns, "unowned", &[("a", "1")]), key(0)), skip),
        ),
        (
            "unowned-patch",
            template_annotations(
                seal(&secret(&ns, "unowned-patch", &[("a", "1")]), key(0)),
                &[
                    (SKIP_SET_OWNER_REFERENCES_ANNOTATION, "true"),
                    (PATCH_ANNOTATION, "true"),
                ],
            ),
        ),
    ];
    for (_, ss) in &objects {
        create_ss(&client, ss).await;
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let mut uids = BTreeMap::new();
    for (name, _) in &objects {
        wait_synced(&client, &ns, name, "True", "Unsealed").await;
        let s = secrets.get(name).await.unwrap();
        uids.insert(*name, s.uid());
    }
    // Delete the ones that must stay deleted first, then the two that come back: once
    // those are back, the controller has seen every deletion.
    for name in ["unowned", "unowned-patch", "owned", "unowned-managed"] {
        secrets
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    for name in ["owned", "unowned-managed"] {
        wait_secret(&client, &ns, name, "re-created", |s| s.uid() != uids[name]).await;
    }
    assert!(secrets.get_opt("unowned").await.unwrap().is_none());
    assert!(secrets.get_opt("unowned-patch").await.unwrap().is_none());
    running.stop().await;
    cl.cleanup().await;
}

async fn wrong_key_fails_with_a_warning_and_recovers_when_the_key_is_added(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let running = Running::start(&client, cl.config()).await;
    let late = seal(&secret(&ns, "late", &[("a", "1")]), key(1));
    create_ss(&client, &late).await;
    let failed = wait_synced(&client, &ns, "late", "False", "UnsealFailed").await;
    let message = failed.synced_condition().unwrap().message.clone().unwrap();
    assert!(message.contains("failed to decrypt"), "{message}");
    // The status names the scope and label tried (public metadata), never a value.
    assert!(
        message.contains(&format!("(tried strict scope \"{ns}/late\")")),
        "{message}"
    );
    wait_event(&client, &ns, "late", "ErrUnsealFailed").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    assert!(secrets.get_opt("late").await.unwrap().is_none());
    // The ring's one key (key 0) was tried with RSA work unless a public check ruled it out
    // (the value's RSA block not below its modulus).
    let bytes = kseal_keys::envelope::decode_base64(&late.spec.encrypted_data["a"]).unwrap();
    let could = key(0).public_key().may_have_sealed(&bytes);
    let failure_ops = running.rsa_operations();
    assert!(
        failure_ops >= u64::from(could),
        "{failure_ops} RSA operations"
    );
    let errors = running
        .state
        .metrics
        .unseal_errors
        .get_or_create(&kseal_controller::metrics::ErrorLabels {
            reason: "unseal".into(),
            namespace: ns.clone(),
        })
        .get();
    assert!(errors >= 1, "unseal_errors_total{{reason=unseal}}");

    // Hot reload: the key arrives without a restart; the failed object recovers at once.
    put_key(
        &client,
        &cl.ctrl,
        "sealed-secrets-key1",
        key(1),
        Some("active"),
    )
    .await;
    let s = wait_secret(&client, &ns, "late", "secret after key added", |_| true).await;
    assert_eq!(data_of(&s), map(&[("a", "1")]));
    let ok = wait_synced(&client, &ns, "late", "True", "Unsealed").await;
    assert!(ok.synced_condition().unwrap().message.is_none());
    assert_eq!(
        events(&client, &ns, "late", "ErrUnsealFailed").await.len(),
        1,
        "one warning, not one per retry"
    );
    running.stop().await;
    cl.cleanup().await;
}

async fn custom_type_and_immutable_secrets(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let running = Running::start(&client, cl.config()).await;
    let typed = with_template(seal(&secret(&ns, "typed", &[("a", "1")]), key(0)), |t| {
        t.type_ = Some("example.com/custom".into());
    });
    create_ss(&client, &typed).await;
    let frozen = with_template(seal(&secret(&ns, "frozen", &[("a", "1")]), key(0)), |t| {
        t.immutable = Some(true);
    });
    create_ss(&client, &frozen).await;
    let s = wait_secret(&client, &ns, "typed", "typed", |_| true).await;
    assert_eq!(s.type_.as_deref(), Some("example.com/custom"));
    let s = wait_secret(&client, &ns, "frozen", "frozen", |_| true).await;
    assert_eq!(s.immutable, Some(true));
    wait_synced(&client, &ns, "frozen", "True", "Unsealed").await;

    // Changing an immutable Secret's data fails clearly and is not retried in a loop.
    let changed = seal(&secret(&ns, "frozen", &[("a", "2")]), key(0));
    Api::<SealedSecret>::namespaced(client.clone(), &ns)
        .patch(
            "frozen",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"encryptedData": changed.spec.encrypted_data}})),
        )
        .await
        .unwrap();
    let failed = wait_synced(&client, &ns, "frozen", "False", "Immutable").await;
    assert!(
        failed
            .synced_condition()
            .unwrap()
            .message
            .as_deref()
            .unwrap()
            .contains("immutable")
    );
    wait_event(&client, &ns, "frozen", "ErrUpdateFailed").await;
    let s = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("frozen")
        .await
        .unwrap();
    assert_eq!(data_of(&s), map(&[("a", "1")]));
    let failures = running.reconciles("failed");
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(
        running.reconciles("failed") <= failures + 1,
        "no hot retry loop on an immutable Secret"
    );
    running.stop().await;
    cl.cleanup().await;
}

async fn scope_decides_where_a_sealed_secret_may_be_unsealed(client: Client) {
    let cl = Cluster::new(client).await;
    let client = cl.client.clone();
    let (ns, other) = (cl.app.clone(), namespace(&client, "kseal-other").await);
    let mut config = cl.config();
    config.namespaces = kseal_controller::config::Namespaces::Only(vec![ns.clone(), other.clone()]);
    let running = Running::start(&client, config).await;

    let relocate = |mut ss: SealedSecret, namespace: &str, name: &str| {
        ss.metadata.namespace = Some(namespace.to_owned());
        ss.metadata.name = Some(name.to_owned());
        ss
    };
    let strict = seal(&secret(&ns, "strict", &[("a", "1")]), key(0));
    create_ss(&client, &relocate(strict.clone(), &ns, "renamed")).await;
    create_ss(&client, &relocate(strict, &other, "strict")).await;

    let mut wide = secret(&ns, "wide", &[("a", "1")]);
    wide.metadata.annotations = Some(map(&[(NAMESPACE_WIDE_ANNOTATION, "true")]));
    let wide = seal(&wide, key(0));
    create_ss(&client, &relocate(wide.clone(), &ns, "wide-renamed")).await;
    create_ss(&client, &relocate(wide, &other, "wide-moved")).await;

    let mut cluster = secret(&ns, "cluster", &[("a", "1")]);
    cluster.metadata.annotations = Some(map(&[(CLUSTER_WIDE_ANNOTATION, "true")]));
    let cluster = seal(&cluster, key(0));
    create_ss(&client, &relocate(cluster, &other, "anywhere")).await;

    for (namespace, name) in [(&ns, "renamed"), (&other, "strict"), (&other, "wide-moved")] {
        wait_synced(&client, namespace, name, "False", "UnsealFailed").await;
        wait_event(&client, namespace, name, "ErrUnsealFailed").await;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        assert!(secrets.get_opt(name).await.unwrap().is_none(), "{name}");
    }
    for (namespace, name) in [(&ns, "wide-renamed"), (&other, "anywhere")] {
        let s = wait_secret(&client, namespace, name, name, |_| true).await;
        assert_eq!(data_of(&s), map(&[("a", "1")]));
    }
    running.stop().await;
    delete_namespace(&client, &other).await;
    cl.cleanup().await;
}

async fn edited_secret_data_is_reverted(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let running = Running::start(&client, cl.config()).await;
    let mut plain = secret(&ns, "drift", &[("a", "1"), ("b", "2")]);
    plain.metadata.labels = Some(map(&[("tier", "db")]));
    create_ss(&client, &seal(&plain, key(0))).await;
    wait_synced(&client, &ns, "drift", "True", "Unsealed").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let ops = running.rsa_operations();
    secrets
        .patch(
            "drift",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "ZWRpdGVk", "extra": "eA=="}})),
        )
        .await
        .unwrap();
    wait_secret(&client, &ns, "drift", "drift reverted", |s| {
        data_of(s) == map(&[("a", "1"), ("b", "2")])
    })
    .await;
    // Hints: the re-unseal takes one RSA operation per item.
    assert_eq!(running.rsa_operations() - ops, 2);

    // Metadata drift (a template label removed) is reverted too.
    secrets
        .patch(
            "drift",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": null}}})),
        )
        .await
        .unwrap();
    wait_secret(&client, &ns, "drift", "label restored", |s| {
        s.labels().get("tier").map(String::as_str) == Some("db")
    })
    .await;
    running.stop().await;
    cl.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_costs_no_rsa_operation_and_no_write() {
    let (server, cl) = fake().await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let first = Running::start(&client, cl.config()).await;
    let names = ["r1", "r2", "r3"];
    for name in names {
        create_ss(
            &client,
            &seal(&secret(&ns, name, &[("a", name), ("b", "x")]), key(0)),
        )
        .await;
    }
    for name in names {
        wait_synced(&client, &ns, name, "True", "Unsealed").await;
    }
    assert!(first.rsa_operations() >= 6);
    first.stop().await;

    server.clear_requests();
    let second = Running::start(&client, cl.config()).await;
    eventually("every object reconciled", DEADLINE, || async {
        Ok((second.reconciles("unchanged") >= names.len() as u64).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(
        second.rsa_operations(),
        0,
        "no RSA operation after a restart"
    );
    assert_eq!(second.reconciles("failed"), 0);
    let writes: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "no writes after a restart: {writes:?}");
    second.stop().await;
}

async fn key_ring_follows_key_secrets_and_skips_bad_ones(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ctrl) = (cl.client.clone(), cl.ctrl.clone());
    // The legacy Secret named exactly the prefix is loaded without a label.
    put_key(&client, &ctrl, "sealed-secrets-key", key(1), None).await;
    let running = Running::start(&client, cl.config()).await;
    let ring_len = |r: &Running| r.state.keys.ring().len();
    eventually("two keys", DEADLINE, || async {
        Ok((ring_len(&running) == 2).then_some(()))
    })
    .await
    .unwrap();
    assert!(
        running
            .state
            .readiness
            .keys_loaded
            .load(std::sync::atomic::Ordering::Acquire)
    );

    // A bad key Secret is skipped, counted and reported; nothing crashes.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ctrl);
    let mut bad = kseal_controller::keys::key_secret("x", &ctrl, key(2)).unwrap();
    bad.metadata.generate_name = None;
    bad.metadata.name = Some("sealed-secrets-keybad".into());
    bad.data.as_mut().unwrap().insert(
        "tls.crt".into(),
        ByteString(key(0).certificate().to_pem().into_bytes()),
    );
    secrets.create(&PostParams::default(), &bad).await.unwrap();
    eventually("mismatch counted", DEADLINE, || async {
        let n = running
            .state
            .metrics
            .key_load_errors
            .get_or_create(&kseal_controller::metrics::KeyErrorLabels {
                reason: "mismatch".into(),
            })
            .get();
        Ok((n == 1).then_some(()))
    })
    .await
    .unwrap();
    wait_event(&client, &ctrl, "sealed-secrets-keybad", "KeyRejected").await;
    assert_eq!(ring_len(&running), 2);

    // Relabelling a key `compromised` removes it; deleting one removes it too.
    secrets
        .patch(
            "sealed-secrets-key0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {SEALING_KEY_LABEL: "compromised"}}})),
        )
        .await
        .unwrap();
    eventually("compromised key removed", DEADLINE, || async {
        let ring = running.state.keys.ring();
        Ok((ring.len() == 1 && ring.get(key(0).id()).is_none()).then_some(()))
    })
    .await
    .unwrap();
    secrets
        .delete("sealed-secrets-key", &DeleteParams::default())
        .await
        .unwrap();
    eventually("deleted key removed", DEADLINE, || async {
        Ok((ring_len(&running) == 0).then_some(()))
    })
    .await
    .unwrap();
    assert!(
        !running
            .state
            .readiness
            .keys_loaded
            .load(std::sync::atomic::Ordering::Acquire)
    );
    running.stop().await;
    cl.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_key_is_generated_by_the_leader_when_enabled() {
    let server = TestApiServer::new();
    let client = server.client();
    ensure_crd(&client).await;
    let ctrl = namespace(&client, "kseal-gen").await;
    let mut config = config(&ctrl, &[&ctrl]);
    config.generate_key_if_missing = true;
    config.my_cn = "kseal-test".into();
    let running = Running::start(&client, config).await;
    let pair = eventually("a generated key", DEADLINE, || async {
        Ok(running.state.keys.ring().sealing_key().cloned())
    })
    .await
    .unwrap();
    assert_eq!(pair.certificate().common_name(), Some("kseal-test"));
    let keys: Vec<Secret> = Api::<Secret>::namespaced(client.clone(), &ctrl)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(keys.len(), 1);
    assert!(keys[0].name_any().starts_with("sealed-secrets-key"));
    assert_eq!(keys[0].type_.as_deref(), Some("kubernetes.io/tls"));
    // The generated key unseals.
    create_ss(&client, &seal(&secret(&ctrl, "g", &[("a", "1")]), &pair)).await;
    wait_synced(&client, &ctrl, "g", "True", "Unsealed").await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_converge() {
    let (server, cl) = fake().await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let faults = server.faults();
    // Creating fails twice with 500, the first status write conflicts.
    faults.fail(
        FaultRule::new(500)
            .method("POST")
            .resource("secrets")
            .times(2),
    );
    faults.fail(FaultRule::new(409).method("PATCH").path_contains("/status"));
    let running = Running::start(&client, cl.config()).await;
    create_ss(&client, &seal(&secret(&ns, "f", &[("a", "1")]), key(0))).await;
    wait_synced(&client, &ns, "f", "True", "Unsealed").await;
    wait_secret(&client, &ns, "f", "created despite 500s", |s| {
        data_of(s) == map(&[("a", "1")])
    })
    .await;

    // Updates conflict (409), GETs fail, watches drop and resume from a compacted log (410).
    faults.fail(
        FaultRule::new(409)
            .method("PUT")
            .resource("secrets")
            .times(2),
    );
    faults.fail(
        FaultRule::new(500)
            .method("GET")
            .resource("secrets")
            .watch(false)
            .times(2),
    );
    faults.drop_watches();
    faults.compact();
    let changed = seal(&secret(&ns, "f", &[("a", "2")]), key(0));
    Api::<SealedSecret>::namespaced(client.clone(), &ns)
        .patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"encryptedData": changed.spec.encrypted_data}})),
        )
        .await
        .unwrap();
    wait_secret(&client, &ns, "f", "updated despite faults", |s| {
        data_of(s) == map(&[("a", "2")])
    })
    .await;
    faults.drop_watches();
    faults.compact();
    // Still reacting after the watches were dropped again.
    Api::<Secret>::namespaced(client.clone(), &ns)
        .delete("f", &DeleteParams::default())
        .await
        .unwrap();
    wait_secret(&client, &ns, "f", "re-created after dropped watches", |s| {
        data_of(s) == map(&[("a", "2")])
    })
    .await;
    wait_synced(&client, &ns, "f", "True", "Unsealed").await;
    assert_eq!(faults.pending(), 0, "every injected fault was hit");
    running.stop().await;
}

async fn unmanaged_secret_is_left_alone_until_marked_managed(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let foreign = secrets
        .create(
            &PostParams::default(),
            &secret(&ns, "x", &[("k", "theirs")]),
        )
        .await
        .unwrap();
    let running = Running::start(&client, cl.config()).await;
    let ss = create_ss(&client, &seal(&secret(&ns, "x", &[("k", "ours")]), key(0))).await;
    wait_synced(&client, &ns, "x", "False", "Unmanaged").await;
    // A key ring change reconciles everything again: still untouched, still one warning.
    put_key(
        &client,
        &cl.ctrl,
        "sealed-secrets-key1",
        key(1),
        Some("active"),
    )
    .await;
    eventually("ring reloaded", DEADLINE, || async {
        Ok((running.state.keys.ring().len() == 2).then_some(()))
    })
    .await
    .unwrap();
    eventually("reconciled again", DEADLINE, || async {
        Ok((running.reconciles("failed") >= 2).then_some(()))
    })
    .await
    .unwrap();
    let now = secrets.get("x").await.unwrap();
    assert_eq!(now.resource_version(), foreign.resource_version());
    assert_eq!(data_of(&now), map(&[("k", "theirs")]));
    assert_eq!(events(&client, &ns, "x", "ErrUpdateFailed").await.len(), 1);

    // Marking it managed hands it over at once.
    secrets
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {MANAGED_ANNOTATION: "true"}}})),
        )
        .await
        .unwrap();
    let s = wait_secret(&client, &ns, "x", "taken over", |s| {
        data_of(s) == map(&[("k", "ours")])
    })
    .await;
    assert!(owned_by(&s, &ss));
    wait_synced(&client, &ns, "x", "True", "Unsealed").await;
    running.stop().await;
    cl.cleanup().await;
}

async fn template_data_is_rendered_over_the_items(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let running = Running::start(&client, cl.config()).await;
    let ss = with_template(
        seal(
            &secret(
                &ns,
                "tpl",
                &[("user", "admin"), ("password", "pw"), ("drop", "x")],
            ),
            key(0),
        ),
        |t| {
            t.data = Some(BTreeMap::from([
                (
                    "dsn".to_owned(),
                    Some("postgres://{{ .user }}:{{ .password }}@db".to_owned()),
                ),
                ("drop".to_owned(), None),
            ]));
        },
    );
    create_ss(&client, &ss).await;
    let s = wait_secret(&client, &ns, "tpl", "rendered", |_| true).await;
    assert_eq!(
        data_of(&s),
        map(&[
            ("dsn", "postgres://admin:pw@db"),
            ("password", "pw"),
            ("user", "admin"),
        ])
    );
    wait_synced(&client, &ns, "tpl", "True", "Unsealed").await;
    running.stop().await;
    cl.cleanup().await;
}

on_both!(template_data_is_rendered_over_the_items);

/// Issue 35 (the template oracle): a template that fails while rendering shows only that it
/// failed, in the status and the Event: no message, key or position a template edit could
/// compute from the values. A parse error depends on the template alone and is shown whole.
async fn a_failed_template_shows_nothing_computed_from_the_values(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let running = Running::start(&client, cl.config()).await;
    let guess = |name: &str, source: &str| {
        with_template(
            seal(&secret(&ns, name, &[("password", "Hunter2")]), key(0)),
            |t| {
                t.data = Some(BTreeMap::from([(
                    "out".to_owned(),
                    Some(source.to_owned()),
                )]));
            },
        )
    };
    create_ss(
        &client,
        &guess(
            "oracle",
            r#"{{ if hasPrefix "H" .password }}{{ fail "starts with H" }}{{ end }}{{ index (list 1) (len .password) }}"#,
        ),
    )
    .await;
    create_ss(&client, &guess("syntax", "{{ if }}")).await;
    let failed = wait_synced(&client, &ns, "oracle", "False", "UnsealFailed").await;
    let message = failed
        .synced_condition()
        .unwrap()
        .message
        .clone()
        .unwrap_or_default();
    assert!(message.contains(kseal_api::TEMPLATE_FAILED), "{message}");
    for leak in [
        "starts with H",
        "Hunter2",
        "line",
        "column",
        "`out`",
        "index",
    ] {
        assert!(!message.contains(leak), "{leak:?} in {message}");
    }
    let event = wait_event(&client, &ns, "oracle", "ErrUnsealFailed").await;
    let note = event.note.unwrap_or_default();
    assert!(
        !note.contains("starts with H") && !note.contains("line"),
        "{note}"
    );
    let syntax = wait_synced(&client, &ns, "syntax", "False", "UnsealFailed").await;
    let message = syntax
        .synced_condition()
        .unwrap()
        .message
        .clone()
        .unwrap_or_default();
    assert!(message.contains("template `out`: line 1"), "{message}");
    running.stop().await;
    cl.cleanup().await;
}

on_both!(a_failed_template_shows_nothing_computed_from_the_values);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_api_error_does_not_flip_the_status() {
    let server = TestApiServer::new();
    let cl = Cluster::new(server.client()).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let running = Running::start(&client, cl.config()).await;
    create_ss(&client, &seal(&secret(&ns, "t", &[("a", "1")]), key(0))).await;
    wait_synced(&client, &ns, "t", "True", "Unsealed").await;
    let updated = running.reconciles("updated");
    server.clear_requests();
    server.faults().fail(
        FaultRule::new(500)
            .method("GET")
            .path_contains(&format!("/namespaces/{ns}/secrets/t"))
            .watch(false),
    );
    // Drift: the reconcile it triggers cannot confirm the Secret from the watched cache (its
    // data MAC no longer verifies), so it reads the Secret, hits the 500, then retries.
    Api::<Secret>::namespaced(client.clone(), &ns)
        .patch(
            "t",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "ZHJpZnQ="}})),
        )
        .await
        .unwrap();
    eventually("retried after the 500", DEADLINE, || async {
        Ok(
            (server.faults().pending() == 0 && running.reconciles("updated") > updated)
                .then_some(()),
        )
    })
    .await
    .unwrap();
    assert!(running.reconciles("failed") >= 1);
    let status_writes: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/status"))
        .collect();
    assert!(
        status_writes.is_empty(),
        "status flipped: {status_writes:?}"
    );
    assert!(
        events(&client, &ns, "t", "ErrUpdateFailed")
            .await
            .is_empty()
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selector_limits_a_cluster_wide_controller() {
    let server = TestApiServer::new();
    let cl = Cluster::new(server.client()).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let mut config = cl.config();
    config.namespaces = kseal_controller::config::Namespaces::All;
    config.label_selector = Some("team=a".into());
    let running = Running::start(&client, config).await;
    let mut mine = seal(&secret(&ns, "mine", &[("a", "1")]), key(0));
    mine.metadata.labels = Some(map(&[("team", "a")]));
    let mut theirs = seal(&secret(&ns, "theirs", &[("a", "1")]), key(0));
    theirs.metadata.labels = Some(map(&[("team", "b")]));
    create_ss(&client, &theirs).await;
    create_ss(&client, &mine).await;
    wait_synced(&client, &ns, "mine", "True", "Unsealed").await;
    let theirs = Api::<SealedSecret>::namespaced(client.clone(), &ns)
        .get("theirs")
        .await
        .unwrap();
    assert!(theirs.status.is_none(), "not selected, not touched");
    assert!(
        Api::<Secret>::namespaced(client.clone(), &ns)
            .get_opt("theirs")
            .await
            .unwrap()
            .is_none()
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_a_new_leader_catches_up() {
    let server = TestApiServer::new();
    let cl = Cluster::new(server.client()).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let running = Running::start(&client, cl.config()).await;
    running.state.leadership.assume(false);
    eventually("caches synced", DEADLINE, || async {
        Ok(running
            .state
            .readiness
            .caches_synced
            .load(std::sync::atomic::Ordering::Acquire)
            .then_some(()))
    })
    .await
    .unwrap();
    server.clear_requests();
    create_ss(&client, &seal(&secret(&ns, "l", &[("a", "1")]), key(0))).await;
    // Give the follower a chance to (wrongly) act.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let writes: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET" && !r.path.contains("/sealedsecrets"))
        .collect();
    assert!(writes.is_empty(), "a follower wrote: {writes:?}");
    assert_eq!(running.state.metrics.unseal_requests.get(), 0);
    running.state.leadership.assume(true);
    wait_secret(&client, &ns, "l", "written once leader", |_| true).await;
    wait_synced(&client, &ns, "l", "True", "Unsealed").await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_status_updates_or_secret_watch_the_secret_is_still_written() {
    let server = TestApiServer::new();
    let cl = Cluster::new(server.client()).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let mut config = cl.config();
    config.update_status = false;
    config.skip_recreate = true;
    config.drift_correction = false;
    let running = Running::start(&client, config).await;
    create_ss(&client, &seal(&secret(&ns, "quiet", &[("a", "1")]), key(0))).await;
    wait_secret(&client, &ns, "quiet", "written", |s| {
        data_of(s) == map(&[("a", "1")])
    })
    .await;
    eventually("counted", DEADLINE, || async {
        Ok((running.reconciles("created") == 1).then_some(()))
    })
    .await
    .unwrap();
    let ss = Api::<SealedSecret>::namespaced(client.clone(), &ns)
        .get("quiet")
        .await
        .unwrap();
    assert!(
        ss.status.is_none(),
        "--update-status=false writes no status"
    );
    let secret_watches: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.is_watch() && r.path == format!("/api/v1/namespaces/{ns}/secrets"))
        .collect();
    assert!(
        secret_watches.is_empty(),
        "--skip-recreate watches no Secrets"
    );
    let text = running.state.metrics.encode();
    let series = format!(
        "sealed_secrets_controller_condition_info{{namespace=\"{ns}\",name=\"quiet\",condition=\"Synced\",ss_app_kubernetes_io_instance=\"\"}} 1\n"
    );
    assert!(text.contains(&series), "{text}");
    running.stop().await;
}

/// Adding a key changes nothing on existing Secrets (their MACs name a key still in the
/// ring); removing the key that made a MAC makes the controller unseal once more and re-MAC
/// with a remaining key, without touching the data.
async fn key_rotation_keeps_macs_and_key_removal_remakes_them(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    put_key(
        &client,
        &cl.ctrl,
        "sealed-secrets-key-old",
        older_key(),
        Some("active"),
    )
    .await;
    let running = Running::start(&client, cl.config()).await;
    // Sealed with the older key; the MAC is made with the sealing key, key 0.
    create_ss(
        &client,
        &seal(&secret(&ns, "rot", &[("a", "1")]), older_key()),
    )
    .await;
    wait_synced(&client, &ns, "rot", "True", "Unsealed").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let before = secrets.get("rot").await.unwrap();
    assert!(before.annotations()[DATA_MAC_ANNOTATION].contains(key(0).id().as_str()));

    // Rotation: a new key arrives; every object is re-checked, none is rewritten.
    let checked = running.reconciles("unchanged");
    put_key(
        &client,
        &cl.ctrl,
        "sealed-secrets-key1",
        key(1),
        Some("active"),
    )
    .await;
    eventually("re-checked after rotation", DEADLINE, || async {
        Ok((running.reconciles("unchanged") > checked).then_some(()))
    })
    .await
    .unwrap();
    let after_rotation = secrets.get("rot").await.unwrap();
    assert_eq!(after_rotation.resource_version(), before.resource_version());

    // Retiring the key that made the MAC: unsealed once more, re-MACed, data unchanged.
    Api::<Secret>::namespaced(client.clone(), &cl.ctrl)
        .patch(
            "sealed-secrets-key0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {SEALING_KEY_LABEL: "compromised"}}})),
        )
        .await
        .unwrap();
    let remade = wait_secret(&client, &ns, "rot", "re-MACed", |s| {
        !s.annotations()[DATA_MAC_ANNOTATION].contains(key(0).id().as_str())
    })
    .await;
    assert_eq!(data_of(&remade), map(&[("a", "1")]));
    wait_synced(&client, &ns, "rot", "True", "Unsealed").await;
    running.stop().await;
    cl.cleanup().await;
}

on_both!(key_rotation_keeps_macs_and_key_removal_remakes_them);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sealed_secrets_sync_and_restart_without_rsa_work() {
    const COUNT: usize = 150;
    let (server, cl) = fake().await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let first = Running::start(&client, cl.config()).await;
    let started = std::time::Instant::now();
    for i in 0..COUNT {
        let name = format!("s{i}");
        create_ss(
            &client,
            &seal(&secret(&ns, &name, &[("a", &name), ("b", "x")]), key(0)),
        )
        .await;
    }
    let ssapi: Api<SealedSecret> = Api::namespaced(client.clone(), &ns);
    eventually("all synced", DEADLINE, || async {
        let list = ssapi.list(&Default::default()).await?;
        let synced = list
            .items
            .iter()
            .filter(|s| s.synced_condition().is_some_and(|c| c.status == "True"))
            .count();
        Ok((synced == COUNT).then_some(()))
    })
    .await
    .unwrap();
    eprintln!("{COUNT} SealedSecrets synced in {:?}", started.elapsed());
    assert_eq!(
        first.rsa_operations(),
        2 * COUNT as u64,
        "one RSA operation per item"
    );
    // Each Secret was created without reading it first (the watched cache knew it was
    // absent), and each status patch was computed from the watched SealedSecret.
    let (secret_gets, status_gets) = single_reads(&server.requests(), &ns);
    eprintln!("cold start: {secret_gets} GET secret, {status_gets} GET status");
    assert!(
        secret_gets + status_gets <= COUNT / 10,
        "{secret_gets} GET secret and {status_gets} GET status for {COUNT} new objects"
    );
    first.stop().await;

    server.clear_requests();
    let restarted = std::time::Instant::now();
    let second = Running::start(&client, cl.config()).await;
    eventually("all re-checked", DEADLINE, || async {
        Ok((second.reconciles("unchanged") >= COUNT as u64).then_some(()))
    })
    .await
    .unwrap();
    eprintln!(
        "{COUNT} SealedSecrets re-checked after a restart in {:?}",
        restarted.elapsed()
    );
    assert_eq!(second.rsa_operations(), 0);
    let requests = server.requests();
    assert!(requests.iter().all(|r| r.method == "GET"));
    // Confirmed from the lists of the watches: not one read per object.
    assert_eq!(single_reads(&requests, &ns), (0, 0), "reads per object");
    second.stop().await;
}

/// Single-object reads in `ns`: (GET of one Secret, GET of one SealedSecret's status).
fn single_reads(requests: &[kseal_testkit::RequestRecord], ns: &str) -> (usize, usize) {
    let secret = format!("/api/v1/namespaces/{ns}/secrets/");
    let sealed = format!("/namespaces/{ns}/sealedsecrets/");
    let gets = || {
        requests
            .iter()
            .filter(|r| r.method == "GET" && !r.is_watch())
    };
    (
        gets().filter(|r| r.path.starts_with(&secret)).count(),
        gets()
            .filter(|r| r.path.contains(&sealed) && r.path.ends_with("/status"))
            .count(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprecated_whole_secret_data_is_accepted_unless_disabled() {
    let (server, cl) = fake().await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let v1 = |name: &str| {
        let mut plain = secret(&ns, name, &[("token", "t0k3n")]);
        plain.type_ = Some("example.com/v1".into());
        let json = serde_json::to_vec(&plain).unwrap();
        let label = kseal_keys::Scope::Strict.label(&ns, name);
        let blob = kseal_keys::seal_base64(key(0).public_key(), &label, &json).unwrap();
        let mut ss = SealedSecret::new(name, kseal_api::SealedSecretSpec::default());
        ss.metadata.namespace = Some(ns.clone());
        ss.spec.data = Some(blob);
        ss
    };
    let first = Running::start(&client, cl.config()).await;
    create_ss(&client, &v1("old")).await;
    let s = wait_secret(&client, &ns, "old", "v1 secret", |_| true).await;
    assert_eq!(data_of(&s), map(&[("token", "t0k3n")]));
    assert_eq!(s.type_.as_deref(), Some("example.com/v1"));
    wait_synced(&client, &ns, "old", "True", "Unsealed").await;
    first.stop().await;

    // Restart: the deprecated format is skipped without RSA work too.
    server.clear_requests();
    let second = Running::start(&client, cl.config()).await;
    eventually("re-checked", DEADLINE, || async {
        Ok((second.reconciles("unchanged") >= 1).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(second.rsa_operations(), 0);
    second.stop().await;

    let mut strict = cl.config();
    strict.accept_deprecated_v1_data = false;
    let third = Running::start(&client, strict).await;
    create_ss(&client, &v1("refused")).await;
    let failed = wait_synced(&client, &ns, "refused", "False", "DeprecatedDataRejected").await;
    assert!(
        failed
            .synced_condition()
            .unwrap()
            .message
            .as_deref()
            .unwrap()
            .contains("deprecated")
    );
    third.stop().await;
}

/// A deleted `managed` Secret comes back from the Secret watch, not from a resync: the
/// controller runs with resync off, so only the watch can bring it back. Covers a Secret
/// that was marked `managed` before its SealedSecret existed (taken over, with and without an
/// owner reference) and one whose template marks it `managed`. A Secret the controller
/// does not own stays deleted, and one it never wrote is never touched.
async fn deleted_managed_secrets_are_recreated_by_the_watch_not_the_resync(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let marked = |name: &str| {
        let mut s = secret(&ns, name, &[("old", "x")]);
        s.metadata.annotations = Some(map(&[(MANAGED_ANNOTATION, "true")]));
        s
    };
    // Marked managed before the SealedSecrets exist: taken over.
    for name in ["taken", "taken-no-owner"] {
        secrets
            .create(&PostParams::default(), &marked(name))
            .await
            .unwrap();
    }
    // Marked managed, but no SealedSecret of that name: never touched.
    let bystander = secrets
        .create(&PostParams::default(), &marked("bystander"))
        .await
        .unwrap();
    let mut config = cl.config();
    config.resync_period = None;
    let running = Running::start(&client, config).await;
    let skip = &[(SKIP_SET_OWNER_REFERENCES_ANNOTATION, "true")];
    let objects = [
        seal(&secret(&ns, "taken", &[("a", "1")]), key(0)),
        template_annotations(
            seal(&secret(&ns, "taken-no-owner", &[("a", "1")]), key(0)),
            skip,
        ),
        template_annotations(
            seal(&secret(&ns, "template-managed", &[("a", "1")]), key(0)),
            &[
                (SKIP_SET_OWNER_REFERENCES_ANNOTATION, "true"),
                (MANAGED_ANNOTATION, "true"),
            ],
        ),
        template_annotations(seal(&secret(&ns, "unowned", &[("a", "1")]), key(0)), skip),
    ];
    for ss in &objects {
        create_ss(&client, ss).await;
    }
    let names = ["taken", "taken-no-owner", "template-managed", "unowned"];
    let mut uids = BTreeMap::new();
    for name in names {
        wait_synced(&client, &ns, name, "True", "Unsealed").await;
        let s = wait_secret(&client, &ns, name, "written", |s| {
            data_of(s) == map(&[("a", "1")])
        })
        .await;
        uids.insert(name, s.uid());
    }
    // The one that must stay deleted first: once the others are back, the controller has
    // seen its deletion too.
    for name in ["unowned", "taken", "taken-no-owner", "template-managed"] {
        secrets
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    for name in ["taken", "taken-no-owner", "template-managed"] {
        let s = wait_secret(&client, &ns, name, &format!("{name} re-created"), |s| {
            s.uid() != uids[name]
        })
        .await;
        assert_eq!(data_of(&s), map(&[("a", "1")]), "{name}");
        assert_eq!(
            s.annotations().get(MANAGED_ANNOTATION).map(String::as_str),
            Some("true"),
            "{name}: still marked managed"
        );
        uids.insert(name, s.uid());
    }
    // Still managed after the re-creation: a second deletion brings it back too.
    secrets
        .delete("taken-no-owner", &DeleteParams::default())
        .await
        .unwrap();
    wait_secret(&client, &ns, "taken-no-owner", "re-created again", |s| {
        s.uid() != uids["taken-no-owner"]
    })
    .await;
    assert!(secrets.get_opt("unowned").await.unwrap().is_none());
    let now = secrets.get("bystander").await.unwrap();
    assert_eq!(now.resource_version(), bystander.resource_version());
    running.stop().await;
    cl.cleanup().await;
}

on_both!(deleted_managed_secrets_are_recreated_by_the_watch_not_the_resync);

/// `--accept-deprecated-v1-data=false` also stops a v1 SealedSecret that was synced before:
/// its status says why, and its Secret is kept as it is (nothing lost) but no longer
/// updated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusing_deprecated_data_stops_an_already_synced_v1_sealed_secret() {
    let (_server, cl) = fake().await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let v1 = |name: &str, token: &str| {
        let plain = secret(&ns, name, &[("token", token)]);
        let json = serde_json::to_vec(&plain).unwrap();
        let label = kseal_keys::Scope::Strict.label(&ns, name);
        kseal_keys::seal_base64(key(0).public_key(), &label, &json).unwrap()
    };
    let mut ss = SealedSecret::new("legacy", kseal_api::SealedSecretSpec::default());
    ss.metadata.namespace = Some(ns.clone());
    ss.spec.data = Some(v1("legacy", "t0k3n"));
    let first = Running::start(&client, cl.config()).await;
    create_ss(&client, &ss).await;
    wait_synced(&client, &ns, "legacy", "True", "Unsealed").await;
    let written = wait_secret(&client, &ns, "legacy", "v1 secret", |_| true).await;
    first.stop().await;

    let mut strict = cl.config();
    strict.accept_deprecated_v1_data = false;
    let second = Running::start(&client, strict).await;
    let failed = wait_synced(&client, &ns, "legacy", "False", "DeprecatedDataRejected").await;
    let message = failed.synced_condition().unwrap().message.clone().unwrap();
    assert!(
        message.contains("--accept-deprecated-v1-data") && message.contains("kept"),
        "{message}"
    );
    assert!(!message.contains("t0k3n"));
    wait_event(&client, &ns, "legacy", "ErrUnsealFailed").await;
    // A new value is not applied; the existing Secret stays as it was.
    let api: Api<SealedSecret> = Api::namespaced(client.clone(), &ns);
    api.patch(
        "legacy",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"data": v1("legacy", "n3w")}})),
    )
    .await
    .unwrap();
    wait_synced(&client, &ns, "legacy", "False", "DeprecatedDataRejected").await;
    let now = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("legacy")
        .await
        .unwrap();
    assert_eq!(now.resource_version(), written.resource_version());
    assert_eq!(data_of(&now), map(&[("token", "t0k3n")]));
    assert_eq!(second.rsa_operations(), 0, "refused before any RSA work");
    second.stop().await;
}

/// With `--label-selector`, an owned Secret that does not carry the selected labels (its
/// template sets none) is still watched: deleting it re-creates it at once (resync off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_label_selector_a_deleted_secret_is_recreated_by_the_watch() {
    let (_server, cl) = fake().await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let mut config = cl.config();
    config.label_selector = Some("team=a".into());
    config.resync_period = None;
    let running = Running::start(&client, config).await;
    let mut mine = seal(&secret(&ns, "mine", &[("a", "1")]), key(0));
    mine.metadata.labels = Some(map(&[("team", "a")]));
    create_ss(&client, &mine).await;
    wait_synced(&client, &ns, "mine", "True", "Unsealed").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let before = secrets.get("mine").await.unwrap();
    assert!(before.labels().get("team").is_none());
    secrets
        .delete("mine", &DeleteParams::default())
        .await
        .unwrap();
    wait_secret(&client, &ns, "mine", "re-created", |s| {
        s.uid() != before.uid()
    })
    .await;
    running.stop().await;
}

/// What controllers before the v2 formats wrote, computed here with a copy of their code (not
/// the controller's own v1 reader): the spec digest over a serde_json rendering with the
/// `Debug` text of the scope, and the data MAC under a key derived from the PKCS #1 PEM text.
mod v1_writer {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD_NO_PAD;
    use hmac::{KeyInit as _, Mac as _};
    use kseal_keys::KeyPair;
    use sha2::{Digest as _, Sha256};

    pub(super) fn spec_digest(ss: &SealedSecret) -> String {
        let value = json!({
            "v": 1,
            "namespace": ss.metadata.namespace,
            "name": ss.metadata.name,
            "scope": format!("{:?}", ss.scope()),
            "spec": ss.spec,
        });
        let bytes = serde_json::to_vec(&value).unwrap();
        format!("sha256:{}", STANDARD_NO_PAD.encode(Sha256::digest(&bytes)))
    }

    pub(super) fn data_mac(pair: &KeyPair, digest: &str, secret: &Secret) -> String {
        let pem = pair.private_key().to_pkcs1_pem().unwrap();
        let hkdf = hkdf::Hkdf::<Sha256>::new(Some(b"kseal.dev/data-mac/v1"), pem.as_bytes());
        let mut key = [0u8; 32];
        hkdf.expand(b"kseal secret data mac", &mut key).unwrap();
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(&key).unwrap();
        mac.update(b"kseal.dev/data-mac v1\0");
        let put = |mac: &mut hmac::Hmac<Sha256>, bytes: &[u8]| {
            mac.update(&(bytes.len() as u64).to_be_bytes());
            mac.update(bytes);
        };
        let meta = &secret.metadata;
        put(&mut mac, digest.as_bytes());
        put(&mut mac, meta.namespace.as_deref().unwrap().as_bytes());
        put(&mut mac, meta.name.as_deref().unwrap().as_bytes());
        put(
            &mut mac,
            secret.type_.as_deref().unwrap_or("Opaque").as_bytes(),
        );
        let data = secret.data.clone().unwrap_or_default();
        mac.update(&(data.len() as u64).to_be_bytes());
        for (k, v) in &data {
            put(&mut mac, k.as_bytes());
            put(&mut mac, &v.0);
        }
        let tag = mac.finalize().into_bytes();
        format!("v1:{}:{}", pair.id(), STANDARD_NO_PAD.encode(tag))
    }
}

/// A Secret written before the v2 formats (v1 digest and MAC) is up to date for the new
/// controller: no RSA operation, no write. Its next write, here to revert edited data,
/// stores the v2 forms.
async fn secrets_with_v1_digest_and_mac_are_kept_until_their_next_write(client: Client) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let first = Running::start(&client, cl.config()).await;
    let mut plain = secret(&ns, "legacy", &[("a", "1"), ("b", "2")]);
    plain.metadata.labels = Some(map(&[("tier", "db")]));
    create_ss(&client, &seal(&plain, key(0))).await;
    wait_synced(&client, &ns, "legacy", "True", "Unsealed").await;
    first.stop().await;

    // Rewrite the Secret's annotations as a v1 controller left them.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let mut s = secrets.get("legacy").await.unwrap();
    assert!(s.annotations()[SPEC_DIGEST_ANNOTATION].starts_with("v2:sha256:"));
    let mac = &s.annotations()[DATA_MAC_ANNOTATION];
    assert!(mac.starts_with(&format!("v2:{}:", key(0).id())), "{mac}");
    let ss = Api::<SealedSecret>::namespaced(client.clone(), &ns)
        .get("legacy")
        .await
        .unwrap();
    let digest = v1_writer::spec_digest(&ss);
    let mac = v1_writer::data_mac(key(0), &digest, &s);
    s.annotations_mut()
        .insert(SPEC_DIGEST_ANNOTATION.to_owned(), digest.clone());
    s.annotations_mut()
        .insert(DATA_MAC_ANNOTATION.to_owned(), mac.clone());
    let legacy = secrets
        .replace("legacy", &PostParams::default(), &s)
        .await
        .unwrap();

    let second = Running::start(&client, cl.config()).await;
    eventually("the legacy Secret checked", DEADLINE, || async {
        Ok((second.reconciles("unchanged") >= 1).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(second.rsa_operations(), 0, "no unseal for a v1 Secret");
    assert_eq!(second.reconciles("updated"), 0);
    let now = secrets.get("legacy").await.unwrap();
    assert_eq!(
        now.resource_version(),
        legacy.resource_version(),
        "no write"
    );
    assert_eq!(now.annotations()[SPEC_DIGEST_ANNOTATION], digest);
    assert_eq!(now.annotations()[DATA_MAC_ANNOTATION], mac);

    // Edited data fails the v1 MAC: unsealed and written again, now in the v2 forms.
    secrets
        .patch(
            "legacy",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "ZWRpdGVk"}})),
        )
        .await
        .unwrap();
    let rewritten = wait_secret(&client, &ns, "legacy", "reverted in v2", |s| {
        s.annotations()[SPEC_DIGEST_ANNOTATION].starts_with("v2:sha256:")
    })
    .await;
    assert_eq!(data_of(&rewritten), map(&[("a", "1"), ("b", "2")]));
    assert!(
        rewritten.annotations()[DATA_MAC_ANNOTATION].starts_with("v2:"),
        "{:?}",
        rewritten.annotations()
    );
    assert_eq!(
        rewritten.annotations()[SPEC_DIGEST_ANNOTATION],
        kseal_controller::formats::spec_digest(&ss)
    );
    second.stop().await;
    cl.cleanup().await;
}

on_both!(secrets_with_v1_digest_and_mac_are_kept_until_their_next_write);
