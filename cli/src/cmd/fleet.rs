//! `kseal fleet status`: which clusters hold the ring's current index and keys, how many
//! objects each key opens there, and which clusters are silent or behind, from the records
//! each cluster's controller writes ([`kseal_keystore::fleet`]). Records are reports, not
//! trust: they are checked for shape only and never decide anything about keys.

use anyhow::{Context as _, Result};
use kseal_keystore::fleet::{self, Standing};
use kseal_keystore::{Ack, FleetStore, Index, Kid, Listed, Location};
use serde::Serialize;

use crate::args::{FleetStatusArgs, ListOutput, Require, RingArgs};
use crate::cmd::check::Exit;
use crate::keysource::ring::{aws_options, block_on, open, read_index, ring_label};
use crate::output;
use crate::text::count;

/// One cluster as `fleet status` shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    cluster: String,
    /// `current`, `behind`, `silent` or `unreadable`.
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    standing: Option<Standing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    record: Option<Ack>,
    /// Why the record was not accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

impl Row {
    fn of(listed: Listed, index: &Index, anchor: Option<&Kid>, now: jiff::Timestamp) -> Self {
        match listed.ack {
            Ok(ack) => {
                let standing = fleet::assess(&ack, index, anchor, now);
                let status = if standing.silent {
                    "silent"
                } else if standing.behind {
                    "behind"
                } else {
                    "current"
                };
                Row {
                    cluster: listed.name,
                    status,
                    standing: Some(standing),
                    record: Some(ack),
                    problem: None,
                }
            }
            Err(problem) => Row {
                cluster: listed.name,
                status: "unreadable",
                standing: None,
                record: None,
                problem: Some(problem),
            },
        }
    }

    fn is_current(&self) -> bool {
        self.status == "current"
    }

