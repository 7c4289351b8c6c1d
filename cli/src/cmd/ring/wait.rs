//! `kseal keys rotate|activate --wait-for all|N%|CLUSTERS`: activate a pending key once the
//! fleet reports holding it, instead of after a guessed delay.
//!
//! Each cluster's controller writes a record of what it holds ([`kseal_keystore::fleet`]). A
//! cluster acknowledges the pending key when its record lists the kid as held under an index
//! of at least the version the wait started from (which holds the key) and the same anchor,
//! and it is not silent (heard from within two of its heartbeats). Records are reports, not
//! trust: they can only delay an activation, never choose the key; the activation itself is
//! the ring's ordinary signed write, with its pins and `--root` checks.
//!
//! `all` waits for every cluster with a record, so a silent (stopped) or unreadable one blocks
//! until it reports the key or the timeout; `N%` for that share of them (rounded up); named
//! clusters for each of them, a record or not. On timeout nothing is activated (exit 3).

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kseal_keystore::fleet::{self, Listed};
use kseal_keystore::{FleetStore, Kid};

use crate::args::{FleetWaitArgs, WaitFor};
use crate::cmd::check::Exit;
use crate::cmd::fleet::list;
use crate::text::count;

/// The exit code of a wait that timed out (the key stays pending).
pub(super) const TIMED_OUT: u8 = 3;

/// The shortest pause between two reads of the records.
const MIN_POLL: Duration = Duration::from_millis(50);

/// The most clusters a progress line names.
const NAMED: usize = 5;

/// What the clusters must report.
pub(super) struct Target {
    /// The pending key.
    pub(super) kid: Kid,
    /// The index version the wait starts from (it holds the key).
    pub(super) version: u64,
    /// The anchor of the ring's signed history, when signed.
    pub(super) anchor: Option<Kid>,
}

/// Refuses `--wait-for` before anything changes when no cluster has a record (nothing could
/// ever acknowledge): the delay is for such rings.
pub(super) async fn preflight(store: &FleetStore, wait_for: &WaitFor) -> Result<()> {
    if list(store).await?.is_empty() {
        bail!(
            "--wait-for {wait_for}: no cluster has reported on this key ring yet (nothing in {}), \
             so none can acknowledge a key; controllers with --key-source write their \
             record once they have read the ring. Leave out --wait-for to activate after \
             --delay instead",
            store.describe()
        );
    }
    Ok(())
}

/// One reading of the records against `target`.
#[derive(Debug, PartialEq, Eq)]
struct Tally {
    /// Clusters that acknowledge.
    acked: Vec<String>,
    /// Clusters counted that do not, with why.
    missing: Vec<(String, String)>,
    /// How many must acknowledge.
    needed: usize,
    /// How many clusters count (acknowledging or not).
    total: usize,
    /// The percentage asked for, with `N%`.
    share: Option<u8>,
}

impl Tally {
    fn done(&self) -> bool {
        self.acked.len() >= self.needed
    }

    fn missing_text(&self) -> String {
        let mut named: Vec<String> = self
            .missing
            .iter()
            .take(NAMED)
            .map(|(c, why)| format!("{c} ({why})"))
            .collect();
        if self.missing.len() > NAMED {
            named.push(format!("and {} more", self.missing.len() - NAMED));
        }
        named.join(", ")
    }

    /// `2 of 3 acknowledged, 3 needed (90%)`.
    fn summary(&self) -> String {
        let share = self
            .share
            .map_or_else(String::new, |p| format!(", {} needed ({p}%)", self.needed));
        format!("{} of {} acknowledged{share}", self.acked.len(), self.total)
    }

    /// `2/3 clusters hold key 0123456789ab; waiting for c (silent 4m)`.
    fn line(&self, kid: &Kid) -> String {
        let share = self
            .share
            .map_or_else(String::new, |p| format!(" ({p}% is {})", self.needed));
        let held = format!(
            "{}/{} hold key {}{share}",
            self.acked.len(),
            count(self.total, "cluster"),
            kid.short()
        );
        if self.done() {
            format!("{held}; activating")
        } else {
            format!("{held}; waiting for {}", self.missing_text())
        }
    }
}

