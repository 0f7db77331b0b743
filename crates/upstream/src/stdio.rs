//! The stdio transport to an upstream server: newline-delimited JSON-RPC
//! over a child's pipes. Messages out go through rmcp's writer; messages in
//! are read here, for two reasons. rmcp drops a line over its limit and
//! only logs it, which would leave the call that waits for that answer
//! hanging until its timeout: here an oversized line bumps a watch that
//! lets the manager fail the calls in flight at once, with advice. And
//! rmcp keeps its line buffer at the size of the largest message it ever
//! read: a tenant whose code pulled 15 MB results held 32 MB per upstream
//! connection for the rest of the run; here a buffer grown past
//! [`KEEP_BUFFER_BYTES`] is given back after its message.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::watch;

/// The largest message accepted from a stdio upstream.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// The line buffer's capacity kept between messages; one grown past it by
/// a large message is freed once that message is parsed.
pub const KEEP_BUFFER_BYTES: usize = 1 << 20;

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
    /// rmcp's transport, used only to write (its reader reads nothing).
    inner: AsyncRwTransport<RoleClient, tokio::io::Empty, ChildStdin>,
    lines: LineReader,
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
        let inner = AsyncRwTransport::new(tokio::io::empty(), stdin);
        let lines = LineReader {
            read: BufReader::new(stdout),
            line: Vec::new(),
            discarding: false,
            oversized,
        };
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
            lines,
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
        self.lines.next_message()
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

/// Reads the child's stdout a line at a time, each line one message.
struct LineReader {
    read: BufReader<ChildStdout>,
    /// The line read so far. It survives a cancelled read (rmcp polls
    /// `receive` inside a `select!`): the next call resumes the same line.
    line: Vec<u8>,
    /// Dropping the rest of a line over [`MAX_MESSAGE_BYTES`].
    discarding: bool,
    oversized: watch::Sender<u64>,
}

impl LineReader {
    /// The next message; None when the child closed its output (or it
    /// cannot be read). Lines that are not a message are skipped, as the
    /// official SDKs do: empty lines, text that is not JSON (a server that
    /// prints to stdout), JSON of another shape, and an oversized line,
    /// which is reported to the watch.
    async fn next_message(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            if !self.next_line().await? {
                continue;
            }
            let parsed = {
                let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
                (!line.is_empty()).then(|| serde_json::from_slice(line))
            };
            self.line.clear();
            if self.line.capacity() > KEEP_BUFFER_BYTES {
                self.line = Vec::new();
            }
            match parsed {
                Some(Ok(message)) => return Some(message),
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "skipping a line that is not a message")
                }
                None => {}
            }
        }
    }

    /// Reads up to the next newline into `self.line`, never past
    /// [`MAX_MESSAGE_BYTES`]: Some(true) for a whole line, Some(false) for
    /// an oversized one (dropped), None at the end of the output. Cancel
    /// safe: between `fill_buf` and `consume` nothing awaits.
    async fn next_line(&mut self) -> Option<bool> {
        loop {
            let available = match self.read.fill_buf().await {
                Ok([]) => return None,
                Ok(available) => available,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read the server's output");
                    return None;
                }
            };
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let mut outcome = None;
            if self.discarding {
                self.discarding = newline.is_none();
            } else if self.line.len().saturating_add(take) > MAX_MESSAGE_BYTES {
                self.line = Vec::new();
                self.discarding = newline.is_none();
                self.oversized.send_modify(|n| *n += 1);
                outcome = Some(false);
            } else {
                self.line.extend_from_slice(&available[..take]);
                if newline.is_some() {
                    outcome = Some(true);
                }
            }
            self.read.consume(take);
            if let Some(whole) = outcome {
                return Some(whole);
            }
        }
    }
}
