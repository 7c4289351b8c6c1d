//! `kseal keys rotate`: generate and push a new key, then activate it after the safety delay
//! or, with `--wait-for`, once the fleet reports holding it ([`super::wait`]).

use anyhow::{Result, bail};
use kseal_keystore::{Index, Kid};

use super::activate::activate_key;
use super::{generate, hint_activation, mirror, push_all, wait};
use crate::args::RotateArgs;
use crate::cmd::fleet::open_store;
use crate::keysource::ring::{block_on, open, read_index, ring_arg, ring_label};
use crate::output::confirm;

pub(crate) fn rotate(args: RotateArgs) -> Result<()> {
    let delay = args.delay.effective(args.fleet.wait_for.is_some());
    block_on(async {
        let ring = open(&args.ring, Some(&args.write)).await?;
        // Rotating a ring that does not exist is a mistyped name, not a new ring.
        let before = read_index(&ring).await?.index.active;
        // `--wait-for` on a ring no cluster reports on could never finish: refuse it before
        // a key is pushed.
        let fleet = match &args.fleet.wait_for {
            Some(wait_for) => {
                let store = open_store(&args.ring).await?;
                wait::preflight(&store, wait_for).await?;
                Some((store, wait_for))
            }
            None => None,
        };
        confirm(
            &format!(
                "Generate a new sealing key for key ring {}?",
                ring_label(&ring)
            ),
            args.confirm.yes,
        )?;
        let pair = generate(&args.spec)?;
        let outcomes = push_all(&ring, vec![pair]).await?;
        let Some(outcome) = outcomes.first() else {
            bail!("nothing was pushed");
        };
        if !outcome.activated {
            if args.no_wait {
                hint_activation(&ring_arg(&args.ring), &outcomes, delay);
                return mirror(&ring, &args.write).await;
            }
            let done = match &fleet {
                Some((store, wait_for)) => {
                    // The index read back after the push holds the key: clusters must hold
                    // this version (or a later one).
                    let snapshot = read_index(&ring).await?;
                    let target = wait::Target {
                        kid: outcome.kid.clone(),
                        version: snapshot.index.version,
                        anchor: snapshot.verified.anchor().cloned(),
                    };
                    let later = format!(
                        "`kseal keys activate --ring {} --wait-for {wait_for} {}`",
                        ring_arg(&args.ring),
                        outcome.kid.short()
                    );
                    wait::wait(store, &args.fleet, wait_for, &target, &later).await
                }
                None => Ok(()),
            };
            let done = match done {
                Ok(()) => {
                    activate_key(
                        &ring,
                        &ring_arg(&args.ring),
                        outcome.kid.as_str(),
                        delay,
                        true,
                        Some(&before),
                    )
                    .await
                }
                Err(e) => Err(e),
            };
            let done = match done {
                Ok(done) => done,
                Err(e) => {
                    mirror(&ring, &args.write).await?;
                    return Err(e);
                }
            };
            #[cfg(debug_assertions)]
            pause_for_tests().await;
            // Activations are last-writer-wins: a rotation racing this one may have activated
            // its own key just after. Only the index read back says which key seals.
            let after = read_index(&ring).await?;
            if let Some(lost) = lost_race(&after.index, &outcome.kid, &ring_arg(&args.ring)) {
                mirror(&ring, &args.write).await?;
                bail!("{lost}");
            }
            eprintln!("{done}");
        }
        mirror(&ring, &args.write).await
    })?
}

/// What `rotate` says when, read back after activating `ours`, the index names another key:
/// another rotation (or `keys activate`) won. `None` when `ours` seals.
pub(super) fn lost_race(index: &Index, ours: &Kid, ring: &str) -> Option<String> {
    if index.active.as_ref() == Some(ours) {
        return None;
    }
    let winner = match &index.active {
        Some(kid) => format!("key {} seals", kid.short()),
        None => "no key seals".to_owned(),
    };
    Some(if index.entry(ours).is_some() {
        format!(
            "another rotation won: {winner}, your key {} is in the ring but not active (another \
             key was activated right after it); keep it in the ring, since whatever was sealed \
             in that moment needs it, and activate it later if it should seal: `kseal keys \
             activate --ring {ring} {}`",
            ours.short(),
            ours.short()
        )
    } else {
        format!(
            "another rotation won: {winner}, and your key {} is no longer in the ring",
            ours.short()
        )
    })
}

/// Test seam of debug builds (release builds do not have it): with `KSEAL_TEST_ROTATE_PAUSE`
/// set to a path, `rotate` creates `<path>.reached` once its key is active and waits (up to a
/// minute) for `<path>` to exist before reading the index back, so a test can activate another
/// key in between: a lost race, deterministically.
#[cfg(debug_assertions)]
pub(super) async fn pause_for_tests() {
    let Some(path) = std::env::var_os("KSEAL_TEST_ROTATE_PAUSE").map(std::path::PathBuf::from)
    else {
        return;
    };
    let mut reached = path.clone().into_os_string();
    reached.push(".reached");
    if fs_err::write(&reached, b"").is_err() {
        return;
    }
    for _ in 0..600 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
