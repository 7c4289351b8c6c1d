//! Ring operations on a [`Store`]: the contract's invariants live here.
//!
//! - A key secret is written before its index entry, so a reader never finds an index entry
//!   whose key secret does not exist yet.
//! - The index is only ever replaced by compare-and-swap against the version that was read;
//!   on a conflict the change is re-applied to the fresh index, so concurrent pushes and
//!   rotations all land.
//! - The active key changes only to a key that has been in the index for at least the
//!   activation delay (one controller poll interval), unless the caller says otherwise.

use std::time::{Duration, SystemTime};

use kseal_keys::KeyPair;

use std::collections::HashMap;

use crate::contract::{INDEX_SCHEMA, Index, IndexEntry, KeyEntry, Kid};
use crate::location::Location;
use crate::root::RootSigner;
use crate::trust::{self, RetiredEntry, RootRecord, Trust, Verified};
use crate::{AwsOptions, Error, Put, Result, Store, Version};

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
}

/// What the history marker records ([`Ring::history_marker`]): written by the ring's writers
/// after each signed write, readable by whoever may read it (no secret in it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The last index version written (0 in a marker written before versions were recorded).
    pub version: u64,
    /// The history's anchor.
    pub anchor: Option<Kid>,
    /// The newest dedicated root: its number and kid.
    pub root: Option<(u64, Kid)>,
    /// The digest ([`Index::digest`]) of the index at `version`, exactly as its writers wrote
    /// it (`None` in a marker written before digests were recorded).
    pub digest: Option<String>,
    /// The digests of the indexes a writer signed for `version + 1` and was about to write
    /// (recorded before the index write, cleared once the marker moves to it).
    pub next: Vec<String>,
}

/// How many pending digests a marker keeps (one per concurrent writer's attempt).
const MARKER_NEXT_KEPT: usize = 8;

/// What the history marker says of an index ([`Marker::vouches`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vouch {
    /// The index its writers wrote last.
    Written,
    /// The index a writer signed and was writing when the marker was last written: the index
    /// write went through and the marker was not moved yet.
    Pending,
    /// The marker records no digest (written before digests were recorded): only its version
    /// and root say anything.
    Unrecorded,
    /// Older than the marker's version: put back.
    Older,
    /// The marker's version, or the next, but not an index its writers wrote (a history forked
    /// with ring keys, put in by whoever can write the index), or newer than any write.
    NotWritten,
}

impl Marker {
    /// Parses a history marker's JSON (`None` when it is not the JSON kseal writes).
    pub fn parse(text: &str) -> Option<Self> {
        let value = serde_json::from_str::<serde_json::Value>(text).ok()?;
        if !value.is_object() {
            return None;
        }
        let kid = |v: Option<&serde_json::Value>| {
            v.and_then(|v| v.as_str()).and_then(|t| Kid::parse(t).ok())
        };
        let root = value.get("root").and_then(|r| {
            Some((
                r.get("seq").and_then(serde_json::Value::as_u64)?,
                kid(r.get("kid"))?,
            ))
        });
        let digest = |v: &serde_json::Value| {
            v.as_str()
                .filter(|t| t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()))
                .map(str::to_owned)
        };
        Some(Marker {
            version: value
                .get("version")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0),
            anchor: kid(value.get("anchor")),
            root,
            digest: value.get("digest").and_then(digest),
            next: value
                .get("next")
                .and_then(serde_json::Value::as_array)
                .map(|a| a.iter().filter_map(digest).collect())
                .unwrap_or_default(),
        })
    }

    /// Whether this marker vouches for `index` (see [`Vouch`]). Only the seeder writes the
    /// marker (on Secrets Manager an index writer's `PutSecretValue` on `R/index` does not
    /// reach `R/root`), and every kseal write records the digest of the index it is about to
    /// write before writing it, so an index the marker does not vouch for was not written by
    /// the ring's writers, however it is signed: a fork signed with a ring key that clusters
    /// hold is refused even on a ring not yet moved to a dedicated root (attack review,
    /// round 9).
    pub fn vouches(&self, index: &Index) -> Vouch {
        if index.version < self.version {
            return Vouch::Older;
        }
        let Some(current) = &self.digest else {
            return Vouch::Unrecorded;
        };
        let digest = index.digest();
        if index.version == self.version && &digest == current {
            Vouch::Written
        } else if index.version == self.version.saturating_add(1) && self.next.contains(&digest) {
            Vouch::Pending
        } else {
            Vouch::NotWritten
        }
    }
}

/// What a marker write records of an index (see [`Ring::mark`]).
#[derive(Clone, Copy)]
enum Record<'a> {
    /// The index at the marker's version was written: its digest.
    Written(&'a str),
    /// The index at the marker's version (`current`, its digest) is the one a write builds
    /// on, and the write is about to put the index of digest `next` at the version after it.
    Next {
        /// The digest of the index written last.
        current: &'a str,
        /// The digest of the index about to be written.
        next: &'a str,
    },
}

/// Why `marker` does not vouch for `index` ([`Vouch::NotWritten`]), naming the index's active
/// key: the one a fork wants sealing. `marker_name` is the marker's name in the store.
pub fn not_vouched(index: &Index, marker: &Marker, marker_name: &str) -> String {
    let digest = index.digest();
    let what = if index.version == marker.version {
        format!(
            "it is version {} with digest {}, but {marker_name} records digest {} for that \
             version",
            index.version,
            &digest[..16],
            marker.digest.as_deref().map_or("", |d| &d[..16])
        )
    } else {
        format!(
            "it is version {} with digest {}, which {marker_name} does not record as written \
             after version {}",
            index.version,
            &digest[..16],
            marker.version
        )
    };
    format!(
        "{what}: its writers did not write it (a history forked with keys clusters hold, put \
         in by whoever can write the index; its active key is {})",
        index.active.as_ref().map_or("none", Kid::short)
    )
}

