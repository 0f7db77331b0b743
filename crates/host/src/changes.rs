//! One way for change to travel: a tool that changes a tenant's workspace
//! or skills publishes a [`Change`] here, and whoever cares subscribes,
//! instead of the tool calling each of them.
//!
//! Two kinds of subscriber:
//! - [`Subscriber`]s that must be done before the tool answers (the
//!   catalog re-reads its skills, so a `search_tools` right after a
//!   `save_skill` finds it): [`Changes::publish`] awaits each in turn;
//! - listeners that only pass the news on (resource notifications to
//!   subscribed clients): [`Changes::listen`] gives a broadcast receiver,
//!   which never holds the tool up and drops what a slow reader lags.
//!
//! The store shared with other nodes is not a subscriber: a skill write is
//! a transaction there (one writer per skill across nodes), which
//! [`crate::cluster::change_skill`] runs around the write itself.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio::sync::broadcast;

/// What changed in one tenant's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A workspace file was written, changed or removed (its path in the
    /// workspace).
    WorkspaceFile(String),
    /// A skill was saved or deleted (its name).
    Skill(String),
}

/// Something that must take in a change before the tool that made it
/// answers.
pub trait Subscriber: Send + Sync {
    fn changed<'a>(&'a self, change: &'a Change) -> BoxFuture<'a, ()>;
}

/// A tenant's change bus.
pub struct Changes {
    subscribers: Mutex<Vec<Arc<dyn Subscriber>>>,
    notices: broadcast::Sender<Change>,
}

impl std::fmt::Debug for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Changes")
            .field("listeners", &self.notices.receiver_count())
            .finish_non_exhaustive()
    }
}

impl Default for Changes {
    fn default() -> Self {
        Self::new()
    }
}

/// Notices a listener may fall behind by before it skips the oldest.
const BACKLOG: usize = 256;

impl Changes {
    pub fn new() -> Self {
        Changes {
            subscribers: Mutex::new(Vec::new()),
            notices: broadcast::channel(BACKLOG).0,
        }
    }

    /// Adds a subscriber that every later [`Changes::publish`] awaits.
    pub fn subscribe(&self, subscriber: Arc<dyn Subscriber>) {
        if let Ok(mut all) = self.subscribers.lock() {
            all.push(subscriber);
        }
    }

    /// Every change published from now on, for passing it on.
    pub fn listen(&self) -> broadcast::Receiver<Change> {
        self.notices.subscribe()
    }

    /// Tells every subscriber (awaited, in the order they subscribed), then
    /// every listener.
    pub async fn publish(&self, change: Change) {
        let subscribers = self
            .subscribers
            .lock()
            .map(|all| all.clone())
            .unwrap_or_default();
        for subscriber in subscribers {
            subscriber.changed(&change).await;
        }
        // No listener: nobody subscribed to resources; nothing to do.
        let _ = self.notices.send(change);
    }

    /// Tells only the listeners: for changes found after the fact (files
    /// code wrote), which no subscriber needs before the answer.
    pub fn announce(&self, change: Change) {
        let _ = self.notices.send(change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counter(AtomicUsize);

    impl Subscriber for Counter {
        fn changed<'a>(&'a self, change: &'a Change) -> BoxFuture<'a, ()> {
            Box::pin(async move {
                if matches!(change, Change::Skill(_)) {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            })
        }
    }

    #[tokio::test]
    async fn subscribers_are_done_before_publish_returns_and_listeners_hear_everything() {
        let changes = Changes::new();
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        changes.subscribe(counter.clone());
        let mut heard = changes.listen();
        changes.publish(Change::Skill("s".into())).await;
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        changes.announce(Change::WorkspaceFile("a.txt".into()));
        // announce skips the subscribers.
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert_eq!(heard.recv().await.ok(), Some(Change::Skill("s".into())));
        assert_eq!(
            heard.recv().await.ok(),
            Some(Change::WorkspaceFile("a.txt".into()))
        );
    }
}
