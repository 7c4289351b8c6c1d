//! The watch stores' copies of SealedSecrets and Secrets, kept compact: a synced
//! SealedSecret without its encrypted values ([`sealed`]), a Secret without its data
//! (`secret`), both in the byte layout of `wire`. The reconciler reads them instead of
//! the API server; what they hold decides only whether a read is needed, never a value.

pub mod sealed;
pub(crate) mod secret;
pub(crate) mod wire;
