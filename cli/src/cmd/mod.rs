//! One module per subcommand.

pub(crate) mod keys;
pub(crate) mod quickstart;
pub(crate) mod seal;
pub(crate) mod unseal;
