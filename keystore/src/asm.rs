//! The AWS Secrets Manager store, on the official SDK.
//!
//! Every read names a version (`VersionStage=AWSCURRENT` or a `VersionId`): Secrets Manager
//! answers an unqualified read with `AWSCURRENT` too, but emulators may lag a label move, and
//! naming it costs nothing.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::config::Region;
use aws_sdk_secretsmanager::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_secretsmanager::types::{ReplicaRegionType, Tag};
use zeroize::Zeroizing;

use crate::{Error, Put, Result, Version};

const CURRENT: &str = "AWSCURRENT";
const PENDING: &str = "AWSPENDING";
/// The most `ListSecretVersionIds` pages [`AsmStore::versions`] reads.
const MAX_VERSION_PAGES: usize = 16;

/// How to reach Secrets Manager. Unset fields come from the standard AWS configuration
/// (`AWS_REGION`, `AWS_PROFILE`, `AWS_ENDPOINT_URL_SECRETS_MANAGER`, `AWS_ENDPOINT_URL`,
/// `~/.aws/config`, …).
#[derive(Debug, Clone, Default)]
pub struct AwsOptions {
    /// Region, overriding the environment and profile.
    pub region: Option<String>,
    /// Named profile, overriding `AWS_PROFILE`.
    pub profile: Option<String>,
    /// Endpoint URL, overriding the environment (e.g. a local emulator).
    pub endpoint_url: Option<String>,
    /// A role to assume (`sts:AssumeRole`) with the credentials found.
    pub assume_role: Option<String>,
    /// Customer-managed KMS key for secrets this process creates.
    pub kms_key_id: Option<String>,
    /// Regions to replicate secrets this process creates to.
    pub replica_regions: Vec<String>,
}

/// A Secrets Manager client and what secrets it creates get.
#[derive(Debug, Clone)]
pub struct AsmStore {
    client: Client,
    region: String,
    endpoint: Option<String>,
    kms_key_id: Option<String>,
    replica_regions: Vec<String>,
}

impl AsmStore {
    /// Builds a client from the default credential chain and `options`. No request is made.
    pub async fn connect(options: &AwsOptions) -> Result<Self> {
        let (shared, region) = sdk_config(options).await?;
        Ok(Self {
            client: Client::new(&shared),
            region,
            endpoint: options.endpoint_url.clone(),
            kms_key_id: options.kms_key_id.clone(),
            replica_regions: options.replica_regions.clone(),
        })
    }

    /// `AWS Secrets Manager (eu-west-1)`, with the endpoint when one is set.
    pub fn describe(&self) -> String {
        match &self.endpoint {
            Some(e) => format!("AWS Secrets Manager ({}, endpoint {e})", self.region),
            None => format!("AWS Secrets Manager ({})", self.region),
        }
    }

    /// The region in use.
    pub fn region(&self) -> &str {
        &self.region
    }

    pub(crate) async fn current_version(&self, name: &str) -> Result<Option<Version>> {
        let out = match self.client.describe_secret().secret_id(name).send().await {
            Ok(out) => out,
            Err(e) if is_code(&e, "ResourceNotFoundException") => return Ok(None),
            Err(e) => return Err(classify("DescribeSecret", name, e)),
        };
        if out.deleted_date().is_some() {
            return Ok(None);
        }
        Ok(out.version_ids_to_stages().and_then(|versions| {
            versions
                .iter()
                .find(|(_, stages)| stages.iter().any(|s| s == CURRENT))
                .map(|(id, _)| Version(id.clone()))
        }))
    }

    pub(crate) async fn read(
        &self,
        name: &str,
        version: Option<&Version>,
    ) -> Result<Option<(Zeroizing<String>, Version)>> {
        self.read_at(name, version, CURRENT).await
    }

    /// The version before the current one (`AWSPREVIOUS`), if the secret has one.
    pub(crate) async fn read_previous(
        &self,
        name: &str,
    ) -> Result<Option<(Zeroizing<String>, Version)>> {
        self.read_at(name, None, "AWSPREVIOUS").await
    }

