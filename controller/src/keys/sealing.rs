//! Which keys open and which one seals: [`build_ring`] parses candidate keys (cached per
//! `(origin, version)` in a [`ParseCache`]) into a ring ordered per `--key-order-priority`,
//! and chooses its sealing key per [`SealingChoice`]: the newest unexpired key without a key
//! source, else only the verified ring view's active key, or the last verified one
//! ([`RingSealing`]); the sealing state is published into readiness from here too.

use std::collections::HashMap;
use std::time::SystemTime;

use kseal_keys::{KeyId, KeyPair, KeyRing};
use kseal_keystore::Kid;

use super::{KeyMaterial, Rejection};
use crate::config::KeyOrder;
use crate::keys::ringview::RingView;
use crate::state::{SealingProblem, State};

/// Parsed keys, cached per `(origin, version)` so unchanged Secrets are not parsed again.
#[derive(Default)]
pub struct ParseCache {
    entries: HashMap<(String, String), Result<KeyPair, Rejection>>,
}

/// How [`build_ring`] chooses the sealing key.
#[derive(Debug, Clone, Copy)]
pub enum SealingChoice<'a> {
    /// No key source: the newest unexpired key seals (Bitnami's rule).
    Newest,
    /// A key source (`--key-source`): only the ring view's active key seals, once a loaded key
    /// proves to be it (its material hashes to the kid). While it cannot seal, `last` (the
    /// last active key verified by this process) or the view's last verified active key
    /// seals instead; else nothing does. Never the newest key, never a key that was not
    /// activated.
    Ring {
        /// The ring view (`None`: no index read yet).
        view: Option<&'a RingView>,
        /// The last active key this process verified.
        last: Option<&'a Kid>,
    },
}

/// What sealing looks like with a key source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingSealing {
    /// No key source.
    NotApplicable,
    /// The ring view's active key seals.
    Active(Kid),
    /// The active key cannot seal (`problem`); the last verified active key `kid` does.
    LastVerified {
        /// The key that seals.
        kid: Kid,
        /// Why the active key does not.
        problem: String,
    },
    /// Nothing seals, for this reason.
    Refused(String),
}

/// One loaded key and what the key Secrets holding it say (several Secrets may hold one key).
#[derive(Debug, Clone)]
pub struct LoadedCopies {
    /// The key's kid.
    pub kid: Kid,
    /// The key's fingerprint in the ring.
    pub id: KeyId,
    /// The `kseal.dev/ring` annotation of each kseal-made copy (a mirror), `None` where a
    /// mirror has none; empty when only the cluster's own key Secrets hold it.
    pub mirror_rings: Vec<Option<String>>,
}

/// What [`build_ring`] produced.
#[derive(Debug)]
pub struct Built {
    /// The ring.
    pub ring: KeyRing,
    /// Keys rejected for the first time (not reported before), with why.
    pub newly_rejected: Vec<(usize, Rejection)>,
    /// Usable keys that are copies of a fleet ring's keys: labelled as mirrors and, with a
    /// ring view, holding a key of the view (proven by material, not by labels). They make a
    /// restart during a key-source outage ready to open; what seals is decided by the view.
    pub mirrored: usize,
    /// With a key source, which key seals and why.
    pub ring_sealing: RingSealing,
    /// Loaded keys by kid.
    pub by_kid: HashMap<Kid, KeyId>,
    /// Every loaded key, with what its key Secrets say of it.
    pub loaded: Vec<LoadedCopies>,
}

