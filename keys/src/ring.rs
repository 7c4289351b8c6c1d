//! Key pairs and the key ring that opens sealed values.

use std::sync::Arc;
use std::time::SystemTime;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use zeroize::Zeroize as _;

use crate::envelope::{Envelope, ZERO_NONCE};
use crate::private::{CertificateOptions, KeySize};
use crate::{Certificate, Error, KeyId, Label, Plaintext, PrivateKey, PublicKey, Result};

/// A private key with its certificate; the unit a key ring holds.
#[derive(Clone)]
pub struct KeyPair {
    private: Arc<PrivateKey>,
    certificate: Certificate,
    order_time: SystemTime,
}

impl KeyPair {
    /// Pairs a key with its certificate, checking that they belong together.
    pub fn new(private: PrivateKey, certificate: Certificate) -> Result<Self> {
        if private.public_key() != certificate.public_key() {
            return Err(Error::KeyMismatch {
                certificate: certificate.id().to_string(),
                private_key: private.public_key().id().to_string(),
            });
        }
        Ok(Self {
            order_time: certificate.not_before(),
            private: Arc::new(private),
            certificate,
        })
    }

    /// Parses a PEM private key (PKCS #1 or PKCS #8) and a PEM certificate, as found in a
    /// Bitnami key Secret's `tls.key` and `tls.crt`.
    pub fn from_pem(private_key_pem: &str, certificate_pem: &str) -> Result<Self> {
        Self::new(
            PrivateKey::from_pem(private_key_pem)?,
            Certificate::from_pem(certificate_pem)?,
        )
    }

    /// Generates a key of `size` and a self-signed certificate shaped like Bitnami's.
    pub fn generate(size: KeySize, options: &CertificateOptions) -> Result<Self> {
        let private = PrivateKey::generate(size)?;
        let certificate = private.self_signed_certificate(options)?;
        Self::new(private, certificate)
    }

    /// Overrides the time that orders this key in a ring (the certificate's NotBefore by
    /// default; Bitnami can also order by the key Secret's creation time).
    pub fn with_order_time(mut self, time: SystemTime) -> Self {
        self.order_time = time;
        self
    }

    /// The fingerprint.
    pub fn id(&self) -> &KeyId {
        self.certificate.id()
    }

    /// The private key.
    pub fn private_key(&self) -> &PrivateKey {
        &self.private
    }

    /// The public key.
    pub fn public_key(&self) -> &PublicKey {
        self.certificate.public_key()
    }

    /// The certificate.
    pub fn certificate(&self) -> &Certificate {
        &self.certificate
    }

    /// The time that orders this key in a ring; the newest key seals.
    pub fn order_time(&self) -> SystemTime {
        self.order_time
    }

    /// Opens one envelope with this key only. One RSA operation.
    pub fn open(&self, label: &Label, sealed: &[u8]) -> Result<Plaintext> {
        self.open_envelope(label, &Envelope::parse(sealed)?)
    }

    fn open_envelope(&self, label: &Label, envelope: &Envelope<'_>) -> Result<Plaintext> {
        let session = self
            .private
            .unwrap_session_key(envelope.rsa_ciphertext(), label.as_bytes())?;
        let aead =
            LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &session[..]).map_err(|_| Error::Open)?);
        let mut buf = envelope.aead_ciphertext().to_vec();
        // Single-use session key: the zero nonce is what Bitnami's format prescribes.
        match aead.open_in_place(
            Nonce::assume_unique_for_key(ZERO_NONCE),
            Aad::empty(),
            &mut buf,
        ) {
            Ok(plain) => {
                let len = plain.len();
                buf.truncate(len);
                Ok(Plaintext::new(buf))
            }
            Err(_) => {
                buf.zeroize();
                Err(Error::Open)
            }
        }
    }
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("id", self.id())
            .field("certificate", &self.certificate)
            .field("order_time", &self.order_time)
            .finish_non_exhaustive()
    }
}

