//! `kseal completions SHELL`.

use anyhow::Result;
use clap::CommandFactory as _;

use crate::args::{Cli, CompletionsArgs};

pub(crate) fn run(args: CompletionsArgs) -> Result<()> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "kseal", &mut script);
    crate::output::stdout(&String::from_utf8_lossy(&script))
}
