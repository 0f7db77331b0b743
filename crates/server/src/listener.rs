//! The HTTP listener: accepts connections and serves the router over
//! HTTP/1.1 with hyper directly.
//!
//! It exists because `axum::serve` sets none of the limits a listener needs
//! before any request on a connection is authenticated: no header timeout,
//! no body deadline, no idle timeout and no connection cap. Slow headers
//! held a connection for as long as the client liked, and 1,100 idle
//! connections used up the server's 1,024 descriptors, so tenants' own
//! requests (and the sandboxes, upstream processes and store connections
//! they need) failed. Here:
//!
//! - the connection cap, in all and per peer address, is decided at accept:
//!   over it the socket is closed at once, counted, and logged at most once
//!   every [`REFUSAL_LOG_INTERVAL`];
//! - a connection with no request under way that sends no byte for
//!   `idle_timeout` is closed; once a request's first byte has come, its
//!   headers must arrive within `header_timeout`, and its headers and body
//!   within `request_timeout` (the answer may stream for as long as it
//!   takes: MCP's SSE streams and long executions are answers);
//! - the open-file limit is raised to its hard limit at start, and the
//!   default cap leaves a reserve of descriptors for the server's own work.
//!
//! TCP_NODELAY and graceful shutdown are as `axum::serve` did them: on
//! shutdown the listener stops accepting, each connection finishes the
//! request it is serving, and serving returns when all are closed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service;

/// Refused connections are logged at most this often (with the count since
/// the last line), so a flood of them cannot flood the log too.
pub(crate) const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Descriptors kept for the server's own work when the connection cap is
/// not configured: a quarter of the open-file limit, at least this many.
const MIN_RESERVE: u64 = 256;

/// The fewest connections the default cap allows, however low the limit.
const MIN_DEFAULT_CONNECTIONS: u64 = 16;

/// What one connection may do, from the `http` config section.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub header_timeout: Duration,
    pub request_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// 0: no per-peer cap.
    pub max_per_peer: usize,
}

impl Limits {
    /// The limits `config` sets, with the default connection cap taken
    /// from `open_files` (the open-file limit in force).
    pub fn new(config: &cem_config::HttpConfig, open_files: u64) -> Self {
        let available = default_max_connections(open_files);
        let max_connections = match config.max_connections {
            Some(n) => {
                if n > available {
                    tracing::warn!(
                        max_connections = n,
                        open_files,
                        "http.max_connections leaves fewer than a quarter of the open-file limit \
                         (or 256) for sandboxes, upstream servers and the store; under a flood of \
                         connections those may fail to open files. Lower it, or raise the hard \
                         open-file limit (ulimit -Hn, LimitNOFILE=)"
                    );
                }
                n
            }
            None => available,
        };
        Limits {
            header_timeout: Duration::from_secs(config.header_timeout_seconds),
            request_timeout: Duration::from_secs(config.request_timeout_seconds),
            idle_timeout: Duration::from_secs(config.idle_timeout_seconds),
            max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
            max_per_peer: usize::try_from(config.max_connections_per_peer).unwrap_or(usize::MAX),
        }
    }
}

/// The default connection cap: the open-file limit less a reserve (a
/// quarter of it, at least [`MIN_RESERVE`]) for sandboxes, upstream
/// processes, the store and the server's own files.
pub(crate) fn default_max_connections(open_files: u64) -> u64 {
    let reserve = (open_files / 4).max(MIN_RESERVE);
    open_files
        .saturating_sub(reserve)
        .max(MIN_DEFAULT_CONNECTIONS)
}

/// Raises the soft open-file limit to the hard one (the most a process may
/// raise it to without privilege) and answers the soft limit in force.
pub(crate) fn raise_open_files() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        // Linux's usual default; the cap is only as good as this guess.
        return 1024;
    };
    if soft >= hard {
        tracing::info!(
            open_files = soft,
            "the open-file limit is its hard limit already"
        );
        return soft;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            tracing::info!(
                from = soft,
                to = hard,
                "raised the open-file limit to its hard limit, for connections and the server's own work"
            );
            hard
        }
        Err(e) => {
            tracing::warn!(
                open_files = soft,
                hard,
                error = %e,
                "cannot raise the open-file limit to its hard limit; the connection cap is set from the lower one"
            );
            soft
        }
    }
}

