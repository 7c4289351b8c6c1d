//! The ring's signed history: who may change the index, back to a trust anchor.
//!
//! Write access to `R/index` alone must not let anyone choose the sealing key. So every index
//! this build writes (schema 2) carries:
//!
//! - **a chain of root records** (`roots`), the way TUF rotates its root keys: record 1 names
//!   the ring's first root key and is signed by that key (the *anchor*, which readers pin by its
//!   kid); each later record names a new root key and is signed by the previous root and by the
//!   new one. A root is always a key of the ring, so the seeder, who can read the ring's private
//!   keys, is the only one who can sign. The root changes only when the root key is retired.
//! - **a signature of the whole index** (`signature`) by the last root, over a canonical byte
//!   encoding of every field ([`index_message`]), including a `version` that grows by one on
//!   every write (readers refuse an index older than one they have already seen: a rollback).
//!
//! **Dedicated roots.** A ring whose root is one of its own keys has a root every cluster
//! holds: whoever compromised one cluster could sign a new history from it. So a ring moves
//! (once, `kseal keys re-root`) or starts with a *dedicated* root: an AWS KMS key or an
//! offline key file ([`crate::root`]) that is never a ring key. Its record says so
//! (`dedicated`, signed with a message of its own, [`dedicated_root_message`]); after it, every
//! root is dedicated, and no dedicated root may be a key the ring holds or held. Readers pin
//! the dedicated root's kid: a pin names any root of the chain, and the chain must pass
//! through it, so nothing signed before it (by keys clusters held) can lead anywhere else.
//!
//! **Expiry.** Every index written now carries `expires` (signed); readers that choose the
//! sealing key refuse an index past it ([`Trust::accept_expired`] is for those that only
//! open, and for the seeder who refreshes it), so a replayed old index is refused once it
//! expires, however old the reader's floor is. An index signed by a dedicated root without
//! an expiry is refused: no kseal writes one.
//!
//! Readers check the chain from the anchor they pinned (or, on first use, from whatever anchor
//! the index has, which the caller then pins), every signature, and every field of every entry
//! against its certificate. An index written before signing existed (schema 1) carries none of
//! this: it can still be read for opening where the caller allows it ([`Trust::legacy`]), never
//! for choosing the sealing key where a pin is required.
//!
//! The signed bytes are defined by values, not by JSON text or any library's `Debug` output, so
//! a change of serialiser can never invalidate a signature (see `docs/key-ring.md`).

use std::fmt::Write as _;

use base64::Engine as _;
use kseal_keys::{KeyPair, PublicKey};
use sha2::{Digest as _, Sha256};

use crate::contract::{Index, Kid};
pub use crate::contract::{RetiredEntry, RootRecord, Signature};
use crate::{Error, Result};

/// The first line of the signed encoding of an index.
const INDEX_DOMAIN: &str = "kseal ring index v2";
/// The first line of the signed encoding of a root record.
const ROOT_DOMAIN: &str = "kseal ring root v1";
/// The first line of the signed encoding of a dedicated root's record.
const DEDICATED_ROOT_DOMAIN: &str = "kseal ring root v2";

/// What a reader accepts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trust {
    anchor: Option<Kid>,
    unsigned: bool,
    min_version: u64,
    seen_root: Option<(u64, Kid)>,
    accept_expired: bool,
    now: Option<jiff::Timestamp>,
}

impl Trust {
    /// Only a signed history whose root chain passes through `anchor`: the ring's first root
    /// (its anchor), or any later one, such as its dedicated root.
    pub fn anchored(anchor: Kid) -> Self {
        Self {
            anchor: Some(anchor),
            ..Self::default()
        }
    }

    /// Any signed history (trust on first use: the caller pins the anchor it returns).
    pub fn first_use() -> Self {
        Self::default()
    }

    /// Any signed history, and also an unsigned (schema 1) index: for reading keys to open
    /// with, and for commands that show the ring. Never for choosing the sealing key.
    pub fn legacy() -> Self {
        Self {
            unsigned: true,
            ..Self::default()
        }
    }

    /// Also refuses a signed index older than `version` (a rollback).
    #[must_use]
    pub fn min_version(mut self, version: u64) -> Self {
        self.min_version = version;
        self
    }

    /// Also accepts an unsigned (schema 1) index when no anchor is pinned.
    #[must_use]
    pub fn allow_unsigned(mut self, allow: bool) -> Self {
        self.unsigned = allow;
        self
    }

