//! Ring operations on a [`Store`]: the contract's invariants live here.
//!
//! - A key secret is written before its index entry, so a reader never finds an index entry
//!   whose key secret does not exist yet.
//! - The index is only ever replaced by compare-and-swap against the version that was read;
//!   on a conflict the change is re-applied to the fresh index, so concurrent pushes and
//!   rotations all land.
//! - The active key changes only to a key that has been in the index for at least the
//!   activation delay (one controller poll interval), unless the caller says otherwise.
//!
//! The folder's files: this one holds the ring and its reads; `marker` the history marker;
//! `write` the compare-and-swap write of a change and its signing; `adopt` the adoption of the
//! index under a marker an older kseal wrote; `ops` the operations.

use std::time::{Duration, SystemTime};

use kseal_keys::KeyPair;

use crate::contract::{Index, KeyEntry, Kid};
use crate::location::Location;
use crate::root::RootSigner;
use crate::trust::{self, Trust, Verified};
use crate::{AwsOptions, Error, Put, Result, Store, Version};

mod adopt;
mod marker;
mod ops;
mod write;

pub use marker::{Marker, Vouch, not_vouched, restore_vouched};

/// How long a pushed key waits before it may seal: the controller's default poll interval
/// (1 h) plus its largest jitter (10 %), so every cluster has fetched the key first.
pub const DEFAULT_ACTIVATION_DELAY: Duration = Duration::from_secs(66 * 60);

/// Secrets Manager's limit for one value. An RSA-4096 index entry is about 2.2 KB, so an
/// index holds about 27 keys with its signed history: rings retire old keys long before that.
const MAX_INDEX_BYTES: usize = 65_536;

/// How many times an index change is re-applied after losing a compare-and-swap.
const CAS_ATTEMPTS: u32 = 8;

/// A ring: its store and its name.
#[derive(Debug, Clone)]
pub struct Ring {
    store: Store,
    name: String,
    /// Secrets Manager names carry the prefix; a directory is the ring itself.
    prefixed: bool,
    /// What an index must prove before it is used.
    trust: Trust,
    /// The dedicated root that signs writes (`--root`), when the ring has one or gets one.
    root: Option<RootSigner>,
    /// How long an index this writer signs stays current (default: the ring's current one,
    /// else [`DEFAULT_INDEX_LIFETIME`]).
    lifetime: Option<Duration>,
    /// Whether a write may build on an index past its expiry (`--allow-expired`).
    allow_expired: bool,
    /// The digest of the index a write may build on under a history marker written by an
    /// older kseal, which records none (`--adopt-index`).
    adopt_index: Option<String>,
    /// The version and digest of the index this machine read last ([`Ring::with_seen_index`]).
    seen_index: Option<(u64, String)>,
    /// The digests of the pending writes a write may drop: it builds on the index at the
    /// marker's version although the marker records them as pending (`--drop-pending`).
    drop_pending: Vec<String>,
    /// Where a write's warnings go (a dropped pending write); nowhere when unset.
    warn: Warn,
}

/// Where a ring's warnings go ([`Ring::with_warnings`]).
#[derive(Clone, Default)]
struct Warn(Option<std::sync::Arc<WarnFn>>);

/// What a ring calls with each warning.
type WarnFn = dyn Fn(&str) + Send + Sync;

impl Warn {
    fn say(&self, text: &str) {
        if let Some(f) = &self.0 {
            f(text);
        }
    }
}

impl std::fmt::Debug for Warn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Warn(set)"
        } else {
            "Warn(unset)"
        })
    }
}

/// How long a signed index stays current when nothing says otherwise: the seeder refreshes
/// it well before (`kseal keys refresh`, e.g. daily from a CronJob).
pub const DEFAULT_INDEX_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// The shortest lifetime a writer accepts.
pub const MIN_INDEX_LIFETIME: Duration = Duration::from_secs(3600);
/// The longest lifetime a writer accepts: a replay stays possible for at most this long.
pub const MAX_INDEX_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);

/// The index as read, with its version.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The index.
    pub index: Index,
    /// Its version (for a later compare-and-swap or change detection).
    pub version: Version,
    /// How it was found trustworthy.
    pub verified: Verified,
}

