//! MCP over stdin/stdout.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::sync::Arc;

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use crate::{AppState, McpHandler, ServeError};

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
/// are pipes or sockets (how every MCP client starts a server): tokio's own
/// stdin and stdout do each read and write on a blocking thread, two
/// hand-offs per message that cost more than the message. Anything else (a
/// terminal, a file) goes through tokio's, which works with any descriptor.
fn streams() -> (Reader, Writer) {
    let reader = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(reader_in_place);
    let writer = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(writer_in_place);
    (
        reader.unwrap_or_else(|| Box::new(tokio::io::stdin())),
        writer.unwrap_or_else(|| Box::new(tokio::io::stdout())),
    )
}

/// A pipe or socket read in place (made non-blocking, as the reactor
/// needs); None for anything else.
fn reader_in_place(fd: OwnedFd) -> Option<Reader> {
    let kind = std::fs::File::from(fd.try_clone().ok()?)
        .metadata()
        .ok()?
        .file_type();
    if kind.is_fifo() {
        let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok()?;
        Some(Box::new(pipe))
    } else if kind.is_socket() {
        Some(Box::new(socket(fd)?))
    } else {
        None
    }
}

/// A pipe or socket written in place; None for anything else.
fn writer_in_place(fd: OwnedFd) -> Option<Writer> {
    let kind = std::fs::File::from(fd.try_clone().ok()?)
        .metadata()
        .ok()?
        .file_type();
    if kind.is_fifo() {
        let pipe = tokio::net::unix::pipe::Sender::from_owned_fd(fd).ok()?;
        Some(Box::new(pipe))
    } else if kind.is_socket() {
        Some(Box::new(socket(fd)?))
    } else {
        None
    }
}

/// A stream socket as a tokio stream (any other socket is left to tokio's
/// stdin and stdout).
fn socket(fd: OwnedFd) -> Option<tokio::net::UnixStream> {
    use nix::sys::socket::{SockType, getsockopt, sockopt};
    if getsockopt(&fd, sockopt::SockType).ok()? != SockType::Stream {
        return None;
    }
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(stream).ok()
}
