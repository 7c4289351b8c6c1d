//! The data MAC check: whether a written Secret's data still carries a MAC made with a key of
//! the ring (drift detection without unsealing), and the MAC keys derived from the ring.

use super::*;

/// MAC keys derived from the current ring, rebuilt when the ring changes.
#[derive(Default)]
pub(super) struct MacKeys {
    pub(super) ring: Option<Arc<KeyRing>>,
    pub(super) keys: HashMap<(MacVersion, KeyId), Zeroizing<[u8; 32]>>,
}

/// Where the in-sync check takes the data-MAC verdict from.
#[derive(Clone, Copy)]
pub(super) enum MacCheck<'a> {
    /// Computed here over the Secret's data (a Secret read with a GET).
    Data,
    /// Decided when the watch delivered the Secret ([`crate::cache::secret`]): it holds for a
    /// Secret written whole (not `patch`) while the ring still holds the key it names (the
    /// MAC key is derived from that key alone).
    Cached(&'a MacVerdict),
}

impl MacCheck<'_> {
    pub(super) fn verifies(
        self,
        ctx: &Context,
        ring: &Arc<KeyRing>,
        ss: &SealedSecret,
        existing: &Secret,
        mode: Mode,
        digest: &str,
    ) -> bool {
        match self {
            MacCheck::Data => verify_mac(ctx, ring, ss, existing, mode, digest),
            MacCheck::Cached(MacVerdict::Verified(id)) => {
                mode == Mode::Replace && ring.get(id).is_some()
            }
            MacCheck::Cached(MacVerdict::Unknown) => false,
        }
    }
}

/// The data-MAC verdict over every item of a Secret the watch delivered (before its data is
/// wiped; see [`crate::cache::secret`]).
pub(super) fn mac_verdict(ctx: &Context, secret: &Secret) -> MacVerdict {
    let meta = &secret.metadata;
    if is_true(meta, PATCH_ANNOTATION) {
        return MacVerdict::Unknown;
    }
    let Some(digest) = annotation(meta, SPEC_DIGEST_ANNOTATION) else {
        return MacVerdict::Unknown;
    };
    let empty = empty_data();
    let data = secret.data.as_ref().unwrap_or(&empty);
    match mac_key_verifying(ctx, &ctx.state.keys.ring(), secret, digest, data.iter()) {
        Some(id) => MacVerdict::Verified(id),
        None => MacVerdict::Unknown,
    }
}

pub(super) fn verify_mac(
    ctx: &Context,
    ring: &Arc<KeyRing>,
    ss: &SealedSecret,
    existing: &Secret,
    mode: Mode,
    digest: &str,
) -> bool {
    let empty = empty_data();
    let data = existing.data.as_ref().unwrap_or(&empty);
    let covered: Vec<(&String, &ByteString)> = match mode {
        Mode::Replace => data.iter().collect(),
        Mode::Patch { .. } => {
            let Some(items) = expected_items(ss) else {
                return false;
            };
            let mut covered = Vec::with_capacity(items.len());
            for item in &items {
                match data.get_key_value(item) {
                    Some(kv) => covered.push(kv),
                    None => return false,
                }
            }
            covered
        }
    };
    mac_key_verifying(ctx, ring, existing, digest, covered.into_iter()).is_some()
}

/// The ring key whose MAC key verifies `secret`'s data-MAC annotation over `covered` and the
/// stored spec `digest`, if any (the comparison is constant-time).
pub(super) fn mac_key_verifying<'a>(
    ctx: &Context,
    ring: &Arc<KeyRing>,
    secret: &Secret,
    digest: &str,
    covered: impl Iterator<Item = (&'a String, &'a ByteString)>,
) -> Option<KeyId> {
    let meta = &secret.metadata;
    let (version, id, tag) = annotation(meta, DATA_MAC_ANNOTATION).and_then(formats::parse_mac)?;
    let key = ctx.mac_key(ring, version, &id)?;
    let mac = formats::mac_over(
        version,
        &key,
        digest,
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        secret_type(secret),
        covered,
    )?;
    mac.verify_slice(&tag).is_ok().then_some(id)
}