/// What `sign` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignOutcome {
    /// The unsigned index is now a signed history rooted at `anchor`; `dropped` lists entries
    /// whose key secret did not hold their key (never usable by a controller), left out.
    Signed {
        /// The anchor readers pin.
        anchor: Kid,
        /// Index entries left out.
        dropped: Vec<Kid>,
    },
    /// The index was signed already; nothing was written.
    AlreadySigned(Kid),
}

/// Who signs an index change.
enum Signer<'a> {
    /// The ring's current root (read from the ring).
    Root,
    /// The key being pushed, which becomes the anchor of an empty ring.
    Pushed(&'a KeyPair),
    /// Signing an unsigned index: this key becomes the anchor.
    Migrate(&'a Kid),
    /// Handing the root to this dedicated root (`kseal keys re-root`).
    ReRoot(&'a RootSigner),
}

/// What `push` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOutcome {
    /// The key's id.
    pub kid: Kid,
    /// Bitnami's fingerprint of the key.
    pub fingerprint: String,
    /// Whether the key secret was created or already there.
    pub stored: Put,
    /// Whether an index entry was added (false: the key was already in the index).
    pub indexed: bool,
    /// Whether the key became the active (sealing) key: only the first key of a ring does.
    pub activated: bool,
}

/// What `activate` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActivateOutcome {
    /// The key now seals; `previous` sealed before.
    Activated {
        /// The key that seals now.
        kid: Kid,
        /// The key that sealed before.
        previous: Option<Kid>,
    },
    /// The key already sealed; nothing was written.
    AlreadyActive(Kid),
    /// The key is too new: controllers may not have fetched it yet. Nothing was written.
    TooYoung {
        /// The key.
        kid: Kid,
        /// When it may be activated.
        ready_at: SystemTime,
    },
    /// Another key was activated since the caller looked ([`Ring::activate_if`]): nothing
    /// was written.
    Superseded {
        /// The key the caller wanted to activate.
        kid: Kid,
        /// The key that seals now.
        active: Option<Kid>,
    },
}

/// What `retire` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetireOutcome {
    /// The key removed from the index.
    pub kid: Kid,
    /// Whether its key secret was scheduled for deletion (false: it was already gone).
    pub deletion_scheduled: bool,
}

impl Ring {
    /// Opens the ring at `location`.
    pub async fn open(location: &Location, aws: &AwsOptions) -> Result<Self> {
        let store = Store::open(location, aws).await?;
        Ok(Self::new(store, location))
    }

    /// The ring at `location` in an already opened `store`.
    pub fn new(store: Store, location: &Location) -> Self {
        Self {
            store,
            name: location.ring_name().to_owned(),
            prefixed: matches!(location, Location::SecretsManager { .. }),
            trust: Trust::legacy(),
            root: None,
            lifetime: None,
            allow_expired: false,
            adopt_index: None,
            seen_index: None,
            drop_pending: Vec::new(),
            warn: Warn::default(),
        }
    }

    /// What this ring's readers and writers accept ([`Trust::legacy`] unless set): every read
    /// of the index checks it, and a writer refuses to build on an index that fails it.
    #[must_use]
    pub fn with_trust(mut self, trust: Trust) -> Self {
        self.trust = trust;
        self
    }

    /// Signs writes with this dedicated root (`--root`): required once the ring's root is
    /// dedicated, and the root a new ring starts with. On a ring still rooted at a ring key,
    /// only [`Ring::re_root`] uses it.
    #[must_use]
    pub fn with_root(mut self, root: RootSigner) -> Self {
        self.root = Some(root);
        self
    }

