//! Rings bound to namespaces (`--ring-namespaces`, `--ring-namespace-selector`): which of the
//! loaded keys may open a SealedSecret in a given namespace.
//!
//! A controller may mirror several fleet rings (`--key-source` given more than once). A ring
//! with a binding opens only SealedSecrets in the namespaces it names or whose labels its
//! selector matches, whatever the value's scope says; a ring without one opens everywhere,
//! as a single ring always did.
//!
//! Which ring a loaded key belongs to is decided in this order (see [`Claims::build`]):
//! 1. the rings whose *verified* ring view lists the key (the signed index: nobody in the
//!    cluster can change it);
//! 2. else, for a mirror (a key Secret labelled `kseal.dev/mirror`), the ring its
//!    `kseal.dev/ring` annotation names — a mirror that names no configured ring opens
//!    nowhere while any binding is in force (fail closed);
//! 3. else (a key Secret that no ring lists: Bitnami's own keys from before the move) every
//!    namespace, as before.
//!
//! Whoever can write key Secrets in the controller namespace can add keys of their own in
//! every case (SECURITY.md); a binding is about the ring's keys, which come from the store.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use kseal_keys::{KeyId, KeyRing};
use kube::core::{Expression, Selector, SelectorExt as _};

/// At most this many rings per controller: the allowed set of a namespace is a bit mask.
pub const MAX_RINGS: usize = 16;

/// Where one ring's keys open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RingBinding {
    /// `--ring-namespaces`: these namespaces.
    pub namespaces: BTreeSet<String>,
    /// `--ring-namespace-selector`: namespaces whose labels match.
    pub selector: Option<NamespaceSelector>,
}

/// A parsed label selector, with the text it was given as.
#[derive(Debug, Clone)]
pub struct NamespaceSelector {
    text: String,
    selector: Selector,
}

impl NamespaceSelector {
    /// Parses `text` (see [`parse_selector`]).
    pub fn parse(text: &str) -> Result<Self, String> {
        Ok(Self {
            text: text.trim().to_owned(),
            selector: parse_selector(text)?,
        })
    }

    /// Whether `labels` match.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }
}

impl std::fmt::Display for NamespaceSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for NamespaceSelector {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for NamespaceSelector {}

impl RingBinding {
    /// Whether a SealedSecret in `namespace`, with these namespace `labels` (`None`: not
    /// known), may be opened by the ring's keys. A selector never matches a namespace whose
    /// labels are not known.
    pub fn allows(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
        if self.namespaces.contains(namespace) {
            return true;
        }
        match (&self.selector, labels) {
            (Some(selector), Some(labels)) => selector.matches(labels),
            _ => false,
        }
    }

    /// `namespaces a, b` / `namespaces matching team=a` / both, for refusals and logs.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.namespaces.is_empty() {
            let names: Vec<&str> = self.namespaces.iter().map(String::as_str).collect();
            parts.push(format!("namespaces {}", names.join(", ")));
        }
        if let Some(selector) = &self.selector {
            parts.push(format!("namespaces labelled {selector}"));
        }
        if parts.is_empty() {
            "no namespace".to_owned()
        } else {
            parts.join(" and ")
        }
    }
}

