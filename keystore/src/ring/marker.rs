//! The history marker (`R/root`, a directory's `root.json`): what it records ([`Marker`]),
//! what it says of an index ([`Vouch`]), and the ring's reads and compare-and-swap writes of
//! it, with the checks a write makes of the index it builds on against it.

use crate::contract::{Index, Kid};
use crate::trust::Verified;
use crate::{Error, Result, Version};

use super::{CAS_ATTEMPTS, Ring, Snapshot};

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
            // A marker written before digests were recorded vouches for nothing past its own
            // version (attack review, round 10: on a ring last written by an older kseal, a
            // fork at the next version was adopted by the upgraded seeder's re-root): its
            // writers moved it after every index write, so only a failed marker write leaves
            // the index one ahead, and that is not told apart from a fork. A marker from
            // before versions were recorded (version 0) records no version either.
            return if index.version == self.version || self.version == 0 {
                Vouch::Unrecorded
            } else {
                Vouch::NotWritten
            };
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

    /// Whether an older kseal wrote this marker (no digest): it vouches for no index of its
    /// version, nor tells one from a fork at that version. A marker from before versions were
    /// recorded (version 0, no digest) is one too, and bounds no version at all: it was read
    /// as "nothing to check" before (attack review, round 16, N2), so a fork at any version
    /// sealed under it; now it fails closed like every marker without a digest.
    pub fn records_no_digest(&self) -> bool {
        self.digest.is_none()
    }

    /// Whether this marker records neither a digest nor a version (builds from before versions
    /// were recorded): it bounds no version, so an index it cannot vouch for may be a fork at
    /// any version, far ahead included. Readers raise no floor from such an index, and a write
    /// adopting one checks it against the store's older indexes (attack review, rounds 16 to
    /// 18).
    pub fn bounds_no_version(&self) -> bool {
        self.version == 0 && self.records_no_digest()
    }

    /// Whether `index` is one this marker cannot vouch for because an older kseal wrote it
    /// ([`Marker::records_no_digest`]) at `index`'s version (any version, for a marker with
    /// no version): readers seal nothing to it, controllers withhold sealing, and a writer
    /// builds on it only once it is adopted.
    pub fn cannot_vouch(&self, index: &Index) -> bool {
        self.vouches(index) == Vouch::Unrecorded
    }
}

