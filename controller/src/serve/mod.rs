//! The HTTP API: routes (`/healthz`, `/readyz`, `/v1/cert.pem`, `/v1/verify`, `/v1/rotate`,
//! `/metrics`, in [`http`]), the accept loop with its connection caps (`conn`), the
//! per-client rate limit ([`ratelimit`]) and the RSA slots the HTTP API shares with the
//! reconciler, reconciles first (`rsapool`).

pub(crate) mod conn;
pub mod http;
#[doc(hidden)]
pub mod ratelimit;
pub(crate) mod rsapool;