/// Parses a label selector as `kubectl -l` takes it: `k=v`, `k==v`, `k!=v`, `k`, `!k`,
/// `k in (a,b)`, `k notin (a,b)`, joined by commas. An empty selector is refused (it would
/// select every namespace: leave the ring unbound instead).
pub fn parse_selector(text: &str) -> Result<Selector, String> {
    let mut expressions = Vec::new();
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err("the selector is empty (an unbound ring opens in every namespace)".into());
    }
    while !rest.is_empty() {
        // One requirement: up to the next comma outside parentheses.
        let mut depth = 0i32;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let requirement = rest[..end].trim();
        expressions.push(parse_requirement(requirement)?);
        rest = match rest[end..].strip_prefix(',') {
            Some(after) if after.trim().is_empty() => {
                return Err("the selector ends with a comma".into());
            }
            Some(after) => after.trim_start(),
            None => "",
        };
    }
    // Every namespace has `kubernetes.io/metadata.name` (the API server sets it): as a bare
    // key it admits them all.
    if expressions
        .iter()
        .any(|e| matches!(e, Expression::Exists(k) if k == "kubernetes.io/metadata.name"))
    {
        return Err(format!(
            "{text:?}: every namespace has the label kubernetes.io/metadata.name; select by its value (kubernetes.io/metadata.name in (…)) or use --ring-namespaces"
        ));
    }
    // `k!=v`, `k notin (…)` and `!k` also match every namespace without the label: a
    // selector of those only would bind a ring to nearly everything.
    if !expressions.iter().any(|e| {
        matches!(
            e,
            Expression::Equal(..) | Expression::In(..) | Expression::Exists(..)
        )
    }) {
        return Err(format!(
            "{text:?} has no positive requirement (`k=v`, `k in (…)` or `k`): `!=`, `notin` and `!k` alone also match every namespace without the label"
        ));
    }
    Ok(expressions.into_iter().collect())
}

fn parse_requirement(text: &str) -> Result<Expression, String> {
    let label = |key: &str| -> Result<String, String> {
        let key = key.trim();
        kseal_api::validation::is_qualified_name(key)
            .map(|()| key.to_owned())
            .map_err(|e| format!("{key:?} is not a label key: {e}"))
    };
    let value = |v: &str| -> Result<String, String> {
        let v = v.trim();
        kseal_api::validation::is_valid_label_value(v)
            .map(|()| v.to_owned())
            .map_err(|e| format!("{v:?} is not a label value: {e}"))
    };
    if text.is_empty() {
        return Err("an empty requirement (two commas in a row?)".into());
    }
    for (op, not) in [(" notin ", true), (" in ", false)] {
        if let Some((key, set)) = text.split_once(op) {
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| {
                    format!("{text:?}: the values of `{}` go in parentheses", op.trim())
                })?;
            let values = inner
                .split(',')
                .map(value)
                .collect::<Result<BTreeSet<String>, String>>()?;
            let key = label(key)?;
            return Ok(if not {
                Expression::NotIn(key, values)
            } else {
                Expression::In(key, values)
            });
        }
    }
    if let Some((key, v)) = text.split_once("!=") {
        return Ok(Expression::NotEqual(label(key)?, value(v)?));
    }
    if let Some((key, v)) = text.split_once("==").or_else(|| text.split_once('=')) {
        return Ok(Expression::Equal(label(key)?, value(v)?));
    }
    if let Some(key) = text.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(label(key)?));
    }
    Ok(Expression::Exists(label(text)?))
}

/// One configured ring, as the bindings see it.
#[derive(Debug, Clone)]
pub struct BoundRing {
    /// The ring's name (its Secrets Manager prefix; a directory ring's is `kseal/fleet`).
    pub name: String,
    /// Where its keys open (`None`: everywhere).
    pub binding: Option<RingBinding>,
    /// Whether its verified index (ring view) is known. Until it is, any loaded key may be
    /// this ring's, and counts as such.
    pub verified: bool,
}

impl BoundRing {
    /// `ring kseal/team-a (bound to namespaces team-a)`, plus `; its index not verified yet`.
    pub fn describe(&self) -> String {
        let mut text = format!("ring {}", self.name);
        match (&self.binding, self.verified) {
            (Some(b), true) => text.push_str(&format!(" (bound to {})", b.describe())),
            (Some(b), false) => text.push_str(&format!(
                " (bound to {}; its index is not verified yet)",
                b.describe()
            )),
            (None, false) => text.push_str(" (its index is not verified yet)"),
            (None, true) => {}
        }
        text
    }
}

/// Which rings a loaded key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// No ring: a key Secret of this cluster's own (Bitnami's), which opens everywhere.
    Unringed,
    /// These rings (bit `i`: the `i`-th `--key-source`); it opens only where all of them
    /// open. `0`: a mirror that no configured ring lists, which opens nowhere.
    Rings(u32),
}