/// Why a request body was cut: it did not arrive within the request
/// deadline.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request did not arrive within {} s of its first byte (http.request_timeout_seconds)",
    .0.as_secs()
)]
pub(crate) struct RequestTimeout(pub Duration);

/// Whether `error` (or what caused it) is a [`RequestTimeout`]: the guard
/// answers those 408 rather than as a body too large.
pub(crate) fn request_timed_out(error: &(dyn std::error::Error + 'static)) -> Option<Duration> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(t) = e.downcast_ref::<RequestTimeout>() {
            return Some(t.0);
        }
        cause = e.source();
    }
    None
}

/// Serves `router` on `listener` until `shutdown`, then waits for open
/// connections to finish what they are serving.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let gate = Arc::new(Gate::new(&limits));
    let limits = Arc::new(limits);
    let tracker = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // Over the cap the socket is closed before anything is read from
        // it or any task is made for it: refusing costs one accept.
        let Some(slot) = gate.admit(peer) else {
            drop(stream);
            continue;
        };
        // Without TCP_NODELAY, an answer written in pieces (headers, then a
        // streamed body, as a relayed answer is) waits on the peer's
        // delayed ACK: about 40 ms a call.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        tracker.spawn(connection(
            stream,
            slot,
            router.clone(),
            limits.clone(),
            shutdown.clone(),
        ));
    }
    drop(listener);
    tracker.close();
    tracker.wait().await;
}

/// As `axum::serve` handled an accept error: a connection that failed
/// before it was accepted is nothing; anything else (out of descriptors)
/// is logged and accepting pauses a second, so the loop does not spin.
async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "cannot accept a connection; trying again in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Serves one connection until it closes, times out or the server stops.
async fn connection(
    stream: TcpStream,
    _slot: Slot,
    router: Router,
    limits: Arc<Limits>,
    shutdown: CancellationToken,
) {
    let watch = Arc::new(Watch::new());
    let io = TokioIo::new(Heard {
        inner: stream,
        watch: watch.clone(),
    });
    let service = {
        let (watch, timeout) = (watch.clone(), limits.request_timeout);
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let mut router = router.clone();
            let watch = watch.clone();
            async move {
                let deadline = watch.begin(timeout);
                let request = request.map(|body| Deadline::new(body, deadline, timeout));
                let response = match router.call(request).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                };
                Ok::<_, Infallible>(response.map(|body| Finish { inner: body, watch }))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // hyper's own header timer runs from the moment it waits for a
    // request, with no regard for when its first byte came: set to the
    // idle and header timeouts together, it only backs up the watch below,
    // which holds each to its own start.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout + limits.header_timeout)
        .keep_alive(true);
    let mut conn = pin!(builder.serve_connection(io, service));
    let mut stopping = false;
    loop {
        let due = watch.due(&limits);
        let expiry = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::trace!(error = %e, "a connection ended with an error");
                }
                break;
            }
            () = shutdown.cancelled(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            () = watch.changed.notified() => {}
            () = expiry => {
                // Closed by dropping it: no request is under way, so
                // there is nobody to answer.
                if watch.due(&limits).is_some_and(|at| at <= Instant::now()) {
                    break;
                }
            }
        }
    }
}

/// Where one connection is: waiting for a request, or serving one.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// No request under way since `since` (the accept, or the end of the
    /// last answer); `first`: when a byte of the next one came.
    Waiting {
        since: Instant,
        first: Option<Instant>,
    },
    /// A request's headers came; its answer is not done.
    Serving,
}

/// One connection's phase, shared by its reads, its service and its task.
struct Watch {
    phase: Mutex<Phase>,
    /// Whether a byte came in this wait (so reads take the lock only for
    /// the first one).
    heard: AtomicBool,
    /// Wakes the connection's task to look at the phase again.
    changed: Notify,
}

