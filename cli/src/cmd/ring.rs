//! `kseal keys push|activate|rotate|list|export-cert|import|retire`: the fleet key ring in AWS
//! Secrets Manager (or a directory), through `kseal-keystore`.
//!
//! Writes print what they did on stderr; `list` and `export-cert` print data on stdout. No
//! command prints a private key. Questions are asked only on a terminal without `--yes`.

use std::future::Future;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result, bail};
use kseal_api::SealedSecret;
use kseal_keys::{KeyPair, KeyRing};
use kseal_keystore::{
    ActivateOutcome, AwsOptions, Index, IndexEntry, KeyEntry, Kid, Location, PushOutcome, Put,
    Ring, Snapshot, Store, Trust,
};

use crate::args::{
    ActivateArgs, ExportCertArgs, ImportArgs, ListArgs, ListOutput, PushArgs, RetireArgs, RingArgs,
    RingWriteArgs, RotateArgs,
};
use crate::cmd::keys::key_spec;
use crate::cmd::recovery::open_items;
use crate::cmd::unseal::{LoadedKey, Marker, read_key_pairs, read_keys, sealing_key};
use crate::manifest::write_atomic;
use crate::output;
use crate::text::count;

/// Runs `future` on a single-threaded runtime (only ring commands start one, so sealing with
/// a local certificate pays nothing for it).
pub(crate) fn block_on<F: Future>(future: F) -> Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let output = runtime.block_on(future);
    // A directory ring's file operation that timed out may still block its thread: the
    // command has its answer, so it does not wait for that thread.
    runtime.shutdown_background();
    Ok(output)
}

fn aws_options(args: &RingArgs, write: Option<&RingWriteArgs>) -> AwsOptions {
    AwsOptions {
        region: args.region.clone(),
        profile: args.aws_profile.clone(),
        endpoint_url: args.endpoint_url.clone(),
        assume_role: args.assume_role.clone(),
        kms_key_id: write.and_then(|w| w.kms_key_id.clone()),
        replica_regions: write.map(|w| w.replica_regions.clone()).unwrap_or_default(),
    }
}

/// Opens the ring `args` names, checking its index against the anchor pinned by
/// `--ring-anchor` or the nearest `.kseal.yaml`; without a pin, any signed history is
/// accepted and an unsigned (older) index is read, but never written on.
pub(crate) async fn open(args: &RingArgs, write: Option<&RingWriteArgs>) -> Result<Ring> {
    let mut location = Location::parse(&args.ring)?;
    if let Location::Directory { insecure_perms, .. } = &mut location {
        *insecure_perms |= args.insecure_perms;
    }
    let pin = crate::project::pin_for(&location, args.ring_anchor.as_deref())?;
    let trust = match pin {
        Some(pin) => Trust::anchored(pin.anchor).min_version(pin.version),
        None => Trust::first_use().allow_unsigned(true),
    };
    Ok(open_with(args, write, &location).await?.with_trust(trust))
}

/// Opens the ring `args` names with no trust set yet ([`Ring::with_trust`]).
pub(crate) async fn open_with(
    args: &RingArgs,
    write: Option<&RingWriteArgs>,
    location: &Location,
) -> Result<Ring> {
    Ring::open(location, &aws_options(args, write))
        .await
        .with_context(|| format!("failed to open key ring `{location}`"))
}

pub(crate) fn ring_label(ring: &Ring) -> String {
    match ring.store() {
        // A directory ring is named by its directory, whatever its index calls it.
        Store::Directory(_) => format!("in {}", ring.store().describe()),
        Store::SecretsManager(_) => format!("`{}` in {}", ring.name(), ring.store().describe()),
    }
}

/// `--ring` as the user gave it, quoted for a POSIX shell when needed (`?` of `?region=` is a
/// glob character), for the commands that messages suggest.
pub(crate) fn ring_arg(args: &RingArgs) -> String {
    let text = args.ring.as_str();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_+=.@:,-".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// Reads the ring's index, with messages that name the ring: a ring that does not exist (a
/// wrong name or region, more often than not) and a store that cannot be read.
pub(crate) async fn read_index(ring: &Ring) -> Result<Snapshot> {
    match ring.snapshot(None).await {
        Ok(Some(snapshot)) => Ok(snapshot),
        Ok(None) => bail!(
            "key ring {} does not exist: there is no {} (a wrong {}? `kseal keys push` creates \
             a ring)",
            ring_label(ring),
            ring.index_name(),
            match ring.store() {
                Store::Directory(_) => "directory",
                Store::SecretsManager(_) => "name or region",
            }
        ),
        Err(e) => {
            Err(anyhow::Error::from(e)
                .context(format!("failed to read key ring {}", ring_label(ring))))
        }
    }
}

fn when(t: SystemTime) -> String {
    crate::cmd::seal::utc_civil(t, "%Y-%m-%d %H:%M UTC")
}

fn ts(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M UTC").to_string()
}

fn minutes(d: Duration) -> String {
    let m = d.as_secs().div_ceil(60);
    match m {
        m if m < 120 => count(m, "minute"),
        m => format!("{} {}", count(m / 60, "hour"), count(m % 60, "minute")),
    }
}

/// Asks `question` on a terminal unless `yes`; non-interactive runs never ask.
pub(crate) fn confirm(question: &str, yes: bool) -> Result<()> {
    if yes || !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Ok(());
    }
    eprint!("{question} [y/N] ");
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("failed to read the answer")?;
    if matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        bail!("aborted: nothing was changed")
    }
}