    /// Also refuses a chain whose root number `seq` is not `kid`: the newest root this
    /// reader saw before (a fork from an older root does not extend it).
    #[must_use]
    pub fn seen_root(mut self, seq: u64, kid: Kid) -> Self {
        self.seen_root = Some((seq, kid));
        self
    }

    /// Also accepts an index past its expiry: for readers that only open with its keys (a
    /// controller keeps its last good ring), and for the seeder who refreshes it.
    #[must_use]
    pub fn accept_expired(mut self, accept: bool) -> Self {
        self.accept_expired = accept;
        self
    }

    /// Checks expiry at `now` instead of the clock (tests).
    #[must_use]
    pub fn at(mut self, now: jiff::Timestamp) -> Self {
        self.now = Some(now);
        self
    }

    /// The pinned anchor, if any.
    pub fn anchor(&self) -> Option<&Kid> {
        self.anchor.as_ref()
    }
}

/// How an index was found trustworthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// Signed, with a valid chain from `anchor` to `root`.
    Signed {
        /// The kid of the first root (what readers pin).
        anchor: Kid,
        /// The root that signed this version.
        root: Kid,
        /// Its number in the chain.
        root_seq: u64,
        /// Whether it is a dedicated root (not a ring key).
        dedicated: bool,
        /// The index's version.
        version: u64,
        /// Until when the index is current (`None`: written before expiry existed).
        expires: Option<jiff::Timestamp>,
        /// Whether it was past its expiry when checked (accepted only with
        /// [`Trust::accept_expired`]).
        expired: bool,
    },
    /// An unsigned (schema 1) index, accepted because the caller allowed it.
    Unsigned,
}

impl Verified {
    /// The anchor of a signed index.
    pub fn anchor(&self) -> Option<&Kid> {
        match self {
            Verified::Signed { anchor, .. } => Some(anchor),
            Verified::Unsigned => None,
        }
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// A timestamp as `seconds.nanoseconds`, defined by its value.
fn ts(t: jiff::Timestamp) -> String {
    // Floor division, so every instant has one encoding (before 1970 too: -1.5 s is
    // `-2.500000000`); unchanged for every instant after 1970.
    let (mut secs, mut nanos) = (t.as_second(), t.subsec_nanosecond());
    if nanos < 0 {
        secs -= 1;
        nanos += 1_000_000_000;
    }
    format!("{secs}.{nanos:09}")
}

/// Text that goes into a signed line must not be able to forge another line.
fn token(text: &str) -> Result<&str> {
    if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::Malformed {
            what: "ring index".into(),
            reason: "a name or fingerprint holds whitespace or control characters".into(),
        });
    }
    Ok(text)
}

/// The bytes the root signs for an index: one line per field, values not JSON text.
///
/// ```text
/// kseal ring index v2
/// ring <ring>
/// version <n>
/// active <kid or ->
/// updated <unix seconds>.<nanoseconds>
/// expires <unix seconds>.<nanoseconds>                                                    (when set)
/// key <kid> <fingerprint> <added> <notBefore> <notAfter> <bits> <sha256 of crt, hex>   (each key, in order)
/// retired <kid> <when>                                                                    (each, in order)
/// root <seq> <kid> <sha256 of the root record's spki, hex>[ dedicated]                    (each, in order)
/// ```
pub fn index_message(index: &Index) -> Result<Vec<u8>> {
    let mut m = String::with_capacity(256 + 200 * index.keys.len());
    // Writing into a String cannot fail.
    let _ = writeln!(m, "{INDEX_DOMAIN}");
    let _ = writeln!(m, "ring {}", token(&index.ring)?);
    let _ = writeln!(m, "version {}", index.version);
    let _ = writeln!(
        m,
        "active {}",
        index.active.as_ref().map_or("-", |k| k.as_str())
    );
    let _ = writeln!(m, "updated {}", ts(index.updated));
    if let Some(expires) = index.expires {
        let _ = writeln!(m, "expires {}", ts(expires));
    }
    for e in &index.keys {
        let _ = writeln!(
            m,
            "key {} {} {} {} {} {} {}",
            e.kid,
            token(&e.fingerprint)?,
            ts(e.added),
            ts(e.not_before),
            ts(e.not_after),
            e.bits,
            hex::encode(Sha256::digest(e.crt.as_bytes()))
        );
    }
    for r in &index.retired {
        let _ = writeln!(m, "retired {} {}", r.kid, ts(r.retired));
    }
    for r in &index.roots {
        let _ = writeln!(
            m,
            "root {} {} {}{}",
            r.seq,
            r.kid,
            hex::encode(Sha256::digest(r.spki.as_bytes())),
            if r.dedicated { " dedicated" } else { "" }
        );
    }
    Ok(m.into_bytes())
}