impl Watch {
    fn new() -> Self {
        Watch {
            phase: Mutex::new(Phase::Waiting {
                since: Instant::now(),
                first: None,
            }),
            heard: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        // The phase is a plain value: one a panicking holder left is
        // still a phase.
        self.phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A read brought bytes.
    fn heard(&self) {
        if self.heard.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Phase::Waiting { first, .. } = &mut *self.phase()
            && first.is_none()
        {
            *first = Some(Instant::now());
        }
        self.changed.notify_one();
    }

    /// A request's headers came: answers when its body must be in by.
    fn begin(&self, timeout: Duration) -> Instant {
        let mut phase = self.phase();
        let start = match *phase {
            Phase::Waiting { since, first } => first.unwrap_or(since),
            Phase::Serving => Instant::now(),
        };
        *phase = Phase::Serving;
        drop(phase);
        self.changed.notify_one();
        start + timeout
    }

    /// The answer is done (its body sent, or dropped): the wait for the
    /// next request begins.
    fn done(&self) {
        *self.phase() = Phase::Waiting {
            since: Instant::now(),
            first: None,
        };
        self.heard.store(false, Ordering::Relaxed);
        self.changed.notify_one();
    }

    /// When the connection is to be closed if nothing changes: its idle
    /// timeout, or its header timeout once a request began; None while a
    /// request is served.
    fn due(&self, limits: &Limits) -> Option<Instant> {
        match *self.phase() {
            Phase::Waiting { since, first: None } => Some(since + limits.idle_timeout),
            Phase::Waiting {
                first: Some(first), ..
            } => Some(first + limits.header_timeout),
            Phase::Serving => None,
        }
    }
}

/// The connection's socket, telling its [`Watch`] when bytes come.
struct Heard {
    inner: TcpStream,
    watch: Arc<Watch>,
}

impl AsyncRead for Heard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.heard();
        }
        polled
    }
}

impl AsyncWrite for Heard {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body that fails with [`RequestTimeout`] once its deadline
/// passes, so a body sent slowly (or without end) is cut there.
struct Deadline {
    inner: Incoming,
    timer: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl Deadline {
    fn new(inner: Incoming, deadline: Instant, timeout: Duration) -> Self {
        Deadline {
            inner,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            timeout,
        }
    }
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        // A frame already here is read even at the deadline; past it,
        // waiting for the next one is not.
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(RequestTimeout(self.timeout).into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An answer's body that tells the connection's [`Watch`] when it is done
/// (hyper drops it once the last frame is written, or the connection goes).
struct Finish {
    inner: Body,
    watch: Arc<Watch>,
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.watch.done();
    }
}

impl HttpBody for Finish {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The connections held, in all and per peer address: admits or refuses
/// at accept.
struct Gate {
    max_total: usize,
    max_per_peer: usize,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
    /// Refused since the last log line: over the total cap, over a peer's.
    refused_total: u64,
    refused_peer: u64,
    /// The peer refused last (named in the log line).
    last_refused: Option<IpAddr>,
    logged: Option<Instant>,
}

impl Gate {
    fn new(limits: &Limits) -> Self {
        Gate {
            max_total: limits.max_connections,
            max_per_peer: limits.max_per_peer,
            held: Mutex::new(Held::default()),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        // Counts only: one a panicking holder left is still counts.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A slot for a connection from `peer`, or None (counted, and logged
    /// now and then) when it is over a cap.
    fn admit(self: &Arc<Self>, peer: SocketAddr) -> Option<Slot> {
        let ip = peer.ip().to_canonical();
        let mut held = self.held();
        let of_peer = held.by_peer.get(&ip).copied().unwrap_or(0);
        let over = if held.total >= self.max_total {
            Some("total")
        } else if self.max_per_peer != 0 && of_peer >= self.max_per_peer {
            Some("per_peer")
        } else {
            None
        };
        if let Some(cap) = over {
            if cap == "total" {
                held.refused_total += 1;
            } else {
                held.refused_peer += 1;
            }
            held.last_refused = Some(ip);
            self.log_refusals(&mut held);
            drop(held);
            cem_metrics::metrics().http_connection_refused(cap);
            return None;
        }
        held.total += 1;
        *held.by_peer.entry(ip).or_insert(0) += 1;
        let total = held.total;
        drop(held);
        cem_metrics::metrics().http_connections(total);
        Some(Slot {
            gate: self.clone(),
            peer: ip,
        })
    }

    /// One line for the refusals since the last, if that was long enough
    /// ago.
    fn log_refusals(&self, held: &mut Held) {
        let now = Instant::now();
        if held
            .logged
            .is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_INTERVAL)
        {
            return;
        }
        tracing::warn!(
            over_total_cap = held.refused_total,
            over_peer_cap = held.refused_peer,
            max_connections = self.max_total,
            max_connections_per_peer = self.max_per_peer,
            last_peer = ?held.last_refused,
            "refused connections over the cap (counted since the last such line); if these are \
             real clients, raise http.max_connections or http.max_connections_per_peer (behind a \
             proxy every client is the proxy's address)"
        );
        held.refused_total = 0;
        held.refused_peer = 0;
        held.logged = Some(now);
    }
}

/// One admitted connection's place under the caps, given back on drop.
struct Slot {
    gate: Arc<Gate>,
    peer: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.gate.held();
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                held.by_peer.remove(&self.peer);
            }
        }
        let total = held.total;
        drop(held);
        cem_metrics::metrics().http_connections(total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_keeps_a_reserve_of_descriptors() {
        // A quarter, at least 256.
        assert_eq!(default_max_connections(1024), 768);
        assert_eq!(default_max_connections(20_000), 15_000);
        assert_eq!(default_max_connections(1 << 20), 786_432);
        assert_eq!(default_max_connections(512), 256);
        // Never none at all.
        assert_eq!(default_max_connections(100), MIN_DEFAULT_CONNECTIONS);
    }

    fn limits(total: usize, per_peer: usize) -> Limits {
        Limits {
            header_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            max_connections: total,
            max_per_peer: per_peer,
        }
    }

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), 40_000)
    }

