//! Fleet acknowledgements in SSM Parameter Store: the real AWS SDK against the moto emulator
//! (the same server as Secrets Manager; `tests/moto/start.sh`). Without the emulator each test
//! skips loudly, and fails under `CI=true`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use kseal_keystore::fleet::{ACK_SCHEMA, parameter_path};
use kseal_keystore::{Ack, AwsOptions, ClusterId, Error, FleetStore, Kid, Location};
use kseal_testkit::sm;

fn options(endpoint: &str) -> AwsOptions {
    AwsOptions {
        endpoint_url: Some(endpoint.to_owned()),
        region: Some("us-east-1".into()),
        ..Default::default()
    }
}

fn kid(c: char) -> Kid {
    Kid::parse(&c.to_string().repeat(64)).unwrap()
}

fn ack(ring: &str, cluster: &str, version: u64) -> Ack {
    Ack {
        schema: ACK_SCHEMA,
        cluster: ClusterId::parse(cluster).unwrap(),
        ring: ring.to_owned(),
        anchor: Some(kid('a')),
        index_version: version,
        held: vec![kid('a'), kid('b')],
        sealing: Some(kid('b')),
        objects: BTreeMap::from([(kid('b'), 12)]),
        unattributed: 0,
        controller: "0.1.0 (test)".into(),
        heartbeat_seconds: 86_400,
        synced: None,
        written: jiff::Timestamp::now(),
    }
}

async fn ssm_client(endpoint: &str) -> aws_sdk_ssm::Client {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_sdk_ssm::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .load()
        .await;
    aws_sdk_ssm::Client::new(&config)
}

#[tokio::test]
async fn records_are_standard_parameters_under_the_ring_and_list_past_a_page() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let ring = sm::unique_prefix("fleet_records");
    let location = Location::SecretsManager {
        prefix: ring.clone(),
        region: None,
    };
    let store = FleetStore::open(&location, &options(&endpoint))
        .await
        .unwrap();
    assert!(
        store
            .describe()
            .starts_with("SSM Parameter Store (us-east-1"),
        "{}",
        store.describe()
    );
    assert!(store.list().await.unwrap().is_empty());
    let c0 = ClusterId::parse("cluster-00").unwrap();
    assert_eq!(store.read(&c0).await.unwrap(), None);
    // 12 clusters: GetParametersByPath answers 10 at most per page.
    for i in 0..12 {
        store
            .write(&ack(&ring, &format!("cluster-{i:02}"), 7))
            .await
            .unwrap();
    }
    // Overwriting is how a cluster reports a change.
    store.write(&ack(&ring, "cluster-00", 8)).await.unwrap();
    assert_eq!(store.read(&c0).await.unwrap().unwrap().index_version, 8);
    let name = store.name_of(&c0);
    assert_eq!(
        name,
        format!("{}/cluster-00", parameter_path(&ring).unwrap())
    );
    let parameter = ssm_client(&endpoint)
        .await
        .get_parameter()
        .name(&name)
        .send()
        .await
        .unwrap();
    let parameter = parameter.parameter().unwrap();
    assert_eq!(
        parameter.r#type(),
        Some(&aws_sdk_ssm::types::ParameterType::String),
        "a plain String parameter, never SecureString: records are public"
    );
    let listed = store.list().await.unwrap();
    assert_eq!(listed.len(), 12);
    assert!(listed.iter().all(|l| l.ack.is_ok()), "{listed:?}");
    assert_eq!(listed[0].name, "cluster-00");
    assert_eq!(listed[11].name, "cluster-11");
}

#[tokio::test]
async fn records_out_of_place_are_reported_unreadable_not_trusted() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let ring = sm::unique_prefix("fleet_out_of_place");
    let location = Location::SecretsManager {
        prefix: ring.clone(),
        region: None,
    };
    let store = FleetStore::open(&location, &options(&endpoint))
        .await
        .unwrap();
    store.write(&ack(&ring, "good", 3)).await.unwrap();
    let path = parameter_path(&ring).unwrap();
    let client = ssm_client(&endpoint).await;
    let put = |name: String, value: String| {
        let client = client.clone();
        async move {
            client
                .put_parameter()
                .name(name)
                .value(value)
                .r#type(aws_sdk_ssm::types::ParameterType::String)
                .overwrite(true)
                .send()
                .await
                .unwrap();
        }
    };
    // Another ring's record, one filed under another cluster's name, and no record at all.
    put(
        format!("{path}/other-ring"),
        serde_json::to_string(&ack("another/ring", "other-ring", 3)).unwrap(),
    )
    .await;
    put(
        format!("{path}/renamed"),
        serde_json::to_string(&ack(&ring, "good", 3)).unwrap(),
    )
    .await;
    put(format!("{path}/junk"), "hello".into()).await;
    let listed = store.list().await.unwrap();
    let by_name: BTreeMap<&str, &Result<Ack, String>> =
        listed.iter().map(|l| (l.name.as_str(), &l.ack)).collect();
    assert!(by_name["good"].is_ok());
    let other = by_name["other-ring"].as_ref().unwrap_err();
    assert!(other.contains("names ring \"another/ring\""), "{other}");
    let renamed = by_name["renamed"].as_ref().unwrap_err();
    assert!(
        renamed.contains("names cluster good but is stored as renamed"),
        "{renamed}"
    );
    let junk = by_name["junk"].as_ref().unwrap_err();
    assert!(
        junk.contains("is malformed: not an acknowledgement record"),
        "{junk}"
    );
    assert!(!junk.contains("hello"), "{junk}");
    // Reading one record checks the same.
    let e = store
        .read(&ClusterId::parse("renamed").unwrap())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Malformed { .. }), "{e}");
}

#[tokio::test]
async fn a_ring_ssm_cannot_name_is_refused_before_any_call() {
    let location = Location::SecretsManager {
        prefix: "team+a/ring".into(),
        region: None,
    };
    let e = FleetStore::open(&location, &options("http://127.0.0.1:9"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'+' is not allowed in an SSM parameter name"),
        "{e}"
    );
}
