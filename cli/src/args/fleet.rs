//! `kseal fleet status`: what each cluster of the fleet holds of the key ring.

use clap::{Args, Subcommand, ValueEnum};

use super::{ListOutput, RingArgs};

/// `--format` of `kseal fleet status`.
const KSEAL_FLEET_FORMAT: &str = "KSEAL_FLEET_FORMAT";
/// `--require` of `kseal fleet status`.
const KSEAL_FLEET_REQUIRE: &str = "KSEAL_FLEET_REQUIRE";

const FLEET_STATUS_EXAMPLES: &str = "\
Examples:
  # Which clusters hold the ring's current index and keys, and which are silent or behind
  kseal fleet status --ring kseal/fleet

  # CI gate before retiring or activating a key: exit 1 unless every cluster is current
  kseal fleet status --ring kseal/fleet --require current

  # The same as JSON (each cluster's record and standing)
  kseal fleet status --ring kseal/fleet -o json

Each cluster's controller (its leader) writes a small record when what it holds changes and
once a day: in SSM Parameter Store (/kseal/<ring>/fleet/<cluster>) for a Secrets Manager ring,
in <ring dir>/fleet/<cluster>.json for a directory ring. A cluster is silent when nothing was
heard from it for two of its heartbeats. Records are reports from the clusters, not trust:
kseal never chooses a key from them.";

/// `kseal fleet …`.
#[derive(Debug, Subcommand)]
pub(crate) enum FleetCommand {
    /// Show which clusters hold the ring's current index, its active and pending keys, how many
    /// objects each key opens there, and which clusters are silent or behind
    #[command(after_help = FLEET_STATUS_EXAMPLES)]
    Status(FleetStatusArgs),
}

#[derive(Debug, Args)]
pub(crate) struct FleetStatusArgs {
    /// Output: a table, or JSON (public data only)
    #[arg(short = 'o', long = "format", alias = "output", env = KSEAL_FLEET_FORMAT, value_enum, default_value = "table", value_name = "FORMAT")]
    pub(crate) output: ListOutput,
    /// Exit 1 unless every cluster is in this state (`current`: trusts the current index,
    /// holds the active and pending keys, seals with the active key, and is not silent); a
    /// ring no cluster reported on fails too
    #[arg(long, env = KSEAL_FLEET_REQUIRE, value_enum, value_name = "STATE")]
    pub(crate) require: Option<Require>,
    #[command(flatten)]
    pub(crate) ring: RingArgs,
}

/// `--require` states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Require {
    /// Every cluster current and heard from
    Current,
}
