//! MCP over stdin/stdout.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::sync::Arc;

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use crate::{McpHandler, ServeError};
use cem_host::AppState;

/// Serves one MCP session on stdin/stdout until the client closes stdin or
/// `shutdown` is cancelled. Nothing but protocol messages goes to stdout.
pub async fn serve_stdio(
    state: Arc<AppState>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let handler = McpHandler::new(state);
    let running = handler
        .serve(streams())
        .await
        .map_err(|e| ServeError::Mcp(e.to_string()))?;
    let cancel = running.cancellation_token();
    tokio::select! {
        outcome = running.waiting() => {
            outcome.map_err(|e| ServeError::Mcp(e.to_string()))?;
        }
        () = shutdown.cancelled() => {
            cancel.cancel();
        }
    }
    Ok(())
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// stdin and stdout for the transport. Read and written in place when they
/// are pipes or stream sockets (how every MCP client starts a server):
/// tokio's own stdin and stdout do each read and write on a blocking
/// thread, two hand-offs per message that cost more than the message.
/// Anything else (a terminal, a file) goes through tokio's, which works
/// with any descriptor.
fn streams() -> (Reader, Writer) {
    let reader = in_place(0).and_then(|kind| match kind {
        // A pipe is opened again through /proc: a description of our own,
        // so making it non-blocking touches no other process's.
        Kind::Pipe => tokio::net::unix::pipe::OpenOptions::new()
            .open_receiver("/proc/self/fd/0")
            .ok()
            .map(|r| Box::new(r) as Reader),
        Kind::Socket(fd) => socket(fd).map(|s| Box::new(s) as Reader),
    });
    let writer = in_place(1).and_then(|kind| match kind {
        Kind::Pipe => tokio::net::unix::pipe::OpenOptions::new()
            .open_sender("/proc/self/fd/1")
            .ok()
            .map(|w| Box::new(w) as Writer),
        Kind::Socket(fd) => socket(fd).map(|s| Box::new(s) as Writer),
    });
    (
        reader.unwrap_or_else(|| Box::new(tokio::io::stdin())),
        writer.unwrap_or_else(|| Box::new(tokio::io::stdout())),
    )
}

/// What a standard descriptor is, when it can be used in place.
enum Kind {
    Pipe,
    /// A stream socket, and a duplicate of its descriptor.
    Socket(OwnedFd),
}

fn in_place(fd: i32) -> Option<Kind> {
    use nix::sys::socket::{SockType, getsockopt, sockopt};
    let dup = match fd {
        0 => std::io::stdin().as_fd().try_clone_to_owned().ok()?,
        _ => std::io::stdout().as_fd().try_clone_to_owned().ok()?,
    };
    let kind = std::fs::File::from(dup.try_clone().ok()?)
        .metadata()
        .ok()?
        .file_type();
    if kind.is_fifo() {
        Some(Kind::Pipe)
    } else if kind.is_socket() && getsockopt(&dup, sockopt::SockType).ok()? == SockType::Stream {
        Some(Kind::Socket(dup))
    } else {
        None
    }
}

/// A stream socket as a tokio stream. A socket cannot be opened again, so
/// its (shared) description becomes non-blocking; should the stream not
/// come about, the description gets its flags back, for tokio's stdin and
/// stdout to use.
fn socket(fd: OwnedFd) -> Option<tokio::net::UnixStream> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL).ok()?);
    fcntl(&fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).ok()?;
    let keep = fd.try_clone();
    let stream = tokio::net::UnixStream::from_std(std::os::unix::net::UnixStream::from(fd));
    match (stream, keep) {
        (Ok(stream), _) => Some(stream),
        (Err(_), Ok(keep)) => {
            let _ = fcntl(&keep, FcntlArg::F_SETFL(flags));
            None
        }
        (Err(_), Err(_)) => None,
    }
}
