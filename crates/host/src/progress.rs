//! Progress of a long tool call, sent to the client as
//! `notifications/progress` when the request carried a progress token.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use tokio::sync::{mpsc, oneshot};

/// The closest two updates may follow each other (others are dropped;
/// the next one after the pause goes out).
const EVERY: Duration = Duration::from_millis(100);
/// How long after an update the answer waits before it goes. The order on
/// the wire is already right; this is for clients that handle notifications
/// a turn of their event loop later than answers (the TypeScript SDK: an
/// update read in the same chunk as the answer finds its handler gone,
/// typescript-sdk issue 2580). Only answers right behind an update wait.
const SETTLE: Duration = Duration::from_millis(25);

enum Message {
    Update(ProgressNotificationParam),
    /// Answered once every update queued before it was sent.
    Flush(oneshot::Sender<()>),
}

/// Where one request's progress goes. Updates are sent in order by one
/// task, so the last one cannot overtake another, and [`Self::flush`]
/// lets the call's answer wait for them: a client stops listening for a
/// request's progress once it has the answer.
#[derive(Debug)]
pub struct ProgressSink {
    token: ProgressToken,
    queue: mpsc::UnboundedSender<Message>,
    /// When the last update was queued, and its `done` (updates must grow).
    last: Mutex<Option<(Instant, f64)>>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Message")
    }
}

impl ProgressSink {
    pub fn new(peer: Peer<RoleServer>, token: ProgressToken) -> Self {
        let (queue, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut sent: Option<tokio::time::Instant> = None;
            while let Some(message) = rx.recv().await {
                match message {
                    Message::Update(update) => match peer.notify_progress(update).await {
                        Ok(()) => sent = Some(tokio::time::Instant::now()),
                        Err(e) => {
                            tracing::debug!(error = %e, "a progress notification was not delivered")
                        }
                    },
                    Message::Flush(done) => {
                        if let Some(at) = sent {
                            tokio::time::sleep_until(at + SETTLE).await;
                        }
                        let _ = done.send(());
                    }
                }
            }
        });
        Self {
            token,
            queue,
            last: Mutex::new(None),
        }
    }

    /// Queues one update unless it comes too soon after the last one, does
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
        let _ = self.queue.send(Message::Update(update));
    }

    /// Waits until every update queued so far is on the wire (or failed
    /// to go: a closed transport answers at once). Unbounded on purpose:
    /// the answer travels the same stream, so a client too slow to take an
    /// update is too slow to take the answer, and a bound only let the
    /// answer overtake the last update on a loaded machine (the client then
    /// drops it, having stopped listening for this request).
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.queue.send(Message::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}