/// What [`Claims::build`] learns about one loaded key.
#[derive(Debug, Clone)]
pub struct LoadedKey {
    /// The key's fingerprint in the ring.
    pub id: KeyId,
    /// The rings whose verified view lists it, as a key or as retired (bit per ring).
    pub listed_by: u32,
    /// A key Secret kseal made (a mirror: labelled, annotated with a kid or named
    /// `kseal-ring-…`), not one of the cluster's own.
    pub mirror: bool,
    /// The configured rings the `kseal.dev/ring` annotations of its kseal-made copies name.
    pub named_rings: u32,
    /// Whether a kseal-made copy names no ring, or one this controller is not configured for.
    pub names_other: bool,
}

/// For every loaded key, the rings it belongs to, and per ring the key that seals for it.
#[derive(Debug, Default)]
pub struct Claims {
    rings: Arc<[BoundRing]>,
    claims: HashMap<KeyId, Claim>,
    /// Per ring (same order as `rings`): the key that seals for it, or why none does.
    sealing: Vec<Result<KeyId, String>>,
    /// Rings already filtered, by allowed-ring mask.
    filtered: Mutex<HashMap<u32, Arc<KeyRing>>>,
}

impl Claims {
    /// The claims of `keys` for `rings`; `sealing[i]` is the `i`-th ring's sealing key.
    ///
    /// A key belongs to the rings whose verified index lists it, and to every ring whose
    /// index is not verified yet (it may list the key too); a mirror also to the ring its
    /// annotation names, and a mirror of a ring not configured here to none (it opens
    /// nowhere). A key opens only where all the rings it belongs to open, so what can be
    /// changed in the cluster (annotations, labels) or by another ring's seeder (its index)
    /// only ever narrows where a key opens.
    pub fn build(
        rings: Arc<[BoundRing]>,
        keys: impl IntoIterator<Item = LoadedKey>,
        sealing: Vec<Result<KeyId, String>>,
    ) -> Self {
        let unverified = rings
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.verified)
            .fold(0u32, |mask, (i, _)| mask | (1 << i));
        let verified = !unverified & ((1u32 << rings.len()) - 1);
        let claims = keys
            .into_iter()
            .map(|k| {
                let claim = if !k.mirror {
                    match k.listed_by | unverified {
                        0 => Claim::Unringed,
                        rings => Claim::Rings(rings),
                    }
                } else if k.names_other || k.named_rings == 0 {
                    // A mirror of a ring this controller does not mirror (left behind when the
                    // ring was taken out of the flags), or of none: it opens nowhere, whatever
                    // index lists its kid (another ring's seeder must not adopt it).
                    Claim::Rings(0)
                } else if k.named_rings & verified & !k.listed_by != 0 {
                    // It says it copies a ring whose verified index does not list it: the
                    // annotation is wrong (or was changed), and it opens nowhere.
                    Claim::Rings(0)
                } else {
                    // A mirror also belongs to the rings it says it copies: an annotation can
                    // only narrow where the key opens.
                    Claim::Rings(k.listed_by | unverified | k.named_rings)
                };
                (k.id, claim)
            })
            .collect();
        Self {
            rings,
            claims,
            sealing,
            filtered: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `other` says the same: the same rings, claims and sealing keys (a change
    /// reconciles every SealedSecret again).
    pub fn same_as(&self, other: &Claims) -> bool {
        self.claims == other.claims
            && self.sealing == other.sealing
            && self.rings.len() == other.rings.len()
            && self
                .rings
                .iter()
                .zip(other.rings.iter())
                .all(|(a, b)| a.name == b.name && a.binding == b.binding)
    }

    /// The configured rings, in `--key-source` order.
    pub fn rings(&self) -> &[BoundRing] {
        &self.rings
    }

    /// Whether any ring is bound (else every key opens everywhere).
    pub fn any_bound(&self) -> bool {
        self.rings.iter().any(|r| r.binding.is_some())
    }

    /// The mask of rings that open in `namespace` (labels as in [`RingBinding::allows`]).
    pub fn allowed(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) -> u32 {
        self.rings
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.binding
                    .as_ref()
                    .is_none_or(|b| b.allows(namespace, labels))
            })
            .fold(0, |mask, (i, _)| mask | (1 << i))
    }

