//! Key Secrets as a key source: [`SecretKeySource`] watches the labelled key Secrets and the
//! legacy Secret in the controller namespace and yields their PEM texts
//! ([`material_from_secret`]), stores generated keys as Bitnami does ([`key_secret`],
//! [`with_metadata`]) and reports a rejected key as a Warning event on its Secret.

use std::collections::BTreeMap;
use std::time::SystemTime;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kseal_api::constants::{SEALING_KEY_LABEL, SEALING_KEY_LABEL_ACTIVE};
use kseal_keys::KeyPair;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, Resource as _, ResourceExt as _};
use zeroize::Zeroizing;

use super::{
    CERTIFICATE_ITEM, KEY_SECRET_TYPE, KeyMaterial, KeyPem, KeySource, PRIVATE_KEY_ITEM, REPORTER,
    Rejection, source,
};
use crate::config::Config;
use crate::state::State;

/// Key Secrets in the controller namespace, as Bitnami stores them.
pub struct SecretKeySource {
    client: Client,
    namespace: String,
    prefix: String,
    /// Extra labels and annotations on generated key Secrets.
    extra_labels: BTreeMap<String, String>,
    extra_annotations: BTreeMap<String, String>,
    recorder: Recorder,
    /// Where watch failures are counted and the API server's reachability is tracked.
    state: Option<State>,
}

impl SecretKeySource {
    /// Reads keys from `config.controller_namespace`, with `config.key_prefix` as the legacy
    /// name and the prefix of generated Secrets.
    pub fn new(client: Client, config: &Config) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.to_owned(),
                instance: Some(config.identity.clone()),
            },
        );
        Self {
            client,
            namespace: config.controller_namespace.clone(),
            prefix: config.key_prefix.clone(),
            extra_labels: config.key_labels.clone(),
            extra_annotations: config.key_annotations.clone(),
            recorder,
            state: None,
        }
    }

    /// Counts watch failures in `state` (`kseal_watch_failures_total{watch="key_secrets"}`)
    /// and reports the API server's reachability there, instead of one warn line per failure.
    pub fn reporting_to(mut self, state: State) -> Self {
        self.state = Some(state);
        self
    }
}

/// One watched set of Secrets (the labelled keys, or the legacy Secret).
#[derive(Default)]
struct WatchedSet {
    current: BTreeMap<String, Secret>,
    relisting: Option<BTreeMap<String, Secret>>,
    synced: bool,
}

impl WatchedSet {
    fn apply(&mut self, event: watcher::Event<Secret>) -> bool {
        match event {
            watcher::Event::Init => {
                self.relisting = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(s) => {
                self.relisting
                    .get_or_insert_with(BTreeMap::new)
                    .insert(s.name_any(), s);
                false
            }
            watcher::Event::InitDone => {
                self.current = self.relisting.take().unwrap_or_default();
                self.synced = true;
                true
            }
            watcher::Event::Apply(s) => {
                self.current.insert(s.name_any(), s);
                self.synced
            }
            watcher::Event::Delete(s) => {
                self.current.remove(&s.name_any());
                self.synced
            }
        }
    }
}

fn is_active_or_unlabelled(secret: &Secret) -> bool {
    secret
        .labels()
        .get(SEALING_KEY_LABEL)
        .is_none_or(|v| v == SEALING_KEY_LABEL_ACTIVE)
}

/// Reads one key Secret's PEM texts (never logging them).
pub fn material_from_secret(secret: &Secret) -> KeyMaterial {
    let meta = &secret.metadata;
    let origin = format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    );
    let item = |key: &str| secret.data.as_ref().and_then(|d| d.get(key));
    let pem = match (item(PRIVATE_KEY_ITEM), item(CERTIFICATE_ITEM)) {
        (Some(key), Some(cert)) => {
            let key = Zeroizing::new(key.0.clone());
            match (std::str::from_utf8(&key), std::str::from_utf8(&cert.0)) {
                (Ok(k), Ok(c)) => Ok(KeyPem {
                    private_key: Zeroizing::new(k.to_owned()),
                    certificate: c.to_owned(),
                }),
                _ => Err(Rejection::new("pem", "tls.key or tls.crt is not text")),
            }
        }
        _ => Err(Rejection::new(
            "missing_data",
            "the Secret lacks tls.key or tls.crt",
        )),
    };
    // A key Secret kseal made: labelled as a mirror, or (a label is easily removed) annotated
    // with its kid, or named as mirrors are (a name cannot change).
    let mirror = secret
        .labels()
        .get(crate::keys::layout::MIRROR_LABEL)
        .is_some_and(|v| v == "true")
        || secret.annotations().contains_key(source::KID_ANNOTATION)
        || meta
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(source::NAME_PREFIX));
    let ring = mirror
        .then(|| secret.annotations().get(source::RING_ANNOTATION).cloned())
        .flatten();
    KeyMaterial {
        mirror,
        ring,
        origin,
        version: meta.resource_version.clone().unwrap_or_default(),
        reference: Some(secret.object_ref(&())),
        created: meta
            .creation_timestamp
            .as_ref()
            .map(|t| SystemTime::from(t.0)),
        pem,
    }
}

