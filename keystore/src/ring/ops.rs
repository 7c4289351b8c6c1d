//! The ring operations its writers run: `sign` (migrate an unsigned index), `re_root`,
//! `refresh`, `push`, `activate`, `retire`, and `mirror_active_to`, each one change applied
//! through `Ring::update`.

use std::time::{Duration, SystemTime};

use kseal_keys::KeyPair;

use crate::contract::{IndexEntry, KeyEntry, Kid};
use crate::root::RootSigner;
use crate::trust::{RetiredEntry, Verified};
use crate::{Error, Put, Result};

use super::{ActivateOutcome, PushOutcome, RetireOutcome, Ring, SignOutcome, Signer};

impl Ring {
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