/// The bytes signed to admit root `kid` as number `seq` after `previous`.
pub fn root_message(ring: &str, seq: u64, kid: &Kid, previous: Option<&Kid>) -> Result<Vec<u8>> {
    Ok(format!(
        "{ROOT_DOMAIN}\nring {}\nseq {seq}\nkid {kid}\nprevious {}\n",
        token(ring)?,
        previous.map_or("-", |k| k.as_str())
    )
    .into_bytes())
}

/// The bytes signed to admit the dedicated root `kid` as number `seq` after `previous`.
pub fn dedicated_root_message(
    ring: &str,
    seq: u64,
    kid: &Kid,
    previous: Option<&Kid>,
    location: Option<&str>,
) -> Result<Vec<u8>> {
    Ok(format!(
        "{DEDICATED_ROOT_DOMAIN}\nring {}\nseq {seq}\nkid {kid}\nprevious {}\nkind dedicated\nlocation {}\n",
        token(ring)?,
        previous.map_or("-", |k| k.as_str()),
        location.map_or(Ok("-"), token)?
    )
    .into_bytes())
}

/// What a root record's signatures sign.
fn record_message(ring: &str, record: &RootRecord, previous: Option<&Kid>) -> Result<Vec<u8>> {
    if record.dedicated {
        dedicated_root_message(
            ring,
            record.seq,
            &record.kid,
            previous,
            record.location.as_deref(),
        )
    } else {
        root_message(ring, record.seq, &record.kid, previous)
    }
}

/// The record that admits the dedicated root `next` as number `seq` after `previous`, with
/// `previous_sig` (the previous root's signature over the same message; none for a ring that
/// starts at its dedicated root). Signed here by `next`.
pub async fn dedicated_record(
    ring: &str,
    seq: u64,
    previous: Option<&Kid>,
    next: &crate::root::RootSigner,
    previous_sig: impl AsyncFnOnce(&[u8]) -> Result<Option<Signature>>,
) -> Result<RootRecord> {
    let location = next.location();
    let message = dedicated_root_message(ring, seq, next.kid(), previous, location.as_deref())?;
    let mut signatures = Vec::new();
    if let Some(sig) = previous_sig(&message).await? {
        signatures.push(sig);
    }
    signatures.push(next.sign(&message).await?);
    Ok(RootRecord {
        seq,
        kid: next.kid().clone(),
        spki: b64(next.public_key().to_spki_der()),
        signatures,
        dedicated: true,
        location,
    })
}

/// Signs `message` with a ring key (a ring whose root is one of its keys).
pub fn sign_with_pair(pair: &KeyPair, message: &[u8]) -> Result<Signature> {
    sign(pair, message)
}

fn sign(pair: &KeyPair, message: &[u8]) -> Result<Signature> {
    let sig = pair
        .private_key()
        .sign_pss_sha256(message)
        .map_err(|_| Error::BadKey {
            what: format!("key {}", Kid::of(pair.public_key()).short()),
            reason: "it cannot sign".into(),
        })?;
    Ok(Signature {
        kid: Kid::of(pair.public_key()),
        sig: b64(&sig),
    })
}

/// The first root record of a ring: `anchor` admits itself.
pub fn genesis(ring: &str, anchor: &KeyPair) -> Result<RootRecord> {
    let kid = Kid::of(anchor.public_key());
    let message = root_message(ring, 1, &kid, None)?;
    Ok(RootRecord {
        seq: 1,
        spki: b64(anchor.public_key().to_spki_der()),
        signatures: vec![sign(anchor, &message)?],
        kid,
        dedicated: false,
        location: None,
    })
}

/// The record that hands the root from `previous` (holding `previous_pair`) to `next`.
pub fn rotate_root(
    ring: &str,
    previous: &RootRecord,
    previous_pair: &KeyPair,
    next: &KeyPair,
) -> Result<RootRecord> {
    let kid = Kid::of(next.public_key());
    let seq = previous.seq + 1;
    let message = root_message(ring, seq, &kid, Some(&previous.kid))?;
    Ok(RootRecord {
        seq,
        spki: b64(next.public_key().to_spki_der()),
        signatures: vec![sign(previous_pair, &message)?, sign(next, &message)?],
        kid,
        dedicated: false,
        location: None,
    })
}

