//! `kseal quickstart`, `kseal config` and `kseal completions`.

use std::path::PathBuf;

use clap::Args;

use crate::env;

pub(super) const CONFIG_EXAMPLES: &str = "\
Examples:
  # Which rule of the nearest .kseal.yaml applies to a file, and why
  kseal config --for clusters/prod/db.yaml

  # The JSON Schema of .kseal.yaml, for editors (yaml-language-server)
  kseal config --schema > kseal-config.schema.json

.kseal.yaml is found from the current directory upwards. Its creation_rules are tried in
order and the first whose path_regex matches the output path (relative to the file's
directory) applies: its ring or cert, scope and namespace are defaults of `kseal seal`,
`create`, `set` and `reseal`; --cert, --scope and -n always win over them.
forbid_cluster_wide is a policy that no flag lifts.";

pub(super) const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  kseal completions bash > ~/.local/share/bash-completion/completions/kseal
  kseal completions zsh > \"${fpath[1]}/_kseal\"
  kseal completions fish > ~/.config/fish/completions/kseal.fish";

#[derive(Debug, Args)]
pub(crate) struct QuickstartArgs {
    /// Directory for the demo's key, sample Secret and results
    #[arg(long, env = env::KSEAL_QUICKSTART_DIR, default_value = "kseal-quickstart")]
    pub(crate) dir: PathBuf,
}

// `kseal config` (creation rules).
#[derive(Debug, Args)]
pub(crate) struct ConfigArgs {
    /// Output path to show the creation rule for (as -w, --merge-into or a `set` FILE would
    /// name it); without it, the rule for output to stdout
    #[arg(long = "for", env = env::KSEAL_CONFIG_FOR, value_name = "PATH")]
    pub(crate) for_path: Option<PathBuf>,
    /// Print the JSON Schema of .kseal.yaml instead (for editors)
    #[arg(long, env = env::KSEAL_CONFIG_SCHEMA, conflicts_with = "for_path")]
    pub(crate) schema: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// Shell to complete for
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}