    /// The ids of the stored versions of `name`, deprecated ones (no staging label) included,
    /// at most `limit`, paging through `ListSecretVersionIds`; empty when it does not exist.
    pub(crate) async fn versions(&self, name: &str, limit: usize) -> Result<Vec<Version>> {
        let mut ids: Vec<Version> = Vec::new();
        let mut token: Option<String> = None;
        // Bounded however the service pages (an empty page with a token included).
        for _ in 0..MAX_VERSION_PAGES {
            let out = match self
                .client
                .list_secret_version_ids()
                .secret_id(name)
                .include_deprecated(true)
                .max_results(100)
                .set_next_token(token.take())
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) if is_code(&e, "ResourceNotFoundException") => return Ok(Vec::new()),
                Err(e) => return Err(classify("ListSecretVersionIds", name, e)),
            };
            for id in out.versions().iter().filter_map(|v| v.version_id()) {
                let id = Version(id.to_owned());
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            match out.next_token().filter(|t| !t.is_empty()) {
                Some(next) if ids.len() < limit => token = Some(next.to_owned()),
                _ => {
                    ids.truncate(limit);
                    return Ok(ids);
                }
            }
        }
        Err(Error::Refused(format!(
            "ListSecretVersionIds on {name} went on for more than {MAX_VERSION_PAGES} pages \
             without listing its versions"
        )))
    }

    async fn read_at(
        &self,
        name: &str,
        version: Option<&Version>,
        stage: &str,
    ) -> Result<Option<(Zeroizing<String>, Version)>> {
        let request = self.client.get_secret_value().secret_id(name);
        let request = match version {
            Some(v) => request.version_id(&v.0),
            None => request.version_stage(stage),
        };
        let out = match request.send().await {
            Ok(out) => out,
            Err(e) if is_code(&e, "ResourceNotFoundException") => return Ok(None),
            // Scheduled for deletion (retired, or deleted by hand): as good as gone for a
            // reader; a retry would never succeed.
            Err(e) if is_scheduled_for_deletion(&e) => return Ok(None),
            Err(e) => return Err(classify("GetSecretValue", name, e)),
        };
        let version = Version(out.version_id().unwrap_or_default().to_owned());
        let text = match (out.secret_string(), out.secret_binary()) {
            (Some(s), _) => Zeroizing::new(s.to_owned()),
            (None, Some(b)) => {
                Zeroizing::new(String::from_utf8(b.as_ref().to_vec()).map_err(|_| {
                    Error::Malformed {
                        what: name.to_owned(),
                        reason: "SecretBinary is not UTF-8 text".into(),
                    }
                })?)
            }
            (None, None) => {
                return Err(Error::Malformed {
                    what: name.to_owned(),
                    reason: "the version holds no value".into(),
                });
            }
        };
        Ok(Some((text, version)))
    }

    fn tags(tags: &[(&str, &str)]) -> Vec<Tag> {
        tags.iter()
            .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
            .collect()
    }

    async fn create(
        &self,
        name: &str,
        text: &str,
        token: &str,
        tags: &[(&str, &str)],
    ) -> std::result::Result<
        Version,
        SdkError<
            aws_sdk_secretsmanager::operation::create_secret::CreateSecretError,
            aws_sdk_secretsmanager::config::http::HttpResponse,
        >,
    > {
        let mut request = self
            .client
            .create_secret()
            .name(name)
            .secret_string(text)
            .client_request_token(token)
            .set_tags(Some(Self::tags(tags)));
        if let Some(kms) = &self.kms_key_id {
            request = request.kms_key_id(kms);
        }
        for region in &self.replica_regions {
            request =
                request.add_replica_regions(ReplicaRegionType::builder().region(region).build());
        }
        let out = request.send().await?;
        Ok(Version(out.version_id().unwrap_or(token).to_owned()))
    }

    pub(crate) async fn compare_and_swap(
        &self,
        name: &str,
        text: &str,
        expected: Option<&Version>,
        tags: &[(&str, &str)],
    ) -> Result<Version> {
        let conflict = || Error::Conflict {
            what: name.to_owned(),
        };
        let Some(expected) = expected else {
            return match self.create(name, text, &random_token(), tags).await {
                Ok(v) => Ok(v),
                Err(e) if is_code(&e, "ResourceExistsException") => Err(conflict()),
                Err(e) => Err(classify("CreateSecret", name, e)),
            };
        };
        // Fail fast when someone else already moved AWSCURRENT; the label move below is the
        // real compare-and-swap.
        if self.current_version(name).await?.as_ref() != Some(expected) {
            return Err(conflict());
        }
        let token = random_token();
        self.client
            .put_secret_value()
            .secret_id(name)
            .secret_string(text)
            .client_request_token(&token)
            .version_stages(PENDING)
            .send()
            .await
            .map_err(|e| classify("PutSecretValue", name, e))?;
        // Secrets Manager moves AWSCURRENT only if `expected` still holds it.
        match self
            .client
            .update_secret_version_stage()
            .secret_id(name)
            .version_stage(CURRENT)
            .move_to_version_id(&token)
            .remove_from_version_id(&expected.0)
            .send()
            .await
        {
            Ok(_) => {}
            Err(e)
                if is_code(&e, "InvalidParameterException")
                    || is_code(&e, "InvalidRequestException") =>
            {
                return Err(conflict());
            }
            Err(e) => return Err(classify("UpdateSecretVersionStage", name, e)),
        }
        // Hygiene only: AWSPENDING moves with the next write anyway.
        let _ = self
            .client
            .update_secret_version_stage()
            .secret_id(name)
            .version_stage(PENDING)
            .remove_from_version_id(&token)
            .send()
            .await;
        Ok(Version(token))
    }

    pub(crate) async fn create_immutable(
        &self,
        name: &str,
        text: &str,
        token: &str,
        tags: &[(&str, &str)],
        same: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Put> {
        // Look first: a CreateSecret repeated with the same token and value succeeds again
        // (that is what the token is for), so its answer cannot tell "created" from "already
        // there"; and a secret scheduled for deletion must be restored, not re-indexed.
        match self.presence(name).await? {
            Presence::Absent => {}
            Presence::Deleted => return Err(scheduled_for_deletion(name)),
            Presence::Present => return self.existing(name, same).await,
        }
        match self.create(name, text, token, tags).await {
            Ok(_) => Ok(Put::Created),
            // Another writer created it since we looked.
            Err(e) if is_code(&e, "ResourceExistsException") => self.existing(name, same).await,
            Err(e)
                if is_code(&e, "InvalidRequestException")
                    && e.message().is_some_and(|m| m.contains("delet")) =>
            {
                Err(scheduled_for_deletion(name))
            }
            Err(e) => Err(classify("CreateSecret", name, e)),
        }
    }

    /// Whether `name` exists, and whether it is scheduled for deletion (one metadata call).
    async fn presence(&self, name: &str) -> Result<Presence> {
        match self.client.describe_secret().secret_id(name).send().await {
            Ok(out) if out.deleted_date().is_some() => Ok(Presence::Deleted),
            Ok(_) => Ok(Presence::Present),
            Err(e) if is_code(&e, "ResourceNotFoundException") => Ok(Presence::Absent),
            Err(e) => Err(classify("DescribeSecret", name, e)),
        }
    }

    /// The answer for an immutable secret that already exists: [`Put::Existed`] when it holds
    /// the same thing, refused otherwise.
    async fn existing(&self, name: &str, same: &(dyn Fn(&str) -> bool + Sync)) -> Result<Put> {
        match self.read(name, None).await? {
            Some((existing, _)) if same(&existing) => Ok(Put::Existed),
            Some(_) => Err(Error::Refused(format!(
                "{name} already exists and holds another key; kseal never overwrites a key secret"
            ))),
            None => Err(Error::Conflict {
                what: name.to_owned(),
            }),
        }
    }

    pub(crate) async fn put(&self, name: &str, text: &str, tags: &[(&str, &str)]) -> Result<()> {
        match self.read(name, None).await? {
            None => match self.create(name, text, &random_token(), tags).await {
                Ok(_) => Ok(()),
                Err(e) => Err(classify("CreateSecret", name, e)),
            },
            Some((current, _)) if current.as_str() == text => Ok(()),
            Some(_) => {
                self.client
                    .put_secret_value()
                    .secret_id(name)
                    .secret_string(text)
                    .client_request_token(random_token())
                    .send()
                    .await
                    .map_err(|e| classify("PutSecretValue", name, e))?;
                Ok(())
            }
        }
    }

    pub(crate) async fn schedule_deletion(&self, name: &str, recovery_days: u32) -> Result<()> {
        let described = self
            .client
            .describe_secret()
            .secret_id(name)
            .send()
            .await
            .map_err(|e| classify("DescribeSecret", name, e))?;
        if described.deleted_date().is_some() {
            // Already scheduled (an earlier retire that failed later, say).
            return Ok(());
        }
        // Secrets Manager refuses to delete a primary secret that still has replicas. Removing
        // them deletes the replicas at once; the primary stays recoverable for the window.
        let replicas: Vec<String> = described
            .replication_status()
            .iter()
            .filter_map(|r| r.region().map(str::to_owned))
            .collect();
        if !replicas.is_empty() {
            self.client
                .remove_regions_from_replication()
                .secret_id(name)
                .set_remove_replica_regions(Some(replicas))
                .send()
                .await
                .map_err(|e| classify("RemoveRegionsFromReplication", name, e))?;
        }
        self.client
            .delete_secret()
            .secret_id(name)
            .recovery_window_in_days(i64::from(recovery_days.clamp(7, 30)))
            .send()
            .await
            .map_err(|e| classify("DeleteSecret", name, e))?;
        Ok(())
    }
}