impl KeySource for SecretKeySource {
    fn snapshots(&mut self) -> BoxStream<'static, Vec<KeyMaterial>> {
        let state = self.state.clone();
        // With a state: the controller's watch retries (at most 5 s, reset when the API
        // server answers again); without: kube-runtime's default (up to 30 s).
        let backoff = || -> Box<dyn kube::runtime::utils::Backoff> {
            match &state {
                Some(state) => Box::new(crate::timing::WatchBackoff::resetting_on(
                    state.api.recoveries(),
                )),
                None => Box::new(watcher::DefaultBackoff::default()),
            }
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let labelled = watcher(
            api.clone(),
            watcher::Config::default()
                .labels(&format!("{SEALING_KEY_LABEL}={SEALING_KEY_LABEL_ACTIVE}")),
        )
        .backoff(backoff())
        .map(|e| (0usize, e));
        let legacy = watcher(
            api,
            watcher::Config::default().fields(&format!("metadata.name={}", self.prefix)),
        )
        .backoff(backoff())
        .map(|e| (1usize, e));
        futures::stream::select(labelled, legacy)
            .scan(
                [WatchedSet::default(), WatchedSet::default()],
                move |sets, (which, event)| {
                    let changed = match (event, &state) {
                        (Ok(event), state) => {
                            // `Init` starts a (re)list before any request is sent: no answer.
                            if let Some(state) = state
                                && !matches!(event, watcher::Event::Init)
                            {
                                state.api_answered();
                            }
                            sets[which].apply(event)
                        }
                        (Err(e), Some(state)) => {
                            state.watch_failed("key_secrets", &e);
                            false
                        }
                        (Err(e), None) => {
                            tracing::warn!(error = %crate::error_chain(&e), "watching key Secrets failed; retrying");
                            false
                        }
                    };
                    let snapshot = (changed && sets.iter().all(|s| s.synced)).then(|| {
                        let mut by_name: BTreeMap<&String, &Secret> =
                            sets[0].current.iter().collect();
                        for (name, s) in &sets[1].current {
                            if is_active_or_unlabelled(s) {
                                by_name.entry(name).or_insert(s);
                            }
                        }
                        let mut secrets: Vec<&Secret> = by_name.into_values().collect();
                        // Bitnami reads keys sorted by creation time.
                        secrets.sort_by(|a, b| {
                            a.metadata
                                .creation_timestamp
                                .as_ref()
                                .map(|t| t.0)
                                .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
                                .then_with(|| a.name_any().cmp(&b.name_any()))
                        });
                        secrets.into_iter().map(material_from_secret).collect()
                    });
                    futures::future::ready(Some(snapshot))
                },
            )
            .filter_map(futures::future::ready)
            .boxed()
    }

    fn store(&self, pair: &KeyPair) -> BoxFuture<'static, Result<String, crate::Error>> {
        let secret = key_secret(&self.prefix, &self.namespace, pair)
            .map(|s| with_metadata(s, &self.extra_labels, &self.extra_annotations));
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        async move {
            let secret = secret?;
            let created = api
                .create(&PostParams::default(), &secret)
                .await
                .map_err(crate::Error::Kube)?;
            Ok(format!(
                "{}/{}",
                created.namespace().unwrap_or_default(),
                created.name_any()
            ))
        }
        .boxed()
    }

    fn report(&self, material: &KeyMaterial, rejection: &Rejection) -> BoxFuture<'static, ()> {
        let Some(reference) = material.reference.clone() else {
            return futures::future::ready(()).boxed();
        };
        let recorder = self.recorder.clone();
        let note = format!("key Secret skipped: {}", rejection.message);
        async move {
            let event = Event {
                type_: EventType::Warning,
                reason: "KeyRejected".into(),
                note: Some(note),
                action: "LoadKey".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %crate::error_chain(&e), "failed to publish key event");
            }
        }
        .boxed()
    }
}

