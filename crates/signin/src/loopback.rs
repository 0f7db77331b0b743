//! The browser's way back for stdio and the CLI (RFC 8252): a listener of
//! its own on 127.0.0.1, for one sign-in, that ends with it.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::pending::Pending;

/// The longest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// How long one connection may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Loopback {
    listener: TcpListener,
    port: u16,
}

impl Loopback {
    pub async fn bind() -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        Ok(Self { listener, port })
    }

    pub fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}/oauth/callback", self.port)
    }

    /// Answers callbacks until one ends a sign-in or `timeout` passes.
    pub fn serve(self, pending: Pending, timeout: Duration) {
        tokio::spawn(async move {
            let until = tokio::time::Instant::now() + timeout;
            loop {
                let accepted = tokio::time::timeout_at(until, self.listener.accept()).await;
                let Ok(Ok((stream, _))) = accepted else {
                    return;
                };
                if answer(stream, &pending).await {
                    return;
                }
            }
        });
    }
}

/// Answers one connection; true when it ended the sign-in.
async fn answer(mut stream: TcpStream, pending: &Pending) -> bool {
    let Ok(Ok(Some(target))) = tokio::time::timeout(READ_TIMEOUT, read_target(&mut stream)).await
    else {
        return false;
    };
    let Some(query) = target.strip_prefix("/oauth/callback?") else {
        let _ = stream
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
        return false;
    };
    let result = pending.complete(query).await;
    let ended = !matches!(result, Err(crate::SignInError::UnknownState));
    let page = crate::page::callback_page(&result);
    let head = format!(
        "HTTP/1.1 {}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\n\
         cache-control: no-store\r\nreferrer-policy: no-referrer\r\nconnection: close\r\n\r\n",
        if result.is_ok() {
            "200 OK"
        } else {
            "400 Bad Request"
        },
        page.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(page.as_bytes()).await;
    ended
}

/// The request target of a `GET`, once its head has arrived.
async fn read_target(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let mut line = head.lines().next().unwrap_or("").split(' ');
    match (line.next(), line.next()) {
        (Some("GET"), Some(target)) => Ok(Some(target.to_string())),
        _ => Ok(None),
    }
}
