//! Progress of a long tool call, sent to the client as
//! `notifications/progress` when the request carried a progress token.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;

/// The closest two updates may follow each other (others are dropped;
/// the next one after the pause goes out).
const EVERY: Duration = Duration::from_millis(100);

/// Where one request's progress goes.
#[derive(Debug)]
pub struct ProgressSink {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    /// When the last update went out, and its `done` (updates must grow).
    last: Mutex<Option<(Instant, f64)>>,
}

impl ProgressSink {
    pub fn new(peer: Peer<RoleServer>, token: ProgressToken) -> Self {
        Self {
            peer,
            token,
            last: Mutex::new(None),
        }
    }

    /// Sends one update unless it comes too soon after the last one, does
    /// not move forward, or is not a finite number. The final update
    /// (`done == total`) is never dropped for being too soon.
    pub fn report(&self, done: f64, total: Option<f64>, message: Option<String>) {
        if !done.is_finite() || total.is_some_and(|t| !t.is_finite()) {
            return;
        }
        let now = Instant::now();
        {
            let Ok(mut last) = self.last.lock() else {
                return;
            };
            let finished = total.is_some_and(|t| done >= t);
            if let Some((at, previous)) = *last
                && (done <= previous || (!finished && now.duration_since(at) < EVERY))
            {
                return;
            }
            *last = Some((now, done));
        }
        let mut update = ProgressNotificationParam::new(self.token.clone(), done);
        if let Some(total) = total {
            update = update.with_total(total);
        }
        if let Some(message) = message {
            update = update.with_message(message);
        }
        let peer = self.peer.clone();
        tokio::spawn(async move {
            if let Err(e) = peer.notify_progress(update).await {
                tracing::debug!(error = %e, "a progress notification was not delivered");
            }
        });
    }
}