/// The Secret Bitnami would store for `pair`: `generateName: <prefix>`, type
/// `kubernetes.io/tls`, labelled active, PKCS #1 `tls.key`.
pub fn key_secret(prefix: &str, namespace: &str, pair: &KeyPair) -> Result<Secret, crate::Error> {
    let key_pem = pair
        .private_key()
        .to_pkcs1_pem()
        .map_err(|_| crate::Error::KeyGeneration)?;
    let data = BTreeMap::from([
        (
            PRIVATE_KEY_ITEM.to_owned(),
            ByteString(key_pem.as_bytes().to_vec()),
        ),
        (
            CERTIFICATE_ITEM.to_owned(),
            ByteString(pair.certificate().to_pem().into_bytes()),
        ),
    ]);
    Ok(Secret {
        metadata: ObjectMeta {
            generate_name: Some(prefix.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                SEALING_KEY_LABEL.to_owned(),
                SEALING_KEY_LABEL_ACTIVE.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some(KEY_SECRET_TYPE.to_owned()),
        data: Some(data),
        ..Secret::default()
    })
}

/// `secret` with `labels` and `annotations` added (`--privatekey-labels`,
/// `--privatekey-annotations`). The key label keeps its value whatever `labels` says.
pub fn with_metadata(
    mut secret: Secret,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Secret {
    let meta = &mut secret.metadata;
    if !labels.is_empty() {
        let all = meta.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in labels {
            all.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    if !annotations.is_empty() {
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    secret
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::tests::pair;

    #[test]
    fn missing_items_are_rejected_without_parsing() {
        let mut secret = key_secret("p", "ks", &pair()).unwrap();
        secret.data.as_mut().unwrap().remove(PRIVATE_KEY_ITEM);
        let m = material_from_secret(&secret);
        assert_eq!(m.pem.err().map(|r| r.reason), Some("missing_data"));
    }

    #[test]
    fn only_an_active_or_missing_label_enables_the_legacy_key() {
        let mut secret = key_secret("p", "ks", &pair()).unwrap();
        assert!(is_active_or_unlabelled(&secret));
        secret.metadata.labels = None;
        assert!(is_active_or_unlabelled(&secret));
        secret.metadata.labels = Some(BTreeMap::from([(
            SEALING_KEY_LABEL.to_owned(),
            "compromised".to_owned(),
        )]));
        assert!(!is_active_or_unlabelled(&secret));
    }

    #[test]
    fn extra_metadata_is_added_but_never_replaces_the_key_label() {
        let s = key_secret("p", "ks", &pair()).unwrap();
        let labels = BTreeMap::from([
            ("team".to_owned(), "platform".to_owned()),
            (SEALING_KEY_LABEL.to_owned(), "compromised".to_owned()),
        ]);
        let annotations = BTreeMap::from([("owner".to_owned(), "platform team".to_owned())]);
        let s = with_metadata(s, &labels, &annotations);
        let got = s.metadata.labels.unwrap();
        assert_eq!(got[SEALING_KEY_LABEL], SEALING_KEY_LABEL_ACTIVE);
        assert_eq!(got["team"], "platform");
        assert_eq!(s.metadata.annotations.unwrap()["owner"], "platform team");
        let plain = with_metadata(
            key_secret("p", "ks", &pair()).unwrap(),
            &BTreeMap::new(),
            &BTreeMap::new(),
        );
        assert_eq!(plain.metadata.labels.unwrap().len(), 1);
        assert!(plain.metadata.annotations.is_none());
    }

    #[test]
    fn generated_key_secret_has_bitnami_shape() {
        let p = pair();
        let s = key_secret("sealed-secrets-key", "ks", &p).unwrap();
        assert_eq!(
            s.metadata.generate_name.as_deref(),
            Some("sealed-secrets-key")
        );
        assert_eq!(s.type_.as_deref(), Some(KEY_SECRET_TYPE));
        assert_eq!(
            s.labels().get(SEALING_KEY_LABEL).map(String::as_str),
            Some("active")
        );
        let data = s.data.unwrap();
        assert!(
            data[PRIVATE_KEY_ITEM]
                .0
                .starts_with(b"-----BEGIN RSA PRIVATE KEY-----")
        );
        assert!(
            data[CERTIFICATE_ITEM]
                .0
                .starts_with(b"-----BEGIN CERTIFICATE-----")
        );
    }
}
