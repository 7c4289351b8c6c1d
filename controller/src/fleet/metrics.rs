//! The fleet acknowledgement's metrics and the counts they publish: a leaf that the crate's
//! [`crate::metrics`] holds, apart from the writer ([`super`]), which needs the configuration
//! and the state.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use kseal_keystore::Kid;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// Labels of `kseal_objects_by_kid`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RingKidLabels {
    /// The ring, as its index names it.
    pub ring: String,
    /// The first 12 characters of the kid, or `unattributed`.
    pub kid: String,
}

/// Labels of `kseal_fleet_ack_writes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AckOutcomeLabels {
    /// `written`, `unchanged` (own record found fresh after a restart) or a store failure
    /// reason (`access_denied`, `service`, …).
    pub outcome: String,
}

/// The fleet acknowledgement's metrics (part of [`crate::metrics::Metrics`]).
#[derive(Debug, Default)]
pub struct FleetMetrics {
    /// `kseal_objects_by_kid{ring,kid}`: watched SealedSecrets by the key that seals them.
    pub objects_by_kid: Family<RingKidLabels, Gauge>,
    /// `kseal_fleet_ack_writes_total{outcome}`: acknowledgement writes by outcome.
    pub ack_writes: Family<AckOutcomeLabels, Counter>,
    /// `kseal_fleet_ack_last_written_timestamp_seconds`: Unix time of the last record written.
    pub ack_last_written: Gauge,
    /// The counts as last published, per ring (one fleet writer per `--key-source` ring), for
    /// `/readyz` detail.
    pub(crate) detail: Mutex<std::collections::BTreeMap<String, Counts>>,
}

impl FleetMetrics {
    /// Registers the metrics under `r` (the `kseal_` prefix).
    pub(crate) fn register(&self, r: &mut Registry) {
        r.register(
            "objects_by_kid",
            "Watched SealedSecrets by the ring key that seals them (unattributed: no or unknown sealing-key annotation)",
            self.objects_by_kid.clone(),
        );
        r.register(
            "fleet_ack_writes",
            "Writes of this cluster's fleet acknowledgement record, by outcome",
            self.ack_writes.clone(),
        );
        r.register_with_unit(
            "fleet_ack_last_written_timestamp",
            "Unix time of the last fleet acknowledgement record written",
            Unit::Seconds,
            self.ack_last_written.clone(),
        );
    }

    pub(crate) fn publish(&self, ring: &str, counts: &Counts) {
        let mut detail = self.detail.lock().unwrap_or_else(PoisonError::into_inner);
        detail.insert(
            ring.to_owned(),
            Counts {
                ring: ring.to_owned(),
                ..counts.clone()
            },
        );
        // Every ring's series again: a ring's writer must not clear another ring's.
        self.objects_by_kid.clear();
        for (ring, counts) in detail.iter() {
            for (kid, n) in &counts.by_kid {
                self.objects_by_kid
                    .get_or_create(&RingKidLabels {
                        ring: ring.clone(),
                        kid: kid.short().to_owned(),
                    })
                    .set(i64::try_from(*n).unwrap_or(i64::MAX));
            }
            self.objects_by_kid
                .get_or_create(&RingKidLabels {
                    ring: ring.clone(),
                    kid: "unattributed".to_owned(),
                })
                .set(i64::try_from(counts.unattributed).unwrap_or(i64::MAX));
        }
    }

    pub(crate) fn count(&self, outcome: &str) {
        self.ack_writes
            .get_or_create(&AckOutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }
}

/// SealedSecrets by the kid that seals them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// The ring (set when published).
    pub(crate) ring: String,
    /// Objects by the kids of the keys that opened them (else of the key their sealing-key
    /// annotation names); an object opened by two keys counts under each.
    pub(crate) by_kid: BTreeMap<Kid, u64>,
    /// Objects neither opened by a held key nor annotated with one.
    pub(crate) unattributed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ring_keeps_its_own_counts() {
        let metrics = FleetMetrics::default();
        let kid = |c: char| Kid::parse(&c.to_string().repeat(64)).unwrap();
        let counts = |k: char, n: u64| Counts {
            ring: String::new(),
            by_kid: BTreeMap::from([(kid(k), n)]),
            unattributed: 1,
        };
        metrics.publish("kseal/shared", &counts('a', 5));
        metrics.publish("kseal/team-a", &counts('b', 7));
        // A later count of one ring replaces that ring's only.
        metrics.publish("kseal/shared", &counts('a', 6));
        let detail = metrics.detail.lock().unwrap();
        assert_eq!(detail.len(), 2);
        assert_eq!(detail["kseal/shared"].by_kid[&kid('a')], 6);
        assert_eq!(detail["kseal/team-a"].ring, "kseal/team-a");
        let gauge = |ring: &str, kid: &str| {
            metrics
                .objects_by_kid
                .get_or_create(&RingKidLabels {
                    ring: ring.to_owned(),
                    kid: kid.to_owned(),
                })
                .get()
        };
        assert_eq!(gauge("kseal/shared", &"a".repeat(12)), 6);
        assert_eq!(gauge("kseal/team-a", &"b".repeat(12)), 7);
        assert_eq!(gauge("kseal/team-a", "unattributed"), 1);
    }
}