/// A successfully opened value.
#[derive(Debug)]
pub struct Opened {
    /// The decrypted bytes.
    pub plaintext: Plaintext,
    /// The key that opened it (worth caching as the next hint for the same object).
    pub key: KeyId,
    /// RSA private-key operations this open took (1 when the first key tried fits).
    pub rsa_operations: u32,
}

/// Counters an open adds to, also when it fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenStats {
    /// RSA private-key operations performed.
    pub rsa_operations: u64,
    /// Keys passed over without an RSA operation because the envelope's RSA block cannot be
    /// one of their ciphertexts (its length differs from the modulus's, or its value is not
    /// below the modulus). Every key an open considers counts here or in `rsa_operations`.
    pub keys_ruled_out: u64,
}

/// What a failed hinted key means to [`KeyRing::open_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum HintPolicy {
    /// The hint only orders the attempts: every key is tried (the reconciler; the result
    /// never depends on the hint).
    #[default]
    Orders,
    /// When the ring has the hinted key, only that key is tried (untrusted requests: the
    /// RSA work one value costs is bounded by one operation when it names a key).
    Binds,
}

/// Which keys an open tries first ([`KeyRing::open_ordered`]); the ring's own order (the
/// sealing key, then the rest newest first) follows.
///
/// The attempts go: the `hint` key (if the ring has it; with [`HintPolicy::Binds`] no other
/// key is tried then), then the `prefer` keys in the order given (ids the ring lacks, and
/// repeats, are skipped), then the ring's order. Preferences only order the attempts: the
/// result never depends on them, only the RSA work spent.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOrder<'a> {
    hint: Option<&'a KeyId>,
    policy: HintPolicy,
    prefer: &'a [KeyId],
}

impl<'a> OpenOrder<'a> {
    /// The ring's order: no hint, no preference.
    pub fn new() -> Self {
        Self::default()
    }

    /// The key the value names (the `kseal.dev/sealing-key` annotation, or the key that
    /// opened this item last time), tried first.
    pub fn hint(mut self, hint: Option<&'a KeyId>) -> Self {
        self.hint = hint;
        self
    }

    /// What a failed hint means (see [`HintPolicy`]).
    pub fn policy(mut self, policy: HintPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Keys to try after the hint and before the ring's order, e.g. the keys that opened
    /// other values of the same object or namespace lately.
    pub fn prefer(mut self, keys: &'a [KeyId]) -> Self {
        self.prefer = keys;
        self
    }
}

/// All keys a controller can open with; the newest seals.
///
/// Keys are kept newest first (by [`KeyPair::order_time`], ties broken by fingerprint), so
/// every ring with the same keys tries them in the same order. Cloning is cheap: private keys
/// are shared.
#[derive(Clone, Default, Debug)]
pub struct KeyRing {
    keys: Vec<KeyPair>,
    /// The key chosen to seal instead of the newest (a fleet ring's active key).
    preferred: Option<KeyId>,
    /// No key seals (a fleet ring whose active key cannot be used here); every key opens.
    sealing_disabled: bool,
}

impl KeyRing {
    /// An empty ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a key; returns `false` (and keeps the ring unchanged) if a key with the same
    /// fingerprint is already there.
    pub fn insert(&mut self, pair: KeyPair) -> bool {
        if self.get(pair.id()).is_some() {
            return false;
        }
        let at = self
            .keys
            .partition_point(|k| Self::newer_first(k, &pair) == std::cmp::Ordering::Less);
        self.keys.insert(at, pair);
        true
    }

    fn newer_first(a: &KeyPair, b: &KeyPair) -> std::cmp::Ordering {
        b.order_time
            .cmp(&a.order_time)
            .then_with(|| a.id().cmp(b.id()))
    }

    /// Removes the key with this fingerprint.
    pub fn remove(&mut self, id: &KeyId) -> Option<KeyPair> {
        let at = self.keys.iter().position(|k| k.id() == id)?;
        if self.preferred.as_ref() == Some(id) {
            self.preferred = None;
        }
        Some(self.keys.remove(at))
    }

