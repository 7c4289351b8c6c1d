//! `kseal`: seal Kubernetes Secrets offline for GitOps (the commands live in the library).
//! Key-ring commands are handed to `kseal-ring`, installed beside it, so that this executable
//! does not link the AWS SDK.

use std::process::ExitCode;

fn main() -> ExitCode {
    kseal_cli::run_local(std::env::args_os())
}
