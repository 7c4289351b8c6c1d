//! Unsealed results kept across the retries of a failed Secret write, so that an API-server
//! outage costs no RSA work beyond the first attempt.
//!
//! A SealedSecret whose Secret is missing is unsealed before the create is sent (the Secret
//! cache already says "absent"); when the create fails (the API server away, a 5xx, a
//! timeout), the next attempt would unseal again: during a 60 s outage with 2,000 objects
//! that was 4 to 6 times the RSA work needed. The result is kept here instead, keyed by the
//! object's uid and the digest of its spec (`crate::formats::spec_digest`, which covers
//! the ciphertexts, the template, the name, the namespace and the scope) with the
//! template-binding annotation, which decides the label of the unseal too ([`key_of`]), and
//! taken back by the retry.
//!
//! Only a failure that may pass without a change keeps a result (`is_transient`, after
//! [`crate::cluster::fault::Fault::may_pass_again`]): the API server away, a 5xx, a timeout,
//! a conflict or throttling. A refusal of the Secret itself (invalid data, a quota, a
//! forbidden write, etcd's refusal of an object too large) fails again at every retry, so its
//! result is dropped: a tenant's writes that fail for good never hold the budget the others' outage
//! needs, and such an object costs its unseal at each retry, spaced by the reconcile
//! backoff, as before.
//!
//! Bounds: at most [`RETAINED_BYTES`] of Secret data (the earliest unsealed go first) and
//! [`RETAINED_FOR`] from the unseal (a failed retry that keeps the result again does not
//! renew it); a result is reused only while every key that opened it still
//! opens in the object's namespace and the ring still holds the key its MAC names
//! ([`Desired::still_opens`]): a key removed meanwhile (e.g. marked compromised), or a ring
//! binding that no longer covers the namespace (a namespace relabelled out of a selector, an
//! index that narrowed the key), is not worked around. Results are plaintext: [`Desired`] zeroizes its data
//! when dropped, here or anywhere else, and nothing here is ever logged.

use super::*;

use prometheus_client::metrics::{counter::Counter, family::Family};

use crate::metrics::OutcomeLabels;

/// Most Secret data (values and item names, plus a fixed overhead per result) kept at once.
pub(super) const RETAINED_BYTES: usize = 8 << 20;
/// How long a result is kept for a retry; an older one is dropped and the retry unseals again.
pub(super) const RETAINED_FOR: Duration = Duration::from_secs(600);
/// What one result costs besides its data (its map entries, the Secret's metadata).
const OVERHEAD: usize = 512;

/// Unsealed results waiting for the retry of their write, by SealedSecret uid.
#[derive(Default)]
pub(super) struct Retained {
    inner: Mutex<Inner>,
    /// `kseal_unseal_results_dropped_total{outcome}`: results dropped before a retry used them.
    dropped: Family<OutcomeLabels, Counter>,
}

/// Why a kept result went unused (`kseal_unseal_results_dropped_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dropped {
    Expired,
    Evicted,
    Changed,
}

impl Dropped {
    fn label(self) -> &'static str {
        match self {
            Dropped::Expired => "expired",
            Dropped::Evicted => "evicted",
            Dropped::Changed => "changed",
        }
    }
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Box<str>, Entry>,
    /// uids by unseal time (then by insertion), oldest first: a result put back after a
    /// failed retry keeps its place.
    order: BTreeMap<(Instant, u64), Box<str>>,
    next: u64,
    bytes: usize,
}

struct Entry {
    /// Its key in `order`.
    seq: (Instant, u64),
    digest: Box<str>,
    bytes: usize,
    desired: Desired,
}

impl Inner {
    fn remove(&mut self, uid: &str) -> Option<Entry> {
        let entry = self.entries.remove(uid)?;
        self.order.remove(&entry.seq);
        self.bytes -= entry.bytes;
        Some(entry)
    }

    /// Drops the results kept too long, then the oldest while over `budget`, telling
    /// `dropped` of each.
    fn trim(&mut self, budget: usize, now: Instant, mut dropped: impl FnMut(Dropped)) {
        while let Some(((unsealed_at, _), uid)) = self.order.first_key_value() {
            let expired = now.saturating_duration_since(*unsealed_at) >= RETAINED_FOR;
            if self.bytes <= budget && !expired {
                break;
            }
            let uid = uid.clone();
            self.remove(&uid);
            dropped(if expired {
                Dropped::Expired
            } else {
                Dropped::Evicted
            });
        }
    }
}

