//! "Key not loaded yet" is a wait, not a failure: while a new cluster's key source has not
//! mirrored the whole verified ring, a SealedSecret sealed with a key still to come waits.
//!
//! The key loader publishes the ring as the mirror Secrets arrive, one key at a time, so a
//! new cluster's first reconciles ran with part of the ring: objects sealed with a key not
//! mirrored yet got `UnsealFailed` and a Warning event, then recovered a second later. Now,
//! with a key source, the ring counts as loading until every key of the verified ring view
//! ([`crate::keys::ringview::RingView`]) is in the ring (or [`LOAD_GRACE`] passed since the
//! first keys, for a key the source lists but can never provide); meanwhile
//! - an object whose sealing-key hint names a key not in the ring waits before any RSA work;
//! - an object no loaded key opens waits instead of failing.
//!
//! Waiting means no condition, no event, no error count and no backoff: the next ring
//! change reconciles everything (`ring_changes`), and a requeue at the end of the grace
//! makes sure a key that never comes is reported then. Once the whole ring was loaded this
//! stays off for the life of the process: a key that goes missing later fails as before.
//! Without a key source the key loader's first list holds every key Secret, so only the
//! empty ring waits (`reconcile`).

use super::*;

use kseal_keystore::Kid;

/// How long after the first keys a key the ring view lists but the ring still lacks is
/// waited for; after that, objects sealed with it fail with their reason.
pub(super) const LOAD_GRACE: Duration = Duration::from_secs(120);

/// Whether the ring is still loading, computed once per (ring, view) pair.
#[derive(Default)]
pub(super) struct Loading {
    inner: Mutex<LoadingState>,
}

#[derive(Default)]
struct LoadingState {
    /// The whole ring was loaded once (or the grace ran out): never loading again.
    done: bool,
    /// When the reconciler first saw a key.
    first_keys: Option<Instant>,
    /// The ring and view the verdict below was computed for.
    seen: Option<(Arc<KeyRing>, Option<Arc<crate::keys::ringview::RingView>>)>,
    /// Whether `seen`'s ring holds every key of its view.
    complete: bool,
}

impl Loading {
    /// `Some(time left)` while `ring` is still loading: a key source is configured
    /// (`with_source`), the ring view lists keys `ring` does not hold yet (or no view was
    /// read yet), and [`LOAD_GRACE`] has not passed since the first keys.
    pub(super) fn still_loading(
        &self,
        with_source: bool,
        ring: &Arc<KeyRing>,
        views: &crate::keys::ringview::RingViews,
    ) -> Option<Duration> {
        if !with_source || ring.is_empty() {
            return None;
        }
        let mut s = lock(&self.inner);
        if s.done {
            return None;
        }
        let now = Instant::now();
        let first = *s.first_keys.get_or_insert(now);
        let view = views.current();
        let same = s.seen.as_ref().is_some_and(|(r, v)| {
            Arc::ptr_eq(r, ring)
                && match (v, &view) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    (None, None) => true,
                    _ => false,
                }
        });
        if !same {
            s.complete = view.as_ref().is_some_and(|v| holds_all(ring, &v.kids));
            s.seen = Some((ring.clone(), view));
        }
        let left = LOAD_GRACE.saturating_sub(now.saturating_duration_since(first));
        if s.complete || left.is_zero() {
            s.done = true;
            s.seen = None;
            return None;
        }
        Some(left)
    }
}

/// Whether `ring` holds a key for each of `kids`.
fn holds_all(ring: &KeyRing, kids: &BTreeSet<Kid>) -> bool {
    let loaded: BTreeSet<Kid> = ring.keys().map(|k| Kid::of(k.public_key())).collect();
    kids.is_subset(&loaded)
}

/// Whether `ss` names a sealing key (`kseal.dev/sealing-key`) that `ring` does not hold.
pub(super) fn hinted_key_missing(ss: &SealedSecret, ring: &KeyRing) -> bool {
    ss.sealing_key_hint()
        .is_some_and(|id| ring.get(&id).is_none())
}

