//! The two annotations the reconciler stores on every Secret it writes, defined byte by byte:
//! [`SPEC_DIGEST_ANNOTATION`] and [`DATA_MAC_ANNOTATION`].
//!
//! Both outlive the controller that wrote them, so neither may depend on an incidental
//! encoding (a `Debug` derive, a serializer's field order, a PEM encoder's line length): a
//! dependency bump would otherwise make every Secret in every cluster look changed. The
//! current forms (v2) are specified below; tests pin them with literal vectors.
//!
//! # Spec digest, v2
//!
//! `v2:sha256:` followed by the lowercase hex SHA-256 of this encoding of the SealedSecret
//! (everything that decides the Secret except the keys and the UID, which the reconciler
//! checks through the owner reference):
//!
//! | # | field | encoding |
//! |---|---|---|
//! | 1 | domain and version | the 22 bytes `kseal.dev/spec-digest\0`, then the byte `0x02` |
//! | 2 | `metadata.namespace` | `opt(str)` |
//! | 3 | `metadata.name` | `opt(str)` |
//! | 4 | scope (from the top-level annotations) | one byte: `0x01` strict, `0x02` namespace-wide, `0x03` cluster-wide |
//! | 5 | `spec.data` (deprecated whole-Secret value) | `opt(str)` |
//! | 6 | `spec.encryptedData` | `map(str)` |
//! | 7 | `spec.template` | `opt(template)` |
//!
//! `template` is, in order: `data` as `opt(map(opt(str)))` (a `null` template is `0x00`),
//! `immutable` as `opt(bool)`, `type` as `opt(str)`, `metadata` as `opt(meta)`.
//!
//! `meta` is, in order: `name`, `namespace` and `generateName` as `opt(str)`; `labels` and
//! `annotations` as `opt(map(str))`; `finalizers` as `opt(list(str))`; `ownerReferences` as
//! `opt(list(owner))`, where `owner` is `apiVersion`, `kind`, `name`, `uid` as `str`, then
//! `controller` and `blockOwnerDeletion` as `opt(bool)`. The fields the API server sets
//! (`uid`, `resourceVersion`, `generation`, `creationTimestamp`, `deletionTimestamp`,
//! `deletionGracePeriodSeconds`, `selfLink`, `managedFields`) are left out: unsealing drops
//! them, so they cannot change the Secret.
//!
//! Primitives: `str` is the byte length as a big-endian `u64`, then the UTF-8 bytes; `bool`
//! is `0x00` or `0x01`; `opt(x)` is `0x00` when absent, else `0x01` then `x`; `map(v)` is
//! the entry count as a big-endian `u64`, then each entry as `str(key)` then `v(value)`, in
//! ascending byte order of the keys; `list(x)` is the count as a big-endian `u64`, then the
//! items in their stored order.
//!
//! # Data MAC, v2
//!
//! `v2:<key fingerprint>:<tag>`, the tag in standard base64 without padding:
//!
//! - key: HKDF-SHA256 (RFC 5869) with salt `kseal.dev/data-mac/v2`, input keying material the
//!   private key's PKCS #1 `RSAPrivateKey` DER, info `kseal secret data mac v2`, 32 bytes;
//! - tag: HMAC-SHA256 under that key of the 22 bytes `kseal.dev/data-mac v2\0`, then
//!   `str(digest)` (the digest annotation as stored on the Secret), `str(namespace)`,
//!   `str(name)`, `str(type)` (`Opaque` when unset), then the covered data items as
//!   `map(bytes)` (sorted by key; `bytes` is encoded as `str` is).
//!
//! # Version 1, read only
//!
//! Secrets written before v2 carry `sha256:<base64 of SHA-256 of a serde_json rendering>`
//! ([`spec_digest_v1`]) and `v1:<fingerprint>:<tag>` MACs whose key is derived from the PKCS #1
//! **PEM text** of the private key, with the strings `kseal.dev/data-mac/v1`,
//! `kseal secret data mac` and `kseal.dev/data-mac v1\0`. The reconciler still accepts both,
//! so upgrading rewrites nothing; whatever it writes is v2. Should the v1 reader ever stop
//! matching (its digest leans on `Debug` and serde output), the cost is one unseal and
//! rewrite per Secret, not a wrong Secret.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use hmac::{Hmac, KeyInit as _, Mac as _};
use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kseal_api::{SealedSecret, SealedSecretSpec, SecretTemplateSpec};
use kseal_keys::{KeyId, KeyPair, Scope};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

