//! Private keys from files: PEM keys, key Secret manifests and backups (`kubectl get secret -l
//! …sealed-secrets-key -o yaml`), and the one rule for which of those keys seals
//! ([`sealing_key`]).

use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use kseal_keys::{Certificate, CertificateOptions, KeyId, KeyPair, KeyRing, PrivateKey};

use crate::manifest::{Input, Source};

/// A private key (PEM), optionally followed by its certificate. Without a certificate a
/// throwaway one is made so the key can join a ring (it only orders keys).
fn pair_from_pem(key_pem: &str, cert_pem: Option<&str>, what: &str) -> Result<KeyPair> {
    let context = || format!("failed to read private key {what}");
    let key = PrivateKey::from_pem(key_pem).with_context(context)?;
    let cert = match cert_pem.map(Certificate::from_pem) {
        Some(Ok(cert)) => cert,
        Some(Err(e)) => {
            return Err(e).with_context(|| format!("failed to read certificate {what}"));
        }
        None => key
            .self_signed_certificate(&CertificateOptions {
                common_name: "kseal-recovery".into(),
                // Oldest possible, so a key with a real certificate ranks newer; valid long
                // enough never to count as expired.
                not_before: SystemTime::UNIX_EPOCH,
                validity: std::time::Duration::from_secs(200 * 365 * 86_400),
            })
            .with_context(context)?,
    };
    KeyPair::new(key, cert).with_context(context)
}

/// One item of a Secret's `data` (or `stringData`) as text.
pub(crate) fn secret_item(secret: &Secret, key: &str) -> Option<String> {
    if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
        return String::from_utf8(v.0.clone()).ok();
    }
    secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key))
        .cloned()
}

/// The key Secrets of a manifest file (`tls.key` and `tls.crt` of each), as `kubectl get
/// secret -o yaml` prints them (one Secret or a `v1 List`).
pub(crate) fn key_secrets(path: &Path, text: String) -> Result<Vec<Secret>> {
    let input = Input {
        source: Source::File(path.to_owned()),
        text,
    };
    input.objects("Secret", "v1").with_context(|| {
        format!(
            "`{}` is neither a PEM private key nor key Secret manifests",
            path.display()
        )
    })
}

/// Whether a file is PEM rather than a manifest.
pub(crate) fn is_pem(text: &str) -> bool {
    text.trim_start().starts_with("-----BEGIN")
}

/// Label kseal's controller puts on the key Secrets that mirror a fleet ring's keys
/// (`kseal_controller::remote::MIRROR_LABEL`).
const MIRROR_LABEL: &str = "kseal.dev/mirror";

/// Annotation, `"true"` on the mirror of the ring's active key and `"false"` on the others
/// (`kseal_controller::remote::ACTIVE_ANNOTATION`).
const ACTIVE_ANNOTATION: &str = "kseal.dev/active";

/// What a key Secret says about sealing: kseal's controller marks each mirror of a fleet
/// ring's keys with whether the ring's index names it active.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    /// Not a kseal mirror: a plain Bitnami key Secret, or a PEM file.
    Unmarked,
    /// The mirror of the ring's active (sealing) key.
    Active,
    /// The mirror of another key of the ring (pending, previous or expired).
    Inactive,
}

impl Marker {
    /// The marker of a key Secret, read as the controller reads it: the mirror label, then
    /// `kseal.dev/active: "true"`.
    pub(crate) fn of(secret: &Secret) -> Self {
        let mirror = secret
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MIRROR_LABEL))
            .is_some_and(|v| v == "true");
        let active = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ACTIVE_ANNOTATION))
            .is_some_and(|v| v == "true");
        match (mirror, active) {
            (false, _) => Marker::Unmarked,
            (true, true) => Marker::Active,
            (true, false) => Marker::Inactive,
        }
    }
}

/// A key read from a file, with what the file says about it.
pub(crate) struct LoadedKey {
    pub(crate) pair: KeyPair,
    pub(crate) marker: Marker,
    /// Where it was read, for messages: `` Secret `name` in `file` `` or `` `file` ``.
    pub(crate) origin: String,
}

impl LoadedKey {
    pub(crate) fn candidate(&self) -> Candidate<'_> {
        Candidate {
            certificate: self.pair.certificate(),
            order_time: self.pair.order_time(),
            marker: self.marker,
            origin: &self.origin,
        }
    }
}

/// A key as [`sealing_key`] sees it: public parts only, so that sealing from a key backup
/// needs no private key.
pub(crate) struct Candidate<'a> {
    pub(crate) certificate: &'a Certificate,
    /// Bitnami's order: the key Secret's creation time, else the certificate's notBefore.
    pub(crate) order_time: SystemTime,
    pub(crate) marker: Marker,
    pub(crate) origin: &'a str,
}

