//! `kseal seal`: Secrets in, SealedSecrets out.

use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use kseal_api::{SealOptions, SealedSecret};
use kseal_keys::Certificate;

use crate::args::{Format, SealArgs};
use crate::manifest::{Input, render};

/// Reads a certificate and refuses one that cannot be used for sealing.
pub(crate) fn read_certificate(path: &Path) -> Result<Certificate> {
    let text = fs_err::read_to_string(path).context("failed to read the sealing certificate")?;
    let cert = Certificate::from_pem(&text)
        .with_context(|| format!("failed to read certificate `{}`", path.display()))?;
    if cert.is_expired_at(SystemTime::now()) {
        bail!(
            "certificate `{}` expired on {}: refusing to seal with it",
            path.display(),
            httpdate(cert.not_after())
        );
    }
    Ok(cert)
}

/// Formats a time as `YYYY-MM-DD HH:MM:SS UTC`.
pub(crate) fn httpdate(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Seals every Secret of `input` and renders the SealedSecrets.
pub(crate) fn seal_input(
    input: &Input,
    cert: &Certificate,
    options: &SealOptions,
    format: Format,
) -> Result<String> {
    let secrets: Vec<Secret> = input.objects("Secret", "v1")?;
    let sealed = secrets
        .iter()
        .enumerate()
        .map(|(i, secret)| {
            let name = secret.metadata.name.as_deref().unwrap_or("<unnamed>");
            kseal_api::seal_secret(secret, cert.public_key(), options).with_context(|| {
                format!(
                    "failed to seal secret `{name}` (document {} of {})",
                    i + 1,
                    input.source
                )
            })
        })
        .collect::<Result<Vec<SealedSecret>>>()?;
    render(&sealed, format)
}

pub(crate) fn run(args: SealArgs) -> Result<()> {
    let cert = read_certificate(&args.cert)?;
    let input = Input::read(args.file.as_deref())?;
    let format = args.format.unwrap_or_else(|| input.format());
    let options = SealOptions {
        name: args.name,
        namespace: args.namespace,
        default_namespace: Some("default".into()),
        scope: args.scope,
        allow_empty_data: args.allow_empty_data,
    };
    let out = seal_input(&input, &cert, &options, format)?;
    crate::output::stdout(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_render_in_utc() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_763_769_600);
        assert_eq!(httpdate(t), "2025-11-22 00:00:00 UTC");
        assert_eq!(httpdate(SystemTime::UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
    }
}