    /// Makes the key with this fingerprint the sealing key whatever its age (a fleet key
    /// ring names its active key explicitly). Returns `false`, changing nothing, when the ring
    /// has no such key.
    pub fn set_sealing_key(&mut self, id: &KeyId) -> bool {
        if self.get(id).is_none() {
            return false;
        }
        self.preferred = Some(id.clone());
        true
    }

    /// The key with this fingerprint.
    pub fn get(&self, id: &KeyId) -> Option<&KeyPair> {
        self.keys.iter().find(|k| k.id() == id)
    }

    /// The key that seals new values: the one chosen with [`KeyRing::set_sealing_key`], else
    /// the newest; none after [`KeyRing::disable_sealing`].
    pub fn sealing_key(&self) -> Option<&KeyPair> {
        if self.sealing_disabled {
            return None;
        }
        self.preferred_key()
    }

    /// No key seals from now on ([`KeyRing::sealing_key`] is `None`), while every key still
    /// opens: for a fleet ring whose active key is not usable, rather than sealing with a key
    /// the ring never activated.
    pub fn disable_sealing(&mut self) {
        self.sealing_disabled = true;
    }

    /// The key chosen with [`KeyRing::set_sealing_key`], else the newest, even when sealing
    /// is disabled (it is tried first when opening, and keys the controller's data MACs).
    pub fn preferred_key(&self) -> Option<&KeyPair> {
        self.preferred
            .as_ref()
            .and_then(|id| self.get(id))
            .or_else(|| self.keys.first())
    }

    /// All keys, newest first.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &KeyPair> {
        self.keys.iter()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the ring has no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Opens `sealed` (raw envelope bytes) for `label`.
    ///
    /// Keys are tried in a fixed order: the `hint` key if the ring has it, then the sealing
    /// key, then the rest newest first. A key is ruled out without an RSA operation when the
    /// envelope's RSA block cannot be one of its ciphertexts: a different length than its
    /// modulus, or a value not below its modulus (public data only; the private operation
    /// would reject such a block anyway, so the result is the same). Every failure is the one
    /// opaque [`Error::Open`]; structural problems of the envelope are reported before any
    /// key is tried.
    pub fn open(&self, label: &Label, sealed: &[u8], hint: Option<&KeyId>) -> Result<Opened> {
        self.open_counted(label, sealed, hint, &mut OpenStats::default())
    }

    /// [`KeyRing::open`], adding the RSA operations spent to `stats` whatever the outcome.
    pub fn open_counted(
        &self,
        label: &Label,
        sealed: &[u8],
        hint: Option<&KeyId>,
        stats: &mut OpenStats,
    ) -> Result<Opened> {
        self.open_with(label, sealed, hint, HintPolicy::Orders, stats)
    }

    /// [`KeyRing::open_counted`] with a choice of what a failed `hint` means: with
    /// [`HintPolicy::Binds`], when the ring has the hinted key and it does not open `sealed`,
    /// no other key is tried (one RSA operation at most), so a value that claims a key costs
    /// one operation, not one per key. A hint the ring lacks only orders, as always.
    pub fn open_with(
        &self,
        label: &Label,
        sealed: &[u8],
        hint: Option<&KeyId>,
        policy: HintPolicy,
        stats: &mut OpenStats,
    ) -> Result<Opened> {
        let order = OpenOrder::new().hint(hint).policy(policy);
        self.open_ordered(label, sealed, &order, stats)
    }