    /// What is wrong, in words (empty for a current cluster).
    fn why(&self) -> String {
        match (&self.standing, &self.problem) {
            (_, Some(problem)) => problem.clone(),
            (Some(standing), None) => standing.reasons.join(", "),
            (None, None) => String::new(),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct IndexSummary {
    version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    anchor: Option<Kid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    active: Option<Kid>,
    pending: Vec<Kid>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    ring: String,
    store: String,
    index: IndexSummary,
    clusters: Vec<Row>,
}

/// The acknowledgement store of the ring `args` names (no request is made).
pub(crate) async fn open_store(args: &RingArgs) -> Result<FleetStore> {
    let mut location = Location::parse(&args.ring)?;
    if let Location::Directory { insecure_perms, .. } = &mut location {
        *insecure_perms |= args.insecure_perms;
    }
    FleetStore::open(&location, &aws_options(args, None))
        .await
        .context("failed to open the fleet's acknowledgement store")
}

/// Every record of `store`, each read or the reason it was not accepted.
pub(crate) async fn list(store: &FleetStore) -> Result<Vec<Listed>> {
    store.list().await.with_context(|| {
        format!(
            "failed to read the fleet's acknowledgements from {}",
            store.describe()
        )
    })
}

pub(crate) fn status(args: FleetStatusArgs) -> Result<()> {
    let (snapshot, listed, store, label) = block_on(async {
        let ring = open(&args.ring, None).await?;
        let snapshot = read_index(&ring).await?;
        let store = open_store(&args.ring).await?;
        let listed = list(&store).await?;
        anyhow::Ok((snapshot, listed, store.describe(), ring_label(&ring)))
    })??;
    let now = jiff::Timestamp::now();
    let anchor = snapshot.verified.anchor().cloned();
    let index = snapshot.index;
    let rows: Vec<Row> = listed
        .into_iter()
        .map(|l| Row::of(l, &index, anchor.as_ref(), now))
        .collect();
    let report = Report {
        ring: index.ring.clone(),
        store,
        index: IndexSummary {
            version: index.version,
            anchor,
            active: index.active.clone(),
            pending: fleet::pending_keys(&index, now),
        },
        clusters: rows,
    };
    match args.output {
        ListOutput::Json => {
            let mut text =
                serde_json::to_string_pretty(&report).context("failed to encode the report")?;
            text.push('\n');
            output::stdout(&text)?;
        }
        ListOutput::Table if report.clusters.is_empty() => {}
        ListOutput::Table => output::stdout(&table(&report, now))?,
    }
    let not_current: Vec<&Row> = report.clusters.iter().filter(|r| !r.is_current()).collect();
    if report.clusters.is_empty() {
        eprintln!(
            "no cluster has acknowledged key ring {label} yet (nothing in {}): controllers with \
             --key-source write their record once they have read the ring",
            report.store
        );
    } else {
        eprintln!("{}", summary(&report));
    }
    if args.require == Some(Require::Current) {
        if report.clusters.is_empty() {
            eprintln!("error: --require current: no cluster reported on this ring");
            return Err(Exit(1).into());
        }
        if !not_current.is_empty() {
            let named: Vec<String> = not_current
                .iter()
                .map(|r| format!("{} ({}: {})", r.cluster, r.status, r.why()))
                .collect();
            eprintln!(
                "error: --require current: {} of {} not current: {}",
                not_current.len(),
                count(report.clusters.len() as u64, "cluster"),
                named.join("; ")
            );
            return Err(Exit(1).into());
        }
    }
    Ok(())
}

/// `3 clusters: 2 current, 1 silent (index v7, active key 0123456789ab, 1 pending key)`.
fn summary(report: &Report) -> String {
    let mut parts = Vec::new();
    for status in ["current", "behind", "silent", "unreadable"] {
        let n = report
            .clusters
            .iter()
            .filter(|r| r.status == status)
            .count();
        if n > 0 {
            parts.push(format!("{n} {status}"));
        }
    }
    let active = report.index.active.as_ref().map_or_else(
        || "no active key".to_owned(),
        |k| format!("active key {}", k.short()),
    );
    let pending = match report.index.pending.len() {
        0 => String::new(),
        n => format!(", {}", count(n as u64, "pending key")),
    };
    format!(
        "{}: {} (index v{}, {active}{pending})",
        count(report.clusters.len() as u64, "cluster"),
        parts.join(", "),
        report.index.version
    )
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "NO" }
}

/// The table: one line per cluster, then what is wrong with each cluster that is not current.
fn table(report: &Report, now: jiff::Timestamp) -> String {
    let width = report
        .clusters
        .iter()
        .map(|r| r.cluster.len())
        .max()
        .unwrap_or(0)
        .max("CLUSTER".len());
    let mut out = format!(
        "{:<width$}  {:<10}  {:>5}  {:<6}  {:<7}  {:<12}  {:<28}  {}\n",
        "CLUSTER", "STATUS", "INDEX", "ACTIVE", "PENDING", "SEALS", "LAST SEEN", "OBJECTS BY KID"
    );
    let no_pending = report.index.pending.is_empty();
    for row in &report.clusters {
        let Some((ack, standing)) = row.record.as_ref().zip(row.standing.as_ref()) else {
            out.push_str(&format!(
                "{:<width$}  {:<10}  {:>5}  {:<6}  {:<7}  {:<12}  {:<28}  {}\n",
                row.cluster, row.status, "-", "-", "-", "-", "-", "-"
            ));
            continue;
        };
        let mut objects: Vec<String> = ack
            .objects
            .iter()
            .map(|(kid, n)| format!("{}={n}", kid.short()))
            .collect();
        if ack.unattributed > 0 {
            objects.push(format!("unattributed={}", ack.unattributed));
        }
        let seen = format!(
            "{} ({} ago)",
            ack.written.strftime("%Y-%m-%d %H:%M UTC"),
            fleet::span(
                now.as_second()
                    .saturating_sub(ack.written.as_second())
                    .max(0)
                    .unsigned_abs()
            )
        );
        out.push_str(&format!(
            "{:<width$}  {:<10}  {:>5}  {:<6}  {:<7}  {:<12}  {:<28}  {}\n",
            row.cluster,
            row.status,
            format!("v{}", ack.index_version),
            yes(standing.holds_active),
            if no_pending {
                "-"
            } else {
                yes(standing.holds_pending)
            },
            ack.sealing.as_ref().map_or("-", Kid::short),
            seen,
            if objects.is_empty() {
                "-".to_owned()
            } else {
                objects.join(" ")
            }
        ));
    }
    let notes: Vec<String> = report
        .clusters
        .iter()
        .filter(|r| !r.is_current())
        .map(|r| format!("  {}: {}\n", r.cluster, r.why()))
        .collect();
    if !notes.is_empty() {
        out.push_str("\nnot current:\n");
        out.extend(notes);
    }
    out
}
