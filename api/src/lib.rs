#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod binding;
pub mod budget;
pub mod constants;
pub mod duration;
mod error;
mod render;
pub mod request;
mod resource;
mod scope;
mod seal;
pub mod template;
mod unseal;
pub mod validation;

pub use binding::{ItemsLabel, items_label};
pub use error::{Error, HintNote, Result, TEMPLATE_BINDING_MISMATCH, TEMPLATE_FAILED};
pub use render::render_template_data;
pub use resource::{
    SealedSecret, SealedSecretCondition, SealedSecretSpec, SealedSecretStatus, SecretTemplateSpec,
};
pub use scope::{ScopeTarget, scope_from_annotations, scope_of, set_scope_annotations};
pub use seal::{SealOptions, seal_secret};
pub use template::TemplateError;
pub use unseal::{UnsealOptions, Unsealed, unseal, unseal_counted, unseal_with};

/// Re-exported so callers name scopes without depending on `kseal-keys` directly.
pub use kseal_keys::Scope;