    #[test]
    fn the_gate_holds_each_cap_and_gives_slots_back() {
        let gate = Arc::new(Gate::new(&limits(3, 2)));
        let a1 = gate.admit(peer("127.0.0.2"));
        let a2 = gate.admit(peer("127.0.0.2"));
        assert!(a1.is_some() && a2.is_some());
        // The third from one peer is over its cap; another peer gets in.
        assert!(gate.admit(peer("127.0.0.2")).is_none());
        let b1 = gate.admit(peer("127.0.0.1"));
        assert!(b1.is_some());
        // Now the total is full, for every peer.
        assert!(gate.admit(peer("127.0.0.3")).is_none());
        drop(a1);
        assert!(gate.admit(peer("127.0.0.3")).is_some());
        drop((a2, b1));
        assert_eq!(gate.held().total, 0);
        assert!(gate.held().by_peer.is_empty());
        // An IPv4 peer seen through an IPv6 socket is the same peer.
        let v4 = gate.admit(peer("127.0.0.9"));
        let mapped = gate.admit(peer("::ffff:127.0.0.9"));
        assert!(v4.is_some() && mapped.is_some());
        assert!(gate.admit(peer("127.0.0.9")).is_none());
    }

    #[test]
    fn no_per_peer_cap_is_zero() {
        let gate = Arc::new(Gate::new(&limits(5, 0)));
        let slots: Vec<_> = (0..5)
            .filter_map(|_| gate.admit(peer("10.1.2.3")))
            .collect();
        assert_eq!(slots.len(), 5);
        assert!(gate.admit(peer("10.1.2.3")).is_none());
    }

    #[test]
    fn a_timeout_is_found_among_the_causes() {
        let cut = RequestTimeout(Duration::from_secs(7));
        let wrapped = axum::Error::new(axum::Error::new(cut));
        assert_eq!(request_timed_out(&wrapped), Some(Duration::from_secs(7)));
        let other = io::Error::other("reset");
        assert_eq!(request_timed_out(&other), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_watch_times_idle_and_headers_from_their_own_start() {
        let l = Limits {
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(30),
            max_connections: 1,
            max_per_peer: 0,
        };
        let w = Watch::new();
        let start = Instant::now();
        assert_eq!(w.due(&l), Some(start + l.idle_timeout));
        tokio::time::advance(Duration::from_secs(25)).await;
        w.heard();
        // The first byte starts the header timeout, from its own time.
        assert_eq!(w.due(&l), Some(start + Duration::from_secs(35)));
        tokio::time::advance(Duration::from_secs(2)).await;
        // The body's deadline counts from the first byte too.
        assert_eq!(w.begin(l.request_timeout), start + Duration::from_secs(85));
        assert_eq!(w.due(&l), None);
        tokio::time::advance(Duration::from_secs(100)).await;
        w.done();
        assert_eq!(w.due(&l), Some(Instant::now() + l.idle_timeout));
    }
}
