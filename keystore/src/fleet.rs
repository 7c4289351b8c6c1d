//! Fleet acknowledgements: each cluster's report of what it holds of a ring.
//!
//! The leader of each cluster's controller publishes one small JSON record ([`Ack`]) for its
//! cluster: the ring and anchor it trusts, the signed index version it holds, the kids it
//! holds (mirrored), the kid it seals with, how many objects each kid opens there, its
//! version, when it last synced and when it wrote the record. `kseal fleet status` reads them
//! all to tell which clusters are current, silent or behind.
//!
//! Where records live ([`FleetStore`]):
//!
//! - a Secrets Manager ring `R`: SSM Parameter Store **standard** parameters
//!   `/kseal/R/fleet/<cluster-id>` (free of charge, 4 KB each), so that each cluster's role
//!   can be allowed `ssm:PutParameter` on its own name only, and the ring stays read-only;
//! - a directory ring: one file per cluster, `<ring dir>/fleet/<cluster-id>.json`, written
//!   atomically.
//!
//! Records are signed by nothing: they are **reports, never trust**. Readers check their
//! shape and size ([`Ack::parse`]) and never choose a key from them.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_ssm::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ssm::types::{ParameterTier, ParameterType};
use serde::{Deserialize, Serialize};

use crate::{AwsOptions, DIR_TIMEOUT, Error, Kid, Location, Result};

/// The record schema this build writes and reads.
pub const ACK_SCHEMA: u32 = 1;

/// The largest record written or read: an SSM standard parameter's limit.
pub const MAX_ACK_BYTES: usize = 4096;

/// The most kids a record lists (held, or with objects): a ring holds far fewer.
pub const MAX_ACK_KIDS: usize = 32;

/// The most records one listing reads.
pub const MAX_CLUSTERS: usize = 20_000;

/// How often a controller writes its record when nothing changed.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(24 * 3600);

/// The shortest heartbeat a record may claim (silence is judged against it).
pub const MIN_HEARTBEAT: Duration = Duration::from_secs(1);

/// The longest text field of a record (ring name, controller version).
const MAX_TEXT: usize = 512;

/// A cluster's identity in the fleet: 1 to 128 of `A-Za-z0-9._-`, starting with a letter or
/// digit (the UID of the cluster's `kube-system` namespace by default).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterId(String);

impl ClusterId {
    /// The longest cluster id.
    pub const MAX_LEN: usize = 128;

    /// Parses and checks a cluster id.
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = |why: &str| {
            Error::Refused(format!(
                "invalid cluster id {:?}: {why}",
                text.chars().take(80).collect::<String>()
            ))
        };
        if text.is_empty() {
            return Err(invalid("it is empty"));
        }
        if text.len() > Self::MAX_LEN {
            return Err(invalid("it is longer than 128 characters"));
        }
        if !text.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(invalid("it must start with a letter or a digit"));
        }
        if let Some(c) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c)))
        {
            return Err(invalid(&format!(
                "{c:?} is not allowed (letters, digits, '.', '_' and '-' are)"
            )));
        }
        Ok(Self(text.to_owned()))
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ClusterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for ClusterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterId({})", self.0)
    }
}

impl Serialize for ClusterId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ClusterId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ClusterId::parse(&text).map_err(|_| serde::de::Error::custom("not a valid cluster id"))
    }
}

/// One cluster's acknowledgement: what its controller holds of the ring (public data only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ack {
    /// [`ACK_SCHEMA`].
    pub schema: u32,
    /// The cluster.
    pub cluster: ClusterId,
    /// The ring, as its index names it.
    pub ring: String,
    /// The anchor of the ring's signed history this cluster trusts (`None`: not known yet, or
    /// an unsigned ring).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<Kid>,
    /// The version of the signed index the cluster holds (0: unsigned).
    #[serde(default)]
    pub index_version: u64,
    /// The kids the cluster holds (mirrored into key Secrets), sorted.
    #[serde(default)]
    pub held: Vec<Kid>,
    /// The kid it seals with (`None`: nothing seals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealing: Option<Kid>,
    /// How many objects (SealedSecrets) each kid opens there; kids with none are left out.
    #[serde(default)]
    pub objects: BTreeMap<Kid, u64>,
    /// Objects whose key the controller cannot name (sealed without the `kseal.dev/sealing-key`
    /// annotation, e.g. by kubeseal, or by a key it does not hold).
    #[serde(default)]
    pub unattributed: u64,
    /// The controller's version.
    pub controller: String,
    /// How often the cluster writes its record when nothing changes, in seconds: a cluster
    /// silent for more than two of these is reported silent.
    pub heartbeat_seconds: u64,
    /// When the cluster last read the ring successfully (as of `written`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced: Option<jiff::Timestamp>,
    /// When the record was written.
    pub written: jiff::Timestamp,
}