    /// Opens `sealed` trying keys in `order` (see [`OpenOrder`]): the hint, then the
    /// preferred keys, then the ring's order; keys the public checks rule out cost no RSA
    /// operation. Adds to `stats` whatever the outcome.
    pub fn open_ordered(
        &self,
        label: &Label,
        sealed: &[u8],
        order: &OpenOrder<'_>,
        stats: &mut OpenStats,
    ) -> Result<Opened> {
        let envelope = Envelope::parse(sealed)?;
        if self.keys.is_empty() {
            return Err(Error::EmptyKeyRing);
        }
        let rsa_block = envelope.rsa_ciphertext();
        let mut rsa_operations = 0u32;
        for index in self.attempts(order) {
            let pair = &self.keys[index];
            // Public checks (length, block < modulus) before the private operation: they
            // read only the ciphertext and the public modulus, so they need not be
            // constant-time, and a key they rule out could not have opened the value.
            if !pair.public_key().fits_rsa_block(rsa_block) {
                stats.keys_ruled_out += 1;
                continue;
            }
            rsa_operations += 1;
            stats.rsa_operations += 1;
            if let Ok(plaintext) = pair.open_envelope(label, &envelope) {
                return Ok(Opened {
                    plaintext,
                    key: pair.id().clone(),
                    rsa_operations,
                });
            }
        }
        Err(Error::Open)
    }

    /// Ring indices in the order `order` tries them, each once.
    fn attempts(&self, order: &OpenOrder<'_>) -> Vec<usize> {
        let position = |id: &KeyId| self.keys.iter().position(|k| k.id() == id);
        let hinted = order.hint.and_then(position);
        if let Some(hinted) = hinted
            && order.policy == HintPolicy::Binds
        {
            return vec![hinted];
        }
        let sealing = self.preferred.as_ref().and_then(position).unwrap_or(0);
        let mut attempts = Vec::with_capacity(self.keys.len());
        let candidates = hinted
            .into_iter()
            .chain(order.prefer.iter().filter_map(position))
            .chain([sealing])
            .chain(0..self.keys.len());
        // Rings hold a few dozen keys at most: a linear membership test is cheaper than a set.
        for index in candidates {
            if !attempts.contains(&index) {
                attempts.push(index);
            }
        }
        attempts
    }

    /// Opens standard base64 text, as found in `spec.encryptedData`.
    pub fn open_base64(&self, label: &Label, sealed: &str, hint: Option<&KeyId>) -> Result<Opened> {
        let bytes = crate::envelope::decode_base64(sealed)?;
        self.open(label, &bytes, hint)
    }
}

impl FromIterator<KeyPair> for KeyRing {
    fn from_iter<T: IntoIterator<Item = KeyPair>>(iter: T) -> Self {
        let mut ring = KeyRing::new();
        for pair in iter {
            ring.insert(pair);
        }
        ring
    }
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use super::*;
    use crate::{Scope, seal};

    /// Two 2048-bit pairs, generated once. Test-only key size for speed: do not copy.
    fn pairs() -> &'static [KeyPair; 2] {
        static PAIRS: OnceLock<[KeyPair; 2]> = OnceLock::new();
        PAIRS.get_or_init(|| {
            let generate =
                || KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap();
            [generate(), generate()]
        })
    }

    /// The pairs ordered by modulus: (smaller, larger).
    fn by_modulus() -> (&'static KeyPair, &'static KeyPair) {
        let [a, b] = pairs();
        if a.public_key().modulus() < b.public_key().modulus() {
            (a, b)
        } else {
            (b, a)
        }
    }

    /// An envelope around `rsa_block` with an empty AES-GCM part (tag only).
    fn envelope_with(rsa_block: &[u8]) -> Vec<u8> {
        crate::envelope::frame(rsa_block, &[0; crate::envelope::TAG_LEN]).unwrap()
    }

    /// The top of a sealed value whose RSA block is `modulus` minus one at its 8th byte.
    fn top_just_below(modulus: &[u8]) -> crate::BlockTop {
        let mut block = modulus.to_vec();
        block[7] = block[7].wrapping_sub(1);
        let value = crate::envelope::encode_base64(&envelope_with(&block));
        crate::BlockTop::of_base64_value(&value).unwrap()
    }

