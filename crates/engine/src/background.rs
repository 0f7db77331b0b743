//! Work nobody waits for, done below everything else of its tenant:
//! preparing the pool's next interpreter (its cgroup, the fork and its
//! hand-shake), moving it to full priority once ready, and clearing up a
//! used one (its cgroup).
//!
//! Each tenant has its own queue and thread (`cem-prepare`), which sits in
//! that tenant's background cpu group with its zygote (see
//! [`cem_sandbox::CpuPriority::tenant`]): it takes only CPU that the
//! tenant's own executions leave idle, and the tenant's weight against the
//! others. One thread for the whole server, in one low-weight group, was
//! starved by any tenant's busy processes, and queued every tenant's pool
//! behind a fork bomb's clean-up: ordinary executions waited seconds for a
//! sandbox. A thread idle for a minute ends (a server with hundreds of
//! tenants keeps threads only for the active ones) and starts again on use.
//! Where the host has no cpu groups, the work goes to tokio's blocking
//! pool, as everything else.

use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use cem_sandbox::CpuPriority;

type Job = Box<dyn FnOnce() + Send>;

/// How long a tenant's preparation thread waits for work before it ends.
const IDLE: Duration = Duration::from_secs(60);

/// One tenant's background queue; see the module docs.
pub struct Queue {
    /// The tenant's cpu groups; `None`: no background group on this host.
    cpu: Option<&'static CpuPriority>,
    /// The running thread's end of the queue, if one runs.
    sender: Arc<Mutex<Option<mpsc::Sender<Job>>>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("background_group", &self.cpu.is_some())
            .finish()
    }
}

impl Queue {
    /// A queue whose thread runs in `cpu`'s background group.
    pub fn new(cpu: Option<&'static CpuPriority>) -> Arc<Self> {
        Arc::new(Self {
            cpu,
            sender: Arc::new(Mutex::new(None)),
        })
    }

    /// Runs `f` (blocking) on the tenant's background thread, or on tokio's
    /// blocking pool where there is none, and gives back what it returns.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        if let Some(job) = self.send(job) {
            // No background thread: the job came back, and runs in the pool.
            tokio::task::spawn_blocking(job)
                .await
                .map_err(|e| format!("a blocking task failed: {e}"))?;
        }
        rx.await
            .map_err(|_| "the background task ended without an answer".to_string())
    }

    /// Queues `job` for the thread (starting it if none runs); gives the
    /// job back when it cannot.
    fn send(&self, job: Job) -> Option<Job> {
        let cpu = self.cpu?;
        let Ok(mut slot) = self.sender.lock() else {
            return Some(job);
        };
        let job = match slot.as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return None,
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        // No thread, or it ended: start one.
        let (tx, rx) = mpsc::channel::<Job>();
        let slot_of_thread = self.sender.clone();
        let spawned = std::thread::Builder::new()
            .name("cem-prepare".into())
            .spawn(move || work(cpu, rx, slot_of_thread));
        if spawned.is_err() {
            *slot = None;
            return Some(job);
        }
        let sent = tx.send(job);
        *slot = Some(tx);
        sent.err().map(|mpsc::SendError(job)| job)
    }
}

/// The thread: joins the background group, runs jobs in order, and ends
/// after [`IDLE`] without any (taking its sender out of the slot first, so
/// nothing more is queued to it).
fn work(
    cpu: &'static CpuPriority,
    rx: mpsc::Receiver<Job>,
    slot: Arc<Mutex<Option<mpsc::Sender<Job>>>>,
) {
    if let Err(e) = cpu.join_background_thread() {
        tracing::warn!(error = %e, "preparation runs at full CPU priority");
    }
    loop {
        match rx.recv_timeout(IDLE) {
            Ok(job) => job(),
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Ok(mut s) = slot.lock() {
                    *s = None;
                }
                // Whatever was queued before the slot emptied still runs.
                while let Ok(job) = rx.try_recv() {
                    job();
                }
                return;
            }
        }
    }
}