/// What a kept result is filed under besides the object's uid: the spec digest and the
/// object's `kseal.dev/template-binding` annotation (outside the spec, and part of the
/// unseal's label), so that removing or changing the annotation drops the result.
pub(super) fn key_of(digest: &str, ss: &SealedSecret) -> String {
    let binding = ss
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(kseal_api::constants::TEMPLATE_BINDING_ANNOTATION));
    match binding {
        None => digest.to_owned(),
        Some(value) => format!("{digest}\0{value}"),
    }
}

/// What keeping `desired` costs against [`RETAINED_BYTES`].
fn size_of(desired: &Desired) -> usize {
    desired
        .secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.0.len())
        .sum::<usize>()
        + OVERHEAD
}

impl Retained {
    /// An empty store that counts what it drops unused in `dropped`.
    pub(super) fn counting(dropped: Family<OutcomeLabels, Counter>) -> Self {
        Self {
            inner: Mutex::default(),
            dropped,
        }
    }

    fn count(&self, why: Dropped) {
        self.dropped
            .get_or_create(&OutcomeLabels {
                outcome: why.label().to_owned(),
            })
            .inc();
    }

    /// Keeps `desired`, the result of unsealing the spec with `digest` of the SealedSecret
    /// `uid`, for the retry of its write (replacing what was kept for `uid`). A result larger
    /// than the whole budget is not kept.
    pub(super) fn put(&self, uid: &str, digest: &str, desired: Desired) {
        self.put_within(uid, digest, desired, RETAINED_BYTES);
    }

    fn put_within(&self, uid: &str, digest: &str, desired: Desired, budget: usize) {
        let bytes = size_of(&desired);
        let now = Instant::now();
        let mut inner = lock(&self.inner);
        inner.remove(uid);
        if now.saturating_duration_since(desired.unsealed_at) >= RETAINED_FOR {
            return self.count(Dropped::Expired);
        }
        if bytes > budget {
            return self.count(Dropped::Evicted);
        }
        let seq = (desired.unsealed_at, inner.next);
        inner.next += 1;
        inner.order.insert(seq, uid.into());
        inner.bytes += bytes;
        inner.entries.insert(
            uid.into(),
            Entry {
                seq,
                digest: digest.into(),
                bytes,
                desired,
            },
        );
        inner.trim(budget, now, |why| self.count(why));
    }

    /// Takes back what was kept for `uid`, if it was unsealed from the spec with `digest`, is
    /// not older than [`RETAINED_FOR`] and `usable` accepts it (its keys, checked against the
    /// ring and binding of now: [`Desired::still_opens`]); what does not qualify is dropped.
    pub(super) fn take(
        &self,
        uid: &str,
        digest: &str,
        usable: impl FnOnce(&Desired) -> bool,
    ) -> Option<Desired> {
        let entry = {
            let mut inner = lock(&self.inner);
            inner.trim(RETAINED_BYTES, Instant::now(), |why| self.count(why));
            inner.remove(uid)?
        };
        if *entry.digest == *digest && usable(&entry.desired) {
            return Some(entry.desired);
        }
        self.count(Dropped::Changed);
        None
    }

    /// Drops what was kept for `uid` (its object was written another way, or deleted).
    pub(super) fn forget(&self, uid: &str) {
        lock(&self.inner).remove(uid);
    }