    #[test]
    fn the_tightest_moduli_above_a_ceiling_come_first() {
        let (small, large) = by_modulus();
        let ring: KeyRing = [large.clone(), small.clone()].into_iter().collect();
        let any = |_: &KeyId| true;
        let below_small = top_just_below(small.public_key().modulus());
        let below_large = top_just_below(large.public_key().modulus());
        assert_eq!(
            ring.tightest_above(below_small, 2, any),
            [small.id().clone(), large.id().clone()]
        );
        assert_eq!(
            ring.tightest_above(below_small, 1, any),
            [small.id().clone()]
        );
        // A ceiling above the smaller modulus rules that key out.
        assert_eq!(
            ring.tightest_above(below_large, 2, any),
            [large.id().clone()]
        );
        // Only eligible keys (those that may open in the namespace) are named.
        let not_small = |id: &KeyId| id != small.id();
        assert_eq!(
            ring.tightest_above(below_small, 2, not_small),
            [large.id().clone()]
        );
        // A ceiling at the top of the range, or of another length, names nothing.
        let top = crate::BlockTop::of_modulus(&[0xff; 256]).unwrap();
        assert!(ring.tightest_above(top, 2, any).is_empty());
        let other = crate::BlockTop::of_modulus(&[0x10; 512]).unwrap();
        assert!(ring.tightest_above(other, 2, any).is_empty());
    }

    #[test]
    fn a_block_not_below_the_modulus_rules_the_key_out_without_rsa_work() {
        let (small, large) = by_modulus();
        let ring: KeyRing = [small.clone(), large.clone()].into_iter().collect();
        let label = Scope::Strict.label("ns", "name");
        // The larger modulus minus one: below the larger modulus, not below the smaller.
        let mut block = large.public_key().modulus().to_vec();
        if let Some(last) = block.last_mut() {
            *last = last.wrapping_sub(1);
        }
        assert!(block.as_slice() < large.public_key().modulus());
        assert!(block.as_slice() >= small.public_key().modulus());
        let mut stats = OpenStats::default();
        let result = ring.open_counted(&label, &envelope_with(&block), None, &mut stats);
        assert_eq!(result.unwrap_err(), Error::Open);
        assert_eq!(
            (stats.rsa_operations, stats.keys_ruled_out),
            (1, 1),
            "only the larger key spends an RSA operation"
        );
        assert!(!small.public_key().may_have_sealed(&envelope_with(&block)));
        assert!(large.public_key().may_have_sealed(&envelope_with(&block)));
    }

    #[test]
    fn a_block_equal_to_or_above_every_modulus_costs_no_rsa_work() {
        let ring: KeyRing = pairs().iter().cloned().collect();
        let label = Scope::Cluster.label("", "");
        let (_, large) = by_modulus();
        let equal = large.public_key().modulus().to_vec();
        for block in [equal, vec![0xff; 256]] {
            let mut stats = OpenStats::default();
            let result = ring.open_counted(&label, &envelope_with(&block), None, &mut stats);
            assert_eq!(result.unwrap_err(), Error::Open);
            assert_eq!((stats.rsa_operations, stats.keys_ruled_out), (0, 2));
        }
    }

    #[test]
    fn a_block_of_another_length_rules_every_key_out() {
        let ring: KeyRing = pairs().iter().cloned().collect();
        let label = Scope::Cluster.label("", "");
        for len in [1, 255, 257, 512] {
            let mut stats = OpenStats::default();
            let sealed = envelope_with(&vec![0; len]);
            let result = ring.open_counted(&label, &sealed, None, &mut stats);
            assert_eq!(result.unwrap_err(), Error::Open, "{len}");
            assert_eq!(
                (stats.rsa_operations, stats.keys_ruled_out),
                (0, 2),
                "{len}"
            );
            assert!(!pairs()[0].public_key().may_have_sealed(&sealed));
        }
    }

    #[test]
    fn a_value_always_fits_the_key_that_sealed_it() {
        let label = Scope::Strict.label("ns", "name");
        for pair in pairs() {
            for i in 0..32u8 {
                let sealed = seal(pair.public_key(), &label, &[i]).unwrap();
                assert!(pair.public_key().may_have_sealed(&sealed));
            }
        }
        assert!(!pairs()[0].public_key().may_have_sealed(&[0, 1]));
    }