    /// How long indexes this writer signs stay current (`--lifetime`), within
    /// [`MIN_INDEX_LIFETIME`]..=[`MAX_INDEX_LIFETIME`] (checked when writing).
    #[must_use]
    pub fn with_lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = Some(lifetime);
        self
    }

    /// Lets writes build on an index past its expiry (`--allow-expired`): for a seeder whose
    /// refreshes stopped, after checking the version and active key of the index it read.
    #[must_use]
    pub fn with_allow_expired(mut self, allow: bool) -> Self {
        self.allow_expired = allow;
        self
    }

    /// Lets a write build on the index of this digest ([`crate::Index::digest`]) although the
    /// history marker, written by an older kseal, records no digest to vouch for it
    /// (`--adopt-index`): the seeder checks the version, active key, keys and retired keys
    /// the refusal printed, then adopts that very index; the marker records its digest from
    /// then on. Where the store's versions hold other indexes of that version (a fork signed
    /// with a ring key: attack review, round 14, AF1), `digest` names the adopted one first,
    /// then every other one, comma-separated, as the refusal printed them.
    #[must_use]
    pub fn with_adopt_index(mut self, digest: Option<String>) -> Self {
        self.adopt_index = digest.map(|d| d.trim().to_ascii_lowercase());
        self
    }

    /// The digest ([`crate::Index::digest`]) of the index this machine read at `version` (a
    /// reader's cache of what it saw): an adoption at that version treats it as another index
    /// of that version, which it names after the adopted one unless it is the one adopted
    /// (attack review, round 15, PG: with the real index purged from the store's versions,
    /// the seeder adopted a fork that its own cache had refused).
    #[must_use]
    pub fn with_seen_index(mut self, version: u64, digest: &str) -> Self {
        self.seen_index = Some((version, digest.trim().to_ascii_lowercase()));
        self
    }

    /// Lets a write build on the index at the history marker's version although the marker
    /// records writes after it as pending, when `digests` names every one of them
    /// (`--drop-pending <SHA-256>`): for a seeder whose last write failed before it wrote the
    /// index, after checking that the index is the one it wrote before that. Without it such a
    /// write is refused, since the pending write may also have gone through and been undone
    /// by putting the older index back (attack review, round 12, U1). A digest names one
    /// write, so a flag left set drops no later, different pending write (round 13, U2); and
    /// a pending write any stored version of the index holds went through: it is restored,
    /// never dropped. A write that drops one says so ([`Ring::with_warnings`]).
    #[must_use]
    pub fn with_drop_pending(mut self, digests: impl IntoIterator<Item = String>) -> Self {
        self.drop_pending = digests
            .into_iter()
            .map(|d| d.trim().to_ascii_lowercase())
            .collect();
        self
    }

    /// Where this ring's writes send their warnings (one line each, naming neither the ring
    /// nor `warning:`): a pending write dropped by [`Ring::with_drop_pending`]. Nothing here
    /// logs, so without it they go nowhere.
    #[must_use]
    pub fn with_warnings(mut self, warn: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.warn = Warn(Some(std::sync::Arc::new(warn)));
        self
    }

    /// What this ring accepts.
    pub fn trust(&self) -> &Trust {
        &self.trust
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The ring's name (its Secrets Manager prefix).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The index secret's name (`R/index`) or file (`index.json`).
    pub fn index_name(&self) -> String {
        if self.prefixed {
            format!("{}/index", self.name)
        } else {
            "index.json".to_owned()
        }
    }

    /// The history marker's name (`R/root`, a directory's `root.json`): written once, by the
    /// first signed write, and never again. Whoever can write only the index cannot remove it,
    /// so [`Ring::sign`] knows a ring was signed before even when its index says otherwise.
    pub fn root_name(&self) -> String {
        if self.prefixed {
            format!("{}/root", self.name)
        } else {
            "root.json".to_owned()
        }
    }

    /// A key secret's name (`R/keys/<kid>`) or directory (`keys/<kid>`).
    pub fn key_name(&self, kid: &Kid) -> String {
        if self.prefixed {
            format!("{}/keys/{kid}", self.name)
        } else {
            format!("keys/{kid}")
        }
    }

    fn parse_index(&self, text: &str) -> Result<Index> {
        let what = self.index_name();
        if self.prefixed {
            Index::parse(text, &self.name, &what)
        } else {
            // A directory may hold a copy of any ring (e.g. mounted by the CSI driver).
            Index::parse_any_ring(text, &what)
        }
    }

    /// The index's current version (one metadata call); `None` for a ring with no index yet.
    pub async fn index_version(&self) -> Result<Option<Version>> {
        self.store.current_version(&self.index_name()).await
    }

    /// Reads the index at `version` (current when `None`); `None` for a ring with no index.
    pub async fn snapshot(&self, version: Option<&Version>) -> Result<Option<Snapshot>> {
        self.snapshot_under(version, &self.trust).await
    }

    /// [`Ring::snapshot`] as a writer reads it: an expired index is what a write (a refresh
    /// above all) replaces, so it is accepted; everything else is checked as for readers.
    async fn snapshot_for_write(&self) -> Result<Option<Snapshot>> {
        let trust = self.trust.clone().accept_expired(true);
        self.snapshot_under(None, &trust).await
    }

    async fn snapshot_under(
        &self,
        version: Option<&Version>,
        trust: &Trust,
    ) -> Result<Option<Snapshot>> {
        let Some((text, version)) = self.store.read(&self.index_name(), version).await? else {
            return Ok(None);
        };
        let index = self.parse_index(&text)?;
        let verified = trust::verify(&index, trust, &self.index_name())?;
        Ok(Some(Snapshot {
            index,
            version,
            verified,
        }))
    }

    /// Reads the index at `version` (current when `None`) as text, exactly as stored, with the
    /// version read; `None` for a ring with no index. The caller parses (and will verify) it.
    pub async fn snapshot_text(
        &self,
        version: Option<&Version>,
    ) -> Result<Option<(String, Version)>> {
        let read = self.store.read(&self.index_name(), version).await?;
        Ok(read.map(|(text, version)| (text.as_str().to_owned(), version)))
    }

    /// Reads the index, failing with a clear message when the ring does not exist.
    pub async fn require_snapshot(&self) -> Result<Snapshot> {
        self.snapshot(None).await?.ok_or_else(|| Error::NotFound {
            what: format!("ring {:?} (no {})", self.name, self.index_name()),
            store: self.store.describe(),
        })
    }

    /// The current store version of the key secret of `kid` (one metadata call: a
    /// `DescribeSecret`; for a directory, a read of the key), `None` when the store holds
    /// none (a secret scheduled for deletion counts as none), without checking it: a reader
    /// that found the key missing or unreadable asks this before reading it again
    /// ([`Ring::read_key`]).
    pub async fn key_version(&self, kid: &Kid) -> Result<Option<Version>> {
        self.store.current_version(&self.key_name(kid)).await
    }

    /// Reads and checks one key: it parses, the certificate belongs to the private key, the
    /// key is RSA of at least 2048 bits, and its kid is `entry.kid`.
    pub async fn read_key(&self, kid: &Kid) -> Result<KeyPair> {
        let name = self.key_name(kid);
        // Key secrets are immutable: `push` creates each with the kid as its
        // ClientRequestToken, so on Secrets Manager its first version's VersionId is the kid.
        // Reading that version, not AWSCURRENT, means a later PutSecretValue on a key secret
        // changes nothing a reader sees. A directory has no versions: its files are checked
        // against the kid below.
        let read = match &self.store {
            Store::SecretsManager(_) => {
                let first = Version(kid.as_str().to_owned());
                match self.store.read(&name, Some(&first)).await? {
                    Some(read) => Some(read),
                    // No first version under the kid: gone (scheduled for deletion), or a
                    // secret kseal did not create. Its current version is never read instead:
                    // anyone with PutSecretValue on it chose that one.
                    // A restore can reach `DescribeSecret`'s answer before `GetSecretValue`'s:
                    // one more read of the kid's version before calling the secret foreign.
                    None if self.store.current_version(&name).await?.is_some() => {
                        if let Some(read) = self.store.read(&name, Some(&first)).await? {
                            Some(read)
                        } else {
                            return Err(Error::BadKey {
                                what: name,
                                reason: "it has no version under its kid (kseal creates each key \
                                     secret with its kid as the first VersionId): it was \
                                     recreated or not written by kseal"
                                    .into(),
                            });
                        }
                    }
                    None => None,
                }
            }
            Store::Directory(_) => self.store.read(&name, None).await?,
        };
        let Some((text, _)) = read else {
            return Err(Error::NotFound {
                what: name,
                store: self.store.describe(),
            });
        };
        let pair = KeyEntry::parse(&text, &name)?.to_pair(&name)?;
        if &Kid::of(pair.public_key()) != kid {
            return Err(Error::BadKey {
                what: name,
                reason: "it holds another key than its name says".into(),
            });
        }
        Ok(pair)
    }
}
