//! MCP logging: the server's warnings about a request sent to its client as
//! `notifications/message` before the answer (a store that could not be
//! updated, an upstream server that is unavailable), to clients that opted
//! in: by `logging/setLevel` on a session (before 2026-07-28), or by the
//! request's `io.modelcontextprotocol/logLevel` (2026-07-28, which
//! deprecates logging, SEP-2577, but keeps this opt-in). Without one,
//! nothing is sent.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::Peer;
use serde_json::{Value, json};

/// A session's level (`logging/setLevel`): messages below it are not sent;
/// None until the client sets one.
#[derive(Debug, Clone, Default)]
pub struct LogLevel(Arc<Mutex<Option<LoggingLevel>>>);

impl LogLevel {
    pub fn set(&self, level: LoggingLevel) {
        if let Ok(mut mine) = self.0.lock() {
            *mine = Some(level);
        }
    }

    /// Whether a message at `level` goes out, for a request that asked for
    /// `requested` (its `_meta`), else at the session's level.
    fn allows(&self, requested: Option<LoggingLevel>, level: LoggingLevel) -> bool {
        let session = self.0.lock().ok().and_then(|l| *l);
        requested
            .or(session)
            .is_some_and(|min| rank(level) >= rank(min))
    }

    /// Sends each warning `body` (a tool's answer) carries to the client,
    /// as the `tool`'s: `store_warning`, and each server `unavailable`.
    /// `clean` makes a text fit for the client (credentials removed).
    pub async fn warn_about(
        &self,
        requested: Option<LoggingLevel>,
        peer: &Peer<RoleServer>,
        tool: &str,
        body: &Value,
        clean: impl Fn(&str) -> String,
    ) {
        if !self.allows(requested, LoggingLevel::Warning) {
            return;
        }
        let mut warnings: Vec<String> = Vec::new();
        if let Some(w) = body["store_warning"].as_str() {
            warnings.push(w.to_string());
        }
        for u in body["unavailable"].as_array().into_iter().flatten() {
            warnings.push(format!(
                "upstream server {} is unavailable: {}",
                u["server"].as_str().unwrap_or("?"),
                u["error"].as_str().unwrap_or("?")
            ));
        }
        for warning in warnings {
            let message = LoggingMessageNotificationParam::new(
                LoggingLevel::Warning,
                json!({"tool": tool, "message": clean(&warning)}),
            )
            .with_logger("code-execution-mcp");
            // A client that went away misses it; the answer says it too.
            let _ = peer.notify_logging_message(message).await;
        }
    }
}

/// The syslog order of MCP's levels.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