/// What [`AsmStore::presence`] found.
enum Presence {
    Absent,
    Deleted,
    Present,
}

fn scheduled_for_deletion(name: &str) -> Error {
    Error::Refused(format!(
        "{name} is scheduled for deletion: restore it first (aws secretsmanager restore-secret --secret-id {name})"
    ))
}

/// A fresh `ClientRequestToken` (UUID v4 text, as the SDK itself makes). Only uniqueness
/// matters (it names a new version); should the OS RNG fail, the clock and process id still
/// make it unique.
fn random_token() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b[..12].copy_from_slice(&nanos.to_be_bytes()[4..]);
        b[12..].copy_from_slice(&std::process::id().to_be_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The AWS configuration every client of kseal's is built from: the default credential chain
/// with `options` (region, profile, endpoint), the role assumed when one is named, and
/// timeouts. Returns it with its region. No request is made.
pub(crate) async fn sdk_config(options: &AwsOptions) -> Result<(aws_config::SdkConfig, String)> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).timeout_config(
        TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(5))
            .operation_attempt_timeout(Duration::from_secs(20))
            .operation_timeout(Duration::from_secs(60))
            .build(),
    );
    if let Some(region) = &options.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(profile) = &options.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(url) = &options.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    let shared = loader.load().await;
    let region = shared
        .region()
        .map(|r| r.as_ref().to_owned())
        .ok_or(Error::NoRegion)?;
    let shared = match &options.assume_role {
        Some(role) => {
            let provider = aws_config::sts::AssumeRoleProvider::builder(role.clone())
                .session_name("kseal")
                .configure(&shared)
                .build()
                .await;
            shared
                .to_builder()
                .credentials_provider(
                    aws_sdk_secretsmanager::config::SharedCredentialsProvider::new(provider),
                )
                .build()
        }
        None => shared,
    };
    Ok((shared, region))
}

