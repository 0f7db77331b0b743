//! The stdio transport to an upstream server: rmcp's line transport over a
//! child's pipes, with a watch on line sizes. rmcp drops a line over its
//! limit and only logs it, which would leave the call that waits for that
//! answer hanging until its timeout; the watch lets the manager fail the
//! calls in flight at once, with advice.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::watch;

/// The largest message accepted from a stdio upstream.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// How long a server may take to exit after its stdin closes.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How long it may take after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(1);

/// A child process speaking MCP on its stdin and stdout, leading its own
/// process group (the command is spawned with `process_group(0)`), so that
/// what it starts (`npx` starts node, node may start a browser) is stopped
/// with it. Dropping it unclosed kills the whole group.
pub struct ChildTransport {
    child: Child,
    /// Its manager's children, which it leaves when stopped.
    children: Children,
    /// The process group: the child's pid while it has not been reaped.
    group: Option<Pid>,
    inner: AsyncRwTransport<RoleClient, Watched, ChildStdin>,
}

/// Sends `signal` to every process of `group` (gone already is fine).
fn signal_group(group: Pid, signal: Signal) {
    let _ = killpg(group, signal);
}

/// The process groups of one manager's children not yet stopped, for
/// [`Children::stop_all`]: a server still in its handshake when we exit is
/// held by a future that may never be dropped.
#[derive(Clone, Default)]
pub struct Children(Arc<std::sync::Mutex<std::collections::BTreeSet<i32>>>);

impl Children {
    fn mark(&self, group: Pid, alive: bool) {
        if let Ok(mut live) = self.0.lock() {
            if alive {
                live.insert(group.as_raw());
            } else {
                live.remove(&group.as_raw());
            }
        }
    }

    /// Stops every child still running (SIGTERM to its group, SIGKILL after
    /// a grace): what [`crate::Manager::shutdown`] does after closing its
    /// connections, for servers that never finished starting.
    pub async fn stop_all(&self) {
        let groups: Vec<Pid> = self
            .0
            .lock()
            .map(|l| l.iter().map(|g| Pid::from_raw(*g)).collect())
            .unwrap_or_default();
        if groups.is_empty() {
            return;
        }
        terminate(&groups).await;
        for group in groups {
            self.mark(group, false);
        }
    }
}

/// SIGTERM to every process of `groups`, then SIGKILL to whatever still
/// runs in them after [`TERM_GRACE`] (an exited but unreaped leader does
/// not count).
async fn terminate(groups: &[Pid]) {
    for group in groups {
        signal_group(*group, Signal::SIGTERM);
    }
    let all_gone = async {
        for group in groups {
            wait_group(*group).await;
        }
    };
    if tokio::time::timeout(TERM_GRACE, all_gone).await.is_err() {
        for group in groups {
            signal_group(*group, Signal::SIGKILL);
        }
    }
}

impl ChildTransport {
    /// Wraps a child spawned with piped stdin and stdout; `oversized` is
    /// bumped each time a message over [`MAX_MESSAGE_BYTES`] starts arriving.
    pub fn new(
        mut child: Child,
        oversized: watch::Sender<u64>,
        children: Children,
    ) -> std::io::Result<Self> {
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(std::io::Error::other(
                "the child's stdin or stdout is not piped",
            ));
        };
        let watched = Watched {
            inner: stdout,
            lines: LineWatch {
                line: 0,
                flagged: false,
                oversized,
            },
        };
        let inner = AsyncRwTransport::new(watched, stdin).with_max_line_length(MAX_MESSAGE_BYTES);
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        if let Some(group) = group {
            children.mark(group, true);
        }
        Ok(Self {
            child,
            children,
            group,
            inner,
        })
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Closing takes the writer, which a request being written holds: one
        // blocked on a server that stopped reading its input would hold it
        // for ever. Bounded, the signals below unblock that write.
        let closed = tokio::time::timeout(EXIT_GRACE, self.inner.close()).await;
        let input_closed = closed.is_ok();
        let closed = closed.unwrap_or(Ok(()));
        // The end of its stdin asks the server to exit; one that ignores it
        // gets SIGTERM, then SIGKILL. Either way the rest of its group (what
        // it started and left behind) gets SIGTERM, while the group id is
        // still certainly ours: the leader is reaped only at the end.
        let Some(group) = self.group else {
            return closed;
        };
        if input_closed {
            let _ = tokio::time::timeout(EXIT_GRACE, wait_exit(&mut self.child)).await;
        }
        // Whatever still runs in the group after the grace (the server, or
        // a child of a server that exited on its own) is killed.
        terminate(&[group]).await;
        let _ = self.child.wait().await;
        self.children.mark(group, false);
        self.group = None;
        closed
    }
}

impl Drop for ChildTransport {
    fn drop(&mut self) {
        // Not closed (the connection task was aborted): nothing to wait for.
        if let Some(group) = self.group {
            signal_group(group, Signal::SIGKILL);
            self.children.mark(group, false);
        }
    }
}

/// Resolves when the child has exited, without reaping it (so its pid, and
/// with it the process group's id, stays reserved).
async fn wait_exit(child: &mut Child) {
    let Some(pid) = child.id() else { return };
    let pid = Pid::from_raw(pid as i32);
    loop {
        let options = WaitPidFlag::WNOHANG | WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(pid), options) {
            Ok(WaitStatus::StillAlive) => tokio::time::sleep(Duration::from_millis(20)).await,
            _ => return,
        }
    }
}

/// Resolves when no process of `group` runs any more (its exited leader,
/// not reaped yet, does not count).
async fn wait_group(group: Pid) {
    while group_runs(group) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a process of `group` is running (not a zombie), from `/proc`.
/// Without `/proc` to tell, it is assumed to run: the caller then kills the
/// group after its grace.
fn group_runs(group: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            return false;
        }
        // Fields after the command (which may hold spaces and parentheses):
        // state, ppid, pgrp.
        std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|stat| {
            let mut fields = stat
                .rsplit_once(')')
                .map_or("", |(_, rest)| rest)
                .split_whitespace();
            let state = fields.next();
            let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
            pgrp == Some(group.as_raw()) && state != Some("Z") && state != Some("X")
        })
    })
}

/// The child's stdout, counting the bytes of the line being read.
pub struct Watched {
    inner: ChildStdout,
    lines: LineWatch,
}

struct LineWatch {
    /// Bytes of the current line so far.
    line: usize,
    /// Whether the current line was already reported.
    flagged: bool,
    oversized: watch::Sender<u64>,
}

impl LineWatch {
    fn observe(&mut self, bytes: &[u8]) {
        match bytes.iter().rposition(|&b| b == b'\n') {
            Some(last) => {
                let first = bytes.iter().position(|&b| b == b'\n').unwrap_or(last);
                // rmcp refuses a line when it and its newline exceed the limit.
                self.check(self.line + first + 1);
                self.line = bytes.len() - last - 1;
                self.flagged = false;
            }
            None => self.line += bytes.len(),
        }
        self.check(self.line);
    }

    fn check(&mut self, length: usize) {
        if length > MAX_MESSAGE_BYTES && !self.flagged {
            self.flagged = true;
            self.oversized.send_modify(|n| *n += 1);
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.lines.observe(&buf.filled()[before..]);
        }
        polled
    }
}
