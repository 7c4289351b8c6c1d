//! Adopting the index under a history marker an older kseal wrote (no digest): the marker
//! vouches for its version only, so a write builds on the index at that version only once the
//! seeder adopts it by its digest (`--adopt-index`, attack review round 11, L1). Before the
//! refusal offers an adoption and before one is taken, every stored version of the index is
//! searched for other indexes of that version (round 14, AF1: a fork signed with a ring key at
//! the marker's version was offered, adopted and signed on, although the store's versions
//! held the real one beside it; the seeder's writes leave one index per version). A directory
//! keeps no versions: there the refusal prints the one index it holds, as before. Neither is
//! an index offered or adopted while a key it lists has no key secret, and the index this
//! machine read at that version ([`Ring::with_seen_index`]) counts as another index of it
//! (round 15, PG: a fork was the only index of its version once the real one was purged).

use std::collections::BTreeSet;

use crate::contract::{Index, Kid};
use crate::{Error, Result, Version};

use super::marker::{newest_dedicated, restore_vouched};
use super::write::MAX_VERSIONS_SEARCHED;
use super::{Marker, Ring, Snapshot};

impl Ring {
    /// Under a history marker an older kseal wrote (no digest), a write would record the
    /// digest of whatever index it builds on, a fork at the marker's version included
    /// (attack review, round 11, L1): it builds only on the index the seeder adopted by its
    /// digest (`--adopt-index`), after checking what the refusal prints. When the store holds
    /// other indexes of that version, the adoption names each of them after the adopted one
    /// (`--adopt-index ADOPTED,OTHER…`), having seen them all (round 14, AF1).
    pub(super) async fn check_adopted(&self, s: &Snapshot, marker: &Marker) -> Result<()> {
        let index = &s.index;
        // A dedicated root the marker does not record is never adopted: whoever holds a ring
        // key can sign one into a copy of the real index (attack review, round 12).
        let root = newest_dedicated(index);
        if root.is_some() && root != marker.root {
            return Err(Error::Untrusted {
                what: self.index_name(),
                reason: format!(
                    "its history names the dedicated root {} that {} does not record: a root \
                     put in by whoever holds a ring key. Nothing was written; restore the index \
                     the seeder wrote last",
                    root.as_ref().map_or("", |(_, k)| k.short()),
                    self.root_name()
                ),
            });
        }
        // The search comes first, flag or not: one that fails offers and takes nothing.
        let stored = self
            .stored_at(index.version, Some(s))
            .await
            .map_err(|e| self.adoption_search_failed(index.version, e))?;
        let before = self.check_no_skip(index, marker).await?;
        let digest = index.digest();
        // The index this machine read at that version, when the store no longer holds it (its
        // version purged, round 15, PG), is another index of that version too.
        let seen = self
            .seen_index
            .as_ref()
            .filter(|(v, d)| *v == index.version && !stored.iter().any(|(_, i)| i.digest() == *d))
            .map(|(_, d)| d.clone());
        let mut others: BTreeSet<String> = stored[1..].iter().map(|(_, i)| i.digest()).collect();
        others.extend(seen.clone());
        let mut given = self.adopt_index.iter().flat_map(|a| a.split(','));
        let adopted = given.next().map(str::trim);
        let named: BTreeSet<String> = given
            .map(|d| d.trim().to_owned())
            .filter(|d| !d.is_empty())
            .collect();
        let accepted = adopted == Some(digest.as_str()) && named == others;
        // Offered alone or taken: every key it lists has its key secret first (round 15, PG).
        if accepted || others.is_empty() {
            self.check_key_secrets(index).await?;
        }
        if accepted {
            return Ok(());
        }
        if let Some(seen) = seen {
            return Err(Error::Untrusted {
                what: self.index_name(),
                reason: format!(
                    "{} was written by an older kseal and records no digest of the index, and \
                     this machine read another index of version {} before, with SHA-256 \
                     {seen}, which the store no longer holds: the seeder's writes leave one \
                     index per version, so one of them was put in by whoever can write the \
                     index (a fork signed with a ring key). Nothing was written and nothing \
                     adopted. The store holds: {}. Check each against the index you wrote \
                     last and restore that one if it is not the current one (from a backup if \
                     it is the one read before), then write again with --adopt-index naming \
                     its SHA-256 first and every other one after it, {seen} included",
                    self.root_name(),
                    index.version,
                    self.listed(&stored, &s.version)
                ),
            });
        }
        if others.is_empty() {
            return Err(Error::Refused(format!(
                "{} was written by an older kseal and records no digest of the index{}, so \
                 whether {} ({}) is the one its writers wrote cannot be told: a fork at that \
                 version would be signed on. If these are the version and keys you wrote last, \
                 write again with --adopt-index {digest}{}",
                self.root_name(),
                match &before {
                    _ if !marker.bounds_no_version() => String::new(),
                    Some((id, prev)) => format!(
                        " nor any version (check the version too; the store's newest older \
                         index is VersionId {id}: {}: compare what changed)",
                        described(prev)
                    ),
                    None => " nor any version (check the version too)".to_owned(),
                },
                self.index_name(),
                described(index),
                match adopted {
                    Some(a) if a == digest =>
                        " (and no other digest: the store holds no other \
                                               index of that version)",
                    Some(_) => " (the digest given is another index's)",
                    None => "",
                }
            )));
        }
        Err(Error::Untrusted {
            what: self.index_name(),
            reason: format!(
                "{} was written by an older kseal and records no digest of the index, and the \
                 store holds {} different indexes of version {}: the seeder's writes leave one \
                 per version, so all but one were put in by whoever can write the index (a \
                 fork signed with a ring key). Nothing was written and nothing adopted{}. {}. \
                 Check the active key, keys and retired keys of each against the ones you \
                 wrote last; restore that index if it is not the current one, then write again \
                 with --adopt-index naming its SHA-256 first and every other one after it, as \
                 printed beside it (after restoring, the adoption must still be given)",
                self.root_name(),
                stored.len(),
                index.version,
                if self.adopt_index.is_some() {
                    " (an adoption names the index adopted, then every other index of that \
                     version)"
                } else {
                    ""
                },
                self.listed(&stored, &s.version)
            ),
        })
    }

