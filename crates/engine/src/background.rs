//! Work nobody waits for, done below everything else: preparing the pool's
//! next interpreter (its cgroup, the fork and its hand-shake) and clearing
//! up a used one (its cgroup). It runs on one thread, `cem-prepare`, that
//! sits in the background cpu group with the zygote (see
//! [`cem_sandbox::CpuPriority`]), so it takes only CPU that the requests
//! being answered leave idle. Without that group the work goes to tokio's
//! blocking pool, as everything else.

use std::sync::{OnceLock, mpsc};

type Job = Box<dyn FnOnce() + Send>;

/// The background thread's queue, started on first use; `None` when the
/// host has no background cpu group.
fn queue() -> Option<&'static mpsc::Sender<Job>> {
    static QUEUE: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let cpu = cem_sandbox::CpuPriority::get().ok()?;
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("cem-prepare".into())
                .spawn(move || {
                    if let Err(e) = cpu.join_background_thread() {
                        tracing::warn!(error = %e, "preparation runs at full CPU priority");
                    }
                    for job in rx {
                        job();
                    }
                })
                .ok()?;
            Some(tx)
        })
        .as_ref()
}

/// Runs `f` (blocking) on the background thread, or on tokio's blocking
/// pool where there is none, and gives back what it returns.
pub async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    let job = match queue() {
        Some(queue) => match queue.send(job) {
            Ok(()) => None,
            // The thread is gone: the job comes back, and runs in the pool.
            Err(mpsc::SendError(job)) => Some(job),
        },
        None => Some(job),
    };
    if let Some(job) = job {
        tokio::task::spawn_blocking(job)
            .await
            .map_err(|e| format!("a blocking task failed: {e}"))?;
    }
    rx.await
        .map_err(|_| "the background task ended without an answer".to_string())
}
