//! Coalescing a server's `notifications/tools/list_changed`.
//!
//! Every notice used to drop every tenant's catalog, and the next search
//! of any server rebuilt it: a server announcing a change ten times a
//! second took another tenant's search of another server from 10 ms to
//! 2.6 s. Now a notice only wakes this server's re-listing task. The task
//! lists the server again at once when it has been quiet, else at the end
//! of its interval (`upstream.list_changed_interval_seconds`); a server
//! still announcing while it waits gets twice the interval, up to
//! [`MAX_LIST_CHANGED_BACKOFF_SECONDS`], and the base again once it calms
//! down. Only a list that differs from the one known wakes the catalogs,
//! which rebuild in the background while the old catalog is served.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use cem_config::MAX_LIST_CHANGED_BACKOFF_SECONDS;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::Upstream;

/// One server's notices: a count, and a wake-up that many notices share.
#[derive(Clone)]
pub struct Notices(Arc<Inner>);

struct Inner {
    /// Holds at most one permit: notices while the task is busy are one.
    wake: Notify,
    count: AtomicU64,
    interval: Duration,
}

impl Notices {
    pub fn new(interval: Duration) -> Self {
        Self(Arc::new(Inner {
            wake: Notify::new(),
            count: AtomicU64::new(0),
            interval,
        }))
    }

    /// The server said its tools changed.
    pub fn notice(&self) {
        self.0.count.fetch_add(1, Ordering::SeqCst);
        self.0.wake.notify_one();
    }
}

/// When the next re-list may start.
#[derive(Debug)]
struct Pace {
    base: Duration,
    wait: Duration,
    last: Option<Instant>,
    /// The notice count when the last re-list started.
    counted: u64,
}

impl Pace {
    fn new(base: Duration) -> Self {
        Self {
            base,
            wait: base,
            last: None,
            counted: 0,
        }
    }

    /// The earliest time of the next re-list.
    fn next(&self) -> Option<Instant> {
        self.last.map(|last| last + self.wait)
    }

    /// A re-list starts now, with `count` notices seen in all: more than
    /// one since the last re-list, or one that had to wait for the interval
    /// (`waited`), means the server keeps changing (one notice per listing
    /// would otherwise be listed every interval for ever).
    fn start(&mut self, count: u64, waited: bool, now: Instant) {
        let repeated = waited || count.saturating_sub(self.counted) > 1;
        self.wait = if repeated && !self.base.is_zero() {
            self.wait
                .saturating_mul(2)
                .min(Duration::from_secs(MAX_LIST_CHANGED_BACKOFF_SECONDS))
                .max(self.base)
        } else {
            self.base
        };
        self.counted = count;
        self.last = Some(now);
    }
}

/// Runs `upstream`'s re-listing task until the server is dropped.
pub fn spawn(upstream: Weak<Upstream>, notices: Notices) {
    tokio::spawn(async move {
        let mut pace = Pace::new(notices.0.interval);
        loop {
            notices.0.wake.notified().await;
            let mut waited = false;
            if let Some(at) = pace.next()
                && at > Instant::now()
            {
                waited = true;
                tokio::time::sleep_until(at).await;
            }
            let Some(upstream) = upstream.upgrade() else {
                return;
            };
            pace.start(
                notices.0.count.load(Ordering::SeqCst),
                waited,
                Instant::now(),
            );
            if pace.wait > pace.base {
                tracing::info!(
                    server = upstream.config.name.as_str(),
                    seconds = pace.wait.as_secs(),
                    "this server keeps saying its tools changed; it is listed again at most this often"
                );
            }
            upstream.lists.relist(&upstream).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_keeps_changing_waits_longer_and_calms_back() {
        let base = Duration::from_secs(2);
        let now = Instant::now();
        let mut pace = Pace::new(base);
        assert_eq!(pace.next(), None, "the first notice is listed at once");
        pace.start(1, false, now);
        assert_eq!(pace.next(), Some(now + base));
        // Twenty notices while it waited: twice the wait, then again.
        pace.start(21, false, now + base);
        assert_eq!(pace.wait, base * 2);
        pace.start(41, false, now + base * 3);
        assert_eq!(pace.wait, base * 4);
        for n in 0..20 {
            pace.start(61 + n * 20, false, now);
        }
        assert_eq!(
            pace.wait,
            Duration::from_secs(MAX_LIST_CHANGED_BACKOFF_SECONDS)
        );
        // One notice since the last re-list, after the wait was over: the
        // base again.
        let count = pace.counted + 1;
        pace.start(count, false, now);
        assert_eq!(pace.wait, base);
        // One notice a listing, each arriving before the interval ended,
        // is a server that keeps changing.
        pace.start(pace.counted + 1, true, now);
        pace.start(pace.counted + 1, true, now);
        assert_eq!(pace.wait, base * 4);
    }

    #[tokio::test(start_paused = true)]
    async fn notices_while_busy_are_one_wake_up() {
        let notices = Notices::new(Duration::from_secs(1));
        for _ in 0..100 {
            notices.notice();
        }
        notices.0.wake.notified().await;
        let again =
            tokio::time::timeout(Duration::from_millis(10), notices.0.wake.notified()).await;
        assert!(again.is_err(), "a hundred notices leave no second permit");
        assert_eq!(notices.0.count.load(Ordering::SeqCst), 100);
    }
}
