//! The ring view: what this controller trusts about the fleet key ring (`--key-source`).
//!
//! With a key source, the ring's index is the single source of trust: only the index's active
//! key seals, and only Secrets whose key material hashes to a kid of the index are the ring's
//! mirrors. Every index the controller uses goes through one function, [`parse_ring_state`],
//! whether the leader read it from the store or a replica read the leader's copy in the
//! ring-state Secret; index signatures will be verified there.
//!
//! The ring-state Secret (label `kseal.dev/ring-state=true`, annotation `kseal.dev/ring`,
//! created by the leader under a generated name) holds the index text exactly as read
//! (`index.json`), every kid this controller ever saw in the index (`kids-ever`, one per line)
//! and the last active kid whose mirror it verified (`last-active`). Followers, and the leader
//! at start before the store answers, derive their view from it. Until the index is signed it
//! is only as trustworthy as write access to Secrets in the controller namespace; the leader's
//! own view, read from the store, always wins over it.

use std::collections::BTreeSet;
use std::sync::Arc;

use kseal_keystore::{Index, Kid, Trust, Verified};
use tokio::sync::watch;

/// Label on the ring-state Secret.
pub(crate) const RING_STATE_LABEL: &str = "kseal.dev/ring-state";
/// `index.json`: the ring's index exactly as read from the store.
pub(crate) const INDEX_ITEM: &str = "index.json";
/// `kids-ever`: every kid the controller saw in the index, one per line.
pub(crate) const KIDS_EVER_ITEM: &str = "kids-ever";
/// `last-active`: the last active kid whose mirror the leader verified.
pub(crate) const LAST_ACTIVE_ITEM: &str = "last-active";
/// Name prefix of the ring-state Secret (the API server adds a random suffix).
pub(crate) const RING_STATE_PREFIX: &str = "kseal-ring-state-";

/// Parses an index the controller is about to trust, from the store or from a ring-state
/// Secret, and checks its signed history against `trust` ([`kseal_keystore::trust::verify`]).
/// `ring` is the ring it must belong to (`None`: a directory ring, which may hold a copy of
/// any ring). The one place where every index the controller uses is verified.
pub(crate) fn parse_ring_state(
    index_text: &str,
    ring: Option<&str>,
    trust: &Trust,
) -> kseal_keystore::Result<(Index, Verified)> {
    let index = match ring {
        Some(ring) => Index::parse(index_text, ring, "the ring index")?,
        None => Index::parse_any_ring(index_text, "the ring index")?,
    };
    let verified = kseal_keystore::trust::verify(&index, trust, "the ring index")?;
    Ok((index, verified))
}

/// What this controller accepts of the ring's history: the anchor given by `--ring-anchor`,
/// else the one pinned on first use, never a version older than one it accepted, and never a
/// history that does not extend the newest dedicated root it accepted (a fork signed by a
/// ring key from before the ring moved to its dedicated root, which every cluster could sign).
#[derive(Debug, Clone, Default)]
pub(crate) struct Pin {
    /// The anchor, once known.
    pub anchor: Option<Kid>,
    /// The newest signed version accepted.
    pub floor: u64,
    /// The newest dedicated root accepted: its number in the chain and its kid.
    pub seen_root: Option<(u64, Kid)>,
    /// Why an unsigned (schema 1) index is refused although no anchor is pinned: this
    /// controller accepted a signed history of the ring before (a ring-state copy verifies),
    /// or the store's history marker says the ring was signed.
    pub unsigned_refused: Option<String>,
}

impl Pin {
    /// The pin `--ring-anchor` gives (none: pinned on first use).
    pub(crate) fn configured(anchor: Option<Kid>) -> Self {
        Self {
            anchor,
            floor: 0,
            seen_root: None,
            unsigned_refused: None,
        }
    }

    /// What an index must prove now. Before any anchor is known, an unsigned index of an
    /// older kseal is accepted too (its keys open); once a signed history was accepted, only
    /// histories from that anchor are, and never an older version.
    pub(crate) fn trust(&self) -> Trust {
        let trust = match &self.anchor {
            Some(anchor) => Trust::anchored(anchor.clone()).min_version(self.floor),
            None => Trust::first_use().allow_unsigned(self.unsigned_refused.is_none()),
        };
        match &self.seen_root {
            Some((seq, kid)) => trust.seen_root(*seq, kid.clone()),
            None => trust,
        }
    }