impl Ack {
    /// Parses a record read from `what` and checks its shape: at most [`MAX_ACK_BYTES`], schema
    /// [`ACK_SCHEMA`], at most [`MAX_ACK_KIDS`] kids, no control characters in its text. The
    /// error never quotes the record.
    pub fn parse(text: &str, what: &str) -> Result<Self> {
        let malformed = |reason: String| Error::Malformed {
            what: what.to_owned(),
            reason,
        };
        if text.len() > MAX_ACK_BYTES {
            return Err(malformed(format!(
                "{} bytes, more than the {MAX_ACK_BYTES} a record may hold",
                text.len()
            )));
        }
        let ack: Ack = serde_json::from_str(text).map_err(|e| {
            malformed(format!(
                "not an acknowledgement record ({} error at line {} column {})",
                match e.classify() {
                    serde_json::error::Category::Io => "I/O",
                    serde_json::error::Category::Syntax => "JSON syntax",
                    serde_json::error::Category::Data => "field",
                    serde_json::error::Category::Eof => "unexpected end",
                },
                e.line(),
                e.column()
            ))
        })?;
        ack.check().map_err(malformed)?;
        Ok(ack)
    }

    /// The shape rules [`Ack::parse`] and [`FleetStore::write`] enforce.
    fn check(&self) -> std::result::Result<(), String> {
        if self.schema != ACK_SCHEMA {
            return Err(format!(
                "schema {} (this kseal reads schema {ACK_SCHEMA})",
                self.schema
            ));
        }
        if self.held.len() > MAX_ACK_KIDS || self.objects.len() > MAX_ACK_KIDS {
            return Err(format!("more than {MAX_ACK_KIDS} kids"));
        }
        for (field, text) in [("ring", &self.ring), ("controller", &self.controller)] {
            if text.is_empty() || text.len() > MAX_TEXT {
                return Err(format!(
                    "\"{field}\" is empty or longer than {MAX_TEXT} bytes"
                ));
            }
            if text.chars().any(char::is_control) {
                return Err(format!("\"{field}\" holds control characters"));
            }
        }
        if self.heartbeat_seconds < MIN_HEARTBEAT.as_secs() {
            return Err("\"heartbeatSeconds\" is 0".into());
        }
        Ok(())
    }

    /// Strict JSON, checked against the same rules as [`Ack::parse`].
    pub fn to_json(&self) -> Result<String> {
        let what = || format!("the acknowledgement of cluster {}", self.cluster);
        self.check().map_err(|reason| Error::Malformed {
            what: what(),
            reason,
        })?;
        let text = serde_json::to_string(self).map_err(|_| Error::Malformed {
            what: what(),
            reason: "cannot be encoded as JSON".into(),
        })?;
        if text.len() > MAX_ACK_BYTES {
            return Err(Error::Malformed {
                what: what(),
                reason: format!(
                    "{} bytes, more than the {MAX_ACK_BYTES} a record may hold (too many kids?)",
                    text.len()
                ),
            });
        }
        Ok(text)
    }
}

/// How one cluster stands against the ring's current index (what `kseal fleet status` shows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Standing {
    /// It trusts the current index: it holds the index's version (or a newer one) under the
    /// same anchor.
    pub current: bool,
    /// It holds the index's active key.
    pub holds_active: bool,
    /// It holds every pending key (pushed after the active key, not yet active, unexpired).
    pub holds_pending: bool,
    /// It seals with the index's active key.
    pub seals_active: bool,
    /// Nothing was heard from it for more than two of its heartbeats.
    pub silent: bool,
    /// Not current, or missing the active or a pending key, or sealing with another key.
    pub behind: bool,
    /// What is behind, in words (empty when nothing is).
    pub reasons: Vec<String>,
}

impl Standing {
    /// Neither behind nor silent.
    pub fn is_current(&self) -> bool {
        !self.behind && !self.silent
    }
}