/// Why [`sealing_key`] chose a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// Marked `kseal.dev/active: "true"`: the fleet ring's active key.
    Marked,
    /// The only key.
    Only,
    /// No key is marked (a plain Bitnami backup, or PEM files): the newest, as Bitnami's
    /// controller does; it is one of `keys`.
    Newest { keys: usize },
}

/// The key that seals, and why.
pub(crate) struct SealingKey {
    pub(crate) index: usize,
    pub(crate) why: Why,
}

impl SealingKey {
    /// The note `reseal` and `seal` print on stderr when the choice is a guess (no marker),
    /// so the operator sees which key was chosen and why.
    pub(crate) fn note(&self, keys: &[Candidate<'_>]) -> Option<String> {
        let Why::Newest { keys: n } = self.why else {
            return None;
        };
        let key = &keys[self.index];
        Some(format!(
            "note: none of the {n} keys given is marked as a fleet ring's active key \
             (`{ACTIVE_ANNOTATION}: \"true\"`, as kseal's controller marks its mirrors), so the \
             newest seals, as in Bitnami: {} ({}, dated {}); pass --cert to seal to another",
            key.certificate.id(),
            key.origin,
            crate::time::utc_time(key.order_time)
        ))
    }
}

/// The one rule for which of the keys read from files seals (`reseal`, `seal --cert
/// <key backup>`, and the order `validate` tries keys in):
///
/// - the key marked `kseal.dev/active: "true"` (a backup of kseal's mirrors of a fleet ring)
///   seals, as it does in the cluster: never "the newest", which may be a key pushed to the
///   ring but not activated yet, that some clusters cannot open;
/// - two keys marked active (a backup taken while a controller was switching keys, or two
///   rings' backups together) is refused, naming both;
/// - mirrors of which none is marked active (a partial backup) are refused: the newest of
///   them may be such a pending key;
/// - without any marker (a plain Bitnami backup, PEM files), the newest unexpired key seals,
///   as in Bitnami's controller and kseal's, and [`SealingKey::note`] says so.
///
/// A fleet ring given as `--cert secretsmanager://…` or `dir://…` needs no rule: its index
/// names the active key.
pub(crate) fn sealing_key(keys: &[Candidate<'_>]) -> Result<SealingKey> {
    if keys.is_empty() {
        bail!("no key to seal with");
    }
    let mut marked: Vec<usize> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        // The same key may come from two files (a backup and its PEM): it counts once.
        if key.marker == Marker::Active
            && !marked
                .iter()
                .any(|&m| keys[m].certificate.id() == key.certificate.id())
        {
            marked.push(i);
        }
    }
    match marked[..] {
        [index] => {
            return Ok(SealingKey {
                index,
                why: Why::Marked,
            });
        }
        [_, _, ..] => bail!(
            "{} keys are marked as the ring's active key (`{ACTIVE_ANNOTATION}: \"true\"`): {}; \
             a backup taken while a controller was switching keys, or backups of two rings: \
             take the backup again, or pass --cert with the ring's sealing certificate \
             (`kseal keys export-cert`)",
            marked.len(),
            marked
                .iter()
                .map(|&i| format!("{} ({})", keys[i].certificate.id(), keys[i].origin))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        [] => {}
    }
    let mirrors: Vec<&Candidate<'_>> = keys
        .iter()
        .filter(|k| k.marker == Marker::Inactive)
        .collect();
    if let Some(first) = mirrors.first() {
        bail!(
            "{} of a fleet ring's keys ({}{}) but not the one marked active \
             (`{ACTIVE_ANNOTATION}: \"true\"`): an inactive key may be pushed but not activated \
             yet, and some clusters cannot open it; add the active key's Secret to the backup, \
             or pass --cert with the ring's sealing certificate (`kseal keys export-cert`)",
            if mirrors.len() == 1 {
                "the keys given include a mirror".to_owned()
            } else {
                format!("the keys given include {} mirrors", mirrors.len())
            },
            first.origin,
            if mirrors.len() > 1 { ", …" } else { "" }
        );
    }
    let mut distinct: Vec<&KeyId> = keys.iter().map(|k| k.certificate.id()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() == 1 {
        return Ok(SealingKey {
            index: 0,
            why: Why::Only,
        });
    }
    let now = SystemTime::now();
    let newest = |unexpired: bool| {
        keys.iter()
            .enumerate()
            .filter(|(_, k)| !unexpired || !k.certificate.is_expired_at(now))
            // Ties broken by fingerprint, as `KeyRing` orders keys.
            .max_by(|(_, a), (_, b)| {
                a.order_time
                    .cmp(&b.order_time)
                    .then_with(|| b.certificate.id().cmp(a.certificate.id()))
            })
            .map(|(i, _)| i)
    };
    let index = newest(true).or_else(|| newest(false)).unwrap_or(0);
    Ok(SealingKey {
        index,
        why: Why::Newest {
            keys: distinct.len(),
        },
    })
}

/// Loads every key of a key file: a PEM private key (optionally with its certificate), key
/// Secret manifests, or a `v1 List` of key Secrets.
pub(crate) fn read_keys(path: &Path) -> Result<Vec<LoadedKey>> {
    let text = fs_err::read_to_string(path).context("failed to read a private key file")?;
    let what = format!("`{}`", path.display());
    let pem = |pair| LoadedKey {
        pair,
        marker: Marker::Unmarked,
        origin: what.clone(),
    };
    if is_pem(&text) {
        if text.contains("-----BEGIN CERTIFICATE-----") {
            return Ok(vec![pem(pair_from_pem(&text, Some(&text), &what)?)]);
        }
        // `kseal keys generate` writes `tls.key` next to `tls.crt`: use the certificate
        // beside the key when it belongs to it (it dates the key for `reseal`).
        let sibling = path.with_extension("crt");
        if let Ok(cert) = fs_err::read_to_string(&sibling)
            && let Ok(pair) = pair_from_pem(&text, Some(&cert), &what)
        {
            return Ok(vec![pem(pair)]);
        }
        return Ok(vec![pem(pair_from_pem(&text, None, &what)?)]);
    }
    let secrets = key_secrets(path, text)?;
    secrets
        .iter()
        .map(|secret| {
            let name = secret.metadata.name.as_deref().unwrap_or("<unnamed>");
            let what = format!("of Secret `{name}` in `{}`", path.display());
            let key = secret_item(secret, "tls.key").with_context(|| {
                format!("Secret `{name}` in `{}` has no tls.key", path.display())
            })?;
            let cert = secret_item(secret, "tls.crt");
            let pair = pair_from_pem(&key, cert.as_deref(), &what)?;
            Ok(LoadedKey {
                pair: dated(pair, secret),
                marker: Marker::of(secret),
                origin: format!("Secret `{name}` in `{}`", path.display()),
            })
        })
        .collect()
}

/// The sealing certificate (PEM) of a key backup given as `--cert` (key Secret manifests or
/// a `v1 List` of them: only their public `tls.crt` is read), chosen by [`sealing_key`]; its
/// note, if any, goes to stderr. `None` when the text is not key Secret manifests.
pub(crate) fn backup_certificate(path: &Path, text: &str) -> Result<Option<String>> {
    let Ok(secrets) = key_secrets(path, text.to_owned()) else {
        return Ok(None);
    };
    let mut keys = Vec::with_capacity(secrets.len());
    for secret in &secrets {
        let name = secret.metadata.name.as_deref().unwrap_or("<unnamed>");
        let origin = format!("Secret `{name}` in `{}`", path.display());
        let pem =
            secret_item(secret, "tls.crt").with_context(|| format!("{origin} has no tls.crt"))?;
        let certificate = Certificate::from_pem(&pem)
            .with_context(|| format!("failed to read the certificate of {origin}"))?;
        let order_time = match &secret.metadata.creation_timestamp {
            Some(t) => SystemTime::from(t.0),
            None => certificate.not_before(),
        };
        keys.push((certificate, order_time, Marker::of(secret), origin, pem));
    }
    let candidates: Vec<Candidate<'_>> = keys
        .iter()
        .map(|(certificate, order_time, marker, origin, _)| Candidate {
            certificate,
            order_time: *order_time,
            marker: *marker,
            origin,
        })
        .collect();
    let choice = sealing_key(&candidates)
        .with_context(|| format!("failed to choose the sealing key of `{}`", path.display()))?;
    if let Some(note) = choice.note(&candidates) {
        eprintln!("{note}");
    }
    Ok(Some(keys[choice.index].4.clone()))
}

/// Bitnami orders keys by the Secret's creation time; so do we when it is known.
fn dated(pair: KeyPair, secret: &Secret) -> KeyPair {
    match &secret.metadata.creation_timestamp {
        Some(t) => pair.with_order_time(SystemTime::from(t.0)),
        None => pair,
    }
}

/// Loads every key pair of a key file (see [`read_keys`]).
pub(crate) fn read_key_pairs(path: &Path) -> Result<Vec<KeyPair>> {
    Ok(read_keys(path)?.into_iter().map(|k| k.pair).collect())
}

/// The keys of the --key files, as one ring whose sealing key follows [`sealing_key`].
pub(crate) struct LoadedRing {
    pub(crate) ring: KeyRing,
    /// The key that seals, or why none may.
    pub(crate) sealing: Result<(KeyId, Option<String>)>,
}

/// Loads all key files into one ring (unsealing needs no sealing key).
pub(crate) fn load_ring(paths: &[std::path::PathBuf]) -> Result<KeyRing> {
    Ok(load_keys(paths)?.ring)
}

/// Loads all key files into one ring and applies [`sealing_key`]: the ring seals with (and
/// tries first) the key it chose.
pub(crate) fn load_keys(paths: &[std::path::PathBuf]) -> Result<LoadedRing> {
    let mut keys = Vec::new();
    for path in paths {
        keys.extend(read_keys(path)?);
    }
    if keys.is_empty() {
        bail!("no private key found in the --key files");
    }
    let candidates: Vec<Candidate<'_>> = keys.iter().map(LoadedKey::candidate).collect();
    let sealing = sealing_key(&candidates).map(|choice| {
        (
            candidates[choice.index].certificate.id().clone(),
            choice.note(&candidates),
        )
    });
    let mut ring: KeyRing = keys.into_iter().map(|k| k.pair).collect();
    if let Ok((id, _)) = &sealing {
        ring.set_sealing_key(id);
    }
    Ok(LoadedRing { ring, sealing })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kseal_keys::KeySize;

    use super::*;

    /// A certificate valid from `not_before` for `days` (2048-bit: test-only size).
    fn cert(not_before: SystemTime, days: u64) -> Certificate {
        KeyPair::generate(
            KeySize::Rsa2048,
            &CertificateOptions {
                common_name: "test".into(),
                not_before,
                validity: Duration::from_secs(days * 86_400),
            },
        )
        .unwrap()
        .certificate()
        .clone()
    }

    fn at(days_ago: u64) -> SystemTime {
        SystemTime::now() - Duration::from_secs(days_ago * 86_400)
    }

    fn candidate<'a>(
        certificate: &'a Certificate,
        order_time: SystemTime,
        marker: Marker,
    ) -> Candidate<'a> {
        Candidate {
            certificate,
            order_time,
            marker,
            origin: "test",
        }
    }

    #[test]
    fn the_key_marked_active_seals_even_when_a_newer_key_is_there() {
        let (old, new) = (cert(at(30), 3650), cert(at(1), 3650));
        let keys = [
            candidate(&old, at(30), Marker::Active),
            candidate(&new, at(1), Marker::Inactive),
        ];
        let choice = sealing_key(&keys).unwrap();
        assert_eq!((choice.index, choice.why), (0, Why::Marked));
        assert!(choice.note(&keys).is_none());
    }

    #[test]
    fn the_same_key_from_two_files_counts_once() {
        let (active, other) = (cert(at(30), 3650), cert(at(1), 3650));
        // The backup and a PEM copy of the active key, and the backup read twice.
        let keys = [
            candidate(&active, at(30), Marker::Active),
            candidate(&active, at(30), Marker::Unmarked),
            candidate(&active, at(30), Marker::Active),
            candidate(&other, at(1), Marker::Unmarked),
        ];
        assert_eq!(sealing_key(&keys).unwrap().why, Why::Marked);
        let alone = [
            candidate(&other, at(1), Marker::Unmarked),
            candidate(&other, at(1), Marker::Unmarked),
        ];
        assert_eq!(sealing_key(&alone).unwrap().why, Why::Only);
    }

    #[test]
    fn two_keys_marked_active_are_refused_naming_both() {
        let (a, b) = (cert(at(30), 3650), cert(at(1), 3650));
        let keys = [
            candidate(&a, at(30), Marker::Active),
            candidate(&b, at(1), Marker::Active),
        ];
        let error = format!("{:#}", sealing_key(&keys).err().unwrap());
        assert!(error.contains(a.id().as_str()), "{error}");
        assert!(error.contains(b.id().as_str()), "{error}");
    }

    #[test]
    fn without_markers_the_newest_unexpired_key_seals_with_a_note() {
        let (old, new, expired) = (cert(at(30), 3650), cert(at(20), 3650), cert(at(400), 300));
        // The expired key's Secret is the newest: it never seals while another key can.
        let keys = [
            candidate(&old, at(30), Marker::Unmarked),
            candidate(&new, at(20), Marker::Unmarked),
            candidate(&expired, at(1), Marker::Unmarked),
        ];
        let choice = sealing_key(&keys).unwrap();
        assert_eq!((choice.index, choice.why), (1, Why::Newest { keys: 3 }));
        let note = choice.note(&keys).unwrap();
        assert!(note.contains(new.id().as_str()), "{note}");
    }
}