    /// How many results are kept, and their size against the budget.
    #[cfg(test)]
    fn usage(&self) -> (usize, usize) {
        let inner = lock(&self.inner);
        (inner.entries.len(), inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kseal_keys::{CertificateOptions, KeyPair, KeySize};

    fn desired(value: &[u8], opened_by: Vec<KeyId>, mac_key: Option<KeyId>) -> Desired {
        let secret = Secret {
            data: Some(BTreeMap::from([(
                "k".to_owned(),
                ByteString(value.to_vec()),
            )])),
            ..Secret::default()
        };
        Desired {
            secret,
            opened_by,
            mac_key,
            rsa_operations: 1,
            unsealed_at: Instant::now(),
        }
    }

    fn value(d: &Desired) -> Vec<u8> {
        d.secret.data.as_ref().unwrap()["k"].0.clone()
    }

    fn any(_: &Desired) -> bool {
        true
    }

    #[test]
    fn a_kept_result_comes_back_once_and_only_for_the_same_spec_and_keys() {
        // Test-only 2048-bit keys; never use ones like them for anything real.
        let opener = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap();
        let mac = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap();
        let mut ring = KeyRing::new();
        ring.insert(opener.clone());
        ring.insert(mac.clone());
        // The namespace's keys when a binding leaves only the MAC's key open there.
        let mut mac_only = KeyRing::new();
        mac_only.insert(mac.clone());
        let result = || desired(b"v", vec![opener.id().clone()], Some(mac.id().clone()));
        let still_opens = |scoped: &KeyRing, full: &KeyRing| {
            let (scoped, full) = (scoped.clone(), full.clone());
            move |d: &Desired| d.still_opens(&scoped, &full)
        };
        let kept = Retained::default();

        kept.put("u", "d1", result());
        let back = kept
            .take("u", "d1", still_opens(&ring, &ring))
            .expect("the same spec comes back");
        assert_eq!(value(&back), b"v");
        assert!(kept.take("u", "d1", any).is_none(), "taken once");

        // Another spec (the object changed since): dropped, not returned.
        kept.put("u", "d1", result());
        assert!(kept.take("u", "d2", any).is_none());
        assert_eq!(kept.usage(), (0, 0));

        // A key that opened it left the ring: dropped.
        kept.put("u", "d1", result());
        assert!(
            kept.take("u", "d1", still_opens(&mac_only, &mac_only))
                .is_none()
        );
        assert_eq!(kept.usage(), (0, 0));

        // The key that opened it is still in the ring but no longer opens in the namespace
        // (its ring's binding changed): dropped, although the full ring holds every key.
        kept.put("u", "d1", result());
        assert!(
            kept.take("u", "d1", still_opens(&mac_only, &ring))
                .is_none()
        );
        assert_eq!(kept.usage(), (0, 0));

        // The MAC's key need not open in the namespace, only be in the ring.
        let mut opener_only = KeyRing::new();
        opener_only.insert(opener.clone());
        kept.put("u", "d1", result());
        assert!(
            kept.take("u", "d1", still_opens(&opener_only, &ring))
                .is_some()
        );
        // ...and a MAC key that left the ring drops it.
        kept.put("u", "d1", result());
        assert!(
            kept.take("u", "d1", still_opens(&opener_only, &opener_only))
                .is_none()
        );
        // A result whose MAC was never stamped is never written.
        kept.put("u", "d1", desired(b"v", vec![opener.id().clone()], None));
        assert!(kept.take("u", "d1", still_opens(&ring, &ring)).is_none());

        // A newer result for the same object replaces the older one.
        kept.put("u", "d1", desired(b"old", vec![], None));
        kept.put("u", "d2", desired(b"new", vec![], None));
        assert_eq!(kept.usage().0, 1);
        assert_eq!(value(&kept.take("u", "d2", any).unwrap()), b"new");

        kept.put("u", "d1", desired(b"v", vec![], None));
        kept.forget("u");
        assert_eq!(kept.usage(), (0, 0));
    }

    fn dropped(kept: &Retained, outcome: &str) -> u64 {
        kept.dropped
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .get()
    }

    #[test]
    fn every_result_dropped_unused_is_counted_by_why() {
        let kept = Retained::default();
        // Changed: another spec, or keys that no longer open it.
        kept.put("u", "d1", desired(b"v", vec![], None));
        assert!(kept.take("u", "d2", any).is_none());
        kept.put("u", "d1", desired(b"v", vec![], None));
        assert!(kept.take("u", "d1", |_| false).is_none());
        assert_eq!(dropped(&kept, "changed"), 2);
        // Evicted: the budget went to a later result, or the result alone exceeds it.
        let one = size_of(&desired(&[7; 100], vec![], None));
        kept.put_within("a", "d", desired(&[7; 100], vec![], None), one);
        kept.put_within("b", "d", desired(&[7; 100], vec![], None), one);
        kept.put_within("c", "d", desired(&[7; 200], vec![], None), one);
        assert_eq!(dropped(&kept, "evicted"), 2);
        // Expired: past its time when put, or when a later call trims it.
        let mut stale = desired(b"v", vec![], None);
        stale.unsealed_at = Instant::now() - RETAINED_FOR;
        kept.put("s", "d", stale);
        let mut early = desired(b"v", vec![], None);
        early.unsealed_at = Instant::now() - RETAINED_FOR + Duration::from_millis(50);
        kept.put("e", "d", early);
        std::thread::sleep(Duration::from_millis(100));
        assert!(kept.take("x", "d", any).is_none());
        assert_eq!(dropped(&kept, "expired"), 2);
        // Taken back and used, or forgotten because the object was settled: not counted.
        assert!(kept.take("b", "d", any).is_some());
        kept.put("f", "d", desired(b"v", vec![], None));
        kept.forget("f");
        assert_eq!(
            dropped(&kept, "changed") + dropped(&kept, "evicted") + dropped(&kept, "expired"),
            6
        );
    }

    #[test]
    fn the_oldest_results_go_first_when_the_budget_is_full() {
        let kept = Retained::default();
        let one = size_of(&desired(&[7; 100], vec![], None));
        let budget = one * 3;
        for uid in ["a", "b", "c", "d"] {
            kept.put_within(uid, "d", desired(&[7; 100], vec![], None), budget);
        }
        assert_eq!(kept.usage(), (3, budget));
        assert!(kept.take("a", "d", any).is_none(), "the oldest went");
        for uid in ["b", "c", "d"] {
            assert!(kept.take(uid, "d", any).is_some(), "{uid}");
        }
        // Larger than the whole budget: never kept.
        kept.put_within("big", "d", desired(&[7; 4000], vec![], None), budget);
        assert_eq!(kept.usage(), (0, 0));
    }

    #[test]
    fn a_result_expires_from_its_unseal_however_often_it_is_kept_again() {
        let kept = Retained::default();
        let mut old = desired(b"v", vec![], None);
        old.unsealed_at = Instant::now() - RETAINED_FOR + Duration::from_secs(1);
        // A retry that failed again keeps it once more: its age is still its unseal's.
        kept.put("u", "d", old);
        let back = kept.take("u", "d", any).expect("not expired yet");
        std::thread::sleep(Duration::from_millis(1100));
        kept.put("u", "d", back);
        assert!(kept.take("u", "d", any).is_none(), "expired");
        assert_eq!(kept.usage(), (0, 0));
        // One already past its time is not kept at all.
        let mut stale = desired(b"v", vec![], None);
        stale.unsealed_at = Instant::now() - RETAINED_FOR;
        kept.put("u", "d", stale);
        assert_eq!(kept.usage(), (0, 0));
        // An expired result goes even when it is not the oldest put.
        let mut early = desired(b"v", vec![], None);
        early.unsealed_at = Instant::now() - RETAINED_FOR + Duration::from_millis(500);
        kept.put("fresh", "d", desired(b"v", vec![], None));
        kept.put("early", "d", early);
        std::thread::sleep(Duration::from_millis(600));
        assert!(kept.take("fresh", "d", any).is_some());
        assert!(kept.take("early", "d", any).is_none());
    }

    #[test]
    fn only_a_failure_that_may_pass_keeps_a_result() {
        let api = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("x", "y")
                    .with_code(code)
                    .boxed(),
            )
        };
        for code in [500, 503, 504, 409, 429] {
            assert!(is_transient(&Error::ApplySecret(api(code))), "{code}");
        }
        for code in [400, 403, 404, 413, 422] {
            assert!(!is_transient(&Error::ApplySecret(api(code))), "{code}");
        }
        let too_large = kube::Error::Api(
            kube::core::Status::failure("etcdserver: request is too large", "")
                .with_code(500)
                .boxed(),
        );
        assert!(!is_transient(&Error::ApplySecret(too_large)));
        let transport = kube::Error::Service("connection refused".into());
        assert!(is_transient(&Error::ApplySecret(transport)));
    }

