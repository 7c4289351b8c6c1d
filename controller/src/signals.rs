//! Requests passed between the controller's tasks as channels. A leaf module.

use std::sync::Arc;

use tokio::sync::Notify;

/// Asks the key-source loop to check the ring now (SIGUSR1, `POST /v1/refresh`).
#[derive(Clone, Debug, Default)]
pub struct Refresh(Arc<Notify>);

impl Refresh {
    /// Requests a check (merged with one already waiting).
    pub fn request(&self) {
        self.0.notify_one();
    }

    /// Resolves once a check is requested.
    pub async fn requested(&self) {
        self.0.notified().await;
    }
}