/// Secret annotation: digest of the SealedSecret spec and scope the Secret was written from.
pub const SPEC_DIGEST_ANNOTATION: &str = "kseal.dev/spec-digest";
/// Secret annotation: keyed MAC over the data the controller wrote (see
/// [`crate::reconcile`]'s module docs).
pub const DATA_MAC_ANNOTATION: &str = "kseal.dev/data-mac";

/// How a v2 spec digest starts (a v1 digest starts with `sha256:`).
pub const DIGEST_V2_PREFIX: &str = "v2:sha256:";
const DIGEST_V1_PREFIX: &str = "sha256:";
const DIGEST_DOMAIN: &[u8] = b"kseal.dev/spec-digest\0";

/// The spec digest the reconciler writes (v2, see the module docs).
pub fn spec_digest(ss: &SealedSecret) -> String {
    format_spec_digest(&spec_digest_bytes(ss))
}

/// The SHA-256 hash inside [`spec_digest`] (32 bytes to keep, where the text takes 74).
pub fn spec_digest_bytes(ss: &SealedSecret) -> [u8; 32] {
    Sha256::digest(canonical_spec(ss)).into()
}

/// [`spec_digest`]'s text for the hash [`spec_digest_bytes`] returned.
pub fn format_spec_digest(digest: &[u8; 32]) -> String {
    // A table, not `write!("{byte:02x}")`: the formatting machinery per byte was most of this
    // function's cost, twice per object on a cold start (docs/benchmarks.md, issue 40).
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(DIGEST_V2_PREFIX.len() + 64);
    out.push_str(DIGEST_V2_PREFIX);
    for byte in digest {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

/// The v1 spec digest, as controllers before v2 wrote it: kept only to recognise their
/// Secrets as up to date. Never write it.
pub fn spec_digest_v1(ss: &SealedSecret) -> String {
    let value = serde_json::json!({
        "v": 1,
        "namespace": ss.metadata.namespace,
        "name": ss.metadata.name,
        "scope": format!("{:?}", ss.scope()),
        "spec": ss.spec,
    });
    // Serializing a json! value of plain maps cannot fail.
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    format!(
        "{DIGEST_V1_PREFIX}{}",
        STANDARD_NO_PAD.encode(Sha256::digest(&bytes))
    )
}

/// Whether `stored` (a Secret's digest annotation) is the digest of `ss`: `current` (its v2
/// digest, computed once per reconcile) or, for a Secret written before v2, its v1 digest.
pub fn digest_matches(stored: &str, ss: &SealedSecret, current: &str) -> bool {
    stored == current || (stored.starts_with(DIGEST_V1_PREFIX) && stored == spec_digest_v1(ss))
}

/// The byte encoding the v2 digest hashes (see the module docs).
fn canonical_spec(ss: &SealedSecret) -> Vec<u8> {
    let mut e = Encoder(Vec::with_capacity(256));
    e.raw(DIGEST_DOMAIN);
    e.raw(&[2]);
    e.opt(ss.metadata.namespace.as_ref(), |e, v| e.str(v));
    e.opt(ss.metadata.name.as_ref(), |e, v| e.str(v));
    e.raw(&[match ss.scope() {
        Scope::Strict => 1,
        Scope::Namespace => 2,
        Scope::Cluster => 3,
    }]);
    // Destructured without `..`: a field added to the spec fails to compile here until the
    // encoding (and its version) says what to do with it.
    let SealedSecretSpec {
        data,
        encrypted_data,
        template,
    } = &ss.spec;
    e.opt(data.as_ref(), |e, v| e.str(v));
    e.map(encrypted_data, |e, v| e.str(v));
    e.opt(template.as_ref(), |e, t| {
        let SecretTemplateSpec {
            data,
            immutable,
            metadata,
            type_,
        } = t;
        e.opt(data.as_ref(), |e, d| {
            e.map(d, |e, v| e.opt(v.as_ref(), |e, v| e.str(v)));
        });
        e.opt(immutable.as_ref(), |e, v| e.bool(*v));
        e.opt(type_.as_ref(), |e, v| e.str(v));
        e.opt(metadata.as_ref(), encode_meta);
    });
    e.0
}

fn encode_meta(e: &mut Encoder, meta: &ObjectMeta) {
    let ObjectMeta {
        annotations,
        finalizers,
        generate_name,
        labels,
        name,
        namespace,
        owner_references,
        // Set by the API server and dropped by unsealing: they cannot change the Secret.
        creation_timestamp: _,
        deletion_grace_period_seconds: _,
        deletion_timestamp: _,
        generation: _,
        managed_fields: _,
        resource_version: _,
        self_link: _,
        uid: _,
    } = meta;
    e.opt(name.as_ref(), |e, v| e.str(v));
    e.opt(namespace.as_ref(), |e, v| e.str(v));
    e.opt(generate_name.as_ref(), |e, v| e.str(v));
    e.opt(labels.as_ref(), |e, m| e.map(m, |e, v| e.str(v)));
    e.opt(annotations.as_ref(), |e, m| e.map(m, |e, v| e.str(v)));
    e.opt(finalizers.as_ref(), |e, l| e.list(l, |e, v| e.str(v)));
    e.opt(owner_references.as_ref(), |e, l| {
        e.list(l, |e, r| {
            let OwnerReference {
                api_version,
                block_owner_deletion,
                controller,
                kind,
                name,
                uid,
            } = r;
            e.str(api_version);
            e.str(kind);
            e.str(name);
            e.str(uid);
            e.opt(controller.as_ref(), |e, v| e.bool(*v));
            e.opt(block_owner_deletion.as_ref(), |e, v| e.bool(*v));
        });
    });
}

/// The length-prefixed primitives of the module docs.
struct Encoder(Vec<u8>);

impl Encoder {
    fn raw(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn count(&mut self, n: usize) {
        self.raw(&(n as u64).to_be_bytes());
    }

    fn str(&mut self, s: &str) {
        self.count(s.len());
        self.raw(s.as_bytes());
    }

    fn bool(&mut self, b: bool) {
        self.raw(&[u8::from(b)]);
    }

    fn opt<T>(&mut self, v: Option<T>, f: impl FnOnce(&mut Self, T)) {
        match v {
            None => self.raw(&[0]),
            Some(v) => {
                self.raw(&[1]);
                f(self, v);
            }
        }
    }

    /// A `BTreeMap` iterates in ascending key order, and `String`'s order is byte order.
    fn map<V>(
        &mut self,
        m: &std::collections::BTreeMap<String, V>,
        mut f: impl FnMut(&mut Self, &V),
    ) {
        self.count(m.len());
        for (k, v) in m {
            self.str(k);
            f(self, v);
        }
    }

    fn list<T>(&mut self, l: &[T], mut f: impl FnMut(&mut Self, &T)) {
        self.count(l.len());
        for v in l {
            f(self, v);
        }
    }
}

/// A data-MAC format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MacVersion {
    /// Key from the PEM text of the private key (read only).
    V1,
    /// Key from the PKCS #1 DER of the private key (written).
    V2,
}

impl MacVersion {
    fn prefix(self) -> &'static str {
        match self {
            MacVersion::V1 => "v1:",
            MacVersion::V2 => "v2:",
        }
    }

    fn domain(self) -> &'static [u8] {
        match self {
            MacVersion::V1 => b"kseal.dev/data-mac v1\0",
            MacVersion::V2 => b"kseal.dev/data-mac v2\0",
        }
    }
}