    #[test]
    fn the_template_binding_annotation_is_part_of_a_kept_results_key() {
        let mut ss = SealedSecret::new("n", kseal_api::SealedSecretSpec::default());
        let plain = key_of("v2:sha256:aa", &ss);
        assert_eq!(plain, "v2:sha256:aa");
        ss.metadata.annotations = Some(BTreeMap::from([(
            kseal_api::constants::TEMPLATE_BINDING_ANNOTATION.to_owned(),
            "v1".to_owned(),
        )]));
        let bound = key_of("v2:sha256:aa", &ss);
        assert_ne!(bound, plain);
        let kept = Retained::default();
        kept.put("u", &bound, desired(b"v", vec![], None));
        // The annotation removed (or changed) while the write failed: dropped.
        assert!(kept.take("u", &plain, any).is_none());
        assert_eq!(kept.usage(), (0, 0));
    }

    #[test]
    fn a_wiped_result_holds_no_value() {
        // `Drop` runs the same wipe: each value's buffer is zeroed (`zeroize` overwrites the
        // whole allocation) and emptied.
        let mut d = desired(b"hunter2", vec![], None);
        d.wipe();
        assert!(value(&d).is_empty());
        assert_eq!(d.secret.data.as_ref().map(BTreeMap::len), Some(1));
    }
}
