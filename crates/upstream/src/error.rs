//! Upstream errors, always naming the server.

#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("no upstream server named '{0}'; list_tool_categories shows the configured ones")]
    UnknownServer(String),
    #[error("upstream server '{0}' is disabled in the config")]
    Disabled(String),
    #[error("upstream server '{server}' could not be started or reached: {cause}")]
    Connect { server: String, cause: String },
    #[error("upstream server '{server}' did not answer {what} within {seconds} s")]
    Timeout {
        server: String,
        what: String,
        seconds: u64,
    },
    #[error("upstream server '{server}' failed: {cause}")]
    Call { server: String, cause: String },
}

impl UpstreamError {
    pub fn server(&self) -> &str {
        match self {
            UpstreamError::UnknownServer(s) | UpstreamError::Disabled(s) => s,
            UpstreamError::Connect { server, .. }
            | UpstreamError::Timeout { server, .. }
            | UpstreamError::Call { server, .. } => server,
        }
    }
}