/// `InvalidRequestException` for a secret marked for deletion (AWS: "marked for deletion";
/// the emulator: "currently marked deleted").
fn is_scheduled_for_deletion<E: ProvideErrorMetadata>(
    e: &SdkError<E, impl std::fmt::Debug>,
) -> bool {
    is_code(e, "InvalidRequestException")
        && e.message()
            .is_some_and(|m| m.to_ascii_lowercase().contains("deleted") || m.contains("deletion"))
}

fn is_code<E: ProvideErrorMetadata>(e: &SdkError<E, impl std::fmt::Debug>, code: &str) -> bool {
    matches!(e, SdkError::ServiceError(_)) && e.code() == Some(code)
}

/// Maps an SDK error to what a caller (and `/readyz`) can act on.
pub(crate) fn classify<E>(
    operation: &'static str,
    what: &str,
    error: SdkError<E, aws_sdk_secretsmanager::config::http::HttpResponse>,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let what = what.to_owned();
    // A denial with a body the JSON protocol cannot read (an HTTP 401/403 from a proxy or an
    // emulator's XML) has no error code; its status still says what it is.
    let status = error.raw_response().map(|r| r.status().as_u16());
    let code = error
        .code()
        .map(str::to_owned)
        .or_else(|| matches!(status, Some(401 | 403)).then(|| "AccessDenied".to_owned()));
    let chain = DisplayErrorContext(&error).to_string().to_ascii_lowercase();
    let source: crate::BoxError = Box::new(error);
    match (code.as_deref(), chain.contains("credential")) {
        (Some("ResourceNotFoundException"), _) => Error::NotFound {
            what,
            store: "AWS Secrets Manager".into(),
        },
        (
            Some(
                "AccessDeniedException"
                | "AccessDenied"
                | "UnrecognizedClientException"
                | "InvalidSignatureException"
                | "ExpiredTokenException"
                | "InvalidClientTokenId"
                | "DecryptionFailure"
                | "KMSAccessDeniedException",
            ),
            _,
        ) => Error::AccessDenied {
            operation,
            what,
            source,
        },
        (Some("ThrottlingException" | "TooManyRequestsException" | "RequestLimitExceeded"), _) => {
            Error::Throttled { operation, what }
        }
        (None, true) => Error::NoCredentials(source),
        (None, false) if chain.contains("dispatch") || chain.contains("timeout") => {
            Error::Network {
                operation,
                what,
                source,
            }
        }
        _ => Error::Service {
            operation,
            what,
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_uuid_shaped_and_fresh() {
        let a = random_token();
        let b = random_token();
        assert_eq!(a.len(), 36);
        assert_ne!(a, b);
        assert_eq!(&a[14..15], "4");
    }
}