    /// Every key `index` lists, the active one included, has its key secret in the store
    /// (attack review, round 15, PG: with the real index purged from the store's versions, a
    /// fork whose active key had no `R/keys/<kid>` was the only index of its version and was
    /// adopted). The ring's writers store a key's secret before listing the key, so a key
    /// without one is a fork's mark: the adoption is neither offered nor taken.
    async fn check_key_secrets(&self, index: &Index) -> Result<()> {
        let mut missing = Vec::new();
        for kid in index
            .keys
            .iter()
            .map(|e| &e.kid)
            .chain(index.active.as_ref())
        {
            if missing.contains(&kid) {
                continue;
            }
            let name = self.key_name(kid);
            match self.store.current_version(&name).await {
                Ok(Some(_)) => {}
                Ok(None) => missing.push(kid),
                Err(e) => {
                    return Err(Error::Refused(format!(
                        "{} was written by an older kseal and records no digest of the index: \
                         before an adoption is offered or taken, the key secret of every key \
                         {} lists is looked up, and looking up {name} failed: {e}. Nothing was \
                         written or adopted",
                        self.root_name(),
                        self.index_name()
                    )));
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = missing.iter().map(|k| self.key_name(k)).collect();
        Err(Error::Untrusted {
            what: self.index_name(),
            reason: format!(
                "{} was written by an older kseal and records no digest of the index, and {} \
                 ({}) lists {} {} with no key secret ({} absent from {}): the ring's writers \
                 store a key's secret before listing the key, so this index was put in by \
                 whoever can write the index (a fork signed with a ring key). Nothing was \
                 written and nothing adopted, and no --adopt-index adopts it. Restore the \
                 index the seeder wrote last (its stored versions, or a backup), then write \
                 again with --adopt-index naming its SHA-256",
                self.root_name(),
                self.index_name(),
                described(index),
                if missing.len() == 1 { "key" } else { "keys" },
                missing
                    .iter()
                    .map(|k| k.short())
                    .collect::<Vec<_>>()
                    .join(", "),
                names.join(", "),
                self.store.describe()
            ),
        })
    }

    /// What to restore when an index ahead of a marker without a digest was put in place (see
    /// [`restore_vouched`]): every index of the marker's version the store holds, each with
    /// the command that restores it and the adoption to give then (attack review, round 14,
    /// AF1b: "restore to version 3" named no index where the store held two). The general
    /// advice where the store keeps no versions, holds none of that version, or the search
    /// fails (the write is refused either way).
    pub(super) async fn restore_unrecorded(&self, s: &Snapshot, marker: &Marker) -> String {
        let general = restore_vouched(marker, &self.index_name(), &self.root_name());
        match self.stored_at(marker.version, None).await {
            Ok(stored) if stored.is_empty() => general,
            Ok(stored) => format!(
                "restore {} to the version {} you wrote last, after checking the keys it names; \
                 the store holds {} of that version{}: {}",
                self.index_name(),
                marker.version,
                stored.len(),
                if stored.len() > 1 {
                    ", and the seeder's writes leave one per version, so all but one were put \
                     in by whoever can write the index"
                } else {
                    ""
                },
                self.listed(&stored, &s.version)
            ),
            Err(e) => format!("{general} (the search of its stored versions failed: {e})"),
        }
    }

    /// The different indexes of `version` the store holds (one per digest), `current` first
    /// when it is given: only `current` on a directory, which keeps no versions.
    async fn stored_at(
        &self,
        version: u64,
        current: Option<&Snapshot>,
    ) -> Result<Vec<(Version, Index)>> {
        let mut stored: Vec<(Version, Index)> = current
            .map(|s| (s.version.clone(), s.index.clone()))
            .into_iter()
            .collect();
        let mut digests: Vec<String> = stored.iter().map(|(_, i)| i.digest()).collect();
        self.search_stored(
            || {
                format!(
                    "{} has more than {MAX_VERSIONS_SEARCHED} stored versions, too many to \
                     search for every index of version {version}: nothing was written or \
                     adopted. Ask why the index was written so often",
                    self.index_name()
                )
            },
            |id, index| {
                let digest = index.digest();
                if index.version == version && !digests.contains(&digest) {
                    digests.push(digest);
                    stored.push((id.clone(), index));
                }
                false
            },
        )
        .await?;
        Ok(stored)
    }

    /// Under a marker with no version, which bounds none (round 16, N2): the newest older
    /// index the store holds (shown in the offer, to compare with), refusing an index that
    /// skips versions past it, since the seeder's writes raise the version by one.
    async fn check_no_skip(
        &self,
        index: &Index,
        marker: &Marker,
    ) -> Result<Option<(Version, Index)>> {
        if !marker.bounds_no_version() {
            return Ok(None);
        }
        let before = self
            .stored_before(index.version)
            .await
            .map_err(|e| self.adoption_search_failed(index.version, e))?;
        if let Some((id, prev)) = &before
            && prev.version.saturating_add(1) < index.version
        {
            return Err(Error::Untrusted {
                what: self.index_name(),
                reason: format!(
                    "{} was written by an older kseal and records neither a digest nor a \
                     version, and the newest older index the store holds is version {} \
                     (VersionId {id}: {}): the seeder's writes raise the version by one, so \
                     {} ({}) skips versions its writers never wrote and was put in by whoever \
                     can write the index (a fork signed with a ring key). Nothing was written \
                     and nothing adopted, and no --adopt-index adopts it. Restore the index you \
                     wrote last, then write again with --adopt-index naming its SHA-256",
                    self.root_name(),
                    prev.version,
                    described(prev),
                    self.index_name(),
                    described(index),
                ),
            });
        }
        Ok(before)
    }

    /// The newest index older than `version` the store holds, by its VersionId (`None` on a
    /// directory, which keeps no versions, or when the store holds none).
    async fn stored_before(&self, version: u64) -> Result<Option<(Version, Index)>> {
        let mut newest: Option<(Version, Index)> = None;
        self.search_stored(
            || {
                format!(
                    "{} has more than {MAX_VERSIONS_SEARCHED} stored versions, too many to \
                     search for the index before version {version}: nothing was written or \
                     adopted. Ask why the index was written so often",
                    self.index_name()
                )
            },
            |id, index| {
                if index.version < version
                    && newest
                        .as_ref()
                        .is_none_or(|(_, n)| n.version < index.version)
                {
                    newest = Some((id.clone(), index));
                }
                false
            },
        )
        .await?;
        Ok(newest)
    }

    /// A search for the other indexes of the version an adoption is about that failed: the
    /// adoption is neither offered nor taken (fail closed).
    fn adoption_search_failed(&self, version: u64, e: Error) -> Error {
        match e {
            Error::Refused(_) => e,
            e => Error::Refused(format!(
                "{} was written by an older kseal and records no digest of the index: before \
                 an adoption is offered or taken, the stored versions of {} are searched for \
                 other indexes of version {version}, and that failed: {e}. Nothing was written \
                 or adopted",
                self.root_name(),
                self.index_name()
            )),
        }
    }

    /// Each of `stored` by its VersionId, with what to check, the command that restores it
    /// over `current` (the VersionId of the index in place) and the adoption to give then.
    fn listed(&self, stored: &[(Version, Index)], current: &Version) -> String {
        let digests: Vec<String> = stored.iter().map(|(_, i)| i.digest()).collect();
        stored
            .iter()
            .zip(&digests)
            .map(|((id, index), digest)| {
                let adopt: Vec<&str> = std::iter::once(digest.as_str())
                    .chain(digests.iter().map(String::as_str).filter(|d| d != digest))
                    .collect();
                let restore = if id == current {
                    String::new()
                } else {
                    format!(
                        "; restored with `aws secretsmanager update-secret-version-stage \
                         --secret-id {} --version-stage AWSCURRENT --move-to-version-id {id} \
                         --remove-from-version-id {current}`",
                        self.index_name()
                    )
                };
                format!(
                    "VersionId {id}{}: {}, SHA-256 {digest}{}; adopted with --adopt-index {}",
                    if id == current { " (current)" } else { "" },
                    described(index),
                    restore,
                    adopt.join(",")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// An index's version, active key, keys and retired keys, as `kseal keys list` names them.
fn described(index: &Index) -> String {
    let kids = |kids: &mut dyn Iterator<Item = &Kid>| {
        let listed: Vec<&str> = kids.map(Kid::short).collect();
        if listed.is_empty() {
            "none".to_owned()
        } else {
            listed.join(", ")
        }
    };
    format!(
        "version {}, active key {}, keys {}, retired keys {}",
        index.version,
        index.active.as_ref().map_or("none", Kid::short),
        kids(&mut index.keys.iter().map(|e| &e.kid)),
        kids(&mut index.retired.iter().map(|r| &r.kid)),
    )
}