const MAC_KEY_SALT_V1: &[u8] = b"kseal.dev/data-mac/v1";
const MAC_KEY_INFO_V1: &[u8] = b"kseal secret data mac";
const MAC_KEY_SALT_V2: &[u8] = b"kseal.dev/data-mac/v2";
const MAC_KEY_INFO_V2: &[u8] = b"kseal secret data mac v2";

/// Derives the data-MAC key of `pair` for `version` (see the module docs).
pub(crate) fn derive_mac_key(version: MacVersion, pair: &KeyPair) -> Option<Zeroizing<[u8; 32]>> {
    let der = pair.private_key().to_pkcs1_der().ok()?;
    let (salt, ikm, info) = match version {
        MacVersion::V1 => (MAC_KEY_SALT_V1, legacy_pkcs1_pem(&der), MAC_KEY_INFO_V1),
        MacVersion::V2 => (MAC_KEY_SALT_V2, der, MAC_KEY_INFO_V2),
    };
    let hkdf = hkdf::Hkdf::<Sha256>::new(Some(salt), &ikm);
    let mut key = Zeroizing::new([0u8; 32]);
    hkdf.expand(info, &mut key[..]).ok()?;
    Some(key)
}

/// The PKCS #1 PEM text v1 keys were derived from, written out here rather than by a PEM
/// crate so that no dependency can change it: `-----BEGIN RSA PRIVATE KEY-----`, the DER
/// in padded standard base64 in lines of 64 characters, `-----END RSA PRIVATE KEY-----`,
/// every line ended by `\n`.
fn legacy_pkcs1_pem(der: &[u8]) -> Zeroizing<Vec<u8>> {
    const BEGIN: &[u8] = b"-----BEGIN RSA PRIVATE KEY-----\n";
    const END: &[u8] = b"-----END RSA PRIVATE KEY-----\n";
    let b64_len = der.len().div_ceil(3) * 4;
    let mut b64 = Zeroizing::new(vec![0u8; b64_len]);
    // The buffer is exactly as long as the encoding, so this cannot fail.
    let written = STANDARD.encode_slice(der, &mut b64[..]).unwrap_or(0);
    let b64 = &b64[..written];
    let mut pem = Zeroizing::new(Vec::with_capacity(
        BEGIN.len() + END.len() + written + written.div_ceil(64),
    ));
    pem.extend_from_slice(BEGIN);
    for line in b64.chunks(64) {
        pem.extend_from_slice(line);
        pem.push(b'\n');
    }
    pem.extend_from_slice(END);
    pem
}