/// The newest dedicated root of `index`'s chain: its number and kid.
fn newest_dedicated(index: &Index) -> Option<(u64, Kid)> {
    index
        .roots
        .iter()
        .rev()
        .find(|r| r.dedicated)
        .map(|r| (r.seq, r.kid.clone()))
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

    /// The history marker (`R/root`, a directory's `root.json`): the last version its writers
    /// wrote and the newest dedicated root, for readers that pin a ring key (a fresh CI job
    /// among them) and so would not otherwise know that the ring moved to a dedicated root,
    /// nor how new its index is. On Secrets Manager only the seeder writes it; a directory's
    /// `root.json` is as well protected as its `index.json`. `None` when the ring has none.
    pub async fn history_marker(&self) -> Result<Option<Marker>> {
        Ok(self.marker().await?.map(|(m, _)| m))
    }

    /// The history marker (`R/root`, a directory's `root.json`) with its store version; `None`
    /// when the ring has none.
    async fn marker(&self) -> Result<Option<(Marker, Version)>> {
        let Some((text, version)) = self.store.read(&self.root_name(), None).await? else {
            return Ok(None);
        };
        let marker = Marker::parse(&text).ok_or_else(|| Error::Malformed {
            what: self.root_name(),
            reason: "it is not the JSON kseal writes; nothing is written on this ring until \
                     it is restored from the store's previous versions"
                .into(),
        })?;
        Ok(Some((marker, version)))
    }

    /// Records that this ring's history is signed (anchored at its first root) and that
    /// `index`'s version was written, with its newest dedicated root. Only the seeder can write
    /// the marker on Secrets Manager (an index writer's `PutSecretValue` on `R/index` does not
    /// reach `R/root`), so it is the writers' own pin and rollback floor: a write refuses an
    /// index older than the marker says, one whose history does not start at its anchor, and
    /// one that does not pass through its dedicated root (a fork made with ring keys, which a
    /// routine `re-root` would otherwise bless). A pod without a cache (the seed Job) gets the
    /// same protection as a laptop. A directory ring's `root.json` is no better protected than
    /// its `index.json`: there, the directory's permissions are the protection.
    async fn mark_written(&self, index: &Index) -> Result<()> {
        let digest = index.digest();
        self.mark(
            &index.roots[0].kid,
            index.version,
            newest_dedicated(index),
            Record::Written(&digest),
        )
        .await
    }

    /// Records, before a write puts `next` in place of `from`, the digest of the index it is
    /// about to write (and, when it hands the history to a new dedicated root, that root):
    /// should the index write go through and the marker write after it fail, readers and the
    /// next write still find the index vouched for (pending); an index written by anyone
    /// else at that version is not.
    async fn mark_next(&self, from: &Index, next: &Index, root: Option<(u64, Kid)>) -> Result<()> {
        let Some(anchor) = next.roots.first().map(|r| r.kid.clone()) else {
            return Ok(());
        };
        let (current, next) = (from.digest(), next.digest());
        self.mark(
            &anchor,
            from.version,
            root,
            Record::Next {
                current: &current,
                next: &next,
            },
        )
        .await
    }

    /// Raises the marker to `version` and `root` (never lowers either), anchored at `anchor`,
    /// and records `record`'s digests: a marker already past `version` is left as it is.
    async fn mark(
        &self,
        anchor: &Kid,
        version: u64,
        root: Option<(u64, Kid)>,
        record: Record<'_>,
    ) -> Result<()> {
        let name = self.root_name();
        let tags = [
            ("kseal.dev/ring", self.name.as_str()),
            ("kseal.dev/part", "root"),
        ];
        for _ in 0..CAS_ATTEMPTS {
            let current = self.marker().await?;
            let old = current.as_ref().map(|(m, _)| m);
            if old.is_some_and(|m| m.version > version) {
                let raises_root =
                    old.and_then(|m| m.root.as_ref()).map(|r| r.0) < root.as_ref().map(|r| r.0);
                if !raises_root {
                    return Ok(());
                }
            }
            let root = match old.and_then(|m| m.root.clone()) {
                Some(r) if Some(r.0) > root.as_ref().map(|r| r.0) => Some(r),
                _ => root.clone(),
            };
            let marker = match old {
                Some(m) if m.version > version => Marker { root, ..m.clone() },
                Some(m) if m.version == version => {
                    let (digest, mut next) = (m.digest.clone(), m.next.clone());
                    match record {
                        // A marker from before digests were recorded adopts this one.
                        Record::Written(d) => Marker {
                            digest: digest.or_else(|| Some(d.to_owned())),
                            next,
                            root,
                            ..m.clone()
                        },
                        Record::Next { current, next: n } => {
                            if !next.iter().any(|x| x == n) {
                                next.push(n.to_owned());
                            }
                            let skip = next.len().saturating_sub(MARKER_NEXT_KEPT);
                            Marker {
                                digest: digest.or_else(|| Some(current.to_owned())),
                                next: next.split_off(skip),
                                root,
                                ..m.clone()
                            }
                        }
                    }
                }
                _ => {
                    let (digest, next) = match record {
                        Record::Written(d) => (d, Vec::new()),
                        Record::Next { current, next } => (current, vec![next.to_owned()]),
                    };
                    Marker {
                        version,
                        anchor: Some(anchor.clone()),
                        root,
                        digest: Some(digest.to_owned()),
                        next,
                    }
                }
            };
            if old == Some(&marker) {
                return Ok(());
            }
            let mut text = serde_json::json!({
                "ring": self.name,
                "anchor": anchor.as_str(),
                "version": marker.version,
                "note": "kseal: this ring's index is a signed history; an unsigned index here replaced it, and an index older than this version, or not through this root, or not of this digest, was put back",
            });
            if let Some((seq, kid)) = &marker.root {
                text["root"] = serde_json::json!({"seq": seq, "kid": kid.as_str()});
            }
            if let Some(digest) = &marker.digest {
                text["digest"] = serde_json::json!(digest);
            }
            if !marker.next.is_empty() {
                text["next"] = serde_json::json!(marker.next);
            }
            match self
                .store
                .compare_and_swap(
                    &name,
                    &text.to_string(),
                    current.as_ref().map(|(_, v)| v),
                    &tags,
                )
                .await
            {
                Ok(_) => return Ok(()),
                Err(Error::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Checks the index a write builds on against the marker (see [`Ring::mark_written`]) and
    /// its expiry.
    fn check_against_marker(
        &self,
        snapshot: &Snapshot,
        marker: Option<&Marker>,
        pending: Option<(u64, &Kid)>,
    ) -> Result<()> {
        let index = &snapshot.index;
        let put_back = |reason: String| Error::Untrusted {
            what: self.index_name(),
            reason: format!(
                "{reason}. Nothing was written; restore the index from the store's previous \
                 versions"
            ),
        };
        if let Some(m) = marker {
            if index.version < m.version {
                return Err(put_back(format!(
                    "it is version {}, but this ring's writers wrote version {} ({} records \
                     it): an older index was put back",
                    index.version,
                    m.version,
                    self.root_name()
                )));
            }
            if let (Some(anchor), Some(first)) = (&m.anchor, index.roots.first())
                && &first.kid != anchor
            {
                return Err(put_back(format!(
                    "its history starts at {}, but {} records anchor {}: a history rooted \
                     elsewhere was put in its place",
                    first.kid.short(),
                    self.root_name(),
                    anchor.short()
                )));
            }
            if let Some((seq, kid)) = &m.root
                && pending != Some((*seq, kid))
            {
                let at = usize::try_from(*seq)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| index.roots.get(i));
                if at.map(|r| &r.kid) != Some(kid) {
                    return Err(put_back(format!(
                        "its history does not pass through the dedicated root {} (root {seq}) \
                         that {} records: a fork made with keys clusters hold",
                        kid.short(),
                        self.root_name()
                    )));
                }
            }
        }
        if let Verified::Signed {
            expired: true,
            version,
            ..
        } = &snapshot.verified
            && !self.allow_expired
        {
            return Err(Error::Refused(format!(
                "{} (version {version}, active key {}) expired at {}: an expired index may be \
                 an old one put back, and a write would sign it anew. If it is the index you \
                 wrote last (check its version and active key), write again with \
                 --allow-expired",
                self.index_name(),
                index.active.as_ref().map_or("none", |k| k.short()),
                index.expires.map(|e| e.to_string()).unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// Refuses an index the marker does not vouch for ([`Marker::vouches`]): one at the
    /// marker's version, or the next, that its writers did not write. Older indexes and
    /// indexes further ahead are refused by [`Ring::check_against_marker`] and the caller.
    fn check_vouched(&self, index: &Index, marker: &Marker) -> Result<()> {
        if marker.vouches(index) != Vouch::NotWritten || index.version > marker.version + 1 {
            return Ok(());
        }
        Err(Error::Untrusted {
            what: self.index_name(),
            reason: format!(
                "{}. Nothing was written; restore the index {} vouches for from the store's \
                 previous versions (version {}, digest {}), after checking the keys it names",
                not_vouched(index, marker, &self.root_name()),
                self.root_name(),
                marker.version,
                marker.digest.as_deref().map_or("", |d| &d[..16])
            ),
        })
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
                    None if self.store.current_version(&name).await?.is_some() => {
                        return Err(Error::BadKey {
                            what: name,
                            reason: "it has no version under its kid (kseal creates each key \
                                     secret with its kid as the first VersionId): it was \
                                     recreated or not written by kseal"
                                .into(),
                        });
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

    /// Applies `change` to the current index and writes it by compare-and-swap, re-applying it
    /// to the fresh index after a conflict. `change` returns whether it changed anything (no
    /// write otherwise) and its result.
    async fn update<T>(
        &self,
        signer: Signer<'_>,
        mut change: impl FnMut(&mut Index) -> Result<(bool, T)>,
    ) -> Result<T> {
        let name = self.index_name();
        let mut attempt = 0;
        // Private keys read to sign, kept across compare-and-swap attempts.
        let mut keys: HashMap<Kid, KeyPair> = HashMap::new();
        // The index this write started from, once it recorded a new dedicated root in the
        // marker ahead of the index (below): a retry goes on only from that very index.
        let mut marked_ahead_from: Option<String> = None;
        let mut started_from: Option<String>;
        // The index this attempt builds on.
        let mut base: Option<Index>;
        loop {
            started_from = None;
            base = None;
            attempt += 1;
            let current = self.snapshot_for_write().await?;
            let marker = self.marker().await?;
            let (mut index, expected) = match current {
                Some(s) => {
                    // The marker's root is this write's own pending root only within this
                    // write, and only while the index is the one it started from: an index
                    // written in between (a fork planted after the marker moved, attack
                    // review round 7) is checked against the new root and refused.
                    let pending = match (&signer, &marked_ahead_from) {
                        (Signer::ReRoot(next), Some(from)) if *from == s.index.to_json() => {
                            Some((s.index.roots.len() as u64 + 1, next.kid()))
                        }
                        (_, Some(_)) => {
                            return Err(Error::Refused(format!(
                                "{} changed while this write was handing the history to a new \
                                 dedicated root, after {} already named that root: nothing was \
                                 signed. The index may be a fork: restore it to the version this \
                                 write started from (the store's previous versions), put {} back \
                                 to its previous version, then re-root again",
                                self.index_name(),
                                self.root_name(),
                                self.root_name()
                            )));
                        }
                        _ => None,
                    };
                    self.check_against_marker(&s, marker.as_ref().map(|(m, _)| m), pending)?;
                    started_from = Some(s.index.to_json());
                    // A marker behind the verified index (a marker write that failed after its
                    // index write) is brought up to it first, whatever this write then does
                    // (attack review, round 6: a re-root retried as "nothing to do" left the
                    // marker without the new root, and a ring-key fork passed fresh readers).
                    // Only one write can be behind: the marker is written after every index
                    // write, so an index more than one version ahead of it holds writes that
                    // were not its writers' (a history forked with ring keys, put in by whoever
                    // can write the index), and no write of the seeder signs on top of it
                    // (attack review, round 8). A marker from before versions were recorded
                    // (version 0) records no floor.
                    if let Some((m, _)) = &marker
                        && m.version > 0
                        && s.index.version > m.version.saturating_add(1)
                    {
                        return Err(Error::Untrusted {
                            what: self.index_name(),
                            reason: format!(
                                "it is version {}, but {} records version {} as the last its \
                                 writers wrote: the versions in between were not written by \
                                 them (its active key is {}). Nothing was written; restore the \
                                 index to version {} from the store's previous versions, after \
                                 checking the keys it names",
                                s.index.version,
                                self.root_name(),
                                m.version,
                                s.index.active.as_ref().map_or("none", Kid::short),
                                m.version
                            ),
                        });
                    }
                    if let Some((m, _)) = &marker {
                        self.check_vouched(&s.index, m)?;
                    }
                    if marker.is_some() && s.index.is_signed() {
                        self.mark_written(&s.index).await?;
                    }
                    base = Some(s.index.clone());
                    (s.index, Some(s.version))
                }
                None if marker.is_some() => {
                    // The marker outlives the index: a ring that had a signed history is never
                    // started over (its keys would all be dropped), pinned or not.
                    return Err(Error::Refused(format!(
                        "{} does not exist, but {} records that this ring had a signed history: \
                         it is never created again; restore its index from the store's \
                         previous versions (or, for a new ring, use another name)",
                        self.index_name(),
                        self.root_name()
                    )));
                }
                None => {
                    // A pinned ring had a signed history: a missing index is one that was
                    // removed, never a new ring to start over under another root.
                    if let Some(pinned) = self.trust.anchor() {
                        return Err(Error::Refused(format!(
                            "{} does not exist, but this ring is pinned at anchor {}: a pinned \
                             ring is never created again; restore its index (or, for a new \
                             ring, run without the pin)",
                            self.index_name(),
                            pinned.short()
                        )));
                    }
                    (Index::empty(&self.name, SystemTime::now()), None)
                }
            };
            let (changed, result) = change(&mut index)?;
            if !changed {
                return Ok(result);
            }
            // The lifetime the index had, kept unless --lifetime changes it.
            let prior = index
                .expires
                .and_then(|e| Duration::try_from(e.duration_since(index.updated)).ok());
            index.updated = jiff::Timestamp::now();
            self.sign_change(&mut index, &signer, &mut keys, expected.is_none(), prior)
                .await?;
            let text = index.to_json();
            if text.len() > MAX_INDEX_BYTES {
                return Err(Error::Refused(format!(
                    "the index would hold {} bytes for {} keys, over Secrets Manager's 64 KiB \
                     limit for a value: retire old keys first (`kseal keys retire`)",
                    text.len(),
                    index.keys.len()
                )));
            }
            let ring = self.name.clone();
            let tags = [
                ("kseal.dev/ring", ring.as_str()),
                ("kseal.dev/part", "index"),
            ];
            // Before the index write, the marker records the digest of the index about to be
            // written (attack review, round 9: a ring-key fork at the marker's own version was
            // signed under a new root by the routine `re-root`, the marker recording only a
            // version); readers and the next write take nothing at that version or the next
            // that the marker does not vouch for. A write that hands the history to a new
            // dedicated root records that root at the same time, before the index names it
            // (the version stays the one written before): should the index write fail, readers
            // refuse the old index for not passing through the new root until the write is
            // retried (fail closed), rather than a failed marker write after it leaving readers
            // pinned at a ring key without the root a fork must pass through (round 6).
            let new_root = index
                .roots
                .last()
                .filter(|r| r.dedicated)
                .filter(|r| {
                    marker
                        .as_ref()
                        .and_then(|(m, _)| m.root.as_ref())
                        .is_none_or(|(seq, _)| *seq < r.seq)
                })
                .map(|r| (r.seq, r.kid.clone()));
            if let Some(from) = &base
                && (marker.is_some() || new_root.is_some())
            {
                self.mark_next(from, &index, new_root.clone()).await?;
                if new_root.is_some() {
                    marked_ahead_from.get_or_insert(started_from.clone().unwrap_or_default());
                }
            }
            match self
                .store
                .compare_and_swap(&name, &text, expected.as_ref(), &tags)
                .await
            {
                Ok(_) => {
                    self.mark_written(&index).await?;
                    return Ok(result);
                }
                Err(Error::Conflict { .. }) if attempt < CAS_ATTEMPTS => {
                    // Another writer won; back off a little (randomised) and re-apply.
                    let mut b = [0u8; 1];
                    let _ = getrandom::fill(&mut b);
                    let wait = 50 * u64::from(attempt) + u64::from(b[0]);
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A key of the ring, read once per call.
    async fn key_for<'k>(
        &self,
        kid: &Kid,
        keys: &'k mut HashMap<Kid, KeyPair>,
    ) -> Result<&'k KeyPair> {
        if !keys.contains_key(kid) {
            let pair = self.read_key(kid).await.map_err(|e| match e {
                Error::NotFound { what, .. } => Error::Refused(format!(
                    "signing the ring's index needs the private key of its root {} ({what}), \
                     which cannot be read: run this as the ring's seeder",
                    kid.short()
                )),
                e => e,
            })?;
            keys.insert(kid.clone(), pair);
        }
        Ok(&keys[kid])
    }

    /// Signs a changed index: the first key of a new ring (`new_ring`: no index existed)
    /// becomes its anchor, or the dedicated root (`--root`) does; a ring-key root that left the
    /// ring hands over to the active key; `Signer::ReRoot` hands the root to a dedicated root;
    /// the last root signs the whole index, with a fresh expiry.
    async fn sign_change(
        &self,
        index: &mut Index,
        signer: &Signer<'_>,
        keys: &mut HashMap<Kid, KeyPair>,
        new_ring: bool,
        prior_lifetime: Option<Duration>,
    ) -> Result<()> {
        if let Signer::Pushed(pair) = signer {
            keys.insert(Kid::of(pair.public_key()), (*pair).clone());
        }
        if index.roots.is_empty() {
            if let (Some(root), true) = (&self.root, new_ring) {
                // A new ring starts at its dedicated root: no ring key ever signs it.
                let record =
                    trust::dedicated_record(&index.ring, 1, None, root, async |_| Ok(None)).await?;
                index.roots.push(record);
            } else {
                let anchor = self.first_anchor(index, signer, keys, new_ring).await?;
                index.roots.push(trust::genesis(&index.ring, &anchor)?);
            }
        }
        if let Signer::ReRoot(next) = signer {
            let previous = index.roots[index.roots.len() - 1].clone();
            if previous.kid != *next.kid() {
                if index.entry(next.kid()).is_some()
                    || index.retired.iter().any(|r| &r.kid == next.kid())
                {
                    return Err(Error::Refused(format!(
                        "{} is a key of the ring: a dedicated root must be a key no cluster \
                         holds (a KMS key, or a file made by `kseal keys new-root`)",
                        next.key().describe()
                    )));
                }
                let previous_signer = self.root_signer_for(&previous, false)?;
                let seq = previous.seq + 1;
                let record = if previous.dedicated {
                    let current = previous_signer.ok_or_else(|| self.needs_root(&previous))?;
                    trust::dedicated_record(
                        &index.ring,
                        seq,
                        Some(&previous.kid),
                        next,
                        async |m| Ok(Some(current.sign(m).await?)),
                    )
                    .await?
                } else {
                    let pair = self.key_for(&previous.kid, keys).await?.clone();
                    trust::dedicated_record(
                        &index.ring,
                        seq,
                        Some(&previous.kid),
                        next,
                        async |m| Ok(Some(trust::sign_with_pair(&pair, m)?)),
                    )
                    .await?
                };
                index.roots.push(record);
            }
        }
        let last = index.roots[index.roots.len() - 1].clone();
        if !last.dedicated && index.entry(&last.kid).is_none() {
            // The root key is being retired: hand the root to the active key first, signed by
            // both, so readers can follow the chain.
            let next = index.active.clone().ok_or_else(|| {
                Error::Refused("the ring has no active key to take over as its root".into())
            })?;
            let previous_pair = self.key_for(&last.kid, keys).await?.clone();
            let next_pair = self.key_for(&next, keys).await?.clone();
            index.roots.push(trust::rotate_root(
                &index.ring,
                &last,
                &previous_pair,
                &next_pair,
            )?);
        }
        let last = index.roots[index.roots.len() - 1].clone();
        index.schema = INDEX_SCHEMA;
        index.version = index.version.checked_add(1).ok_or_else(|| {
            Error::Refused(format!(
                "{} is at version {}, the last one there is: it cannot be written again (an \
                 index this far along was not written by kseal's writers, which add one)",
                self.index_name(),
                index.version
            ))
        })?;
        index.expires = Some(self.expiry_for(index, prior_lifetime)?);
        if last.dedicated {
            let root = match signer {
                Signer::ReRoot(next) => *next,
                _ => self
                    .root_signer_for(&last, true)?
                    .ok_or_else(|| self.needs_root(&last))?,
            };
            trust::sign_index_dedicated(index, root).await
        } else {
            if self.root.is_some() && !matches!(signer, Signer::ReRoot(_)) {
                return Err(Error::Refused(format!(
                    "ring {:?} is still signed by its ring key {}, not by the dedicated root \
                     given with --root: move it once with `kseal keys re-root --root …`, or \
                     write without --root",
                    self.name,
                    last.kid.short()
                )));
            }
            let pair = self.key_for(&last.kid, keys).await?.clone();
            trust::sign_index(index, &pair)
        }
    }

    /// The anchor of a ring's first signed index (no `--root`): the key being pushed into a
    /// new ring, or the key a migration names.
    async fn first_anchor(
        &self,
        index: &Index,
        signer: &Signer<'_>,
        keys: &mut HashMap<Kid, KeyPair>,
        new_ring: bool,
    ) -> Result<KeyPair> {
        match (signer, index.keys.as_slice()) {
            (Signer::Pushed(pair), [only])
                if new_ring && only.kid == Kid::of(pair.public_key()) =>
            {
                Ok((*pair).clone())
            }
            (Signer::Pushed(_), _) if index.keys.len() == 1 => {
                // An index exists but held no key and no history: no kseal writes one,
                // so whoever can write the index emptied it. Starting a new history over
                // it would hand the ring to a new key and drop every earlier one.
                Err(Error::Refused(format!(
                    "{} exists but holds no key and no signed history: kseal never writes \
                     such an index, so it was emptied by hand or by an attacker; refusing \
                     to start a new history over it. Restore the signed index from the \
                     store's previous version, or delete it if this ring is really new",
                    self.index_name()
                )))
            }
            (Signer::Migrate(anchor), _) => Ok(self.key_for(anchor, keys).await?.clone()),
            _ => Err(Error::Refused(format!(
                "{} is not signed (written by a kseal before signed ring histories): \
                 sign it once with `kseal keys sign`, then try again",
                self.index_name()
            ))),
        }
    }

    /// The `--root` given, when it is the key of the dedicated root `record`; `None` without
    /// one. `required`: another root given is an error (it would sign what nobody can verify).
    fn root_signer_for(&self, record: &RootRecord, required: bool) -> Result<Option<&RootSigner>> {
        match &self.root {
            Some(root) if root.kid() == &record.kid => Ok(Some(root)),
            Some(root) if required || record.dedicated => Err(Error::Refused(format!(
                "--root {} is key {}, but ring {:?} is signed by its dedicated root {}{}",
                root.key().describe(),
                root.kid().short(),
                self.name,
                record.kid.short(),
                record
                    .location
                    .as_deref()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            ))),
            _ => Ok(None),
        }
    }

    /// "This ring is signed by its dedicated root: pass --root".
    fn needs_root(&self, record: &RootRecord) -> Error {
        Error::Refused(format!(
            "ring {:?} is signed by its dedicated root {}: writing to it needs that root, \
             --root {} (or KSEAL_RING_ROOT), as the ring's seeder",
            self.name,
            record.kid.short(),
            record.location.as_deref().unwrap_or("file://PATH")
        ))
    }

    /// When an index written now expires: `--lifetime`, else the lifetime the current index
    /// had, else [`DEFAULT_INDEX_LIFETIME`].
    fn expiry_for(&self, index: &Index, prior: Option<Duration>) -> Result<jiff::Timestamp> {
        let lifetime = match self.lifetime {
            Some(l) => {
                if !(MIN_INDEX_LIFETIME..=MAX_INDEX_LIFETIME).contains(&l) {
                    return Err(Error::Refused(format!(
                        "an index lifetime of {} s is outside {}..={} s (1 hour to 90 days)",
                        l.as_secs(),
                        MIN_INDEX_LIFETIME.as_secs(),
                        MAX_INDEX_LIFETIME.as_secs()
                    )));
                }
                l
            }
            None => prior
                .filter(|l| (MIN_INDEX_LIFETIME..=MAX_INDEX_LIFETIME).contains(l))
                .unwrap_or(DEFAULT_INDEX_LIFETIME),
        };
        let span = jiff::SignedDuration::try_from(lifetime)
            .map_err(|_| Error::Refused("the index lifetime is out of range".into()))?;
        index.updated.checked_add(span).map_err(|_| {
            Error::Refused("the index's expiry would be out of the supported time range".into())
        })
    }

    /// Turns an unsigned (schema 1) index into a signed history, anchored at its active key.
    /// Every entry is checked against its key secret first (the seeder can read them); an
    /// entry whose key secret does not hold its key is left out and reported.
    pub async fn sign(&self) -> Result<SignOutcome> {
        let snapshot = self.require_snapshot().await?;
        if let Verified::Signed { anchor, .. } = snapshot.verified {
            return Ok(SignOutcome::AlreadySigned(anchor));
        }
        // Only a ring that was never signed is migrated: a signed ring whose index was
        // replaced by an unsigned one (by whoever can write only the index) still has its
        // marker, and signing would bless what they wrote.
        if let Some((marker, _)) = self.store.read(&self.root_name(), None).await? {
            let anchor = serde_json::from_str::<serde_json::Value>(&marker)
                .ok()
                .and_then(|v| v.get("anchor").and_then(|a| a.as_str()).map(str::to_owned))
                .unwrap_or_else(|| "(unreadable)".to_owned());
            return Err(Error::Refused(format!(
                "ring {:?} was signed before ({} records anchor {}): its unsigned index \
                 replaced a signed one, and signing it would bless what its writer put there. \
                 Restore the signed index from the store's previous version",
                self.name,
                self.root_name(),
                anchor.get(..12).unwrap_or(&anchor)
            )));
        }
        let active = snapshot.index.active.clone().ok_or_else(|| {
            Error::Refused(
                "the ring has no active key to anchor its history: activate one first".into(),
            )
        })?;
        let mut good = Vec::new();
        let mut dropped = Vec::new();
        for entry in &snapshot.index.keys {
            match self.read_key(&entry.kid).await {
                Ok(_) => good.push(entry.kid.clone()),
                Err(Error::NotFound { .. } | Error::BadKey { .. } | Error::Malformed { .. }) => {
                    dropped.push(entry.kid.clone());
                }
                Err(e) => return Err(e),
            }
        }
        if !good.contains(&active) {
            return Err(Error::Refused(format!(
                "the active key {} has no readable key secret in the ring: it cannot anchor \
                 the history",
                active.short()
            )));
        }
        let anchor = active.clone();
        let drop = dropped.clone();
        // Only the index that was checked (and shown to the seeder) is signed: one written
        // meanwhile, between this read and the compare-and-swap or after a conflict, is
        // refused rather than signed unchecked.
        let checked = snapshot.index.to_json();
        let anchor_out = self
            .update(Signer::Migrate(&anchor), |index| {
                if index.is_signed() {
                    return Ok((false, None));
                }
                if index.to_json() != checked {
                    return Err(Error::Refused(
                        "the ring's unsigned index changed while its keys were checked: nothing \
                         was signed; check it with `kseal keys list` and run `kseal keys sign` \
                         again"
                            .into(),
                    ));
                }
                index.keys.retain(|e| !drop.contains(&e.kid));
                // `added` starts a key's activation delay, and whoever wrote the unsigned index
                // chose it: a key not active yet counts its delay from the migration.
                let now = jiff::Timestamp::now();
                let active = index.active.clone();
                for entry in &mut index.keys {
                    if active.as_ref() != Some(&entry.kid) {
                        entry.added = now;
                    }
                }
                Ok((true, Some(())))
            })
            .await?;
        match anchor_out {
            Some(()) => Ok(SignOutcome::Signed { anchor, dropped }),
            None => {
                let now = self.require_snapshot().await?;
                Ok(SignOutcome::AlreadySigned(
                    now.verified.anchor().cloned().unwrap_or(anchor),
                ))
            }
        }
    }

    /// Hands the ring's history to the dedicated root `next` (`kseal keys re-root`): a root
    /// record signed by the current root (a ring key, read as the seeder; or the dedicated
    /// root given with [`Ring::with_root`]) and by `next`, and the index signed by `next`.
    /// From then on ring keys never sign the history again, and readers pin `next`. `false`
    /// when `next` already is the ring's root.
    pub async fn re_root(&self, next: &RootSigner) -> Result<bool> {
        let next_kid = next.kid().clone();
        self.update(Signer::ReRoot(next), |index| {
            let last = index.roots.last().ok_or_else(|| {
                Error::Refused(format!(
                    "{} is not signed: sign it first (`kseal keys sign`)",
                    self.index_name()
                ))
            })?;
            Ok((last.kid != next_kid, last.kid != next_kid))
        })
        .await
    }

    /// Signs the index again with nothing changed but its version and expiry (`kseal keys
    /// refresh`): what keeps readers that refuse expired indexes reading. Returns the new
    /// version and expiry.
    pub async fn refresh(&self) -> Result<(u64, Option<jiff::Timestamp>)> {
        self.update(Signer::Root, |index| {
            if !index.is_signed() {
                return Err(Error::Refused(format!(
                    "{} is not signed: sign it first (`kseal keys sign`)",
                    self.index_name()
                )));
            }
            Ok((true, ()))
        })
        .await?;
        let now = self
            .snapshot_for_write()
            .await?
            .ok_or_else(|| Error::NotFound {
                what: self.index_name(),
                store: self.store.describe(),
            })?;
        Ok((now.index.version, now.index.expires))
    }

    /// Adds `pair` to the ring: its key secret (a no-op if the same key is there), then its
    /// index entry. The first key of a ring becomes active at once; later keys only through
    /// [`Ring::activate`].
    pub async fn push(&self, pair: &KeyPair) -> Result<PushOutcome> {
        Ok(self.push_where(pair, false).await?.0)
    }

    /// Adds `pair` only to a ring without keys, and atomically so: the emptiness check is part
    /// of the index's compare-and-swap, so of several seeders starting at once exactly one
    /// key enters the ring. `None` when the ring already had a key (then a key secret this
    /// call created for nothing is scheduled for deletion, with `recovery_days`). Pushing the
    /// key the ring already holds again is not refused: it returns its outcome, as
    /// [`Ring::push`] does.
    pub async fn push_if_empty(
        &self,
        pair: &KeyPair,
        recovery_days: u32,
    ) -> Result<Option<PushOutcome>> {
        let (outcome, another_key) = self.push_where(pair, true).await?;
        if !another_key {
            return Ok(Some(outcome));
        }
        // Only a key secret this call created: one that was there before (an earlier push
        // that stopped before the index) is not ours to delete.
        if outcome.stored == Put::Created {
            match self
                .store
                .schedule_deletion(&self.key_name(&outcome.kid), recovery_days)
                .await
            {
                Ok(()) | Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Stores `pair`'s key secret, then adds its index entry, unless `only_if_empty` and the
    /// ring holds another key: then nothing is indexed and the returned flag is true.
    async fn push_where(&self, pair: &KeyPair, only_if_empty: bool) -> Result<(PushOutcome, bool)> {
        let kid = Kid::of(pair.public_key());
        let entry = KeyEntry::from_pair(pair)?;
        let name = self.key_name(&kid);
        let same = |existing: &str| {
            KeyEntry::parse(existing, &name)
                .and_then(|e| e.to_pair(&name))
                .is_ok_and(|p| Kid::of(p.public_key()) == kid)
        };
        let tags = [
            ("kseal.dev/ring", self.name.as_str()),
            ("kseal.dev/kid", kid.as_str()),
            ("kseal.dev/part", "key"),
        ];
        // The kid is 64 characters: a valid ClientRequestToken, and the same for the same key.
        let stored = self
            .store
            .create_immutable(&name, &entry.to_json(), kid.as_str(), &tags, &same)
            .await?;
        drop(entry);
        let (indexed, activated, another_key) = self
            .update(Signer::Pushed(pair), |index| {
                if index.entry(&kid).is_some() {
                    return Ok((false, (false, false, false)));
                }
                if only_if_empty && !index.keys.is_empty() {
                    return Ok((false, (false, false, true)));
                }
                index.retired.retain(|r| r.kid != kid);
                index
                    .keys
                    .push(IndexEntry::new(pair.certificate(), SystemTime::now())?);
                let activate = index.active.is_none();
                if activate {
                    index.active = Some(kid.clone());
                }
                Ok((true, (true, activate, false)))
            })
            .await?;
        let outcome = PushOutcome {
            fingerprint: pair.id().to_string(),
            kid,
            stored,
            indexed,
            activated,
        };
        Ok((outcome, another_key))
    }

    /// Makes the key named by `key` (a kid, a unique kid prefix, or a fingerprint) the sealing
    /// key, once it has been in the index for `delay`. An expired certificate is refused.
    pub async fn activate(&self, key: &str, delay: Duration) -> Result<ActivateOutcome> {
        self.activate_if(key, delay, None).await
    }

    /// [`Ring::activate`], but only while the ring's active key is still `expected` (when
    /// given), checked inside the index's compare-and-swap: of two rotations that started
    /// from the same active key, only the first activation lands; the other is told
    /// ([`ActivateOutcome::Superseded`]) instead of silently replacing it.
    pub async fn activate_if(
        &self,
        key: &str,
        delay: Duration,
        expected: Option<&Option<Kid>>,
    ) -> Result<ActivateOutcome> {
        self.update(Signer::Root, |index| {
            let entry = index.resolve(key)?;
            let kid = entry.kid.clone();
            if index.active.as_ref() == Some(&kid) {
                return Ok((false, ActivateOutcome::AlreadyActive(kid)));
            }
            if let Some(expected) = expected
                && &index.active != expected
            {
                return Ok((
                    false,
                    ActivateOutcome::Superseded {
                        kid,
                        active: index.active.clone(),
                    },
                ));
            }
            let now = SystemTime::now();
            if entry.is_expired_at(now) {
                return Err(Error::Refused(format!(
                    "key {} expired on {}: an expired key still opens but never seals; push a new key",
                    kid.short(),
                    entry.not_after
                )));
            }
            let added = SystemTime::from(entry.added);
            let ready_at = added + delay;
            if now < ready_at {
                return Ok((false, ActivateOutcome::TooYoung { kid, ready_at }));
            }
            let previous = index.active.replace(kid.clone());
            Ok((true, ActivateOutcome::Activated { kid, previous }))
        })
        .await
    }

    /// Removes the key named by `key` from the index and schedules its key secret's deletion
    /// after `recovery_days`. Refuses the active key and the last key. Proving that nothing
    /// still needs the key is the caller's job (`kseal keys retire --check`).
    pub async fn retire(&self, key: &str, recovery_days: u32) -> Result<RetireOutcome> {
        let kid = self
            .update(Signer::Root, |index| {
                let kid = index.resolve(key)?.kid.clone();
                if index.active.as_ref() == Some(&kid) {
                    return Err(Error::Refused(format!(
                        "key {} is the active sealing key: activate another key first",
                        kid.short()
                    )));
                }
                if index.keys.len() <= 1 {
                    return Err(Error::Refused(format!(
                        "key {} is the last key of the ring",
                        kid.short()
                    )));
                }
                index.keys.retain(|e| e.kid != kid);
                index.retired.push(RetiredEntry {
                    kid: kid.clone(),
                    retired: jiff::Timestamp::now(),
                });
                Ok((true, kid))
            })
            .await?;
        let deletion_scheduled = match self
            .store
            .schedule_deletion(&self.key_name(&kid), recovery_days)
            .await
        {
            Ok(()) => true,
            Err(Error::NotFound { .. }) => false,
            Err(e) => return Err(e),
        };
        Ok(RetireOutcome {
            kid,
            deletion_scheduled,
        })
    }

    /// Writes the active key to the single secret `name` in the same store, in the reference
    /// sample's `{"crt","key"}` format, for clusters still on External Secrets Operator and
    /// Bitnami. Returns the active kid.
    pub async fn mirror_active_to(&self, name: &str) -> Result<Kid> {
        let snapshot = self.require_snapshot().await?;
        let Some(kid) = snapshot.index.active.clone() else {
            return Err(Error::Refused("the ring has no active key".into()));
        };
        let pair = self.read_key(&kid).await?;
        let entry = KeyEntry::from_pair(&pair)?;
        let tags = [
            ("kseal.dev/ring", self.name.as_str()),
            ("kseal.dev/part", "mirror"),
        ];
        self.store.put(name, &entry.to_json(), &tags).await?;
        Ok(kid)
    }
}