fn generate(spec: &crate::args::KeySpecArgs) -> Result<KeyPair> {
    let (size, options) = key_spec(spec)?;
    eprintln!(
        "generating an RSA-{} key pair (a second or two)…",
        size.bits()
    );
    KeyPair::generate(size, &options).context("failed to generate a key pair")
}

fn report_push(ring: &Ring, outcome: &PushOutcome) {
    let stored = match outcome.stored {
        Put::Created => format!("stored {}", ring.key_name(&outcome.kid)),
        Put::Existed => format!("{} already held it", ring.key_name(&outcome.kid)),
    };
    let indexed = if outcome.indexed {
        "added to the index"
    } else {
        "already in the index"
    };
    eprintln!(
        "key {} ({}): {stored}; {indexed}",
        outcome.kid.short(),
        outcome.fingerprint
    );
    if outcome.activated {
        eprintln!(
            "key {} is the ring's first key: it seals from now on",
            outcome.kid.short()
        );
    }
}

async fn mirror(ring: &Ring, write: &RingWriteArgs) -> Result<()> {
    if let Some(name) = &write.mirror_current_to {
        let kid = ring
            .mirror_active_to(name)
            .await
            .with_context(|| format!("failed to keep `{name}` in step with the active key"))?;
        eprintln!(
            "`{name}` holds the active key {} (reference sample format)",
            kid.short()
        );
    }
    Ok(())
}

