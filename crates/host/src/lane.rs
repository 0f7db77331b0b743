//! A tenant's own async workers: where everything the server does for one
//! tenant's tool call runs, weighed on that tenant's share of the CPU.
//!
//! Without lanes every tenant's calls shared the server's async workers
//! (one per core). A tenant whose code pulled 15 MB tool results in a loop
//! kept those workers decoding its upstream's messages, copying and
//! serialising them for its sandbox: every other tenant's request waited
//! for a free worker, and the work ran at the server's weight, outside any
//! tenant's cpu group. With a lane, a tenant's call (the dispatch, its
//! execution's exchange with the sandbox, the upstream connections it
//! opens and the messages they decode, the blocking work it starts) runs
//! on the tenant's own workers, whose threads sit in its cpu group from
//! the start. The server's workers only parse requests and hand them on,
//! and the kernel shares the cores between tenants by weight.
//!
//! A lane lives as long as its tenant (the whole run of the server): what
//! a call opens on it (an upstream's pipes, a pooled store connection)
//! stays served by its I/O driver for as long as anything uses it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use cem_sandbox::CpuPriority;
use tracing::Instrument;

/// Async worker threads per tenant: two, so one request of a tenant that
/// decodes a huge message does not hold up that tenant's next one. More
/// threads give a tenant no more CPU: its cpu group's weight decides that.
const WORKERS: usize = 2;

std::thread_local! {
    /// Whether this thread is a lane's (it lives in its tenant's cpu group
    /// already: host work started on it needs no move).
    static ON_LANE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread belongs to a lane.
pub fn on_lane_thread() -> bool {
    ON_LANE.with(std::cell::Cell::get)
}

/// One tenant's async workers.
pub struct Lane {
    /// Taken only by `Drop` (a runtime must not be dropped where async code
    /// runs: it is shut down in the background instead).
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lane")
    }
}

/// Why a lane could not be made or could not finish a call.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    #[error("cannot start the tenant's workers: {0}")]
    Start(std::io::Error),
    #[error("the call's task on the tenant's workers failed ({0}); retry")]
    Failed(String),
}

impl Lane {
    /// Starts the workers of tenant `name` (only used in thread names, so
    /// give it no secret), their threads in `cpu` (the tenant's cpu group)
    /// when there is one: a thread that cannot move says so and runs at the
    /// server's weight.
    pub fn new(name: &str, cpu: Option<&'static CpuPriority>) -> Result<Self, LaneError> {
        let digest = cem_config::tenant_digest(name);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .thread_name(format!("tenant-{}", &digest[..digest.len().min(8)]))
            .on_thread_start(move || {
                ON_LANE.with(|on| on.set(true));
                if let Some(cpu) = cpu
                    && let Err(e) = cpu.join_thread()
                {
                    tracing::warn!(error = %e, "a tenant's worker runs at the server's cpu weight");
                }
            })
            .enable_all()
            .build()
            .map_err(LaneError::Start)?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// Runs `work` on the lane and gives back its output. Dropping the
    /// returned future (a cancelled request) aborts the work, as if it had
    /// run in place. The caller's tracing span goes with it.
    pub async fn run<F>(&self, work: F) -> Result<F::Output, LaneError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let Some(runtime) = &self.runtime else {
            return Err(LaneError::Failed("the tenant's workers are stopped".into()));
        };
        let task = AbortOnDrop(runtime.spawn(work.instrument(tracing::Span::current())));
        task.await.map_err(|e| LaneError::Failed(e.to_string()))
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A task aborted when whoever awaits it stops waiting.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn work_runs_on_the_lane_and_its_answer_comes_back() {
        let Ok(lane) = Lane::new("someone", None) else {
            panic!("no lane");
        };
        assert!(!on_lane_thread());
        let answer = lane
            .run(async {
                (
                    on_lane_thread(),
                    std::thread::current().name().map(str::to_string),
                )
            })
            .await;
        let Ok((true, Some(name))) = answer else {
            panic!("not run on a named lane thread: {answer:?}");
        };
        // The thread is named by the tenant's digest, not its id.
        assert!(
            name.starts_with("tenant-") && !name.contains("someone"),
            "{name}"
        );
        // Blocking work started there is on the lane too.
        let blocking = lane
            .run(async { tokio::task::spawn_blocking(on_lane_thread).await })
            .await;
        assert!(matches!(blocking, Ok(Ok(true))), "{blocking:?}");
    }

    #[tokio::test]
    async fn dropping_the_call_aborts_its_work() {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let Ok(lane) = Lane::new("someone", None) else {
            panic!("no lane");
        };
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = Flag(dropped.clone());
        let call = lane.run(async move {
            let _flag = flag;
            tokio::time::sleep(Duration::from_secs(3600)).await;
        });
        // Started, then given up.
        assert!(
            tokio::time::timeout(Duration::from_millis(100), call)
                .await
                .is_err()
        );
        // Polled for long enough that a loaded machine does not fail it; it
        // ends as soon as the work is dropped.
        for _ in 0..3000 {
            if dropped.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the work still runs after its caller gave up");
    }
}