/// The keys of `index` pushed after its active key (all of them when none is active), not
/// active and not expired at `now`: the keys a rotation waits for.
pub fn pending_keys(index: &crate::Index, now: jiff::Timestamp) -> Vec<Kid> {
    let active = index.active_entry();
    index
        .keys
        .iter()
        .filter(|e| Some(&e.kid) != index.active.as_ref())
        .filter(|e| active.is_none_or(|a| e.added > a.added))
        .filter(|e| e.not_after > now)
        .map(|e| e.kid.clone())
        .collect()
}

/// How `ack` stands against `index` (whose history starts at `anchor`, when signed) at `now`.
pub fn assess(
    ack: &Ack,
    index: &crate::Index,
    anchor: Option<&Kid>,
    now: jiff::Timestamp,
) -> Standing {
    let mut reasons = Vec::new();
    let other_anchor = matches!((anchor, &ack.anchor), (Some(a), Some(b)) if a != b);
    if other_anchor {
        reasons.push("trusts another anchor".to_owned());
    } else if ack.index_version < index.version {
        reasons.push(format!(
            "holds index v{}, the ring is at v{}",
            ack.index_version, index.version
        ));
    }
    let current = reasons.is_empty();
    let holds = |kid: &Kid| ack.held.contains(kid);
    let holds_active = index.active.as_ref().is_none_or(holds);
    if !holds_active {
        reasons.push("does not hold the active key".to_owned());
    }
    let missing = pending_keys(index, now)
        .iter()
        .filter(|k| !holds(k))
        .count();
    let holds_pending = missing == 0;
    if !holds_pending {
        reasons.push(format!("misses {missing} pending key(s)"));
    }
    let seals_active = index.active.is_none() || ack.sealing == index.active;
    if !seals_active {
        reasons.push("seals with another key".to_owned());
    }
    let behind = !reasons.is_empty();
    let heartbeat = ack.heartbeat_seconds.max(MIN_HEARTBEAT.as_secs());
    let quiet = now.as_second().saturating_sub(ack.written.as_second());
    let silent = quiet > 0 && quiet.unsigned_abs() > heartbeat.saturating_mul(2);
    if silent {
        reasons.push(format!(
            "silent for {} (heartbeat {})",
            span(quiet.unsigned_abs()),
            span(heartbeat)
        ));
    }
    Standing {
        current,
        holds_active,
        holds_pending,
        seals_active,
        silent,
        behind,
        reasons,
    }
}

/// Whether nothing was heard from the cluster of `ack` at `now` for more than two of its
/// heartbeats (as [`assess`] judges it): `Some(how long)` when silent.
pub fn silence(ack: &Ack, now: jiff::Timestamp) -> Option<u64> {
    let heartbeat = ack.heartbeat_seconds.max(MIN_HEARTBEAT.as_secs());
    let quiet = now.as_second().saturating_sub(ack.written.as_second());
    (quiet > 0 && quiet.unsigned_abs() > heartbeat.saturating_mul(2)).then(|| quiet.unsigned_abs())
}

/// Whether `ack` reports holding `kid` under an index of at least `version` whose history
/// starts at `anchor` (when both the ring's and the record's anchors are known): what a
/// rotation waiting for the fleet asks of each cluster. A report, not trust: it only delays.
pub fn acknowledges(ack: &Ack, kid: &Kid, version: u64, anchor: Option<&Kid>) -> bool {
    let other_anchor = matches!((anchor, &ack.anchor), (Some(a), Some(b)) if a != b);
    !other_anchor && ack.index_version >= version && ack.held.contains(kid)
}

/// `90s`, `5m`, `3h`, `2d`: a rough length for messages.
pub fn span(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// One record found by [`FleetStore::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The name it is stored under (the cluster id, for a well-formed record).
    pub name: String,
    /// The record, or why it was not accepted (public text, never its content).
    pub ack: std::result::Result<Ack, String>,
}

/// Where a ring's acknowledgements live: SSM Parameter Store for a Secrets Manager ring, the
/// `fleet/` directory of a directory ring.
#[derive(Debug, Clone)]
pub struct FleetStore {
    backend: Backend,
}

#[derive(Debug, Clone)]
enum Backend {
    Ssm {
        client: aws_sdk_ssm::Client,
        /// `/kseal/<ring>/fleet`.
        path: String,
        /// The ring the records must name.
        ring: String,
        region: String,
        endpoint: Option<String>,
    },
    Dir {
        /// `<ring dir>/fleet`.
        dir: PathBuf,
    },
}