/// The key of a `{"crt","key"}` JSON file: the reference sample's secret as `aws
/// secretsmanager get-secret-value --query SecretString --output text` prints it (raw newlines
/// inside the strings accepted), or the JSON string `--output json` prints. `None` when the
/// file is something else, e.g. a key Secret as `kubectl get secret -o json` prints it.
fn read_json_pair(path: &Path) -> Result<Option<KeyPair>> {
    let text = zeroize::Zeroizing::new(
        fs_err::read_to_string(path).context("failed to read a private key file")?,
    );
    let mut object = zeroize::Zeroizing::new(text.trim().to_owned());
    if object.starts_with('"') {
        match serde_json::from_str::<String>(&object) {
            Ok(inner) => {
                let inner = zeroize::Zeroizing::new(inner);
                object = zeroize::Zeroizing::new(inner.trim().to_owned());
            }
            Err(_) => return Ok(None),
        }
    }
    if !object.starts_with('{') {
        return Ok(None);
    }
    let what = format!("`{}`", path.display());
    match KeyEntry::parse(&object, &what) {
        Ok(entry) => Ok(Some(entry.to_pair(&what)?)),
        // A manifest (`"kind"`) or other JSON: read as key Secrets, which explains itself.
        Err(_) if object.contains("\"kind\"") || !object.contains("crt\"") => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Key pairs of a file or a key directory (`tls.key` + `tls.crt`).
fn read_pairs(path: &Path) -> Result<Vec<KeyPair>> {
    Ok(read_loaded(path)?.into_iter().map(|k| k.pair).collect())
}

/// The keys of `path` with what a backup says of them (the `kseal.dev/active` marker of a
/// controller's mirror Secrets), for import to keep the ring's sealing key.
fn read_loaded(path: &Path) -> Result<Vec<LoadedKey>> {
    let plain = |pair: KeyPair| LoadedKey {
        pair,
        marker: Marker::Unmarked,
        origin: format!("`{}`", path.display()),
    };
    let pairs = if path.is_dir() {
        let key = path.join("tls.key");
        if !key.is_file() {
            bail!(
                "`{}` has no tls.key (expected a directory as `kseal keys generate --out-dir` writes)",
                path.display()
            );
        }
        read_key_pairs(&key)?.into_iter().map(plain).collect()
    } else if let Some(pair) = read_json_pair(path)? {
        vec![plain(pair)]
    } else {
        read_keys(path)?
    };
    for key in &pairs {
        if key.pair.certificate().common_name() == Some("kseal-recovery") {
            bail!(
                "`{}` holds a private key without its certificate: put the certificate after the \
                 key in the same file, or beside it as tls.crt",
                path.display()
            );
        }
    }
    Ok(pairs)
}

/// Pushes `pairs`, newest first, so the newest becomes active when the ring was empty (as it
/// sealed in the cluster it came from).
async fn push_all(ring: &Ring, pairs: Vec<KeyPair>) -> Result<Vec<PushOutcome>> {
    push_all_first(ring, pairs, None).await
}

/// [`push_all`], but `first` (the key that sealed where the keys come from) goes first, so
/// it is the one that becomes active in an empty ring.
async fn push_all_first(
    ring: &Ring,
    mut pairs: Vec<KeyPair>,
    first: Option<&kseal_keys::KeyId>,
) -> Result<Vec<PushOutcome>> {
    pairs.sort_by_key(|p| (Some(p.id()) != first, std::cmp::Reverse(p.order_time())));
    let mut outcomes: Vec<PushOutcome> = Vec::new();
    for pair in &pairs {
        if outcomes.iter().any(|o| o.fingerprint == pair.id().as_str()) {
            continue;
        }
        let outcome = ring
            .push(pair)
            .await
            .with_context(|| format!("failed to push key {}", pair.id()))?;
        report_push(ring, &outcome);
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// Says how to activate the newest key just pushed (`outcomes` are newest first), when it does
/// not seal yet. Older keys pushed with it only open what they sealed: no hint for them.
fn hint_activation(ring: &str, outcomes: &[PushOutcome], delay: Duration) {
    if let Some(newest) = outcomes.first().filter(|o| o.indexed && !o.activated) {
        eprintln!(
            "not sealing yet: once every controller has fetched it (their interval, {} by \
             default), run `kseal keys activate --ring {ring} {}`",
            minutes(delay),
            newest.kid.short()
        );
    }
}

/// The recovery window of a key secret that `push --if-empty` stored but lost the race to
/// index: Secrets Manager's shortest.
const ORPHAN_RECOVERY_DAYS: u32 = 7;

pub(crate) fn push(args: PushArgs) -> Result<()> {
    args.never_asks.warn("kseal keys push");
    // Files are read before anything is written, so a bad one changes nothing.
    let mut from = Vec::new();
    for path in &args.from {
        from.extend(read_pairs(path)?);
    }
    block_on(async {
        let ring = open(&args.ring, Some(&args.write)).await?;
        if args.if_empty {
            // Checked before generating: a seeding Job that runs again does no work at all.
            let keys = ring
                .snapshot(None)
                .await
                .with_context(|| format!("failed to read key ring {}", ring_label(&ring)))?
                .map_or(0, |s| s.index.keys.len());
            if keys > 0 {
                eprintln!(
                    "key ring {} already has {}: nothing to do (--if-empty)",
                    ring_label(&ring),
                    count(keys, "key")
                );
                return mirror(&ring, &args.write).await;
            }
        }
        eprintln!("pushing to key ring {}", ring_label(&ring));
        if args.if_empty {
            // Checked again atomically with the write: of several seeders racing, one key
            // enters the ring and the others leave it as they found it.
            let pair = generate(&args.spec)?;
            let outcome = ring
                .push_if_empty(&pair, ORPHAN_RECOVERY_DAYS)
                .await
                .with_context(|| format!("failed to push key {}", pair.id()))?;
            match outcome {
                Some(outcome) => report_push(&ring, &outcome),
                None => eprintln!(
                    "key ring {} received a key from another writer meanwhile: nothing to do \
                     (--if-empty); the key generated here was never indexed, and {}",
                    ring_label(&ring),
                    match ring.store() {
                        Store::Directory(_) => "its files moved to retired/",
                        Store::SecretsManager(_) => "its secret is scheduled for deletion",
                    }
                ),
            }
            return mirror(&ring, &args.write).await;
        }
        let pairs = if args.from.is_empty() {
            vec![generate(&args.spec)?]
        } else {
            from
        };
        let outcomes = push_all(&ring, pairs).await?;
        hint_activation(
            &ring_arg(&args.ring),
            &outcomes,
            kseal_keystore::DEFAULT_ACTIVATION_DELAY,
        );
        mirror(&ring, &args.write).await
    })?
}

/// Activates `key`, waiting for the delay when `wait`; returns what happened, for the caller
/// to print (`rotate` first checks that no other activation followed).
async fn activate_key(
    ring: &Ring,
    ring_text: &str,
    key: &str,
    delay: Duration,
    wait: bool,
    expected: Option<&Option<Kid>>,
) -> Result<String> {
    loop {
        let outcome = ring
            .activate_if(key, delay, expected)
            .await
            .with_context(|| format!("failed to activate key {key}"))?;
        match outcome {
            ActivateOutcome::Activated { kid, previous } => {
                return Ok(match previous {
                    Some(p) => format!(
                        "key {} seals from now on (was {}); controllers serve its certificate \
                         after their next poll, and SealedSecrets sealed with older keys keep opening",
                        kid.short(),
                        p.short()
                    ),
                    None => format!("key {} seals from now on", kid.short()),
                });
            }
            ActivateOutcome::AlreadyActive(kid) => {
                return Ok(format!("key {} already seals: nothing to do", kid.short()));
            }
            ActivateOutcome::Superseded { kid, active } => {
                bail!(
                    "another rotation won: key {} was activated while this one waited, so key {} \
                     was not activated; it stays in the ring (it opens what it sealed, nothing \
                     yet). Activate it later if it should seal: `kseal keys activate --ring \
                     {ring_text} {}`",
                    active.as_ref().map_or("(none)", Kid::short),
                    kid.short(),
                    kid.short()
                );
            }
            ActivateOutcome::TooYoung { kid, ready_at } => {
                let left = ready_at
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                if !wait {
                    bail!(
                        "key {} entered the ring less than {} ago, so some controllers may not \
                         have it yet: activate it after {} (in {}), pass --wait to wait, or \
                         --now if every cluster already has it",
                        kid.short(),
                        minutes(delay),
                        when(ready_at),
                        minutes(left)
                    );
                }
                eprintln!(
                    "waiting {} (until {}) so every controller fetches key {} before it seals; \
                     interrupting is safe: run `kseal keys activate --ring {ring_text} {}` later",
                    minutes(left),
                    when(ready_at),
                    kid.short(),
                    kid.short()
                );
                tokio::time::sleep(left.min(Duration::from_secs(300)) + Duration::from_secs(1))
                    .await;
            }
        }
    }
}

pub(crate) fn activate(args: ActivateArgs) -> Result<()> {
    let delay = args.delay.effective();
    block_on(async {
        let ring = open(&args.ring, Some(&args.write)).await?;
        // A clear message for a ring that does not exist (rather than "no key … in the ring").
        read_index(&ring).await?;
        confirm(
            &format!(
                "Seal with key {} in key ring {} from now on?",
                args.key,
                ring_label(&ring)
            ),
            args.confirm.yes,
        )?;
        let done = activate_key(
            &ring,
            &ring_arg(&args.ring),
            &args.key,
            delay,
            args.wait,
            None,
        )
        .await?;
        eprintln!("{done}");
        mirror(&ring, &args.write).await
    })?
}

pub(crate) fn rotate(args: RotateArgs) -> Result<()> {
    let delay = args.delay.effective();
    block_on(async {
        let ring = open(&args.ring, Some(&args.write)).await?;
        // Rotating a ring that does not exist is a mistyped name, not a new ring.
        let before = read_index(&ring).await?.index.active;
        confirm(
            &format!(
                "Generate a new sealing key for key ring {}?",
                ring_label(&ring)
            ),
            args.confirm.yes,
        )?;
        let pair = generate(&args.spec)?;
        let outcomes = push_all(&ring, vec![pair]).await?;
        let Some(outcome) = outcomes.first() else {
            bail!("nothing was pushed");
        };
        if !outcome.activated {
            if args.no_wait {
                hint_activation(&ring_arg(&args.ring), &outcomes, delay);
                return mirror(&ring, &args.write).await;
            }
            let done = activate_key(
                &ring,
                &ring_arg(&args.ring),
                outcome.kid.as_str(),
                delay,
                true,
                Some(&before),
            )
            .await;
            let done = match done {
                Ok(done) => done,
                Err(e) => {
                    mirror(&ring, &args.write).await?;
                    return Err(e);
                }
            };
            #[cfg(debug_assertions)]
            pause_for_tests().await;
            // Activations are last-writer-wins: a rotation racing this one may have activated
            // its own key just after. Only the index read back says which key seals.
            let after = read_index(&ring).await?;
            if let Some(lost) = lost_race(&after.index, &outcome.kid, &ring_arg(&args.ring)) {
                mirror(&ring, &args.write).await?;
                bail!("{lost}");
            }
            eprintln!("{done}");
        }
        mirror(&ring, &args.write).await
    })?
}

/// What `rotate` says when, read back after activating `ours`, the index names another key:
/// another rotation (or `keys activate`) won. `None` when `ours` seals.
fn lost_race(index: &Index, ours: &Kid, ring: &str) -> Option<String> {
    if index.active.as_ref() == Some(ours) {
        return None;
    }
    let winner = match &index.active {
        Some(kid) => format!("key {} seals", kid.short()),
        None => "no key seals".to_owned(),
    };
    Some(if index.entry(ours).is_some() {
        format!(
            "another rotation won: {winner}, your key {} is in the ring but not active (another \
             key was activated right after it); keep it in the ring, since whatever was sealed \
             in that moment needs it, and activate it later if it should seal: `kseal keys \
             activate --ring {ring} {}`",
            ours.short(),
            ours.short()
        )
    } else {
        format!(
            "another rotation won: {winner}, and your key {} is no longer in the ring",
            ours.short()
        )
    })
}

/// Test seam of debug builds (release builds do not have it): with `KSEAL_TEST_ROTATE_PAUSE`
/// set to a path, `rotate` creates `<path>.reached` once its key is active and waits (up to a
/// minute) for `<path>` to exist before reading the index back, so a test can activate another
/// key in between: a lost race, deterministically.
#[cfg(debug_assertions)]
async fn pause_for_tests() {
    let Some(path) = std::env::var_os("KSEAL_TEST_ROTATE_PAUSE").map(PathBuf::from) else {
        return;
    };
    let mut reached = path.clone().into_os_string();
    reached.push(".reached");
    if fs_err::write(&reached, b"").is_err() {
        return;
    }
    for _ in 0..600 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a key of the ring is doing at `now`, as `keys list` shows it (table and JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyStatus {
    /// The index's active key: it seals.
    Sealing,
    /// Pushed after the active key and not active: it may be activated once every controller
    /// has had the activation delay to fetch it, at `until`.
    Pending { until: SystemTime },
    /// Pushed after the active key, not active, older than the activation delay.
    Ready,
    /// Added before the active key and not active: it sealed before the active key did (the
    /// index keeps no activation history, so this is inferred from the order), and opens what
    /// it sealed.
    Previous,
    /// Not active and past its notAfter: it opens only, and activating it is refused.
    Expired,
}

impl KeyStatus {
    fn of(index: &Index, entry: &IndexEntry, now: SystemTime, delay: Duration) -> Self {
        if index.active.as_ref() == Some(&entry.kid) {
            return KeyStatus::Sealing;
        }
        if entry.is_expired_at(now) {
            return KeyStatus::Expired;
        }
        if let Some(active) = index.active_entry()
            && entry.added < active.added
        {
            return KeyStatus::Previous;
        }
        let until = SystemTime::from(entry.added) + delay;
        if until > now {
            KeyStatus::Pending { until }
        } else {
            KeyStatus::Ready
        }
    }

    /// The `status` field of `keys list -o json`.
    fn word(self) -> &'static str {
        match self {
            KeyStatus::Sealing => "sealing",
            KeyStatus::Pending { .. } => "pending",
            KeyStatus::Ready => "ready",
            KeyStatus::Previous => "previous",
            KeyStatus::Expired => "expired",
        }
    }

    /// The STATUS column of `keys list`.
    fn describe(self, entry: &IndexEntry, now: SystemTime) -> String {
        match self {
            KeyStatus::Sealing if entry.is_expired_at(now) => "sealing (EXPIRED: rotate)".into(),
            KeyStatus::Sealing => "sealing".into(),
            KeyStatus::Pending { until } => format!("pending until {}", when(until)),
            KeyStatus::Ready => "ready to activate".into(),
            KeyStatus::Previous => "previous (opens only)".into(),
            KeyStatus::Expired => "expired (opens only)".into(),
        }
    }
}

/// The index as JSON, each key with its `status` (and `pendingUntil` for a pending key).
fn list_json(index: &Index, now: SystemTime, delay: Duration) -> Result<String> {
    let mut value = serde_json::to_value(index).context("failed to encode the index")?;
    if let Some(keys) = value.get_mut("keys").and_then(|k| k.as_array_mut()) {
        for (json, entry) in keys.iter_mut().zip(&index.keys) {
            let status = KeyStatus::of(index, entry, now, delay);
            if let Some(object) = json.as_object_mut() {
                object.insert("status".into(), status.word().into());
                if let KeyStatus::Pending { until } = status {
                    let until = jiff::Timestamp::try_from(until)
                        .context("a pending key's activation time is out of range")?;
                    object.insert("pendingUntil".into(), until.to_string().into());
                }
            }
        }
    }
    let mut text = serde_json::to_string_pretty(&value).context("failed to encode the index")?;
    text.push('\n');
    Ok(text)
}

pub(crate) fn list(args: ListArgs) -> Result<()> {
    let snapshot = block_on(async {
        let ring = open(&args.ring, None).await?;
        read_index(&ring).await
    })??;
    if snapshot.verified == kseal_keystore::Verified::Unsigned {
        eprintln!(
            "note: this ring's index is not signed (written by an older kseal): its keys open, \
             but nothing seals to it until the seeder runs `kseal keys sign --ring {}`",
            ring_arg(&args.ring)
        );
    }
    let index = snapshot.index;
    let now = SystemTime::now();
    let delay = kseal_keystore::DEFAULT_ACTIVATION_DELAY;
    if args.output == ListOutput::Json {
        return output::stdout(&list_json(&index, now, delay)?);
    }
    let mut out = format!(
        "{:<13} {:<51} {:>5}  {:<10}  {:<20}  {}\n",
        "KID", "FINGERPRINT", "BITS", "EXPIRES", "ADDED", "STATUS"
    );
    for entry in index.keys.iter().rev() {
        out.push_str(&format!(
            "{:<13} {:<51} {:>5}  {:<10}  {:<20}  {}\n",
            entry.kid.short(),
            entry.fingerprint,
            entry.bits,
            entry.not_after.strftime("%Y-%m-%d").to_string(),
            ts(entry.added),
            KeyStatus::of(&index, entry, now, delay).describe(entry, now)
        ));
    }
    // Keys retired from a signed ring: no longer in the ring, listed so that "retired" and
    // "never a key of this ring" differ.
    for retired in index.retired.iter().rev() {
        out.push_str(&format!(
            "{:<13} {:<51} {:>5}  {:<10}  {:<20}  retired {}\n",
            retired.kid.short(),
            "-",
            "-",
            "-",
            "-",
            ts(retired.retired)
        ));
    }
    output::stdout(&out)
}

pub(crate) fn export_cert(args: ExportCertArgs) -> Result<()> {
    let (pem, kid, expired) = block_on(async {
        let ring = open(&args.ring, None).await?;
        let snapshot = read_index(&ring).await?;
        let entry = match &args.key {
            Some(key) => snapshot.index.resolve(key)?.clone(),
            None => snapshot
                .index
                .active_entry()
                .cloned()
                .context("the ring has no active key: push one first")?,
        };
        let expired = entry.is_expired_at(SystemTime::now());
        anyhow::Ok((entry.crt, entry.kid, expired))
    })??;
    if expired {
        eprintln!(
            "warning: the certificate of key {} has expired: kseal seal refuses it",
            kid.short()
        );
    }
    match &args.write {
        Some(path) => {
            write_atomic(path, pem.as_bytes(), false)?;
            eprintln!(
                "wrote the certificate of key {} to {}",
                kid.short(),
                path.display()
            );
            Ok(())
        }
        None => output::stdout(&pem),
    }
}

/// Reads `secretsmanager://NAME[?region=…]`, a single `{"crt","key"}` secret.
async fn read_single_secret(text: &str, args: &RingArgs) -> Result<KeyPair> {
    let location = Location::parse(text)?;
    let Location::SecretsManager { prefix: name, .. } = &location else {
        bail!("`{text}` is not a Secrets Manager secret");
    };
    let store = Store::open(&location, &aws_options(args, None)).await?;
    let (value, _) = store
        .read(name, None)
        .await
        .with_context(|| format!("failed to read `{name}`"))?
        .with_context(|| format!("`{name}` does not exist in {}", store.describe()))?;
    let entry = KeyEntry::parse(&value, name)?;
    Ok(entry.to_pair(name)?)
}

pub(crate) fn import(args: ImportArgs) -> Result<()> {
    args.never_asks.warn("kseal keys import");
    block_on(async {
        let mut keys = Vec::new();
        for source in &args.sources {
            if source.starts_with("secretsmanager://") || source.starts_with("asm://") {
                keys.push(LoadedKey {
                    pair: read_single_secret(source, &args.ring).await?,
                    marker: Marker::Unmarked,
                    origin: format!("`{source}`"),
                });
            } else {
                keys.extend(read_loaded(Path::new(source))?);
            }
        }
        // The same key from two sources (a backup and a mirror, say) is one key; a marker
        // wins over its absence.
        keys.sort_by_key(|k| k.marker == Marker::Unmarked);
        let mut seen = std::collections::HashSet::new();
        keys.retain(|k| seen.insert(k.pair.id().to_string()));
        if keys.is_empty() {
            bail!("no key found in the sources");
        }
        let ring = open(&args.ring, Some(&args.write)).await?;
        // Into an empty ring, the key that sealed where the keys come from becomes active:
        // the one a kseal backup marks active, never merely the newest.
        let empty = ring
            .snapshot(None)
            .await
            .with_context(|| format!("failed to read key ring {}", ring_label(&ring)))?
            .is_none_or(|s| s.index.keys.is_empty());
        let first = if empty {
            let candidates: Vec<_> = keys.iter().map(LoadedKey::candidate).collect();
            // A plain Bitnami backup marks none: its newest key seals, as it did there (the
            // push report names it).
            let choice = sealing_key(&candidates)
                .context("failed to choose which imported key seals in the new ring")?;
            Some(keys[choice.index].pair.id().clone())
        } else {
            None
        };
        eprintln!(
            "importing {} into key ring {}",
            count(keys.len(), "key"),
            ring_label(&ring)
        );
        let pairs = keys.into_iter().map(|k| k.pair).collect();
        let outcomes = push_all_first(&ring, pairs, first.as_ref()).await?;
        hint_activation(
            &ring_arg(&args.ring),
            &outcomes,
            kseal_keystore::DEFAULT_ACTIVATION_DELAY,
        );
        mirror(&ring, &args.write).await
    })?
}

/// The SealedSecrets of one file (other kinds are skipped).
fn sealed_secrets_in(path: &Path) -> Result<Vec<SealedSecret>> {
    let text = fs_err::read_to_string(path)?;
    crate::manifest::sealed_secrets_in(path, &text, ", so it cannot be checked")
}

/// What scanning the `--check` paths found.
#[derive(Debug, Default)]
struct Dependence {
    /// Manifest files read.
    read: usize,
    /// SealedSecrets checked.
    objects: usize,
    /// Files that hold them.
    files: usize,
    /// `file: namespace/name (items)` that open only with the retiring key.
    needs: Vec<String>,
    /// Objects with items no key of the ring opens (not blocking, but worth a look).
    broken: Vec<String>,
}

fn check_dependence(paths: &[PathBuf], without: &KeyRing, only: &KeyRing) -> Result<Dependence> {
    let mut found = Dependence::default();
    for file in crate::walk::manifest_files(paths)? {
        found.read += 1;
        let sealed = sealed_secrets_in(&file)?;
        if sealed.is_empty() {
            continue;
        }
        found.files += 1;
        for s in &sealed {
            found.objects += 1;
            let name = format!(
                "{}: {}/{}",
                file.display(),
                s.metadata.namespace.as_deref().unwrap_or("-"),
                s.metadata.name.as_deref().unwrap_or("-")
            );
            let opened = open_items(s, without).with_context(|| format!("cannot check {name}"))?;
            if opened.failed.is_empty() {
                continue;
            }
            let mut needs = Vec::new();
            let mut broken = Vec::new();
            let by_retiring =
                open_items(s, only).with_context(|| format!("cannot check {name}"))?;
            for item in &opened.failed {
                if by_retiring.items.contains_key(item) {
                    needs.push(item.clone());
                } else {
                    broken.push(item.clone());
                }
            }
            if !needs.is_empty() {
                found.needs.push(format!("{name} ({})", needs.join(", ")));
            }
            if !broken.is_empty() {
                found.broken.push(format!("{name} ({})", broken.join(", ")));
            }
        }
    }
    Ok(found)
}

pub(crate) fn retire(args: RetireArgs) -> Result<()> {
    block_on(async {
        let ring = open(&args.ring, Some(&args.write)).await?;
        let snapshot = read_index(&ring).await?;
        let target = snapshot.index.resolve(&args.key)?.kid.clone();
        if snapshot.index.keys.len() <= 1 {
            bail!(
                "key {} is the last key of key ring {}: a ring always keeps a key to seal \
                 with; rotate first",
                target.short(),
                ring_label(&ring)
            );
        }
        if snapshot.index.active.as_ref() == Some(&target) {
            bail!(
                "key {} is the active sealing key: rotate (or activate another key) first",
                target.short()
            );
        }
        eprintln!(
            "reading the {} of key ring {} to check what still needs key {}…",
            count(snapshot.index.keys.len(), "key"),
            ring_label(&ring),
            target.short()
        );
        let mut without = KeyRing::new();
        let mut only = KeyRing::new();
        for entry in &snapshot.index.keys {
            let pair = ring
                .read_key(&entry.kid)
                .await
                .with_context(|| format!("failed to read key {}", entry.kid.short()))?;
            if entry.kid == target {
                only.insert(pair);
            } else {
                without.insert(pair);
            }
        }
        let found = check_dependence(&args.check, &without, &only)?;
        eprintln!(
            "checked {} in {} (of {} under --check)",
            count(found.objects, "SealedSecret"),
            count(found.files, "file"),
            count(found.read, "manifest file")
        );
        for b in &found.broken {
            eprintln!("warning: no key of the ring opens {b}");
        }
        if found.objects == 0 {
            // Nothing checked proves nothing: a wrong path or an unmounted repository would
            // let a key that thousands of SealedSecrets need go.
            if !args.allow_none {
                bail!(
                    "found no SealedSecret under --check {}: nothing shows that key {} is no \
                     longer needed (a wrong path?); pass --allow-none to retire it anyway",
                    args.check
                        .iter()
                        .map(|p| format!("`{}`", p.display()))
                        .collect::<Vec<_>>()
                        .join(", "),
                    target.short()
                );
            }
            eprintln!("warning: no SealedSecret was checked (--allow-none)");
        }
        if !found.needs.is_empty() {
            let shown: Vec<&str> = found.needs.iter().take(20).map(String::as_str).collect();
            bail!(
                "key {} is still needed: {} open only with it:\n  {}{}\n\
                 re-seal them with the active key (e.g. `kseal reseal --controller --in-place \
                 FILE`), commit, and retire again",
                target.short(),
                count(found.needs.len(), "SealedSecret"),
                shown.join("\n  "),
                if found.needs.len() > shown.len() {
                    format!("\n  … and {} more", found.needs.len() - shown.len())
                } else {
                    String::new()
                }
            );
        }
        if found.objects > 0 {
            eprintln!("none of them needs key {}", target.short());
        }
        let fate = match ring.store() {
            Store::Directory(_) => {
                "Its files move to retired/ in the ring directory and stay there until you \
                 delete them"
                    .to_owned()
            }
            Store::SecretsManager(_) => format!(
                "Its secret is deleted after {}",
                count(args.recovery_days, "day")
            ),
        };
        confirm(
            &format!(
                "Retire key {} from key ring {}? {fate}",
                target.short(),
                ring_label(&ring),
            ),
            args.confirm.yes,
        )?;
        let outcome = ring
            .retire(target.as_str(), args.recovery_days)
            .await
            .with_context(|| format!("failed to retire key {}", target.short()))?;
        eprintln!(
            "key {} removed from the index; controllers drop their copy after their retire grace{}",
            outcome.kid.short(),
            if outcome.deletion_scheduled {
                match ring.store() {
                    // Nothing deletes a directory ring's retired keys: say so.
                    Store::Directory(_) => format!(
                        "; {} moved to retired/{}-<unix seconds>/ in {}, and stays there until \
                         you delete it",
                        ring.key_name(&outcome.kid),
                        outcome.kid,
                        ring.store().describe()
                    ),
                    Store::SecretsManager(_) => format!(
                        "; {} is deleted in {} unless restored",
                        ring.key_name(&outcome.kid),
                        count(args.recovery_days, "day")
                    ),
                }
            } else {
                String::new()
            }
        );
        mirror(&ring, &args.write).await
    })?
}

/// The sealing certificate of a ring, for `kseal seal --cert secretsmanager://R` (reads the
/// index only: no private key is touched, so a cert-only IAM policy suffices).
///
/// Only a ring whose signed history starts at a pinned anchor (`anchor`, i.e. `--ring-anchor`
/// or `KSEAL_RING_ANCHOR`, else the nearest `.kseal.yaml`) is sealed to: whoever can write the
/// index but not the ring's private keys cannot choose the key.
pub(crate) fn active_certificate_pem(location: &str, anchor: Option<&str>) -> Result<String> {
    let (snapshot, label) = verified_index(location, anchor)?;
    let entry = snapshot
        .index
        .active_entry()
        .with_context(|| format!("key ring {label} has no active key"))?;
    Ok(entry.crt.clone())
}

/// The index of the key ring at `location` (a `--cert` ring URL), verified against `anchor`
/// or the nearest `.kseal.yaml` pin; a ring without a pin is refused, as for sealing (what
/// `kseal seal` and `kseal check` read the ring's keys from), with the ring's name for
/// messages.
pub(crate) fn verified_index(location: &str, anchor: Option<&str>) -> Result<(Snapshot, String)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let args = RingArgs {
        ring: location.to_owned(),
        region: var(crate::env::KSEAL_AWS_REGION),
        aws_profile: None,
        endpoint_url: var(crate::env::KSEAL_AWS_ENDPOINT_URL),
        assume_role: var(crate::env::KSEAL_AWS_ASSUME_ROLE),
        ring_anchor: anchor.map(str::to_owned),
        // As clap reads a boolean flag's variable.
        insecure_perms: var(crate::env::KSEAL_INSECURE_PERMS).is_some_and(|v| {
            !matches!(
                v.to_ascii_lowercase().as_str(),
                "0" | "false" | "no" | "off" | "n" | "f"
            )
        }),
    };
    block_on(async {
        let ring = open(&args, None).await?;
        if ring.trust().anchor().is_none() {
            bail!(
                "key ring `{location}` is not pinned: kseal seals to a key ring only when it \
                 knows the ring's trust anchor, so that whoever can write the ring's index \
                 cannot choose the key. Pin it once in the GitOps repository with `kseal keys \
                 trust --ring {}` (it writes .kseal.yaml; commit it), or pass --ring-anchor KID \
                 (KSEAL_RING_ANCHOR)",
                ring_arg(&args)
            );
        }
        Ok((read_index(&ring).await?, ring_label(&ring)))
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(text: &str) -> RingArgs {
        RingArgs {
            ring: text.to_owned(),
            region: None,
            aws_profile: None,
            endpoint_url: None,
            assume_role: None,
            ring_anchor: None,
            insecure_perms: false,
        }
    }

    #[test]
    fn suggested_ring_arguments_survive_a_shell() {
        assert_eq!(ring_arg(&ring("kseal/fleet")), "kseal/fleet");
        assert_eq!(
            ring_arg(&ring("dir:///srv/kseal/ring")),
            "dir:///srv/kseal/ring"
        );
        assert_eq!(
            ring_arg(&ring("secretsmanager://kseal/fleet?region=eu-west-1")),
            "'secretsmanager://kseal/fleet?region=eu-west-1'"
        );
        assert_eq!(ring_arg(&ring("dir:///it's")), r"'dir:///it'\''s'");
    }
}
