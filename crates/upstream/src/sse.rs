//! The legacy HTTP+SSE transport (protocol 2024-11-05), client side.
//!
//! The client opens a `text/event-stream` GET; the server's first event,
//! `endpoint`, names the URL to POST JSON-RPC messages to; replies arrive as
//! `message` events on the stream. rmcp no longer ships this client, and
//! many deployed servers still speak only this.

use std::collections::BTreeMap;
use std::time::Duration;

use cem_config::Secret;
use futures::StreamExt;
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;

/// Longest SSE event accepted (a tool list can be large, not unbounded).
const MAX_EVENT: usize = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("{0}")]
    Http(String),
    #[error("the SSE stream closed before it named its POST endpoint")]
    NoEndpoint,
    #[error("the SSE server sent an endpoint on another origin ({0}); refused")]
    ForeignEndpoint(String),
    /// A `401`, or a `403` with a Bearer challenge: it wants a sign-in.
    #[error("GET {url} answered {status}: it asks for sign-in")]
    Challenge {
        url: String,
        status: u16,
        www_authenticate: String,
    },
}

pub struct SseTransport {
    client: reqwest::Client,
    headers: reqwest::header::HeaderMap,
    endpoint: url::Url,
    rx: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    reader: tokio::task::JoinHandle<()>,
}

impl SseTransport {
    /// Opens the stream and waits (up to `timeout`) for the endpoint event.
    pub async fn connect(
        url: &url::Url,
        headers: &BTreeMap<String, Secret>,
        credential: Option<(String, String)>,
        timeout: Duration,
    ) -> Result<Self, SseError> {
        let mut header_map = reqwest::header::HeaderMap::new();
        let credential = credential.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (k, v) in headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .chain(credential)
        {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| SseError::Http(format!("header {k}: {e}")))?;
            let value = reqwest::header::HeaderValue::from_str(v)
                .map_err(|_| SseError::Http(format!("header {k} has an invalid value")))?;
            header_map.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(timeout)
            .build()
            .map_err(|e| SseError::Http(e.to_string()))?;
        let response = tokio::time::timeout(
            timeout,
            client
                .get(url.clone())
                .headers(header_map.clone())
                .header("Accept", "text/event-stream")
                .send(),
        )
        .await
        .map_err(|_| {
            SseError::Http(format!(
                "no answer from {url} within {} s",
                timeout.as_secs()
            ))
        })?
        .map_err(|e| SseError::Http(e.to_string()))?;
        let status = response.status().as_u16();
        let challenge = response
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .filter(|v| v.trim_start().to_ascii_lowercase().starts_with("bearer"));
        if let Some(challenge) = challenge
            && (status == 401 || status == 403)
        {
            return Err(SseError::Challenge {
                url: url.to_string(),
                status,
                www_authenticate: challenge.to_string(),
            });
        }
        if !response.status().is_success() {
            return Err(SseError::Http(format!(
                "GET {url} answered {}",
                response.status()
            )));
        }
        let (tx, rx) = mpsc::channel(256);
        let (endpoint_tx, endpoint_rx) = tokio::sync::oneshot::channel();
        let base = url.clone();
        let reader = tokio::spawn(read_events(response, base, tx, endpoint_tx));
        let endpoint = tokio::time::timeout(timeout, endpoint_rx)
            .await
            .map_err(|_| SseError::NoEndpoint)?
            .map_err(|_| SseError::NoEndpoint)??;
        Ok(SseTransport {
            client,
            headers: header_map,
            endpoint,
            rx,
            reader,
        })
    }
}

async fn read_events(
    response: reqwest::Response,
    base: url::Url,
    tx: mpsc::Sender<RxJsonRpcMessage<RoleClient>>,
    endpoint_tx: tokio::sync::oneshot::Sender<Result<url::Url, SseError>>,
) {
    let mut endpoint_tx = Some(endpoint_tx);
    let mut stream = response.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { break };
        buf.extend_from_slice(&chunk);
        if buf.len() > MAX_EVENT {
            tracing::warn!("SSE event over {MAX_EVENT} bytes; closing the stream");
            break;
        }
        while let Some((end, sep)) = find_event_end(&buf) {
            let block: Vec<u8> = buf.drain(..end + sep).collect();
            let text = String::from_utf8_lossy(&block[..end]);
            let (event, data) = parse_event(&text);
            match event.as_str() {
                "endpoint" => {
                    let resolved = base
                        .join(data.trim())
                        .map_err(|e| SseError::Http(e.to_string()))
                        .and_then(|u| {
                            if u.origin() == base.origin() {
                                Ok(u)
                            } else {
                                Err(SseError::ForeignEndpoint(u.to_string()))
                            }
                        });
                    if let Some(sender) = endpoint_tx.take() {
                        let _ = sender.send(resolved);
                    }
                }
                "message" => match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&data) {
                    Ok(msg) => {
                        if tx.send(msg).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "SSE server sent a message that is not JSON-RPC; ignored")
                    }
                },
                _ => {}
            }
        }
    }
}

/// The end of the first complete event in `buf` and its separator length.
fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// (event type, data) of one SSE event block.
fn parse_event(block: &str) -> (String, String) {
    let mut event = "message".to_string();
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    (event, data.join("\n"))
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let request = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .json(&item);
        async move {
            let response = request
                .send()
                .await
                .map_err(|e| SseError::Http(e.to_string()))?;
            if response.status().is_success() {
                Ok(())
            } else {
                Err(SseError::Http(format!(
                    "POST answered {}",
                    response.status()
                )))
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.rx.recv()
    }

    async fn close(&mut self) -> Result<(), SseError> {
        self.reader.abort();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_across_line_endings() {
        assert_eq!(
            find_event_end(b"event: endpoint\ndata: /m?s=1\n\nrest"),
            Some((28, 2))
        );
        assert_eq!(find_event_end(b"data: x\r\n\r\n"), Some((7, 4)));
        assert_eq!(find_event_end(b"data: partial\n"), None);
        assert_eq!(
            parse_event("event: endpoint\ndata: /messages?id=1"),
            ("endpoint".into(), "/messages?id=1".into())
        );
        assert_eq!(
            parse_event("data: {\"a\":\ndata: 1}"),
            ("message".into(), "{\"a\":\n1}".into())
        );
    }
}