/// The parameter path of `ring`'s records: `/kseal/<ring>/fleet`.
pub fn parameter_path(ring: &str) -> Result<String> {
    if let Some(c) = ring
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "/_.-".contains(*c)))
    {
        return Err(Error::Location {
            location: ring.to_owned(),
            reason: format!(
                "{c:?} is not allowed in an SSM parameter name (letters, digits and /_.- are): \
                 this ring's fleet records cannot be stored"
            ),
        });
    }
    Ok(format!("/kseal/{ring}/fleet"))
}

impl FleetStore {
    /// The acknowledgement store of the ring at `location`. No request is made.
    pub async fn open(location: &Location, aws: &AwsOptions) -> Result<Self> {
        match location {
            Location::SecretsManager { prefix, region } => {
                let path = parameter_path(prefix)?;
                let mut aws = aws.clone();
                if let Some(region) = region {
                    aws.region = Some(region.clone());
                }
                let (shared, region) = crate::asm::sdk_config(&aws).await?;
                Ok(Self {
                    backend: Backend::Ssm {
                        client: aws_sdk_ssm::Client::new(&shared),
                        path,
                        ring: prefix.clone(),
                        region,
                        endpoint: aws.endpoint_url.clone(),
                    },
                })
            }
            Location::Directory { path, .. } => Ok(Self {
                backend: Backend::Dir {
                    dir: path.join("fleet"),
                },
            }),
        }
    }

    /// `SSM Parameter Store (eu-west-1) /kseal/R/fleet` or `directory /path/fleet`.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Ssm {
                path,
                region,
                endpoint: Some(e),
                ..
            } => format!("SSM Parameter Store ({region}, endpoint {e}) {path}"),
            Backend::Ssm { path, region, .. } => format!("SSM Parameter Store ({region}) {path}"),
            Backend::Dir { dir } => format!("directory {}", dir.display()),
        }
    }

    /// Where `cluster`'s record is: its parameter name or file.
    pub fn name_of(&self, cluster: &ClusterId) -> String {
        match &self.backend {
            Backend::Ssm { path, .. } => format!("{path}/{cluster}"),
            Backend::Dir { dir } => dir.join(format!("{cluster}.json")).display().to_string(),
        }
    }

    /// Writes (replaces) `ack`'s record: one `PutParameter` (standard tier), or one file
    /// written atomically.
    pub async fn write(&self, ack: &Ack) -> Result<()> {
        let text = ack.to_json()?;
        let name = self.name_of(&ack.cluster);
        match &self.backend {
            Backend::Ssm { client, .. } => {
                client
                    .put_parameter()
                    .name(&name)
                    .value(text)
                    .r#type(ParameterType::String)
                    .tier(ParameterTier::Standard)
                    .overwrite(true)
                    .description("kseal: this cluster's acknowledgement of the fleet key ring")
                    .send()
                    .await
                    .map_err(|e| ssm_error("PutParameter", &name, e))?;
                Ok(())
            }
            Backend::Dir { dir } => {
                let (target, file) = (dir.clone(), format!("{}.json", ack.cluster));
                blocking(dir, move || write_file(&target, &file, &text)).await
            }
        }
    }

    /// Reads `cluster`'s record; `None` when there is none.
    pub async fn read(&self, cluster: &ClusterId) -> Result<Option<Ack>> {
        let name = self.name_of(cluster);
        let text = match &self.backend {
            Backend::Ssm { client, .. } => match client.get_parameter().name(&name).send().await {
                Ok(out) => out.parameter().and_then(|p| p.value()).map(str::to_owned),
                Err(e) if e.code() == Some("ParameterNotFound") => None,
                Err(e) => return Err(ssm_error("GetParameter", &name, e)),
            },
            Backend::Dir { dir } => {
                let path = dir.join(format!("{cluster}.json"));
                blocking(dir, move || read_file(&path)).await?
            }
        };
        let Some(text) = text else {
            return Ok(None);
        };
        let ack = Ack::parse(&text, &name)?;
        self.belongs(&ack, cluster.as_str())
            .map_err(|reason| Error::Malformed { what: name, reason })?;
        Ok(Some(ack))
    }

    /// Every record, sorted by name: each parsed and checked, or the reason it was not
    /// accepted. Files that are not records (temporary files, other names) are skipped.
    pub async fn list(&self) -> Result<Vec<Listed>> {
        let raw: Vec<(String, std::result::Result<String, String>)> = match &self.backend {
            Backend::Ssm { client, path, .. } => {
                let mut found = Vec::new();
                let mut token: Option<String> = None;
                loop {
                    let out = client
                        .get_parameters_by_path()
                        .path(path)
                        .recursive(false)
                        .max_results(10)
                        .set_next_token(token.take())
                        .send()
                        .await
                        .map_err(|e| ssm_error("GetParametersByPath", path, e))?;
                    for parameter in out.parameters() {
                        let Some(full) = parameter.name() else {
                            continue;
                        };
                        let name = full.rsplit('/').next().unwrap_or(full).to_owned();
                        let value = parameter
                            .value()
                            .map(str::to_owned)
                            .ok_or_else(|| "the parameter has no value".to_owned());
                        found.push((name, value));
                    }
                    if found.len() > MAX_CLUSTERS {
                        return Err(too_many(path));
                    }
                    match out.next_token() {
                        Some(next) if !next.is_empty() => token = Some(next.to_owned()),
                        _ => break,
                    }
                }
                found
            }
            Backend::Dir { dir } => {
                let scan = dir.clone();
                blocking(dir, move || list_dir(&scan)).await?
            }
        };
        let mut listed: Vec<Listed> = raw
            .into_iter()
            .map(|(name, text)| {
                let what = match &self.backend {
                    Backend::Ssm { path, .. } => format!("{path}/{name}"),
                    Backend::Dir { dir } => dir.join(format!("{name}.json")).display().to_string(),
                };
                let ack = text.and_then(|text| {
                    let ack = Ack::parse(&text, &what).map_err(|e| e.to_string())?;
                    self.belongs(&ack, &name)
                        .map_err(|reason| format!("{what} is malformed: {reason}"))?;
                    Ok(ack)
                });
                Listed { name, ack }
            })
            .collect();
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(listed)
    }

    /// A record belongs where it was found: under its own cluster id, and (in Parameter
    /// Store) naming this ring. A directory ring may hold a copy of any ring.
    fn belongs(&self, ack: &Ack, name: &str) -> std::result::Result<(), String> {
        if ack.cluster.as_str() != name {
            return Err(format!(
                "it names cluster {} but is stored as {name}",
                ack.cluster
            ));
        }
        if let Backend::Ssm { ring, .. } = &self.backend
            && ack.ring != *ring
        {
            return Err(format!("it names ring {:?}, not {ring:?}", ack.ring));
        }
        Ok(())
    }
}

