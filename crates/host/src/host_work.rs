//! Blocking work the host does for a tenant: PII detection for code,
//! workspace reads, writes and walks, skill store reads. It runs on
//! tokio's blocking threads, which the runtime grows on demand (up to 512):
//! unbounded, one tenant's flood of requests became hundreds of threads and
//! stalled every other tenant.
//!
//! Each tenant runs at most [`PER_TENANT`] such jobs at once, and the
//! server a bounded number for all tenants (one per core, or more where
//! each job runs at its tenant's cpu weight); both queues are first come,
//! first served, so a tenant waits behind its own backlog, not others'. A
//! job keeps its permits until it ends, even when whoever asked has stopped
//! waiting (an execution that timed out): what runs is always counted.
//!
//! While it runs, the job's thread sits in the tenant's cpu group (when
//! there is one), so what the host does for a tenant weighs on that
//! tenant's share of the CPU, not on every tenant's.

use std::sync::Arc;

use cem_sandbox::CpuPriority;
use tokio::sync::Semaphore;

/// Blocking jobs per core the server runs at once when each runs in its
/// tenant's cpu group.
pub const WEIGHTED_JOBS_PER_CORE: usize = 8;

/// Blocking jobs one tenant may run at once.
pub const PER_TENANT: usize = 1;

/// A tenant's share of the host's blocking threads.
#[derive(Debug, Clone)]
pub struct HostWork {
    tenant: Arc<Semaphore>,
    server: Arc<Semaphore>,
    /// The tenant's cpu group and the server's, to move the job's thread
    /// into and back out of.
    cpu: Option<(&'static CpuPriority, &'static CpuPriority)>,
}

impl HostWork {
    /// The bound every tenant of one server shares. Without cpu groups,
    /// one job per core: a job then takes the CPU from everyone, and a
    /// tenant past its share must wait for a permit. With cpu groups
    /// (`weighted`), each job runs at its tenant's weight, so the kernel
    /// shares the cores and the bound only caps threads: a quiet tenant's
    /// small job starts at once beside two hostile tenants' long ones
    /// instead of queueing behind them.
    pub fn server_bound(weighted: bool) -> Arc<Semaphore> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Arc::new(Semaphore::new(if weighted {
            (cores * WEIGHTED_JOBS_PER_CORE).max(16)
        } else {
            cores
        }))
    }

    /// A new tenant's share of `server`.
    pub fn new(server: Arc<Semaphore>) -> Self {
        Self {
            tenant: Arc::new(Semaphore::new(PER_TENANT)),
            server,
            cpu: None,
        }
    }

    /// The same, its jobs run in `tenant` (the tenant's cpu groups) when
    /// those are not the server's own (else as [`HostWork::new`]).
    pub fn in_group(server: Arc<Semaphore>, tenant: &'static CpuPriority) -> Self {
        let cpu = CpuPriority::get()
            .ok()
            .filter(|server| !std::ptr::eq(tenant, *server))
            .map(|server| (tenant, server));
        Self {
            cpu,
            ..Self::new(server)
        }
    }

    /// The server-wide bound this share draws on (for the next tenant).
    pub fn server(&self) -> Arc<Semaphore> {
        self.server.clone()
    }

    /// Runs `work` on a blocking thread once this tenant and the server
    /// have room, and gives back what it returns.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let closed = |_| "the server is shutting down".to_string();
        let mine = self.tenant.clone().acquire_owned().await.map_err(closed)?;
        let all = self.server.clone().acquire_owned().await.map_err(closed)?;
        let cpu = self.cpu;
        tokio::task::spawn_blocking(move || {
            // A thread that could not move runs at the server's weight. One
            // that moved goes back when the job ends, a panic included
            // (tokio reuses the thread for anyone's blocking work).
            // A lane's thread is in the tenant's group already.
            let _back = cpu
                .filter(|_| !crate::lane::on_lane_thread())
                .filter(|(tenant, _)| tenant.join_thread().is_ok())
                .map(|(_, server)| BackToServer(server));
            let out = work();
            drop((mine, all));
            out
        })
        .await
        .map_err(|e| format!("a host task failed ({e}); retry"))
    }
}

/// Moves the current thread back to the server's cpu group when dropped.
struct BackToServer(&'static CpuPriority);

impl Drop for BackToServer {
    fn drop(&mut self) {
        if let Err(e) = self.0.join_thread() {
            tracing::warn!(error = %e, "a blocking thread stays in a tenant's cpu group");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flooding_tenant_holds_one_thread_and_others_still_run() {
        let server = Arc::new(Semaphore::new(2));
        let flood = HostWork::new(server.clone());
        let quiet = HostWork::new(server);
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let mut jobs = Vec::new();
        for _ in 0..20 {
            let (flood, running, peak) = (flood.clone(), running.clone(), peak.clone());
            jobs.push(tokio::spawn(async move {
                flood
                    .run(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        running.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        // The quiet tenant is served while the flood still has work queued.
        assert_eq!(quiet.run(|| 7).await, Ok(7));
        assert!(
            jobs.iter().any(|j| !j.is_finished()),
            "the flood had drained first"
        );
        for j in jobs {
            assert!(matches!(j.await, Ok(Ok(()))));
        }
        assert_eq!(peak.load(Ordering::SeqCst), PER_TENANT);
    }

    #[tokio::test]
    async fn a_job_keeps_its_permit_after_its_caller_stops_waiting() {
        let work = HostWork::new(Arc::new(Semaphore::new(4)));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let w = work.clone();
        let abandoned = tokio::spawn(async move {
            w.run(move || {
                let _ = started_tx.send(());
                let _ = release_rx.recv();
            })
            .await
        });
        tokio::task::spawn_blocking(move || started_rx.recv())
            .await
            .ok();
        abandoned.abort();
        // Still running: the tenant has no room until it ends.
        assert_eq!(work.tenant.available_permits(), 0);
        let _ = release_tx.send(());
        assert_eq!(work.run(|| 1).await, Ok(1));
    }
}
