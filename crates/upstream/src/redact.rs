//! The config's secrets out of what an upstream hands back: its errors
//! (which may quote a command line or URL), and its results (a server may
//! print its own environment, where its key is).

use std::borrow::Cow;

use cem_config::Redactor;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

use crate::UpstreamError;

/// Removes the credentials from every text of `result` (binary content is
/// left: a base64 image does not carry a key by accident).
pub fn call_result(secrets: &Redactor, result: &mut CallToolResult) {
    if secrets.is_empty() {
        return;
    }
    let clean = |text: &mut String| {
        if let Cow::Owned(c) = secrets.redact_credentials(text) {
            *text = c;
        }
    };
    for block in &mut result.content {
        match block {
            ContentBlock::Text(t) => clean(&mut t.text),
            ContentBlock::Resource(r) => {
                if let ResourceContents::TextResourceContents { text, .. } = &mut r.resource {
                    clean(text);
                }
            }
            _ => {}
        }
    }
    if let Some(structured) = &mut result.structured_content {
        secrets.redact_json(structured);
    }
}

impl UpstreamError {
    /// The same error with every configured value removed from its words.
    pub fn redacted(self, secrets: &Redactor) -> Self {
        let r = |s: String| secrets.redact(&s).into_owned();
        match self {
            UpstreamError::UnknownServer(s) => UpstreamError::UnknownServer(r(s)),
            UpstreamError::Disabled(s) => UpstreamError::Disabled(s),
            UpstreamError::Connect { server, cause } => UpstreamError::Connect {
                server,
                cause: r(cause),
            },
            UpstreamError::Timeout {
                server,
                what,
                seconds,
            } => UpstreamError::Timeout {
                server,
                what: r(what),
                seconds,
            },
            UpstreamError::Call { server, cause } => UpstreamError::Call {
                server,
                cause: r(cause),
            },
            UpstreamError::SignInRequired {
                server,
                challenge,
                step_up,
                why,
            } => UpstreamError::SignInRequired {
                server,
                challenge,
                step_up,
                why: r(why),
            },
        }
    }
}