    /// Whether key `id` may open in a namespace whose allowed rings are `mask`.
    pub fn key_allowed(&self, id: &KeyId, mask: u32) -> bool {
        match self.claims.get(id) {
            // A key loaded after these claims were built: not known to be any ring's.
            None => false,
            Some(Claim::Unringed) => true,
            // Every ring that claims it must open here: a ring whose index lists another
            // ring's kid (its seeder may be a tenant) can only narrow where that key opens,
            // never widen it.
            Some(Claim::Rings(rings)) => *rings != 0 && rings & !mask == 0,
        }
    }

    /// The rings that claim key `id` and do not open in a namespace allowed `mask`, for a
    /// refusal (`None`: the key opens there, or no ring claims it; empty: a mirror of no
    /// configured ring).
    pub fn refusing(&self, id: &KeyId, mask: u32) -> Option<Vec<&BoundRing>> {
        match self.claims.get(id) {
            Some(Claim::Rings(rings)) if *rings == 0 || rings & !mask != 0 => Some(
                self.rings
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| rings & !mask & (1 << i) != 0)
                    .map(|(_, r)| r)
                    .collect(),
            ),
            _ => None,
        }
    }

    /// The names of the rings key `id` belongs to (empty: the controller's own key, or a
    /// mirror of no configured ring).
    pub fn rings_of(&self, id: &KeyId) -> Vec<&str> {
        match self.claims.get(id) {
            Some(Claim::Rings(mask)) => self
                .rings
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, r)| r.name.as_str())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// For a value key `opener` opened: the one ring that claims it, with its sealing key or
    /// why it has none; an error naming the rings when several do (which one the value
    /// belongs to is not known, and re-sealing with the wrong one could move it to a ring that
    /// opens more widely). `None` when no ring claims `opener` (the controller's own key).
    pub fn home_sealing(&self, opener: &KeyId) -> Option<(&str, Result<&KeyId, String>)> {
        let Some(Claim::Rings(rings)) = self.claims.get(opener) else {
            return None;
        };
        let claiming: Vec<usize> = (0..self.rings.len())
            .filter(|i| rings & (1 << i) != 0)
            .collect();
        if let [i] = claiming.as_slice() {
            let sealing = match self.sealing.get(*i) {
                Some(Ok(id)) => Ok(id),
                Some(Err(why)) => Err(why.clone()),
                None => Err("no key of the ring is loaded".to_owned()),
            };
            return Some((self.rings[*i].name.as_str(), sealing));
        }
        let names: Vec<&str> = claiming
            .iter()
            .map(|i| self.rings[*i].name.as_str())
            .collect();
        Some((
            "",
            Err(format!(
                "the key that opened it is listed by rings {}, so which ring the value belongs to is not known; seal it again with `kseal seal --cert` for its ring",
                names.join(" and ")
            )),
        ))
    }

    /// The keys listed by more than one ring, with those rings' names (such a key opens only
    /// where all of them open; the loader warns).
    pub fn shared_keys(&self) -> Vec<(&KeyId, Vec<&str>)> {
        self.claims
            .iter()
            .filter_map(|(id, claim)| match claim {
                Claim::Rings(r) if r.count_ones() > 1 => Some((
                    id,
                    self.rings
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| r & (1 << i) != 0)
                        .map(|(_, ring)| ring.name.as_str())
                        .collect(),
                )),
                _ => None,
            })
            .collect()
    }

    /// The sealing key of ring `name`, or why it has none (`None`: no such ring).
    pub fn sealing_of(&self, name: &str) -> Option<&Result<KeyId, String>> {
        let i = self.rings.iter().position(|r| r.name == name)?;
        self.sealing.get(i)
    }

    /// `full` restricted to the keys that open in a namespace allowed `mask`; the key that
    /// seals is the first allowed ring's (in `--key-source` order), none when it has none.
    /// Cached per mask.
    pub fn restrict(&self, full: &KeyRing, mask: u32) -> Arc<KeyRing> {
        let mut cache = self.filtered.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ring) = cache.get(&mask) {
            return ring.clone();
        }
        let mut ring: KeyRing = full
            .keys()
            .filter(|k| self.key_allowed(k.id(), mask))
            .cloned()
            .collect();
        let first_allowed = (0..self.rings.len()).find(|i| mask & (1 << i) != 0);
        // No ring opens here, or its key cannot seal: nothing seals (never a key that no
        // ring activated, as with a single ring).
        match first_allowed.and_then(|i| self.sealing.get(i)) {
            Some(Ok(id)) if ring.set_sealing_key(id) => {}
            _ => ring.disable_sealing(),
        }
        let ring = Arc::new(ring);
        cache.insert(mask, ring.clone());
        ring
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selectors_parse_as_kubectl_takes_them() {
        let s = parse_selector("team=a, tier in (prod,stage),!legacy,env!=dev").unwrap();
        assert!(s.matches(&labels(&[("team", "a"), ("tier", "prod"), ("env", "x")])));
        assert!(!s.matches(&labels(&[("team", "a"), ("tier", "prod"), ("legacy", "")])));
        assert!(!s.matches(&labels(&[("team", "a"), ("tier", "dev")])));
        assert!(!s.matches(&labels(&[("team", "a"), ("tier", "prod"), ("env", "dev")])));
        let s = parse_selector("kseal.dev/tenant").unwrap();
        assert!(s.matches(&labels(&[("kseal.dev/tenant", "x")])));
        assert!(!s.matches(&labels(&[])));
        let s = parse_selector("zone, zone notin (a, b)").unwrap();
        assert!(s.matches(&labels(&[("zone", "c")])));
        assert!(!s.matches(&labels(&[("zone", "a")])));
        // Negative requirements alone would also match every unlabelled namespace.
        assert!(parse_selector("kubernetes.io/metadata.name").is_err());
        assert!(parse_selector("kubernetes.io/metadata.name in (a,b)").is_ok());
        for only_negative in ["env!=dev", "zone notin (a)", "!legacy", "env!=dev,!legacy"] {
            let err = parse_selector(only_negative).unwrap_err();
            assert!(
                err.contains("no positive requirement"),
                "{only_negative}: {err}"
            );
        }
        for bad in [
            "",
            " ",
            "team=a,,b=c",
            "a=b,",
            "tier in prod",
            "bad key!=x",
            "k=v v",
        ] {
            assert!(parse_selector(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bindings_allow_named_or_selected_namespaces_only() {
        let b = RingBinding {
            namespaces: BTreeSet::from(["prod".to_owned()]),
            selector: Some(NamespaceSelector::parse("env=prod").unwrap()),
        };
        assert!(b.allows("prod", None));
        assert!(b.allows("payments", Some(&labels(&[("env", "prod")]))));
        assert!(!b.allows("payments", Some(&labels(&[("env", "dev")]))));
        // Labels not known yet: a selector does not match.
        assert!(!b.allows("payments", None));
        assert_eq!(
            b.describe(),
            "namespaces prod and namespaces labelled env=prod"
        );
    }

    /// Test-only 2048-bit keys; do not copy (kseal generates 4096-bit keys).
    fn pair(_seed: u8) -> kseal_keys::KeyPair {
        kseal_keys::KeyPair::generate(
            kseal_keys::KeySize::Rsa2048,
            &kseal_keys::CertificateOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn keys_open_only_where_their_ring_is_bound() {
        let (shared, team, local, stray) = (pair(0), pair(1), pair(2), pair(3));
        let full: KeyRing = [&shared, &team, &local, &stray]
            .into_iter()
            .cloned()
            .collect();
        let rings: Arc<[BoundRing]> = Arc::from(vec![
            BoundRing {
                name: "kseal/shared".into(),
                binding: None,
                verified: true,
            },
            BoundRing {
                name: "kseal/team-a".into(),
                binding: Some(RingBinding {
                    namespaces: BTreeSet::from(["team-a".to_owned()]),
                    selector: None,
                }),
                verified: true,
            },
        ]);
        let claims = Claims::build(
            rings,
            [
                LoadedKey {
                    id: shared.id().clone(),
                    listed_by: 0b01,
                    mirror: true,
                    named_rings: 1 << 0,
                    names_other: false,
                },
                LoadedKey {
                    id: team.id().clone(),
                    listed_by: 0b10,
                    mirror: true,
                    named_rings: 1 << 1,
                    names_other: false,
                },
                LoadedKey {
                    id: local.id().clone(),
                    listed_by: 0,
                    mirror: false,
                    named_rings: 0,
                    names_other: false,
                },
                // A mirror of a ring not configured here.
                LoadedKey {
                    id: stray.id().clone(),
                    listed_by: 0,
                    mirror: true,
                    named_rings: 0,
                    names_other: true,
                },
            ],
            vec![Ok(shared.id().clone()), Ok(team.id().clone())],
        );
        let in_team = claims.allowed("team-a", None);
        let elsewhere = claims.allowed("team-b", None);
        assert_eq!((in_team, elsewhere), (0b11, 0b01));
        let ids = |r: &KeyRing| r.keys().map(|k| k.id().clone()).collect::<BTreeSet<_>>();
        let team_ring = claims.restrict(&full, in_team);
        assert_eq!(
            ids(&team_ring),
            BTreeSet::from([shared.id().clone(), team.id().clone(), local.id().clone()])
        );
        // The first allowed ring seals: the shared one.
        assert_eq!(team_ring.sealing_key().unwrap().id(), shared.id());
        let other = claims.restrict(&full, elsewhere);
        assert_eq!(
            ids(&other),
            BTreeSet::from([shared.id().clone(), local.id().clone()])
        );
        let refusing = claims.refusing(team.id(), elsewhere).unwrap();
        assert_eq!(refusing[0].name, "kseal/team-a");
        assert!(claims.refusing(stray.id(), in_team).unwrap().is_empty());
        assert!(claims.refusing(local.id(), elsewhere).is_none());
        // A namespace only team-a opens in (the shared ring bound elsewhere) seals with team-a.
        let only_team = claims.restrict(&full, 0b10);
        assert_eq!(only_team.sealing_key().unwrap().id(), team.id());
        // A key unknown to the claims opens nowhere.
        assert!(!claims.key_allowed(pair(4).id(), u32::MAX));
        // Re-sealing keeps a value in the ring that opened it: a team-a value re-seals with
        // team-a's key even where the shared ring seals by default.
        let (home, sealing) = claims.home_sealing(team.id()).unwrap();
        assert_eq!((home, sealing.unwrap()), ("kseal/team-a", team.id()));
        assert_eq!(claims.home_sealing(shared.id()).unwrap().0, "kseal/shared");
        assert!(claims.home_sealing(local.id()).is_none());
        assert!(claims.shared_keys().is_empty());
    }

    /// A ring whose index another party writes (a tenant's seeder) lists the kid of a key of
    /// a ring bound elsewhere, as a key or as retired: the key then opens only where both
    /// rings open (here nowhere), never in the tenant's namespaces.
    #[test]
    fn a_ring_listing_another_rings_key_narrows_it_never_widens_it() {
        let (prod, tenant) = (pair(0), pair(1));
        let full: KeyRing = [&prod, &tenant].into_iter().cloned().collect();
        let bound = |ns: &str| {
            Some(RingBinding {
                namespaces: BTreeSet::from([ns.to_owned()]),
                selector: None,
            })
        };
        let rings: Arc<[BoundRing]> = Arc::from(vec![
            BoundRing {
                name: "kseal/prod".into(),
                binding: bound("prod"),
                verified: true,
            },
            BoundRing {
                name: "kseal/tenant-b".into(),
                binding: bound("tenant-b"),
                verified: true,
            },
        ]);
        let claims = Claims::build(
            rings,
            [
                // Listed by prod's index and by tenant-b's.
                LoadedKey {
                    id: prod.id().clone(),
                    listed_by: 0b11,
                    mirror: true,
                    named_rings: 1 << 0,
                    names_other: false,
                },
                LoadedKey {
                    id: tenant.id().clone(),
                    listed_by: 0b10,
                    mirror: true,
                    named_rings: 1 << 1,
                    names_other: false,
                },
            ],
            vec![Ok(prod.id().clone()), Ok(tenant.id().clone())],
        );
        let in_tenant = claims.allowed("tenant-b", None);
        assert!(!claims.key_allowed(prod.id(), in_tenant));
        assert!(claims.restrict(&full, in_tenant).get(prod.id()).is_none());
        assert_eq!(
            claims.refusing(prod.id(), in_tenant).unwrap()[0].name,
            "kseal/prod"
        );
        assert!(!claims.key_allowed(prod.id(), claims.allowed("prod", None)));
        assert!(claims.key_allowed(tenant.id(), in_tenant));
        // Rotate will not pick one of the two rings for it.
        assert!(claims.home_sealing(prod.id()).unwrap().1.is_err());
        assert_eq!(claims.shared_keys().len(), 1);
    }

    /// Before a ring's index is verified (a restart while the store does not answer), any
    /// key may be that ring's: every key then opens only where every ring opens, whatever the
    /// Secrets in the controller namespace say (their labels and annotations decide nothing).
    #[test]
    fn until_every_ring_is_verified_keys_open_only_where_every_ring_opens() {
        let (prod, tenant, local) = (pair(0), pair(1), pair(2));
        let full: KeyRing = [&prod, &tenant, &local].into_iter().cloned().collect();
        let ring = |name: &str, ns: &str, verified: bool| BoundRing {
            name: name.into(),
            binding: Some(RingBinding {
                namespaces: BTreeSet::from([ns.to_owned(), "both".to_owned()]),
                selector: None,
            }),
            verified,
        };
        let build = |prod_verified: bool, prod_listed: u32| {
            Claims::build(
                Arc::from(vec![
                    ring("kseal/prod", "prod", prod_verified),
                    ring("kseal/tenant", "tenant", true),
                ]),
                [
                    // The tenant's index lists the prod key too (its seeder is the tenant).
                    LoadedKey {
                        id: prod.id().clone(),
                        listed_by: prod_listed | 0b10,
                        mirror: true,
                        named_rings: 1 << 0,
                        names_other: false,
                    },
                    LoadedKey {
                        id: tenant.id().clone(),
                        listed_by: 0b10,
                        mirror: true,
                        named_rings: 1 << 1,
                        names_other: false,
                    },
                    // A key Secret of the cluster's own (no kseal marks).
                    LoadedKey {
                        id: local.id().clone(),
                        listed_by: 0,
                        mirror: false,
                        named_rings: 0,
                        names_other: false,
                    },
                ],
                vec![Ok(prod.id().clone()), Ok(tenant.id().clone())],
            )
        };
        // Prod's index not verified yet: the prod key does not open in the tenant's
        // namespace, though only the tenant's (verified) index lists it; nor does any key.
        let early = build(false, 0);
        let in_tenant = early.allowed("tenant", None);
        for key in [&prod, &tenant, &local] {
            assert!(!early.key_allowed(key.id(), in_tenant), "{:?}", key.id());
        }
        // Where both rings open, everything does.
        let in_both = early.allowed("both", None);
        for key in [&prod, &tenant, &local] {
            assert!(early.key_allowed(key.id(), in_both));
        }
        let why = early.refusing(prod.id(), in_tenant).unwrap();
        assert_eq!(
            why[0].describe(),
            "ring kseal/prod (bound to namespaces both, prod; its index is not verified yet)"
        );
        assert!(early.restrict(&full, in_tenant).is_empty());
        // Once prod's index is verified (and lists its key): the prod key opens only where
        // both rings open, the tenant's in the tenant's namespace, the cluster's own key
        // (which no index lists) everywhere.
        let late = build(true, 0b01);
        let in_tenant = late.allowed("tenant", None);
        assert!(!late.key_allowed(prod.id(), in_tenant));
        assert!(late.key_allowed(tenant.id(), in_tenant));
        assert!(late.key_allowed(local.id(), in_tenant));
        assert!(late.key_allowed(prod.id(), late.allowed("both", None)));
    }

    /// `kseal/shared` (unbound) and `kseal/tenant` (bound to namespace tenant), both verified.
    fn shared_and_tenant() -> Arc<[BoundRing]> {
        Arc::from(vec![
            BoundRing {
                name: "kseal/shared".into(),
                binding: None,
                verified: true,
            },
            BoundRing {
                name: "kseal/tenant".into(),
                binding: Some(RingBinding {
                    namespaces: BTreeSet::from(["tenant".to_owned()]),
                    selector: None,
                }),
                verified: true,
            },
        ])
    }

    /// A mirror left behind by a ring taken out of the flags (its `kseal.dev/ring` names a
    /// ring not configured here) opens nowhere, even when another ring's verified index (its
    /// seeder may be a tenant) lists its kid; a mirror also belongs to the ring it names.
    #[test]
    fn a_mirror_of_a_ring_not_configured_here_opens_nowhere_whatever_lists_it() {
        let (leftover, tenant) = (pair(0), pair(1));
        let full: KeyRing = [&leftover, &tenant].into_iter().cloned().collect();
        let claims = Claims::build(
            shared_and_tenant(),
            [
                // The tenant's index lists it as retired; its annotation names kseal/prod.
                LoadedKey {
                    id: leftover.id().clone(),
                    listed_by: 0b10,
                    mirror: true,
                    named_rings: 0,
                    names_other: true,
                },
                // The shared ring's index lists the tenant's key too; its mirror names the
                // tenant's ring: it opens only where both open (the tenant's namespace).
                LoadedKey {
                    id: tenant.id().clone(),
                    listed_by: 0b11,
                    mirror: true,
                    named_rings: 1 << 1,
                    names_other: false,
                },
            ],
            vec![Ok(tenant.id().clone()), Ok(tenant.id().clone())],
        );
        for namespace in ["tenant", "other"] {
            let mask = claims.allowed(namespace, None);
            assert!(!claims.key_allowed(leftover.id(), mask), "{namespace}");
            assert!(claims.restrict(&full, mask).get(leftover.id()).is_none());
        }
        assert!(claims.key_allowed(tenant.id(), claims.allowed("tenant", None)));
        assert!(!claims.key_allowed(tenant.id(), claims.allowed("other", None)));
    }

    /// A mirror annotated with a ring whose verified index does not list its key (the
    /// annotation changed by whoever can patch Secrets here, or a removed ring's mirror
    /// re-annotated) opens nowhere; so does a key one of whose kseal-made copies names a
    /// ring not configured here.
    #[test]
    fn an_annotation_never_widens_a_mirror() {
        let (leftover, copied) = (pair(0), pair(1));
        let claims = Claims::build(
            shared_and_tenant(),
            [
                // Re-annotated to the shared ring, whose verified index does not list it.
                LoadedKey {
                    id: leftover.id().clone(),
                    listed_by: 0,
                    mirror: true,
                    named_rings: 0b01,
                    names_other: false,
                },
                // Listed by the tenant's index, held by a copy naming the tenant's ring and
                // an older one naming a ring not configured here.
                LoadedKey {
                    id: copied.id().clone(),
                    listed_by: 0b10,
                    mirror: true,
                    named_rings: 0b10,
                    names_other: true,
                },
            ],
            vec![Ok(copied.id().clone()), Ok(copied.id().clone())],
        );
        for namespace in ["tenant", "other"] {
            let mask = claims.allowed(namespace, None);
            assert!(!claims.key_allowed(leftover.id(), mask), "{namespace}");
            assert!(!claims.key_allowed(copied.id(), mask), "{namespace}");
        }
    }
}