/// Why `listed` does not acknowledge `target` at `now` (`None`: it does).
fn why_not(listed: &Listed, target: &Target, now: jiff::Timestamp) -> Option<String> {
    let ack = match &listed.ack {
        Ok(ack) => ack,
        Err(problem) => return Some(format!("unreadable: {problem}")),
    };
    if let Some(quiet) = fleet::silence(ack, now) {
        return Some(format!("silent {}", fleet::span(quiet)));
    }
    if fleet::acknowledges(ack, &target.kid, target.version, target.anchor.as_ref()) {
        return None;
    }
    Some(
        if matches!((&target.anchor, &ack.anchor), (Some(a), Some(b)) if a != b) {
            "trusts another anchor".to_owned()
        } else if ack.index_version < target.version {
            format!(
                "holds index v{}, needs v{}",
                ack.index_version, target.version
            )
        } else {
            "does not hold the key".to_owned()
        },
    )
}

fn tally(listed: &[Listed], wait_for: &WaitFor, target: &Target, now: jiff::Timestamp) -> Tally {
    let mut acked = Vec::new();
    let mut missing = Vec::new();
    let mut judge = |name: &str, why: Option<String>| match why {
        None => acked.push(name.to_owned()),
        Some(why) => missing.push((name.to_owned(), why)),
    };
    let total = match wait_for {
        WaitFor::Clusters(ids) => ids.len(),
        _ => listed.len(),
    };
    let needed = match wait_for {
        WaitFor::All | WaitFor::Percent(_) => {
            for l in listed {
                judge(&l.name, why_not(l, target, now));
            }
            match wait_for {
                WaitFor::Percent(p) => (listed.len() * usize::from(*p)).div_ceil(100),
                _ => listed.len(),
            }
        }
        WaitFor::Clusters(ids) => {
            for id in ids {
                let why = match listed.iter().find(|l| l.name == id.as_str()) {
                    Some(l) => why_not(l, target, now),
                    None => Some("no record".to_owned()),
                };
                judge(id.as_str(), why);
            }
            ids.len()
        }
    };
    Tally {
        acked,
        missing,
        needed,
        total,
        share: match wait_for {
            WaitFor::Percent(p) => Some(*p),
            _ => None,
        },
    }
}