/// An error with its causes, `: `-separated (a listing keeps going past one bad record).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn too_many(what: &str) -> Error {
    Error::Refused(format!(
        "more than {MAX_CLUSTERS} acknowledgement records under {what}: refusing to read them all"
    ))
}

/// Maps an SSM error to the store's errors (as [`crate::asm`] does for Secrets Manager).
fn ssm_error<E>(
    operation: &'static str,
    what: &str,
    error: SdkError<E, aws_sdk_ssm::config::http::HttpResponse>,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = error.raw_response().map(|r| r.status().as_u16());
    let code = error
        .code()
        .map(str::to_owned)
        .or_else(|| matches!(status, Some(401 | 403)).then(|| "AccessDenied".to_owned()));
    let chain = DisplayErrorContext(&error).to_string().to_ascii_lowercase();
    let what = what.to_owned();
    let source: crate::BoxError = Box::new(error);
    match code.as_deref() {
        Some(
            "AccessDeniedException"
            | "AccessDenied"
            | "UnrecognizedClientException"
            | "InvalidSignatureException"
            | "ExpiredTokenException"
            | "InvalidClientTokenId",
        ) => Error::AccessDenied {
            operation,
            what,
            source,
        },
        None if chain.contains("credential") => Error::NoCredentials(source),
        _ => Error::Service {
            operation,
            what,
            source,
        },
    }
}