    /// The newest dedicated root of a verified history: `(seq, kid)` of the root that signed
    /// it, when that root is dedicated (after a dedicated root, every root is).
    pub(crate) fn dedicated_root(verified: &Verified) -> Option<(u64, Kid)> {
        match verified {
            Verified::Signed {
                root,
                root_seq,
                dedicated: true,
                ..
            } => Some((*root_seq, root.clone())),
            _ => None,
        }
    }

    /// Records a newer dedicated root `root` of a verified history (an older one is ignored);
    /// returns whether it is new.
    pub(crate) fn see_root(&mut self, root: Option<(u64, Kid)>) -> bool {
        match root {
            Some(root) if self.seen_root.as_ref().is_none_or(|(seq, _)| root.0 > *seq) => {
                self.seen_root = Some(root);
                true
            }
            _ => false,
        }
    }

    /// When the pin names a key other than the newest dedicated root this pin saw (a ring key,
    /// or an older dedicated root): that root, for the `RingAnchorSuperseded` warning.
    pub(crate) fn superseded(&self) -> Option<(&Kid, &(u64, Kid))> {
        let anchor = self.anchor.as_ref()?;
        let root = self.seen_root.as_ref()?;
        (anchor != &root.1).then_some((anchor, root))
    }

    /// Records an accepted index; returns the anchor when this pinned it on first use.
    pub(crate) fn accept(&mut self, verified: &Verified) -> Option<Kid> {
        let Verified::Signed {
            anchor, version, ..
        } = verified
        else {
            return None;
        };
        self.floor = self.floor.max(*version);
        self.see_root(Self::dedicated_root(verified));
        self.accept_anchor(anchor)
    }

    /// Pins `anchor` on first use, and nothing else: what an index whose version and root
    /// nothing bounds may change (see `Marker::bounds_no_version`); returns it when pinned.
    pub(crate) fn accept_anchor(&mut self, anchor: &Kid) -> Option<Kid> {
        if self.anchor.is_none() {
            self.anchor = Some(anchor.clone());
            return Some(anchor.clone());
        }
        None
    }
}

/// What the controller trusts about the fleet ring: derived from an index that went through
/// [`parse_ring_state`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingView {
    /// The ring's name (as the index says).
    pub ring: String,
    /// When the index was written.
    pub updated: jiff::Timestamp,
    /// The key that seals, as the index names it.
    pub active: Option<Kid>,
    /// Every key of the index.
    pub kids: BTreeSet<Kid>,
    /// The Bitnami fingerprints (`SHA256:…`, as `kseal.dev/sealing-key` names a key) of the
    /// index's keys: tells a key of the ring that is not loaded here from a key of no ring.
    pub fingerprints: BTreeSet<String>,
    /// The keys the (signed) index lists as retired from the ring.
    pub retired: BTreeSet<Kid>,
    /// Every key this controller ever saw in the index (a superset of `kids`): only a mirror
    /// of one of these is ever retired.
    pub ever: BTreeSet<Kid>,
    /// The last active key whose mirror was verified: it keeps sealing while the index's
    /// active key cannot be mirrored.
    pub last_active: Option<Kid>,
    /// The index's version.
    pub version: u64,
    /// Until when the index is current (signed; `None`: written before expiry existed). Past
    /// it, this view is still used (its keys open, its active key seals), and `/readyz` detail
    /// says so, until the seeder refreshes the index.
    pub expires: Option<jiff::Timestamp>,
    /// Why nothing seals from this view although it is published (its keys are mirrored and
    /// open): under a history marker an older kseal wrote, which records no digest, nothing
    /// tells its index from a fork signed with a ring key at its version (attack review,
    /// round 13, R1 and R2). `None`: its active key seals.
    pub withheld: Option<String>,
}