/// Waits until the clusters `wait_for` names acknowledge `target`, printing a line on stderr
/// whenever the picture changes. On timeout, says which clusters are missing and fails with
/// exit code [`TIMED_OUT`]: nothing is activated.
pub(super) async fn wait(
    store: &FleetStore,
    args: &FleetWaitArgs,
    wait_for: &WaitFor,
    target: &Target,
    later: &str,
) -> Result<()> {
    let deadline = Instant::now() + args.timeout;
    eprintln!(
        "waiting up to {} for {} to report holding key {} (index v{} or later), polling {}; \
         interrupting is safe, the key stays pending: {later}",
        fleet::span(args.timeout.as_secs()),
        match wait_for {
            WaitFor::All => "every cluster".to_owned(),
            WaitFor::Percent(p) => format!("{p}% of the clusters"),
            WaitFor::Clusters(ids) => count(ids.len(), "named cluster"),
        },
        target.kid.short(),
        target.version,
        store.describe()
    );
    let mut shown = String::new();
    let mut last: Option<Tally> = None;
    loop {
        let line = match list(store).await {
            Ok(listed) => {
                let now = jiff::Timestamp::now();
                let t = tally(&listed, wait_for, target, now);
                let line = t.line(&target.kid);
                let done = t.done();
                last = Some(t);
                if done {
                    eprintln!("{line}");
                    return Ok(());
                }
                line
            }
            Err(e) => format!("warning: {}; trying again", crate::text::chain(&e)),
        };
        if line != shown {
            eprintln!("{line}");
            shown = line;
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        tokio::time::sleep(args.poll.max(MIN_POLL).min(deadline - now)).await;
    }
    let missing = last.as_ref().map_or_else(
        || "the records could not be read".to_owned(),
        |t| format!("{}; missing: {}", t.summary(), t.missing_text()),
    );
    eprintln!(
        "error: --wait-for {wait_for}: timed out after {}: {missing}. Key {} was not activated \
         and stays pending: {later}",
        fleet::span(args.timeout.as_secs()),
        target.kid.short()
    );
    Err(Exit(TIMED_OUT).into())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kseal_keystore::{Ack, ClusterId};

    use super::*;

    fn kid(c: char) -> Kid {
        Kid::parse(&c.to_string().repeat(64)).unwrap()
    }

    fn listed(name: &str, version: u64, held: &[char], written_ago: i64) -> Listed {
        let now = jiff::Timestamp::now().as_second();
        Listed {
            name: name.to_owned(),
            ack: Ok(Ack {
                schema: fleet::ACK_SCHEMA,
                cluster: ClusterId::parse(name).unwrap(),
                ring: "r".into(),
                anchor: Some(kid('a')),
                index_version: version,
                held: held.iter().map(|c| kid(*c)).collect(),
                sealing: Some(kid('a')),
                objects: BTreeMap::new(),
                unattributed: 0,
                controller: "0.1.0".into(),
                heartbeat_seconds: 60,
                synced: None,
                written: jiff::Timestamp::from_second(now - written_ago).unwrap(),
            }),
        }
    }

    fn target() -> Target {
        Target {
            kid: kid('b'),
            version: 5,
            anchor: Some(kid('a')),
        }
    }

    #[test]
    fn all_percent_and_named_clusters_count_what_they_should() {
        let now = jiff::Timestamp::now();
        let records = vec![
            listed("c1", 5, &['a', 'b'], 0),
            listed("c2", 4, &['a', 'b'], 0),
            listed("c3", 6, &['a', 'b'], 600),
            Listed {
                name: "c4".into(),
                ack: Err("c4.json is malformed: x".into()),
            },
        ];
        let all = tally(&records, &WaitFor::All, &target(), now);
        assert_eq!(all.acked, ["c1"]);
        assert_eq!((all.needed, all.total), (4, 4));
        assert_eq!(all.summary(), "1 of 4 acknowledged");
        assert!(!all.done());
        assert_eq!(
            all.missing_text(),
            "c2 (holds index v4, needs v5), c3 (silent 10m), c4 (unreadable: c4.json is \
             malformed: x)"
        );
        assert_eq!(
            tally(&records, &WaitFor::Percent(25), &target(), now).needed,
            1
        );
        let quarter = tally(&records, &WaitFor::Percent(25), &target(), now);
        assert!(quarter.done());
        assert_eq!(
            quarter.line(&kid('b')),
            format!(
                "1/4 clusters hold key {} (25% is 1); activating",
                kid('b').short()
            )
        );
        assert!(!tally(&records, &WaitFor::Percent(26), &target(), now).done());
        let named = |ids: &[&str]| {
            WaitFor::Clusters(ids.iter().map(|i| ClusterId::parse(i).unwrap()).collect())
        };
        assert!(tally(&records, &named(&["c1"]), &target(), now).done());
        let t = tally(&records, &named(&["c1", "c9"]), &target(), now);
        assert!(!t.done());
        assert_eq!(t.missing, [("c9".to_owned(), "no record".to_owned())]);
        assert_eq!(
            t.line(&kid('b')),
            format!(
                "1/2 clusters hold key {}; waiting for c9 (no record)",
                kid('b').short()
            )
        );
        // Another anchor, or a record without the key, never acknowledges.
        let mut other = listed("c5", 9, &['b'], 0);
        if let Ok(ack) = &mut other.ack {
            ack.anchor = Some(kid('f'));
        }
        assert_eq!(
            why_not(&other, &target(), now).as_deref(),
            Some("trusts another anchor")
        );
        assert_eq!(
            why_not(&listed("c6", 9, &['a'], 0), &target(), now).as_deref(),
            Some("does not hold the key")
        );
    }
}
