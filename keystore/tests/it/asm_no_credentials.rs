//! Missing AWS credentials are reported as such (`Error::NoCredentials`, reason
//! `no_credentials`), before any request leaves the process.
//!
//! The credential chain reads the process environment, which the test harness (and
//! `scripts/test.sh`) fills with dummy keys, and environment variables are process-wide while
//! tests run in parallel. So the test runs itself again as a child process whose environment
//! has no credential source at all, and checks there; the parent only checks that the child
//! passed. No emulator is needed: the request is never sent. So it needs no binary of its
//! own: only the child sees the changed environment.

use std::process::Command;

use kseal_keystore::{AwsOptions, Error, Location, Ring};

/// Set in the child process.
const CHILD: &str = "KSEAL_TEST_NO_CREDENTIALS_CHILD";

/// Every variable the AWS SDK's default chain takes credentials or a profile from.
const CREDENTIAL_VARS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
];

/// This test's name as the harness lists it: its module path in the `it` test binary.
const TEST_NAME: &str = "asm_no_credentials::missing_credentials_are_reported_as_no_credentials";

#[test]
fn missing_credentials_are_reported_as_no_credentials() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let empty = tempfile::tempdir().expect("temporary directory");
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = Command::new(exe);
    command
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        // No profile files, no instance metadata.
        .env("AWS_CONFIG_FILE", empty.path().join("config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            empty.path().join("credentials"),
        )
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for var in CREDENTIAL_VARS {
        command.env_remove(var);
    }
    let out = command.output().expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the child run failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

fn child() {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            // Nothing listens there; the request must fail before it is sent.
            let options = AwsOptions {
                endpoint_url: Some("http://127.0.0.1:9".into()),
                region: Some("us-east-1".into()),
                ..Default::default()
            };
            let location = Location::SecretsManager {
                prefix: "kseal-test/no-credentials".into(),
                region: None,
            };
            let ring = Ring::open(&location, &options).await.expect("open");
            let err = ring
                .index_version()
                .await
                .expect_err("no credentials, no answer");
            assert!(matches!(err, Error::NoCredentials(_)), "{err:?}");
            assert_eq!(err.reason(), "no_credentials");
            assert!(!err.is_transient());
            assert!(err.to_string().starts_with("no AWS credentials"), "{err}");

            let err = ring
                .snapshot(None)
                .await
                .expect_err("no credentials, no answer");
            assert!(matches!(err, Error::NoCredentials(_)), "{err:?}");
        });
}