/// Parses `materials` into a ring ordered per `order`, the sealing key chosen per `choice`.
/// Rejected keys are skipped.
pub fn build_ring(
    materials: &[KeyMaterial],
    order: KeyOrder,
    cache: &mut ParseCache,
    choice: SealingChoice<'_>,
) -> Built {
    let mut ring = KeyRing::new();
    let mut newly_rejected = Vec::new();
    let mut seen = HashMap::with_capacity(materials.len());
    let now = SystemTime::now();
    let view = match choice {
        SealingChoice::Ring { view, .. } => view,
        SealingChoice::Newest => None,
    };
    // Loaded keys by kid (the SHA-256 of the public key: what the ring's index lists).
    let mut by_kid: HashMap<Kid, KeyId> = HashMap::new();
    let mut mirrored = 0;
    let mut loaded = Vec::new();
    for (index, material) in materials.iter().enumerate() {
        let key = (material.origin.clone(), material.version.clone());
        let parsed = match cache.entries.remove(&key) {
            Some(parsed) => parsed,
            None => {
                let parsed = match &material.pem {
                    Ok(pem) => KeyPair::from_pem(&pem.private_key, &pem.certificate)
                        .map_err(|e| Rejection::from_keys_error(&e)),
                    Err(r) => Err(r.clone()),
                };
                if let Err(r) = &parsed {
                    newly_rejected.push((index, r.clone()));
                }
                parsed
            }
        };
        if let Ok(pair) = &parsed {
            let kid = Kid::of(pair.public_key());
            // Without a view yet (a restart during a key-source outage, with no anchor pinned to
            // verify the ring-state Secret against), a labelled mirror counts for readiness:
            // it opens, and nothing seals until the ring is read.
            if material.mirror && view.is_none_or(|v| v.contains(&kid)) {
                mirrored += 1;
            }
            // Every copy counts: the oldest must not decide alone what a key is.
            let at = match loaded
                .iter()
                .position(|l: &LoadedCopies| l.id == *pair.id())
            {
                Some(at) => at,
                None => {
                    loaded.push(LoadedCopies {
                        kid: kid.clone(),
                        id: pair.id().clone(),
                        mirror_rings: Vec::new(),
                    });
                    loaded.len() - 1
                }
            };
            if material.mirror {
                loaded[at].mirror_rings.push(material.ring.clone());
            }
            by_kid.insert(kid, pair.id().clone());
            let pair = match (order, material.created) {
                (KeyOrder::SecretCreationTimestamp, Some(created)) => {
                    pair.clone().with_order_time(created)
                }
                _ => pair.clone(),
            };
            ring.insert(pair);
        }
        seen.insert(key, parsed);
    }
    cache.entries = seen;
    let ring_sealing = match choice {
        SealingChoice::Newest => {
            let unexpired = ring
                .keys()
                .find(|k| !k.certificate().is_expired_at(now))
                .map(|k| k.id().clone());
            if let Some(id) = unexpired {
                ring.set_sealing_key(&id);
            }
            RingSealing::NotApplicable
        }
        SealingChoice::Ring { view, last } => choose_ring_key(&mut ring, &by_kid, view, last, now),
    };
    Built {
        ring,
        newly_rejected,
        mirrored,
        ring_sealing,
        by_kid,
        loaded,
    }
}

/// The ring view's active key seals if a loaded key proves to be it and it has not expired;
/// else the last verified active key; else nothing (see [`SealingChoice::Ring`]).
pub(super) fn choose_ring_key(
    ring: &mut KeyRing,
    by_kid: &HashMap<Kid, KeyId>,
    view: Option<&RingView>,
    last: Option<&Kid>,
    now: SystemTime,
) -> RingSealing {
    let Some(view) = view else {
        ring.disable_sealing();
        return RingSealing::Refused(
            "the fleet ring has not been read yet (no verified index: none read from the store, and no ring-state Secret verified against a pinned anchor)".to_owned(),
        );
    };
    // Whatever seals, the ring's own keys are tried first and key the data MACs.
    let first_of_ring = ring
        .keys()
        .find(|k| view.contains(&Kid::of(k.public_key())))
        .map(|k| k.id().clone());
    if let Some(id) = first_of_ring {
        ring.set_sealing_key(&id);
    }
    // An index the history marker cannot vouch for (written by an older kseal, it records no
    // digest): nothing seals, not its active key, nor a last verified one (attack review,
    // round 13, R1 and R2: a planted fork's key sealed).
    if let Some(why) = &view.withheld {
        ring.disable_sealing();
        return RingSealing::Refused(why.clone());
    }
    let usable = |ring: &KeyRing, kid: &Kid| {
        by_kid
            .get(kid)
            .filter(|id| {
                ring.get(id)
                    .is_some_and(|k| !k.certificate().is_expired_at(now))
            })
            .cloned()
    };
    let problem = match &view.active {
        None => "the ring's index names no active key".to_owned(),
        Some(active) => match by_kid.get(active) {
            Some(id) => {
                ring.set_sealing_key(id);
                if usable(ring, active).is_some() {
                    return RingSealing::Active(active.clone());
                }
                // An expired active key never seals, and no older key replaces it.
                ring.disable_sealing();
                return RingSealing::Refused(format!(
                    "the ring's active key {} has an expired certificate (it still opens); rotate the ring (kseal keys rotate)",
                    active.short()
                ));
            }
            None => format!(
                "the ring's active key {} is not mirrored in this cluster (its key secret is missing or unreadable, or its mirror could not be written)",
                active.short()
            ),
        },
    };
    // Only a key of the verified index may stand in: `last-active` and `kids-ever` come from
    // the ring-state Secret, which whoever can update Secrets here can rewrite (with a key
    // Secret of their own, that would make their key seal), and a key that left the ring
    // never seals again.
    let fallback = [last, view.last_active.as_ref()]
        .into_iter()
        .flatten()
        .filter(|kid| view.contains(kid))
        .find_map(|kid| usable(ring, kid).map(|id| (kid.clone(), id)));
    match fallback {
        Some((kid, id)) => {
            ring.set_sealing_key(&id);
            RingSealing::LastVerified {
                problem: format!(
                    "{problem}; the last verified active key {} keeps sealing",
                    kid.short()
                ),
                kid,
            }
        }
        None => {
            ring.disable_sealing();
            RingSealing::Refused(format!(
                "{problem}, and no active key of the ring was verified before"
            ))
        }
    }
}