/// The error for a failed unseal `e` whose hint names a key that the verified ring index
/// `view` lists but the loaded ring does not hold ([`Error::KeyNotLoaded`]): a missing
/// mirror, which the operator fixes in the controller namespace, not a key of no ring.
pub(super) fn not_loaded(
    e: &kseal_api::Error,
    view: Option<Arc<crate::keys::ringview::RingView>>,
) -> Option<Error> {
    let kseal_api::Error::Decrypt {
        hint: Some(hint), ..
    } = e
    else {
        return None;
    };
    let view = view?;
    (!hint.held && view.fingerprints.contains(hint.key.as_str())).then(|| Error::KeyNotLoaded {
        key: hint.key.to_string(),
        ring: view.ring.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::ringview::{RingView, RingViews};
    use kseal_keys::{CertificateOptions, KeyPair, KeySize};

    fn view(kids: &[&KeyPair]) -> RingView {
        RingView {
            ring: "kseal/fleet".into(),
            updated: jiff::Timestamp::now(),
            active: None,
            kids: kids.iter().map(|p| Kid::of(p.public_key())).collect(),
            fingerprints: kids.iter().map(|p| p.id().to_string()).collect(),
            retired: BTreeSet::new(),
            ever: BTreeSet::new(),
            last_active: None,
            version: 1,
            expires: None,
            withheld: None,
        }
    }

    #[test]
    fn the_ring_loads_until_it_holds_every_key_of_the_view_then_never_again() {
        // Test-only 2048-bit keys; never use keys like these for anything real.
        let pairs: Vec<KeyPair> = (0..2)
            .map(|_| KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap())
            .collect();
        let views = RingViews::new();
        let loading = Loading::default();
        let mut one = KeyRing::new();
        one.insert(pairs[0].clone());
        let one = Arc::new(one);
        let mut both = (*one).clone();
        both.insert(pairs[1].clone());
        let both = Arc::new(both);

        // Without a key source, or with no key at all: not this wait.
        assert_eq!(loading.still_loading(false, &one, &views), None);
        assert_eq!(
            loading.still_loading(true, &Arc::new(KeyRing::new()), &views),
            None
        );
        // No view read yet, then a view listing a key still to come: loading.
        let left = loading.still_loading(true, &one, &views).unwrap();
        assert!(left <= LOAD_GRACE && left > LOAD_GRACE / 2, "{left:?}");
        views.publish(view(&[&pairs[0], &pairs[1]]));
        assert!(loading.still_loading(true, &one, &views).is_some());
        // The whole ring: done, and done for good (a key gone later fails as before).
        assert_eq!(loading.still_loading(true, &both, &views), None);
        assert_eq!(loading.still_loading(true, &one, &views), None);

        let mut ss = SealedSecret::new("s", kseal_api::SealedSecretSpec::default());
        assert!(!hinted_key_missing(&ss, &one), "no hint");
        ss.metadata.annotations = Some(BTreeMap::from([(
            kseal_api::constants::SEALING_KEY_ANNOTATION.to_owned(),
            pairs[1].id().to_string(),
        )]));
        assert!(hinted_key_missing(&ss, &one));
        assert!(!hinted_key_missing(&ss, &both));
    }

    #[test]
    fn a_hinted_key_of_the_index_not_loaded_here_is_named_as_such() {
        // Test-only 2048-bit keys; never use keys like these for anything real.
        let listed = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap();
        let stranger = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap();
        let failed = |key: &KeyPair, held: bool| kseal_api::Error::Decrypt {
            items: vec!["a".into()],
            tried: kseal_api::ScopeTarget::new(kseal_keys::Scope::Strict, "app", "s"),
            hint: Some(Box::new(kseal_api::HintNote {
                key: key.id().clone(),
                held,
            })),
            source: kseal_keys::Error::Open,
        };
        let index = Some(Arc::new(view(&[&listed])));
        let Some(Error::KeyNotLoaded { key, ring }) =
            not_loaded(&failed(&listed, false), index.clone())
        else {
            panic!("a listed key that is not loaded is named as such");
        };
        assert_eq!(
            (key.as_str(), ring.as_str()),
            (listed.id().as_str(), "kseal/fleet")
        );
        let message = crate::error_chain(&Error::KeyNotLoaded { key, ring });
        assert!(
            message
                .contains("is in ring kseal/fleet's verified index but not loaded in this cluster"),
            "{message}"
        );
        // A key of no ring, a key the ring holds (sealed for another name), no view, no hint:
        // the decryption error as it was.
        assert!(not_loaded(&failed(&stranger, false), index.clone()).is_none());
        assert!(not_loaded(&failed(&listed, true), index.clone()).is_none());
        assert!(not_loaded(&failed(&listed, false), None).is_none());
        let unhinted = kseal_api::Error::Decrypt {
            items: vec!["a".into()],
            tried: kseal_api::ScopeTarget::new(kseal_keys::Scope::Strict, "app", "s"),
            hint: None,
            source: kseal_keys::Error::Open,
        };
        assert!(not_loaded(&unhinted, index).is_none());
    }
}
