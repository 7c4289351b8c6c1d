//! Requests passed between the controller's tasks as channels. A leaf module.

use std::sync::Arc;

use tokio::sync::Notify;

/// Asks the key-source loop to check the ring now (SIGUSR1, `POST /v1/refresh`).
/// A request also reaches the forks ([`Refresh::fork`]: one per further `--key-source` ring).
#[derive(Clone, Debug, Default)]
pub struct Refresh(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    notify: Notify,
    forks: std::sync::Mutex<Vec<Refresh>>,
}

impl Refresh {
    /// Requests a check (merged with one already waiting), of this loop and of every fork.
    pub fn request(&self) {
        self.0.notify.notify_one();
        let forks = self
            .0
            .forks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for fork in forks {
            fork.request();
        }
    }

    /// Resolves once a check is requested.
    pub async fn requested(&self) {
        self.0.notify.notified().await;
    }

    /// A new request channel that every request of this one also reaches.
    pub fn fork(&self) -> Refresh {
        let fork = Refresh::default();
        self.0
            .forks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(fork.clone());
        fork
    }
}