impl RingSealing {
    /// Why the ring's active key does not seal, for readiness (`None`: it seals).
    fn problem(&self) -> Option<SealingProblem> {
        match self {
            RingSealing::NotApplicable | RingSealing::Active(_) => None,
            RingSealing::LastVerified { problem, .. } => Some(SealingProblem {
                message: problem.clone(),
                sealing: true,
            }),
            RingSealing::Refused(reason) => Some(SealingProblem {
                message: reason.clone(),
                sealing: false,
            }),
        }
    }
}

/// Publishes why the fleet ring's active key does not seal (or that it does) into readiness
/// and `kseal_key_source_active_unavailable`, logging each change.
pub(super) fn publish_ring_sealing(state: &State, sealing: &RingSealing) {
    let problem = sealing.problem();
    if problem != state.readiness.sealing_problem() {
        match &problem {
            Some(p) => tracing::warn!(sealing = p.sealing, "{}", p.message),
            None => tracing::info!("the fleet ring's active key seals"),
        }
    }
    state
        .metrics
        .key_source_active_unavailable
        .set(i64::from(problem.is_some()));
    state.readiness.set_sealing_problem(problem);
}

/// A further ring's sealing state, into its own readiness (the first ring's goes through
/// [`publish_ring_sealing`], with the gauge).
pub(super) fn publish_more_ring_sealing(state: &State, name: &str, sealing: &RingSealing) {
    let problem = sealing.problem();
    if problem != state.readiness.sealing_problem() {
        match &problem {
            Some(p) => tracing::warn!(
                ring = name,
                sealing = p.sealing,
                "ring {name}: {}",
                p.message
            ),
            None => tracing::info!(ring = name, "ring {name}: its active key seals"),
        }
    }
    state.readiness.set_sealing_problem(problem);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::tests::{material, pair};
    use kseal_keys::{CertificateOptions, KeySize};
    use std::time::Duration;
    use zeroize::Zeroizing;

    #[test]
    fn bad_keys_are_skipped_and_reported_once() {
        let good = pair();
        let other = pair();
        let mut mismatched = material("b", &good, "1");
        if let Ok(pem) = &mut mismatched.pem {
            pem.certificate = other.certificate().to_pem();
        }
        let mut bad_pem = material("c", &good, "1");
        if let Ok(pem) = &mut bad_pem.pem {
            pem.private_key = Zeroizing::new(
                "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n".into(),
            );
        }
        let materials = vec![material("a", &good, "1"), mismatched, bad_pem];
        let mut cache = ParseCache::default();
        let built = build_ring(
            &materials,
            KeyOrder::CertNotBefore,
            &mut cache,
            SealingChoice::Newest,
        );
        assert_eq!(built.ring.len(), 1);
        let reasons: Vec<_> = built.newly_rejected.iter().map(|r| r.1.reason).collect();
        assert_eq!(reasons, ["mismatch", "pem"]);
        let again = build_ring(
            &materials,
            KeyOrder::CertNotBefore,
            &mut cache,
            SealingChoice::Newest,
        );
        assert_eq!(again.ring.len(), 1);
        assert!(again.newly_rejected.is_empty());
    }

    #[test]
    fn secret_creation_order_picks_the_newest_secret_as_sealing_key() {
        let older_cert = pair();
        let newer_cert = pair();
        let mut a = material("a", &newer_cert, "1");
        let mut b = material("b", &older_cert, "1");
        a.created = Some(SystemTime::UNIX_EPOCH);
        b.created = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(10));
        let mut cache = ParseCache::default();
        let built = build_ring(
            &[a, b],
            KeyOrder::SecretCreationTimestamp,
            &mut cache,
            SealingChoice::Newest,
        );
        assert_eq!(
            built.ring.sealing_key().map(|k| k.id().clone()),
            Some(older_cert.id().clone())
        );
    }

    #[test]
    fn with_a_ring_view_only_its_active_key_seals_never_the_newest() {
        use std::collections::BTreeSet;
        // Test-only 2048-bit keys: `active` a day older than `newer`.
        let active = KeyPair::generate(
            KeySize::Rsa2048,
            &CertificateOptions {
                not_before: SystemTime::now() - Duration::from_secs(86_400),
                ..CertificateOptions::default()
            },
        )
        .unwrap();
        let newer = pair();
        let kid = |p: &KeyPair| Kid::of(p.public_key());
        let mut forged = material("forged", &newer, "1");
        forged.mirror = true;
        let materials = vec![material("a", &active, "1"), forged];
        let mut index = kseal_keystore::Index::empty("r", SystemTime::now());
        for p in [&active, &newer] {
            index
                .keys
                .push(kseal_keystore::IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
        }
        let build = |view: Option<&RingView>, last: Option<&Kid>| {
            build_ring(
                &materials,
                KeyOrder::CertNotBefore,
                &mut ParseCache::default(),
                SealingChoice::Ring { view, last },
            )
        };
        let sealing = |b: &Built| b.ring.sealing_key().map(|k| k.id().clone());

        let no_view = build(None, None);
        assert_eq!(
            sealing(&no_view),
            None,
            "nothing seals before the ring is read"
        );
        assert_eq!(no_view.ring.len(), 2, "every key opens");

        index.active = Some(kid(&active));
        let view = RingView::new(&index, &BTreeSet::new(), None);
        let built = build(Some(&view), None);
        assert_eq!(sealing(&built), Some(active.id().clone()));
        assert_eq!(built.ring_sealing, RingSealing::Active(kid(&active)));
        assert_eq!(built.mirrored, 1, "a labelled key of the ring counts");

        // The active key is not loaded: the last verified one seals, else nothing.
        let other = pair();
        index
            .keys
            .push(kseal_keystore::IndexEntry::new(other.certificate(), SystemTime::now()).unwrap());
        index.active = Some(kid(&other));
        let view = RingView::new(&index, &BTreeSet::new(), None);
        let kept = build(Some(&view), Some(&kid(&active)));
        assert_eq!(sealing(&kept), Some(active.id().clone()));
        assert!(matches!(
            kept.ring_sealing,
            RingSealing::LastVerified { .. }
        ));
        let refused = build(Some(&view), None);
        assert_eq!(sealing(&refused), None);
        assert!(matches!(refused.ring_sealing, RingSealing::Refused(_)));
        assert!(
            refused.ring.preferred_key().is_some(),
            "data MACs still have a key"
        );

        // Without a key source the newest key seals, as before.
        let plain = build_ring(
            &materials,
            KeyOrder::CertNotBefore,
            &mut ParseCache::default(),
            SealingChoice::Newest,
        );
        assert_eq!(sealing(&plain), Some(newer.id().clone()));
    }

    /// Issue 35, attack 4: whoever can update the ring-state Secret (and create one labelled
    /// key Secret) names their own key as `last-active` and in `kids-ever`. While the ring's
    /// active key is not mirrored, only a key of the verified index may stand in: theirs
    /// never seals.
    #[test]
    fn a_forged_last_active_key_never_seals() {
        let kid = |p: &KeyPair| Kid::of(p.public_key());
        let (ring_key, pending, evil) = (pair(), pair(), pair());
        let materials = vec![
            material("ring", &ring_key, "1"),
            material("evil", &evil, "1"),
        ];
        let mut index = kseal_keystore::Index::empty("r", SystemTime::now());
        for p in [&ring_key, &pending] {
            index
                .keys
                .push(kseal_keystore::IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
        }
        // The active key is not mirrored here: a stand-in is needed.
        index.active = Some(kid(&pending));
        let forged_ever = std::collections::BTreeSet::from([kid(&evil)]);
        let view = RingView::new(&index, &forged_ever, Some(kid(&evil)));
        for last in [None, Some(kid(&evil))] {
            let built = build_ring(
                &materials,
                KeyOrder::CertNotBefore,
                &mut ParseCache::default(),
                SealingChoice::Ring {
                    view: Some(&view),
                    last: last.as_ref(),
                },
            );
            assert_eq!(built.ring.sealing_key().map(|k| k.id().clone()), None);
            assert!(matches!(built.ring_sealing, RingSealing::Refused(_)));
        }
        // A key of the index that was active before still stands in.
        let view = RingView::new(&index, &forged_ever, Some(kid(&ring_key)));
        let built = build_ring(
            &materials,
            KeyOrder::CertNotBefore,
            &mut ParseCache::default(),
            SealingChoice::Ring {
                view: Some(&view),
                last: None,
            },
        );
        assert_eq!(
            built.ring.sealing_key().map(|k| k.id().clone()),
            Some(ring_key.id().clone())
        );
    }

    /// Issue 35, attack review round 13, R1 and R2: a view whose index the history marker
    /// cannot vouch for (a marker an older kseal wrote) seals nothing: not its active key, not
    /// the last verified one, not the ring-state copy's `last-active`; its keys still open.
    #[test]
    fn a_withheld_view_seals_nothing_and_never_falls_back() {
        let kid = |p: &KeyPair| Kid::of(p.public_key());
        let (genuine, evil) = (pair(), pair());
        let materials = vec![
            material("genuine", &genuine, "1"),
            material("evil", &evil, "1"),
        ];
        let mut index = kseal_keystore::Index::empty("r", SystemTime::now());
        for p in [&genuine, &evil] {
            index
                .keys
                .push(kseal_keystore::IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
        }
        index.active = Some(kid(&evil));
        let mut view = RingView::new(
            &index,
            &std::collections::BTreeSet::new(),
            Some(kid(&genuine)),
        );
        view.withheld = Some("the history marker records no digest".to_owned());
        for last in [None, Some(kid(&genuine)), Some(kid(&evil))] {
            let built = build_ring(
                &materials,
                KeyOrder::CertNotBefore,
                &mut ParseCache::default(),
                SealingChoice::Ring {
                    view: Some(&view),
                    last: last.as_ref(),
                },
            );
            assert_eq!(built.ring.sealing_key().map(|k| k.id().clone()), None);
            assert_eq!(
                built.ring_sealing,
                RingSealing::Refused("the history marker records no digest".to_owned())
            );
            assert_eq!(built.ring.len(), 2, "its keys open");
        }
        view.withheld = None;
        let built = build_ring(
            &materials,
            KeyOrder::CertNotBefore,
            &mut ParseCache::default(),
            SealingChoice::Ring {
                view: Some(&view),
                last: None,
            },
        );
        assert_eq!(built.ring_sealing, RingSealing::Active(kid(&evil)));
    }

    #[test]
    fn pkcs8_keys_load_like_pkcs1_keys() {
        let p = pair();
        let mut m = material("a", &p, "1");
        if let Ok(pem) = &mut m.pem {
            pem.private_key = p.private_key().to_pkcs8_pem();
        }
        let built = build_ring(
            &[m],
            KeyOrder::CertNotBefore,
            &mut ParseCache::default(),
            SealingChoice::Newest,
        );
        assert_eq!(built.ring.len(), 1);
        assert!(built.newly_rejected.is_empty());
    }
}
