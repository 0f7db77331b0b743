//! Sending a request on to the node that holds its session.
//!
//! Interpreter sessions and legacy MCP sessions live in one node's process.
//! The node a balancer picked looks the session up in the shared store and,
//! when another node holds it, relays the request to that node's internal
//! endpoint, streaming the answer back. The internal endpoint takes the
//! deployment's node key (from the store) instead of a client credential,
//! and the principal the first node authenticated.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use cem_auth::{Ability, Principal};
use cem_cluster::Cluster;
use futures_util::TryStreamExt;
use serde_json::{Value, json};

/// Where peers send relayed requests.
pub const INTERNAL_PATH: &str = "/internal/mcp";
/// The deployment's node key, on relayed requests.
pub const NODE_KEY_HEADER: &str = "cem-node-key";
/// The principal the relaying node authenticated.
pub const PRINCIPAL_HEADER: &str = "cem-principal";
/// On every answer of a node with a shared store: which node answered
/// (its id, [`cem_cluster::Cluster::node_id`]).
pub const NODE_HEADER: &str = "cem-node";

/// Request headers a relay passes on (the rest are the hop's own).
const PASSED: &[&str] = &[
    "content-type",
    "accept",
    "mcp-protocol-version",
    "mcp-session-id",
    "mcp-method",
    "mcp-name",
    "last-event-id",
];

/// Relays requests to peers.
#[derive(Debug, Clone)]
pub struct Forwarder {
    client: reqwest::Client,
    pub cluster: Arc<Cluster>,
}

/// Why a relay failed.
pub enum Failed {
    /// The node did not answer: it is gone (or unreachable from here).
    Unreachable(String),
}

impl Forwarder {
    pub fn new(cluster: Arc<Cluster>) -> Self {
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(2))
            .build()
            .unwrap_or_default();
        Self { client, cluster }
    }

    /// Sends the request (`parts`, `body`) of `principal` to `node`.
    pub async fn relay(
        &self,
        node: &str,
        parts: &Parts,
        body: Bytes,
        principal: &Principal,
    ) -> Result<Response, Failed> {
        let url = format!("{node}{INTERNAL_PATH}");
        let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes())
            .unwrap_or(reqwest::Method::POST);
        let mut request = self
            .client
            .request(method, &url)
            .header(NODE_KEY_HEADER, self.cluster.node_key())
            .header(PRINCIPAL_HEADER, encode_principal(principal))
            .body(body);
        for name in PASSED {
            if let Some(v) = parts.headers.get(*name) {
                request = request.header(*name, v.as_bytes());
            }
        }
        let answer = request
            .send()
            .await
            .map_err(|e| Failed::Unreachable(e.to_string()))?;
        let status =
            StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let mut headers = HeaderMap::new();
        for (name, value) in answer.headers() {
            let passed = matches!(
                name.as_str(),
                "content-type"
                    | "mcp-session-id"
                    | "cache-control"
                    | "www-authenticate"
                    | NODE_HEADER
            );
            if passed
                && let (Ok(n), Ok(v)) = (
                    header::HeaderName::from_bytes(name.as_str().as_bytes()),
                    HeaderValue::from_bytes(value.as_bytes()),
                )
            {
                headers.insert(n, v);
            }
        }
        // Streamed: an answer may be an SSE stream that lasts.
        let stream = answer.bytes_stream().map_err(std::io::Error::other);
        let mut response = Response::new(Body::from_stream(stream));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

/// Where a node hands another the sign-in callback (and key page) that
/// node waits for: `<this>/callback` and `<this>/key`.
pub const INTERNAL_SIGNIN_PATH: &str = "/internal/oauth";

impl Forwarder {
    /// Hands a sign-in page's request to `node`, which waits for that
    /// sign-in (the store says so): the callback (`page` "callback") or
    /// the key page (`page` "key", its form posted as `form`). What that
    /// node answers is what the browser gets.
    pub async fn relay_signin(
        &self,
        node: &str,
        page: &str,
        query: &str,
        form: Option<String>,
    ) -> Result<Response, Failed> {
        let url = format!("{node}{INTERNAL_SIGNIN_PATH}/{page}?{query}");
        let request = match form {
            Some(form) => self
                .client
                .post(&url)
                .header(
                    header::CONTENT_TYPE.as_str(),
                    "application/x-www-form-urlencoded",
                )
                .body(form),
            None => self.client.get(&url),
        };
        let answer = request
            .header(NODE_KEY_HEADER, self.cluster.node_key())
            // A code's exchange happens there, within this.
            .timeout(std::time::Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| Failed::Unreachable(e.without_url().to_string()))?;
        let status =
            StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let page = answer
            .bytes()
            .await
            .map_err(|e| Failed::Unreachable(e.without_url().to_string()))?;
        Ok((status, page).into_response())
    }
}

impl Forwarder {
    /// Relays a request for session `id` (of `kind`, of `tenant`) to
    /// `node`, which the store says holds it. When that node is gone, the
    /// record is dropped (the next request starts afresh) and the answer is
    /// `lost()`.
    #[allow(clippy::too_many_arguments)]
    pub async fn relay_held(
        &self,
        node: &str,
        parts: &Parts,
        body: Bytes,
        principal: &Principal,
        kind: cem_cluster::SessionKind,
        tenant: &str,
        id: &str,
        lost: impl FnOnce() -> Response,
    ) -> Response {
        match self.relay(node, parts, body, principal).await {
            Ok(answer) => answer,
            Err(Failed::Unreachable(why)) => {
                let _ = self.cluster.release(kind, tenant, id).await;
                tracing::warn!(%node, session = %id, ?kind, %why, "a session's node is gone");
                lost()
            }
        }
    }
}