impl RingView {
    /// The view of `index`, with the kids seen before (`ever`) and the last verified active
    /// key.
    pub fn new(index: &Index, ever: &BTreeSet<Kid>, last_active: Option<Kid>) -> Self {
        let kids: BTreeSet<Kid> = index.keys.iter().map(|e| e.kid.clone()).collect();
        // A signed index lists the kids that left the ring itself.
        let ever = ever
            .union(&kids)
            .cloned()
            .chain(index.retired.iter().map(|r| r.kid.clone()))
            .collect();
        Self {
            ring: index.ring.clone(),
            updated: index.updated,
            active: index.active.clone(),
            retired: index.retired.iter().map(|r| r.kid.clone()).collect(),
            fingerprints: index.keys.iter().map(|e| e.fingerprint.clone()).collect(),
            kids,
            ever,
            last_active,
            version: index.version,
            expires: index.expires,
            withheld: None,
        }
    }

    /// `/readyz` detail's line about the index's expiry, once it has passed at `now`.
    pub fn expiry_line(&self, now: jiff::Timestamp) -> Option<String> {
        let expires = self.expires.filter(|e| now >= *e)?;
        Some(format!(
            "ring index: version {} of ring {} expired at {}: this controller keeps using it \
             (its keys open, its active key seals), but accepts no index written before then; \
             the seeder refreshes it with `kseal keys refresh`\n",
            self.version,
            self.ring,
            expires.strftime("%Y-%m-%d %H:%M:%S UTC")
        ))
    }

    /// Whether `kid` is a key of the index.
    pub fn contains(&self, kid: &Kid) -> bool {
        self.kids.contains(kid)
    }

    /// Whether the index lists `kid`, as a key or as retired: the key belongs to this ring
    /// (signed data only, unlike `ever`).
    pub fn lists(&self, kid: &Kid) -> bool {
        self.kids.contains(kid) || self.retired.contains(kid)
    }
}

/// Parses `kids-ever`: one kid per line; lines that are not kids are skipped.
pub(crate) fn parse_kids(text: &str) -> BTreeSet<Kid> {
    text.lines()
        .filter_map(|l| Kid::parse(l.trim()).ok())
        .collect()
}

/// Formats `kids-ever`.
pub(crate) fn format_kids(kids: &BTreeSet<Kid>) -> String {
    kids.iter().map(|k| format!("{k}\n")).collect()
}

/// The current ring view, shared by the key-source loop (which publishes it) and the key
/// loader (which picks the sealing key from it). `None` until an index was read.
#[derive(Clone, Debug)]
pub struct RingViews {
    tx: Arc<watch::Sender<Option<Arc<RingView>>>>,
}

impl RingViews {
    /// No view yet.
    pub fn new() -> Self {
        let (tx, _rx) = watch::channel(None);
        Self { tx: Arc::new(tx) }
    }

    /// The current view.
    pub fn current(&self) -> Option<Arc<RingView>> {
        self.tx.borrow().clone()
    }

    /// Publishes `view` (subscribers are woken only when it changed).
    pub fn publish(&self, view: RingView) {
        self.tx.send_if_modified(|current| {
            if current.as_deref() == Some(&view) {
                return false;
            }
            *current = Some(Arc::new(view));
            true
        });
    }

    /// Withdraws the view (a rolled-back one): nothing seals from the ring until a view is
    /// published again.
    pub fn clear(&self) {
        self.tx.send_if_modified(|current| current.take().is_some());
    }

    /// Notified whenever the view changes.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<RingView>>> {
        self.tx.subscribe()
    }
}

impl Default for RingViews {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_says_when_the_index_held_has_expired() {
        let mut index = Index::empty("kseal/fleet", std::time::SystemTime::now());
        index.version = 7;
        let view = RingView::new(&index, &BTreeSet::new(), None);
        assert_eq!(view.expiry_line(jiff::Timestamp::now()), None, "no expiry");
        let expires = jiff::Timestamp::from_second(2_000_000_000).unwrap();
        index.expires = Some(expires);
        let view = RingView::new(&index, &BTreeSet::new(), None);
        assert_eq!(view.expires, Some(expires));
        let before = jiff::Timestamp::from_second(1_999_999_999).unwrap();
        assert_eq!(view.expiry_line(before), None, "not yet");
        let line = view.expiry_line(expires).unwrap();
        assert!(
            line.contains("version 7")
                && line.contains("2033-05-18 03:33:20 UTC")
                && line.contains("kseal keys refresh"),
            "{line}"
        );
    }