type HmacSha256 = Hmac<Sha256>;

fn put_field(mac: &mut HmacSha256, bytes: &[u8]) {
    mac.update(&(bytes.len() as u64).to_be_bytes());
    mac.update(bytes);
}

/// The MAC state over a Secret's identity, type and the `covered` data items (sorted by
/// key), for `version`.
pub(crate) fn mac_over<'a>(
    version: MacVersion,
    key: &[u8; 32],
    digest: &str,
    namespace: &str,
    name: &str,
    type_: &str,
    covered: impl Iterator<Item = (&'a String, &'a ByteString)>,
) -> Option<HmacSha256> {
    let mut mac = HmacSha256::new_from_slice(key).ok()?;
    mac.update(version.domain());
    put_field(&mut mac, digest.as_bytes());
    put_field(&mut mac, namespace.as_bytes());
    put_field(&mut mac, name.as_bytes());
    put_field(&mut mac, type_.as_bytes());
    let items: Vec<_> = covered.collect();
    mac.update(&(items.len() as u64).to_be_bytes());
    for (k, v) in items {
        put_field(&mut mac, k.as_bytes());
        put_field(&mut mac, &v.0);
    }
    Some(mac)
}

/// The v2 annotation for `tag` made with the key `id`.
pub(crate) fn format_mac(id: &KeyId, tag: &[u8]) -> String {
    format!(
        "{}{id}:{}",
        MacVersion::V2.prefix(),
        STANDARD_NO_PAD.encode(tag)
    )
}

