//! `kseal keys activate`: make a key of the ring the sealing key, once every controller has
//! had time to fetch it (the delay) or, with `--wait-for`, has reported holding it
//! ([`super::wait`]).

use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result, bail};
use kseal_keystore::{ActivateOutcome, Kid, Ring};

use super::{minutes, mirror, wait, when};
use crate::args::ActivateArgs;
use crate::cmd::fleet::open_store;
use crate::keysource::ring::{block_on, open, read_index, ring_arg, ring_label};
use crate::output::confirm;

/// Activates `key`, waiting for the delay when `wait`; returns what happened, for the caller
/// to print (`rotate` first checks that no other activation followed).
pub(super) async fn activate_key(
    ring: &Ring,
    ring_text: &str,
    key: &str,
    delay: Duration,
    wait: bool,
    expected: Option<&Option<Kid>>,
) -> Result<String> {
    loop {
        let outcome = ring
            .activate_if(key, delay, expected)
            .await
            .with_context(|| format!("failed to activate key {key}"))?;
        match outcome {
            ActivateOutcome::Activated { kid, previous } => {
                return Ok(match previous {
                    Some(p) => format!(
                        "key {} seals from now on (was {}); controllers serve its certificate \
                         after their next poll, and SealedSecrets sealed with older keys keep opening",
                        kid.short(),
                        p.short()
                    ),
                    None => format!("key {} seals from now on", kid.short()),
                });
            }
            ActivateOutcome::AlreadyActive(kid) => {
                return Ok(format!("key {} already seals: nothing to do", kid.short()));
            }
            ActivateOutcome::Superseded { kid, active } => {
                bail!(
                    "another rotation won: key {} was activated while this one waited, so key {} \
                     was not activated; it stays in the ring (it opens what it sealed, nothing \
                     yet). Activate it later if it should seal: `kseal keys activate --ring \
                     {ring_text} {}`",
                    active.as_ref().map_or("(none)", Kid::short),
                    kid.short(),
                    kid.short()
                );
            }
            ActivateOutcome::TooYoung { kid, ready_at } => {
                let left = ready_at
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                if !wait {
                    bail!(
                        "key {} entered the ring less than {} ago, so some controllers may not \
                         have it yet: activate it after {} (in {}), pass --wait to wait, or \
                         --now if every cluster already has it",
                        kid.short(),
                        minutes(delay),
                        when(ready_at),
                        minutes(left)
                    );
                }
                eprintln!(
                    "waiting {} (until {}) so every controller fetches key {} before it seals; \
                     interrupting is safe: run `kseal keys activate --ring {ring_text} {}` later",
                    minutes(left),
                    when(ready_at),
                    kid.short(),
                    kid.short()
                );
                tokio::time::sleep(left.min(Duration::from_secs(300)) + Duration::from_secs(1))
                    .await;
            }
        }
    }
}

pub(crate) fn activate(args: ActivateArgs) -> Result<()> {
    let delay = args.delay.effective(args.fleet.wait_for.is_some());
    block_on(async {
        let ring = open(&args.ring, Some(&args.write)).await?;
        // A clear message for a ring that does not exist (rather than "no key … in the ring").
        let snapshot = read_index(&ring).await?;
        let fleet = match &args.fleet.wait_for {
            Some(wait_for) => {
                let kid = snapshot.index.resolve(&args.key)?.kid.clone();
                let store = open_store(&args.ring).await?;
                wait::preflight(&store, wait_for).await?;
                // Clusters must hold the key under this index (it holds the key) or a later one.
                let target = wait::Target {
                    kid,
                    version: snapshot.index.version,
                    anchor: snapshot.verified.anchor().cloned(),
                };
                (snapshot.index.active.as_ref() != Some(&target.kid))
                    .then_some((store, wait_for, target))
            }
            None => None,
        };
        confirm(
            &format!(
                "Seal with key {} in key ring {} from now on?",
                args.key,
                ring_label(&ring)
            ),
            args.confirm.yes,
        )?;
        if let Some((store, wait_for, target)) = &fleet {
            let later = format!(
                "`kseal keys activate --ring {} --wait-for {wait_for} {}` again",
                ring_arg(&args.ring),
                target.kid.short()
            );
            wait::wait(store, &args.fleet, wait_for, target, &later).await?;
        }
        let done = activate_key(
            &ring,
            &ring_arg(&args.ring),
            &args.key,
            delay,
            // With --wait-for, a --delay given is a floor to wait for, not to fail on.
            args.wait || fleet.is_some(),
            None,
        )
        .await?;
        eprintln!("{done}");
        mirror(&ring, &args.write).await
    })?
}
