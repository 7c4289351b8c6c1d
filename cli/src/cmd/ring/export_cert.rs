//! `kseal keys export-cert`: write the ring's sealing certificate (public) for offline
//! sealing.

use std::time::SystemTime;

use anyhow::{Context as _, Result};

use crate::args::ExportCertArgs;
use crate::keysource::ring::{
    block_on, check_unpinned, open, read_index_vouched, ring_label, unrecorded_refusal,
};
use crate::manifest::write_atomic;
use crate::output;

pub(crate) fn export_cert(args: ExportCertArgs) -> Result<()> {
    let (pem, kid, expired) = block_on(async {
        let ring = open(&args.ring, None).await?;
        // A certificate exported here is sealed to offline: none from an index the ring's
        // history marker cannot vouch for (attack review, round 16, N1).
        let (snapshot, unrecorded) = read_index_vouched(&ring).await?;
        let unrecorded = unrecorded || check_unpinned(&ring, &snapshot).await?;
        if unrecorded {
            return Err(unrecorded_refusal(&ring_label(&ring), &snapshot));
        }
        let entry = match &args.key {
            Some(key) => snapshot.index.resolve(key)?.clone(),
            None => snapshot
                .index
                .active_entry()
                .cloned()
                .context("the ring has no active key: push one first")?,
        };
        let expired = entry.is_expired_at(SystemTime::now());
        anyhow::Ok((entry.crt, entry.kid, expired))
    })??;
    if expired {
        eprintln!(
            "warning: the certificate of key {} has expired: kseal seal refuses it",
            kid.short()
        );
    }
    match &args.write {
        Some(path) => {
            write_atomic(path, pem.as_bytes(), false)?;
            eprintln!(
                "wrote the certificate of key {} to {}",
                kid.short(),
                path.display()
            );
            Ok(())
        }
        None => output::stdout(&pem),
    }
}
