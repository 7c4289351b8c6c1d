#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

#[cfg(not(any(feature = "aws-lc", feature = "pure-rust")))]
compile_error!("kseal-keys needs at least one backend: enable `aws-lc` or `pure-rust`");

mod certificate;
pub mod envelope;
mod error;
mod fit;
mod pem_util;
mod pss;
mod public;
mod scope;
mod seal;
mod secret;

#[cfg(feature = "aws-lc")]
mod private;
#[cfg(feature = "aws-lc")]
mod ring;
#[cfg(feature = "aws-lc")]
mod x509_gen;

pub use certificate::Certificate;
pub use error::{Error, Result};
pub use fit::BlockTop;
pub use public::{KeyId, MAX_RSA_BITS, MIN_RSA_BITS, PublicKey};
pub use scope::{Label, ParseScopeError, Scope};
pub use seal::{Backend, seal, seal_base64, seal_with};
pub use secret::Plaintext;

#[cfg(feature = "aws-lc")]
pub use private::{CertificateOptions, KeySize, PrivateKey};
#[cfg(feature = "aws-lc")]
pub use ring::{HintPolicy, KeyPair, KeyRing, OpenOrder, OpenStats, Opened};