/// The principal as the relaying node vouches for it.
fn encode_principal(p: &Principal) -> String {
    let abilities: Vec<&str> = p.abilities().iter().map(|a| a.as_str()).collect();
    let text = json!({"tenant": p.tenant, "name": p.name, "abilities": abilities}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

/// The principal a peer vouched for, if the header is well formed.
pub fn decode_principal(header: &str) -> Option<Principal> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    let tenant = value["tenant"].as_str()?;
    if tenant.is_empty() || tenant.contains(['/', '\\']) || tenant.starts_with('.') {
        return None;
    }
    let abilities: BTreeSet<Ability> = value["abilities"]
        .as_array()?
        .iter()
        .filter_map(|a| a.as_str().and_then(Ability::parse))
        .collect();
    Some(Principal::vouched(
        tenant.to_string(),
        value["name"].as_str()?.to_string(),
        abilities,
    ))
}

/// Whether `given` is the deployment's node key (compared in constant time).
pub fn key_matches(given: &[u8], key: &str) -> bool {
    let key = key.as_bytes();
    given.len() == key.len() && given.iter().zip(key).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// What a JSON-RPC body (a single `execute_code` call) continues that
/// lives in one node's process: an execution paused on an approval
/// question (`requestState`), or an interpreter session (`session_id`).
pub struct Held {
    pub kind: cem_cluster::SessionKind,
    pub id: String,
    /// The JSON-RPC id, to answer in its name.
    pub rpc_id: Value,
}

pub fn held(body: &[u8]) -> Option<Held> {
    let value: Value = serde_json::from_slice(body).ok()?;
    if let Some("tasks/get" | "tasks/cancel" | "tasks/update") = value["method"].as_str() {
        return Some(Held {
            kind: cem_cluster::SessionKind::Task,
            id: value["params"]["taskId"].as_str()?.to_string(),
            rpc_id: value["id"].clone(),
        });
    }
    if value["method"] != "tools/call" || value["params"]["name"] != "execute_code" {
        return None;
    }
    let params = &value["params"];
    let (kind, id) = if let Some(handle) = params["requestState"].as_str() {
        (cem_cluster::SessionKind::Paused, handle)
    } else {
        let id = params["arguments"]["session_id"].as_str()?;
        (cem_cluster::SessionKind::Interpreter, id)
    };
    Some(Held {
        kind,
        id: id.to_string(),
        rpc_id: value["id"].clone(),
    })
}

/// The answer to a call whose session died with its node: a tool error
/// the agent can act on (start again), not a transport error.
/// `node` is shown by its id only (clients do not learn internal
/// addresses); the cause went to the log.
pub fn session_lost(held: &Held, node: &str) -> Response {
    let node = cem_cluster::node_id(node);
    let text = match held.kind {
        cem_cluster::SessionKind::Task => format!(
            "task '{}' was lost: the server node that ran it (node {node}) is gone. \
             Files, skills and personal-data tokens are intact. Run the code again.",
            held.id
        ),
        cem_cluster::SessionKind::Paused => format!(
            "the execution waiting for this answer was lost: the server node that ran it (node {node}) is gone. \
             Files, skills and personal-data tokens are intact. Run the code again."
        ),
        _ => format!(
            "interpreter session '{}' was lost: the server node that held it (node {node}) is gone. \
             Its variables are gone too; files, skills and personal-data tokens are intact. \
             Start again: call execute_code without session_id, or with a new one, and rebuild what you need.",
            held.id
        ),
    };
    let rpc_id = held.rpc_id.clone();
    let body = json!({
        "jsonrpc": "2.0",
        "id": rpc_id,
        "result": {"content": [{"type": "text", "text": text}], "isError": true}
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vouched_principal_survives_the_header_and_nothing_else_passes() {
        let p = Principal::subject("https://idp", "ana", BTreeSet::from([Ability::Execute]));
        let back = decode_principal(&encode_principal(&p));
        assert_eq!(back.as_ref(), Some(&p));
        assert!(back.is_some_and(|b| b.can(Ability::Execute) && !b.can(Ability::SkillsWrite)));
        assert_eq!(decode_principal("not base64 !"), None);
        let sneaky = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(json!({"tenant": "../etc", "name": "x", "abilities": []}).to_string());
        assert_eq!(decode_principal(&sneaky), None);
    }

    #[test]
    fn only_the_exact_node_key_matches() {
        assert!(key_matches(b"k3y", "k3y"));
        assert!(!key_matches(b"k3z", "k3y"));
        assert!(!key_matches(b"k3", "k3y"));
        assert!(!key_matches(b"", "k3y"));
    }

    #[test]
    fn held_state_is_found_in_execute_code_calls_only() {
        let call = |params: Value| {
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}).to_string()
        };
        let session =
            call(json!({"name": "execute_code", "arguments": {"code": "1", "session_id": "s"}}));
        let held = held(session.as_bytes()).map(|h| (h.kind, h.id, h.rpc_id));
        assert_eq!(
            held,
            Some((cem_cluster::SessionKind::Interpreter, "s".into(), json!(9)))
        );
        let retry = call(
            json!({"name": "execute_code", "arguments": {"code": "1", "session_id": "s"}, "requestState": "h1"}),
        );
        assert!(held_kind(&retry) == Some(cem_cluster::SessionKind::Paused));
        assert!(
            held_kind(&call(
                json!({"name": "execute_code", "arguments": {"code": "1"}})
            ))
            .is_none()
        );
        assert!(
            held_kind(&call(
                json!({"name": "read_workspace_file", "arguments": {"session_id": "s"}})
            ))
            .is_none()
        );
        assert!(held_kind("[1, 2]").is_none());
    }

    fn held_kind(body: &str) -> Option<cem_cluster::SessionKind> {
        held(body.as_bytes()).map(|h| h.kind)
    }
}