impl Marker {
    /// The writes this marker records as pending over `index` (their digests): none unless
    /// `index` is the one it vouches for as written at its version. A write between its
    /// marker update and its index write leaves some for a moment; otherwise that write failed
    /// before its index write, or went through and was undone by putting `index` back (attack
    /// review, round 12, U1): writers refuse to build on `index` then (`--drop-pending
    /// <SHA-256>` after checking, never for a write the store still holds: round 13, U2), and
    /// pinned readers warn.
    pub fn pending_over(&self, index: &Index) -> &[String] {
        if self.vouches(index) == Vouch::Written {
            &self.next
        } else {
            &[]
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

/// What to restore when an index the marker does not vouch for was put in place: the
/// previous version of the index (`index_name`) whose text's SHA-256 is the digest the marker
/// (`marker_name`) records, which names it exactly even where two stored versions claim the
/// same version number (attack review, round 9, #7).
pub fn restore_vouched(marker: &Marker, index_name: &str, marker_name: &str) -> String {
    // A write recorded as pending may have gone through (its marker update failed): restoring
    // the older version would undo it (attack review, round 11, U1).
    let pending = if marker.next.is_empty() {
        String::new()
    } else {
        format!(
            "; but first look for a stored version whose SHA-256 is {} (a write at version {} \
             that {marker_name} records as pending, which may have gone through): if there is \
             one, restore that instead",
            marker.next.join(" or "),
            marker.version.saturating_add(1)
        )
    };
    match &marker.digest {
        Some(digest) => format!(
            "restore {index_name} to the store's previous version whose text has SHA-256 \
             {digest} (the version {} that {marker_name} vouches for; check its keys), \
             then write again{pending}",
            marker.version
        ),
        None => format!(
            "restore {index_name} to version {} from the store's previous versions, after \
             checking the keys it names",
            marker.version
        ),
    }
}

/// Why `marker` does not vouch for `index` ([`Vouch::NotWritten`]), naming the index's active
/// key: the one a fork wants sealing. `marker_name` is the marker's name in the store.
pub fn not_vouched(index: &Index, marker: &Marker, marker_name: &str) -> String {
    let digest = index.digest();
    let what = if marker.digest.is_none() {
        format!(
            "it is version {}, but {marker_name} (written by an older kseal, with no digest) \
             records version {} as the last its writers wrote, and an index ahead of it cannot \
             be told from a fork",
            index.version, marker.version
        )
    } else if index.version == marker.version {
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
pub(super) fn newest_dedicated(index: &Index) -> Option<(u64, Kid)> {
    index
        .roots
        .iter()
        .rev()
        .find(|r| r.dedicated)
        .map(|r| (r.seq, r.kid.clone()))
}

impl Ring {
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
    pub(super) async fn marker(&self) -> Result<Option<(Marker, Version)>> {
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
    pub(super) async fn mark_written(&self, index: &Index) -> Result<()> {
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
    pub(super) async fn mark_next(
        &self,
        from: &Index,
        next: &Index,
        root: Option<(u64, Kid)>,
    ) -> Result<()> {
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
    pub(super) fn check_against_marker(
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
    /// Under a marker without a digest, the index at its version is written on only once
    /// adopted ([`Ring::check_adopted`]), and the refusal of one ahead of it names every
    /// index of the marker's version the store holds ([`Ring::restore_unrecorded`]).
    pub(super) async fn check_vouched(&self, s: &Snapshot, marker: &Marker) -> Result<()> {
        let index = &s.index;
        if marker.cannot_vouch(index) {
            return self.check_adopted(s, marker).await;
        }
        if marker.vouches(index) != Vouch::NotWritten || index.version > marker.version + 1 {
            return Ok(());
        }
        let restore = if marker.digest.is_none() {
            self.restore_unrecorded(s, marker).await
        } else {
            restore_vouched(marker, &self.index_name(), &self.root_name())
        };
        Err(Error::Untrusted {
            what: self.index_name(),
            reason: format!(
                "{}. Nothing was written; {restore}",
                not_vouched(index, marker, &self.root_name()),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(version: u64) -> Index {
        let mut index = Index::empty("kseal/t", std::time::SystemTime::UNIX_EPOCH);
        index.version = version;
        index
    }

    fn marker(version: u64, digest: Option<&Index>, next: &[&Index]) -> Marker {
        Marker {
            version,
            anchor: None,
            root: None,
            digest: digest.map(Index::digest),
            next: next.iter().map(|i| i.digest()).collect(),
        }
    }

    /// What a marker vouches for: the index written at its version, a pending one at the
    /// next, nothing else; a marker without a digest (an older kseal's) only its own version
    /// (attack review, round 10), and one without a version (older still) anything.
    #[test]
    fn a_marker_vouches_for_its_writes_only() {
        let (v3, v4) = (index(3), index(4));
        let mut fork3 = index(3);
        fork3.ring = "kseal/t".into();
        fork3.active = None;
        fork3.updated = jiff::Timestamp::from_second(1).unwrap();
        let written = marker(3, Some(&v3), &[&v4]);
        assert_eq!(written.vouches(&v3), Vouch::Written);
        assert_eq!(written.vouches(&v4), Vouch::Pending);
        assert_eq!(written.vouches(&fork3), Vouch::NotWritten);
        assert_eq!(written.vouches(&index(2)), Vouch::Older);
        assert_eq!(written.vouches(&index(5)), Vouch::NotWritten);
        assert_eq!(marker(3, Some(&v3), &[]).vouches(&v4), Vouch::NotWritten);
        let legacy = marker(3, None, &[]);
        assert_eq!(legacy.vouches(&v3), Vouch::Unrecorded);
        assert_eq!(legacy.vouches(&fork3), Vouch::Unrecorded);
        assert_eq!(legacy.vouches(&v4), Vouch::NotWritten);
        assert_eq!(legacy.vouches(&index(2)), Vouch::Older);
        assert_eq!(marker(0, None, &[]).vouches(&v4), Vouch::Unrecorded);
        // Neither vouches for an index it cannot tell from a fork (round 16, N2: a marker
        // with no version was read as one with nothing to check).
        assert!(legacy.cannot_vouch(&v3) && legacy.cannot_vouch(&fork3));
        assert!(!legacy.cannot_vouch(&v4) && !legacy.cannot_vouch(&index(2)));
        let versionless = Marker::parse(r#"{"anchor":"x"}"#).unwrap();
        assert_eq!(versionless.version, 0);
        assert!(versionless.records_no_digest() && legacy.records_no_digest());
        assert!(versionless.bounds_no_version() && !legacy.bounds_no_version());
        assert!(!marker(0, Some(&v3), &[]).bounds_no_version());
        assert!(versionless.cannot_vouch(&v4) && versionless.cannot_vouch(&index(0)));
        assert!(!written.records_no_digest() && !written.cannot_vouch(&fork3));
        let parsed = Marker::parse(
            &serde_json::json!({"version": 3, "digest": v3.digest(), "next": [v4.digest(), "x"]})
                .to_string(),
        )
        .unwrap();
        assert_eq!(
            parsed,
            marker(3, Some(&v3), &[&v4]),
            "malformed digests are dropped"
        );
        assert!(Marker::parse("[1]").is_none() && Marker::parse("not json").is_none());
    }

    /// A write recorded as pending over the index the marker vouches for: named for that
    /// index only (attack review, round 12, U1); once the pending index is in place it is
    /// vouched for as pending instead, and the marker catches up to it.
    #[test]
    fn pending_writes_are_named_over_the_written_index_only() {
        let (v3, v4) = (index(3), index(4));
        let written = marker(3, Some(&v3), &[&v4]);
        assert_eq!(written.pending_over(&v3), [v4.digest()].as_slice());
        assert!(
            written.pending_over(&v4).is_empty(),
            "the pending write landed"
        );
        assert!(written.pending_over(&index(2)).is_empty());
        let mut fork3 = index(3);
        fork3.active = None;
        fork3.updated = jiff::Timestamp::from_second(1).unwrap();
        assert!(
            written.pending_over(&fork3).is_empty(),
            "refused as not written"
        );
        assert!(marker(3, Some(&v3), &[]).pending_over(&v3).is_empty());
        assert!(marker(3, None, &[]).pending_over(&v3).is_empty());
    }
}
