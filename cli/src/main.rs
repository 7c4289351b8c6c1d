//! `kseal`: seal Kubernetes Secrets offline for GitOps (the commands live in the library).

use std::process::ExitCode;

fn main() -> ExitCode {
    kseal_cli::run(std::env::args_os())
}