/// Signs `index` (its `roots` already final) with `root`, the key of its last root record.
pub fn sign_index(index: &mut Index, root: &KeyPair) -> Result<()> {
    index.signature = None;
    let message = index_message(index)?;
    index.signature = Some(sign(root, &message)?);
    Ok(())
}

/// Signs `index` (its `roots` already final) with its dedicated root `root`.
pub async fn sign_index_dedicated(index: &mut Index, root: &crate::root::RootSigner) -> Result<()> {
    index.signature = None;
    let message = index_message(index)?;
    index.signature = Some(root.sign(&message).await?);
    Ok(())
}

fn untrusted(what: &str, reason: String) -> Error {
    Error::Untrusted {
        what: what.to_owned(),
        reason,
    }
}

fn check_signature(
    what: &str,
    key: &PublicKey,
    signature: &Signature,
    message: &[u8],
    whose: &str,
) -> Result<()> {
    let bytes =
        unb64(&signature.sig).ok_or_else(|| untrusted(what, format!("{whose} is not base64")))?;
    key.verify_pss_sha256(message, &bytes)
        .map_err(|_| untrusted(what, format!("{whose} does not verify")))
}

/// Checks the root chain: record 1 admits itself, every later one is signed by its
/// predecessor and by itself, and each kid is the hash of its key. Returns the last root's key.
fn check_roots(index: &Index, what: &str) -> Result<PublicKey> {
    let mut previous: Option<(&RootRecord, PublicKey)> = None;
    for (i, record) in index.roots.iter().enumerate() {
        let expected_seq = i as u64 + 1;
        if record.seq != expected_seq {
            return Err(untrusted(
                what,
                format!(
                    "root record {} has sequence number {} (expected {expected_seq})",
                    i + 1,
                    record.seq
                ),
            ));
        }
        let key = unb64(&record.spki)
            .and_then(|der| PublicKey::from_spki_der(&der).ok())
            .ok_or_else(|| {
                untrusted(
                    what,
                    format!(
                        "root {} ({}) holds no valid public key",
                        record.seq,
                        record.kid.short()
                    ),
                )
            })?;
        if Kid::of(&key) != record.kid {
            return Err(untrusted(
                what,
                format!(
                    "root {} is filed as key {} but holds another key",
                    record.seq,
                    record.kid.short()
                ),
            ));
        }
        if record.dedicated {
            let ring_key = index.keys.iter().any(|e| e.kid == record.kid)
                || index.retired.iter().any(|r| r.kid == record.kid);
            if ring_key {
                return Err(untrusted(
                    what,
                    format!(
                        "root {} ({}) says it is a dedicated root but is a key of the ring:                          clusters hold ring keys, so none may act as a dedicated root",
                        record.seq,
                        record.kid.short()
                    ),
                ));
            }
        } else if let Some((prev, _)) = &previous
            && prev.dedicated
        {
            return Err(untrusted(
                what,
                format!(
                    "root {} ({}) is a ring key after the ring moved to the dedicated root {}:                      ring keys, which clusters hold, never sign a history again once it has a                      dedicated root",
                    record.seq,
                    record.kid.short(),
                    prev.kid.short()
                ),
            ));
        }
        let message = record_message(&index.ring, record, previous.as_ref().map(|(r, _)| &r.kid))?;
        let by = |kid: &Kid| record.signatures.iter().find(|s| &s.kid == kid);
        let own = by(&record.kid).ok_or_else(|| {
            untrusted(
                what,
                format!(
                    "root {} ({}) is not signed by its own key",
                    record.seq,
                    record.kid.short()
                ),
            )
        })?;
        check_signature(
            what,
            &key,
            own,
            &message,
            &format!(
                "root {}'s own signature ({})",
                record.seq,
                record.kid.short()
            ),
        )?;
        if let Some((prev, prev_key)) = &previous {
            let sig = by(&prev.kid).ok_or_else(|| {
                untrusted(
                    what,
                    format!(
                        "root {} ({}) is not signed by the previous root {}",
                        record.seq,
                        record.kid.short(),
                        prev.kid.short()
                    ),
                )
            })?;
            check_signature(
                what,
                prev_key,
                sig,
                &message,
                &format!(
                    "the signature of root {} ({}) by the previous root {}",
                    record.seq,
                    record.kid.short(),
                    prev.kid.short()
                ),
            )?;
        }
        previous = Some((record, key));
    }
    previous
        .map(|(_, key)| key)
        .ok_or_else(|| untrusted(what, "it has no root records".into()))
}

