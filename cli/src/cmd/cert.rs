//! `kseal cert`: print or save the sealing certificate from any source.

use anyhow::{Result, bail};

use crate::args::CertCmdArgs;
use crate::keysource::cert::CertRequest;

pub(crate) fn run(args: CertCmdArgs) -> Result<()> {
    let request = CertRequest::from_args(&args.cert)?;
    let [spec] = request.specs.as_slice() else {
        bail!(
            "kseal cert takes one certificate source; got {}",
            request.specs.len()
        );
    };
    let text = request.fetch_pem(&spec.source)?;
    // Refuse to save something that cannot seal (not a certificate, not RSA, expired).
    let cert = crate::keysource::cert::check(&text, &request.describe(&spec.source))?;
    eprintln!(
        "certificate {} (CN {}, RSA-{}, valid until {})",
        cert.id(),
        cert.common_name().unwrap_or("-"),
        cert.public_key().bits(),
        crate::time::utc_time(cert.not_after())
    );
    crate::output::emit(&text, args.write.as_deref())
}