/// Reads a data-MAC annotation of either version.
pub(crate) fn parse_mac(value: &str) -> Option<(MacVersion, KeyId, Vec<u8>)> {
    let (version, rest) = [MacVersion::V2, MacVersion::V1]
        .into_iter()
        .find_map(|v| Some((v, value.strip_prefix(v.prefix())?)))?;
    let (id, tag) = rest.rsplit_once(':')?;
    Some((
        version,
        KeyId::parse(id)?,
        STANDARD_NO_PAD.decode(tag).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use kseal_api::constants::{CLUSTER_WIDE_ANNOTATION, NAMESPACE_WIDE_ANNOTATION};

    fn fixture_pair() -> KeyPair {
        KeyPair::from_pem(
            include_str!("../../tests/fixtures/keys/tls.key"),
            include_str!("../../tests/fixtures/keys/tls.crt"),
        )
        .expect("fixture key")
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A SealedSecret touching every field the v2 digest covers.
    fn full_sealed_secret() -> SealedSecret {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "bitnami.com/v1alpha1",
            "kind": "SealedSecret",
            "metadata": {
                "name": "db", "namespace": "prod", "uid": "u-1",
                "annotations": {NAMESPACE_WIDE_ANNOTATION: "true"}
            },
            "spec": {
                "encryptedData": {"user": "AgB1", "password": "AgBw"},
                "template": {
                    "type": "kubernetes.io/basic-auth",
                    "immutable": true,
                    "data": {"dsn": "{{ .user }}@db", "drop": null},
                    "metadata": {
                        "labels": {"app": "db", "tier": "data"},
                        "annotations": {"note": "x"},
                        "finalizers": ["b", "a"],
                        "generateName": "g-",
                        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                            "name": "cm", "uid": "u-2", "controller": false}]
                    }
                }
            }
        }))
        .expect("sealed secret")
    }

    fn minimal_sealed_secret() -> SealedSecret {
        let mut ss = SealedSecret::new("n", SealedSecretSpec::default());
        ss.metadata.namespace = Some("ns".into());
        ss.spec.encrypted_data.insert("a".into(), "AgA=".into());
        ss
    }

    /// The encoding written out by hand from the module docs, for the smallest object.
    #[test]
    fn v2_encoding_of_a_minimal_object_is_the_documented_bytes() {
        let mut want = b"kseal.dev/spec-digest\0\x02".to_vec();
        want.extend(b"\x01\0\0\0\0\0\0\0\x02ns"); // namespace
        want.extend(b"\x01\0\0\0\0\0\0\0\x01n"); // name
        want.push(1); // strict
        want.push(0); // no spec.data
        want.extend(b"\0\0\0\0\0\0\0\x01"); // one item
        want.extend(b"\0\0\0\0\0\0\0\x01a\0\0\0\0\0\0\0\x04AgA=");
        want.push(0); // no template
        assert_eq!(canonical_spec(&minimal_sealed_secret()), want);
    }

    /// Literal vectors: the digests below were computed once, when v2 was defined (and
    /// checked against an independent implementation of the module docs). A change here
    /// makes every existing Secret look out of date: do not update the hex, add a v3.
    #[test]
    fn v2_digest_is_pinned() {
        assert_eq!(
            spec_digest(&minimal_sealed_secret()),
            "v2:sha256:30fbe1b4f5f2db2465e4ab61a97e9be38211b84e3292c6396089f21cb71b0d6d"
        );
        assert_eq!(
            spec_digest(&full_sealed_secret()),
            "v2:sha256:26a7705a5095a3fc47bfa1b37633dd639d35f4ba0d2d8ae75db1ac5ca8e1a612"
        );
    }

    /// The v1 reader must keep matching what controllers before v2 wrote: these values were
    /// computed by that code (serde_json rendering with the `Debug` text of the scope).
    #[test]
    fn v1_digest_is_pinned() {
        assert_eq!(
            spec_digest_v1(&minimal_sealed_secret()),
            "sha256:GLhO0aGc6GYQKrOn8jjW5064V03a5a70WMqzCljns/g"
        );
        assert_eq!(
            spec_digest_v1(&full_sealed_secret()),
            "sha256:Rs+QYayJN4Zbm0iLhe1ByEeaMXInIt4/qDgugH3jKCs"
        );
    }

    #[test]
    fn v1_digests_are_still_recognised_and_others_are_not() {
        let ss = full_sealed_secret();
        let current = spec_digest(&ss);
        assert!(digest_matches(&current, &ss, &current));
        assert!(digest_matches(&spec_digest_v1(&ss), &ss, &current));
        let other = minimal_sealed_secret();
        assert!(!digest_matches(&spec_digest_v1(&other), &ss, &current));
        assert!(!digest_matches(&spec_digest(&other), &ss, &current));
        assert!(!digest_matches("", &ss, &current));
    }

    #[test]
    fn every_covered_field_changes_the_digest() {
        let base = full_sealed_secret();
        let d = spec_digest(&base);
        type Change = Box<dyn Fn(&mut SealedSecret)>;
        let variants: Vec<(&str, Change)> = vec![
            ("name", Box::new(|s| s.metadata.name = Some("db2".into()))),
            ("namespace", Box::new(|s| s.metadata.namespace = None)),
            (
                "scope",
                Box::new(|s| {
                    s.metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(CLUSTER_WIDE_ANNOTATION.into(), "true".into());
                }),
            ),
            (
                "deprecated data",
                Box::new(|s| s.spec.data = Some("x".into())),
            ),
            (
                "item",
                Box::new(|s| {
                    s.spec.encrypted_data.insert("user".into(), "AgB2".into());
                }),
            ),
            ("no template", Box::new(|s| s.spec.template = None)),
            ("type", Box::new(|s| tmpl(s).type_ = None)),
            ("immutable", Box::new(|s| tmpl(s).immutable = Some(false))),
            (
                "template data null",
                Box::new(|s| {
                    tmpl(s)
                        .data
                        .as_mut()
                        .expect("data")
                        .insert("dsn".into(), None);
                }),
            ),
            ("label", Box::new(|s| meta(s).labels = None)),
            (
                "annotation",
                Box::new(|s| {
                    meta(s)
                        .annotations
                        .as_mut()
                        .expect("annotations")
                        .insert("note".into(), "y".into());
                }),
            ),
            (
                "finalizer order",
                Box::new(|s| meta(s).finalizers.as_mut().expect("f").reverse()),
            ),
            ("generateName", Box::new(|s| meta(s).generate_name = None)),
            (
                "template name",
                Box::new(|s| meta(s).name = Some("x".into())),
            ),
            (
                "template namespace",
                Box::new(|s| meta(s).namespace = Some("x".into())),
            ),
            (
                "owner controller",
                Box::new(|s| {
                    meta(s).owner_references.as_mut().expect("o")[0].controller = None;
                }),
            ),
        ];
        let mut seen = BTreeMap::new();
        for (what, change) in variants {
            let mut ss = base.clone();
            change(&mut ss);
            let changed = spec_digest(&ss);
            assert_ne!(changed, d, "{what}");
            assert!(seen.insert(changed, what).is_none(), "{what} collides");
        }
        // Server-set fields and the SealedSecret's UID are not part of it.
        let mut ss = base.clone();
        ss.metadata.uid = Some("other".into());
        meta(&mut ss).resource_version = Some("7".into());
        meta(&mut ss).uid = Some("x".into());
        assert_eq!(spec_digest(&ss), d);
    }

    fn tmpl(s: &mut SealedSecret) -> &mut SecretTemplateSpec {
        s.spec.template.as_mut().expect("template")
    }

    fn meta(s: &mut SealedSecret) -> &mut ObjectMeta {
        tmpl(s).metadata.as_mut().expect("metadata")
    }

    #[test]
    fn length_prefixes_keep_neighbouring_fields_apart() {
        let mut a = minimal_sealed_secret();
        a.spec.encrypted_data = [("ab".to_owned(), "c".to_owned())].into();
        let mut b = minimal_sealed_secret();
        b.spec.encrypted_data = [("a".to_owned(), "bc".to_owned())].into();
        assert_ne!(spec_digest(&a), spec_digest(&b));
    }

    /// The v1 key was HKDF over the PEM text `to_pkcs1_pem` produced; the text is now written
    /// out by hand, and must be byte for byte what that produced for the fixture key.
    #[test]
    fn legacy_pem_text_is_the_fixture_key_file() {
        let pair = fixture_pair();
        let der = pair.private_key().to_pkcs1_der().expect("der");
        assert_eq!(
            &legacy_pkcs1_pem(&der)[..],
            include_bytes!("../../tests/fixtures/keys/tls.key")
        );
    }

    /// Literal vectors for the fixture key (`tests/fixtures/keys/tls.key`). v1 is the key
    /// every Secret written before v2 carries a MAC under; v2 is what is written now.
    /// Neither may ever change.
    #[test]
    fn mac_keys_are_pinned() {
        let pair = fixture_pair();
        let v1 = derive_mac_key(MacVersion::V1, &pair).expect("v1");
        let v2 = derive_mac_key(MacVersion::V2, &pair).expect("v2");
        assert_eq!(
            hex(&v1[..]),
            "126430db750f160a5abcc0fa3080df76f9e328384e7a0ea966e5f400fe5f8de4"
        );
        assert_eq!(
            hex(&v2[..]),
            "8f50136ee10f3c11cc37b17170f25e4b945fd0ecea9f0edd3abc3c9adbeca3e5"
        );
    }

    #[test]
    fn macs_are_pinned() {
        let pair = fixture_pair();
        let data: BTreeMap<String, ByteString> = [
            ("password".to_owned(), ByteString(b"hunter2".to_vec())),
            ("user".to_owned(), ByteString(b"admin".to_vec())),
        ]
        .into();
        let tag_hex = |version| {
            let key = derive_mac_key(version, &pair).expect("key");
            let mac =
                mac_over(version, &key, "sha256:x", "ns", "n", "Opaque", data.iter()).expect("mac");
            hex(mac.finalize().into_bytes().as_slice())
        };
        assert_eq!(
            tag_hex(MacVersion::V1),
            "436565b8aae43b43b5afb6c0680d0752da426a0f468ede94c159ca7472c9a2c8"
        );
        assert_eq!(
            tag_hex(MacVersion::V2),
            "38153fbaed04a8bb1819089914c15bb8772875c4a604cfefaa5bc4ea652ae28a"
        );
    }

    fn tag(
        version: MacVersion,
        key: &[u8; 32],
        digest: &str,
        name: &str,
        data: &BTreeMap<String, ByteString>,
    ) -> Vec<u8> {
        mac_over(version, key, digest, "ns", name, "Opaque", data.iter())
            .expect("mac")
            .finalize()
            .into_bytes()
            .to_vec()
    }

    #[test]
    fn mac_depends_on_every_input() {
        let key = [1u8; 32];
        let data = BTreeMap::from([("a".to_owned(), ByteString(b"secret".to_vec()))]);
        let other = BTreeMap::from([("a".to_owned(), ByteString(b"secreT".to_vec()))]);
        for v in [MacVersion::V1, MacVersion::V2] {
            let base = tag(v, &key, "d", "n", &data);
            assert_ne!(base, tag(v, &key, "d", "n", &other));
            assert_ne!(base, tag(v, &key, "e", "n", &data));
            assert_ne!(base, tag(v, &key, "d", "m", &data));
            assert_ne!(base, tag(v, &[2u8; 32], "d", "n", &data));
            assert_eq!(base, tag(v, &key, "d", "n", &data));
        }
        assert_ne!(
            tag(MacVersion::V1, &key, "d", "n", &data),
            tag(MacVersion::V2, &key, "d", "n", &data)
        );
    }

    #[test]
    fn mac_annotations_round_trip_and_name_their_key_and_version() {
        let id = KeyId::parse("SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU").expect("id");
        let tag = [7u8; 32];
        let text = format_mac(&id, &tag);
        assert!(text.starts_with("v2:SHA256:47DEQ"), "{text}");
        assert_eq!(
            parse_mac(&text),
            Some((MacVersion::V2, id.clone(), tag.to_vec()))
        );
        let old = text.replacen("v2:", "v1:", 1);
        assert_eq!(parse_mac(&old), Some((MacVersion::V1, id, tag.to_vec())));
        assert!(parse_mac("v3:x:y").is_none());
        assert!(parse_mac("v2:not-a-key:AAAA").is_none());
    }
}
