//! The HTTP transport's checks on what a client sends to `/mcp`, on an
//! arbitrary request written as text:
//!
//! ```text
//! POST                                  <- the method
//! Host: localhost:8080                  <- headers, one a line
//! MCP-Protocol-Version: 2025-06-18
//!                                       <- an empty line
//! {"jsonrpc": "2.0", ...}               <- the body
//! ```
//!
//! Our guard's own checks (`cem_server::check_body`: one JSON-RPC message,
//! no batch, the scope a tools/call needs, the session a stateless call
//! continues; `cem_server::vouched_principal` on a `cem-principal` header),
//! then rmcp's transport as the server configures it
//! (`cem_server::transport_config`): the Host and Origin allow-lists
//! (DNS-rebinding protection), `MCP-Protocol-Version`, `Mcp-Method` and
//! `Mcp-Name` against the body, JSON-RPC parsing and session handling.
//! Nothing may panic; a batch is never let through; a request whose Host
//! or Origin is not a loopback one is never served.

#![no_main]

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use cem_auth::{Ability, Principal};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request};
use http_body_util::Full;
use libfuzzer_sys::fuzz_target;
use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

/// A server with no tools of its own: the transport's checks come first.
#[derive(Clone)]
struct Handler;

impl ServerHandler for Handler {}

/// The request the input describes: method, headers, body.
fn request(data: &[u8]) -> Option<(Method, HeaderMap, Bytes)> {
    let mut rest = data;
    let mut line = || {
        let end = rest.iter().position(|b| *b == b'\n')?;
        let (line, after) = rest.split_at(end);
        rest = &after[1..];
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    };
    let method = Method::from_bytes(line()?).ok()?;
    let mut headers = HeaderMap::new();
    loop {
        let header = line()?;
        if header.is_empty() {
            break;
        }
        let colon = header.iter().position(|b| *b == b':')?;
        let name = HeaderName::from_bytes(&header[..colon]).ok()?;
        let value = header[colon + 1..].trim_ascii_start();
        headers.append(name, HeaderValue::from_bytes(value).ok()?);
    }
    Some((method, headers, Bytes::copy_from_slice(rest)))
}

/// Whether `value` names a loopback host, as a person reads it.
fn loopback(value: &HeaderValue) -> bool {
    let text = String::from_utf8_lossy(value.as_bytes()).to_ascii_lowercase();
    ["localhost", "127.0.0.1", "::1"]
        .iter()
        .any(|name| text.contains(name))
}

fuzz_target!(|data: &[u8]| {
    let Some((method, headers, body)) = request(data) else {
        return;
    };

    // The guard's checks, for a principal with every ability, one that
    // may only read, and one that may do nothing.
    let principals = [
        Principal::local(),
        Principal::subject("fuzz", "reader", BTreeSet::from([Ability::ToolsRead])),
        Principal::subject("fuzz", "nobody", BTreeSet::new()),
    ];
    for principal in &principals {
        let checked = cem_server::check_body(&body, principal);
        let batch = serde_json::from_slice::<serde_json::Value>(&body).is_ok_and(|v| v.is_array());
        match &checked.message {
            Ok(message) => assert!(!message.is_array() && !batch, "a batch got through"),
            Err((code, _)) => {
                assert!(*code == -32700 || *code == -32600, "code {code}");
                assert!(checked.missing.is_none());
            }
        }
        if let Some(missing) = checked.missing {
            assert!(!principal.can(missing), "{principal:?} refused {missing:?}");
        }
    }
    if let Some(header) = headers.get("cem-principal").and_then(|v| v.to_str().ok()) {
        let _ = cem_server::vouched_principal(header);
    }

    // rmcp's transport with the server's settings, a fresh one each time
    // (sessions an initialize opens end with its runtime).
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let status = runtime.block_on(async {
        let cancel = CancellationToken::new();
        let config = cem_server::transport_config(Vec::new(), Vec::new(), 4 << 20, cancel.clone());
        let service = StreamableHttpService::new(
            || Ok(Handler),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let mut builder = Request::builder().method(method).uri("/mcp");
        for (name, value) in &headers {
            builder = builder.header(name, value);
        }
        let Ok(request) = builder.body(Full::new(body.clone())) else {
            return None;
        };
        let response = service.handle(request).await;
        cancel.cancel();
        Some(response.status())
    });
    drop(runtime);
    let Some(status) = status else {
        return;
    };
    let served = status.is_success();
    let host_ok = headers.get(http::header::HOST).is_some_and(loopback);
    assert!(
        !served || host_ok,
        "served with Host {:?}: {status}",
        headers.get(http::header::HOST)
    );
    if let Some(origin) = headers.get(http::header::ORIGIN) {
        assert!(
            !served || loopback(origin),
            "served with Origin {origin:?}: {status}"
        );
    }
});