    #[test]
    fn kids_ever_round_trips_and_skips_garbage() {
        let a = Kid::parse(&"a".repeat(64)).unwrap();
        let b = Kid::parse(&"b".repeat(64)).unwrap();
        let kids = BTreeSet::from([a.clone(), b.clone()]);
        let text = format_kids(&kids);
        assert_eq!(parse_kids(&text), kids);
        assert_eq!(parse_kids(&format!("junk\n{a}\n\n")), BTreeSet::from([a]));
    }

    #[test]
    fn a_ring_state_of_another_ring_is_refused() {
        let index = Index::empty("kseal/other", std::time::SystemTime::now());
        let legacy = Trust::legacy();
        assert!(parse_ring_state(&index.to_json(), Some("kseal/fleet"), &legacy).is_err());
        assert!(parse_ring_state(&index.to_json(), Some("kseal/other"), &legacy).is_ok());
        assert!(parse_ring_state(&index.to_json(), None, &legacy).is_ok());
        assert!(parse_ring_state("{}", None, &legacy).is_err());
    }

    #[test]
    fn a_pin_refuses_unsigned_indexes_once_a_signed_history_was_accepted() {
        let unsigned = Index::empty("kseal/fleet", std::time::SystemTime::now());
        let mut pin = Pin::configured(None);
        assert!(parse_ring_state(&unsigned.to_json(), None, &pin.trust()).is_ok());
        let anchor = Kid::parse(&"a".repeat(64)).unwrap();
        let signed = Verified::Signed {
            anchor: anchor.clone(),
            root: anchor.clone(),
            root_seq: 1,
            dedicated: false,
            version: 7,
            expires: None,
            expired: false,
        };
        assert_eq!(
            pin.accept(&signed),
            Some(anchor.clone()),
            "pinned on first use"
        );
        assert_eq!(pin.accept(&signed), None, "pinned once");
        assert_eq!(pin.trust(), Trust::anchored(anchor).min_version(7));
        assert!(parse_ring_state(&unsigned.to_json(), None, &pin.trust()).is_err());
    }

    #[test]
    fn a_pin_remembers_the_newest_dedicated_root_and_requires_it() {
        let kid = |c: char| Kid::parse(&c.to_string().repeat(64)).unwrap();
        let signed = |root: Kid, root_seq: u64, dedicated: bool, version: u64| Verified::Signed {
            anchor: kid('a'),
            root,
            root_seq,
            dedicated,
            version,
            expires: None,
            expired: false,
        };
        let mut pin = Pin::configured(Some(kid('a')));
        pin.accept(&signed(kid('a'), 1, false, 3));
        assert_eq!(pin.seen_root, None, "a ring key root is not remembered");
        assert_eq!(pin.superseded(), None);
        pin.accept(&signed(kid('d'), 2, true, 4));
        assert_eq!(pin.seen_root, Some((2, kid('d'))));
        assert_eq!(
            pin.trust(),
            Trust::anchored(kid('a'))
                .min_version(4)
                .seen_root(2, kid('d'))
        );
        assert_eq!(pin.superseded(), Some((&kid('a'), &(2, kid('d')))));
        assert!(!pin.see_root(Some((1, kid('e')))), "never an older root");
        assert!(pin.see_root(Some((3, kid('f')))));
        assert_eq!(pin.seen_root, Some((3, kid('f'))));
        let at_root = Pin::configured(Some(kid('f')));
        let mut at_root = Pin {
            seen_root: Some((3, kid('f'))),
            ..at_root
        };
        assert_eq!(at_root.superseded(), None, "pinned at the dedicated root");
        assert_eq!(at_root.accept(&signed(kid('f'), 3, true, 9)), None);
    }
}