/// [`verify`] for an unsigned (schema 1) index: taken only where `trust` allows unsigned
/// indexes and pins nothing.
fn verify_unsigned(trust: &Trust, what: &str) -> Result<Verified> {
    if trust.unsigned && trust.anchor.is_none() {
        return Ok(Verified::Unsigned);
    }
    if let Some(pinned) = &trust.anchor {
        // An unsigned index under a pin is either a ring that was never signed (pinned
        // ahead of its migration) or a signed ring's index replaced by an unsigned one;
        // signing the latter would bless what its writer put there.
        return Err(untrusted(
            what,
            format!(
                "it is not signed, but this ring is pinned at anchor {}. If the ring was \
                 never signed, its seeder signs it once with `kseal keys sign` after \
                 checking its keys; if it was signed before, a signed index was replaced by \
                 an unsigned one: do not sign it, restore the signed index from the store's \
                 previous version",
                pinned.short()
            ),
        ));
    }
    Err(untrusted(
        what,
        "it is not signed (written by a kseal before signed ring histories); the ring's \
         seeder signs it once with `kseal keys sign`"
            .into(),
    ))
}

/// Checks `index` against `trust`: see the module documentation.
pub fn verify(index: &Index, trust: &Trust, what: &str) -> Result<Verified> {
    if index.schema == crate::contract::UNSIGNED_INDEX_SCHEMA {
        return verify_unsigned(trust, what);
    }
    let root_key = check_roots(index, what)?;
    let anchor = index.roots[0].kid.clone();
    if let Some(pinned) = &trust.anchor
        && !index.roots.iter().any(|r| &r.kid == pinned)
    {
        return Err(untrusted(
            what,
            format!(
                "its history (anchor {}) does not pass through the pinned root {}: it was \
                 replaced by a history rooted at another key",
                anchor.short(),
                pinned.short()
            ),
        ));
    }
    if let Some((seq, seen)) = &trust.seen_root {
        let at = usize::try_from(*seq)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| index.roots.get(i));
        if at.map(|r| &r.kid) != Some(seen) {
            return Err(untrusted(
                what,
                format!(
                    "its history does not extend root {} ({}), the newest root this reader saw \
                     before: a fork from an older root",
                    seq,
                    seen.short()
                ),
            ));
        }
    }
    let root = index.roots[index.roots.len() - 1].kid.clone();
    let signature = index
        .signature
        .as_ref()
        .ok_or_else(|| untrusted(what, "it has no signature".into()))?;
    if signature.kid != root {
        return Err(untrusted(
            what,
            format!(
                "it is signed by key {}, not by the current root {}",
                signature.kid.short(),
                root.short()
            ),
        ));
    }
    let mut unsigned = index.clone();
    unsigned.signature = None;
    check_signature(
        what,
        &root_key,
        signature,
        &index_message(&unsigned)?,
        &format!("the index signature by root {}", root.short()),
    )?;
    if index.version < trust.min_version {
        return Err(untrusted(
            what,
            format!(
                "it is version {}, older than version {} already seen: a rolled-back index",
                index.version, trust.min_version
            ),
        ));
    }
    let last = &index.roots[index.roots.len() - 1];
    if last.dedicated && index.expires.is_none() {
        return Err(untrusted(
            what,
            format!(
                "it is signed by the dedicated root {} but carries no expiry, which kseal \
                 always writes with a dedicated root",
                root.short()
            ),
        ));
    }
    let now = trust.now.unwrap_or_else(jiff::Timestamp::now);
    let expired = index.expires.is_some_and(|e| now >= e);
    if expired && !trust.accept_expired {
        return Err(untrusted(
            what,
            format!(
                "it expired at {} (version {}): the ring's seeder re-signs it with `kseal keys \
                 refresh` before then; an expired index may be an old one replayed",
                index.expires.map(|e| e.to_string()).unwrap_or_default(),
                index.version
            ),
        ));
    }
    Ok(Verified::Signed {
        anchor,
        root,
        root_seq: last.seq,
        dedicated: last.dedicated,
        version: index.version,
        expires: index.expires,
        expired,
    })
}
