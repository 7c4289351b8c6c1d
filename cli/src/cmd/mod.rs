//! One module per subcommand.

pub(crate) mod cert;
pub(crate) mod check;
pub(crate) mod completions;
pub(crate) mod config;
pub(crate) mod create;
pub(crate) mod exposure;
pub(crate) mod fleet;
pub(crate) mod keys;
pub(crate) mod quickstart;
pub(crate) mod recovery;
pub(crate) mod reseal_stale;
pub(crate) mod ring;
pub(crate) mod seal;
pub(crate) mod set;
pub(crate) mod trust;
pub(crate) mod unseal;