/// Runs a file operation off the async runtime, bounded by [`DIR_TIMEOUT`].
async fn blocking<T, F>(dir: &Path, op: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let timed_out = |source| Error::Io {
        action: "get an answer in time from",
        path: dir.to_owned(),
        source,
    };
    match tokio::time::timeout(DIR_TIMEOUT, tokio::task::spawn_blocking(op)).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(timed_out(std::io::Error::other(join.to_string()))),
        Err(_) => Err(timed_out(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {} s", DIR_TIMEOUT.as_secs()),
        ))),
    }
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Writes `dir/file` atomically (a temporary file beside it, then a rename), mode 0644.
fn write_file(dir: &Path, file: &str, text: &str) -> Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o755);
    }
    builder.create(dir).map_err(io_err("create", dir))?;
    let mut temp = tempfile::Builder::new();
    temp.prefix(".tmp-");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        temp.permissions(std::fs::Permissions::from_mode(0o644));
    }
    let mut tmp = temp
        .tempfile_in(dir)
        .map_err(io_err("create a temporary file in", dir))?;
    tmp.write_all(text.as_bytes())
        .map_err(io_err("write", tmp.path()))?;
    tmp.as_file()
        .sync_all()
        .map_err(io_err("sync", tmp.path()))?;
    let path = dir.join(file);
    tmp.persist(&path)
        .map_err(|e| io_err("rename into place", &path)(e.error))?;
    Ok(())
}

/// Reads a record file: `None` when absent; refused when it is not a regular file (a link, a
/// FIFO) or larger than [`MAX_ACK_BYTES`].
fn read_file(path: &Path) -> Result<Option<String>> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("inspect", path)(e)),
    };
    if !meta.is_file() {
        return Err(Error::Malformed {
            what: path.display().to_string(),
            reason: "not a regular file".into(),
        });
    }
    if meta.len() > MAX_ACK_BYTES as u64 {
        return Err(Error::Malformed {
            what: path.display().to_string(),
            reason: format!(
                "{} bytes, more than the {MAX_ACK_BYTES} a record may hold",
                meta.len()
            ),
        });
    }
    let file = std::fs::File::open(path).map_err(io_err("open", path))?;
    let mut text = String::new();
    file.take(MAX_ACK_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(io_err("read", path))?;
    Ok(Some(text))
}

