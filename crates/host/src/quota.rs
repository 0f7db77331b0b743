//! Limits per tenant (`quotas`), so one user cannot starve the others.
//! Every refusal says which quota, its value, and when to retry.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cem_config::QuotaConfig;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The rate windows are a minute long.
const WINDOW: Duration = Duration::from_secs(60);

/// A quota was reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    /// What happened and what to do, naming the config key.
    pub message: String,
    /// When a retry can succeed (for `Retry-After`).
    pub retry_after: Duration,
}

/// One tenant's use of its quotas.
#[derive(Debug)]
pub struct Quota {
    config: QuotaConfig,
    running: Option<Arc<Semaphore>>,
    starts: Mutex<VecDeque<Instant>>,
    requests: Mutex<VecDeque<Instant>>,
}

impl Quota {
    pub fn new(config: &QuotaConfig) -> Self {
        Self {
            running: config
                .concurrent_executions
                .map(|n| Arc::new(Semaphore::new(n as usize))),
            config: config.clone(),
            starts: Mutex::new(VecDeque::new()),
            requests: Mutex::new(VecDeque::new()),
        }
    }

    pub fn config(&self) -> &QuotaConfig {
        &self.config
    }

    /// Admits one execution: a slot among `concurrent_executions` (held
    /// until the permit drops) and a start within `executions_per_minute`.
    pub fn start_execution(&self) -> Result<Option<OwnedSemaphorePermit>, Exceeded> {
        let permit = match &self.running {
            None => None,
            Some(sem) => Some(sem.clone().try_acquire_owned().map_err(|_| {
                cem_metrics::metrics().quota_refused("concurrent_executions");
                let n = self.config.concurrent_executions.unwrap_or_default();
                Exceeded {
                    message: format!(
                        "quota exceeded: {n} executions of yours are already running, the most allowed \
                         (quotas.concurrent_executions = {n}); retry when one of them has finished"
                    ),
                    retry_after: Duration::from_secs(1),
                }
            })?),
        };
        if let Some(max) = self.config.executions_per_minute {
            admit(&self.starts, max).map_err(|wait| {
                cem_metrics::metrics().quota_refused("executions_per_minute");
                Exceeded {
                    message: format!(
                        "quota exceeded: {max} executions started in the last minute, the most allowed \
                         (quotas.executions_per_minute = {max}); retry in {} s",
                        wait.as_secs().max(1)
                    ),
                    retry_after: wait,
                }
            })?;
        }
        Ok(permit)
    }

    /// Admits one HTTP request within `requests_per_minute`.
    pub fn request(&self) -> Result<(), Exceeded> {
        let Some(max) = self.config.requests_per_minute else {
            return Ok(());
        };
        admit(&self.requests, max).map_err(|wait| {
            cem_metrics::metrics().quota_refused("requests_per_minute");
            Exceeded {
                message: format!(
                    "quota exceeded: {max} requests in the last minute, the most allowed \
                     (quotas.requests_per_minute = {max}); retry in {} s",
                    wait.as_secs().max(1)
                ),
                retry_after: wait,
            }
        })
    }

    /// Whether writing `adding` bytes over `replacing` existing ones keeps
    /// a workspace of `used` bytes within `workspace_bytes`.
    pub fn check_write(&self, used: u64, replacing: u64, adding: u64) -> Result<(), Exceeded> {
        let Some(max) = self.config.workspace_bytes else {
            return Ok(());
        };
        let after = used.saturating_sub(replacing).saturating_add(adding);
        if after <= max {
            return Ok(());
        }
        cem_metrics::metrics().quota_refused("workspace_bytes");
        Err(Exceeded {
            message: format!(
                "quota exceeded: the workspace would hold {after} bytes, over quotas.workspace_bytes = {max} \
                 (it holds {used} now); delete files you no longer need (in execute_code: delete_file(name)) and retry"
            ),
            retry_after: Duration::ZERO,
        })
    }

    /// The bytes an execution may add to a workspace of `used` bytes
    /// (`None`: no workspace quota). Never zero: a workspace over its
    /// quota still runs code, which is how files get deleted, but that
    /// code can add at most 1 MiB.
    pub fn disk_allowance(&self, used: u64) -> Option<u64> {
        let max = self.config.workspace_bytes?;
        Some(max.saturating_sub(used).max(1 << 20))
    }
}

/// Records one event in a sliding one-minute window of at most `max`, or
/// says how long until the oldest leaves it.
fn admit(window: &Mutex<VecDeque<Instant>>, max: u64) -> Result<(), Duration> {
    let now = Instant::now();
    let Ok(mut events) = window.lock() else {
        return Ok(());
    };
    while events
        .front()
        .is_some_and(|t| now.duration_since(*t) >= WINDOW)
    {
        events.pop_front();
    }
    if events.len() as u64 >= max {
        let oldest = events.front().copied().unwrap_or(now);
        let wait = WINDOW.saturating_sub(now.duration_since(oldest));
        // Whole seconds, rounded up, for Retry-After.
        return Err(Duration::from_secs(
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
        ));
    }
    events.push_back(now);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(f: impl FnOnce(&mut QuotaConfig)) -> Quota {
        let mut c = QuotaConfig::default();
        f(&mut c);
        Quota::new(&c)
    }

    #[test]
    fn executions_per_minute_say_when_to_retry() {
        let q = quota(|c| c.executions_per_minute = Some(2));
        assert!(q.start_execution().is_ok());
        assert!(q.start_execution().is_ok());
        let e = q
            .start_execution()
            .err()
            .unwrap_or_else(|| panic!("third start admitted"));
        assert!(
            e.message.contains("quotas.executions_per_minute = 2"),
            "{}",
            e.message
        );
        assert!(
            (59..=60).contains(&e.retry_after.as_secs()),
            "{:?}",
            e.retry_after
        );
    }

    #[test]
    fn concurrent_slots_come_back_when_released() {
        let q = quota(|c| c.concurrent_executions = Some(1));
        let first = q.start_execution();
        assert!(matches!(first, Ok(Some(_))));
        let second = q.start_execution();
        assert!(second.is_err_and(|e| e.message.contains("concurrent_executions")));
        drop(first);
        assert!(q.start_execution().is_ok());
    }

    #[test]
    fn workspace_writes_count_what_they_replace() {
        let q = quota(|c| c.workspace_bytes = Some(100));
        assert!(q.check_write(90, 50, 60).is_ok());
        assert!(q.check_write(90, 0, 11).is_err());
        assert_eq!(q.disk_allowance(40), Some(1 << 20));
        let big = quota(|c| c.workspace_bytes = Some(10 << 20));
        assert_eq!(big.disk_allowance(2 << 20), Some(8 << 20));
        assert_eq!(quota(|_| {}).disk_allowance(5), None);
    }
}
