//! `kseal-ring`: the `kseal` commands that read or write a fleet key ring (AWS Secrets Manager
//! or a directory). `kseal` hands these to it; it runs every other command too.

use std::process::ExitCode;

fn main() -> ExitCode {
    kseal_cli::run(std::env::args_os())
}