/// The records of a `fleet/` directory (none when it does not exist): `<cluster-id>.json`
/// names only, each read or the reason it could not be.
fn list_dir(dir: &Path) -> Result<Vec<(String, std::result::Result<String, String>)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list", dir)(e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err("list", dir))?;
        let file_name = entry.file_name();
        let Some(name) = file_name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .filter(|n| ClusterId::parse(n).is_ok())
        else {
            continue;
        };
        let read = match read_file(&entry.path()) {
            Ok(Some(text)) => Ok(text),
            Ok(None) => continue,
            Err(e) => Err(chain(&e)),
        };
        found.push((name.to_owned(), read));
        if found.len() > MAX_CLUSTERS {
            return Err(too_many(&dir.display().to_string()));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kid(c: char) -> Kid {
        Kid::parse(&c.to_string().repeat(64)).unwrap()
    }

    fn ack(cluster: &str) -> Ack {
        Ack {
            schema: ACK_SCHEMA,
            cluster: ClusterId::parse(cluster).unwrap(),
            ring: "kseal/fleet".into(),
            anchor: Some(kid('a')),
            index_version: 7,
            held: vec![kid('a'), kid('b')],
            sealing: Some(kid('b')),
            objects: BTreeMap::from([(kid('a'), 3), (kid('b'), 40)]),
            unattributed: 1,
            controller: "0.1.0".into(),
            heartbeat_seconds: 86_400,
            synced: Some(jiff::Timestamp::from_second(1_800_000_000).unwrap()),
            written: jiff::Timestamp::from_second(1_800_000_100).unwrap(),
        }
    }

    #[test]
    fn cluster_ids_are_checked() {
        for good in [
            "a",
            "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
            "prod.eu_west-1",
        ] {
            assert_eq!(ClusterId::parse(good).unwrap().as_str(), good);
        }
        for (bad, why) in [
            ("", "empty"),
            (".hidden", "start with"),
            ("-x", "start with"),
            ("a/b", "'/' is not allowed"),
            ("a b", "' ' is not allowed"),
            ("ünï", "start with"),
        ] {
            let e = ClusterId::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("invalid cluster id") && e.contains(why),
                "{bad}: {e}"
            );
        }
        let long = "a".repeat(129);
        assert!(
            ClusterId::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("longer than 128")
        );
    }

    #[test]
    fn a_record_round_trips_and_is_small() {
        let a = ack("c1");
        let text = a.to_json().unwrap();
        assert!(text.len() < 1024, "{} bytes", text.len());
        assert!(text.contains("\"indexVersion\":7") && text.contains("\"heartbeatSeconds\""));
        assert_eq!(Ack::parse(&text, "r").unwrap(), a);
        // Even a ring of 24 keys, each opening objects, fits a standard parameter.
        let mut big = ack("c1");
        big.held = (0..24u8)
            .map(|i| Kid::parse(&format!("{i:02x}").repeat(32)).unwrap())
            .collect();
        big.objects = big.held.iter().map(|k| (k.clone(), 1_000_000)).collect();
        assert!(big.to_json().unwrap().len() <= MAX_ACK_BYTES);
    }

    #[test]
    fn readers_refuse_bad_shapes_without_quoting_them() {
        let what = "/kseal/r/fleet/c1";
        let cases: Vec<(String, &str)> =
            vec![
            ("not json sekrit".into(), "JSON syntax error at line 1"),
            (
                r#"{"schema":1,"cluster":"c1","ring":"r","controller":"v","heartbeatSeconds":1}"#
                    .into(),
                "field error",
            ),
            (
                ack("c1").to_json().unwrap().replace("\"schema\":1", "\"schema\":9"),
                "schema 9",
            ),
            (
                ack("c1").to_json().unwrap().replace("0.1.0", "\\u001b[31mred"),
                "control characters",
            ),
            (
                ack("c1")
                    .to_json()
                    .unwrap()
                    .replace("\"heartbeatSeconds\":86400", "\"heartbeatSeconds\":0"),
                "heartbeatSeconds",
            ),
            (format!("{{\"pad\":\"{}\"}}", "x".repeat(5000)), "more than the 4096"),
        ];
        for (text, expected) in cases {
            let e = Ack::parse(&text, what).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{what} is malformed: ")) && e.contains(expected),
                "{expected}: {e}"
            );
            assert!(!e.contains("sekrit") && !e.contains("xxxx"), "{e}");
        }
        let mut many = ack("c1");
        many.held = (0..40u8)
            .map(|i| Kid::parse(&format!("{i:02x}").repeat(32)).unwrap())
            .collect();
        assert!(
            many.to_json()
                .unwrap_err()
                .to_string()
                .contains("more than 32 kids")
        );
    }

    #[test]
    fn parameter_paths_follow_the_ring_and_refuse_what_ssm_cannot_name() {
        assert_eq!(
            parameter_path("kseal/fleet").unwrap(),
            "/kseal/kseal/fleet/fleet"
        );
        let e = parameter_path("team+a/ring").unwrap_err().to_string();
        assert!(
            e.contains("'+' is not allowed in an SSM parameter name"),
            "{e}"
        );
    }

    fn index_with(keys: &[(char, i64)], active: char, version: u64) -> crate::Index {
        let mut index = crate::Index::empty("kseal/fleet", std::time::SystemTime::now());
        index.version = version;
        index.active = Some(kid(active));
        let far = jiff::Timestamp::from_second(4_000_000_000).unwrap();
        index.keys = keys
            .iter()
            .map(|(c, added)| crate::IndexEntry {
                kid: kid(*c),
                fingerprint: String::new(),
                added: jiff::Timestamp::from_second(*added).unwrap(),
                not_before: jiff::Timestamp::UNIX_EPOCH,
                not_after: far,
                bits: 2048,
                crt: String::new(),
            })
            .collect();
        index
    }

    #[test]
    fn standing_tells_current_behind_and_silent_apart() {
        let now = jiff::Timestamp::from_second(1_800_000_200).unwrap();
        // a seals, b is the previous key, c is pending.
        let index = index_with(
            &[
                ('b', 1_700_000_000),
                ('a', 1_750_000_000),
                ('c', 1_790_000_000),
            ],
            'a',
            7,
        );
        assert_eq!(pending_keys(&index, now), [kid('c')]);
        let mut good = ack("c1");
        good.held = vec![kid('a'), kid('b'), kid('c')];
        good.sealing = Some(kid('a'));
        let s = assess(&good, &index, Some(&kid('a')), now);
        assert!(s.is_current() && s.current && s.holds_pending, "{s:?}");
        assert!(s.reasons.is_empty());

        let mut old = good.clone();
        old.index_version = 6;
        old.held = vec![kid('a'), kid('b')];
        let s = assess(&old, &index, Some(&kid('a')), now);
        assert!(
            s.behind && !s.current && !s.holds_pending && s.holds_active,
            "{s:?}"
        );
        assert_eq!(
            s.reasons,
            [
                "holds index v6, the ring is at v7",
                "misses 1 pending key(s)"
            ]
        );

        let mut other = good.clone();
        other.anchor = Some(kid('f'));
        other.sealing = Some(kid('b'));
        let s = assess(&other, &index, Some(&kid('a')), now);
        assert_eq!(
            s.reasons,
            ["trusts another anchor", "seals with another key"]
        );

        let mut quiet = good.clone();
        quiet.heartbeat_seconds = 60;
        quiet.written = jiff::Timestamp::from_second(1_800_000_200 - 121).unwrap();
        let s = assess(&quiet, &index, None, now);
        assert!(s.silent && !s.behind && !s.is_current(), "{s:?}");
        assert_eq!(s.reasons, ["silent for 2m (heartbeat 60s)"]);
        quiet.written = jiff::Timestamp::from_second(1_800_000_200 - 119).unwrap();
        assert!(assess(&quiet, &index, None, now).is_current());
    }

    #[test]
    fn acknowledging_needs_the_kid_the_version_and_the_same_anchor() {
        let a = ack("c1");
        assert!(acknowledges(&a, &kid('b'), 7, Some(&kid('a'))));
        assert!(acknowledges(&a, &kid('b'), 6, None));
        assert!(!acknowledges(&a, &kid('c'), 7, None), "a kid not held");
        assert!(!acknowledges(&a, &kid('b'), 8, None), "an older index");
        assert!(
            !acknowledges(&a, &kid('b'), 7, Some(&kid('f'))),
            "another anchor"
        );
        let written = a.written.as_second();
        let at = |s: i64| jiff::Timestamp::from_second(written + s).unwrap();
        assert_eq!(silence(&a, at(2 * 86_400)), None);
        assert_eq!(silence(&a, at(2 * 86_400 + 1)), Some(2 * 86_400 + 1));
        assert_eq!(
            silence(&a, at(-5)),
            None,
            "a record from the future is not silent"
        );
    }

    #[tokio::test]
    async fn a_directory_store_writes_reads_and_lists_records() {
        let tmp = tempfile::tempdir().unwrap();
        let location = Location::Directory {
            path: tmp.path().join("ring"),
            insecure_perms: false,
        };
        let store = FleetStore::open(&location, &AwsOptions::default())
            .await
            .unwrap();
        assert!(store.list().await.unwrap().is_empty(), "no fleet/ yet");
        let c1 = ClusterId::parse("c1").unwrap();
        assert_eq!(store.read(&c1).await.unwrap(), None);
        store.write(&ack("c1")).await.unwrap();
        let mut second = ack("c2");
        second.index_version = 6;
        store.write(&second).await.unwrap();
        store.write(&ack("c1")).await.unwrap();
        assert_eq!(store.read(&c1).await.unwrap(), Some(ack("c1")));
        let dir = tmp.path().join("ring/fleet");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.join("c1.json"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o644);
        }
        // A record filed under another cluster's name, a broken one, and files that are no
        // records at all.
        std::fs::write(dir.join("c3.json"), ack("c1").to_json().unwrap()).unwrap();
        std::fs::write(dir.join("c4.json"), "{").unwrap();
        std::fs::write(dir.join(".tmp-abc"), "{").unwrap();
        std::fs::write(dir.join("notes.txt"), "hello").unwrap();
        let listed = store.list().await.unwrap();
        let names: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["c1", "c2", "c3", "c4"]);
        assert_eq!(listed[0].ack, Ok(ack("c1")));
        assert_eq!(listed[1].ack.as_ref().unwrap().index_version, 6);
        let c3 = listed[2].ack.as_ref().unwrap_err();
        assert!(c3.contains("names cluster c1 but is stored as c3"), "{c3}");
        let c4 = listed[3].ack.as_ref().unwrap_err();
        assert!(c4.contains("c4.json is malformed"), "{c4}");
        // A record that is a link is refused, not followed.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.join("c1.json"), dir.join("c5.json")).unwrap();
            let e = store
                .read(&ClusterId::parse("c5").unwrap())
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
    }
}