    fn ids(ring: &KeyRing, order: &OpenOrder<'_>) -> Vec<KeyId> {
        ring.attempts(order)
            .into_iter()
            .map(|i| ring.keys[i].id().clone())
            .collect()
    }

    #[test]
    fn preferred_keys_come_after_the_hint_and_before_the_ring_order() {
        let [a, b] = pairs();
        let t0 = SystemTime::UNIX_EPOCH;
        let (older, newer) = (
            a.clone().with_order_time(t0),
            b.clone()
                .with_order_time(t0 + std::time::Duration::from_secs(1)),
        );
        let ring: KeyRing = [older.clone(), newer.clone()].into_iter().collect();
        let (o, n) = (older.id().clone(), newer.id().clone());
        let unknown = KeyId::parse("SHA256:mOu37IQKwNgtj0FeKeyH6IwE9tIV4Wv0EQyI/vw5vxQ").unwrap();
        assert_eq!(ids(&ring, &OpenOrder::new()), [n.clone(), o.clone()]);
        let prefer_older = [unknown.clone(), o.clone(), o.clone()];
        let order = OpenOrder::new().prefer(&prefer_older);
        assert_eq!(ids(&ring, &order), [o.clone(), n.clone()]);
        // The hint still goes first, and with Binds it is the only key tried.
        let order = OpenOrder::new().hint(Some(&n)).prefer(&prefer_older);
        assert_eq!(ids(&ring, &order), [n.clone(), o.clone()]);
        let order = order.policy(HintPolicy::Binds);
        assert_eq!(ids(&ring, &order), std::slice::from_ref(&n));
        // A binding hint the ring lacks only orders, and preferences apply.
        let order = OpenOrder::new()
            .hint(Some(&unknown))
            .policy(HintPolicy::Binds)
            .prefer(&prefer_older);
        assert_eq!(ids(&ring, &order), [o, n]);
    }

    #[test]
    fn a_right_preference_opens_with_one_rsa_operation() {
        let [a, b] = pairs();
        let t0 = SystemTime::UNIX_EPOCH;
        let older = a.clone().with_order_time(t0);
        let newer = b
            .clone()
            .with_order_time(t0 + std::time::Duration::from_secs(1));
        let ring: KeyRing = [older.clone(), newer].into_iter().collect();
        let label = Scope::Strict.label("ns", "name");
        let prefer = [older.id().clone()];
        for i in 0..8u8 {
            let sealed = seal(older.public_key(), &label, &[i]).unwrap();
            let mut stats = OpenStats::default();
            let order = OpenOrder::new().prefer(&prefer);
            let opened = ring
                .open_ordered(&label, &sealed, &order, &mut stats)
                .unwrap();
            assert_eq!((opened.key, opened.rsa_operations), (older.id().clone(), 1));
            assert_eq!((stats.rsa_operations, stats.keys_ruled_out), (1, 0));
        }
    }

    #[test]
    fn every_key_considered_is_either_ruled_out_or_costs_one_operation() {
        let ring: KeyRing = pairs().iter().cloned().collect();
        let label = Scope::Strict.label("ns", "name");
        let wrong = Scope::Strict.label("ns", "other");
        for pair in pairs() {
            for i in 0..8u8 {
                let sealed = seal(pair.public_key(), &label, &[i]).unwrap();
                let mut stats = OpenStats::default();
                assert_eq!(
                    ring.open_counted(&wrong, &sealed, None, &mut stats)
                        .unwrap_err(),
                    Error::Open
                );
                assert_eq!(stats.rsa_operations + stats.keys_ruled_out, 2);
                let fits = pairs()
                    .iter()
                    .filter(|p| p.public_key().may_have_sealed(&sealed))
                    .count() as u64;
                assert_eq!(stats.rsa_operations, fits);
            }
        }
    }
}
